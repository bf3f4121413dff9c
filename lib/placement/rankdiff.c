/* rankdiff.c - a training rank's diff in canonical coordinates (see
 * rankdiff.h and dcr(7)). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/file.h"
#include "core/state.h"
#include "core/summary.h"
#include "core/util.h"
#include "placement/lchg.h"
#include "placement/rankdiff.h"

#define READ_ELEMS (1u << 20)

/* ---- one rank's diff ---- */

struct cacc {
	struct lvec ch;
	int held;            /* the rank holds some of it */
	uint32_t remaining;  /* rank tensors holding it not yet read */
	uint32_t out;        /* its TENSOR index in the output */
	struct dcr_buf recs; /* encoded items, once finished */
	uint64_t items, changed;
};

struct rdctx {
	const struct dcr_rankdiff_opts *o;
	const struct dcr_layout *L;
	struct cacc *ca;
	uint8_t *shared, *dominated; /* per piece */
	uint64_t chunk;
	struct dcr_rankdiff_stats st;
	/* the whole diff's */
	struct dcr_ckpt *a, *b;		/* base and target shards */
	uint32_t *mark;			/* per canonical tensor: last rank tensor + 1 */
	uint32_t *order;		/* held canonical tensors, by name */
	size_t nheld;
	uint8_t *ba, *bb;		/* read buffers */
	struct dcr_delta_writer w;
};

static uint64_t holder_key(const struct dcr_layout *L, uint32_t tensor)
{
	return (uint64_t)L->tensors[tensor].rank * L->ntensors + tensor;
}

static int same_image(const struct dcr_layout_piece *a, const struct dcr_layout_piece *b)
{
	if (a->coff != b->coff || a->nelem != b->nelem || a->ndim != b->ndim)
		return 0;
	for (unsigned k = 0; k < a->ndim; k++)
		if (a->dim[a->corder[k]].count != b->dim[b->corder[k]].count ||
		    a->dim[a->corder[k]].cstride != b->dim[b->corder[k]].cstride)
			return 0;
	return 1;
}

/* For every piece of the rank: may a lower holder exist (shared), or does a
 * lower holder hold exactly its elements (dominated: nothing to send)? */
static void owner_flags(struct rdctx *d)
{
	const struct dcr_layout *L = d->L;
	for (size_t i = 0; i < L->npieces; i++) {
		const struct dcr_layout_piece *p = &L->pieces[i];
		if (p->kind == DCR_PIECE_PADDING || L->tensors[p->tensor].rank != d->o->rank)
			continue;
		const struct dcr_layout_canon *cn = &L->canon[p->canon];
		uint64_t mine = holder_key(L, p->tensor);
		for (size_t k = 0; k < cn->npieces; k++) {
			const struct dcr_layout_piece *q = &L->pieces[cn->pieces[k]];
			if (holder_key(L, q->tensor) >= mine || q->chi <= p->clo || q->clo >= p->chi)
				continue;
			d->shared[i] = 1;
			if (same_image(p, q))
				d->dominated[i] = 1;
		}
	}
}

