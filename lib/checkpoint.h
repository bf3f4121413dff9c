/* checkpoint.h - internals shared by checkpoint users. */
#ifndef DCR_CHECKPOINT_H
#define DCR_CHECKPOINT_H

#include "dcr.h"

/* A plain file name: no '/', no control characters, not "." or "..". */
int dcr_safe_file_name(const char *s);
/* Digest every tensor (c->tensors order) using `threads` threads (0: all cores). */
int dcr_ckpt_digests(const struct dcr_ckpt *c, dcr_digest *out, int threads);
/* Only the tensors i with sel[i] != 0. */
int dcr_ckpt_digests_sel(const struct dcr_ckpt *c, dcr_digest *out, const uint8_t *sel,
			 int threads);
/* State id from precomputed per-tensor digests. */
void dcr_ckpt_state_from(const struct dcr_ckpt *c, const dcr_digest *dg, dcr_digest *id);

#endif
