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
 *                          dcr-pull --dense STORE/NAME/vV; dcr_policy_gc removes it once a
 *                          newer one of a committed version is complete
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
	char *error; /* a failure report (dcr_nack_put): why, as the store has
			it (text from the store: quote it to show it); NULL for
			an acknowledgement */
	uint8_t attempt[16]; /* a report's: the attempt that failed */
	int have_attempt;
};
/* A receiver gave up on version V: tell the trainer why, in the place of
 * its acknowledgement (NAME/acks/vV/ID: "dcr-nack 1\nversion V\nreceiver
 * ID\n[attempt HEX\n]error TEXT\n"), which a later acknowledgement
 * replaces. attempt: the attempt of V that failed (the pack's manifest
 * names it), or NULL when the receiver never saw the manifest. error is
 * cut to DCR_NACK_MAX bytes, a control character or a byte that is not
 * printable ASCII becoming '?'. */
#define DCR_NACK_MAX 1000
int dcr_nack_put(struct dcr_store *s, const char *policy, uint64_t version, const char *receiver,
		 const uint8_t *attempt, const char *error, struct dcr_err *e);

/* Acknowledgements and failure reports of one version (version =
 * UINT64_MAX: of all versions). */
int dcr_acks_list(struct dcr_store *s, const char *policy, uint64_t version,
		  struct dcr_ack **v, size_t *n, struct dcr_err *e);
void dcr_acks_free(struct dcr_ack *v, size_t n);

/* The committed head: the highest refs/vV (have = 0 when there is none). */
int dcr_policy_head(struct dcr_store *s, const char *policy, struct dcr_head *h,
		    struct dcr_err *e);
/* The state committed for version V (DCR_ENOTFOUND if none). policy NULL:
 * s is opened at the policy's own directory (STORE/POLICY, where a push of
 * STORE/POLICY/vV puts the pack). */
int dcr_policy_ref(struct dcr_store *s, const char *policy, uint64_t version, dcr_digest *state,
		   struct dcr_err *e);

struct dcr_policy_commit_opts {
	uint64_t version;
	dcr_digest state;
	unsigned expect;   /* acknowledgements naming state that must exist */
	double timeout_s;  /* wait this long for them (0: look once) */
	unsigned max_failed; /* failure reports of version tolerated: one more
				and the wait ends at once */
	uint8_t attempt[16]; /* the attempt being committed (have_attempt): a
				report of another is stale, not counted */
	int have_attempt;
	struct dcr_fault *fault; /* fault points (core/fault.h) */
	/* called after each look at the acknowledgements: how many name the
	 * state, how many count as failure reports, the seconds waited so
	 * far (NULL: none) */
	void (*progress)(void *ctx, unsigned acks, unsigned expect, unsigned failed,
			 double waited_s);
	void *progress_ctx;
};
/* Wait for the acknowledgements, then create refs/vV with compare-and-set.
 * DCR_ECONFLICT when V is already committed (by anyone, this caller's
 * earlier attempt too: e names its state; dcr-commit compares it, from
 * dcr_policy_ref, with the state it wanted, and a retried step that
 * finds its own state there goes on) or V-1 is not; DCR_ENOTFOUND when the acknowledgements did not come, or
 * more than max_failed receivers reported failing V (e names one and
 * gives its reason). A report counts when it names the attempt being
 * committed, or names none and was not there, as it is, when the wait
 * began (a report of an earlier attempt, which a trainer that restarted
 * publishes again, does not end the wait). */
int dcr_policy_commit(struct dcr_store *s, const char *policy,
		      const struct dcr_policy_commit_opts *o, unsigned *acks_seen,
		      struct dcr_err *e);

/* The state the pack NAME/vV in the store reaches: its manifest's target.
 * DCR_ENOTFOUND (e says so, and that --state would do) when the store has
 * no such pack. */
int dcr_policy_target(struct dcr_store *s, const char *policy, uint64_t version,
		      dcr_digest *state, struct dcr_err *e);
/* Its target state and the attempt it is of: as dcr_policy_target. */
/* Whether the dense copy vV.dense of policy (NULL: s is opened at the
 * policy's directory) holds the state ref (NULL: refs/vV's): 1, or 0 with
 * why (its manifest is not a dense copy's, names another state, or it or
 * the ref cannot be read). Reads the manifest's head alone. */
int dcr_policy_dense_holds(struct dcr_store *s, const char *policy, uint64_t v,
			   const dcr_digest *ref, char *why, size_t wlen);
