/* layout.c - layout maps: build, validate, parse, dump, map, place, check.
 * The format is dcr-format-layout(5); the model is in layout.h. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/buf.h"
#include "core/bytes.h"
#include "core/file.h"
#include "core/util.h"
#include "placement/layout.h"

#define MAX_MAP_BYTES (1ULL << 30)
#define MAX_ENTRIES (1U << 30)

/* ---- construction -------------------------------------------------------- */

struct dcr_layout *dcr_layout_new(void)
{
	struct dcr_layout *L = calloc(1, sizeof(*L));
	if (L) {
		L->tp = L->ep = L->world = 1;
	}
	return L;
}

void dcr_layout_free(struct dcr_layout *L)
{
	if (!L)
		return;
	for (size_t i = 0; i < L->ncanon; i++) {
		free(L->canon[i].name);
		free(L->canon[i].pieces);
	}
	for (size_t i = 0; i < L->ntensors; i++) {
		free(L->tensors[i].name);
		free(L->tensors[i].maxhi);
	}
	free(L->canon);
	free(L->tensors);
	free(L->pieces);
	free(L->chash);
	free(L->tsorted);
	free(L->framework);
	free(L->model_type);
	free(L);
}

static int grow(void **p, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	if (n >= MAX_ENTRIES)
		return -ENOMEM;
	size_t nc = *cap ? *cap * 2 : 16;
	void *q = realloc(*p, nc * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = nc;
	return 0;
}

int dcr_layout_set_info(struct dcr_layout *L, const char *framework,
			const char *model_type, uint32_t tp, uint32_t ep,
			uint32_t world, int complete, struct dcr_err *e)
{
	free(L->framework);
	free(L->model_type);
	L->framework = dcr_strdup(framework);
	L->model_type = dcr_strdup(model_type);
	if ((framework && !L->framework) || (model_type && !L->model_type))
		return dcr_err_sys(e, ENOMEM, "layout map");
	L->tp = tp;
	L->ep = ep;
	L->world = world;
	L->complete = !!complete;
	return 0;
}

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ULL;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ULL;
	return h;
}

static int chash_rebuild(struct dcr_layout *L, size_t want)
{
	size_t size = 64;
	while (size < want * 2)
		size *= 2;
	uint32_t *t = malloc(size * sizeof(*t));
	if (!t)
		return -ENOMEM;
	memset(t, 0xff, size * sizeof(*t));
	for (size_t i = 0; i < L->ncanon; i++) {
		size_t h = hash_str(L->canon[i].name) & (size - 1);
		while (t[h] != UINT32_MAX)
			h = (h + 1) & (size - 1);
		t[h] = (uint32_t)i;
	}
	free(L->chash);
	L->chash = t;
	L->chash_size = size;
	return 0;
}

int dcr_layout_find_canon(const struct dcr_layout *L, const char *name)
{
	if (!L->chash_size)
		return -1;
	size_t h = hash_str(name) & (L->chash_size - 1);
	while (L->chash[h] != UINT32_MAX) {
		if (!strcmp(L->canon[L->chash[h]].name, name))
			return (int)L->chash[h];
		h = (h + 1) & (L->chash_size - 1);
	}
	return -1;
}

static int check_shape(unsigned ndim, const uint64_t *shape, uint64_t *nelem,
		       const char *what, const char *name, struct dcr_err *e)
{
	if (ndim > DCR_MAX_NDIM)
		return dcr_err_set(e, DCR_EFORMAT, "%s '%s': %u dimensions (at most %d)",
				   what, name, ndim, DCR_MAX_NDIM);
	uint64_t n = 1;
	for (unsigned k = 0; k < ndim; k++)
		if (mul_ovf(n, shape[k], &n))
			return dcr_err_set(e, DCR_EFORMAT, "%s '%s': shape overflows",
					   what, name);
	/* Byte sizes must stay addressable too (8 bytes per element at most). */
	if (n > (UINT64_MAX >> 4))
		return dcr_err_set(e, DCR_EFORMAT, "%s '%s': too many elements",
				   what, name);
	*nelem = n;
	return 0;
}

static int check_dtype(int dtype, const char *what, const char *name,
		       struct dcr_err *e)
{
	if (dtype < 0 || dtype >= DCR_DT_COUNT)
		return dcr_err_set(e, DCR_EFORMAT, "%s '%s': unknown dtype", what, name);
	if (dcr_dtype_bits(dtype) < 8)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s '%s': sub-byte dtype %s is not supported in layout maps",
				   what, name, dcr_dtype_name(dtype));
	return 0;
}

int dcr_layout_add_canon(struct dcr_layout *L, const char *name, int dtype,
			 unsigned ndim, const uint64_t *shape, struct dcr_err *e)
{
	uint64_t nelem;
	int r;
	if (L->finished)
		return dcr_err_set(e, -EINVAL, "layout map already finished");
	if (!name || !*name)
		return dcr_err_set(e, DCR_EFORMAT, "canonical tensor without a name");
	if ((r = check_dtype(dtype, "canonical tensor", name, e)) < 0 ||
	    (r = check_shape(ndim, shape, &nelem, "canonical tensor", name, e)) < 0)
		return r;
	if (dcr_layout_find_canon(L, name) >= 0)
		return dcr_err_set(e, DCR_EFORMAT, "canonical tensor '%s' listed twice", name);
	if (grow((void **)&L->canon, &L->cap_canon, L->ncanon, sizeof(*L->canon)) < 0)
		return dcr_err_sys(e, ENOMEM, "layout map");
	struct dcr_layout_canon *c = &L->canon[L->ncanon];
	memset(c, 0, sizeof(*c));
	if (!(c->name = strdup(name)))
		return dcr_err_sys(e, ENOMEM, "layout map");
	c->dtype = dtype;
	c->ndim = ndim;
	memcpy(c->shape, shape, ndim * sizeof(*shape));
	c->nelem = nelem;
	L->ncanon++;
	if (L->ncanon * 2 > L->chash_size) {
		if (chash_rebuild(L, L->ncanon * 2) < 0)
			return dcr_err_sys(e, ENOMEM, "layout map");
	} else {
		size_t h = hash_str(name) & (L->chash_size - 1);
		while (L->chash[h] != UINT32_MAX)
			h = (h + 1) & (L->chash_size - 1);
		L->chash[h] = (uint32_t)(L->ncanon - 1);
	}
	return (int)(L->ncanon - 1);
}

int dcr_layout_add_tensor(struct dcr_layout *L, uint32_t rank, const char *name,
			  int dtype, unsigned ndim, const uint64_t *shape,
			  struct dcr_err *e)
{
	uint64_t nelem;
	int r;
	if (L->finished)
		return dcr_err_set(e, -EINVAL, "layout map already finished");
	if (!name || !*name)
		return dcr_err_set(e, DCR_EFORMAT, "stored tensor without a name");
	if ((r = check_dtype(dtype, "stored tensor", name, e)) < 0 ||
	    (r = check_shape(ndim, shape, &nelem, "stored tensor", name, e)) < 0)
		return r;
	if (grow((void **)&L->tensors, &L->cap_tensors, L->ntensors,
		 sizeof(*L->tensors)) < 0)
		return dcr_err_sys(e, ENOMEM, "layout map");
	struct dcr_layout_tensor *t = &L->tensors[L->ntensors];
	memset(t, 0, sizeof(*t));
	if (!(t->name = strdup(name)))
		return dcr_err_sys(e, ENOMEM, "layout map");
	t->rank = rank;
	t->dtype = dtype;
	t->ndim = ndim;
	memcpy(t->shape, shape, ndim * sizeof(*shape));
	t->nelem = nelem;
	return (int)(L->ntensors++);
}

