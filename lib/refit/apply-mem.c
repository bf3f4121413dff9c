/* apply-mem.c - applying a pack to tensors in memory (see apply-mem.h).
 *
 * 1. Read: every entry of the pack; payloads opened (trailer checked),
 *    their items kept (data copied), the manifest parsed. Nothing of the
 *    caller's is looked at yet.
 * 2. Check: the manifest accounts for every payload (digests, counts) and
 *    every item; the base, when the caller names its state; every tensor
 *    an item touches (and every new one) is looked up and must have the
 *    target's dtype and shape; a tensor's items must not overlap.
 * 3. Resolve and verify, per such tensor: its current bytes are read (host
 *    memory in place, device memory through a host staging buffer), each
 *    item resolved to the new stored bits at its positions (XOR masks
 *    against the current bits, as dcr_item_resolve does for files), the
 *    new bytes hashed (the BLAKE3 tensor digest, on the host) and compared with the target
 *    digest. The changes are kept as gaps and new units, in batches.
 * 4. Write, once every tensor passed: per tensor, each batch's positions
 *    from its gaps and a scatter of the new units: dcr_gap_positions and
 *    dcr_scatter on the host, dcr_cuda_positions and dcr_cuda_scatter on
 *    the device (gaps and units copied there, four or five bytes a change
 *    for bf16 instead of the tensor's two a value).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "core/bytes.h"
#include "core/digest.h"
#include "core/item.h"
#include "core/manifest.h"
#include "core/payload.h"
#include "core/pset.h"
#include "core/state.h"
#include "core/trust.h"
#include "core/util.h"
#include "refit/apply-mem.h"
#include "refit/tcount.h"

#define STAGE_BYTES (16u << 20) /* device reads pass through this much host memory */
#define DEFAULT_BATCH (1u << 20)

/* An item as it arrived, its data copied (or squeezed: HELD_PLAIN). */
struct mitem {
	char *name;         /* its tensor's, from its payload's TENSOR record */
	int dtype;          /* as that record says */
	uint64_t nelem;
	struct dcr_item it; /* it.data owned */
	size_t zlen;        /* 0, or it.data is a zstd frame of zlen bytes */
	uint32_t tensor;    /* the manifest's index, once it is known */
};

/* The items' data is held until the manifest is checked, as it came
 * until HELD_PLAIN bytes are held (o->held_plain), zstd-squeezed past that
 * where that halves it: the payloads' own zstd frames may hold gigabytes
 * of items in a few KB (a stream of dense items of zeros, each over a new
 * tensor, took 1.35 GB for 44 KB), and so they take about what the pack
 * does. Items dcr writes are coded already and do not halve: trying costs
 * about 0.3 s of a core per 256 MiB of them. */
#define HELD_PLAIN ((uint64_t)256 << 20)
#define HELD_SQUEEZE_MIN 4096 /* bytes of an item worth a try */
#define HELD_LEVEL 1
/* the squeezer sees as far back as a payload's frame may (its long
 * matches: a block of noise repeated a MiB apart, which a payload's frame
 * holds once, is held about once too) */
#define HELD_WINDOW_LOG DCR_PAYLOAD_WINDOW_LOG

/* Changes [k0, next batch's k0) of a tensor; positions count from first. */
struct batch {
	size_t k0;
	uint64_t first;
};

/* A tensor the apply looks at. */
struct mt {
	const struct dcr_delta_tensor *t; /* the manifest's */
	struct dcr_mem_tensor mem;
	unsigned unit;
	uint64_t nbytes, units;
	size_t i0, ni;                    /* its items, sorted */
	int isnew, write;
	uint64_t total;                   /* changes its items carry */
	uint32_t *gaps;                   /* resolved changes */
	uint8_t *vals;                    /* their new units, unit bytes each */
	size_t n;
	uint64_t next;                    /* the position after the last change */
	struct batch *b;
	size_t nb, bcap;
};

struct mctx {
	const struct dcr_mem_apply_opts *o;
	const char *what;
	size_t batch;
	struct dcr_tdigest *td; /* the tensor being checked */
	uint8_t *stage;      /* page-locked, for device reads */
	struct dcr_buf tmp;  /* one item's range */
	struct dcr_buf data; /* a squeezed item's data */
	struct dcr_changes ch;
	uint64_t *hpos, *hval;                /* a batch, host writes */
	void *d_gaps, *d_vals, *d_pos, *d_scan; /* a batch, device writes */
	size_t scan_bytes;
	uint64_t hashed, to_hash;
};

