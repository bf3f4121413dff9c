/* policy.h - binding versions to state ids in a store, for a policy.
 *
 * For a policy NAME (see dcr(7), COMMIT PROTOCOL):
 *   NAME/vV/...            the pack that turns version V-1 into V (dcr-push)
 *   NAME/acks/vV/ID        "dcr-ack 1\nversion V\nstate HEX\nreceiver ID\n"
 *   NAME/refs/vV           "dcr-ref 1\nversion V\nstate HEX\ncommitter NONCE\n", created
 *                          once with put_if_absent, only when refs/v(V-1)
 *                          exists (or V = 0): the committed chain.
 *   NAME/vV.dense/...      a dense copy of version V, beside its delta: pushed as
 *                          the pack STORE/NAME/vV.dense (dcr-diff --dense NEW |
 *                          dcr-pack | dcr-push - STORE/NAME/vV.dense), fetched by
 *                          dcr-pull --dense STORE/NAME/vV; dcr_policy_gc leaves it
 */
#ifndef DCR_REFIT_POLICY_H
#define DCR_REFIT_POLICY_H

#include "core/fault.h"
#include "refit/commit.h"
#include "transport/store.h"

/* 0 if policy is a usable policy name: one object-name component. */
int dcr_policy_check_name(const char *policy, struct dcr_err *e);

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
	struct dcr_fault *fault; /* fault points (core/fault.h) */
};
/* Wait for the acknowledgements, then create refs/vV with compare-and-set.
 * DCR_ECONFLICT when V is already committed (by anyone: e names its state)
 * or V-1 is not; DCR_ENOTFOUND when the acknowledgements did not come. */
int dcr_policy_commit(struct dcr_store *s, const char *policy,
		      const struct dcr_policy_commit_opts *o, unsigned *acks_seen,
		      struct dcr_err *e);

/* The state the pack NAME/vV in the store reaches: its manifest's target.
 * DCR_ENOTFOUND (e says so, and that --state would do) when the store has
 * no such pack. */
int dcr_policy_target(struct dcr_store *s, const char *policy, uint64_t version,
		      dcr_digest *state, struct dcr_err *e);

/* A receiver's whole side of the commit: dcr_commit_local, then (a fault
 * point) the acknowledgement of the committed version and state in s as
 * receiver ID. With s NULL, the local commit alone. The receiver ID is
 * checked before anything changes. Errors as dcr_commit_local's, and the
 * store's. */
int dcr_commit_receiver(struct dcr_receiver *rc, struct dcr_store *s, const char *policy,
			const char *receiver, const struct dcr_commit_opts *o,
			struct dcr_commit_result *res, struct dcr_err *e);

/* Remove packs NAME/vX/ with X <= every receiver's latest acknowledged
 * version and X <= head - keep, and acknowledgements older than those.
 * *removed gets the number of versions removed. */
int dcr_policy_gc(struct dcr_store *s, const char *policy, uint64_t keep, int dry_run,
		  void (*cb)(void *ctx, uint64_t version, size_t objects), void *ctx,
		  uint64_t *removed, struct dcr_err *e);

#endif
