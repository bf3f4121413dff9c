/* apply-input.h - applying whatever an input names, as dcr-apply does: a
 * pack directory, a delta stream or a pack tar stream (told apart by their
 * first bytes), from a path or a file descriptor. */
#ifndef DCR_REFIT_APPLY_INPUT_H
#define DCR_REFIT_APPLY_INPUT_H

#include "refit/apply.h"

/* Apply `input` to rc: a pack directory, or a file (or fd when input is
 * NULL or "-") holding a delta stream or a pack tar stream. Unless
 * o->have_version, the version comes from input's name when that is vN,
 * vN.tar, vN.delta or vN.dcrd (dcr_version_from_name). An empty input is
 * DCR_EFORMAT. Writes the applied record like dcr_apply. */
int dcr_apply_input(struct dcr_receiver *rc, const char *input, int fd,
		    const struct dcr_apply_opts *o, struct dcr_apply_result *res,
		    struct dcr_err *e);

#endif
