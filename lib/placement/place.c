/* place.c - place a canonical delta into one serving rank's files.
 *
 * 1. Finish an interrupted apply (dcr_apply_recover), then take the
 *    receiver's current state S0 (and per-tensor digests).
 * 2. Read the canonical delta (partial or full; its items must decode
 *    without the receiver's bits: PLAIN). Every item's changed canonical
 *    indices go through dcr_layout_place; the hits on this rank's stored
 *    tensors (replicas included) are kept per stored tensor:
 *      affine piece:   the canonical XOR mask or new bits, unchanged;
 *      residual piece: an overwrite with the inverse transform of the new
 *                      canonical value; for an XOR item the old canonical
 *                      value is the forward transform of the stored bits.
 * 3. Each touched stored tensor is read once through a bounded buffer, the
 *    changes resolved against its bits and the new bytes hashed: that gives
 *    an ordinary delta from S0 to S1 (XOR items for affine placements,
 *    OVERWRITE items for residual ones, a digest for every tensor).
 * 4. .dcr/layout-applied records (delta id, S0, S1, canonical base and
 *    target), then dcr_apply takes the delta: staging, journal, replay and
 *    digest checks are the core's. A rerun with the same delta after a
 *    crash finds the receiver at S1 and the record naming it: done, instead
 *    of XOR-ing the same masks twice.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/file.h"
#include "core/state.h"
#include "core/util.h"
#include "placement/place.h"
#include "refit/commit.h"

#define READ_ELEMS (1u << 20)

enum { PL_XOR, PL_SET, PL_RXOR }; /* mask; new bits; residual mask on canonical */

struct pchg {
	uint64_t s;     /* stored flat index */
	uint64_t v;
	uint32_t piece;
	uint8_t kind;
};

struct pvec {
	struct pchg *v;
	size_t n, cap;
};

static int pchg_cmp(const void *a, const void *b)
{
	const struct pchg *x = a, *y = b;
	return x->s < y->s ? -1 : x->s > y->s;
}

struct hsrc {
	struct dcr_source in;
	struct dcr_sha *sha;
};

static int hsrc_read(void *ctx, void *p, size_t n)
{
	struct hsrc *h = ctx;
	int r = h->in.read(h->in.ctx, p, n);
	if (!r)
		dcr_sha_update(h->sha, p, n);
	return r;
}

struct msrc {
	const uint8_t *p;
	size_t len, off;
};

static int msrc_read(void *ctx, void *p, size_t n)
{
	struct msrc *m = ctx;
	if (n > m->len - m->off)
		return -EPIPE;
	memcpy(p, m->p + m->off, n);
	m->off += n;
	return 0;
}

static int buf_sink(void *ctx, const void *p, size_t n)
{
	return dcr_buf_add(ctx, p, n) ? -ENOMEM : 0;
}

/* ---- .dcr/layout-applied ---- */

struct placed {
	dcr_digest delta, before, after, cbase, ctarget;
	dcr_digest source; /* with --replica: the canonical delta resolved into delta */
	int have_source;
};

static const char *placed_keys[] = {"delta", "before", "after", "canonical-base",
				    "canonical-target"};

static int placed_read(struct dcr_receiver *rc, struct placed *pl)
{
	char *path = dcr_receiver_path(rc, "layout-applied");
	uint8_t *buf = NULL;
	size_t len;
	struct dcr_err ignore;
	int ok = path && !dcr_read_file(path, 4096, &buf, &len, &ignore);
	free(path);
	if (!ok)
		return -1;
	dcr_digest *f[] = {&pl->delta, &pl->before, &pl->after, &pl->cbase, &pl->ctarget};
	char *s = (char *)buf;
	int got = 0;
	for (int k = 0; k < 5; k++) {
		char key[32], hex[80];
		int n = 0;
		if (sscanf(s, "%31s %79s\n%n", key, hex, &n) != 2 || strcmp(key, placed_keys[k]) ||
		    dcr_digest_parse_hex(hex, f[k]))
			break;
		s += n;
		got++;
	}
	char hex[80];
	pl->have_source = got == 5 && sscanf(s, "source %79s", hex) == 1 &&
			  !dcr_digest_parse_hex(hex, &pl->source);
	free(buf);
	return got == 5 ? 0 : -1;
}

static int placed_write(struct dcr_receiver *rc, const struct placed *pl, struct dcr_err *e)
{
	const dcr_digest *f[] = {&pl->delta, &pl->before, &pl->after, &pl->cbase, &pl->ctarget};
	char text[600], hex[65];
	size_t n = 0;
	for (int k = 0; k < 5; k++) {
		dcr_digest_hex(f[k], hex);
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%s %s\n", placed_keys[k], hex);
	}
	if (pl->have_source) {
		dcr_digest_hex(&pl->source, hex);
		n += (size_t)snprintf(text + n, sizeof(text) - n, "source %s\n", hex);
	}
	char *path = dcr_receiver_path(rc, "layout-applied");
	if (!path)
		return dcr_err_sys(e, ENOMEM, "placement");
	int r = dcr_write_file_atomic(path, text, n, e);
	free(path);
	return r;
}

/* ---- old canonical bits, read through the map ---- */

/* The receivers' checkpoints by serving rank (NULL where not held), for
 * items coded against the receiver's bits: their old canonical bits are
 * read from the stored tensors that hold them. */
struct gather {
	const struct dcr_layout *L;
	struct dcr_ckpt *const *ck;	/* [nranks] */
	uint32_t nranks;
	const struct dcr_ckpt_tensor **ct; /* per map tensor, found lazily */
	uint8_t *looked;
	struct dcr_buf bits, known;	/* one range's bits, and which are known */
	/* dcr_layout_piece_runs' callback state */
	const struct dcr_layout_piece *p;
	const struct dcr_ckpt_tensor *t;
	int sdt, cdt;
	unsigned unit;
	uint64_t start, len;
	const char *name;
	int bad;
	uint64_t bad_at;
};

static int gather_run(void *arg, uint64_t sflat, uint64_t cflat, uint64_t len)
{
	struct gather *g = arg;
	uint64_t lo = cflat > g->start ? cflat : g->start;
	uint64_t hi = cflat + len < g->start + g->len ? cflat + len : g->start + g->len;
	unsigned su = dcr_dtype_unit(g->sdt);
	if (lo >= hi)
		return 0;
	if (g->p->kind == DCR_PIECE_AFFINE && g->sdt == g->cdt &&
	    !memchr(g->known.p + (lo - g->start), 1, (size_t)(hi - lo))) {
		/* stored bits are the canonical ones, and none known yet (no
		 * replica to compare with): copied as they are */
		memcpy(g->bits.p + (lo - g->start) * g->unit, g->t->data + (sflat + (lo - cflat)) * su,
		       (size_t)((hi - lo) * su));
		memset(g->known.p + (lo - g->start), 1, (size_t)(hi - lo));
		return 0;
	}
	for (uint64_t cf = lo; cf < hi; cf++) {
		uint64_t sb = load_unit(g->t->data + (sflat + (cf - cflat)) * su, su);
		uint64_t v = g->p->kind == DCR_PIECE_AFFINE
				     ? sb : dcr_xform_forward(g->p->xform, g->sdt, g->cdt, sb);
		size_t k = (size_t)(cf - g->start);
		if (g->known.p[k] && load_unit(g->bits.p + k * g->unit, g->unit) != v) {
			g->bad = 2;
			g->bad_at = cf;
			return 1;
		}
		store_unit(g->bits.p + k * g->unit, g->unit, v);
		g->known.p[k] = 1;
	}
	return 0;
}

