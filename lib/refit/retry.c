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

/* What the retry diff's steps share: the base, the target and the
 * alternative bases with their state ids, the writer and the buffers. */
struct retry {
	const struct dcr_retry_opts *o;
	struct dcr_ckpt *a, *b, **alt;
	dcr_digest *alt_id;
	size_t nalt;
	uint64_t chunk;
	struct dcr_delta_writer w;
	struct dcr_changes ch;	/* one chunk's overwrites */
	struct dcr_buf tmp;	/* one item's encoding */
};

/* The alternative bases, opened with their state ids; each must hold the
 * base's tensors. */
static int open_alts(struct retry *rt, struct dcr_err *e)
{
	const struct dcr_retry_opts *o = rt->o;
	const struct dcr_ckpt *a = rt->a;
	int r;
	for (size_t i = 0; i < o->nalso; i++) {
		if ((r = dcr_ckpt_open(o->also[i], &rt->alt[rt->nalt], e)))
			return r;
		struct dcr_ckpt *c = rt->alt[rt->nalt++];
		if ((r = dcr_ckpt_state_id(c, &rt->alt_id[rt->nalt - 1], NULL, e)))
			return r;
		int ok = c->ntensors == a->ntensors;
		for (size_t k = 0; ok && k < a->ntensors; k++)
			ok = dcr_ckpt_tensor_is(dcr_ckpt_find(c, a->tensors[k].info->name),
						a->tensors[k].info->dtype, a->tensors[k].info->ndim,
						a->tensors[k].info->shape);
		if (!ok)
			return dcr_err_set(e, DCR_EFORMAT,
					   "'%s' does not hold the same tensors (names, dtypes, shapes) as the base '%s'",
					   o->also[i], o->base);
	}
	return 0;
}

/* Target tensor i: its record, then chunk by chunk an OVERWRITE item of
 * every element that differs from the base or from any alternative base;
 * *changed counts them, dg gets the tensor's digest. */
static int retry_tensor(struct retry *rt, size_t i, uint64_t *changed, dcr_digest *dg,
			struct dcr_err *e)
{
	const struct dcr_ckpt *a = rt->a, *b = rt->b;
	struct dcr_ckpt *const *alt = rt->alt;
	const size_t nalt = rt->nalt;
	const uint64_t chunk = rt->chunk;
	struct dcr_changes *ch = &rt->ch;
	const struct dcr_ckpt_tensor *nt = &b->tensors[i];
	const struct dcr_tensor_info *ni = nt->info;
	const struct dcr_ckpt_tensor *bt = dcr_ckpt_find(a, ni->name);
	struct dcr_delta_tensor dt;
	int r;
	int same = dcr_diff_tensor_record(a, b, i, &dt);
	if ((r = dcr_delta_write_tensor(&rt->w, &dt, e)))
		return r;
	unsigned unit = dcr_dtype_unit(ni->dtype);
	uint64_t nunits = dcr_tensor_bytes(ni) / unit;
	for (uint64_t s = 0; s < nunits; s += chunk) {
		uint64_t len = nunits - s < chunk ? nunits - s : chunk;
		const uint8_t *pb = nt->data + s * unit;
		uint64_t *pos = ch->pos, *val = ch->val;
		size_t n = 0;
		for (uint64_t k = 0; k < len; k++) {
			uint64_t v = load_unit(pb + k * unit, unit);
			int diff = !same || load_unit(bt->data + (s + k) * unit, unit) != v;
			for (size_t q = 0; q < nalt && !diff; q++) {
				const struct dcr_ckpt_tensor *at = dcr_ckpt_find(alt[q], ni->name);
				diff = load_unit(at->data + (s + k) * unit, unit) != v;
			}
			if (diff) {
				pos[n] = k;
				val[n++] = v;
			}
		}
		if (!n)
			continue;
		ch->n = n;
		*changed += n;
		rt->tmp.len = 0;
		struct dcr_item it = {.tensor = (uint32_t)i, .enc = DCR_ENC_OVERWRITE,
				      .start = s, .len = len, .n = n,
				      .flags = n == len ? DCR_ITEM_DENSE : 0};
		if ((r = dcr_item_encode(ch, unit, len, n == len, &it.codec, &rt->tmp, e)))
			return r;
		it.data = rt->tmp.p;
		it.data_len = rt->tmp.len;
		if ((r = dcr_delta_write_item(&rt->w, &it, e)))
			return r;
	}
	dcr_tensor_digest(nt, dg);
	return 0;
}

