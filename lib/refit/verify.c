/* verify.c - exact, tensor-by-tensor comparison of two checkpoints. */
#include "config.h"

#include <string.h>

#include "core/bytes.h"
#include "refit/verify.h"

static void compare(const struct dcr_ckpt_tensor *h, const struct dcr_ckpt_tensor *w,
		    struct dcr_verify_item *it)
{
	const struct dcr_tensor_info *a = h->info, *b = w->info;
	if (a->dtype != b->dtype || a->ndim != b->ndim ||
	    memcmp(a->shape, b->shape, a->ndim * sizeof(uint64_t))) {
		it->v = DCR_V_LAYOUT;
		return;
	}
	uint64_t nb = dcr_tensor_bytes(a);
	if (!memcmp(h->data, w->data, nb)) {
		it->v = DCR_V_OK;
		return;
	}
	it->v = DCR_V_DIFFER;
	unsigned unit = dcr_dtype_unit(a->dtype);
	int first = 1;
	for (uint64_t off = 0; off < nb; off += 4096) {
		uint64_t len = nb - off < 4096 ? nb - off : 4096;
		if (!memcmp(h->data + off, w->data + off, len))
			continue;
		for (uint64_t k = off; k < off + len; k += unit) {
			uint64_t x = load_unit(h->data + k, unit), y = load_unit(w->data + k, unit);
			if (x == y)
				continue;
			if (first) {
				it->first = k / unit;
				it->have = x;
				it->want = y;
				first = 0;
			}
			it->ndiff++;
		}
	}
}

int dcr_verify_against(const struct dcr_ckpt *have, const struct dcr_ckpt *want,
		       const char *only,
		       void (*cb)(void *ctx, const struct dcr_verify_item *it), void *ctx,
		       struct dcr_err *e)
{
	size_t i = 0, j = 0;
	int bad = 0;
	while (i < have->ntensors || j < want->ntensors) {
		const struct dcr_ckpt_tensor *h = i < have->ntensors ? &have->tensors[i] : NULL;
		const struct dcr_ckpt_tensor *w = j < want->ntensors ? &want->tensors[j] : NULL;
		int k = !h ? 1 : !w ? -1 : strcmp(h->info->name, w->info->name);
		struct dcr_verify_item it = {0};
		if (k < 0) {
			it.name = h->info->name;
			it.v = DCR_V_EXTRA;
			i++;
		} else if (k > 0) {
			it.name = w->info->name;
			it.v = DCR_V_MISSING;
			j++;
		} else {
			it.name = h->info->name;
			i++;
			j++;
			if (only && strcmp(only, it.name))
				continue;
			compare(h, w, &it);
		}
		if (only && strcmp(only, it.name))
			continue;
		bad += it.v != DCR_V_OK;
		if (cb)
			cb(ctx, &it);
	}
	int r = dcr_ckpt_unchanged(have, e);
	if (!r)
		r = dcr_ckpt_unchanged(want, e);
	return r ? r : bad;
}