/* The old bits of canonical tensor c's elements [start, start + len), in
 * g->bits; DCR_ENOTFOUND (message set) when the ranks held do not hold all
 * of them, DCR_EFORMAT when two replicas disagree. */
static int gather_canon(struct gather *g, uint32_t c, uint64_t start, uint64_t len,
			struct dcr_err *e)
{
	const struct dcr_layout *L = g->L;
	const struct dcr_layout_canon *cn = &L->canon[c];
	unsigned unit = dcr_dtype_unit(cn->dtype);
	size_t nb = (size_t)(len * unit);
	if (!g->ct) {
		g->ct = dcr_calloc(L->ntensors + 1, sizeof(*g->ct));
		g->looked = dcr_calloc(L->ntensors + 1, 1);
		if (!g->ct || !g->looked)
			return dcr_err_sys(e, ENOMEM, "placement");
	}
	/* each buffer sized on its own (a range of a narrower dtype needs
	 * fewer bytes but more elements than a wider one of as many bytes);
	 * an empty range too gets buffers */
	if (dcr_buf_reserve(&g->bits, nb + 1) || dcr_buf_reserve(&g->known, (size_t)len + 1))
		return dcr_err_sys(e, ENOMEM, "placement");
	memset(g->known.p, 0, (size_t)len);
	*g = (struct gather){.L = g->L, .ck = g->ck, .nranks = g->nranks, .ct = g->ct,
			     .looked = g->looked, .bits = g->bits, .known = g->known,
			     .cdt = cn->dtype, .unit = unit, .start = start, .len = len,
			     .name = cn->name};
	for (size_t k = 0; k < cn->npieces && !g->bad; k++) {
		const struct dcr_layout_piece *p = &L->pieces[cn->pieces[k]];
		if (p->clo >= start + len || p->chi <= start)
			continue;
		const struct dcr_layout_tensor *lt = &L->tensors[p->tensor];
		if (lt->rank >= g->nranks || !g->ck[lt->rank])
			continue;
		if (!g->looked[p->tensor]) {
			const struct dcr_ckpt_tensor *t = dcr_ckpt_find(g->ck[lt->rank], lt->name);
			g->ct[p->tensor] = dcr_ckpt_tensor_is(t, lt->dtype, lt->ndim, lt->shape) ? t : NULL;
			g->looked[p->tensor] = 1;
		}
		if (!g->ct[p->tensor])
			continue;
		g->p = p;
		g->t = g->ct[p->tensor];
		g->sdt = lt->dtype;
		dcr_layout_piece_runs(p, gather_run, g);
	}
	if (g->bad == 2)
		return dcr_err_set(e, DCR_EFORMAT,
				   "replicas of element %llu of '%s' differ between the ranks' files",
				   (unsigned long long)g->bad_at, cn->name);
	for (uint64_t k = 0; k < len; k++)
		if (!g->known.p[k])
			return dcr_err_set(e, DCR_ENOTFOUND,
					   "element %llu of '%s' is held by no rank given",
					   (unsigned long long)(start + k), cn->name);
	return 0;
}

/* An item coded against the receiver's bits, resolved through g: its
 * positions and XOR masks (new ^ old canonical bits) in ch. */
static int resolve_canon(struct gather *g, uint32_t c, const struct dcr_item *it,
			 struct dcr_changes *ch, struct dcr_err *e)
{
	const struct dcr_layout_canon *cn = &g->L->canon[c];
	unsigned unit = dcr_dtype_unit(cn->dtype);
	int r = gather_canon(g, c, it->start, it->len, e);
	if (r == DCR_ENOTFOUND)
		return dcr_err_set(e, DCR_EFORMAT,
				   "'%s' [%llu, %llu) is coded against the receiver's bits (codec %s), and these files hold only part of it: apply the delta over every rank of the replica (dcr-apply --layout MAP --replica DIR) or make it with dcr-diff --codec plain",
				   cn->name, (unsigned long long)it->start,
				   (unsigned long long)(it->start + it->len), dcr_codec_name(it->codec));
	if (r || (r = dcr_item_resolve(it, unit, g->bits.p, ch, e)))
		return r;
	for (size_t k = 0; k < ch->n; k++)
		ch->val[k] ^= load_unit(g->bits.p + ch->pos[k] * unit, unit);
	return 0;
}

static void gather_free(struct gather *g)
{
	free(g->ct);
	free(g->looked);
	dcr_buf_free(&g->bits);
	dcr_buf_free(&g->known);
}

/* ---- reading the canonical delta into per-tensor placements ---- */

/* The map's canonical tensor for the delta what's TENSOR record t: its
 * index, or DCR_EFORMAT where the map lacks it or has it with another
 * dtype or shape. */
static int canon_for(const struct dcr_layout *L, const struct dcr_delta_tensor *t,
		     const char *what, uint32_t *c, struct dcr_err *e)
{
	int k = dcr_layout_find_canon(L, t->name);
	const struct dcr_layout_canon *cn = k >= 0 ? &L->canon[k] : NULL;
	if (!cn)
		return dcr_err_set(e, DCR_EFORMAT, "%s: canonical tensor '%s' is not in the layout map",
				   what, t->name);
	if (cn->dtype != t->dtype || cn->ndim != t->ndim ||
	    memcmp(cn->shape, t->shape, t->ndim * sizeof(uint64_t)))
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: tensor '%s' has another dtype or shape than in the layout map",
				   what, t->name);
	*c = (uint32_t)k;
	return 0;
}

/* A canonical delta's TENSOR records as a placement reads them (a rank's,
 * or a replica's resolution), and the checks its items get from them. */
struct tdecl {
	uint32_t *canon_of; /* per TENSOR record: map canonical index */
	uint32_t *tflags;   /* per TENSOR record: its flags */
	uint8_t *seen;      /* per canonical tensor: declared */
	size_t n, cap;
};

/* TENSOR record t of the delta what, declared: its canonical tensor must
 * be in the map (canon_for) and declared once (two records of one tensor
 * would each have their own items and digest, and together make bits
 * neither digest holds). */
static int tdecl_add(struct tdecl *d, const struct dcr_layout *L,
		     const struct dcr_delta_tensor *t, const char *what, struct dcr_err *e)
{
	uint32_t c = 0;
	int r = canon_for(L, t, what, &c, e);
	if (r)
		return r;
	if (!d->seen && !(d->seen = dcr_calloc(L->ncanon + 1, 1)))
		return dcr_err_sys(e, ENOMEM, "placement");
	if (d->seen[c])
		return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s' is declared twice", what,
				   L->canon[c].name);
	d->seen[c] = 1;
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 256;
		uint32_t *a = realloc(d->canon_of, cap * sizeof(*a));
		if (a)
			d->canon_of = a;
		uint32_t *b = a ? realloc(d->tflags, cap * sizeof(*b)) : NULL;
		if (!b)
			return dcr_err_sys(e, ENOMEM, "placement");
		d->tflags = b;
		d->cap = cap;
	}
	d->canon_of[d->n] = c;
	d->tflags[d->n++] = t->flags;
	return 0;
}

/* Item it of the delta what, checked against the records declared before
 * it: its tensor declared (*c: its canonical index), its range within it,
 * and no XOR item for a new tensor (it has no base bits). */
