/* retry.c - an overwrite-only delta that reaches its target from several
 * bases: the base, and the targets of earlier attempts of the same version
 * (dcr-diff --overwrite --also-base). See dcr(7), COMMIT PROTOCOL.
 *
 * Every position where the target differs from the base or from any
 * alternative base goes out as an OVERWRITE of the target's stored bits, so
 * a receiver at any of them ends with exactly the target. The alternative
 * bases must hold the same tensors (names, dtypes, shapes) as the base.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/state.h"
#include "core/util.h"
#include "refit/diff.h"
#include "refit/retry.h"

int dcr_diff_retry(const struct dcr_retry_opts *o, struct dcr_sink sink,
		   struct dcr_retry_stats *st, struct dcr_err *e)
{
	struct dcr_ckpt *a = NULL, *b = NULL, **alt = NULL;
	struct dcr_delta_writer w = {0};
	struct dcr_changes ch = {0};
	struct dcr_buf tmp = {0};
	dcr_digest *alt_id = NULL, *dg = NULL;
	size_t nalt = 0;
	int r;
	uint64_t chunk = o->chunk_elems ? o->chunk_elems : (1u << 20);
	if (chunk > DCR_ITEM_MAX_ELEMS)
		chunk = DCR_ITEM_MAX_ELEMS;
	alt = dcr_calloc(o->nalso + 1, sizeof(*alt));
	alt_id = dcr_calloc(o->nalso + 1, sizeof(*alt_id));
	if (!alt || !alt_id || dcr_changes_reserve(&ch, chunk)) {
		r = dcr_err_sys(e, ENOMEM, "diff");
		goto out;
	}
	if ((r = dcr_ckpt_open(o->base, &a, e)) || (r = dcr_ckpt_open(o->target, &b, e)))
		goto out;
	dcr_digest base_id;
	if (o->base_id)
		base_id = *o->base_id;
	else if ((r = dcr_ckpt_state_id(a, &base_id, NULL, e)))
		goto out;
	for (size_t i = 0; i < o->nalso; i++) {
		if ((r = dcr_ckpt_open(o->also[i], &alt[nalt], e)))
			goto out;
		struct dcr_ckpt *c = alt[nalt++];
		if ((r = dcr_ckpt_state_id(c, &alt_id[nalt - 1], NULL, e)))
			goto out;
		int ok = c->ntensors == a->ntensors;
		for (size_t k = 0; ok && k < a->ntensors; k++)
			ok = dcr_ckpt_tensor_is(dcr_ckpt_find(c, a->tensors[k].info->name),
						a->tensors[k].info->dtype, a->tensors[k].info->ndim,
						a->tensors[k].info->shape);
		if (!ok) {
			r = dcr_err_set(e, DCR_EFORMAT,
					"'%s' does not hold the same tensors (names, dtypes, shapes) as the base '%s'",
					o->also[i], o->base);
			goto out;
		}
	}
	uint8_t attempt[16];
	if ((r = dcr_attempt_id(o->attempt, attempt, e)))
		goto out;
	if ((r = dcr_delta_writer_init(&w, sink, &base_id, attempt, o->what, e)))
		goto out;
	/* alternative bases, without repeats or the base itself */
	size_t nid = 0;
	for (size_t i = 0; i < nalt; i++) {
		int dup = !memcmp(alt_id[i].b, base_id.b, 32);
		for (size_t k = 0; k < nid && !dup; k++)
			dup = !memcmp(alt_id[k].b, alt_id[i].b, 32);
		if (!dup)
			alt_id[nid++] = alt_id[i];
	}
	if (nid && (r = dcr_delta_write_bases(&w, alt_id, nid, e)))
		goto out;
	for (size_t i = 0; i < a->ntensors; i++)
		if (!dcr_ckpt_find(b, a->tensors[i].info->name) &&
		    (r = dcr_delta_write_remove(&w, a->tensors[i].info->name, e)))
			goto out;
	dg = dcr_calloc(b->ntensors + 1, sizeof(*dg));
	if (!dg) {
		r = dcr_err_sys(e, ENOMEM, "diff");
		goto out;
	}
	uint64_t changed = 0;
	for (size_t i = 0; i < b->ntensors; i++) {
		const struct dcr_ckpt_tensor *nt = &b->tensors[i];
		const struct dcr_tensor_info *ni = nt->info;
		const struct dcr_ckpt_tensor *bt = dcr_ckpt_find(a, ni->name);
		struct dcr_delta_tensor dt;
		int same = dcr_diff_tensor_record(a, b, i, &dt);
		if ((r = dcr_delta_write_tensor(&w, &dt, e)))
			goto out;
		unsigned unit = dcr_dtype_unit(ni->dtype);
		uint64_t nunits = dcr_tensor_bytes(ni) / unit;
		for (uint64_t s = 0; s < nunits; s += chunk) {
			uint64_t len = nunits - s < chunk ? nunits - s : chunk;
			const uint8_t *pb = nt->data + s * unit;
			size_t n = 0;
			for (uint64_t k = 0; k < len; k++) {
				uint64_t v = load_unit(pb + k * unit, unit);
				int diff = !same || load_unit(bt->data + (s + k) * unit, unit) != v;
				for (size_t q = 0; q < nalt && !diff; q++) {
					const struct dcr_ckpt_tensor *at = dcr_ckpt_find(alt[q], ni->name);
					diff = load_unit(at->data + (s + k) * unit, unit) != v;
				}
				if (diff) {
					ch.pos[n] = k;
					ch.val[n++] = v;
				}
			}
			if (!n)
				continue;
			ch.n = n;
			changed += n;
			tmp.len = 0;
			struct dcr_item it = {.tensor = (uint32_t)i, .enc = DCR_ENC_OVERWRITE,
					      .start = s, .len = len, .n = n,
					      .flags = n == len ? DCR_ITEM_DENSE : 0};
			if ((r = dcr_item_encode(&ch, unit, len, n == len, &it.codec, &tmp, e)))
				goto out;
			it.data = tmp.p;
			it.data_len = tmp.len;
			if ((r = dcr_delta_write_item(&w, &it, e)))
				goto out;
		}
		dcr_tensor_digest(nt, &dg[i]);
	}
	dcr_digest target;
	if ((r = dcr_diff_write_targets(&w, b, dg, &target, e)))
		goto out;
	if (st) {
		st->base = base_id;
		st->target = target;
		st->changed = changed;
		st->items = w.nitems;
		st->bytes_out = w.bytes;
		st->nalt = nid;
	}
out:
	dcr_delta_writer_release(&w);
	dcr_changes_free(&ch);
	dcr_buf_free(&tmp);
	for (size_t i = 0; alt && i < nalt; i++)
		dcr_ckpt_close(alt[i]);
	free(alt);
	free(alt_id);
	free(dg);
	dcr_ckpt_close(a);
	dcr_ckpt_close(b);
	return r;
}