/* Sort dims by one side's stride, descending (insertion sort, <= 16). */
static void order_dims(const struct dcr_layout_piece *p, int canon, uint8_t *ord)
{
	for (unsigned k = 0; k < p->ndim; k++)
		ord[k] = (uint8_t)k;
	for (unsigned k = 1; k < p->ndim; k++) {
		uint8_t v = ord[k];
		uint64_t sv = canon ? p->dim[v].cstride : p->dim[v].sstride;
		unsigned j = k;
		while (j > 0) {
			uint64_t sj = canon ? p->dim[ord[j - 1]].cstride
					    : p->dim[ord[j - 1]].sstride;
			if (sj >= sv)
				break;
			ord[j] = ord[j - 1];
			j--;
		}
		ord[j] = v;
	}
}

/* Each stride must exceed the largest offset the smaller ones reach: the
 * side is then injective and decodes greedily. Also computes the span. */
static int dominate(const struct dcr_layout_piece *p, int canon,
		    const uint8_t *ord, uint64_t *span)
{
	uint64_t reach = 0;
	for (unsigned k = p->ndim; k-- > 0;) {
		const struct dcr_layout_dim *d = &p->dim[ord[k]];
		uint64_t st = canon ? d->cstride : d->sstride, t;
		if (st <= reach)
			return -1;
		if (mul_ovf(d->count - 1, st, &t) || add_ovf(reach, t, &reach))
			return -1;
	}
	*span = reach; /* last element's offset */
	return 0;
}

/* The piece's canonical side by its kind: none for padding; a known
 * canonical tensor for affine (same dtype, no transform) and residual (a
 * supported transform) pieces. */
static int piece_canon(const struct dcr_layout *L, struct dcr_layout_piece *p,
		       const char *canon, uint64_t coff, struct dcr_err *e)
{
	const struct dcr_layout_tensor *t = &L->tensors[p->tensor];
	const char *tn = t->name;
	uint32_t ordinal = p->ordinal;
	int kind = p->kind, xform = p->xform, ci;
	switch (kind) {
	case DCR_PIECE_PADDING:
		if (canon || xform != DCR_XF_NONE)
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' piece %u: padding maps to no canonical tensor",
					   tn, ordinal);
		break;
	case DCR_PIECE_AFFINE:
	case DCR_PIECE_RESIDUAL:
		if (!canon)
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' piece %u: no canonical tensor",
					   tn, ordinal);
		if ((ci = dcr_layout_find_canon(L, canon)) < 0)
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' piece %u: unknown canonical tensor '%s'",
					   tn, ordinal, canon);
		p->canon = (uint32_t)ci;
		p->coff = coff;
		if (kind == DCR_PIECE_AFFINE) {
			if (xform != DCR_XF_NONE)
				return dcr_err_set(e, DCR_EFORMAT,
						   "stored tensor '%s' piece %u: affine piece with a transform",
						   tn, ordinal);
			if (t->dtype != L->canon[ci].dtype)
				return dcr_err_set(e, DCR_EFORMAT,
						   "stored tensor '%s' piece %u: affine piece from %s to %s is not pure re-indexing (use a residual piece)",
						   tn, ordinal, dcr_dtype_name(t->dtype),
						   dcr_dtype_name(L->canon[ci].dtype));
		} else if (!dcr_xform_supported(xform, t->dtype, L->canon[ci].dtype)) {
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' piece %u: transform '%s' from %s to %s is not supported",
					   tn, ordinal, dcr_xform_name(xform),
					   dcr_dtype_name(t->dtype),
					   dcr_dtype_name(L->canon[ci].dtype));
		}
		break;
	default:
		return dcr_err_set(e, DCR_EFORMAT, "stored tensor '%s' piece %u: unknown kind",
				   tn, ordinal);
	}
	return 0;
}

/* Normalize the piece's dims: drop count-1 dims, merge dims contiguous on
 * both sides; sets its element count. */
static int piece_dims(struct dcr_layout_piece *p, const char *tn, unsigned ndim,
		      const struct dcr_layout_dim *dims, struct dcr_err *e)
{
	uint32_t ordinal = p->ordinal;
	uint64_t nelem = 1;
	for (unsigned k = 0; k < ndim; k++) {
		struct dcr_layout_dim d = dims[k];
		if (p->kind == DCR_PIECE_PADDING)
			d.cstride = 0;
		if (d.count == 0)
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' piece %u: dimension %u has count 0",
					   tn, ordinal, k);
		if (mul_ovf(nelem, d.count, &nelem))
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' piece %u: element count overflows",
					   tn, ordinal);
		if (d.count == 1)
			continue;
		p->dim[p->ndim++] = d;
	}
	for (unsigned k = p->ndim; k-- > 1;) {
		struct dcr_layout_dim *a = &p->dim[k - 1], *b = &p->dim[k];
		uint64_t ms, mc;
		if (!mul_ovf(b->count, b->sstride, &ms) && ms == a->sstride &&
		    !mul_ovf(b->count, b->cstride, &mc) && mc == a->cstride &&
		    !mul_ovf(a->count, b->count, &ms)) {
			b->count = ms;
			memmove(a, b, (p->ndim - k) * sizeof(*a));
			p->ndim--;
		}
	}
	p->nelem = nelem;
	return 0;
}

/* Each side's dim order, injectivity and range: the stored side within
 * the stored tensor, the canonical side (but for padding) within the
 * canonical tensor named canon. */
static int piece_ranges(const struct dcr_layout *L, struct dcr_layout_piece *p,
			const char *canon, struct dcr_err *e)
{
	const struct dcr_layout_tensor *t = &L->tensors[p->tensor];
	const char *tn = t->name;
	uint32_t ordinal = p->ordinal;
	uint64_t span;
	order_dims(p, 0, p->sorder);
	if (dominate(p, 0, p->sorder, &span) < 0)
		return dcr_err_set(e, DCR_EFORMAT,
				   "stored tensor '%s' piece %u: stored strides are not injective (elements would alias) or overflow",
				   tn, ordinal);
	p->slo = p->soff;
	if (add_ovf(p->soff, span, &p->shi) || add_ovf(p->shi, 1, &p->shi) ||
	    p->shi > t->nelem)
		return dcr_err_set(e, DCR_EFORMAT,
				   "stored tensor '%s' piece %u: reaches past the tensor's %" PRIu64 " elements",
				   tn, ordinal, t->nelem);
	if (p->kind != DCR_PIECE_PADDING) {
		const struct dcr_layout_canon *cn = &L->canon[p->canon];
		order_dims(p, 1, p->corder);
		if (dominate(p, 1, p->corder, &span) < 0)
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' piece %u: canonical strides are not injective or overflow",
					   tn, ordinal);
		p->clo = p->coff;
		if (add_ovf(p->coff, span, &p->chi) || add_ovf(p->chi, 1, &p->chi) ||
		    p->chi > cn->nelem)
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' piece %u: reaches past canonical tensor '%s' (%" PRIu64 " elements)",
					   tn, ordinal, canon, cn->nelem);
	}
	return 0;
}