/* ---- 1. reading the pack ---- */

struct items {
	struct mitem *v;
	size_t n, cap;
	uint64_t nchanges;
	struct ap_tcount count; /* the elements each tensor's items change */
	uint64_t held, plain;	/* bytes of items' data held; HELD_PLAIN */
	struct dcr_buf z;	/* squeezing one */
	ZSTD_CCtx *cc;		/* (HELD_LEVEL) */
	int cc_failed;
};

static void items_free(struct items *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].name);
		free((void *)s->v[i].it.data);
	}
	free(s->v);
	ap_tcount_free(&s->count);
	dcr_buf_free(&s->z);
	ZSTD_freeCCtx(s->cc);
	memset(s, 0, sizeof(*s));
}

/* The squeezer (HELD_LEVEL, HELD_WINDOW_LOG), made when first needed;
 * NULL when it cannot be (then items are held as they came). */
static ZSTD_CCtx *squeezer(struct items *s)
{
	if (!s->cc && !s->cc_failed) {
		s->cc = ZSTD_createCCtx();
		s->cc_failed =
			!s->cc ||
			ZSTD_isError(ZSTD_CCtx_setParameter(s->cc, ZSTD_c_compressionLevel, HELD_LEVEL)) ||
			ZSTD_isError(ZSTD_CCtx_setParameter(s->cc, ZSTD_c_windowLog, HELD_WINDOW_LOG)) ||
			ZSTD_isError(ZSTD_CCtx_setParameter(s->cc, ZSTD_c_enableLongDistanceMatching, 1));
	}
	return s->cc_failed ? NULL : s->cc;
}

static int keep_item(struct items *s, const struct dcr_delta_tensor *t, const struct dcr_item *it,
		     struct dcr_err *e)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 256;
		struct mitem *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return dcr_err_sys(e, ENOMEM, "apply");
		s->v = v;
		s->cap = cap;
	}
	struct mitem *m = &s->v[s->n];
	memset(m, 0, sizeof(*m));
	m->it = *it;
	m->dtype = t->dtype;
	m->nelem = t->nelem;
	m->name = dcr_strdup(t->name);
	const uint8_t *src = it->data;
	size_t n = it->data_len;
	if (s->held + n > s->plain && n >= HELD_SQUEEZE_MIN && squeezer(s) &&
	    !dcr_buf_reserve(&s->z, ZSTD_compressBound(n))) {
		size_t zl = ZSTD_compress2(s->cc, s->z.p, ZSTD_compressBound(n), src, n);
		if (!ZSTD_isError(zl) && zl < n / 2) {
			src = s->z.p;
			n = m->zlen = zl;
		}
	}
	uint8_t *d = malloc(n ? n : 1);
	if (!m->name || !d) {
		free(m->name);
		free(d);
		return dcr_err_sys(e, ENOMEM, "apply");
	}
	memcpy(d, src, n);
	m->it.data = d;
	s->held += n;
	s->n++;
	s->nchanges += it->n;
	return 0;
}

/* One payload's records, read a record at a time: its TENSOR table, and
 * each item kept. */
static int read_payload(struct items *s, const uint8_t *buf, size_t len,
			const struct dcr_payload *pl, const char *what, struct dcr_err *e)
{
	struct dcr_tensor_table lt = {0};
	struct dcr_payload_records it;
	int r = dcr_payload_records_open(&it, buf, len, pl, what, e);
	if (r)
		return r;
	struct dcr_delta_rec rec;
	while ((r = dcr_payload_records_next(&it, &rec, e)) == 1) {
		r = 0;
		if (rec.type == DCR_REC_TENSOR) {
			r = dcr_tensor_table_add(&lt, &rec, what, e);
		} else if (rec.type == DCR_REC_ITEM) {
			struct dcr_item item;
			const struct dcr_delta_tensor *t;
			if ((r = dcr_tensor_table_item(&lt, &rec, what, &item, &t, e)))
				break;
			/* before its bytes are kept: a stream of items over
			 * and over one tensor held them all until its end */
			if (!(r = ap_tcount_item(&s->count, t, &item, what, e)))
				r = keep_item(s, t, &item, e);
		} else if (rec.type != DCR_REC_REMOVE && rec.type < DCR_REC_ANCILLARY) {
			r = dcr_err_set(e, DCR_EFORMAT, "%s: unexpected record type %u", what, rec.type);
		}
		if (r)
			break;
	}
	dcr_payload_records_close(&it);
	dcr_tensor_table_clear(&lt);
	return r < 0 ? r : 0;
}