static int finish_canon(struct rdctx *d, uint32_t c, struct dcr_err *e)
{
	const struct dcr_layout *L = d->L;
	struct cacc *a = &d->ca[c];
	struct lvec *l = &a->ch;
	int r = 0;
	if (l->n > 1)
		qsort(l->v, l->n, sizeof(*l->v), lchg_cmp);
	/* owner rule for the elements a lower holder may hold */
	size_t ns = 0;
	for (size_t i = 0; i < l->n; i++)
		ns += l->v[i].shared;
	if (ns) {
		uint64_t *idx = malloc(ns * sizeof(*idx));
		size_t *at = malloc(ns * sizeof(*at));
		uint64_t *low = malloc(ns * sizeof(*low));
		struct dcr_layout_hit *h = NULL;
		size_t nh = 0, k = 0;
		if (!idx || !at || !low) {
			r = dcr_err_sys(e, ENOMEM, "layout diff");
			goto owner_out;
		}
		for (size_t i = 0; i < l->n; i++)
			if (l->v[i].shared) {
				idx[k] = l->v[i].c;
				low[k] = UINT64_MAX;
				at[k++] = i;
			}
		if ((r = dcr_layout_place(L, c, idx, ns, &h, &nh, e)))
			goto owner_out;
		for (size_t i = 0; i < nh; i++) {
			uint64_t key = holder_key(L, h[i].tensor);
			if (key < low[h[i].pos])
				low[h[i].pos] = key;
		}
		for (k = 0; k < ns; k++)
			if (low[k] != holder_key(L, l->v[at[k]].key)) {
				l->v[at[k]].enc = 0; /* dropped */
				d->st.replica_changed++;
			}
owner_out:
		free(idx);
		free(at);
		free(low);
		free(h);
		if (r)
			return r;
	}
	size_t n = 0;
	for (size_t i = 0; i < l->n; i++) {
		if (!l->v[i].enc)
			continue;
		if (n && l->v[n - 1].c == l->v[i].c)
			return dcr_err_set(e, DCR_EFORMAT,
					   "layout map: element %llu of '%s' is held twice by rank %u",
					   (unsigned long long)l->v[i].c, L->canon[c].name,
					   (unsigned)d->o->rank);
		l->v[n++] = l->v[i];
	}
	unsigned unit = dcr_dtype_unit(L->canon[c].dtype);
	r = lchg_emit_items(&a->recs, a->out, l->v, n, unit, d->chunk, &a->items, e);
	a->changed = n;
	lvec_free(l);
	return r;
}

static int cmp_name(const void *x, const void *y, void *arg)
{
	const struct dcr_layout *L = arg;
	return strcmp(L->canon[*(const uint32_t *)x].name, L->canon[*(const uint32_t *)y].name);
}

static int same_shape(const struct dcr_tensor_info *ti, const struct dcr_layout_tensor *lt)
{
	return ti->dtype == lt->dtype && ti->ndim == lt->ndim &&
	       !memcmp(ti->shape, lt->shape, lt->ndim * sizeof(uint64_t));
}

static int diff_tensor(struct rdctx *d, uint32_t t, const struct dcr_ckpt_tensor *bt,
		       const struct dcr_ckpt_tensor *nt, uint8_t *ba, uint8_t *bb,
		       struct dcr_err *e)
{
	const struct dcr_layout *L = d->L;
	const struct dcr_layout_tensor *lt = &L->tensors[t];
	unsigned unit = dcr_dtype_unit(lt->dtype);
	for (uint64_t s = 0; s < lt->nelem; s += READ_ELEMS) {
		uint64_t len = lt->nelem - s < READ_ELEMS ? lt->nelem - s : READ_ELEMS;
		size_t nb = (size_t)(len * unit);
		int r;
		if ((r = dcr_pread_full(bt->fd, ba, nb, bt->file_off + s * unit)) ||
		    (r = dcr_pread_full(nt->fd, bb, nb, nt->file_off + s * unit)))
			return dcr_err_sys(e, r, "cannot read tensor '%s'", lt->name);
		for (size_t i = 0; i < nb;) {
			if (i + 64 <= nb && !memcmp(ba + i, bb + i, 64)) {
				i += 64;
				continue;
			}
			size_t end = i + 64 <= nb ? i + 64 : nb;
			for (; i < end; i += unit) {
				uint64_t x = load_unit(ba + i, unit), y = load_unit(bb + i, unit);
				if (x == y)
					continue;
				d->st.stored_changed++;
				uint32_t c, pi;
				uint64_t cf;
				int q = dcr_layout_to_canonical(L, t, s + i / unit, &c, &cf, &pi);
				if (q < 0)
					return dcr_err_set(e, DCR_EFORMAT,
							   "layout map: element %llu of '%s' (rank %u) is in no piece",
							   (unsigned long long)(s + i / unit), lt->name,
							   (unsigned)lt->rank);
				if (q == 0) {
					d->st.padding_changed++;
					continue;
				}
				if (d->dominated[pi]) {
					d->st.replica_changed++;
					continue;
				}
				const struct dcr_layout_piece *p = &L->pieces[pi];
				struct lchg ch = {.c = cf, .key = t, .shared = d->shared[pi]};
				if (p->kind == DCR_PIECE_AFFINE) {
					ch.enc = DCR_ENC_XOR;
					ch.val = x ^ y;
				} else {
					int cdt = L->canon[c].dtype;
					uint64_t co = dcr_xform_forward(p->xform, lt->dtype, cdt, x);
					uint64_t cn = dcr_xform_forward(p->xform, lt->dtype, cdt, y);
					if (co == cn) {
						d->st.residual_same++;
						continue;
					}
					ch.enc = DCR_ENC_OVERWRITE;
					ch.val = cn;
				}
				if (lvec_push(&d->ca[c].ch, &ch))
					return dcr_err_sys(e, ENOMEM, "layout diff");
			}
		}
	}
	return 0;
}