int dcr_layout_add_piece(struct dcr_layout *L, uint32_t tensor, int kind,
			 int xform, const char *canon, uint64_t soff,
			 uint64_t coff, unsigned ndim,
			 const struct dcr_layout_dim *dims, struct dcr_err *e)
{
	if (L->finished)
		return dcr_err_set(e, -EINVAL, "layout map already finished");
	if (tensor >= L->ntensors)
		return dcr_err_set(e, -EINVAL, "piece for unknown stored tensor %u", tensor);
	struct dcr_layout_tensor *t = &L->tensors[tensor];
	const char *tn = t->name;
	uint32_t ordinal = (uint32_t)t->npieces;
	int r;
	if (ndim > DCR_MAX_NDIM)
		return dcr_err_set(e, DCR_EFORMAT,
				   "stored tensor '%s' piece %u: %u dims (at most %d)",
				   tn, ordinal, ndim, DCR_MAX_NDIM);
	struct dcr_layout_piece p;
	memset(&p, 0, sizeof(p));
	p.kind = kind;
	p.xform = xform;
	p.tensor = tensor;
	p.canon = DCR_LAYOUT_NONE;
	p.soff = soff;
	p.ordinal = ordinal;
	if ((r = piece_canon(L, &p, canon, coff, e)) ||
	    (r = piece_dims(&p, tn, ndim, dims, e)) ||
	    (r = piece_ranges(L, &p, canon, e)))
		return r;
	if (grow((void **)&L->pieces, &L->cap_pieces, L->npieces, sizeof(*L->pieces)) < 0)
		return dcr_err_sys(e, ENOMEM, "layout map");
	L->pieces[L->npieces++] = p;
	t->npieces++;
	return 0;
}

static int piece_cmp(const void *a, const void *b)
{
	const struct dcr_layout_piece *x = a, *y = b;
	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	if (x->slo != y->slo)
		return x->slo < y->slo ? -1 : 1;
	return x->ordinal < y->ordinal ? -1 : x->ordinal > y->ordinal;
}

