/* stage.h - executing a checked plan: rebuilt files staged, the journal
 * written from the plan's items, committed and replayed. Internal to libdcr. */
#ifndef DCR_REFIT_STAGE_H
#define DCR_REFIT_STAGE_H

#include "refit/plan.h"

/* Everything after the base check: the plan's tensors are matched with the
 * receiver's, files to rebuild are staged, the journal is written from the
 * items of src and committed, and replayed. */
int ap_commit_plan(struct ctx *x, struct plan *p, struct dcr_ckpt *c, const dcr_digest *cur,
		   const dcr_digest *cur_dg, struct item_src src, struct dcr_apply_result *res,
		   struct dcr_err *e);

/* Empty .dcr/stage/ (nothing there is needed once no journal is pending). */
void ap_clear_stage(struct dcr_receiver *rc);

#endif
