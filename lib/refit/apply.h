/* apply.h - applying a delta stream to a receiver in place, crash-safe
 * (see apply.c for the protocol, dcr-apply(1) for its guarantees). */
#ifndef DCR_REFIT_APPLY_H
#define DCR_REFIT_APPLY_H

#include "core/delta.h"
#include "core/fault.h"
#include "core/trust.h"
#include "refit/receiver.h"

struct dcr_apply_opts {
	/* fault points (core/fault.h): each write, rename and fsync */
	struct dcr_fault *fault;
	/* The receiver's committed state (.dcr/HEAD), or NULL: a delta must name
	 * it as its base or one of its alternative bases. */
	const dcr_digest *head;
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
	const char *what;
	/* the version the delta reaches, for the applied record (dcr-commit);
	 * a pack whose manifest names another is refused */
	int have_version;
	uint64_t version;
	/* DCR_DEVICE_CPU (default) or DCR_DEVICE_CUDA (core/cuda.h): where the
	 * journal's overwrites are scattered into the tensors' bytes */
	int device;
	/* the keys a pack's manifest must be signed by (NULL or no keys: none).
	 * With keys, a delta stream (which carries no signature) is refused,
	 * and so is a pack not signed by one of them, or whose signed version
	 * is not above the receiver's committed version (HEAD) nor at least
	 * trust->min_version: checked at the manifest, before anything is
	 * committed (DCR_ETRUST). */
	const struct dcr_trust *trust;
	/* hash every written tensor again after the write and compare it
	 * with its target digest (what a recovery always does); by default a
	 * tensor whose new bytes this apply hashed before the commit is not
	 * hashed twice */
	int recheck;
};

struct dcr_apply_result {
	dcr_digest base, target; /* base: the receiver's state before, one of the delta's bases */
	uint8_t attempt[16];
	uint64_t changes, items, tensors_checked;
	uint64_t tensors_prehashed; /* of those checked before the commit, how many
				       were hashed as their items were resolved
				       (refit/prehash.h), not read again */
	int already;    /* receiver was already at the target */
	int recovered;  /* a journal from an interrupted run was replayed */
};

/* Apply a delta stream to the receiver, then record what it reached in
 * .dcr/applied (dcr_applied_record) for dcr_commit_local. */
int dcr_apply(struct dcr_receiver *rc, struct dcr_source src, const uint8_t *head,
	      size_t head_len, const struct dcr_apply_opts *o, struct dcr_apply_result *res,
	      struct dcr_err *e);
/* Finish an interrupted apply: replay a committed journal if one exists
 * (1 if it did, 0 if there was none). */
int dcr_apply_recover(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
		      struct dcr_err *e);

#endif
