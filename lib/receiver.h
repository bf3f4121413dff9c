/* receiver.h - a receiver: a checkpoint directory and its .dcr/ state.
 *
 *   .dcr/lock      flock(2) held by whoever changes the receiver
 *   .dcr/state     cache of the on-disk state: state id, per-file stat, per-tensor digests
 *   .dcr/journal   committed redo journal (a delta of overwrites), replayed on recovery
 *   .dcr/stage/    files being rebuilt when tensors are added, removed or reshaped
 *   .dcr/incoming  the delta being received
 *   .dcr/log       one line per event
 */
#ifndef DCR_RECEIVER_H
#define DCR_RECEIVER_H

#include "delta.h"

struct dcr_receiver {
	char *dir;   /* checkpoint directory */
	char *sdir;  /* dir/.dcr */
	int lock_fd;
};

int dcr_receiver_open(const char *dir, int lock, struct dcr_receiver **out, struct dcr_err *e);
void dcr_receiver_close(struct dcr_receiver *rc);
char *dcr_receiver_path(const struct dcr_receiver *rc, const char *name);

/* The current state of the files: from .dcr/state when its stat data still
 * matches, else by hashing everything (and refreshing the cache when
 * `refresh`). per_tensor, if non-NULL, gets a malloc'd array in c's order. */
int dcr_receiver_state(struct dcr_receiver *rc, const struct dcr_ckpt *c, int refresh,
		       dcr_digest *id, dcr_digest **per_tensor, int *from_cache,
		       struct dcr_err *e);
/* Only the cache: 0 and the state if .dcr/state still describes c's files
 * (dg: c->ntensors digests), else -1. Needs no lock. */
int dcr_receiver_cached_state(struct dcr_receiver *rc, const struct dcr_ckpt *c,
			      dcr_digest *id, dcr_digest *dg);
int dcr_receiver_save_state(struct dcr_receiver *rc, const struct dcr_ckpt *c,
			    const dcr_digest *id, const dcr_digest *dg, struct dcr_err *e);
void dcr_receiver_drop_state(struct dcr_receiver *rc);
void dcr_receiver_log(struct dcr_receiver *rc, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

struct dcr_apply_opts {
	/* Fault injection for tests: when DCR_FAULT_AT=N is set, the Nth
	 * durable step (each write, rename and fsync) exits the process. */
	int fault_at;
	/* The receiver's committed state (.dcr/HEAD), or NULL: a delta must name
	 * it as its base or one of its alternative bases. */
	const dcr_digest *head;
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
	const char *what;
};

struct dcr_apply_result {
	dcr_digest base, target; /* base: the receiver's state before, one of the delta's bases */
	uint8_t attempt[16];
	uint64_t changes, items, tensors_checked;
	int already;    /* receiver was already at the target */
	int recovered;  /* a journal from an interrupted run was replayed */
};

/* Apply a delta stream to the receiver. */
int dcr_apply(struct dcr_receiver *rc, struct dcr_source src, const uint8_t *head,
	      size_t head_len, const struct dcr_apply_opts *o, struct dcr_apply_result *res,
	      struct dcr_err *e);
/* Apply a pack (payloads then a manifest) read from in. Payloads are
 * checked and resolved as they arrive; nothing is written before the
 * manifest has accounted for every payload. */
struct dcr_pack_in;
int dcr_apply_pack(struct dcr_receiver *rc, struct dcr_pack_in *in,
		   const struct dcr_apply_opts *o, struct dcr_apply_result *res,
		   struct dcr_err *e);
/* Replay a committed journal if one exists (1 if it did). */
int dcr_apply_recover(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
		      struct dcr_err *e);

#endif