/* The rank's stored tensors: each in both checkpoints, as the map says,
 * and nothing else in them; counts each canonical tensor's holders. */
static int check_rank_tensors(struct rdctx *d, struct dcr_err *e)
{
	const struct dcr_layout *L = d->L;
	const struct dcr_rankdiff_opts *o = d->o;
	const struct dcr_ckpt *a = d->a, *b = d->b;
	size_t nrank = 0;
	for (uint32_t t = 0; t < L->ntensors; t++) {
		const struct dcr_layout_tensor *lt = &L->tensors[t];
		if (lt->rank != o->rank)
			continue;
		nrank++;
		const struct dcr_ckpt_tensor *x = dcr_ckpt_find(a, lt->name),
					     *y = dcr_ckpt_find(b, lt->name);
		if (!x || !y)
			return dcr_err_set(e, DCR_ENOTFOUND, "'%s' has no tensor '%s' (rank %u of the map)",
					   x ? b->path : a->path, lt->name, (unsigned)o->rank);
		if (!same_shape(x->info, lt) || !same_shape(y->info, lt))
			return dcr_err_set(e, DCR_EFORMAT,
					   "tensor '%s' of '%s' does not match the map (dtype or shape)",
					   lt->name, same_shape(x->info, lt) ? b->path : a->path);
		if (dcr_dtype_bits(lt->dtype) % 8)
			return dcr_err_set(e, DCR_EFORMAT, "tensor '%s': sub-byte dtypes have no layout",
					   lt->name);
		for (size_t k = 0; k < lt->npieces; k++) {
			const struct dcr_layout_piece *p = dcr_layout_tensor_piece(L, t, k);
			if (p->kind == DCR_PIECE_PADDING || d->mark[p->canon] == t + 1)
				continue;
			d->mark[p->canon] = t + 1;
			d->ca[p->canon].remaining++;
			d->ca[p->canon].held = 1;
		}
	}
	if (!nrank)
		return dcr_err_set(e, DCR_ENOTFOUND, "the layout map has no rank %u", (unsigned)o->rank);
	for (size_t i = 0; i < a->ntensors; i++)
		if (dcr_layout_find_tensor(L, o->rank, a->tensors[i].info->name) < 0)
			return dcr_err_set(e, DCR_EFORMAT, "tensor '%s' of '%s' is not in the map's rank %u",
					   a->tensors[i].info->name, a->path, (unsigned)o->rank);
	for (size_t i = 0; i < b->ntensors; i++)
		if (dcr_layout_find_tensor(L, o->rank, b->tensors[i].info->name) < 0)
			return dcr_err_set(e, DCR_EFORMAT, "tensor '%s' of '%s' is not in the map's rank %u",
					   b->tensors[i].info->name, b->path, (unsigned)o->rank);
	return 0;
}

/* The canonical tensors the rank holds, in name order (their output
 * TENSOR indices). */
static void order_held(struct rdctx *d)
{
	const struct dcr_layout *L = d->L;
	for (uint32_t c = 0; c < L->ncanon; c++)
		if (d->ca[c].held)
			d->order[d->nheld++] = c;
	qsort_r(d->order, d->nheld, sizeof(*d->order), cmp_name, (void *)L);
	for (size_t i = 0; i < d->nheld; i++)
		d->ca[d->order[i]].out = (uint32_t)i;
}

