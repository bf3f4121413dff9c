/* state.h - tensor digests and state ids: what names a checkpoint's content.
 * Two checkpoints with the same state id are bit-identical. */
#ifndef DCR_CORE_STATE_H
#define DCR_CORE_STATE_H

#include "core/checkpoint.h"
#include "core/digest.h"

/* SHA-256 of a tensor's stored bytes. */
void dcr_tensor_digest(const struct dcr_ckpt_tensor *t, dcr_digest *out);

/* The state id binds names, dtypes, shapes and tensor digests. Entries must
 * be sorted by name. */
struct dcr_state_entry {
	const char *name;
	int dtype;
	unsigned ndim;
	const uint64_t *shape;
	dcr_digest digest;
};
void dcr_state_id(const struct dcr_state_entry *ent, size_t n, dcr_digest *out);
/* Hash every tensor (optionally return per-tensor digests, ntensors long,
 * in c->tensors order) and compute the state id. */
int dcr_ckpt_state_id(const struct dcr_ckpt *c, dcr_digest *id,
		      dcr_digest *per_tensor, struct dcr_err *e);

/* Digest every tensor (c->tensors order) using `threads` threads (0: all cores). */
int dcr_ckpt_digests(const struct dcr_ckpt *c, dcr_digest *out, int threads);
/* Only the tensors i with sel[i] != 0. */
int dcr_ckpt_digests_sel(const struct dcr_ckpt *c, dcr_digest *out, const uint8_t *sel,
			 int threads);
/* State id from precomputed per-tensor digests. */
void dcr_ckpt_state_from(const struct dcr_ckpt *c, const dcr_digest *dg, dcr_digest *id);

#endif