static int tdecl_item(const struct tdecl *d, const struct dcr_layout *L,
		      const struct dcr_item *it, const char *what, uint32_t *c, struct dcr_err *e)
{
	if (it->tensor >= d->n)
		return dcr_err_set(e, DCR_EFORMAT, "%s: item for undeclared tensor %u", what,
				   it->tensor);
	*c = d->canon_of[it->tensor];
	const struct dcr_layout_canon *cn = &L->canon[*c];
	int r = dcr_item_check_range(it, cn->nelem, what, cn->name, e);
	if (!r && it->enc == DCR_ENC_XOR && (d->tflags[it->tensor] & DCR_TENSOR_NEW))
		r = dcr_err_set(e, DCR_EFORMAT, "%s: XOR item for '%s', which is not in the base",
				what, cn->name);
	return r;
}

static void tdecl_free(struct tdecl *d)
{
	free(d->canon_of);
	free(d->tflags);
	free(d->seen);
}

struct pctx {
	const struct dcr_layout *L;
	uint32_t rank;
	struct pvec *pt;        /* per map tensor */
	struct tdecl td;
	uint64_t items, changes, placed;
	struct dcr_changes ch;
	uint64_t *idx;
	size_t idx_cap;
	struct gather *g;	/* for items coded against the receiver's bits */
	int deferred;		/* the first such item that did not resolve */
	struct dcr_err derr;
};

/* What neither placement takes, refused as the record arrives (a replica
 * before its resolved delta is kept, so that nothing of it stays behind). */
static int refuse_remove(const char *what, struct dcr_err *e)
{
	return dcr_err_set(e, DCR_EFORMAT, "%s removes a tensor; placement through a layout map cannot",
			   what);
}

static int place_item(struct pctx *x, const struct dcr_item *it, const char *what,
		      struct dcr_err *e)
{
	const struct dcr_layout *L = x->L;
	uint32_t c;
	int r = tdecl_item(&x->td, L, it, what, &c, e);
	if (r)
		return r;
	const struct dcr_layout_canon *cn = &L->canon[c];
	unsigned unit = dcr_dtype_unit(cn->dtype);
	if (dcr_item_needs_base(it)) {
		/* against bits this receiver may already have changed (a rerun
		 * after a crash): keep reading, and decide once the delta is
		 * known (placed before, or not) */
		struct dcr_err ie = {0};
		r = x->g ? resolve_canon(x->g, c, it, &x->ch, &ie)
			 : dcr_err_set(&ie, DCR_EFORMAT, "item for '%s' is coded against the receiver's bits",
				       cn->name);
		if (r) {
			if (!x->deferred) {
				x->deferred = r;
				x->derr = ie;
			}
			x->items++;
			x->changes += it->n;
			return 0;
		}
	} else if ((r = dcr_item_decode(it, unit, &x->ch, e))) {
		return r;
	}
	x->items++;
	x->changes += x->ch.n;
	if (x->ch.n > x->idx_cap) {
		uint64_t *ni = realloc(x->idx, x->ch.n * sizeof(*ni));
		if (!ni)
			return dcr_err_sys(e, ENOMEM, "placement");
		x->idx = ni;
		x->idx_cap = x->ch.n;
	}
	for (size_t k = 0; k < x->ch.n; k++)
		x->idx[k] = it->start + x->ch.pos[k];
	struct dcr_layout_hit *h;
	size_t nh;
	if ((r = dcr_layout_place(L, c, x->idx, x->ch.n, &h, &nh, e)))
		return r;
	for (size_t k = 0; k < nh && !r; k++) {
		const struct dcr_layout_tensor *lt = &L->tensors[h[k].tensor];
		if (lt->rank != x->rank)
			continue;
		const struct dcr_layout_piece *p = &L->pieces[h[k].piece];
		uint64_t val = x->ch.val[h[k].pos];
		struct pchg pc = {.s = h[k].stored, .piece = h[k].piece};
		if (p->kind == DCR_PIECE_AFFINE) {
			pc.kind = it->enc == DCR_ENC_XOR ? PL_XOR : PL_SET;
			pc.v = val;
		} else if (it->enc == DCR_ENC_XOR) {
			pc.kind = PL_RXOR;
			pc.v = val;
		} else {
			pc.kind = PL_SET;
			pc.v = dcr_xform_inverse(p->xform, lt->dtype, cn->dtype, val);
		}
		struct pvec *v = &x->pt[h[k].tensor];
		if (v->n == v->cap) {
			size_t cap = v->cap ? v->cap * 2 : 256;
			struct pchg *nv = realloc(v->v, cap * sizeof(*nv));
			if (!nv) {
				r = dcr_err_sys(e, ENOMEM, "placement");
				break;
			}
			v->v = nv;
			v->cap = cap;
		}
		v->v[v->n++] = pc;
		x->placed++;
	}
	free(h);
	return r;
}

static int read_canonical(struct pctx *x, struct dcr_delta_reader *rd, struct dcr_err *e)
{
	const struct dcr_layout *L = x->L;
	struct dcr_delta_rec rec;
	int r;
	while ((r = dcr_delta_next(rd, &rec, e)) == 1) {
		switch (rec.type) {
		case DCR_REC_TENSOR: {
			struct dcr_delta_tensor t;
			if ((r = dcr_delta_parse_tensor(&rec, &t, e)))
				return r;
			r = tdecl_add(&x->td, L, &t, rd->what, e);
			dcr_delta_tensor_clear(&t);
			if (r)
				return r;
			break;
		}
		case DCR_REC_ITEM: {
			struct dcr_item it;
			if ((r = dcr_delta_parse_item(&rec, &it, e)) ||
			    (r = place_item(x, &it, rd->what, e)))
				return r;
			break;
		}
		case DCR_REC_REMOVE:
			return refuse_remove(rd->what, e);
		default:
			break; /* DONE: canonical digests; END: checked below; ancillary */
		}
	}
	if (r < 0)
		return r;
	return dcr_delta_check_end(rd, x->td.n, x->items, x->changes, e);
}

/* ---- resolving one stored tensor ---- */