int dcr_policy_pack(struct dcr_store *s, const char *policy, uint64_t version,
		    dcr_digest *state, uint8_t attempt[16], struct dcr_err *e);

/* A receiver's whole side of the commit: dcr_commit_local, then (a fault
 * point) the acknowledgement of the committed version and state in s as
 * receiver ID. With s NULL, the local commit alone. The receiver ID is
 * checked before anything changes. Errors as dcr_commit_local's, and the
 * store's. */
int dcr_commit_receiver(struct dcr_receiver *rc, struct dcr_store *s, const char *policy,
			const char *receiver, const struct dcr_commit_opts *o,
			struct dcr_commit_result *res, struct dcr_err *e);

/* Where a policy stands in a store: what an operator asks before a GC or
 * a catch-up. */
struct dcr_policy_survey {
	struct dcr_head head;	  /* the committed head (head.have) */
	struct dcr_ack *latest;	  /* each receiver's latest acknowledgement, by name */
	size_t nlatest;
	struct dcr_ack *failed;	  /* each receiver's failure report newer than its
				     latest acknowledgement, by name */
	size_t nfailed;
	uint64_t *packs, *dense;  /* versions whose pack, and whose dense copy, is
				     complete (its manifest stored), ascending;
				     a dense copy of a committed version only
				     where it holds that version's committed
				     state (refs/vX) */
	size_t npacks, ndense;
	struct dcr_bad_dense {	  /* the dense copies of committed versions that */
		uint64_t version; /* do not (a dense copy of another checkpoint, */
		char *why;	  /* or a delta's pack, pushed under the name), */
	} *bad_dense;		  /* ascending, and why */
	size_t nbad_dense;
};
int dcr_policy_survey(struct dcr_store *s, const char *policy, struct dcr_policy_survey *sv,
		      struct dcr_err *e);
void dcr_policy_survey_release(struct dcr_policy_survey *sv);

/* What dcr_policy_gc removes, whom it waits for, and what it tells. */
struct dcr_gc_opts {
	uint64_t keep;	     /* the last keep committed versions' packs stay */
	uint64_t max_behind; /* a receiver further behind the head is let go once
				a dense copy newer than its version is in the
				store (UINT64_MAX: every receiver is waited for) */
	int dry_run;	     /* remove nothing; report what would go */
	unsigned parallel;   /* deletions in flight (0: 4) */
	/* each pack removed: "vX" or "vX.dense", and its objects */
	void (*removed)(void *ctx, const char *pack, size_t objects);
	/* each receiver further behind than max_behind, at version: let go
	 * (1: it catches up by the dense copy) or still waited for (0: no
	 * dense copy newer than its version) */
	void (*behind)(void *ctx, const char *receiver, uint64_t version, int let_go);
	void *ctx;
	/* each dense copy NAME/vX.dense of a committed version not relied on,
	 * and why: it does not hold version X's committed state (refs/vX) */
	void (*bad_dense)(void *ctx, uint64_t version, const char *why);
};

struct dcr_gc_result {
	uint64_t versions; /* deltas' packs removed */
	uint64_t dense;	   /* dense copies removed */
	int have_head;	   /* a version is committed: head */
	uint64_t head;
	char *held_by;	   /* the receiver, waited for, whose acknowledgement kept
			      packs --keep alone lets go (at version held_at), or
			      NULL; dcr_gc_result_release frees it */
	uint64_t held_at;
};

/* Remove what no receiver needs to reach the committed head:
 *  - packs NAME/vX/ with X at most every waited-for receiver's latest
 *    acknowledged version and at most head - keep, and none at all while
 *    no receiver has acknowledged anything; where a receiver was let go
 *    (o->max_behind), none after the dense copy it catches up by;
 *  - dense copies NAME/vX.dense/ older than the newest complete one (its
 *    manifest is in the store) of a committed version that holds that
 *    version's committed state (its manifest, a dense copy's, names the
 *    state of refs/vX; others are passed over, o->bad_dense told);
 *  - a receiver's acknowledgements of committed versions before its
 *    latest (only the latest says where it stands).
 * Refs stay. res is filled even on error (release it). */
int dcr_policy_gc(struct dcr_store *s, const char *policy, const struct dcr_gc_opts *o,
		  struct dcr_gc_result *res, struct dcr_err *e);
void dcr_gc_result_release(struct dcr_gc_result *res);

#endif