/* What the pack's payloads have in common, and which arrived. */
struct pack_seen {
	struct pset seen;
	int have_base;
	dcr_digest base;
	uint8_t attempt[16];
};

/* One payload entry: checked, of this delta, once; its items kept. */
static int read_entry(struct items *s, struct pack_seen *ps, const char *name,
		      const uint8_t *buf, size_t len, struct dcr_err *e)
{
	uint32_t idx;
	if (!dcr_payload_name_parse(name, &idx))
		return dcr_err_set(e, DCR_EFORMAT, "unexpected entry '%s'", name);
	struct dcr_payload pl;
	int r = dcr_payload_check(buf, len, name, &pl, e);
	if (r)
		return r;
	if (pl.index != idx)
		return dcr_err_set(e, DCR_EFORMAT, "%s holds payload %u", name, pl.index);
	if (!ps->have_base) {
		ps->base = pl.base;
		memcpy(ps->attempt, pl.attempt, 16);
		ps->have_base = 1;
	} else if (memcmp(ps->base.b, pl.base.b, 32) || memcmp(ps->attempt, pl.attempt, 16)) {
		return dcr_err_set(e, DCR_EFORMAT, "%s belongs to another delta", name);
	}
	r = pset_add(&ps->seen, idx, len, &pl.digest);
	if (r == -EEXIST)
		return dcr_err_set(e, DCR_EFORMAT, "%s arrived twice with different contents", name);
	if (r < 0)
		return dcr_err_sys(e, -r, "apply");
	return r ? read_payload(s, buf, len, &pl, name, e) : 0; /* a duplicate is skipped */
}

/* The manifest accounts for every payload that arrived, and they for it. */
static int check_manifest(const struct items *s, const struct pack_seen *ps,
			  const struct dcr_manifest *m, const char *what, struct dcr_err *e)
{
	if (ps->have_base && (memcmp(ps->base.b, m->base.b, 32) || memcmp(ps->attempt, m->attempt, 16)))
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: the manifest belongs to another delta than its payloads", what);
	int r = 0;
	for (uint32_t i = 0; i < m->npayloads && !r; i++) {
		uint32_t idx = dcr_manifest_index(m, i);
		const struct pset_ent *pe = pset_find(&ps->seen, idx);
		char *pn = dcr_payload_name(idx);
		if (!pe)
			r = dcr_err_set(e, DCR_EFORMAT, "%s is missing %s; nothing was written", what,
					pn ? pn : "a payload");
		else if (memcmp(pe->digest.b, m->pdigest[i].b, 32))
			r = dcr_err_set(e, DCR_EDIGEST, "%s does not match the manifest's digest",
					pn ? pn : "a payload");
		free(pn);
	}
	if (!r && ps->seen.n != m->npayloads) /* each listed one is there, none twice */
		r = dcr_err_set(e, DCR_EFORMAT, "%s: a payload is not in the manifest", what);
	if (!r && (s->n != m->nitems || s->nchanges != m->nchanges))
		r = dcr_err_set(e, DCR_EFORMAT,
				"%s: payloads hold %zu items and %llu changes, the manifest says %llu and %llu",
				what, s->n, (unsigned long long)s->nchanges,
				(unsigned long long)m->nitems, (unsigned long long)m->nchanges);
	return r;
}

/* Every entry: payloads (each checked, once), then the manifest, last. */
static int read_pack(struct dcr_pack_in *in, const char *what, const struct dcr_trust *trust,
		     struct items *s, struct dcr_manifest *m, struct dcr_err *e)
{
	uint8_t *sig = NULL;
	size_t sig_len = 0;
	struct pack_seen ps;
	memset(&ps, 0, sizeof(ps));
	int have_manifest = 0, r;
	const char *name;
	const uint8_t *buf;
	size_t len;
	while ((r = dcr_pack_in_next(in, &name, &buf, &len, e)) == 1) {
		if (!strcmp(name, DCR_MANIFEST_SIG_NAME)) {
			/* kept for the manifest's check; a signature is a few hundred bytes */
			uint8_t *c = len <= DCR_SIG_MAX ? malloc(len ? len : 1) : NULL;
			if (!c) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s: bad signature entry", what);
				break;
			}
			memcpy(c, buf, len);
			free(sig);
			sig = c;
			sig_len = len;
			continue;
		}
		if (have_manifest) {
			r = dcr_err_set(e, DCR_EFORMAT, "%s: entry '%s' after the manifest", what, name);
			break;
		}
		if (!strcmp(name, DCR_MANIFEST_NAME)) {
			if ((r = dcr_manifest_parse(buf, len, name, m, e)))
				break;
			have_manifest = 1;
			if ((r = dcr_trust_check(trust, buf, len, m, sig, sig_len, name, e)))
				break;
			continue;
		}
		if ((r = read_entry(s, &ps, name, buf, len, e)))
			break;
	}
	if (r == 0 && !have_manifest)
		r = dcr_err_set(e, DCR_EFORMAT, "%s ended without a manifest%s", what,
				ps.have_base ? " (payloads were checked; nothing was written)" : "");
	else if (r == 0)
		r = check_manifest(s, &ps, m, what, e);
	pset_free(&ps.seen);
	free(sig);
	return r < 0 ? r : 0;
}