static int resolve_tensor(const struct dcr_layout *L, uint32_t t, struct pvec *v,
			  const struct dcr_ckpt_tensor *ct, uint8_t *buf, uint32_t tidx,
			  struct dcr_buf *recs, uint64_t *nitems, uint64_t *nchanges,
			  dcr_digest *digest, struct dcr_err *e)
{
	const struct dcr_layout_tensor *lt = &L->tensors[t];
	unsigned unit = dcr_dtype_unit(lt->dtype);
	if (v->n > 1)
		qsort(v->v, v->n, sizeof(*v->v), pchg_cmp);
	for (size_t i = 1; i < v->n; i++)
		if (v->v[i].s == v->v[i - 1].s)
			return dcr_err_set(e, DCR_EFORMAT,
					   "element %llu of '%s' is changed twice (the delta repeats a canonical element)",
					   (unsigned long long)v->v[i].s, lt->name);
	struct dcr_tdigest *td = dcr_tdigest_new(ct->info->dtype, ct->info->ndim, ct->info->shape);
	struct dcr_changes ch = {0};
	struct dcr_buf enc = {0};
	uint8_t *kinds = malloc(v->n + 1);
	int r = 0;
	if (!td || !kinds || dcr_changes_reserve(&ch, v->n + 1)) {
		r = dcr_err_sys(e, ENOMEM, "placement");
		goto out;
	}
	/* new bits per change (ch.val), and whether it goes as XOR */
	size_t k = 0, n = 0;
	for (uint64_t s = 0; s < lt->nelem; s += READ_ELEMS) {
		uint64_t len = lt->nelem - s < READ_ELEMS ? lt->nelem - s : READ_ELEMS;
		if ((r = dcr_pread_full(ct->fd, buf, (size_t)(len * unit), ct->file_off + s * unit))) {
			r = dcr_err_sys(e, r, "cannot read tensor '%s'", lt->name);
			goto out;
		}
		for (; k < v->n && v->v[k].s < s + len; k++) {
			const struct pchg *pc = &v->v[k];
			uint8_t *at = buf + (pc->s - s) * unit;
			uint64_t old = load_unit(at, unit), nw;
			if (pc->kind == PL_XOR) {
				nw = old ^ pc->v;
			} else if (pc->kind == PL_SET) {
				nw = pc->v;
			} else {
				const struct dcr_layout_piece *p = &L->pieces[pc->piece];
				int cdt = L->canon[p->canon].dtype;
				uint64_t co = dcr_xform_forward(p->xform, lt->dtype, cdt, old);
				nw = dcr_xform_inverse(p->xform, lt->dtype, cdt, co ^ pc->v);
			}
			if (nw == old)
				continue;
			store_unit(at, unit, nw);
			int affine = L->pieces[pc->piece].kind == DCR_PIECE_AFFINE;
			ch.pos[n] = pc->s;
			ch.val[n] = affine ? old ^ nw : nw;
			kinds[n++] = affine ? DCR_ENC_XOR : DCR_ENC_OVERWRITE;
		}
		dcr_tdigest_update(td, buf, (size_t)(len * unit));
	}
	if (dcr_tdigest_final(td, digest)) {
		r = dcr_err_set(e, -EINVAL, "placement: tensor '%s' was not hashed whole", lt->name);
		goto out;
	}
	/* items: runs of one encoding, at most 1Mi elements each */
	struct dcr_changes sub = {0};
	for (size_t i = 0; i < n && !r;) {
		uint64_t start = ch.pos[i];
		size_t j = i;
		while (j < n && kinds[j] == kinds[i] && ch.pos[j] - start < READ_ELEMS)
			j++;
		if (dcr_changes_reserve(&sub, j - i)) {
			r = dcr_err_sys(e, ENOMEM, "placement");
			break;
		}
		for (size_t q = i; q < j; q++) {
			sub.pos[q - i] = ch.pos[q] - start;
			sub.val[q - i] = ch.val[q];
		}
		sub.n = j - i;
		struct dcr_item it = {.tensor = tidx, .enc = kinds[i], .start = start,
				      .len = ch.pos[j - 1] - start + 1, .n = j - i};
		enc.len = 0;
		if ((r = dcr_item_encode(&sub, unit, it.len, 0, &it.codec, &enc, e)))
			break;
		it.data = enc.p;
		it.data_len = enc.len;
		if (dcr_delta_item_record(recs, &it))
			r = dcr_err_sys(e, ENOMEM, "placement");
		(*nitems)++;
		*nchanges += it.n;
		i = j;
	}
	dcr_changes_free(&sub);
out:
	dcr_tdigest_free(td);
	dcr_changes_free(&ch);
	dcr_buf_free(&enc);
	free(kinds);
	return r;
}

/* ---- the whole placement ---- */

/* What the placement's steps share: the rank's map and the changes placed
 * on it, the receiver's checkpoint and state, the canonical delta's reader
 * (hashing what it reads), the placed delta being written, and the
 * placement record. */
struct place {
	struct pctx x;
	struct dcr_receiver *rc;
	struct dcr_ckpt *c;
	dcr_digest *dg, cur;
	struct hsrc hs;
	struct dcr_delta_reader rd;
	int rd_inited;
	struct dcr_delta_writer w;
	struct dcr_buf out, recs;	/* the placed delta; one tensor's items */
	struct dcr_state_entry *ent;	/* the placed delta's target state */
	uint8_t *buf;
	struct placed pl;
};

/* Rank `rank`'s stored tensors must all be in its checkpoint c (in dir),
 * with the dtype and shape the map says. */
static int check_rank(const struct dcr_layout *L, uint32_t rank, const struct dcr_ckpt *c,
		      const char *dir, struct dcr_err *e)
{
	int any = 0;
	for (uint32_t t = 0; t < L->ntensors; t++) {
		const struct dcr_layout_tensor *lt = &L->tensors[t];
		if (lt->rank != rank)
			continue;
		any = 1;
		const struct dcr_ckpt_tensor *ct = dcr_ckpt_find(c, lt->name);
		if (!ct)
			return dcr_err_set(e, DCR_ENOTFOUND, "receiver '%s' has no tensor '%s' (rank %u of the map)",
					   dir, lt->name, (unsigned)rank);
		if (!dcr_ckpt_tensor_is(ct, lt->dtype, lt->ndim, lt->shape))
			return dcr_err_set(e, DCR_EFORMAT,
					   "receiver '%s': tensor '%s' does not match the map (dtype or shape)",
					   dir, lt->name);
	}
	if (!any)
		return dcr_err_set(e, DCR_ENOTFOUND, "the layout map has no rank %u", (unsigned)rank);
	return 0;
}

/* Read and place the canonical delta (head, then the source), which must
 * end at its trailer; pc->pl gets its digest, its ids and the receiver's
 * state before it. */
static int read_delta(struct place *pc, const uint8_t *head, size_t head_len, const char *what,
		      struct dcr_err *e)
{
	const struct dcr_source src = pc->hs.in;
	int r;
	pc->x.pt = dcr_calloc(pc->x.L->ntensors + 1, sizeof(*pc->x.pt));
	pc->hs.sha = dcr_sha_new();
	pc->buf = malloc((size_t)READ_ELEMS * 8);
	if (!pc->x.pt || !pc->hs.sha || !pc->buf)
		return dcr_err_sys(e, ENOMEM, "placement");
	if (head_len)
		dcr_sha_update(pc->hs.sha, head, head_len);
	r = dcr_delta_reader_init_flags(&pc->rd, (struct dcr_source){hsrc_read, &pc->hs}, head,
					head_len, DCR_DELTA_PARTIAL, what, e);
	pc->rd_inited = 1;
	if (r || (r = read_canonical(&pc->x, &pc->rd, e)))
		return r;
	uint8_t extra;
	int q = src.read(src.ctx, &extra, 1);
	if (q == 0)
		return dcr_err_set(e, DCR_EFORMAT, "%s has bytes after its trailer", what);
	else if (q != -EPIPE)
		return dcr_err_sys(e, q, "cannot read %s", what);
	dcr_sha_final(pc->hs.sha, &pc->pl.delta);
	pc->pl.before = pc->cur;
	pc->pl.cbase = pc->rd.base;
	pc->pl.ctarget = pc->rd.target;
	return 0;
}

/* The placed delta: an ordinary delta from the receiver's state over all
 * its tensors, with the rank's changes resolved into items; pc->pl.after
 * is its target state. */
