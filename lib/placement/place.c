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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	char *path = dcr_receiver_path(rc, "layout-applied");
	if (!path)
		return dcr_err_sys(e, ENOMEM, "placement");
	int r = dcr_write_file_atomic(path, text, n, e);
	free(path);
	return r;
}

/* ---- reading the canonical delta into per-tensor placements ---- */

struct pctx {
	const struct dcr_layout *L;
	uint32_t rank;
	struct pvec *pt;        /* per map tensor */
	uint32_t *canon_of;     /* per TENSOR record: map canonical index */
	uint32_t *tflags;
	size_t nt, capt;
	uint64_t items, changes, placed;
	struct dcr_changes ch;
	uint64_t *idx;
	size_t idx_cap;
};

static int place_item(struct pctx *x, const struct dcr_item *it, const char *what,
		      struct dcr_err *e)
{
	const struct dcr_layout *L = x->L;
	if (it->tensor >= x->nt)
		return dcr_err_set(e, DCR_EFORMAT, "%s: item for undeclared tensor %u", what,
				   it->tensor);
	uint32_t c = x->canon_of[it->tensor];
	const struct dcr_layout_canon *cn = &L->canon[c];
	unsigned unit = dcr_dtype_unit(cn->dtype);
	if (it->start > cn->nelem || it->len > cn->nelem - it->start)
		return dcr_err_set(e, DCR_EFORMAT, "%s: item for '%s' runs past its end", what,
				   cn->name);
	if (it->enc == DCR_ENC_XOR && (x->tflags[it->tensor] & DCR_TENSOR_NEW))
		return dcr_err_set(e, DCR_EFORMAT, "%s: XOR item for '%s', which is not in the base",
				   what, cn->name);
	int r = dcr_item_decode(it, unit, &x->ch, e);
	if (r)
		return r;
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
			int c = dcr_layout_find_canon(L, t.name);
			const struct dcr_layout_canon *cn = c >= 0 ? &L->canon[c] : NULL;
			if (!cn)
				r = dcr_err_set(e, DCR_EFORMAT,
						"%s: canonical tensor '%s' is not in the layout map",
						rd->what, t.name);
			else if (cn->dtype != t.dtype || cn->ndim != t.ndim ||
				 memcmp(cn->shape, t.shape, t.ndim * sizeof(uint64_t)))
				r = dcr_err_set(e, DCR_EFORMAT,
						"%s: tensor '%s' has another dtype or shape than in the layout map",
						rd->what, t.name);
			uint32_t fl = t.flags;
			dcr_delta_tensor_clear(&t);
			if (r)
				return r;
			if (x->nt == x->capt) {
				size_t cap = x->capt ? 2 * x->capt : 256;
				uint32_t *a = realloc(x->canon_of, cap * sizeof(*a));
				if (a)
					x->canon_of = a;
				uint32_t *b = a ? realloc(x->tflags, cap * sizeof(*b)) : NULL;
				if (!b)
					return dcr_err_sys(e, ENOMEM, "placement");
				x->tflags = b;
				x->capt = cap;
			}
			x->canon_of[x->nt] = (uint32_t)c;
			x->tflags[x->nt++] = fl;
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
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s removes a tensor; placement through a layout map cannot",
					   rd->what);
		default:
			break; /* DONE: canonical digests; END: checked below; ancillary */
		}
	}
	if (r < 0)
		return r;
	if (rd->end_tensors != x->nt || rd->end_items != x->items ||
	    rd->end_changes != x->changes)
		return dcr_err_set(e, DCR_EFORMAT, "%s: END counts do not match its records",
				   rd->what);
	return 0;
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

/* The rank's stored tensors must all be in the receiver, as the map says. */
static int check_rank(const struct place *pc, struct dcr_err *e)
{
	const struct dcr_layout *L = pc->x.L;
	uint32_t rank = pc->x.rank;
	int any = 0;
	for (uint32_t t = 0; t < L->ntensors; t++) {
		const struct dcr_layout_tensor *lt = &L->tensors[t];
		if (lt->rank != rank)
			continue;
		any = 1;
		const struct dcr_ckpt_tensor *ct = dcr_ckpt_find(pc->c, lt->name);
		if (!ct)
			return dcr_err_set(e, DCR_ENOTFOUND, "receiver '%s' has no tensor '%s' (rank %u of the map)",
					   pc->rc->dir, lt->name, (unsigned)rank);
		if (!dcr_ckpt_tensor_is(ct, lt->dtype, lt->ndim, lt->shape))
			return dcr_err_set(e, DCR_EFORMAT,
					   "receiver '%s': tensor '%s' does not match the map (dtype or shape)",
					   pc->rc->dir, lt->name);
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

int dcr_place(struct dcr_receiver *rc, const struct dcr_layout *L, uint32_t rank,
	      struct dcr_source src, const uint8_t *head, size_t head_len,
	      const struct dcr_apply_opts *o, struct dcr_place_result *res,
	      struct dcr_err *e)
{
	struct place pc = {.x = {.L = L, .rank = rank}, .rc = rc, .hs = {.in = src}};
	int r;
	memset(res, 0, sizeof(*res));

	if ((r = dcr_apply_recover(rc, o, e)) < 0)
		return r;
	if ((r = dcr_ckpt_open(rc->dir, &pc.c, e)) ||
	    (r = dcr_receiver_state(rc, pc.c, 1, &pc.cur, &pc.dg, NULL, e)) ||
	    (r = check_rank(&pc, e)))
		goto out;
	const char *what = o && o->what ? o->what : "delta";
	if ((r = read_delta(&pc, head, head_len, what, e)))
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
	free(pc.x.canon_of);
	free(pc.x.tflags);
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