/* ---- 2. checks ---- */

static const struct dcr_delta_tensor *manifest_find(const struct dcr_manifest *m,
						    const char *name, uint32_t *idx)
{
	size_t lo = 0, hi = m->ntensors;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int k = strcmp(m->tensors[mid].name, name);
		if (!k) {
			*idx = (uint32_t)mid;
			return &m->tensors[mid];
		}
		if (k < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int cmp_mitem(const void *a, const void *b)
{
	const struct mitem *x = a, *y = b;
	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	return x->it.start < y->it.start ? -1 : x->it.start > y->it.start;
}

/* A tensor's items, before anything is sized by them: each within the
 * tensor (dcr_delta_parse_item held it to the item limits), and together
 * no more than the tensor. */
static int check_items(struct mctx *x, const struct mt *t, const struct mitem *v,
		       struct dcr_err *e)
{
	uint64_t sum = 0;
	for (size_t j = t->i0; j < t->i0 + t->ni; j++) {
		const struct dcr_item *it = &v[j].it;
		int r = dcr_item_check_range(it, t->units, x->what, t->t->name, e);
		if (r)
			return r;
		sum += it->len;
		if (sum > t->units)
			return dcr_err_set(e, DCR_EFORMAT, "%s: overlapping items for '%s'", x->what,
					   t->t->name);
	}
	return 0;
}

static int check_base(const struct dcr_mem_apply_opts *o, const struct dcr_manifest *m,
		      int *allow_xor, int *already, const char *what, struct dcr_err *e)
{
	*allow_xor = 1;
	*already = 0;
	if (!o->base || m->dense)
		return 0;
	if (!memcmp(o->base->b, m->target.b, 32)) {
		*already = 1;
		return 0;
	}
	if (!memcmp(o->base->b, m->base.b, 32))
		return 0;
	for (uint32_t i = 0; i < m->nalt; i++)
		if (!memcmp(o->base->b, m->alt[i].b, 32)) {
			*allow_xor = 0; /* from an alternative base: overwrites only */
			return 0;
		}
	char have[65], want[65];
	dcr_digest_hex(o->base, have);
	dcr_digest_hex(&m->base, want);
	return dcr_err_set(e, DCR_EBASE,
			   "%s: the tensors are at state %.12s, the pack's base is %.12s (nothing was written)",
			   what, have, want);
}

static int look_up(struct mctx *x, struct mt *t, struct dcr_err *e)
{
	const struct dcr_delta_tensor *dt = t->t;
	memset(&t->mem, 0, sizeof(t->mem));
	int r = x->o->lookup(x->o->ctx, dt->name, &t->mem, e);
	if (r == DCR_ENOTFOUND)
		return dcr_err_set(e, DCR_ENOTFOUND, "%s: no tensor '%s' in memory (the pack %s it)",
				   x->what, dt->name, t->write ? "changes" : "names");
	if (r)
		return r < 0 ? r : dcr_err_set(e, -EINVAL, "lookup of '%s' returned %d", dt->name, r);
	int same = t->mem.dtype == dt->dtype && t->mem.ndim == dt->ndim;
	for (unsigned k = 0; same && k < dt->ndim; k++)
		same = t->mem.shape[k] == dt->shape[k];
	if (!same)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: tensor '%s' in memory is not of the target's dtype and shape (%s, %u dimensions): an in-memory apply changes values, not layouts",
				   x->what, dt->name, dcr_dtype_name(dt->dtype), dt->ndim);
	if (t->mem.device != DCR_DEVICE_CPU && t->mem.device != DCR_DEVICE_CUDA)
		return dcr_err_set(e, -EINVAL, "%s: tensor '%s': unknown device %d", x->what, dt->name,
				   t->mem.device);
	if (!t->mem.data && t->nbytes)
		return dcr_err_set(e, -EINVAL, "%s: tensor '%s' has no data pointer", x->what,
				   dt->name);
	return 0;
}

/* ---- memory: host or device ---- */

static int is_dev(const struct mt *t)
{
	return t->mem.device == DCR_DEVICE_CUDA;
}

/* Current bytes [off, off+len) of t into buf (zeros for a new tensor). */
static int read_bytes(struct mctx *x, const struct mt *t, uint64_t off, size_t len, uint8_t *buf,
		      struct dcr_err *e)
{
	const uint8_t *src = (const uint8_t *)t->mem.data + off;
	int r;
	if (t->isnew)
		memset(buf, 0, len);
	else if (!is_dev(t))
		memcpy(buf, src, len);
	else if ((r = dcr_cuda_copy(buf, src, len, DCR_CUDA_D2H, x->o->stream, e)) ||
		 (r = dcr_cuda_sync(x->o->stream, e)))
		return r;
	return 0;
}

/* Start hashing t (its stored bytes are then fed in order). */
static int td_begin(struct mctx *x, const struct mt *t, struct dcr_err *e)
{
	dcr_tdigest_free(x->td);
	x->td = dcr_tdigest_new(t->t->dtype, t->t->ndim, t->t->shape);
	return x->td ? 0 : dcr_err_sys(e, ENOMEM, "apply");
}

/* Whether the bytes fed since td_begin have t's target digest. */
static int td_matches(struct mctx *x, const struct mt *t)
{
	dcr_digest d;
	int ok = !dcr_tdigest_final(x->td, &d) && !memcmp(d.b, t->t->digest.b, 32);
	dcr_tdigest_free(x->td);
	x->td = NULL;
	return ok;
}

/* Hash t's current bytes [off, off+len). */
static int hash_bytes(struct mctx *x, const struct mt *t, uint64_t off, uint64_t len,
		      struct dcr_err *e)
{
	static const uint8_t zero[65536];
	if (!t->isnew && !is_dev(t)) {
		dcr_tdigest_update(x->td, (const uint8_t *)t->mem.data + off, (size_t)len);
		return 0;
	}
	while (len) {
		size_t k = len < STAGE_BYTES ? (size_t)len : STAGE_BYTES;
		if (t->isnew) {
			k = k < sizeof(zero) ? k : sizeof(zero);
			dcr_tdigest_update(x->td, zero, k);
		} else {
			int r = read_bytes(x, t, off, k, x->stage, e);
			if (r)
				return r;
			dcr_tdigest_update(x->td, x->stage, k);
		}
		off += k;
		len -= k;
	}
	return 0;
}

static int write_batch(struct mctx *x, struct mt *t, const struct batch *b, size_t m,
		       struct dcr_err *e)
{
	const uint32_t *gaps = t->gaps + b->k0;
	const uint8_t *vals = t->vals + b->k0 * t->unit;
	int r;
	if (!is_dev(t)) {
		dcr_gap_positions(gaps, m, b->first, x->hpos);
		for (size_t k = 0; k < m; k++)
			x->hval[k] = load_unit(vals + k * t->unit, t->unit);
		dcr_scatter(t->mem.data, t->unit, x->hpos, x->hval, m, 0);
		return 0;
	}
	void *s = x->o->stream;
	if ((r = dcr_cuda_copy(x->d_gaps, gaps, m * 4, DCR_CUDA_H2D, s, e)) ||
	    (r = dcr_cuda_copy(x->d_vals, vals, m * t->unit, DCR_CUDA_H2D, s, e)) ||
	    (r = dcr_cuda_positions(x->d_gaps, m, b->first, x->d_pos, x->d_scan, x->scan_bytes, s,
				    e)) ||
	    (r = dcr_cuda_scatter(t->mem.data, t->units, t->unit, x->d_pos, x->d_vals, m,
				  DCR_ENC_OVERWRITE, s, e)))
		return r;
	return 0;
}

/* ---- 3. resolve and verify ---- */

static int add_change(struct mctx *x, struct mt *t, uint64_t p, uint64_t v, struct dcr_err *e)
{
	uint64_t g = p - t->next;
	if (t->n >= t->total || p < t->next)
		return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': changes out of order", x->what,
				   t->t->name);
	if (t->n % x->batch == 0 || g > UINT32_MAX) {
		if (t->nb == t->bcap) {
			size_t cap = t->bcap ? 2 * t->bcap : 8;
			struct batch *nb = realloc(t->b, cap * sizeof(*nb));
			if (!nb)
				return dcr_err_sys(e, ENOMEM, "apply");
			t->b = nb;
			t->bcap = cap;
		}
		t->b[t->nb++] = (struct batch){t->n, g > UINT32_MAX ? p : t->next};
		if (g > UINT32_MAX)
			g = 0;
	}
	t->gaps[t->n] = (uint32_t)g;
	store_unit(t->vals + t->n * t->unit, t->unit, v);
	t->n++;
	t->next = p + 1;
	return 0;
}