static int tsorted_cmp(const void *a, const void *b, void *ctx)
{
	const struct dcr_layout *L = ctx;
	const struct dcr_layout_tensor *x = &L->tensors[*(const uint32_t *)a];
	const struct dcr_layout_tensor *y = &L->tensors[*(const uint32_t *)b];
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cpiece_cmp(const void *a, const void *b, void *ctx)
{
	const struct dcr_layout *L = ctx;
	const struct dcr_layout_piece *x = &L->pieces[*(const uint32_t *)a];
	const struct dcr_layout_piece *y = &L->pieces[*(const uint32_t *)b];
	if (x->clo != y->clo)
		return x->clo < y->clo ? -1 : 1;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

int dcr_layout_finish(struct dcr_layout *L, struct dcr_err *e)
{
	if (L->finished)
		return 0;
	if (L->npieces)
		qsort(L->pieces, L->npieces, sizeof(*L->pieces), piece_cmp);
	/* Pieces are grouped by tensor in tensor order. */
	size_t at = 0;
	for (size_t i = 0; i < L->ntensors; i++) {
		struct dcr_layout_tensor *t = &L->tensors[i];
		t->first_piece = at;
		at += t->npieces;
		if (!(t->maxhi = malloc((t->npieces ? t->npieces : 1) * sizeof(uint64_t))))
			return dcr_err_sys(e, ENOMEM, "layout map");
		uint64_t m = 0;
		for (size_t k = 0; k < t->npieces; k++) {
			uint64_t hi = L->pieces[t->first_piece + k].shi;
			if (hi > m)
				m = hi;
			t->maxhi[k] = m;
		}
	}
	if (!(L->tsorted = malloc((L->ntensors ? L->ntensors : 1) * sizeof(uint32_t))))
		return dcr_err_sys(e, ENOMEM, "layout map");
	for (size_t i = 0; i < L->ntensors; i++)
		L->tsorted[i] = (uint32_t)i;
	qsort_r(L->tsorted, L->ntensors, sizeof(uint32_t), tsorted_cmp, L);
	for (size_t i = 1; i < L->ntensors; i++) {
		if (!tsorted_cmp(&L->tsorted[i - 1], &L->tsorted[i], L))
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' of rank %u listed twice",
					   L->tensors[L->tsorted[i]].name,
					   L->tensors[L->tsorted[i]].rank);
	}
	/* Canonical tensor -> pieces, sorted by clo. */
	for (size_t i = 0; i < L->npieces; i++)
		if (L->pieces[i].canon != DCR_LAYOUT_NONE)
			L->canon[L->pieces[i].canon].npieces++;
	for (size_t c = 0; c < L->ncanon; c++) {
		struct dcr_layout_canon *cn = &L->canon[c];
		if (!(cn->pieces = malloc((cn->npieces ? cn->npieces : 1) * sizeof(uint32_t))))
			return dcr_err_sys(e, ENOMEM, "layout map");
		cn->npieces = 0;
	}
	for (size_t i = 0; i < L->npieces; i++) {
		uint32_t c = L->pieces[i].canon;
		if (c != DCR_LAYOUT_NONE)
			L->canon[c].pieces[L->canon[c].npieces++] = (uint32_t)i;
	}
	for (size_t c = 0; c < L->ncanon; c++)
		qsort_r(L->canon[c].pieces, L->canon[c].npieces, sizeof(uint32_t),
			cpiece_cmp, L);
	L->finished = 1;
	return 0;
}

int dcr_layout_find_tensor(const struct dcr_layout *L, uint32_t rank,
			   const char *name)
{
	size_t lo = 0, hi = L->ntensors;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct dcr_layout_tensor *t = &L->tensors[L->tsorted[mid]];
		int c = t->rank != rank ? (t->rank < rank ? -1 : 1) : strcmp(t->name, name);
		if (!c)
			return (int)L->tsorted[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* ---- mapping -------------------------------------------------------------- */

int dcr_layout_piece_s2c(const struct dcr_layout_piece *p, uint64_t sflat,
			 uint64_t *cflat)
{
	if (sflat < p->slo || sflat >= p->shi)
		return 0;
	uint64_t r = sflat - p->soff, c = p->coff;
	for (unsigned k = 0; k < p->ndim; k++) {
		const struct dcr_layout_dim *d = &p->dim[p->sorder[k]];
		uint64_t q = r / d->sstride;
		if (q >= d->count)
			return 0;
		r -= q * d->sstride;
		c += q * d->cstride;
	}
	if (r)
		return 0;
	*cflat = p->kind == DCR_PIECE_PADDING ? 0 : c;
	return 1;
}

int dcr_layout_piece_c2s(const struct dcr_layout_piece *p, uint64_t cflat,
			 uint64_t *sflat)
{
	if (p->kind == DCR_PIECE_PADDING || cflat < p->clo || cflat >= p->chi)
		return 0;
	uint64_t r = cflat - p->coff, s = p->soff;
	for (unsigned k = 0; k < p->ndim; k++) {
		const struct dcr_layout_dim *d = &p->dim[p->corder[k]];
		uint64_t q = r / d->cstride;
		if (q >= d->count)
			return 0;
		r -= q * d->cstride;
		s += q * d->sstride;
	}
	if (r)
		return 0;
	*sflat = s;
	return 1;
}

int dcr_layout_to_canonical(const struct dcr_layout *L, uint32_t tensor,
			    uint64_t sflat, uint32_t *canon, uint64_t *cflat,
			    uint32_t *piece)
{
	if (tensor >= L->ntensors || sflat >= L->tensors[tensor].nelem)
		return -ERANGE;
	const struct dcr_layout_tensor *t = &L->tensors[tensor];
	const struct dcr_layout_piece *pc = &L->pieces[t->first_piece];
	/* Last piece with slo <= sflat. */
	size_t lo = 0, hi = t->npieces;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (pc[mid].slo <= sflat)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t k = lo; k-- > 0 && t->maxhi[k] > sflat;) {
		uint64_t c;
		if (!dcr_layout_piece_s2c(&pc[k], sflat, &c))
			continue;
		if (piece)
			*piece = (uint32_t)(t->first_piece + k);
		if (canon)
			*canon = pc[k].canon;
		if (cflat)
			*cflat = c;
		return pc[k].kind != DCR_PIECE_PADDING;
	}
	return DCR_ENOTFOUND;
}

static size_t lower_bound(const uint64_t *a, size_t n, uint64_t v)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int hit_cmp(const void *a, const void *b)
{
	const struct dcr_layout_hit *x = a, *y = b;
	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	if (x->stored != y->stored)
		return x->stored < y->stored ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

int dcr_layout_place(const struct dcr_layout *L, uint32_t canon,
		     const uint64_t *idx, size_t n, struct dcr_layout_hit **out,
		     size_t *nout, struct dcr_err *e)
{
	*out = NULL;
	*nout = 0;
	if (!L->finished)
		return dcr_err_set(e, -EINVAL, "layout map not finished");
	if (canon >= L->ncanon)
		return dcr_err_set(e, -EINVAL, "unknown canonical tensor %u", canon);
	for (size_t i = 1; i < n; i++)
		if (idx[i] < idx[i - 1])
			return dcr_err_set(e, -EINVAL, "placement indices are not sorted");
	const struct dcr_layout_canon *cn = &L->canon[canon];
	struct dcr_layout_hit *h = NULL;
	size_t nh = 0, cap = 0;
	for (size_t k = 0; k < cn->npieces; k++) {
		const struct dcr_layout_piece *p = &L->pieces[cn->pieces[k]];
		if (n && p->clo > idx[n - 1])
			break; /* sorted by clo: no later piece can match */
		size_t a = lower_bound(idx, n, p->clo), b = lower_bound(idx, n, p->chi);
		for (size_t i = a; i < b; i++) {
			uint64_t s;
			if (!dcr_layout_piece_c2s(p, idx[i], &s))
				continue;
			if (nh == cap) {
				size_t nc = cap ? cap * 2 : 256;
				void *q = realloc(h, nc * sizeof(*h));
				if (!q) {
					free(h);
					return dcr_err_sys(e, ENOMEM, "placement");
				}
				h = q;
				cap = nc;
			}
			h[nh].pos = i;
			h[nh].stored = s;
			h[nh].tensor = p->tensor;
			h[nh].piece = cn->pieces[k];
			nh++;
		}
	}
	if (nh > 1)
		qsort(h, nh, sizeof(*h), hit_cmp);
	*out = h;
	*nout = nh;
	return 0;
}

int dcr_layout_piece_runs(const struct dcr_layout_piece *p,
			  dcr_layout_run_fn fn, void *arg)
{
	/* The run dimension: strides 1 on both sides (at most one such dim). */
	int rd = -1;
	for (unsigned k = 0; k < p->ndim; k++)
		if (p->dim[k].sstride == 1 &&
		    (p->kind == DCR_PIECE_PADDING || p->dim[k].cstride == 1))
			rd = (int)k;
	uint64_t len = rd >= 0 ? p->dim[rd].count : 1;
	uint8_t ord[DCR_MAX_NDIM];
	unsigned m = 0;
	for (unsigned k = 0; k < p->ndim; k++)
		if ((int)p->sorder[k] != rd)
			ord[m++] = p->sorder[k];
	uint64_t i[DCR_MAX_NDIM] = {0};
	uint64_t s = p->soff, c = p->kind == DCR_PIECE_PADDING ? 0 : p->coff;
	for (;;) {
		int r = fn(arg, s, c, len);
		if (r)
			return r;
		unsigned k = m;
		while (k > 0) {
			const struct dcr_layout_dim *d = &p->dim[ord[k - 1]];
			if (++i[k - 1] < d->count) {
				s += d->sstride;
				if (p->kind != DCR_PIECE_PADDING)
					c += d->cstride;
				break;
			}
			s -= (d->count - 1) * d->sstride;
			if (p->kind != DCR_PIECE_PADDING)
				c -= (d->count - 1) * d->cstride;
			i[k - 1] = 0;
			k--;
		}
		if (k == 0)
			return 0;
	}
}

/* ---- checking -------------------------------------------------------------- */

struct run {
	uint64_t start, len;
	uint32_t who;   /* piece (stored side) or tensor (canonical side) */
	uint32_t piece;
};

struct runs {
	struct run *r;
	size_t n, cap;
};

/* One side's maximal contiguous runs of a piece, merged by that side's
 * contiguity only. */
static int side_runs(const struct dcr_layout_piece *p, int canon, uint32_t who,
		     uint32_t piece, struct runs *out, struct dcr_err *e)
{
	uint64_t cnt[DCR_MAX_NDIM], st[DCR_MAX_NDIM];
	unsigned m = 0;
	const uint8_t *ord = canon ? p->corder : p->sorder;
	for (unsigned k = 0; k < p->ndim; k++) {
		const struct dcr_layout_dim *d = &p->dim[ord[k]];
		uint64_t s = canon ? d->cstride : d->sstride;
		if (m && st[m - 1] == d->count * s) { /* no overflow: dominated */
			cnt[m - 1] *= d->count;
			st[m - 1] = s;
			continue;
		}
		cnt[m] = d->count;
		st[m] = s;
		m++;
	}
	uint64_t len = 1;
	if (m && st[m - 1] == 1)
		len = cnt[--m];
	uint64_t nruns = 1;
	for (unsigned k = 0; k < m; k++)
		if (mul_ovf(nruns, cnt[k], &nruns) || nruns > DCR_LAYOUT_MAX_RUNS)
			return dcr_err_set(e, -E2BIG,
					   "piece %u of stored tensor %u is too fragmented to check (more than %llu runs)",
					   p->ordinal, p->tensor, DCR_LAYOUT_MAX_RUNS);
	if (out->n + nruns > DCR_LAYOUT_MAX_RUNS)
		return dcr_err_set(e, -E2BIG,
				   "map too fragmented to check (more than %llu runs in one tensor)",
				   DCR_LAYOUT_MAX_RUNS);
	while (out->cap < out->n + nruns) {
		size_t nc = out->cap ? out->cap * 2 : 1024;
		void *q = realloc(out->r, nc * sizeof(*out->r));
		if (!q)
			return dcr_err_sys(e, ENOMEM, "layout check");
		out->r = q;
		out->cap = nc;
	}
	uint64_t i[DCR_MAX_NDIM] = {0};
	uint64_t pos = canon ? p->coff : p->soff;
	for (;;) {
		out->r[out->n++] = (struct run){pos, len, who, piece};
		unsigned k = m;
		while (k > 0) {
			if (++i[k - 1] < cnt[k - 1]) {
				pos += st[k - 1];
				break;
			}
			pos -= (cnt[k - 1] - 1) * st[k - 1];
			i[k - 1] = 0;
			k--;
		}
		if (k == 0)
			return 0;
	}
}

static int run_cmp_start(const void *a, const void *b)
{
	const struct run *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->who < y->who ? -1 : x->who > y->who;
}

static int run_cmp_who(const void *a, const void *b)
{
	const struct run *x = a, *y = b;
	if (x->who != y->who)
		return x->who < y->who ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* "[i, j, k]" of flat index f in shape. */
static void fmt_index(char *buf, size_t n, unsigned ndim, const uint64_t *shape,
		      uint64_t f)
{
	uint64_t ix[DCR_MAX_NDIM];
	for (unsigned k = ndim; k-- > 0;) {
		ix[k] = shape[k] ? f % shape[k] : 0;
		f = shape[k] ? f / shape[k] : 0;
	}
	size_t at = 0;
	at += snprintf(buf + at, n - at, "[");
	for (unsigned k = 0; k < ndim && at < n; k++)
		at += snprintf(buf + at, n - at, "%s%" PRIu64, k ? ", " : "", ix[k]);
	if (at < n)
		snprintf(buf + at, n - at, "]");
}

static int check_stored(const struct dcr_layout *L, uint32_t ti,
			struct dcr_layout_report *r, struct runs *rs,
			struct dcr_err *e)
{
	const struct dcr_layout_tensor *t = &L->tensors[ti];
	char a[256], b[256];
	rs->n = 0;
	for (size_t k = 0; k < t->npieces; k++) {
		uint32_t pi = (uint32_t)(t->first_piece + k);
		const struct dcr_layout_piece *p = &L->pieces[pi];
		int rc = side_runs(p, 0, pi, pi, rs, e);
		if (rc < 0)
			return rc;
		if (p->kind == DCR_PIECE_AFFINE)
			r->affine_elems += p->nelem;
		else if (p->kind == DCR_PIECE_RESIDUAL)
			r->residual_elems += p->nelem;
		else
			r->padding_elems += p->nelem;
	}
	r->stored_elems += t->nelem;
	qsort(rs->r, rs->n, sizeof(*rs->r), run_cmp_start);
	uint64_t expect = 0;
	uint32_t last = DCR_LAYOUT_NONE;
	for (size_t i = 0; i < rs->n; i++) {
		const struct run *u = &rs->r[i];
		if (u->start > expect) {
			fmt_index(a, sizeof(a), t->ndim, t->shape, expect);
			fmt_index(b, sizeof(b), t->ndim, t->shape, u->start - 1);
			snprintf(r->problem, sizeof(r->problem),
				 "gap: stored tensor '%s' of rank %u: elements %" PRIu64 "..%" PRIu64 " (%s..%s) are covered by no piece",
				 t->name, t->rank, expect, u->start - 1, a, b);
			return 1;
		}
		if (u->start < expect) {
			fmt_index(a, sizeof(a), t->ndim, t->shape, u->start);
			snprintf(r->problem, sizeof(r->problem),
				 "overlap: stored tensor '%s' of rank %u: element %" PRIu64 " %s is covered by pieces %u and %u",
				 t->name, t->rank, u->start, a,
				 L->pieces[last].ordinal, L->pieces[u->who].ordinal);
			return 1;
		}
		expect = u->start + u->len;
		last = u->who;
	}
	if (expect < t->nelem) {
		fmt_index(a, sizeof(a), t->ndim, t->shape, expect);
		fmt_index(b, sizeof(b), t->ndim, t->shape, t->nelem - 1);
		snprintf(r->problem, sizeof(r->problem),
			 "gap: stored tensor '%s' of rank %u: elements %" PRIu64 "..%" PRIu64 " (%s..%s) are covered by no piece",
			 t->name, t->rank, expect, t->nelem - 1, a, b);
		return 1;
	}
	return 0;
}

static int check_canon(const struct dcr_layout *L, uint32_t ci,
		       struct dcr_layout_report *r, struct runs *rs,
		       uint64_t **ends, size_t *ends_cap, struct dcr_err *e)
{
	const struct dcr_layout_canon *cn = &L->canon[ci];
	char a[256], b[256];
	rs->n = 0;
	for (size_t k = 0; k < cn->npieces; k++) {
		const struct dcr_layout_piece *p = &L->pieces[cn->pieces[k]];
		int rc = side_runs(p, 1, p->tensor, cn->pieces[k], rs, e);
		if (rc < 0)
			return rc;
	}
	r->canon_elems += cn->nelem;
	/* A stored tensor holds each canonical element at most once. */
	qsort(rs->r, rs->n, sizeof(*rs->r), run_cmp_who);
	for (size_t i = 1; i < rs->n; i++) {
		const struct run *u = &rs->r[i - 1], *v = &rs->r[i];
		if (u->who == v->who && v->start < u->start + u->len) {
			const struct dcr_layout_tensor *t = &L->tensors[v->who];
			fmt_index(a, sizeof(a), cn->ndim, cn->shape, v->start);
			snprintf(r->problem, sizeof(r->problem),
				 "duplicate: stored tensor '%s' of rank %u holds element %" PRIu64 " %s of canonical tensor '%s' twice (pieces %u and %u)",
				 t->name, t->rank, v->start, a, cn->name,
				 L->pieces[u->piece].ordinal, L->pieces[v->piece].ordinal);
			return 1;
		}
	}
	/* Coverage depth sweep. */
	qsort(rs->r, rs->n, sizeof(*rs->r), run_cmp_start);
	if (*ends_cap < rs->n) {
		void *q = realloc(*ends, rs->n * sizeof(uint64_t));
		if (!q)
			return dcr_err_sys(e, ENOMEM, "layout check");
		*ends = q;
		*ends_cap = rs->n;
	}
	for (size_t i = 0; i < rs->n; i++)
		(*ends)[i] = rs->r[i].start + rs->r[i].len;
	qsort(*ends, rs->n, sizeof(uint64_t), u64_cmp);
	uint64_t pos = 0, depth = 0, first_gap = UINT64_MAX, gap_end = 0;
	size_t i = 0, j = 0;
	for (;;) {
		uint64_t next = cn->nelem;
		if (i < rs->n && rs->r[i].start < next)
			next = rs->r[i].start;
		if (j < rs->n && (*ends)[j] < next)
			next = (*ends)[j];
		if (next > pos) {
			uint64_t w = next - pos;
			if (depth == 0) {
				r->canon_uncovered += w;
				if (first_gap == UINT64_MAX) {
					first_gap = pos;
					gap_end = next;
				}
			} else if (depth > 1) {
				r->canon_replicated += w;
				r->replica_copies += w * (depth - 1);
			}
			pos = next;
		}
		if (pos >= cn->nelem && j >= rs->n)
			break;
		while (j < rs->n && (*ends)[j] == pos) {
			depth--;
			j++;
		}
		while (i < rs->n && rs->r[i].start == pos) {
			depth++;
			i++;
		}
		if (pos >= cn->nelem && i >= rs->n && j >= rs->n)
			break;
	}
	if (L->complete && first_gap != UINT64_MAX && !r->problem[0]) {
		fmt_index(a, sizeof(a), cn->ndim, cn->shape, first_gap);
		fmt_index(b, sizeof(b), cn->ndim, cn->shape, gap_end - 1);
		snprintf(r->problem, sizeof(r->problem),
			 "uncovered: canonical tensor '%s': elements %" PRIu64 "..%" PRIu64 " (%s..%s) are held by no stored tensor of this complete map",
			 cn->name, first_gap, gap_end - 1, a, b);
		return 1;
	}
	return 0;
}

int dcr_layout_check(const struct dcr_layout *L, struct dcr_layout_report *r,
		     struct dcr_err *e)
{
	memset(r, 0, sizeof(*r));
	if (!L->finished)
		return dcr_err_set(e, -EINVAL, "layout map not finished");
	struct runs rs = {0};
	uint64_t *ends = NULL;
	size_t ends_cap = 0;
	int rc = 0;
	for (uint32_t t = 0; t < L->ntensors && !rc; t++)
		rc = check_stored(L, t, r, &rs, e);
	/* Canonical side: keep counting after a problem is found only if none. */
	for (uint32_t c = 0; c < L->ncanon && !rc; c++)
		rc = check_canon(L, c, r, &rs, &ends, &ends_cap, e);
	free(rs.r);
	free(ends);
	return rc;
}

/* ---- residual transforms ----------------------------------------------------- */

static const char *const xf_names[] = {"none", "cast", "add1"};

const char *dcr_xform_name(int xf)
{
	return xf >= 0 && xf <= DCR_XF_ADD1 ? xf_names[xf] : "?";
}

int dcr_xform_parse(const char *s)
{
	for (int i = DCR_XF_CAST; i <= DCR_XF_ADD1; i++)
		if (!strcmp(s, xf_names[i]))
			return i;
	return -1;
}

static int float_dt(int dt)
{
	return dt == DCR_DT_F32 || dt == DCR_DT_BF16 || dt == DCR_DT_F16;
}

int dcr_xform_supported(int xf, int stored_dt, int canon_dt)
{
	return (xf == DCR_XF_CAST || xf == DCR_XF_ADD1) && float_dt(stored_dt) &&
	       float_dt(canon_dt);
}

/* IEEE binary16 <-> binary32 in software (not every compiler has
 * _Float16): exact widening, round-to-nearest-even narrowing, NaNs made
 * quiet with their payload kept, as the hardware conversions do. Checked
 * against gcc's _Float16 over every half and 2e8 floats. */
static float half_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
	if (e == 0) {
		if (!m) {
			u = s;
		} else { /* subnormal: normalize */
			e = 113;
			while (!(m & 0x400)) {
				m <<= 1;
				e--;
			}
			u = s | e << 23 | (m & 0x3ff) << 13;
		}
	} else if (e == 31) {
		u = s | 0x7f800000 | (m ? 0x400000u : 0) | m << 13;
	} else {
		u = s | (e + 112) << 23 | m << 13;
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint16_t f32_to_half(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t s = (u >> 16) & 0x8000, a = u & 0x7fffffff;
	if (a > 0x7f800000)
		return (uint16_t)(s | 0x7e00 | ((a >> 13) & 0x3ff));
	if (a >= 0x477ff000) /* rounds to infinity */
		return (uint16_t)(s | 0x7c00);
	if (a >= 0x38800000) { /* normal: rebias, round the 13 dropped bits */
		uint32_t r = a - 0x38000000;
		return (uint16_t)(s | ((r + 0xfff + ((r >> 13) & 1)) >> 13));
	}
	if (a < 0x33000000) /* below half the smallest subnormal */
		return (uint16_t)s;
	uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000, shift = 126 - e;
	uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return (uint16_t)(s | q);
}

static float to_f32(int dt, uint64_t bits)
{
	float f;
	uint32_t u;
	switch (dt) {
	case DCR_DT_BF16:
		u = (uint32_t)(bits & 0xffff) << 16;
		memcpy(&f, &u, 4);
		return f;
	case DCR_DT_F16:
		return half_to_f32((uint16_t)bits);
	default:
		u = (uint32_t)bits;
		memcpy(&f, &u, 4);
		return f;
	}
}

static uint64_t from_f32(int dt, float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	switch (dt) {
	case DCR_DT_BF16:
		if ((u & 0x7fffffff) > 0x7f800000)
			return 0x7fc0; /* as torch's round_to_nearest_even */
		return (u + 0x7fff + ((u >> 16) & 1)) >> 16;
	case DCR_DT_F16:
		return f32_to_half(f);
	default:
		return u;
	}
}

uint64_t dcr_xform_forward(int xf, int stored_dt, int canon_dt, uint64_t bits)
{
	float f = to_f32(stored_dt, bits);
	if (xf == DCR_XF_ADD1)
		f = f + 1.0f;
	return from_f32(canon_dt, f);
}

uint64_t dcr_xform_inverse(int xf, int stored_dt, int canon_dt, uint64_t bits)
{
	float f = to_f32(canon_dt, bits);
	if (xf == DCR_XF_ADD1)
		f = f - 1.0f;
	return from_f32(stored_dt, f);
}

/* ---- JSON ---------------------------------------------------------------------- */

static int js_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int js_shape(json_t *a, unsigned *ndim, uint64_t *shape)
{
	if (!json_is_array(a) || json_array_size(a) > DCR_MAX_NDIM)
		return -1;
	*ndim = (unsigned)json_array_size(a);
	for (unsigned k = 0; k < *ndim; k++)
		if (js_u64(json_array_get(a, k), &shape[k]) < 0)
			return -1;
	return 0;
}

static const char *kind_names[] = {"affine", "residual", "padding"};

/* The map's version and its header fields (framework, model type, sizes,
 * completeness). */
static int parse_info(json_t *root, struct dcr_layout *L, struct dcr_err *e)
{
	uint64_t v;
	json_t *ver = json_object_get(root, "dcr_layout");
	if (!ver)
		return dcr_err_set(e, DCR_EFORMAT, "not a layout map (no \"dcr_layout\" field)");
	if (js_u64(ver, &v) < 0 || v > UINT32_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "\"dcr_layout\" is not a version number");
	if (v != DCR_LAYOUT_VERSION)
		return dcr_err_version(e, "this", "layout map", (unsigned)v, DCR_LAYOUT_VERSION);
	json_t *fw = json_object_get(root, "framework");
	json_t *mt = json_object_get(root, "model_type");
	if ((fw && !json_is_string(fw)) || (mt && !json_is_string(mt)))
		return dcr_err_set(e, DCR_EFORMAT, "layout map: framework and model_type must be strings");
	uint64_t tp = 1, ep = 1, world = 1;
	json_t *x;
	if (((x = json_object_get(root, "tp")) && (js_u64(x, &tp) < 0 || tp > UINT32_MAX)) ||
	    ((x = json_object_get(root, "ep")) && (js_u64(x, &ep) < 0 || ep > UINT32_MAX)) ||
	    ((x = json_object_get(root, "world")) && (js_u64(x, &world) < 0 || world > UINT32_MAX)))
		return dcr_err_set(e, DCR_EFORMAT, "layout map: tp, ep and world must be small non-negative integers");
	x = json_object_get(root, "complete");
	if (x && !json_is_boolean(x))
		return dcr_err_set(e, DCR_EFORMAT, "layout map: complete must be true or false");
	return dcr_layout_set_info(L, fw ? json_string_value(fw) : NULL,
				   mt ? json_string_value(mt) : NULL, (uint32_t)tp,
				   (uint32_t)ep, (uint32_t)world, x && json_is_true(x), e);
}

/* The "canonical" array: each entry's name, dtype and shape. */
static int parse_canon(json_t *canon, struct dcr_layout *L, struct dcr_err *e)
{
	size_t i;
	json_t *it;
	json_array_foreach(canon, i, it) {
		json_t *n = json_object_get(it, "name"), *d = json_object_get(it, "dtype");
		unsigned ndim;
		uint64_t shape[DCR_MAX_NDIM];
		if (!json_is_string(n) || !json_is_string(d) ||
		    js_shape(json_object_get(it, "shape"), &ndim, shape) < 0)
			return dcr_err_set(e, DCR_EFORMAT,
					   "layout map: canonical entry %zu needs name, dtype and shape (at most %d non-negative integers)",
					   i, DCR_MAX_NDIM);
		int dt = dcr_dtype_parse(json_string_value(d));
		if (dt < 0)
			return dcr_err_set(e, DCR_EFORMAT, "canonical tensor '%s': unknown dtype '%s'",
					   json_string_value(n), json_string_value(d));
		int rc = dcr_layout_add_canon(L, json_string_value(n), dt, ndim, shape, e);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Piece j of stored tensor ti (named tn): kind, transform, canonical
 * tensor, offsets and dims. */
static int parse_piece(json_t *pj, struct dcr_layout *L, int ti, const char *tn, size_t j,
		       struct dcr_err *e)
{
	json_t *k = json_object_get(pj, "kind"), *x;
	int kind = -1, xf = DCR_XF_NONE;
	if (!json_is_object(pj) || !json_is_string(k))
		return dcr_err_set(e, DCR_EFORMAT, "stored tensor '%s' piece %zu: no kind", tn, j);
	for (int q = 0; q < 3; q++)
		if (!strcmp(json_string_value(k), kind_names[q]))
			kind = q;
	if (kind < 0)
		return dcr_err_set(e, DCR_EFORMAT,
				   "stored tensor '%s' piece %zu: unknown kind '%s'",
				   tn, j, json_string_value(k));
	json_t *tf = json_object_get(pj, "transform");
	if (kind == DCR_PIECE_RESIDUAL) {
		if (!json_is_string(tf) || (xf = dcr_xform_parse(json_string_value(tf))) < 0)
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' piece %zu: residual piece needs a known transform (cast, add1)",
					   tn, j);
	} else if (tf) {
		return dcr_err_set(e, DCR_EFORMAT,
				   "stored tensor '%s' piece %zu: only residual pieces have a transform",
				   tn, j);
	}
	json_t *cj = json_object_get(pj, "canon");
	if (cj && !json_is_string(cj))
		return dcr_err_set(e, DCR_EFORMAT, "stored tensor '%s' piece %zu: canon must be a string", tn, j);
	uint64_t soff = 0, coff = 0;
	if (((x = json_object_get(pj, "soff")) && js_u64(x, &soff) < 0) ||
	    ((x = json_object_get(pj, "coff")) && js_u64(x, &coff) < 0))
		return dcr_err_set(e, DCR_EFORMAT,
				   "stored tensor '%s' piece %zu: soff and coff must be non-negative integers",
				   tn, j);
	json_t *dj = json_object_get(pj, "dims");
	struct dcr_layout_dim dims[DCR_MAX_NDIM];
	if (!json_is_array(dj) || json_array_size(dj) > DCR_MAX_NDIM)
		return dcr_err_set(e, DCR_EFORMAT,
				   "stored tensor '%s' piece %zu: dims must be an array of at most %d entries",
				   tn, j, DCR_MAX_NDIM);
	unsigned nd = (unsigned)json_array_size(dj);
	for (unsigned q = 0; q < nd; q++) {
		json_t *dd = json_array_get(dj, q);
		size_t want = kind == DCR_PIECE_PADDING ? 2 : 3;
		if (!json_is_array(dd) ||
		    (json_array_size(dd) != want && json_array_size(dd) != 3) ||
		    js_u64(json_array_get(dd, 0), &dims[q].count) < 0 ||
		    js_u64(json_array_get(dd, 1), &dims[q].sstride) < 0 ||
		    (json_array_size(dd) == 3 &&
		     js_u64(json_array_get(dd, 2), &dims[q].cstride) < 0))
			return dcr_err_set(e, DCR_EFORMAT,
					   "stored tensor '%s' piece %zu: dimension %u must be [count, stored stride, canonical stride]",
					   tn, j, q);
		if (json_array_size(dd) == 2)
			dims[q].cstride = 0;
	}
	int rc = dcr_layout_add_piece(L, (uint32_t)ti, kind, xf,
				      cj ? json_string_value(cj) : NULL,
				      soff, coff, nd, dims, e);
	return rc < 0 ? rc : 0;
}

/* The "stored" array: each entry's name, dtype, shape, rank and pieces. */
static int parse_stored(json_t *stored, struct dcr_layout *L, struct dcr_err *e)
{
	size_t i;
	json_t *it, *x;
	json_array_foreach(stored, i, it) {
		json_t *n = json_object_get(it, "name"), *d = json_object_get(it, "dtype");
		json_t *pcs = json_object_get(it, "pieces");
		unsigned ndim;
		uint64_t shape[DCR_MAX_NDIM], rank = 0;
		if (!json_is_string(n) || !json_is_string(d) || !json_is_array(pcs) ||
		    js_shape(json_object_get(it, "shape"), &ndim, shape) < 0 ||
		    ((x = json_object_get(it, "rank")) && (js_u64(x, &rank) < 0 || rank >= UINT32_MAX)))
			return dcr_err_set(e, DCR_EFORMAT,
					   "layout map: stored entry %zu needs name, dtype, shape, pieces and an optional integer rank",
					   i);
		const char *tn = json_string_value(n);
		int dt = dcr_dtype_parse(json_string_value(d));
		if (dt < 0)
			return dcr_err_set(e, DCR_EFORMAT, "stored tensor '%s': unknown dtype '%s'",
					   tn, json_string_value(d));
		int ti = dcr_layout_add_tensor(L, (uint32_t)rank, tn, dt, ndim, shape, e);
		if (ti < 0)
			return ti;
		size_t j;
		json_t *pj;
		json_array_foreach(pcs, j, pj) {
			int rc = parse_piece(pj, L, ti, tn, j, e);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

static int parse_root(json_t *root, struct dcr_layout *L, struct dcr_err *e)
{
	if (!json_is_object(root))
		return dcr_err_set(e, DCR_EFORMAT, "layout map: not a JSON object");
	int rc = parse_info(root, L, e);
	if (rc < 0)
		return rc;

	json_t *canon = json_object_get(root, "canonical");
	json_t *stored = json_object_get(root, "stored");
	if (!json_is_array(canon) || !json_is_array(stored))
		return dcr_err_set(e, DCR_EFORMAT, "layout map: \"canonical\" and \"stored\" must be arrays");
	if ((rc = parse_canon(canon, L, e)) < 0 || (rc = parse_stored(stored, L, e)) < 0)
		return rc;
	return dcr_layout_finish(L, e);
}

int dcr_layout_parse(const char *json, size_t len, struct dcr_layout **out,
		     struct dcr_err *e)
{
	*out = NULL;
	json_error_t je;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return dcr_err_set(e, DCR_EFORMAT, "layout map: invalid JSON at line %d: %s",
				   je.line, je.text);
	struct dcr_layout *L = dcr_layout_new();
	if (!L) {
		json_decref(root);
		return dcr_err_sys(e, ENOMEM, "layout map");
	}
	int rc = parse_root(root, L, e);
	json_decref(root);
	if (rc < 0) {
		dcr_layout_free(L);
		return rc;
	}
	*out = L;
	return 0;
}

int dcr_layout_load(const char *path, struct dcr_layout **out, struct dcr_err *e)
{
	uint8_t *buf;
	size_t len;
	*out = NULL;
	int rc = dcr_read_file(path, MAX_MAP_BYTES, &buf, &len, e);
	if (rc < 0)
		return rc;
	rc = dcr_layout_parse((const char *)buf, len, out, e);
	free(buf);
	if (rc < 0) {
		char m[sizeof(e->msg)];
		snprintf(m, sizeof(m), "%s", e->msg);
		dcr_err_set(e, rc, "'%s': %s", path, m);
	}
	return rc;
}

static int put(struct dcr_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put(struct dcr_buf *b, const char *fmt, ...)
{
	va_list ap;
	char tmp[512];
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -ENOMEM;
	return dcr_buf_add(b, tmp, (size_t)n);
}

static int put_str(struct dcr_buf *b, const char *s)
{
	int rc = dcr_buf_add_u8(b, '"');
	for (; *s && !rc; s++) {
		uint8_t c = (uint8_t)*s;
		if (c == '"' || c == '\\')
			rc = put(b, "\\%c", c);
		else if (c < 0x20)
			rc = put(b, "\\u%04x", c);
		else
			rc = dcr_buf_add_u8(b, c);
	}
	return rc ? rc : dcr_buf_add_u8(b, '"');
}

static int put_shape(struct dcr_buf *b, unsigned ndim, const uint64_t *shape)
{
	int rc = dcr_buf_add_u8(b, '[');
	for (unsigned k = 0; k < ndim && !rc; k++)
		rc = put(b, "%s%" PRIu64, k ? ", " : "", shape[k]);
	return rc ? rc : dcr_buf_add_u8(b, ']');
}

int dcr_layout_dump(const struct dcr_layout *L, char **out, struct dcr_err *e)
{
	struct dcr_buf b = {0};
	int rc = put(&b, "{\"dcr_layout\": %d", DCR_LAYOUT_VERSION);
	if (!rc && L->framework)
		rc = put(&b, ", \"framework\": ") || put_str(&b, L->framework);
	if (!rc && L->model_type)
		rc = put(&b, ", \"model_type\": ") || put_str(&b, L->model_type);
	if (!rc)
		rc = put(&b, ", \"tp\": %u, \"ep\": %u, \"world\": %u, \"complete\": %s,\n\"canonical\": [",
			 L->tp, L->ep, L->world, L->complete ? "true" : "false");
	for (size_t i = 0; i < L->ncanon && !rc; i++) {
		const struct dcr_layout_canon *c = &L->canon[i];
		rc = put(&b, "%s\n {\"name\": ", i ? "," : "") || put_str(&b, c->name) ||
		     put(&b, ", \"dtype\": \"%s\", \"shape\": ", dcr_dtype_name(c->dtype)) ||
		     put_shape(&b, c->ndim, c->shape) || put(&b, "}");
	}
	if (!rc)
		rc = put(&b, "],\n\"stored\": [");
	for (size_t i = 0; i < L->ntensors && !rc; i++) {
		const struct dcr_layout_tensor *t = &L->tensors[i];
		rc = put(&b, "%s\n {\"rank\": %u, \"name\": ", i ? "," : "", t->rank) ||
		     put_str(&b, t->name) ||
		     put(&b, ", \"dtype\": \"%s\", \"shape\": ", dcr_dtype_name(t->dtype)) ||
		     put_shape(&b, t->ndim, t->shape) || put(&b, ", \"pieces\": [");
		for (size_t k = 0; k < t->npieces && !rc; k++) {
			const struct dcr_layout_piece *p = &L->pieces[t->first_piece + k];
			rc = put(&b, "%s\n  {\"kind\": \"%s\"", k ? "," : "", kind_names[p->kind]);
			if (!rc && p->kind == DCR_PIECE_RESIDUAL)
				rc = put(&b, ", \"transform\": \"%s\"", dcr_xform_name(p->xform));
			if (!rc && p->kind != DCR_PIECE_PADDING)
				rc = put(&b, ", \"canon\": ") || put_str(&b, L->canon[p->canon].name) ||
				     put(&b, ", \"coff\": %" PRIu64, p->coff);
			if (!rc)
				rc = put(&b, ", \"soff\": %" PRIu64 ", \"dims\": [", p->soff);
			for (unsigned d = 0; d < p->ndim && !rc; d++) {
				if (p->kind == DCR_PIECE_PADDING)
					rc = put(&b, "%s[%" PRIu64 ", %" PRIu64 "]", d ? ", " : "",
						 p->dim[d].count, p->dim[d].sstride);
				else
					rc = put(&b, "%s[%" PRIu64 ", %" PRIu64 ", %" PRIu64 "]",
						 d ? ", " : "", p->dim[d].count,
						 p->dim[d].sstride, p->dim[d].cstride);
			}
			if (!rc)
				rc = put(&b, "]}");
		}
		if (!rc)
			rc = put(&b, "]}");
	}
	if (!rc)
		rc = put(&b, "]}\n");
	if (!rc)
		rc = dcr_buf_add_u8(&b, 0);
	if (rc) {
		dcr_buf_free(&b);
		return dcr_err_sys(e, ENOMEM, "layout map");
	}
	*out = (char *)b.p;
	return 0;
}

int dcr_layout_save(const struct dcr_layout *L, const char *path,
		    struct dcr_err *e)
{
	char *s;
	int rc = dcr_layout_dump(L, &s, e);
	if (rc < 0)
		return rc;
	size_t n = strlen(s);
	if (!strcmp(path, "-")) {
		if (fwrite(s, 1, n, stdout) != n)
			rc = dcr_err_sys(e, errno ? errno : EIO, "write to stdout");
	} else {
		rc = dcr_write_output(path, s, n, e);
	}
	free(s);
	return rc;
}