static int write_placed(struct place *pc, struct dcr_err *e)
{
	const struct dcr_layout *L = pc->x.L;
	const struct dcr_ckpt *c = pc->c;
	struct dcr_state_entry *ent;
	int r;
	pc->ent = ent = dcr_calloc(c->ntensors + 1, sizeof(*ent));
	if (!ent)
		return dcr_err_sys(e, ENOMEM, "placement");
	uint8_t attempt[16];
	memcpy(attempt, pc->rd.attempt, 16);
	if ((r = dcr_delta_writer_init(&pc->w, (struct dcr_sink){buf_sink, &pc->out}, &pc->cur,
				       attempt, "placed delta", e)))
		return r;
	for (size_t i = 0; i < c->ntensors; i++) {
		const struct dcr_ckpt_tensor *ct = &c->tensors[i];
		const struct dcr_tensor_info *ti = ct->info;
		struct dcr_delta_tensor dt = {.name = ti->name, .file = c->file_names[ct->file],
					      .dtype = ti->dtype, .ndim = ti->ndim};
		memcpy(dt.shape, ti->shape, sizeof(dt.shape));
		if ((r = dcr_delta_write_tensor(&pc->w, &dt, e)))
			return r;
		ent[i].name = ti->name;
		ent[i].dtype = ti->dtype;
		ent[i].ndim = ti->ndim;
		ent[i].shape = ti->shape;
		ent[i].digest = pc->dg[i];
		int t = dcr_layout_find_tensor(L, pc->x.rank, ti->name);
		if (t < 0 || !pc->x.pt[t].n)
			continue;
		uint64_t ni = 0, nc = 0;
		pc->recs.len = 0;
		if ((r = resolve_tensor(L, (uint32_t)t, &pc->x.pt[t], ct, pc->buf, (uint32_t)i,
					&pc->recs, &ni, &nc, &ent[i].digest, e)) ||
		    (r = dcr_delta_write_raw(&pc->w, pc->recs.p, pc->recs.len, ni, nc, e)))
			return r;
		free(pc->x.pt[t].v);
		memset(&pc->x.pt[t], 0, sizeof(pc->x.pt[t]));
	}
	for (size_t i = 0; i < c->ntensors; i++)
		if ((r = dcr_delta_write_done(&pc->w, (uint32_t)i, &ent[i].digest, e)))
			return r;
	dcr_state_id(ent, c->ntensors, &pc->pl.after);
	return dcr_delta_write_end(&pc->w, &pc->pl.after, e);
}

/* dcr_place; source (or NULL): the canonical delta the one read was
 * resolved from, for the record. */
static int place_one(struct dcr_receiver *rc, const struct dcr_layout *L, uint32_t rank,
		     struct dcr_source src, const uint8_t *head, size_t head_len,
		     const struct dcr_apply_opts *o, const dcr_digest *source,
		     struct dcr_place_result *res, struct dcr_err *e)
{
	struct place pc = {.x = {.L = L, .rank = rank}, .rc = rc, .hs = {.in = src}};
	int r;
	memset(res, 0, sizeof(*res));
	if (source) {
		pc.pl.source = *source;
		pc.pl.have_source = 1;
	}

	if ((r = dcr_apply_recover(rc, o, e)) < 0)
		return r;
	if ((r = dcr_ckpt_open(rc->dir, &pc.c, e)) ||
	    (r = dcr_receiver_state(rc, pc.c, 1, &pc.cur, &pc.dg, NULL, e)) ||
	    (r = check_rank(L, rank, pc.c, rc->dir, e)))
		goto out;
	const char *what = o && o->what ? o->what : "delta";
	struct dcr_ckpt *own[1] = {pc.c};
	struct dcr_ckpt **ranks = dcr_calloc(rank + 1, sizeof(*ranks));
	if (!ranks) {
		r = dcr_err_sys(e, ENOMEM, "placement");
		goto out;
	}
	ranks[rank] = own[0];
	struct gather g = {.L = L, .ck = ranks, .nranks = rank + 1};
	pc.x.g = &g;
	r = read_delta(&pc, head, head_len, what, e);
	pc.x.g = NULL;
	gather_free(&g);
	free(ranks);
	if (r)
		goto out;
	res->canon_changes = pc.x.changes;
	res->stored_changes = pc.x.placed;
	struct placed was;
	int have_was = !placed_read(rc, &was);
	if (have_was && !memcmp(was.delta.b, pc.pl.delta.b, 32) && !memcmp(was.after.b, pc.cur.b, 32)) {
		res->already = 1;
		res->apply.already = 1;
		res->apply.base = was.before;
		res->apply.target = pc.cur;
		goto out;
	}
	if (pc.x.deferred) {
		*e = pc.x.derr;
		r = pc.x.deferred;
		goto out;
	}
	if (have_was && !memcmp(was.after.b, pc.cur.b, 32) && !(pc.rd.flags & DCR_DELTA_PARTIAL) &&
	    !dcr_digest_is_zero(&was.ctarget) && memcmp(was.ctarget.b, pc.rd.base.b, 32)) {
		char a[65], b[65];
		dcr_digest_hex(&was.ctarget, a);
		dcr_digest_hex(&pc.rd.base, b);
		r = dcr_err_set(e, DCR_EBASE,
				"receiver '%s' holds canonical state %.12s, the delta's base is %.12s",
				rc->dir, a, b);
		goto out;
	}

	if ((r = write_placed(&pc, e)))
		goto out;
	if (!memcmp(pc.pl.after.b, pc.cur.b, 32)) { /* nothing of it lands on this rank */
		res->apply.base = res->apply.target = pc.cur;
		r = placed_write(rc, &pc.pl, e);
		goto out;
	}
	dcr_ckpt_close(pc.c);
	pc.c = NULL;
	if ((r = placed_write(rc, &pc.pl, e)))
		goto out;
	struct dcr_apply_opts ao = {0};
	if (o)
		ao = *o;
	ao.head = NULL;
	ao.what = "placed delta";
	struct msrc ms = {.p = pc.out.p, .len = pc.out.len};
	r = dcr_apply(rc, (struct dcr_source){msrc_read, &ms}, NULL, 0, &ao, &res->apply, e);
out:
	if (pc.rd_inited)
		dcr_delta_reader_release(&pc.rd);
	dcr_sha_free(pc.hs.sha);
	if (pc.x.pt)
		for (size_t t = 0; t < L->ntensors; t++)
			free(pc.x.pt[t].v);
	free(pc.x.pt);
	tdecl_free(&pc.x.td);
	free(pc.x.idx);
	dcr_changes_free(&pc.x.ch);
	dcr_delta_writer_release(&pc.w);
	dcr_buf_free(&pc.out);
	dcr_buf_free(&pc.recs);
	free(pc.ent);
	free(pc.dg);
	free(pc.buf);
	dcr_ckpt_close(pc.c);
	return r;
}

int dcr_place(struct dcr_receiver *rc, const struct dcr_layout *L, uint32_t rank,
	      struct dcr_source src, const uint8_t *head, size_t head_len,
	      const struct dcr_apply_opts *o, struct dcr_place_result *res,
	      struct dcr_err *e)
{
	return place_one(rc, L, rank, src, head, head_len, o, NULL, res, e);
}

/* ---- a whole replica: every rank of the map ---- */

/* What the replica's resolution shares: the canonical delta's reader
 * (hashing what it reads), the resolved delta's writer, the gather over
 * every rank, and the first item that did not resolve. */
struct resolve {
	struct gather g;
	const struct dcr_layout *L;
	struct tdecl td;
	uint64_t items, changes; /* as the canonical delta declared them */
	struct dcr_changes ch;
	struct dcr_buf enc;
	int deferred;
	struct dcr_err derr;
};