static int verify_tensor(struct mctx *x, struct mt *t, const struct mitem *items, int allow_xor,
			 struct dcr_err *e)
{
	unsigned unit = t->unit;
	uint64_t done = 0; /* bytes hashed */
	int r = td_begin(x, t, e);
	if (r)
		return r;
	if (t->total) {
		t->gaps = malloc(t->total * 4);
		t->vals = malloc(t->total * unit);
		if (!t->gaps || !t->vals)
			return dcr_err_sys(e, ENOMEM, "apply: changes of '%s'", t->t->name);
	}
	for (size_t j = t->i0; j < t->i0 + t->ni; j++) {
		const struct dcr_item *it = &items[j].it;
		struct dcr_item unz;
		if (items[j].zlen) {
			/* squeezed while held (HELD_PLAIN) */
			unz = *it;
			if (dcr_buf_reserve(&x->data, it->data_len + 1))
				return dcr_err_sys(e, ENOMEM, "apply");
			size_t got = ZSTD_decompress(x->data.p, it->data_len, it->data,
						     items[j].zlen);
			if (ZSTD_isError(got) || got != it->data_len)
				return dcr_err_set(e, -EIO, "%s: an item held for '%s' is lost",
						   x->what, t->t->name);
			unz.data = x->data.p;
			it = &unz;
		}
		uint64_t s = it->start * unit, l = it->len * unit;
		if ((r = dcr_item_check_range(it, t->units, x->what, t->t->name, e)))
			return r;
		if (s < done)
			return dcr_err_set(e, DCR_EFORMAT, "%s: overlapping items for '%s'", x->what,
					   t->t->name);
		if (it->enc == DCR_ENC_XOR && (t->isnew || !allow_xor))
			return dcr_err_set(e, DCR_EFORMAT,
					   t->isnew ? "%s: XOR item for the new tensor '%s'"
						    : "%s: XOR item for '%s' from an alternative base",
					   x->what, t->t->name);
		if ((r = hash_bytes(x, t, done, s - done, e)))
			return r;
		x->tmp.len = 0;
		if (dcr_buf_reserve(&x->tmp, (size_t)l + 8))
			return dcr_err_sys(e, ENOMEM, "apply");
		if ((r = read_bytes(x, t, s, (size_t)l, x->tmp.p, e)))
			return r;
		/* the payloads' bytes are the manifest's (checked): an XOR item
		 * whose values do not decode against these bits (the delta codec
		 * codes them against the base's) says the bits are not the base */
		if ((r = dcr_item_resolve(it, unit, x->tmp.p, &x->ch, e))) {
			if (it->enc != DCR_ENC_XOR || r != DCR_EFORMAT)
				return r;
			char why[sizeof(e->msg)];
			memcpy(why, e->msg, sizeof(why));
			return dcr_err_set(e, DCR_EDIGEST,
					   "%s: tensor '%s' would not match its target digest: its changes at %llu do not decode against the bits in memory (%s; nothing was written)",
					   x->what, t->t->name, (unsigned long long)it->start, why);
		}
		dcr_scatter(x->tmp.p, unit, x->ch.pos, x->ch.val, x->ch.n, 0);
		dcr_tdigest_update(x->td, x->tmp.p, (size_t)l);
		for (size_t k = 0; k < x->ch.n; k++)
			if ((r = add_change(x, t, it->start + x->ch.pos[k], x->ch.val[k], e)))
				return r;
		done = s + l;
	}
	if ((r = hash_bytes(x, t, done, t->nbytes - done, e)))
		return r;
	if (!td_matches(x, t))
		return dcr_err_set(e, DCR_EDIGEST,
				   "%s: tensor '%s' would not match its target digest: the pack does not fit the bits in memory (nothing was written)",
				   x->what, t->t->name);
	return 0;
}