int dcr_diff_retry(const struct dcr_retry_opts *o, struct dcr_sink sink,
		   struct dcr_retry_stats *st, struct dcr_err *e)
{
	struct retry rt = {.o = o};
	dcr_digest *dg = NULL;
	int r;
	rt.chunk = o->chunk_elems ? o->chunk_elems : (1u << 20);
	if (rt.chunk > DCR_ITEM_MAX_ELEMS)
		rt.chunk = DCR_ITEM_MAX_ELEMS;
	rt.alt = dcr_calloc(o->nalso + 1, sizeof(*rt.alt));
	rt.alt_id = dcr_calloc(o->nalso + 1, sizeof(*rt.alt_id));
	if (!rt.alt || !rt.alt_id || dcr_changes_reserve(&rt.ch, rt.chunk)) {
		r = dcr_err_sys(e, ENOMEM, "diff");
		goto out;
	}
	if ((r = dcr_ckpt_open(o->base, &rt.a, e)) || (r = dcr_ckpt_open(o->target, &rt.b, e)))
		goto out;
	struct dcr_ckpt *a = rt.a, *b = rt.b;
	dcr_digest base_id;
	if (o->base_id)
		base_id = *o->base_id;
	else if ((r = dcr_ckpt_state_id(a, &base_id, NULL, e)))
		goto out;
	if ((r = open_alts(&rt, e)))
		goto out;
	uint8_t attempt[16];
	if ((r = dcr_attempt_id(o->attempt, attempt, e)))
		goto out;
	if ((r = dcr_delta_writer_init(&rt.w, sink, &base_id, attempt, o->what, e)))
		goto out;
	/* alternative bases, without repeats or the base itself */
	dcr_digest *alt_id = rt.alt_id;
	size_t nid = 0;
	for (size_t i = 0; i < rt.nalt; i++) {
		int dup = !memcmp(alt_id[i].b, base_id.b, 32);
		for (size_t k = 0; k < nid && !dup; k++)
			dup = !memcmp(alt_id[k].b, alt_id[i].b, 32);
		if (!dup)
			alt_id[nid++] = alt_id[i];
	}
	if (nid && (r = dcr_delta_write_bases(&rt.w, alt_id, nid, e)))
		goto out;
	for (size_t i = 0; i < a->ntensors; i++)
		if (!dcr_ckpt_find(b, a->tensors[i].info->name) &&
		    (r = dcr_delta_write_remove(&rt.w, a->tensors[i].info->name, e)))
			goto out;
	dg = dcr_calloc(b->ntensors + 1, sizeof(*dg));
	if (!dg) {
		r = dcr_err_sys(e, ENOMEM, "diff");
		goto out;
	}
	uint64_t changed = 0;
	for (size_t i = 0; i < b->ntensors; i++)
		if ((r = retry_tensor(&rt, i, &changed, &dg[i], e)))
			goto out;
	dcr_digest target;
	if ((r = dcr_diff_write_targets(&rt.w, a, b, dg, &target, e)))
		goto out;
	if (st) {
		st->base = base_id;
		st->target = target;
		st->changed = changed;
		st->items = rt.w.nitems;
		st->bytes_out = rt.w.bytes;
		st->nalt = nid;
	}
out:
	dcr_delta_writer_release(&rt.w);
	dcr_changes_free(&rt.ch);
	dcr_buf_free(&rt.tmp);
	for (size_t i = 0; rt.alt && i < rt.nalt; i++)
		dcr_ckpt_close(rt.alt[i]);
	free(rt.alt);
	free(rt.alt_id);
	free(dg);
	dcr_ckpt_close(rt.a);
	dcr_ckpt_close(rt.b);
	return r;
}