/* Copy the canonical delta rd to w, resolving every item coded against
 * the receiver's bits into a PLAIN XOR item (masks against the bits read
 * through the map). Such an item that does not resolve is dropped and
 * remembered (x->deferred); the rest is still read to its trailer. */
static int resolve_records(struct resolve *x, struct dcr_delta_reader *rd,
			   struct dcr_delta_writer *w, struct dcr_err *e)
{
	struct dcr_delta_rec rec;
	int r;
	while ((r = dcr_delta_next(rd, &rec, e)) == 1) {
		r = 0;
		switch (rec.type) {
		case DCR_REC_TENSOR: {
			struct dcr_delta_tensor t;
			if ((r = dcr_delta_parse_tensor(&rec, &t, e)))
				return r;
			r = tdecl_add(&x->td, x->L, &t, rd->what, e);
			if (!r)
				r = dcr_delta_write_tensor(w, &t, e);
			dcr_delta_tensor_clear(&t);
			break;
		}
		case DCR_REC_ITEM: {
			struct dcr_item it;
			if ((r = dcr_delta_parse_item(&rec, &it, e)))
				return r;
			uint32_t c;
			if ((r = tdecl_item(&x->td, x->L, &it, rd->what, &c, e)))
				return r;
			const struct dcr_layout_canon *cn = &x->L->canon[c];
			x->items++;
			x->changes += it.n;
			if (!dcr_item_needs_base(&it)) {
				r = dcr_delta_write_item(w, &it, e);
				break;
			}
			struct dcr_err ie = {0};
			int q = resolve_canon(&x->g, c, &it, &x->ch, &ie);
			if (q) {
				if (!x->deferred) {
					x->deferred = q;
					x->derr = ie;
				}
				break;
			}
			x->enc.len = 0;
			struct dcr_item o = it;
			if ((r = dcr_item_encode(&x->ch, dcr_dtype_unit(cn->dtype), it.len, 0, &o.codec,
						 &x->enc, e)))
				return r;
			o.data = x->enc.p;
			o.data_len = x->enc.len;
			r = dcr_delta_write_item(w, &o, e);
			break;
		}
		case DCR_REC_REMOVE:
			return refuse_remove(rd->what, e);
		case DCR_REC_DONE: {
			uint32_t ti;
			dcr_digest d;
			if (!(r = dcr_delta_parse_done(&rec, &ti, &d, e)))
				r = dcr_delta_write_done(w, ti, &d, e);
			break;
		}
		default:
			break; /* END: written below; ancillary records stay behind */
		}
		if (r)
			return r;
	}
	return r < 0 ? r : dcr_delta_check_end(rd, x->td.n, x->items, x->changes, e);
}

struct spool {
	char *path, *src; /* the resolved delta, and the record naming its source */
};

/* The spool's record: the canonical delta and the resolved one's digest. */
static int spool_src_read(const struct spool *sp, dcr_digest *canon, dcr_digest *resolved)
{
	uint8_t *buf = NULL;
	size_t len;
	struct dcr_err ignore;
	char h1[80], h2[80];
	int ok = !dcr_read_file(sp->src, 4096, &buf, &len, &ignore) &&
		 sscanf((char *)buf, "canonical %79s\nresolved %79s", h1, h2) == 2 &&
		 !dcr_digest_parse_hex(h1, canon) && !dcr_digest_parse_hex(h2, resolved) &&
		 !access(sp->path, F_OK);
	free(buf);
	return ok ? 0 : -1;
}

/* rc's state id (*cur), its files hashed where its cache is stale. */
static int rank_state(struct dcr_receiver *rc, dcr_digest *cur, struct dcr_err *e)
{
	struct dcr_ckpt *c;
	dcr_digest *dg = NULL;
	int r = dcr_ckpt_open(rc->dir, &c, e);
	if (!r)
		r = dcr_receiver_state(rc, c, 1, cur, &dg, NULL, e);
	free(dg);
	dcr_ckpt_close(c);
	return r;
}

/* 1 when rc's record says it placed a delta resolved from source (or, with
 * source NULL, the delta `delta`) and rc is at the state that followed;
 * *cur: its state. */
static int rank_holds(struct dcr_receiver *rc, const dcr_digest *source, const dcr_digest *delta,
		      dcr_digest *cur, struct dcr_err *e)
{
	struct placed was;
	if (placed_read(rc, &was) ||
	    (source ? !was.have_source || memcmp(was.source.b, source->b, 32)
		    : memcmp(was.delta.b, delta->b, 32)))
		return 0;
	int r = rank_state(rc, cur, e);
	if (r)
		return r;
	return !memcmp(cur->b, was.after.b, 32);
}

/* A full canonical delta, once read and before what its resolution gave
 * is judged: a rank whose record says it holds another canonical state
 * than the delta's base (its files as that placement left them) refuses
 * it, DCR_EBASE, as dcr_place refuses it for one rank (items decoded
 * against those bits would otherwise be reported as malformed). */
static int replica_base(struct dcr_receiver *const *rcs, uint32_t nranks,
			const dcr_digest *base, struct dcr_err *e)
{
	for (uint32_t k = 0; k < nranks; k++) {
		struct placed was;
		dcr_digest cur;
		if (placed_read(rcs[k], &was) || dcr_digest_is_zero(&was.ctarget) ||
		    !memcmp(was.ctarget.b, base->b, 32))
			continue;
		int r = rank_state(rcs[k], &cur, e);
		if (r)
			return r;
		if (memcmp(cur.b, was.after.b, 32))
			continue;
		char a[65], b[65];
		dcr_digest_hex(&was.ctarget, a);
		dcr_digest_hex(base, b);
		return dcr_err_set(e, DCR_EBASE,
				   "replica '%s' holds canonical state %.12s, the delta's base is %.12s",
				   rcs[k]->dir, a, b);
	}
	return 0;
}

/* A sink that hashes what it writes to a descriptor. */
struct hsink {
	int fd;
	struct dcr_sha *sha;
};

static int hsink_write(void *ctx, const void *p, size_t n)
{
	struct hsink *h = ctx;
	dcr_sha_update(h->sha, p, n);
	return dcr_sink_fd_write(&h->fd, p, n);
}

/* Resolve the canonical delta into the spool of rcs[0] (or find it there
 * from an interrupted run of the same delta). *all_done: every rank holds
 * the delta already (res filled). */
/* 1 when every rank already holds the canonical delta d's placement
 * (each result then says so), 0 when one does not, or an error. */
static int placed_everywhere(struct dcr_receiver *const *rcs, uint32_t nranks,
			     const dcr_digest *d, struct dcr_place_result *res, struct dcr_err *e)
{
	for (uint32_t k = 0; k < nranks; k++) {
		int h = rank_holds(rcs[k], d, NULL, &res[k].apply.target, e);
		if (h <= 0)
			return h;
	}
	for (uint32_t k = 0; k < nranks; k++) {
		res[k].already = res[k].apply.already = 1;
		res[k].apply.base = res[k].apply.target;
	}
	return 1;
}

/* A spool of another delta (pending, resolved as presolved) may be
 * replaced only once every rank placed it. */