/* Diff tensor by tensor; a canonical tensor is encoded once complete. */
static int diff_rank(struct rdctx *d, struct dcr_err *e)
{
	const struct dcr_layout *L = d->L;
	int r;
	for (uint32_t t = 0; t < L->ntensors; t++) {
		const struct dcr_layout_tensor *lt = &L->tensors[t];
		if (lt->rank != d->o->rank)
			continue;
		const struct dcr_ckpt_tensor *x = dcr_ckpt_find(d->a, lt->name),
					     *y = dcr_ckpt_find(d->b, lt->name);
		d->st.stored_tensors++;
		d->st.stored_bytes += dcr_tensor_bytes(y->info);
		int skip = 1;
		for (size_t k = 0; k < lt->npieces && skip; k++) {
			const struct dcr_layout_piece *p = dcr_layout_tensor_piece(L, t, k);
			skip = p->kind == DCR_PIECE_PADDING || d->dominated[lt->first_piece + k];
		}
		if (skip)
			d->st.skipped_tensors++;
		else if ((r = diff_tensor(d, t, x, y, d->ba, d->bb, e)))
			return r;
		for (size_t k = 0; k < lt->npieces; k++) {
			const struct dcr_layout_piece *p = dcr_layout_tensor_piece(L, t, k);
			if (p->kind == DCR_PIECE_PADDING || d->mark[p->canon] == t + 1)
				continue;
			d->mark[p->canon] = t + 1;
			if (!--d->ca[p->canon].remaining && (r = finish_canon(d, p->canon, e)))
				return r;
		}
	}
	return 0;
}

/* ---- the digest parts of the elements the rank is responsible for ---- */

/* A run of canonical elements [cf, cf + len) that stored tensor t holds at
 * [sf, sf + len) through piece pi. */
struct orun {
	uint64_t cf, len, sf;
	uint32_t t, pi;
};

struct oruns {
	struct orun *v;
	size_t n, cap;
	struct rdctx *d;
	uint32_t t, pi;
};