/* A tensor no item touches must already hold its target digest. */
static int check_untouched(struct mctx *x, struct mt *t, struct dcr_err *e)
{
	int r = td_begin(x, t, e);
	if (r || (r = hash_bytes(x, t, 0, t->nbytes, e)))
		return r;
	if (!td_matches(x, t))
		return dcr_err_set(e, DCR_EDIGEST,
				   "%s: tensor '%s', which the pack leaves as it is, does not match its target digest (nothing was written)",
				   x->what, t->t->name);
	return 0;
}

/* ---- 4. writes ---- */

static int write_tensor(struct mctx *x, struct mt *t, struct dcr_err *e)
{
	int r;
	if (t->isnew && t->nbytes) {
		if (!is_dev(t))
			memset(t->mem.data, 0, (size_t)t->nbytes);
		else if ((r = dcr_cuda_fill(t->mem.data, 0, (size_t)t->nbytes, x->o->stream, e)))
			return r;
	}
	for (size_t i = 0; i < t->nb; i++) {
		size_t end = i + 1 < t->nb ? t->b[i + 1].k0 : t->n;
		if ((r = write_batch(x, t, &t->b[i], end - t->b[i].k0, e)))
			return r;
	}
	return 0;
}

static int setup_device(struct mctx *x, struct dcr_err *e)
{
	int r;
	if ((r = dcr_cuda_probe(e)) || (r = dcr_cuda_host_alloc((void **)&x->stage, STAGE_BYTES, e)) ||
	    (r = dcr_cuda_positions_scratch(x->batch, &x->scan_bytes, e)) ||
	    (r = dcr_cuda_malloc(&x->d_gaps, x->batch * 4, e)) ||
	    (r = dcr_cuda_malloc(&x->d_vals, x->batch * 8, e)) ||
	    (r = dcr_cuda_malloc(&x->d_pos, x->batch * 8, e)) ||
	    (r = dcr_cuda_malloc(&x->d_scan, x->scan_bytes, e)))
		return r;
	return 0;
}