static int pending_placed(struct dcr_receiver *const *rcs, uint32_t nranks,
			  const dcr_digest *pending, const dcr_digest *presolved, struct dcr_err *e)
{
	for (uint32_t k = 0; k < nranks; k++) {
		dcr_digest cur;
		int h = rank_holds(rcs[k], NULL, presolved, &cur, e);
		if (h < 0)
			return h;
		if (!h) {
			char hx[65];
			dcr_digest_hex(pending, hx);
			return dcr_err_set(e, DCR_EBASE,
					   "replica '%s' has an unfinished placement of another delta (%.12s): apply that one again first",
					   rcs[0]->dir, hx);
		}
	}
	return 0;
}

/* The spool's record of what it holds: the canonical delta and its
 * resolution. */
static int spool_src_write(const struct spool *sp, const dcr_digest *canon,
			   const dcr_digest *resolved, struct dcr_err *e)
{
	char text[256], h1[65], h2[65];
	dcr_digest_hex(canon, h1);
	dcr_digest_hex(resolved, h2);
	int n = snprintf(text, sizeof(text), "canonical %s\nresolved %s\n", h1, h2);
	return dcr_write_file_atomic(sp->src, text, (size_t)n, e);
}

/* ---- checking a replica's new canonical tensors before any rank changes ----
 * A replica holds every canonical element, so the tensors a full delta
 * touches can be checked against its target digests as dcr-apply checks a
 * checkpoint's: each read through the map (g), the resolved delta's items
 * applied, hashed, compared. The items' places in the resolved delta are
 * kept (32 bytes an item, against 40 or more it takes in the file); their
 * data is read again from the file as each tensor comes. */

struct vitem {
	uint32_t tensor;
	uint64_t start, off, len; /* its range; its record's body in the file */
};

static int vitem_cmp(const void *a, const void *b)
{
	const struct vitem *x = a, *y = b;
	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* Hash canonical tensor c's elements [a, b) into td, READ_ELEMS at a time. */
static int vhash_old(struct gather *g, uint32_t c, uint64_t a, uint64_t b,
		     struct dcr_tdigest *td, struct dcr_err *e)
{
	unsigned unit = dcr_dtype_unit(g->L->canon[c].dtype);
	for (uint64_t at = a; at < b; at += READ_ELEMS) {
		uint64_t n = b - at < READ_ELEMS ? b - at : READ_ELEMS;
		int r = gather_canon(g, c, at, n, e);
		if (r)
			return r;
		dcr_tdigest_update(td, g->bits.p, (size_t)(n * unit));
	}
	return 0;
}

/* Tensor i of the resolved delta (canonical c), its items v[0..n) sorted
 * by start, checked against digest want. */
static int vtensor(struct gather *g, int fd, uint32_t c, const struct vitem *v, size_t n,
		   const dcr_digest *want, const char *what, struct dcr_changes *ch,
		   struct dcr_buf *body, struct dcr_err *e)
{
	const struct dcr_layout_canon *cn = &g->L->canon[c];
	unsigned unit = dcr_dtype_unit(cn->dtype);
	struct dcr_tdigest *td = dcr_tdigest_new(cn->dtype, cn->ndim, cn->shape);
	if (!td)
		return dcr_err_sys(e, ENOMEM, "placement");
	uint64_t at = 0;
	int r = 0;
	for (size_t k = 0; k < n && !r; k++) {
		struct dcr_item it;
		if (v[k].start < at) {
			r = dcr_err_set(e, DCR_EFORMAT,
					"%s: element %llu of '%s' is changed twice (the delta repeats a canonical element)",
					what, (unsigned long long)v[k].start, cn->name);
			break;
		}
		if ((r = vhash_old(g, c, at, v[k].start, td, e)))
			break;
		if ((r = dcr_delta_item_at(fd, v[k].off, v[k].len, body, &it,
					   "the resolved delta", e)) ||
		    (r = dcr_item_check_range(&it, cn->nelem, what, cn->name, e)) ||
		    (r = gather_canon(g, c, it.start, it.len, e)) ||
		    (r = dcr_item_decode(&it, unit, ch, e)))
			break;
		dcr_scatter(g->bits.p, unit, ch->pos, ch->val, ch->n, it.enc == DCR_ENC_XOR);
		dcr_tdigest_update(td, g->bits.p, (size_t)(it.len * unit));
		at = it.start + it.len;
	}
	if (!r)
		r = vhash_old(g, c, at, cn->nelem, td, e);
	dcr_digest got;
	if (!r && (r = dcr_tdigest_final(td, &got)))
		r = dcr_err_sys(e, -r, "placement");
	dcr_tdigest_free(td);
	if (!r && memcmp(got.b, want->b, 32))
		r = dcr_err_set(e, DCR_EDIGEST,
				"tensor '%s' would not match its target digest: the delta does not fit this replica's bits (nothing was written)",
				cn->name);
	return r;
}

/* Every tensor with items in the resolved delta at path (canonical
 * canon_of[i] for its i-th TENSOR record), checked through g. */
static int replica_verify(struct gather *g, const char *path, const uint32_t *canon_of,
			  size_t nt, const char *what, struct dcr_err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dcr_err_sys(e, errno, "cannot open '%s'", path);
	struct dcr_delta_reader rd;
	struct vitem *v = NULL;
	size_t n = 0, cap = 0;
	dcr_digest *want = dcr_calloc(nt + 1, sizeof(*want));
	uint8_t *have = dcr_calloc(nt + 1, 1);
	struct dcr_changes ch = {0};
	struct dcr_buf body = {0};
	int r = want && have ? 0 : dcr_err_sys(e, ENOMEM, "placement");
	if (!r)
		r = dcr_delta_reader_init_flags(&rd, (struct dcr_source){dcr_source_fd_read, &fd},
						NULL, 0, DCR_DELTA_PARTIAL, "resolved delta", e);
	if (r) {
		free(want);
		free(have);
		close(fd);
		return r;
	}
	struct dcr_delta_rec rec;
	while ((r = dcr_delta_next(&rd, &rec, e)) == 1) {
		r = 0;
		if (rec.type == DCR_REC_ITEM) {
			struct dcr_item it;
			if ((r = dcr_delta_parse_item(&rec, &it, e)))
				break;
			if (it.tensor >= nt) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s: item for undeclared tensor %u",
						what, it.tensor);
				break;
			}
			if (n == cap) {
				size_t nc = cap ? 2 * cap : 1024;
				struct vitem *nv = realloc(v, nc * sizeof(*v));
				if (!nv) {
					r = dcr_err_sys(e, ENOMEM, "placement");
					break;
				}
				v = nv, cap = nc;
			}
			v[n++] = (struct vitem){it.tensor, it.start, rd.offset - rec.len, rec.len};
		} else if (rec.type == DCR_REC_DONE) {
			uint32_t ti;
			dcr_digest d;
			if ((r = dcr_delta_parse_done(&rec, &ti, &d, e)))
				break;
			if (ti < nt)
				want[ti] = d, have[ti] = 1;
		}
	}
	dcr_delta_reader_release(&rd);
	if (r == 0 && n > 1)
		qsort(v, n, sizeof(*v), vitem_cmp);
	for (size_t k = 0; r == 0 && k < n;) {
		size_t j = k;
		while (j < n && v[j].tensor == v[k].tensor)
			j++;
		uint32_t t = v[k].tensor;
		r = have[t] ? vtensor(g, fd, canon_of[t], v + k, j - k, &want[t], what, &ch, &body, e)
			    : dcr_err_set(e, DCR_EFORMAT, "%s: no target digest for tensor '%s'", what,
					  g->L->canon[canon_of[t]].name);
		k = j;
	}
	close(fd);
	free(v);
	free(want);
	free(have);
	dcr_changes_free(&ch);
	dcr_buf_free(&body);
	return r < 0 ? r : 0;
}