static int oruns_push(struct oruns *o, uint64_t sf, uint64_t cf, uint64_t len)
{
	if (o->n && o->v[o->n - 1].t == o->t && o->v[o->n - 1].pi == o->pi &&
	    o->v[o->n - 1].cf + o->v[o->n - 1].len == cf && o->v[o->n - 1].sf + o->v[o->n - 1].len == sf) {
		o->v[o->n - 1].len += len;
		return 0;
	}
	if (o->n == o->cap) {
		size_t cap = o->cap ? 2 * o->cap : 64;
		struct orun *nv = realloc(o->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		o->v = nv;
		o->cap = cap;
	}
	o->v[o->n++] = (struct orun){cf, len, sf, o->t, o->pi};
	return 0;
}

/* Whether a lower holder than piece pi's tensor holds canonical element cf. */
static int lower_holds(const struct rdctx *d, uint32_t pi, uint64_t cf)
{
	const struct dcr_layout *L = d->L;
	const struct dcr_layout_piece *p = &L->pieces[pi];
	const struct dcr_layout_canon *cn = &L->canon[p->canon];
	uint64_t mine = holder_key(L, p->tensor), sf;
	for (size_t k = 0; k < cn->npieces; k++) {
		const struct dcr_layout_piece *q = &L->pieces[cn->pieces[k]];
		if (holder_key(L, q->tensor) < mine && cf >= q->clo && cf < q->chi &&
		    dcr_layout_piece_c2s(q, cf, &sf) == 1)
			return 1;
	}
	return 0;
}

/* A run of a piece: the elements the rank owns (no lower holder). */
static int orun_fn(void *arg, uint64_t sflat, uint64_t cflat, uint64_t len)
{
	struct oruns *o = arg;
	if (!o->d->shared[o->pi])
		return oruns_push(o, sflat, cflat, len);
	for (uint64_t i = 0; i < len;) {
		if (lower_holds(o->d, o->pi, cflat + i)) {
			i++;
			continue;
		}
		uint64_t j = i + 1;
		while (j < len && !lower_holds(o->d, o->pi, cflat + j))
			j++;
		int r = oruns_push(o, sflat + i, cflat + i, j - i);
		if (r)
			return r;
		i = j;
	}
	return 0;
}

static int cmp_orun(const void *x, const void *y)
{
	const struct orun *a = x, *b = y;
	return (a->cf > b->cf) - (a->cf < b->cf);
}

/* A block of the canonical matrix, rows [r0, r1) x columns [c0, c1), and
 * the runs (row-major within it) that fill it. */
struct oblock {
	uint64_t r0, r1, c0, c1;
	struct orun *seg;
	size_t n, cap;
};

static int block_add(struct oblock **bv, size_t *nb, size_t *cb, uint64_t r, uint64_t nr,
		     uint64_t c0, uint64_t c1, const struct orun *seg)
{
	struct oblock *b = NULL;
	/* the latest blocks first: a column slice continues its own */
	for (size_t k = *nb; k > 0 && k + 16 > *nb; k--)
		if ((*bv)[k - 1].c0 == c0 && (*bv)[k - 1].c1 == c1 && (*bv)[k - 1].r1 == r) {
			b = &(*bv)[k - 1];
			break;
		}
	if (!b) {
		if (*nb == *cb) {
			size_t cap = *cb ? 2 * *cb : 8;
			struct oblock *nv = realloc(*bv, cap * sizeof(*nv));
			if (!nv)
				return -ENOMEM;
			*bv = nv;
			*cb = cap;
		}
		b = &(*bv)[(*nb)++];
		*b = (struct oblock){.r0 = r, .r1 = r, .c0 = c0, .c1 = c1};
	}
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 8;
		struct orun *nv = realloc(b->seg, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		b->seg = nv;
		b->cap = cap;
	}
	b->seg[b->n++] = *seg;
	b->r1 = r + nr;
	return 0;
}

/* The block's canonical NEW bytes, row-major, from the rank's shards. */
static int block_fill(struct rdctx *d, const struct dcr_stripes *s, const struct oblock *b,
		      uint8_t *local, int cdt, struct dcr_err *e)
{
	const struct dcr_layout *L = d->L;
	unsigned cu = dcr_dtype_unit(cdt);
	uint64_t w = b->c1 - b->c0;
	for (size_t k = 0; k < b->n; k++) {
		const struct orun *g = &b->seg[k];
		const struct dcr_layout_tensor *lt = &L->tensors[g->t];
		const struct dcr_layout_piece *p = &L->pieces[g->pi];
		const struct dcr_ckpt_tensor *nt = dcr_ckpt_find(d->b, lt->name);
		unsigned su = dcr_dtype_unit(lt->dtype);
		uint8_t *at = local + ((g->cf / s->cols - b->r0) * w + g->cf % s->cols - b->c0) * cu;
		for (uint64_t x = 0; x < g->len; x += READ_ELEMS) {
			uint64_t n = g->len - x < READ_ELEMS ? g->len - x : READ_ELEMS;
			int r = dcr_pread_full(nt->fd, d->bb, (size_t)(n * su),
					       nt->file_off + (g->sf + x) * su);
			if (r)
				return dcr_err_sys(e, r, "cannot read tensor '%s'", lt->name);
			if (p->kind == DCR_PIECE_AFFINE) {
				memcpy(at + x * cu, d->bb, (size_t)(n * cu));
				continue;
			}
			for (uint64_t i = 0; i < n; i++)
				store_unit(at + (x + i) * cu, cu,
					   dcr_xform_forward(p->xform, lt->dtype, cdt,
							     load_unit(d->bb + i * su, su)));
		}
	}
	return 0;
}

/* The digest parts of canonical tensor c that the rank is responsible for:
 * the elements it holds with no lower holder, read from NEW and cut into
 * blocks of the canonical matrix (row slices, column slices). */
static int canon_parts(struct rdctx *d, uint32_t c, struct dcr_parts *ps, struct dcr_err *e)
{
	const struct dcr_layout *L = d->L;
	const struct dcr_layout_canon *cn = &L->canon[c];
	struct oruns o = {.d = d};
	struct oblock *bv = NULL;
	size_t nb = 0, cb = 0;
	int r = 0;
	for (size_t k = 0; k < cn->npieces && !r; k++) {
		uint32_t pi = cn->pieces[k];
		const struct dcr_layout_piece *p = &L->pieces[pi];
		if (L->tensors[p->tensor].rank != d->o->rank || d->dominated[pi])
			continue;
		o.t = p->tensor;
		o.pi = pi;
		r = dcr_layout_piece_runs(p, orun_fn, &o);
	}
	if (r)
		goto oom;
	if (o.n)
		qsort(o.v, o.n, sizeof(*o.v), cmp_orun);
	struct dcr_stripes s;
	dcr_stripes_init(&s, cn->dtype, cn->ndim, cn->shape);
	for (size_t i = 0; i < o.n; i++) {
		if (i && o.v[i - 1].cf + o.v[i - 1].len > o.v[i].cf) {
			r = dcr_err_set(e, DCR_EFORMAT,
					"layout map: element %llu of '%s' is held twice by rank %u",
					(unsigned long long)o.v[i].cf, cn->name, (unsigned)d->o->rank);
			goto out;
		}
		/* cut the run at row ends: a head, whole rows, a tail */
		struct orun g = o.v[i];
		while (g.len) {
			uint64_t row = g.cf / s.cols, col = g.cf % s.cols, n, nr;
			if (!col && g.len >= s.cols) {
				nr = g.len / s.cols;
				n = nr * s.cols;
				r = block_add(&bv, &nb, &cb, row, nr, 0, s.cols,
					      &(struct orun){g.cf, n, g.sf, g.t, g.pi});
			} else {
				n = s.cols - col < g.len ? s.cols - col : g.len;
				r = block_add(&bv, &nb, &cb, row, 1, col, col + n,
					      &(struct orun){g.cf, n, g.sf, g.t, g.pi});
			}
			if (r)
				goto oom;
			g.cf += n;
			g.sf += n;
			g.len -= n;
		}
	}
	unsigned cu = dcr_dtype_unit(cn->dtype);
	for (size_t k = 0; k < nb && !r; k++) {
		const struct oblock *b = &bv[k];
		uint64_t bytes;
		if (mul_ovf((b->r1 - b->r0) * (b->c1 - b->c0), cu, &bytes) || bytes > SIZE_MAX)
			goto oom;
		uint8_t *local = malloc(bytes ? (size_t)bytes : 1);
		if (!local)
			goto oom;
		r = block_fill(d, &s, b, local, cn->dtype, e);
		if (!r)
			r = dcr_stripes_parts(&s, local, b->r0, b->r1, b->c0, b->c1, ps, e);
		free(local);
	}
	goto out;
oom:
	r = dcr_err_sys(e, ENOMEM, "layout diff: digest parts of '%s'", cn->name);
out:
	for (size_t k = 0; k < nb; k++)
		free(bv[k].seg);
	free(bv);
	free(o.v);
	return r;
}

/* The id of the layout's whole canonical tensor set, so that whoever joins
 * the ranks' parts knows when a rank's tensors are missing. */
static int canon_set(const struct dcr_layout *L, dcr_digest *id, struct dcr_err *e)
{
	uint32_t *ord = dcr_calloc(L->ncanon + 1, sizeof(*ord));
	struct dcr_state_entry *ent = dcr_calloc(L->ncanon + 1, sizeof(*ent));
	if (!ord || !ent) {
		free(ord);
		free(ent);
		return dcr_err_sys(e, ENOMEM, "layout diff");
	}
	for (uint32_t c = 0; c < L->ncanon; c++)
		ord[c] = c;
	qsort_r(ord, L->ncanon, sizeof(*ord), cmp_name, (void *)L);
	for (size_t i = 0; i < L->ncanon; i++) {
		const struct dcr_layout_canon *cn = &L->canon[ord[i]];
		ent[i] = (struct dcr_state_entry){cn->name, cn->dtype, cn->ndim, cn->shape, {{0}}};
	}
	dcr_tensor_set_id(ent, L->ncanon, id);
	free(ord);
	free(ent);
	return 0;
}

/* The partial delta: each held canonical tensor with its encoded items,
 * in name order; fills the totals. */
static int write_rank_delta(struct rdctx *d, struct dcr_sink sink, struct dcr_err *e)
{
	const struct dcr_layout *L = d->L;
	const struct dcr_rankdiff_opts *o = d->o;
	uint8_t attempt[16];
	dcr_digest zero = {{0}};
	int r;
	if ((r = dcr_attempt_id(o->attempt, attempt, e)) ||
	    (r = dcr_delta_writer_init_flags(&d->w, sink, o->base_id ? o->base_id : &zero, attempt,
					     DCR_DELTA_PARTIAL, o->what, e)))
		return r;
	dcr_digest set;
	if ((r = canon_set(L, &set, e)) ||
	    (r = dcr_delta_write_canon(&d->w, (uint32_t)L->ncanon, &set, e)))
		return r;
	for (size_t i = 0; i < d->nheld; i++) {
		const struct dcr_layout_canon *cn = &L->canon[d->order[i]];
		struct cacc *ca = &d->ca[d->order[i]];
		struct dcr_delta_tensor dt = {.name = cn->name,
					      .file = (char *)(o->file ? o->file : "model.safetensors"),
					      .dtype = cn->dtype, .ndim = cn->ndim};
		memcpy(dt.shape, cn->shape, sizeof(dt.shape));
		struct dcr_parts ps = {0};
		if ((r = dcr_delta_write_tensor(&d->w, &dt, e)) ||
		    (r = dcr_delta_write_raw(&d->w, ca->recs.p, ca->recs.len, ca->items, ca->changed, e)) ||
		    (r = canon_parts(d, d->order[i], &ps, e)) ||
		    (r = dcr_delta_write_parts(&d->w, (uint32_t)i, ps.v, ps.n, e))) {
			dcr_parts_free(&ps);
			return r;
		}
		d->st.parts += ps.n;
		dcr_parts_free(&ps);
		d->st.changed += ca->changed;
		dcr_buf_free(&ca->recs);
	}
	if ((r = dcr_delta_write_end(&d->w, &zero, e)))
		return r;
	d->st.items = d->w.nitems;
	d->st.tensors = d->nheld;
	d->st.bytes_out = d->w.bytes;
	return 0;
}

int dcr_rankdiff(const struct dcr_rankdiff_opts *o, struct dcr_sink sink,
		 struct dcr_rankdiff_stats *st, struct dcr_err *e)
{
	const struct dcr_layout *L = o->map;
	struct rdctx d = {.o = o, .L = L};
	int r = 0;
	d.chunk = o->chunk_elems ? o->chunk_elems : (1u << 20);
	if (d.chunk > DCR_ITEM_MAX_ELEMS)
		d.chunk = DCR_ITEM_MAX_ELEMS;
	d.ca = dcr_calloc(L->ncanon + 1, sizeof(*d.ca));
	d.shared = dcr_calloc(L->npieces + 1, 1);
	d.dominated = dcr_calloc(L->npieces + 1, 1);
	d.mark = dcr_calloc(L->ncanon + 1, sizeof(*d.mark));
	d.order = dcr_calloc(L->ncanon + 1, sizeof(*d.order));
	d.ba = malloc((size_t)READ_ELEMS * 8);
	d.bb = malloc((size_t)READ_ELEMS * 8);
	if (!d.ca || !d.shared || !d.dominated || !d.mark || !d.order || !d.ba || !d.bb) {
		r = dcr_err_sys(e, ENOMEM, "layout diff");
		goto out;
	}
	if ((r = dcr_ckpt_open(o->base, &d.a, e)) || (r = dcr_ckpt_open(o->target, &d.b, e)) ||
	    (r = check_rank_tensors(&d, e)))
		goto out;
	memset(d.mark, 0, (L->ncanon + 1) * sizeof(*d.mark));
	order_held(&d);
	owner_flags(&d);
	if ((r = diff_rank(&d, e)) || (r = write_rank_delta(&d, sink, e)))
		goto out;
	if (st)
		*st = d.st;
out:
	if (d.ca)
		for (size_t c = 0; c < L->ncanon; c++) {
			lvec_free(&d.ca[c].ch);
			dcr_buf_free(&d.ca[c].recs);
		}
	free(d.ca);
	free(d.shared);
	free(d.dominated);
	free(d.mark);
	free(d.order);
	free(d.ba);
	free(d.bb);
	dcr_delta_writer_release(&d.w);
	dcr_ckpt_close(d.a);
	dcr_ckpt_close(d.b);
	return r;
}