static void progress(struct mctx *x, const struct mt *t)
{
	x->hashed += t->nbytes;
	if (x->o->progress)
		x->o->progress(x->o->progress_ctx, x->hashed, x->to_hash);
}

/* Every item's tensor is the manifest's, of the same dtype and size;
 * the items sorted by tensor. */
static int match_items(struct items *s, const struct dcr_manifest *m, const char *what,
		       struct dcr_err *e)
{
	for (size_t i = 0; i < s->n; i++) {
		const struct dcr_delta_tensor *t = manifest_find(m, s->v[i].name, &s->v[i].tensor);
		if (!t)
			return dcr_err_set(e, DCR_EFORMAT, "%s: item for '%s', which the manifest lacks",
					   what, s->v[i].name);
		if (t->dtype != s->v[i].dtype || t->nelem != s->v[i].nelem)
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s: '%s' has another dtype or size in its payload than in the manifest",
					   what, t->name);
	}
	if (s->n)
		qsort(s->v, s->n, sizeof(*s->v), cmp_mitem);
	return 0;
}

/* The tensors the apply looks at, into mts[0..*nmt): those items touch or
 * that are new, every one with o->check_all; each looked up (once) and its
 * items checked. */
static int plan_tensors(struct mctx *x, const struct items *s, const struct dcr_manifest *m,
			struct mt *mts, size_t *nmt, int *any_dev, int *any_host, struct dcr_err *e)
{
	int r;
	for (size_t i = 0, j = 0; i < m->ntensors; i++) {
		struct mt *t = &mts[*nmt];
		memset(t, 0, sizeof(*t));
		t->t = &m->tensors[i];
		t->unit = dcr_dtype_unit(t->t->dtype);
		t->nbytes = t->t->nelem * dcr_dtype_bits(t->t->dtype) / 8;
		t->units = t->nbytes / t->unit;
		t->isnew = (t->t->flags & DCR_TENSOR_NEW) != 0;
		t->i0 = j;
		while (j < s->n && s->v[j].tensor == i)
			t->total += s->v[j++].it.n;
		t->ni = j - t->i0;
		if ((r = check_items(x, t, s->v, e)))
			return r;
		t->write = t->ni || t->isnew;
		if (!t->write && !x->o->check_all)
			continue;
		if ((r = look_up(x, t, e)))
			return r;
		*any_dev |= is_dev(t);
		*any_host |= !is_dev(t) && t->write;
		x->to_hash += t->nbytes;
		(*nmt)++;
	}
	return 0;
}