static int replica_resolve(struct dcr_receiver *const *rcs, uint32_t nranks,
			   const struct dcr_layout *L, struct dcr_source src, const uint8_t *head,
			   size_t head_len, const char *what, const struct spool *sp,
			   dcr_digest *canon, int *all_done, struct dcr_place_result *res,
			   struct dcr_err *e)
{
	struct resolve x = {.L = L};
	struct dcr_ckpt **ck = dcr_calloc(nranks, sizeof(*ck));
	struct hsrc hs = {.in = src, .sha = dcr_sha_new()};
	struct hsink hk = {.fd = -1, .sha = dcr_sha_new()};
	struct dcr_delta_reader rd;
	int rd_inited = 0, r = 0;
	struct dcr_delta_writer w = {0};
	int w_inited = 0;
	struct dcr_atomic a = {.fd = -1};
	dcr_digest pending, presolved, d, rdg;
	int have_pending = !spool_src_read(sp, &pending, &presolved);
	*all_done = 0;
	if (!ck || !hs.sha || !hk.sha) {
		r = dcr_err_sys(e, ENOMEM, "placement");
		goto out;
	}
	for (uint32_t k = 0; k < nranks && !r; k++)
		if (!(r = dcr_ckpt_open(rcs[k]->dir, &ck[k], e)))
			r = check_rank(L, k, ck[k], rcs[k]->dir, e);
	if (r)
		goto out;
	x.g = (struct gather){.L = L, .ck = ck, .nranks = nranks};
	if (head_len)
		dcr_sha_update(hs.sha, head, head_len);
	if ((r = dcr_delta_reader_init_flags(&rd, (struct dcr_source){hsrc_read, &hs}, head,
					     head_len, DCR_DELTA_PARTIAL, what, e)))
		goto out;
	rd_inited = 1;
	if ((r = dcr_atomic_open(&a, sp->path, e)))
		goto out;
	hk.fd = a.fd;
	if ((r = dcr_delta_writer_init_flags(&w, (struct dcr_sink){hsink_write, &hk}, &rd.base,
					     rd.attempt, rd.flags & DCR_DELTA_PARTIAL,
					     "resolved delta", e)))
		goto out;
	w_inited = 1;
	if ((r = resolve_records(&x, &rd, &w, e)))
		goto out;
	uint8_t extra;
	int q = src.read(src.ctx, &extra, 1);
	if (q == 0) {
		r = dcr_err_set(e, DCR_EFORMAT, "%s has bytes after its trailer", what);
		goto out;
	} else if (q != -EPIPE) {
		r = dcr_err_sys(e, q, "cannot read %s", what);
		goto out;
	}
	dcr_sha_final(hs.sha, &d);
	*canon = d;
	if (have_pending && !memcmp(pending.b, d.b, 32)) {
		/* an interrupted run of this delta: its resolution stands,
		 * whatever the ranks placed before hold now */
		dcr_atomic_abort(&a);
		goto out;
	}
	/* placed everywhere before (its spool gone) */
	if ((r = placed_everywhere(rcs, nranks, &d, res, e)) < 0)
		goto out;
	if (r) {
		r = 0;
		*all_done = 1;
		dcr_atomic_abort(&a);
		goto out;
	}
	/* another delta's spool: fine only if every rank placed it */
	if (have_pending && (r = pending_placed(rcs, nranks, &pending, &presolved, e)))
		goto out;
	if (!(rd.flags & DCR_DELTA_PARTIAL) && (r = replica_base(rcs, nranks, &rd.base, e)))
		goto out;
	if (x.deferred) {
		*e = x.derr;
		r = x.deferred;
		goto out;
	}
	if ((r = dcr_delta_write_end(&w, &rd.target, e)))
		goto out;
	/* a full delta's touched tensors, checked before any rank changes
	 * (a partial one's digests, where it has them, are of the whole
	 * tensors its parts make together) */
	if (!(rd.flags & DCR_DELTA_PARTIAL) &&
	    (r = replica_verify(&x.g, a.tmp, x.td.canon_of, x.td.n, what, e)))
		goto out;
	for (uint32_t k = 0; k < nranks; k++)
		dcr_ckpt_close(ck[k]), ck[k] = NULL;
	dcr_sha_final(hk.sha, &rdg);
	if ((r = dcr_atomic_commit(&a, e)))
		goto out;
	r = spool_src_write(sp, &d, &rdg, e);
out:
	if (a.tmp)
		dcr_atomic_abort(&a);
	if (w_inited)
		dcr_delta_writer_release(&w);
	if (rd_inited)
		dcr_delta_reader_release(&rd);
	dcr_sha_free(hs.sha);
	dcr_sha_free(hk.sha);
	for (uint32_t k = 0; ck && k < nranks; k++)
		dcr_ckpt_close(ck[k]);
	free(ck);
	gather_free(&x.g);
	tdecl_free(&x.td);
	dcr_changes_free(&x.ch);
	dcr_buf_free(&x.enc);
	return r;
}

int dcr_place_replica(struct dcr_receiver *const *rcs, uint32_t nranks,
		      const struct dcr_layout *L, struct dcr_source src, const uint8_t *head,
		      size_t head_len, const struct dcr_apply_opts *o,
		      struct dcr_place_result *res, struct dcr_err *e)
{
	uint32_t need = 0;
	for (size_t t = 0; t < L->ntensors; t++)
		if (L->tensors[t].rank + 1 > need)
			need = L->tensors[t].rank + 1;
	if (nranks != need)
		return dcr_err_set(e, DCR_EFORMAT, "the layout map has %u ranks, the replica %u",
				   (unsigned)need, (unsigned)nranks);
	int r;
	for (uint32_t k = 0; k < nranks; k++) {
		memset(&res[k], 0, sizeof(res[k]));
		if ((r = dcr_apply_recover(rcs[k], o, e)) < 0)
			return r;
	}
	struct spool sp = {dcr_receiver_path(rcs[0], "layout-resolved"),
			   dcr_receiver_path(rcs[0], "layout-resolved.src")};
	if (!sp.path || !sp.src) {
		r = dcr_err_sys(e, ENOMEM, "placement");
		goto out;
	}
	const char *what = o && o->what ? o->what : "delta";
	dcr_digest canon;
	int all_done;
	if ((r = replica_resolve(rcs, nranks, L, src, head, head_len, what, &sp, &canon, &all_done,
				 res, e)) || all_done)
		goto out;
	/* every rank places the resolved delta; a rerun after a crash finds
	 * the ranks placed before at the state their record names */
	for (uint32_t k = 0; k < nranks && !r; k++) {
		int fd = open(sp.path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			r = dcr_err_sys(e, errno, "cannot open '%s'", sp.path);
			break;
		}
		r = place_one(rcs[k], L, k, (struct dcr_source){dcr_source_fd_read, &fd}, NULL, 0, o,
			      &canon, &res[k], e);
		close(fd);
	}
	if (!r && (unlink(sp.src) || unlink(sp.path)))
		r = dcr_err_sys(e, errno, "cannot remove '%s'", sp.path);
out:
	free(sp.path);
	free(sp.src);
	return r;
}
