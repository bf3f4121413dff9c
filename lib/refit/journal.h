/* journal.h - the receiver's redo journal (.dcr/journal): a delta of
 * OVERWRITE items and file operations, checked against every touched
 * tensor's target digest before it is committed by rename, then replayed;
 * replaying it again after a crash is harmless. Internal to libdcr. */
#ifndef DCR_REFIT_JOURNAL_H
#define DCR_REFIT_JOURNAL_H

#include "refit/plan.h"

/* Write the journal from the plan's items, check it, commit it (rename). */
int ap_write_journal(struct ctx *x, struct plan *p, struct item_src src, struct dcr_err *e);
/* Replay the committed journal into the files and remove it. checked: the
 * plan this process wrote the journal from (its tensors' verified flags
 * say which new bytes were hashed to their target digests before the
 * commit: those are not hashed again unless o->recheck), or NULL (a
 * recovery: every written tensor is hashed after the write). */
int ap_replay(struct ctx *x, const struct plan *checked, struct dcr_apply_result *res,
	      struct dcr_err *e);
/* Replay a committed journal if one exists (1 if it did). */
int ap_recover(struct dcr_receiver *rc, const struct dcr_apply_opts *o, struct dcr_err *e);
/* What every apply does first: clear the result, and finish an interrupted
 * apply (its journal) before looking at anything new. */
int ap_begin(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
	     struct dcr_apply_result *res, struct dcr_err *e);

#endif
