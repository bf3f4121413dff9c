/* commit.h - binding versions to state ids: on a receiver, and in a store.
 *
 * Receiver (.dcr/ beside the state cache, see receiver.h):
 *   .dcr/HEAD      "dcr-head 1\nversion V\nstate HEX\n": the committed version
 *   .dcr/applied   "dcr-applied 1\nbase HEX\ntarget HEX\nattempt HEX\nversion V|-\n":
 *                  what the last successful dcr-apply reached (not yet committed)
 *   .dcr/commits   one line per commit: "V<TAB>STATE<TAB>ATTEMPT<TAB>TIME\n"
 * Every file but commits is replaced atomically (temp, fsync, rename, fsync
 * dir); commits is appended and fsync'd after HEAD moved, and repaired from
 * HEAD when a crash came between the two.
 *
 * Store, for a policy NAME (see dcr(7), COMMIT PROTOCOL):
 *   NAME/vV/...            the pack that turns version V-1 into V (dcr-push)
 *   NAME/acks/vV/ID        "dcr-ack 1\nversion V\nstate HEX\nreceiver ID\n"
 *   NAME/refs/vV           "dcr-ref 1\nversion V\nstate HEX\ncommitter NONCE\n", created
 *                          once with put_if_absent, only when refs/v(V-1)
 *                          exists (or V = 0): the committed chain.
 *   NAME/dense/...         dense copies (dcr-push --dense), see transfer.h
 */
#ifndef DCR_COMMIT_H
#define DCR_COMMIT_H

#include "receiver.h"
#include "store.h"

struct dcr_head {
	int have;
	uint64_t version;
	dcr_digest state;
};

struct dcr_applied {
	int have;
	dcr_digest base, target;
	uint8_t attempt[16];
	int have_version;
	uint64_t version;
};

int dcr_head_read(struct dcr_receiver *rc, struct dcr_head *h, struct dcr_err *e);
int dcr_applied_read(struct dcr_receiver *rc, struct dcr_applied *a, struct dcr_err *e);
/* Record what an apply reached (after it succeeded, or found the receiver
 * already at the target). fault_at as in dcr_apply_opts. */
int dcr_applied_write(struct dcr_receiver *rc, const struct dcr_applied *a, int fault_at,
		      struct dcr_err *e);

struct dcr_commit_opts {
	int fault_at;     /* DCR_FAULT_AT: SIGKILL at the Nth durable step */
	int have_version; /* commit this version (else the one dcr-apply recorded) */
	uint64_t version;
	int full;         /* re-hash every tensor instead of trusting the state cache */
};

struct dcr_commit_result {
	uint64_t version;
	dcr_digest state;
	uint8_t attempt[16];
	int already; /* HEAD already named this version and state */
	int steps;   /* durable steps taken (for fault injection after it) */
};

/* Advance HEAD to the applied target, only if the files hold exactly that
 * state now. DCR_EBASE (and nothing changed) when they do not, or when the
 * version would not move forward: it must exceed HEAD's, or equal it when the
 * applied delta started from HEAD's state (a new attempt of that version). */
int dcr_commit_local(struct dcr_receiver *rc, const struct dcr_commit_opts *o,
		     struct dcr_commit_result *res, struct dcr_err *e);

/* One line of .dcr/commits, parsed. */
struct dcr_commit_entry {
	uint64_t version;
	dcr_digest state;
	uint8_t attempt[16];
	long long time;
};
/* All commits, oldest first; free *v with free(). */
int dcr_commit_log(struct dcr_receiver *rc, struct dcr_commit_entry **v, size_t *n,
		   struct dcr_err *e);

/* ---- the store side ---- */

/* Acknowledge: this receiver holds version V with state (plain put, replaced
 * by a later acknowledgement of the same version). */
int dcr_ack_put(struct dcr_store *s, const char *policy, uint64_t version, const char *receiver,
		const dcr_digest *state, struct dcr_err *e);

struct dcr_ack {
	char *receiver;
	uint64_t version;
	dcr_digest state;
};
/* Acknowledgements of one version (version = UINT64_MAX: of all versions). */
int dcr_acks_list(struct dcr_store *s, const char *policy, uint64_t version,
		  struct dcr_ack **v, size_t *n, struct dcr_err *e);
void dcr_acks_free(struct dcr_ack *v, size_t n);

/* The committed head: the highest refs/vV (have = 0 when there is none). */
int dcr_policy_head(struct dcr_store *s, const char *policy, struct dcr_head *h,
		    struct dcr_err *e);
/* The state committed for version V (DCR_ENOTFOUND if none). */
int dcr_policy_ref(struct dcr_store *s, const char *policy, uint64_t version, dcr_digest *state,
		   struct dcr_err *e);

struct dcr_policy_commit_opts {
	uint64_t version;
	dcr_digest state;
	unsigned expect;   /* acknowledgements naming state that must exist */
	double timeout_s;  /* wait this long for them (0: look once) */
	int fault_at;
};
/* Wait for the acknowledgements, then create refs/vV with compare-and-set.
 * DCR_ECONFLICT when V is already committed (by anyone: e names its state)
 * or V-1 is not; DCR_ENOTFOUND when the acknowledgements did not come. */
int dcr_policy_commit(struct dcr_store *s, const char *policy,
		      const struct dcr_policy_commit_opts *o, unsigned *acks_seen,
		      struct dcr_err *e);

/* Remove packs NAME/vX/ with X <= every receiver's latest acknowledged
 * version and X <= head - keep, and acknowledgements older than those.
 * *removed gets the number of versions removed. */
int dcr_policy_gc(struct dcr_store *s, const char *policy, uint64_t keep, int dry_run,
		  void (*cb)(void *ctx, uint64_t version, size_t objects), void *ctx,
		  uint64_t *removed, struct dcr_err *e);

/* "v42" -> 42; 0 if name is "vN" (decimal, no sign, no leading zeros but "v0"). */
int dcr_version_parse(const char *s, size_t n, uint64_t *v);

#endif
