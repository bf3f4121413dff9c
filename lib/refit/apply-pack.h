/* apply-pack.h - applying a pack: payloads checked and resolved as they
 * arrive, nothing written before the manifest accounts for them all. */
#ifndef DCR_REFIT_APPLY_PACK_H
#define DCR_REFIT_APPLY_PACK_H

#include "core/packio.h"
#include "refit/apply.h"

/* Apply a pack (payloads then a manifest) read from in. Payloads are
 * checked and resolved as they arrive; nothing is written before the
 * manifest has accounted for every payload; then, as dcr_apply, the
 * applied record. */
struct dcr_pack_in;
int dcr_apply_pack(struct dcr_receiver *rc, struct dcr_pack_in *in,
		   const struct dcr_apply_opts *o, struct dcr_apply_result *res,
		   struct dcr_err *e);
#endif