int dcr_apply_mem(struct dcr_pack_in *in, const struct dcr_mem_apply_opts *o,
		  struct dcr_mem_apply_result *res, struct dcr_err *e)
{
	struct mctx x = {.o = o};
	struct items s = {0};
	struct dcr_manifest m = {0};
	struct mt *mts = NULL;
	size_t nmt = 0;
	int r, allow_xor, already, any_dev = 0, any_host = 0;
	struct dcr_mem_apply_result tmp;
	if (!res)
		res = &tmp;
	memset(res, 0, sizeof(*res));
	if (!o || !o->lookup)
		return dcr_err_set(e, -EINVAL, "dcr_apply_mem: no lookup function");
	x.what = o->what ? o->what : "pack";
	x.batch = o->batch ? o->batch : DEFAULT_BATCH;
	if (x.batch > (1u << 28))
		x.batch = 1u << 28;
	s.plain = o->held_plain ? o->held_plain : HELD_PLAIN;

	/* 1. the whole pack */
	if ((r = read_pack(in, x.what, o->trust, &s, &m, e)))
		goto out;
	res->base = m.base;
	res->target = m.target;
	memcpy(res->attempt, m.attempt, 16);
	res->removed = m.nremoved;
	if ((r = check_base(o, &m, &allow_xor, &already, x.what, e)))
		goto out;
	if (already) {
		res->already = 1;
		res->base = *o->base;
		goto out;
	}
	if (o->base)
		res->base = *o->base;

	/* 2. items against the manifest; the tensors they touch */
	if ((r = match_items(&s, &m, x.what, e)))
		goto out;
	if (!(mts = dcr_calloc(m.ntensors ? m.ntensors : 1, sizeof(*mts)))) {
		r = dcr_err_sys(e, ENOMEM, "apply");
		goto out;
	}
	if ((r = plan_tensors(&x, &s, &m, mts, &nmt, &any_dev, &any_host, e)))
		goto out;
	if (any_dev && (r = setup_device(&x, e)))
		goto out;
	if (any_host && (!(x.hpos = malloc(x.batch * 8)) || !(x.hval = malloc(x.batch * 8)))) {
		r = dcr_err_sys(e, ENOMEM, "apply");
		goto out;
	}

	/* 3. every tensor's new bytes against its target digest */
	for (size_t i = 0; i < nmt; i++) {
		struct mt *t = &mts[i];
		r = t->write ? verify_tensor(&x, t, s.v, allow_xor, e) : check_untouched(&x, t, e);
		if (r)
			goto out;
		if (t->write)
			for (size_t j = t->i0; j < t->i0 + t->ni; j++) {
				free((void *)s.v[j].it.data);
				s.v[j].it.data = NULL;
			}
		res->tensors_checked++;
		progress(&x, t);
	}

	/* 4. write */
	for (size_t i = 0; i < nmt; i++) {
		struct mt *t = &mts[i];
		if (!t->write)
			continue;
		if ((r = write_tensor(&x, t, e)))
			break;
		res->tensors_written++;
	}
	if (any_dev) {
		int r2 = dcr_cuda_sync(o->stream, r ? NULL : e);
		if (!r)
			r = r2;
	}
	if (r) {
		char msg[sizeof(e->msg)];
		memcpy(msg, e->msg, sizeof(msg));
		dcr_err_set(e, r, "%s (writing: tensors may be partly written)", msg);
		goto out;
	}
	res->items = s.n;
	res->changes = s.nchanges;
out:
	for (size_t i = 0; i < nmt; i++) {
		free(mts[i].gaps);
		free(mts[i].vals);
		free(mts[i].b);
	}
	free(mts);
	if (any_dev) {
		dcr_cuda_host_free(x.stage);
		dcr_cuda_free(x.d_gaps);
		dcr_cuda_free(x.d_vals);
		dcr_cuda_free(x.d_pos);
		dcr_cuda_free(x.d_scan);
	}
	free(x.hpos);
	free(x.hval);
	dcr_buf_free(&x.tmp);
	dcr_buf_free(&x.data);
	dcr_changes_free(&x.ch);
	dcr_tdigest_free(x.td);
	dcr_manifest_release(&m);
	items_free(&s);
	return r;
}
