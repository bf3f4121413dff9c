/* commit.h - binding versions to state ids on a receiver.
 *
 * Receiver (.dcr/ beside the state cache, see receiver.h):
 *   .dcr/HEAD      "dcr-head 2\nversion V\nstate HEX\n": the committed version
 *   .dcr/applied   "dcr-applied 2\nbase HEX\ntarget HEX\nattempt HEX\nversion V|-\n":
 *                  what the last successful dcr-apply reached (not yet committed)
 *   .dcr/commits   one line per commit: "V<TAB>STATE<TAB>ATTEMPT<TAB>TIME\n"
 *   .dcr/policy    "dcr-policy 1\npolicy NAME\n": the policy the receiver
 *                  follows, from its first signed pack that names one (or
 *                  dcr-apply --policy): a signed pack of another is refused
 * Every file but commits is replaced atomically (temp, fsync, rename, fsync
 * dir); commits is appended and fsync'd after HEAD moved, and repaired from
 * HEAD when a crash came between the two.
 *
 */
#ifndef DCR_REFIT_COMMIT_H
#define DCR_REFIT_COMMIT_H

#include "core/fault.h"
#include "refit/receiver.h"

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
 * already at the target); each durable step is a fault point. */
int dcr_applied_write(struct dcr_receiver *rc, const struct dcr_applied *a,
		      struct dcr_fault *fault, struct dcr_err *e);

/* Record what an apply reached (res), and the version it reaches when
 * known: what dcr_apply and dcr_apply_pack do last. An apply that found the
 * receiver already at its target keeps the base and version of the record
 * that got it there. */
struct dcr_apply_result;
int dcr_applied_record(struct dcr_receiver *rc, const struct dcr_apply_result *res,
		       int have_version, uint64_t version, struct dcr_fault *fault,
		       struct dcr_err *e);

/* The policy the receiver follows (.dcr/policy) into out (at most n - 1
 * bytes), "" where none is recorded; 0, else an error. */
int dcr_policy_read(struct dcr_receiver *rc, char *out, size_t n, struct dcr_err *e);
/* Record policy (a manifest's: printable, no blank, no '/') as the one the
 * receiver follows; atomically, as HEAD. */
int dcr_policy_write(struct dcr_receiver *rc, const char *policy, struct dcr_err *e);

struct dcr_commit_opts {
	struct dcr_fault *fault; /* fault points (core/fault.h) */
	int have_version; /* commit this version (else the one dcr-apply recorded,
			     else HEAD's + 1) */
	uint64_t version;
	int full;         /* re-hash every tensor instead of trusting the state cache */
	/* with full: told the bytes hashed, as dcr_ckpt_digests_progress
	 * tells them (NULL: nothing told) */
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
};

struct dcr_commit_result {
	uint64_t version;
	dcr_digest state;
	uint8_t attempt[16];
	int already; /* HEAD already named this version and state */
	int from_head; /* no version was named or recorded: HEAD's + 1 (1 with
			  no HEAD), or HEAD's when HEAD already holds the state */
};

/* Advance HEAD to the applied target, only if the files hold exactly that
 * state now. DCR_EBASE (and nothing changed) when they do not, or when the
 * version would not move forward: it must exceed HEAD's, or equal it when the
 * applied delta started from HEAD's state (a new attempt of that version).
 * The version is o's, else the one the apply recorded (from the delta's or
 * pack's name), else HEAD's + 1 (1 on a receiver with no HEAD) and
 * res->from_head says so; a HEAD that already names the applied state is
 * then kept (a rerun commits nothing new). */
int dcr_commit_local(struct dcr_receiver *rc, const struct dcr_commit_opts *o,
		     struct dcr_commit_result *res, struct dcr_err *e);

/* Where a receiver stands: HEAD, the last apply, and what waits. */
struct dcr_commit_status {
	struct dcr_head head;
	struct dcr_applied applied;
	int journal;     /* an interrupted apply waits for dcr_apply_recover */
	int uncommitted; /* an applied state HEAD does not name yet */
};
int dcr_commit_status(struct dcr_receiver *rc, struct dcr_commit_status *st, struct dcr_err *e);

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

#endif
