/* receiver.h - a receiver: a checkpoint directory and its .dcr/ state.
 *
 *   .dcr/lock      flock(2) held by whoever changes the receiver (exclusive),
 *                  and by readers that must not see an apply midway (shared)
 *   .dcr/state     cache of the on-disk state: state id, per-file stat, per-tensor digests
 *   .dcr/journal   committed redo journal (a delta of overwrites), replayed on recovery
 *   .dcr/stage/    files being rebuilt when tensors are added, removed or reshaped
 *   .dcr/incoming  the delta being received through a pipe
 *   .dcr/log       one line per event
 */
#ifndef DCR_REFIT_RECEIVER_H
#define DCR_REFIT_RECEIVER_H

#include "core/checkpoint.h"
#include "core/digest.h"

struct dcr_receiver {
	char *dir;   /* checkpoint directory */
	char *sdir;  /* dir/.dcr */
	int lock_fd;
	int threads; /* threads that hash its tensors (0, the default: every core) */
};

/* lock: 0 none; DCR_RECEIVER_LOCK (1) the exclusive lock whoever changes
 * the receiver holds (.dcr/ created if need be); DCR_RECEIVER_SHARED a
 * reader's shared lock, so that no apply runs while it reads (an absent
 * .dcr/ is fine: nothing applies there). Either is DCR_ELOCKED when the
 * other is held. */
enum { DCR_RECEIVER_LOCK = 1, DCR_RECEIVER_SHARED = 2 };
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

#endif
