/* rankdiff.c - a training rank's diff in canonical coordinates, and the
 * merge of the ranks' partial deltas (see layout-delta.h and dcr(7)). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "layout-delta.h"

#define READ_ELEMS (1u << 20)

/* One canonical change: index, value (XOR mask or new bits per enc), and
 * who sent it (rankdiff: the holder's key; merge: the input). */
struct lchg {
	uint64_t c;
	uint64_t val;
	uint32_t key;
	uint8_t enc;
	uint8_t shared; /* rankdiff: a lower holder may exist, check the owner */
};

static int lchg_cmp(const void *a, const void *b)
{
	const struct lchg *x = a, *y = b;
	if (x->c != y->c)
		return x->c < y->c ? -1 : 1;
	return x->key < y->key ? -1 : x->key > y->key;
}

struct lvec {
	struct lchg *v;
	size_t n, cap;
};

static int lvec_push(struct lvec *l, const struct lchg *c)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 1024;
		struct lchg *nv = realloc(l->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = *c;
	return 0;
}

static void lvec_free(struct lvec *l)
{
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/* Framed ITEM records for sorted, distinct changes of tensor tidx: an item
 * spans at most `chunk` elements and holds changes of one encoding. */
static int emit_items(struct dcr_buf *recs, uint32_t tidx, const struct lchg *v, size_t n,
		      unsigned unit, uint64_t chunk, uint64_t *nitems, struct dcr_err *e)
{
	struct dcr_changes ch = {0};
	struct dcr_buf enc = {0};
	int r = 0;
	for (size_t i = 0; i < n && !r;) {
		uint64_t start = v[i].c;
		size_t j = i;
		while (j < n && v[j].enc == v[i].enc && v[j].c - start < chunk)
			j++;
		if (dcr_changes_reserve(&ch, j - i)) {
			r = dcr_err_sys(e, ENOMEM, "layout delta");
			break;
		}
		for (size_t k = i; k < j; k++) {
			ch.pos[k - i] = v[k].c - start;
			ch.val[k - i] = v[k].val;
		}
		ch.n = j - i;
		struct dcr_item it = {.tensor = tidx, .enc = v[i].enc, .start = start,
				      .len = v[j - 1].c - start + 1, .n = j - i};
		enc.len = 0;
		if ((r = dcr_item_encode(&ch, unit, it.len, 0, &it.codec, &enc, e)))
			break;
		it.data = enc.p;
		it.data_len = enc.len;
		if (dcr_delta_item_record(recs, &it))
			r = dcr_err_sys(e, ENOMEM, "layout delta");
		(*nitems)++;
		i = j;
	}
	dcr_changes_free(&ch);
	dcr_buf_free(&enc);
	return r;
}

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
	r = emit_items(&a->recs, a->out, l->v, n, unit, d->chunk, &a->items, e);
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

int dcr_rankdiff(const struct dcr_rankdiff_opts *o, struct dcr_sink sink,
		 struct dcr_rankdiff_stats *st, struct dcr_err *e)
{
	const struct dcr_layout *L = o->map;
	struct rdctx d = {.o = o, .L = L};
	struct dcr_ckpt *a = NULL, *b = NULL;
	struct dcr_delta_writer w = {0};
	uint32_t *mark = NULL, *order = NULL;
	uint8_t *ba = NULL, *bb = NULL;
	size_t nheld = 0;
	int r = 0;
	d.chunk = o->chunk_elems ? o->chunk_elems : (1u << 20);
	if (d.chunk > DCR_ITEM_MAX_ELEMS)
		d.chunk = DCR_ITEM_MAX_ELEMS;
	d.ca = dcr_calloc(L->ncanon + 1, sizeof(*d.ca));
	d.shared = dcr_calloc(L->npieces + 1, 1);
	d.dominated = dcr_calloc(L->npieces + 1, 1);
	mark = dcr_calloc(L->ncanon + 1, sizeof(*mark));
	order = dcr_calloc(L->ncanon + 1, sizeof(*order));
	ba = malloc((size_t)READ_ELEMS * 8);
	bb = malloc((size_t)READ_ELEMS * 8);
	if (!d.ca || !d.shared || !d.dominated || !mark || !order || !ba || !bb) {
		r = dcr_err_sys(e, ENOMEM, "layout diff");
		goto out;
	}
	if ((r = dcr_ckpt_open(o->base, &a, e)) || (r = dcr_ckpt_open(o->target, &b, e)))
		goto out;

	/* the rank's stored tensors: each in both checkpoints, as the map says */
	size_t nrank = 0;
	for (uint32_t t = 0; t < L->ntensors; t++) {
		const struct dcr_layout_tensor *lt = &L->tensors[t];
		if (lt->rank != o->rank)
			continue;
		nrank++;
		const struct dcr_ckpt_tensor *x = dcr_ckpt_find(a, lt->name),
					     *y = dcr_ckpt_find(b, lt->name);
		if (!x || !y) {
			r = dcr_err_set(e, DCR_ENOTFOUND, "'%s' has no tensor '%s' (rank %u of the map)",
					x ? b->path : a->path, lt->name, (unsigned)o->rank);
			goto out;
		}
		if (!same_shape(x->info, lt) || !same_shape(y->info, lt)) {
			r = dcr_err_set(e, DCR_EFORMAT,
					"tensor '%s' of '%s' does not match the map (dtype or shape)",
					lt->name, same_shape(x->info, lt) ? b->path : a->path);
			goto out;
		}
		if (dcr_dtype_bits(lt->dtype) % 8) {
			r = dcr_err_set(e, DCR_EFORMAT, "tensor '%s': sub-byte dtypes have no layout",
					lt->name);
			goto out;
		}
		for (size_t k = 0; k < lt->npieces; k++) {
			const struct dcr_layout_piece *p = dcr_layout_tensor_piece(L, t, k);
			if (p->kind == DCR_PIECE_PADDING || mark[p->canon] == t + 1)
				continue;
			mark[p->canon] = t + 1;
			d.ca[p->canon].remaining++;
			d.ca[p->canon].held = 1;
		}
	}
	if (!nrank) {
		r = dcr_err_set(e, DCR_ENOTFOUND, "the layout map has no rank %u", (unsigned)o->rank);
		goto out;
	}
	for (size_t i = 0; i < a->ntensors; i++)
		if (dcr_layout_find_tensor(L, o->rank, a->tensors[i].info->name) < 0) {
			r = dcr_err_set(e, DCR_EFORMAT, "tensor '%s' of '%s' is not in the map's rank %u",
					a->tensors[i].info->name, a->path, (unsigned)o->rank);
			goto out;
		}
	for (size_t i = 0; i < b->ntensors; i++)
		if (dcr_layout_find_tensor(L, o->rank, b->tensors[i].info->name) < 0) {
			r = dcr_err_set(e, DCR_EFORMAT, "tensor '%s' of '%s' is not in the map's rank %u",
					b->tensors[i].info->name, b->path, (unsigned)o->rank);
			goto out;
		}
	memset(mark, 0, (L->ncanon + 1) * sizeof(*mark));
	for (uint32_t c = 0; c < L->ncanon; c++)
		if (d.ca[c].held)
			order[nheld++] = c;
	qsort_r(order, nheld, sizeof(*order), cmp_name, (void *)L);
	for (size_t i = 0; i < nheld; i++)
		d.ca[order[i]].out = (uint32_t)i;
	owner_flags(&d);

	/* diff tensor by tensor; a canonical tensor is encoded once complete */
	for (uint32_t t = 0; t < L->ntensors; t++) {
		const struct dcr_layout_tensor *lt = &L->tensors[t];
		if (lt->rank != o->rank)
			continue;
		const struct dcr_ckpt_tensor *x = dcr_ckpt_find(a, lt->name),
					     *y = dcr_ckpt_find(b, lt->name);
		d.st.stored_tensors++;
		d.st.stored_bytes += dcr_tensor_bytes(y->info);
		int skip = 1;
		for (size_t k = 0; k < lt->npieces && skip; k++) {
			const struct dcr_layout_piece *p = dcr_layout_tensor_piece(L, t, k);
			skip = p->kind == DCR_PIECE_PADDING || d.dominated[lt->first_piece + k];
		}
		if (skip)
			d.st.skipped_tensors++;
		else if ((r = diff_tensor(&d, t, x, y, ba, bb, e)))
			goto out;
		for (size_t k = 0; k < lt->npieces; k++) {
			const struct dcr_layout_piece *p = dcr_layout_tensor_piece(L, t, k);
			if (p->kind == DCR_PIECE_PADDING || mark[p->canon] == t + 1)
				continue;
			mark[p->canon] = t + 1;
			if (!--d.ca[p->canon].remaining && (r = finish_canon(&d, p->canon, e)))
				goto out;
		}
	}

	uint8_t attempt[16];
	dcr_digest zero = {{0}};
	if ((r = dcr_attempt_id(o->attempt, attempt, e)) ||
	    (r = dcr_delta_writer_init_flags(&w, sink, &zero, attempt, DCR_DELTA_PARTIAL, o->what,
					     e)))
		goto out;
	for (size_t i = 0; i < nheld; i++) {
		const struct dcr_layout_canon *cn = &L->canon[order[i]];
		struct cacc *ca = &d.ca[order[i]];
		struct dcr_delta_tensor dt = {.name = cn->name,
					      .file = (char *)(o->file ? o->file : "model.safetensors"),
					      .dtype = cn->dtype, .ndim = cn->ndim};
		memcpy(dt.shape, cn->shape, sizeof(dt.shape));
		if ((r = dcr_delta_write_tensor(&w, &dt, e)) ||
		    (r = dcr_delta_write_raw(&w, ca->recs.p, ca->recs.len, ca->items, ca->changed, e)))
			goto out;
		d.st.changed += ca->changed;
		dcr_buf_free(&ca->recs);
	}
	if ((r = dcr_delta_write_end(&w, &zero, e)))
		goto out;
	d.st.items = w.nitems;
	d.st.tensors = nheld;
	d.st.bytes_out = w.bytes;
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
	free(mark);
	free(order);
	free(ba);
	free(bb);
	dcr_delta_writer_release(&w);
	dcr_ckpt_close(a);
	dcr_ckpt_close(b);
	return r;
}

/* ---- merging partial deltas ---- */

struct min {
	const char *path;
	int fd;
	struct dcr_delta_reader rd;
	int inited;
	struct dcr_delta_rec rec; /* the next record, not yet consumed */
	int at_end;               /* rec is past END */
	uint32_t ntensors;        /* TENSOR records seen */
	struct dcr_delta_tensor cur;
};

static int min_advance(struct min *m, struct dcr_err *e)
{
	for (;;) {
		int q = dcr_delta_next(&m->rd, &m->rec, e);
		if (q < 0)
			return q;
		if (q == 0 || m->rec.type == DCR_REC_END) {
			m->at_end = 1;
			return 0;
		}
		if (m->rec.type >= DCR_REC_ANCILLARY)
			continue;
		if (m->rec.type == DCR_REC_TENSOR || m->rec.type == DCR_REC_ITEM)
			return 0;
		if (m->rec.type == DCR_REC_DONE)
			continue; /* a full input's digests: the output names its own */
		return dcr_err_set(e, DCR_EFORMAT, "%s: a layout merge takes only TENSOR and ITEM records (found type %u)",
				   m->path, m->rec.type);
	}
}

struct digests {
	char **name;
	dcr_digest *d;
	uint8_t *used;
	size_t n;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_digests(const char *path, struct digests *g, struct dcr_err *e)
{
	uint8_t *buf;
	size_t len;
	int r = dcr_read_file(path, (size_t)1 << 30, &buf, &len, e);
	if (r)
		return r;
	size_t cap = 0, lineno = 0;
	char **lines = NULL;
	for (char *s = (char *)buf, *nl; s < (char *)buf + len; s = nl + 1) {
		nl = strchr(s, '\n');
		if (!nl)
			nl = (char *)buf + len;
		*nl = 0;
		lineno++;
		if (!*s)
			continue;
		if (g->n == cap) {
			cap = cap ? cap * 2 : 256;
			char **nv = realloc(lines, cap * sizeof(*nv));
			if (!nv) {
				free(lines);
				free(buf);
				return dcr_err_sys(e, ENOMEM, "%s", path);
			}
			lines = nv;
		}
		if (strlen(s) < 66 || s[64] != '\t') {
			free(lines);
			free(buf);
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s:%zu: want 'HEX<TAB>NAME' (dcr-verify --tensors)", path,
					   lineno);
		}
		lines[g->n++] = s;
	}
	g->name = dcr_calloc(g->n + 1, sizeof(char *));
	g->d = dcr_calloc(g->n + 1, sizeof(dcr_digest));
	g->used = dcr_calloc(g->n + 1, 1);
	if (!g->name || !g->d || !g->used) {
		free(lines);
		free(buf);
		return dcr_err_sys(e, ENOMEM, "%s", path);
	}
	/* sort by name (the lines start with the digest) */
	char **byname = dcr_calloc(g->n + 1, sizeof(char *));
	if (!byname) {
		free(lines);
		free(buf);
		return dcr_err_sys(e, ENOMEM, "%s", path);
	}
	for (size_t i = 0; i < g->n; i++)
		byname[i] = lines[i] + 65;
	qsort(byname, g->n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < g->n; i++) {
		char *s = byname[i] - 65;
		s[64] = 0;
		g->name[i] = dcr_strdup(byname[i]);
		if (!g->name[i] || dcr_digest_parse_hex(s, &g->d[i]) ||
		    (i && !strcmp(byname[i - 1], byname[i]))) {
			r = g->name[i] ? dcr_err_set(e, DCR_EFORMAT, "%s: bad or repeated entry for '%s'",
						     path, byname[i])
				       : dcr_err_sys(e, ENOMEM, "%s", path);
			break;
		}
	}
	free(byname);
	free(lines);
	free(buf);
	return r;
}

static void digests_free(struct digests *g)
{
	for (size_t i = 0; i < g->n; i++)
		free(g->name[i]);
	free(g->name);
	free(g->d);
	free(g->used);
}

static long digests_find(const struct digests *g, const char *name)
{
	size_t lo = 0, hi = g->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(g->name[mid], name);
		if (!c)
			return (long)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

int dcr_merge(const struct dcr_merge_opts *o, struct dcr_sink sink, struct dcr_merge_stats *st,
	      struct dcr_err *e)
{
	struct min *in = dcr_calloc(o->ninputs + 1, sizeof(*in));
	struct digests g = {0};
	struct dcr_delta_writer w = {0};
	struct lvec l = {0};
	struct dcr_changes ch = {0};
	struct dcr_buf recs = {0};
	struct dcr_state_entry *ent = NULL;
	size_t nent = 0, capent = 0;
	char *cur_name = NULL;
	int r = 0, partial = !o->target_digests;
	uint64_t chunk = o->chunk_elems ? o->chunk_elems : (1u << 20), dups = 0;
	if (chunk > DCR_ITEM_MAX_ELEMS)
		chunk = DCR_ITEM_MAX_ELEMS;
	if (!in)
		return dcr_err_sys(e, ENOMEM, "merge");
	if (o->target_digests && !o->base_id) {
		r = dcr_err_set(e, -EINVAL, "target digests need the canonical base id");
		goto out;
	}
	if (o->target_digests && (r = load_digests(o->target_digests, &g, e)))
		goto out;
	for (size_t i = 0; i < o->ninputs; i++) {
		in[i].path = o->inputs[i];
		in[i].fd = strcmp(o->inputs[i], "-") ? open(o->inputs[i], O_RDONLY | O_CLOEXEC) : 0;
		if (in[i].fd < 0) {
			r = dcr_err_sys(e, errno, "cannot open '%s'", o->inputs[i]);
			goto out;
		}
		r = dcr_delta_reader_init_flags(&in[i].rd,
						(struct dcr_source){dcr_source_fd_read, &in[i].fd}, NULL,
						0, DCR_DELTA_PARTIAL, in[i].path, e);
		in[i].inited = 1;
		if (r || (r = min_advance(&in[i], e)))
			goto out;
	}
	uint8_t attempt[16];
	dcr_digest zero = {{0}};
	if ((r = dcr_attempt_id(o->attempt, attempt, e)) ||
	    (r = dcr_delta_writer_init_flags(&w, sink, o->base_id ? o->base_id : &zero, attempt,
					     partial ? DCR_DELTA_PARTIAL : 0, o->what, e)))
		goto out;
	for (uint32_t out_idx = 0;; out_idx++) {
		/* the smallest next tensor name over the inputs */
		const char *name = NULL;
		free(cur_name);
		cur_name = NULL;
		for (size_t i = 0; i < o->ninputs; i++) {
			struct min *m = &in[i];
			if (m->at_end)
				continue;
			if (m->rec.type != DCR_REC_TENSOR) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s: an item before its tensor", m->path);
				goto out;
			}
			if (!m->cur.name) {
				if ((r = dcr_delta_parse_tensor(&m->rec, &m->cur, e)))
					goto out;
				if (m->cur.flags & DCR_TENSOR_NEW) {
					r = dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s' is not in the base; a layout merge takes changes only",
							m->path, m->cur.name);
					goto out;
				}
				m->ntensors++;
			}
			if (!name || strcmp(m->cur.name, name) < 0)
				name = m->cur.name;
		}
		if (!name)
			break;
		if (!(cur_name = dcr_strdup(name))) {
			r = dcr_err_sys(e, ENOMEM, "merge");
			goto out;
		}
		name = cur_name;
		struct dcr_delta_tensor *first = NULL;
		size_t first_in = 0;
		l.n = 0;
		for (size_t i = 0; i < o->ninputs; i++) {
			struct min *m = &in[i];
			if (m->at_end || strcmp(m->cur.name, name))
				continue;
			if (!first) {
				first = &m->cur;
				first_in = i;
			} else if (first->dtype != m->cur.dtype || first->ndim != m->cur.ndim ||
				   memcmp(first->shape, m->cur.shape, first->ndim * sizeof(uint64_t)) ||
				   strcmp(first->file, m->cur.file)) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s and %s disagree on tensor '%s' (dtype, shape or file)",
						in[first_in].path, m->path, name);
				goto out;
			}
			unsigned unit = dcr_dtype_unit(m->cur.dtype);
			uint64_t units = m->cur.nelem * dcr_dtype_bits(m->cur.dtype) / 8 / unit;
			/* its items */
			while (!(r = min_advance(m, e)) && !m->at_end && m->rec.type == DCR_REC_ITEM) {
				struct dcr_item it;
				if ((r = dcr_delta_parse_item(&m->rec, &it, e)))
					goto out;
				if (it.tensor != m->ntensors - 1 || it.start > units ||
				    it.len > units - it.start) {
					r = dcr_err_set(e, DCR_EFORMAT, "%s: item out of place for '%s'",
							m->path, name);
					goto out;
				}
				if ((r = dcr_item_decode(&it, unit, &ch, e)))
					goto out;
				for (size_t k = 0; k < ch.n; k++) {
					struct lchg c = {.c = it.start + ch.pos[k], .val = ch.val[k],
							 .key = (uint32_t)i, .enc = it.enc};
					if (lvec_push(&l, &c)) {
						r = dcr_err_sys(e, ENOMEM, "merge");
						goto out;
					}
				}
			}
			if (r)
				goto out;
		}
		/* union, each element once */
		if (l.n > 1)
			qsort(l.v, l.n, sizeof(*l.v), lchg_cmp);
		size_t n = 0;
		for (size_t k = 0; k < l.n; k++) {
			if (n && l.v[n - 1].c == l.v[k].c) {
				if (l.v[n - 1].enc != l.v[k].enc || l.v[n - 1].val != l.v[k].val) {
					r = dcr_err_set(e, DCR_EFORMAT,
							"%s and %s disagree on element %llu of '%s'",
							in[l.v[n - 1].key].path, in[l.v[k].key].path,
							(unsigned long long)l.v[k].c, name);
					goto out;
				}
				dups++;
				continue;
			}
			l.v[n++] = l.v[k];
		}
		uint64_t nitems = 0;
		recs.len = 0;
		if ((r = dcr_delta_write_tensor(&w, first, e)) ||
		    (r = emit_items(&recs, out_idx, l.v, n, dcr_dtype_unit(first->dtype), chunk,
				    &nitems, e)) ||
		    (r = dcr_delta_write_raw(&w, recs.p, recs.len, nitems, n, e)))
			goto out;
		if (!partial) {
			long k = digests_find(&g, name);
			if (k < 0) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s has no digest for tensor '%s'",
						o->target_digests, name);
				goto out;
			}
			g.used[k] = 1;
			if ((r = dcr_delta_write_done(&w, out_idx, &g.d[k], e)))
				goto out;
			if (nent == capent) {
				capent = capent ? capent * 2 : 256;
				void *ne = realloc(ent, capent * sizeof(*ent));
				if (!ne) {
					r = dcr_err_sys(e, ENOMEM, "merge");
					goto out;
				}
				ent = ne;
			}
			ent[nent].name = g.name[k];
			ent[nent].dtype = first->dtype;
			ent[nent].ndim = first->ndim;
			ent[nent].shape = NULL; /* filled below: first is about to go */
			ent[nent].digest = g.d[k];
			uint64_t *shape = malloc((first->ndim + 1) * sizeof(uint64_t));
			if (!shape) {
				r = dcr_err_sys(e, ENOMEM, "merge");
				goto out;
			}
			memcpy(shape, first->shape, first->ndim * sizeof(uint64_t));
			ent[nent++].shape = shape;
		}
		/* the inputs at this tensor move on */
		for (size_t i = 0; i < o->ninputs; i++)
			if (in[i].cur.name && !strcmp(in[i].cur.name, name))
				dcr_delta_tensor_clear(&in[i].cur);
		if (st) {
			st->changed += n;
			st->items += nitems;
		}
	}
	dcr_digest target = zero;
	if (!partial) {
		for (size_t k = 0; k < g.n; k++)
			if (!g.used[k]) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s names tensor '%s', which no input declares",
						o->target_digests, g.name[k]);
				goto out;
			}
		dcr_state_id(ent, nent, &target);
	}
	if ((r = dcr_delta_write_end(&w, &target, e)))
		goto out;
	if (st) {
		st->target = target;
		st->partial = partial;
		st->tensors = w.ntensors;
		st->duplicates = dups;
		st->bytes_out = w.bytes;
	}
out:
	for (size_t i = 0; i < o->ninputs; i++) {
		if (in[i].inited)
			dcr_delta_reader_release(&in[i].rd);
		dcr_delta_tensor_clear(&in[i].cur);
		if (in[i].fd > 0)
			close(in[i].fd);
	}
	free(in);
	free(cur_name);
	for (size_t k = 0; k < nent; k++)
		free((void *)ent[k].shape);
	free(ent);
	digests_free(&g);
	lvec_free(&l);
	dcr_changes_free(&ch);
	dcr_buf_free(&recs);
	dcr_delta_writer_release(&w);
	return r;
}
