/* verify.h - compare checkpoints tensor by tensor. */
#ifndef DCR_REFIT_VERIFY_H
#define DCR_REFIT_VERIFY_H

#include "core/checkpoint.h"

enum dcr_verdict {
	DCR_V_OK,      /* identical stored bits */
	DCR_V_DIFFER,  /* same dtype and shape, some element differs */
	DCR_V_LAYOUT,  /* dtype or shape differs */
	DCR_V_MISSING, /* in the reference, not in the checkpoint */
	DCR_V_EXTRA,   /* in the checkpoint, not in the reference */
};

struct dcr_verify_item {
	const char *name;
	enum dcr_verdict v;
	uint64_t first;      /* first differing element (DCR_V_DIFFER) */
	uint64_t have, want; /* its stored bits */
	uint64_t ndiff;      /* differing elements */
};

/* Calls cb once per tensor name (sorted); returns the number of tensors
 * that are not DCR_V_OK, or a negative error (one of DCR_EFORMAT where a
 * file of either was written while it was compared: dcr_ckpt_unchanged).
 * Only `only` when non-NULL. */
int dcr_verify_against(const struct dcr_ckpt *have, const struct dcr_ckpt *want,
		       const char *only,
		       void (*cb)(void *ctx, const struct dcr_verify_item *it), void *ctx,
		       struct dcr_err *e);

#endif
