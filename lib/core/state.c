/* state.c - tensor digests (BLAKE3 of the stripe stream) and state ids,
 * hashed on every core: across tensors, and within a large tensor over
 * pieces of BLAKE3's tree that join (see state.h, dcr-format-delta(5)).
 *
 * The stripe stream reorders a tensor's stored bytes; reading it in that
 * order would cost what a transposition costs (256-byte segments a row
 * apart defeat the prefetchers). So the bytes are read in their stored
 * order, a band of rows at a time (16 KiB of each stripe, at most 2 MiB of
 * rows), and BLAKE3 hashes each stripe's chunks where they lie, eight
 * stripes' chunks of the same rows at once (core/blake3.h,
 * dcr_blake3_runs_update_rows). A tensor of at most 128 columns has one
 * stripe, its stored bytes, and is hashed in place. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/bytes.h"
#include "core/file.h"
#include "core/state.h"
#include "core/util.h"

#define GATHER_BYTES (16u << 10) /* per stripe and band */
#define BAND_BYTES (2u << 20)	 /* of stored rows per band, at most */

/* ---- the stripe stream ---- */

void dcr_stripes_init(struct dcr_stripes *s, int dtype, unsigned ndim, const uint64_t *shape)
{
	uint64_t nelem = 1;
	unsigned bits = dcr_dtype_bits(dtype);
	for (unsigned k = 0; k < ndim; k++)
		nelem *= shape[k];
	memset(s, 0, sizeof(*s));
	s->nbytes = nelem * bits / 8;
	s->nstripes = 1;
	if (bits < 8) {
		/* sub-byte: a row need not be whole bytes, so no stripes */
		s->rows = 1;
		s->cols = s->pitch = s->seg = s->nbytes;
		return;
	}
	s->esize = bits / 8;
	if (ndim >= 2) {
		s->cols = shape[ndim - 1];
		s->rows = s->cols ? nelem / s->cols : 0;
	} else {
		s->rows = nelem;
		s->cols = 1;
	}
	s->pitch = s->cols * s->esize;
	if (s->cols > DCR_STRIPE_ELEMS) {
		s->seg = (uint64_t)DCR_STRIPE_ELEMS * s->esize;
		s->nstripes = (s->cols + DCR_STRIPE_ELEMS - 1) / DCR_STRIPE_ELEMS;
	} else {
		s->seg = s->pitch;
	}
}

uint64_t dcr_stripes_width(const struct dcr_stripes *s, uint64_t j)
{
	return j + 1 < s->nstripes ? s->seg : s->pitch - (s->nstripes - 1) * s->seg;
}

uint64_t dcr_stripes_start(const struct dcr_stripes *s, uint64_t j)
{
	return j * s->rows * s->seg;
}

uint64_t dcr_stripes_map(const struct dcr_stripes *s, uint64_t off, uint64_t *run)
{
	if (s->nstripes <= 1 || off >= s->nbytes) {
		*run = off < s->nbytes ? s->nbytes - off : 0;
		return off;
	}
	uint64_t full = s->rows * s->seg; /* bytes of a full stripe */
	uint64_t j = off / full;
	if (j > s->nstripes - 1)
		j = s->nstripes - 1;
	uint64_t w = dcr_stripes_width(s, j), in = off - j * full;
	uint64_t r = in / w, x = in % w;
	*run = w - x;
	return r * s->pitch + j * s->seg + x;
}

void dcr_stripes_gather(const struct dcr_stripes *s, const uint8_t *data, uint64_t off,
			size_t n, uint8_t *out)
{
	while (n) {
		uint64_t run, at = dcr_stripes_map(s, off, &run);
		size_t k = run < n ? (size_t)run : n;
		memcpy(out, data + at, k);
		out += k;
		off += k;
		n -= k;
	}
}

/* ---- parts of a block of rows and columns ---- */

void dcr_parts_free(struct dcr_parts *ps)
{
	for (size_t i = 0; i < ps->n; i++)
		dcr_blake3_part_free(&ps->v[i]);
	free(ps->v);
	memset(ps, 0, sizeof(*ps));
}

static struct dcr_blake3_part *parts_add(struct dcr_parts *ps)
{
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? 2 * ps->cap : 16;
		struct dcr_blake3_part *nv = realloc(ps->v, cap * sizeof(*nv));
		if (!nv)
			return NULL;
		ps->v = nv;
		ps->cap = cap;
	}
	return &ps->v[ps->n++];
}

/* A run of one stripe over a band's rows: its bytes are at `off` in every
 * local row, `w` of them. */
struct srun {
	struct dcr_blake3_run r;
	size_t off, w;
};

/* Feed nrows local rows (lp bytes apart) to the runs a band of sb rows at
 * a time. The runs of full segments take their band's segments where they
 * lie (core/blake3.h hashes them eight chunks at a time across stripes,
 * reading the rows in order); the narrower last one, when there is one,
 * gets its segments gathered into g (sb segments). All runs but perhaps
 * the last have the same width. */
static void feed_rows(struct srun *run, size_t nrun, const uint8_t *src, size_t lp, uint64_t nrows,
		      uint8_t *g, size_t sb)
{
	size_t w = run[0].w, nfull = nrun > 1 && run[nrun - 1].w != w ? nrun - 1 : nrun;
	for (uint64_t q0 = 0; q0 < nrows; q0 += sb) {
		size_t nq = nrows - q0 < sb ? (size_t)(nrows - q0) : sb;
		const uint8_t *band = src + q0 * lp;
		for (size_t k0 = 0; k0 < nfull; k0 += 64) {
			struct dcr_blake3_run *rv[64];
			const uint8_t *sv[64];
			size_t m = nfull - k0 < 64 ? nfull - k0 : 64;
			for (size_t k = 0; k < m; k++) {
				rv[k] = &run[k0 + k].r;
				sv[k] = band + run[k0 + k].off;
			}
			dcr_blake3_runs_update_rows(rv, sv, m, w, nq, lp);
		}
		if (nfull < nrun) {
			const struct srun *last = &run[nrun - 1];
			for (size_t q = 0; q < nq; q++)
				memcpy(g + q * last->w, band + q * lp + last->off, last->w);
			dcr_blake3_run_update(&run[nrun - 1].r, g, nq * last->w);
		}
	}
}

/* rows per band: GATHER_BYTES of a segment, unless that makes the band of
 * rows larger than BAND_BYTES; at least 8 KiB a segment (eight chunks
 * that BLAKE3 hashes at once) */
static size_t band_rows(uint64_t seg, uint64_t lp)
{
	size_t sb = seg ? GATHER_BYTES / seg : 1, least = seg ? 8192 / seg : 1;
	if (sb < 1)
		sb = 1;
	if (sb * lp > BAND_BYTES)
		sb = lp ? BAND_BYTES / lp : 1;
	if (sb < least)
		sb = least;
	return sb ? sb : 1;
}

uint64_t dcr_stripes_band_rows(const struct dcr_stripes *s)
{
	return band_rows(s->seg, s->pitch);
}

int dcr_stripes_parts(const struct dcr_stripes *s, const uint8_t *local, uint64_t r0,
		      uint64_t r1, uint64_t c0, uint64_t c1, struct dcr_parts *ps,
		      struct dcr_err *e)
{
	if (r0 > r1 || r1 > s->rows || c0 > c1 || c1 > s->cols)
		return dcr_err_set(e, -EINVAL, "rows [%llu, %llu) and columns [%llu, %llu) are not in a %llu x %llu tensor",
				   (unsigned long long)r0, (unsigned long long)r1,
				   (unsigned long long)c0, (unsigned long long)c1,
				   (unsigned long long)s->rows, (unsigned long long)s->cols);
	if (r0 == r1 || c0 == c1 || !s->nbytes)
		return 0;
	uint64_t eb = s->esize ? s->esize : 1, x0 = c0 * eb, x1 = c1 * eb, lp = x1 - x0;
	uint64_t ja = x0 / s->seg, jb = (x1 - 1) / s->seg + 1;
	struct srun *run = dcr_calloc(jb - ja, sizeof(*run));
	size_t nrun = 0, sb = band_rows(s->seg, lp);
	uint8_t *g = NULL;
	int r = 0;
	if (!run)
		return dcr_err_sys(e, ENOMEM, "tensor digest");
	/* stripes whose segments the block holds whole: a run each over its
	 * rows; a cut segment: a part per row */
	for (uint64_t j = ja; j < jb && !r; j++) {
		uint64_t w = dcr_stripes_width(s, j), s0 = j * s->seg;
		uint64_t y0 = x0 > s0 ? x0 : s0, y1 = x1 < s0 + w ? x1 : s0 + w;
		uint64_t at = dcr_stripes_start(s, j);
		if (y0 == s0 && y1 == s0 + w) {
			struct srun *sr = &run[nrun];
			if (dcr_blake3_run_init(&sr->r, at + r0 * w, at + r1 * w, s->nbytes)) {
				r = dcr_err_sys(e, ENOMEM, "tensor digest");
				break;
			}
			sr->off = (size_t)(y0 - x0);
			sr->w = (size_t)w;
			nrun++;
			continue;
		}
		for (uint64_t row = r0; row < r1 && !r; row++) {
			struct dcr_blake3_part *p = parts_add(ps);
			uint64_t a = at + row * w + (y0 - s0);
			if (!p || dcr_blake3_part_of(local + (row - r0) * lp + (y0 - x0), a,
						     a + (y1 - y0), s->nbytes, p)) {
				if (p)
					ps->n--;
				r = dcr_err_sys(e, ENOMEM, "tensor digest");
			}
		}
	}
	if (!r && nrun == 1 && run[0].w == lp) {
		/* one stripe, whole rows: the block is a run of the stream as it is */
		dcr_blake3_run_update(&run[0].r, local, (size_t)((r1 - r0) * lp));
	} else if (!r && nrun) {
		g = malloc(sb * s->seg);
		if (!g)
			r = dcr_err_sys(e, ENOMEM, "tensor digest");
		else
			feed_rows(run, nrun, local, (size_t)lp, r1 - r0, g, sb);
	}
	for (size_t k = 0; k < nrun; k++) {
		struct dcr_blake3_part *p = r ? NULL : parts_add(ps);
		if (!p) {
			dcr_blake3_run_release(&run[k].r);
			if (!r)
				r = dcr_err_sys(e, ENOMEM, "tensor digest");
		} else if (dcr_blake3_run_final(&run[k].r, p)) {
			ps->n--;
			r = dcr_err_set(e, -EINVAL, "tensor digest: a run was not fed whole");
		}
	}
	free(g);
	free(run);
	return r;
}

int dcr_stripes_join(const struct dcr_stripes *s, const struct dcr_parts *ps, dcr_digest *out,
		     struct dcr_err *e)
{
	return dcr_blake3_join(ps->v, ps->n, s->nbytes, out, e);
}

/* ---- a digest from the stored bytes in order ---- */

struct dcr_tdigest {
	struct dcr_stripes s;
	uint64_t r0, r1;  /* the rows it takes */
	uint64_t fed, want;
	uint64_t done;	  /* bytes fed to the runs: whole bands */
	struct srun *run; /* a run per stripe over rows [r0, r1) */
	uint8_t *stage;   /* a band that came in pieces */
	size_t stage_len, band, sb;
	uint8_t *g;
};

struct dcr_tdigest *dcr_tdigest_new_rows(int dtype, unsigned ndim, const uint64_t *shape,
					 uint64_t r0, uint64_t r1)
{
	struct dcr_tdigest *t = dcr_calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	dcr_stripes_init(&t->s, dtype, ndim, shape);
	const struct dcr_stripes *s = &t->s;
	if (r0 > r1 || r1 > s->rows) {
		free(t);
		return NULL;
	}
	size_t n = (size_t)s->nstripes;
	t->r0 = r0;
	t->r1 = r1;
	t->want = (r1 - r0) * s->pitch;
	t->run = dcr_calloc(n, sizeof(*t->run));
	if (!t->run)
		goto fail;
	for (size_t j = 0; j < n; j++) {
		uint64_t w = dcr_stripes_width(s, j), at = dcr_stripes_start(s, j);
		if (dcr_blake3_run_init(&t->run[j].r, at + r0 * w, at + r1 * w, s->nbytes)) {
			while (j--)
				dcr_blake3_run_release(&t->run[j].r);
			free(t->run);
			goto fail;
		}
		t->run[j].off = (size_t)(j * s->seg);
		t->run[j].w = (size_t)w;
	}
	if (n > 1) {
		/* whole bands of rows go to the runs, so that each stripe
		 * takes whole, aligned chunks; a band that comes in pieces
		 * is put together first */
		t->sb = band_rows(s->seg, s->pitch);
		t->band = (size_t)(t->sb * s->pitch);
		t->stage = malloc(t->band);
		t->g = malloc(t->sb * s->seg);
		if (!t->stage || !t->g) {
			dcr_tdigest_free(t);
			return NULL;
		}
	}
	return t;
fail:
	free(t);
	return NULL;
}

struct dcr_tdigest *dcr_tdigest_new(int dtype, unsigned ndim, const uint64_t *shape)
{
	struct dcr_stripes s;
	dcr_stripes_init(&s, dtype, ndim, shape);
	return dcr_tdigest_new_rows(dtype, ndim, shape, 0, s.rows);
}

size_t dcr_tdigest_step(const struct dcr_tdigest *t)
{
	return t->band ? t->band : (size_t)1 << 20;
}

void dcr_tdigest_update(struct dcr_tdigest *t, const void *in, size_t n)
{
	const uint8_t *p = in;
	const struct dcr_stripes *s = &t->s;
	if (n > t->want - t->fed)
		n = (size_t)(t->want - t->fed); /* a caller's bug: final says so */
	t->fed += n;
	if (s->nstripes == 1) {
		dcr_blake3_run_update(&t->run[0].r, p, n);
		return;
	}
	while (n) {
		size_t band = t->want - t->done < t->band ? (size_t)(t->want - t->done) : t->band;
		const uint8_t *at = p;
		if (t->stage_len || n < band) {
			size_t k = band - t->stage_len < n ? band - t->stage_len : n;
			memcpy(t->stage + t->stage_len, p, k);
			t->stage_len += k;
			p += k;
			n -= k;
			if (t->stage_len < band)
				continue;
			at = t->stage;
			t->stage_len = 0;
		} else {
			p += band;
			n -= band;
		}
		feed_rows(t->run, (size_t)s->nstripes, at, (size_t)s->pitch, band / s->pitch, t->g,
			  t->sb);
		t->done += band;
	}
}

int dcr_tdigest_parts(struct dcr_tdigest *t, struct dcr_parts *ps)
{
	const struct dcr_stripes *s = &t->s;
	int r = t->fed == t->want ? 0 : -EINVAL;
	for (size_t j = 0; j < s->nstripes; j++) {
		struct dcr_blake3_part *p = r ? NULL : parts_add(ps);
		if (!p) {
			dcr_blake3_run_release(&t->run[j].r);
			r = r ? r : -ENOMEM;
		} else if (dcr_blake3_run_final(&t->run[j].r, p)) {
			ps->n--;
			r = -EINVAL;
		}
	}
	return r;
}

int dcr_tdigest_final(struct dcr_tdigest *t, dcr_digest *out)
{
	struct dcr_parts ps = {0};
	struct dcr_err e;
	int r = t->r0 || t->r1 != t->s.rows ? -EINVAL : dcr_tdigest_parts(t, &ps);
	if (!r && dcr_stripes_join(&t->s, &ps, out, &e))
		r = e.code;
	if (r)
		memset(out, 0, sizeof(*out));
	dcr_parts_free(&ps);
	return r;
}

void dcr_tdigest_free(struct dcr_tdigest *t)
{
	if (!t)
		return;
	for (size_t j = 0; t->run && j < t->s.nstripes; j++)
		dcr_blake3_run_release(&t->run[j].r);
	free(t->run);
	free(t->stage);
	free(t->g);
	free(t);
}

/* ---- a digest from parts that come in the order of the stored bytes ---- */

static int cmp_part_a(const void *x, const void *y)
{
	const struct dcr_blake3_part *a = x, *b = y;
	return a->a < b->a ? -1 : a->a > b->a;
}

int dcr_stripes_range_parts(const struct dcr_stripes *s, const uint8_t *bytes, uint64_t x0,
			    uint64_t x1, struct dcr_parts *ps, struct dcr_err *e)
{
	uint64_t es = s->esize;
	if (x0 > x1 || x1 > s->nbytes || (es && (x0 % es || x1 % es)))
		return dcr_err_set(e, -EINVAL, "bytes [%llu, %llu) are not whole elements of a tensor of %llu bytes",
				   (unsigned long long)x0, (unsigned long long)x1,
				   (unsigned long long)s->nbytes);
	size_t first = ps->n;
	int r = 0;
	if (x0 == x1)
		return 0;
	if (!es) {
		/* not striped: the stream is the stored bytes */
		struct dcr_blake3_part *p = parts_add(ps);
		if (!p || dcr_blake3_part_of(bytes, x0, x1, s->nbytes, p)) {
			if (p)
				ps->n--;
			return dcr_err_sys(e, ENOMEM, "tensor digest");
		}
		return 0;
	}
	uint64_t C = s->cols, e0 = x0 / es, e1 = x1 / es;
	uint64_t r0 = e0 / C, c0 = e0 % C, r1 = e1 / C, c1 = e1 % C;
	if (r0 == r1)
		return dcr_stripes_parts(s, bytes, r0, r0 + 1, c0, c1, ps, e);
	if (c0) {
		/* the first row's end */
		r = dcr_stripes_parts(s, bytes, r0, r0 + 1, c0, C, ps, e);
		bytes += (C - c0) * es;
		r0++;
	}
	/* whole rows from a multiple of the band (rows the hasher takes at
	 * once), where its stripes take whole chunks in batches; the rows
	 * before on their own */
	uint64_t sb = band_rows(s->seg, s->pitch), ra = (r0 + sb - 1) / sb * sb;
	if (!r && r0 < ra && ra < r1) {
		r = dcr_stripes_parts(s, bytes, r0, ra, 0, C, ps, e);
		bytes += (ra - r0) * s->pitch;
		r0 = ra;
	}
	if (!r && r0 < r1) {
		r = dcr_stripes_parts(s, bytes, r0, r1, 0, C, ps, e);
		bytes += (r1 - r0) * s->pitch;
	}
	if (!r && c1)
		r = dcr_stripes_parts(s, bytes, r1, r1 + 1, 0, c1, ps, e);
	if (!r && ps->n - first > 1)
		qsort(ps->v + first, ps->n - first, sizeof(*ps->v), cmp_part_a);
	return r;
}

struct dcr_tacc {
	struct dcr_stripes s;
	struct dcr_blake3_run *run; /* a run per stripe, over all its rows */
	uint64_t pos;		    /* stored bytes taken */
	int bad;
};

struct dcr_tacc *dcr_tacc_new(int dtype, unsigned ndim, const uint64_t *shape)
{
	struct dcr_tacc *t = dcr_calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	dcr_stripes_init(&t->s, dtype, ndim, shape);
	const struct dcr_stripes *s = &t->s;
	size_t n = (size_t)s->nstripes;
	t->run = s->nbytes ? dcr_calloc(n, sizeof(*t->run)) : NULL;
	if (!t->run) {
		free(t);
		return NULL;
	}
	for (size_t j = 0; j < n; j++) {
		uint64_t at = dcr_stripes_start(s, j), w = dcr_stripes_width(s, j);
		if (dcr_blake3_run_init(&t->run[j], at, at + s->rows * w, s->nbytes)) {
			while (j--)
				dcr_blake3_run_release(&t->run[j]);
			free(t->run);
			free(t);
			return NULL;
		}
	}
	return t;
}

uint64_t dcr_tacc_pos(const struct dcr_tacc *t)
{
	return t->pos;
}

int dcr_tacc_add(struct dcr_tacc *t, const struct dcr_parts *ps, uint64_t x1)
{
	const struct dcr_stripes *s = &t->s;
	uint64_t span = s->rows * s->seg; /* stream bytes of every stripe but the last */
	if (t->bad || x1 < t->pos || x1 > s->nbytes)
		return t->bad = -EINVAL;
	for (size_t k = 0; k < ps->n; k++) {
		uint64_t j = span ? ps->v[k].a / span : 0;
		if (j >= s->nstripes)
			j = s->nstripes - 1;
		if (dcr_blake3_run_append(&t->run[j], &ps->v[k]))
			return t->bad = -EINVAL;
	}
	t->pos = x1;
	return 0;
}

int dcr_tacc_final(struct dcr_tacc *t, dcr_digest *out)
{
	const struct dcr_stripes *s = &t->s;
	struct dcr_parts ps = {0};
	struct dcr_err e;
	int r = t->bad || t->pos != s->nbytes ? -EINVAL : 0;
	for (size_t j = 0; j < s->nstripes; j++) {
		struct dcr_blake3_part *p = r ? NULL : parts_add(&ps);
		if (!p) {
			r = r ? r : -ENOMEM;
		} else if (dcr_blake3_run_final(&t->run[j], p)) {
			ps.n--;
			r = -EINVAL;
		}
	}
	if (!r && dcr_stripes_join(s, &ps, out, &e))
		r = -EINVAL;
	dcr_parts_free(&ps);
	t->bad = r ? r : -EINVAL; /* spent */
	return r;
}

void dcr_tacc_free(struct dcr_tacc *t)
{
	if (!t)
		return;
	for (size_t j = 0; j < t->s.nstripes; j++)
		dcr_blake3_run_release(&t->run[j]);
	free(t->run);
	free(t);
}

/* ---- many tensors on many threads ----
 * Each tensor is cut into bands of whole rows of about BAND_TASK bytes;
 * threads take the bands in the order they were given, and whoever
 * finishes a tensor's last band joins its parts into the digest. Tensors
 * may be given while the threads work (as a diff or an apply makes them
 * ready), and the thread that waits works too. */

#define BAND_TASK (4u << 20)

struct htensor {
	struct dcr_stripes s;
	int dtype;
	unsigned ndim;
	uint64_t shape[DCR_MAX_NDIM];
	const uint8_t *data; /* its bytes, or NULL: feed gives them */
	int fd;		     /* >= 0: data maps this file at off; bands are read */
	uint64_t off;
	dcr_hpool_feed feed;
	dcr_hpool_done done;
	void *ctx;
	dcr_digest *out;
	int release;	     /* mapped file pages: let them go once hashed */
	size_t left;	     /* bands not done */
	struct dcr_parts *band; /* each band's parts */
};

struct hband {
	struct htensor *t;
	size_t k;
	uint64_t r0, r1;
};

struct dcr_hpool {
	pthread_mutex_t mu;
	pthread_cond_t more, idle;
	struct hband *q;
	size_t nq, capq, next, busy;
	int closing, err;
	pthread_t th[64];
	int nth;
	/* buffers for the bands read from files, free for the taking */
	uint8_t *buf[65];
	size_t bufcap[65];
	int nbuf;
};

/* rows per band: about BAND_TASK bytes, whole chunks of every aligned stripe */
static uint64_t band_step(const struct dcr_stripes *s)
{
	uint64_t rows = s->pitch ? BAND_TASK / s->pitch : s->rows;
	if (rows >= 8)
		rows &= ~(uint64_t)7;
	return rows ? rows : 1;
}

/* Drop the whole pages inside [p, p+n) from this process (not the cache). */
static void release(const uint8_t *p, uint64_t n)
{
	uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
	uintptr_t b = ((uintptr_t)p + (uintptr_t)n) & ~(uintptr_t)4095;
	if (b > a)
		madvise((void *)a, b - a, MADV_DONTNEED);
}

/* A band of a file's tensor read into a buffer of the pool's: a copy from
 * the page cache runs about twice as fast as reading the file's pages
 * through a mapping, each of which costs a page-table entry and a TLB miss
 * (dcr-diff hashing BASE: measured here). Bands longer than this are read
 * through the mapping (a tensor of a few huge rows). */
#define BAND_READ_MAX (32u << 20)

static int band_read(struct dcr_hpool *p, struct htensor *t, uint64_t off, size_t n,
		     struct dcr_parts *ps, uint64_t r0, uint64_t r1)
{
	uint8_t *buf = NULL;
	size_t cap = 0;
	pthread_mutex_lock(&p->mu);
	if (p->nbuf) {
		p->nbuf--;
		buf = p->buf[p->nbuf];
		cap = p->bufcap[p->nbuf];
	}
	pthread_mutex_unlock(&p->mu);
	if (cap < n) {
		free(buf);
		cap = n;
		if (!(buf = malloc(cap)))
			return -ENOMEM;
	}
	struct dcr_err e;
	int r = dcr_pread_full(t->fd, buf, n, t->off + off);
	if (r == -EPIPE)
		r = -EIO; /* the file is shorter than its header says */
	if (!r)
		r = dcr_stripes_parts(&t->s, buf, r0, r1, 0, t->s.cols, ps, &e) ? -ENOMEM : 0;
	pthread_mutex_lock(&p->mu);
	if (p->nbuf < (int)(sizeof(p->buf) / sizeof(p->buf[0]))) {
		p->buf[p->nbuf] = buf;
		p->bufcap[p->nbuf++] = cap;
		buf = NULL;
	}
	pthread_mutex_unlock(&p->mu);
	free(buf);
	return r;
}

static int band_parts(struct dcr_hpool *p, struct hband *b)
{
	struct htensor *t = b->t;
	const struct dcr_stripes *s = &t->s;
	struct dcr_parts *ps = &t->band[b->k];
	struct dcr_err e;
	int r;
	uint64_t bytes = (b->r1 - b->r0) * s->pitch;
	if (t->fd >= 0 && bytes <= BAND_READ_MAX)
		return band_read(p, t, b->r0 * s->pitch, (size_t)bytes, ps, b->r0, b->r1);
	if (t->feed) {
		struct dcr_tdigest *td = dcr_tdigest_new_rows(t->dtype, t->ndim, t->shape, b->r0,
							      b->r1);
		if (!td)
			return -ENOMEM;
		r = t->feed(t->ctx, b->r0, b->r1, td);
		if (!r)
			r = dcr_tdigest_parts(td, ps);
		dcr_tdigest_free(td);
		return r;
	}
	const uint8_t *at = t->data + b->r0 * s->pitch;
	r = dcr_stripes_parts(s, at, b->r0, b->r1, 0, s->cols, ps, &e) ? -ENOMEM : 0;
	if (t->release)
		release(at, (b->r1 - b->r0) * s->pitch);
	return r;
}

/* the last band of a tensor done: join every band's parts */
static int join_tensor(struct htensor *t, size_t nbands)
{
	size_t n = 0;
	for (size_t k = 0; k < nbands; k++)
		n += t->band[k].n;
	struct dcr_parts all = {.v = dcr_calloc(n + 1, sizeof(*all.v)), .cap = n + 1};
	struct dcr_err e;
	int r = all.v ? 0 : -ENOMEM;
	for (size_t k = 0; k < nbands; k++) {
		struct dcr_parts *bp = &t->band[k];
		if (all.v) {
			if (bp->n)
				memcpy(all.v + all.n, bp->v, bp->n * sizeof(*bp->v));
			all.n += bp->n;
			free(bp->v);
			memset(bp, 0, sizeof(*bp));
		} else {
			dcr_parts_free(bp);
		}
	}
	if (!r && dcr_stripes_join(&t->s, &all, t->out, &e))
		r = e.code;
	if (r)
		memset(t->out, 0, sizeof(*t->out));
	dcr_parts_free(&all);
	return r;
}

static size_t nbands_of(const struct htensor *t)
{
	uint64_t step = band_step(&t->s);
	return t->s.rows ? (size_t)((t->s.rows + step - 1) / step) : 1;
}

/* take and do bands until there are none (and, unless waiting, the pool
 * closes); 1 when it did one */
static int work_one(struct dcr_hpool *p, int block)
{
	pthread_mutex_lock(&p->mu);
	while (p->next == p->nq && block && !p->closing)
		pthread_cond_wait(&p->more, &p->mu);
	if (p->next == p->nq) {
		pthread_mutex_unlock(&p->mu);
		return 0;
	}
	struct hband b = p->q[p->next++];
	p->busy++;
	pthread_mutex_unlock(&p->mu);
	int r = band_parts(p, &b);
	pthread_mutex_lock(&p->mu);
	int last = --b.t->left == 0;
	if (r && !p->err)
		p->err = r;
	pthread_mutex_unlock(&p->mu);
	if (last) {
		r = join_tensor(b.t, nbands_of(b.t));
		if (b.t->done)
			b.t->done(b.t->ctx);
		free(b.t->band);
		free(b.t);
	}
	pthread_mutex_lock(&p->mu);
	if (r && !p->err)
		p->err = r;
	p->busy--;
	pthread_cond_broadcast(&p->idle);
	pthread_mutex_unlock(&p->mu);
	return 1;
}

static void *pool_worker(void *arg)
{
	struct dcr_hpool *p = arg;
	for (;;) {
		if (!work_one(p, 1)) {
			pthread_mutex_lock(&p->mu);
			int done = p->closing && p->next == p->nq;
			pthread_mutex_unlock(&p->mu);
			if (done)
				return NULL;
		}
	}
}

struct dcr_hpool *dcr_hpool_new(int threads)
{
	struct dcr_hpool *p = dcr_calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->more, NULL);
	pthread_cond_init(&p->idle, NULL);
	if (threads < 1)
		threads = dcr_ncpu();
	if (threads > 64)
		threads = 64;
	/* the thread that waits is one of them */
	for (int i = 1; i < threads; i++)
		if (!pthread_create(&p->th[p->nth], NULL, pool_worker, p))
			p->nth++;
	return p;
}

static int hpool_add(struct dcr_hpool *p, int dtype, unsigned ndim, const uint64_t *shape,
		     const uint8_t *data, int fd, uint64_t off, dcr_hpool_feed feed,
		     dcr_hpool_done done, void *ctx, int release, dcr_digest *out)
{
	struct htensor *t = dcr_calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	dcr_stripes_init(&t->s, dtype, ndim, shape);
	t->dtype = dtype;
	t->ndim = ndim;
	memcpy(t->shape, shape, ndim * sizeof(*shape));
	t->data = data;
	t->fd = fd;
	t->off = off;
	t->feed = feed;
	t->done = done;
	t->ctx = ctx;
	t->out = out;
	t->release = release;
	size_t nb = nbands_of(t);
	uint64_t step = band_step(&t->s);
	t->band = dcr_calloc(nb, sizeof(*t->band));
	t->left = nb;
	pthread_mutex_lock(&p->mu);
	if (t->band && p->nq + nb > p->capq) {
		size_t cap = p->capq ? 2 * p->capq : 256;
		while (cap < p->nq + nb)
			cap *= 2;
		struct hband *nq = realloc(p->q, cap * sizeof(*nq));
		if (nq) {
			p->q = nq;
			p->capq = cap;
		}
	}
	if (!t->band || p->nq + nb > p->capq) {
		pthread_mutex_unlock(&p->mu);
		free(t->band);
		free(t);
		return -ENOMEM;
	}
	for (size_t k = 0; k < nb; k++) {
		uint64_t r0 = k * step, r1 = r0 + step < t->s.rows ? r0 + step : t->s.rows;
		p->q[p->nq++] = (struct hband){t, k, r0, r1};
	}
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&p->mu);
	return 0;
}

int dcr_hpool_add(struct dcr_hpool *p, int dtype, unsigned ndim, const uint64_t *shape,
		  const uint8_t *data, dcr_hpool_feed feed, dcr_hpool_done done, void *ctx,
		  int release, dcr_digest *out)
{
	return hpool_add(p, dtype, ndim, shape, data, -1, 0, feed, done, ctx, release, out);
}

int dcr_hpool_wait(struct dcr_hpool *p)
{
	while (work_one(p, 0))
		;
	pthread_mutex_lock(&p->mu);
	while (p->busy || p->next < p->nq)
		pthread_cond_wait(&p->idle, &p->mu);
	int r = p->err;
	pthread_mutex_unlock(&p->mu);
	return r;
}

void dcr_hpool_free(struct dcr_hpool *p)
{
	if (!p)
		return;
	dcr_hpool_wait(p);
	pthread_mutex_lock(&p->mu);
	p->closing = 1;
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nth; i++)
		pthread_join(p->th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->more);
	pthread_cond_destroy(&p->idle);
	for (int i = 0; i < p->nbuf; i++)
		free(p->buf[i]);
	free(p->q);
	free(p);
}

void dcr_digest_tensor_mem(int dtype, unsigned ndim, const uint64_t *shape,
			   const uint8_t *data, int threads, dcr_digest *out)
{
	struct dcr_hpool *p = dcr_hpool_new(threads);
	int r = p ? dcr_hpool_add(p, dtype, ndim, shape, data, NULL, NULL, NULL, 0, out) : -ENOMEM;
	if (p && !r)
		r = dcr_hpool_wait(p);
	dcr_hpool_free(p);
	if (r)
		memset(out, 0, sizeof(*out));
}

int dcr_hpool_add_tensor(struct dcr_hpool *p, const struct dcr_ckpt_tensor *t, dcr_digest *out)
{
	const struct dcr_tensor_info *ti = t->info;
	/* a file's tensor is read band by band; the mapping stays for bands
	 * too long to read at once, and gives up its pages once hashed */
	return hpool_add(p, ti->dtype, ti->ndim, ti->shape, t->data, t->fd, t->file_off, NULL, NULL,
			 NULL, t->fd >= 0, out);
}

void dcr_tensor_digest(const struct dcr_ckpt_tensor *t, dcr_digest *out)
{
	struct dcr_hpool *p = dcr_hpool_new(1);
	int r = p ? dcr_hpool_add_tensor(p, t, out) : -ENOMEM;
	if (p && !r)
		r = dcr_hpool_wait(p);
	dcr_hpool_free(p);
	if (r)
		memset(out, 0, sizeof(*out));
}

int dcr_ckpt_digests(const struct dcr_ckpt *c, dcr_digest *out, int threads)
{
	return dcr_ckpt_digests_sel(c, out, NULL, threads);
}

int dcr_ckpt_digests_sel(const struct dcr_ckpt *c, dcr_digest *out, const uint8_t *sel,
			 int threads)
{
	struct dcr_hpool *p = dcr_hpool_new(threads);
	int r = p ? 0 : -ENOMEM;
	for (size_t i = 0; i < c->ntensors && !r; i++)
		if (!sel || sel[i])
			r = dcr_hpool_add_tensor(p, &c->tensors[i], &out[i]);
	int q = p ? dcr_hpool_wait(p) : 0;
	dcr_hpool_free(p);
	return r ? r : q;
}

/* ---- state ids ---- */

/* The state id: BLAKE3 over "dcr-state-v2\n" then, per tensor sorted by
 * name: le32 name length, name, le32 dtype name length, dtype name, le32
 * ndim, le64 dims, 32-byte digest. */
void dcr_state_hash_entries(const char *magic, const struct dcr_state_entry *ent, size_t n,
			    int digests, dcr_digest *out)
{
	struct dcr_blake3 h;
	uint8_t t[8];
	dcr_blake3_init(&h);
	dcr_blake3_update(&h, magic, strlen(magic));
	for (size_t i = 0; i < n; i++) {
		const char *dt = dcr_dtype_name(ent[i].dtype);
		size_t nl = strlen(ent[i].name), dl = strlen(dt);
		put_le32(t, (uint32_t)nl);
		dcr_blake3_update(&h, t, 4);
		dcr_blake3_update(&h, ent[i].name, nl);
		put_le32(t, (uint32_t)dl);
		dcr_blake3_update(&h, t, 4);
		dcr_blake3_update(&h, dt, dl);
		put_le32(t, ent[i].ndim);
		dcr_blake3_update(&h, t, 4);
		for (unsigned k = 0; k < ent[i].ndim; k++) {
			put_le64(t, ent[i].shape[k]);
			dcr_blake3_update(&h, t, 8);
		}
		if (digests)
			dcr_blake3_update(&h, ent[i].digest.b, DCR_DIGEST_LEN);
	}
	dcr_blake3_final(&h, out);
}

void dcr_state_id(const struct dcr_state_entry *ent, size_t n, dcr_digest *out)
{
	dcr_state_hash_entries(DCR_STATE_MAGIC, ent, n, 1, out);
}

void dcr_ckpt_state_from(const struct dcr_ckpt *c, const dcr_digest *dg, dcr_digest *id)
{
	struct dcr_state_entry *ent = dcr_calloc(c->ntensors, sizeof(*ent));
	if (!ent) {
		memset(id, 0, sizeof(*id));
		return;
	}
	for (size_t i = 0; i < c->ntensors; i++) {
		const struct dcr_tensor_info *t = c->tensors[i].info;
		ent[i].name = t->name;
		ent[i].dtype = t->dtype;
		ent[i].ndim = t->ndim;
		ent[i].shape = t->shape;
		ent[i].digest = dg[i];
	}
	dcr_state_id(ent, c->ntensors, id);
	free(ent);
}

int dcr_ckpt_digests_progress(const struct dcr_ckpt *c, dcr_digest *out, const uint8_t *sel,
			      int threads, void (*progress)(void *ctx, uint64_t done, uint64_t total),
			      void *ctx)
{
	if (!progress)
		return sel ? dcr_ckpt_digests_sel(c, out, sel, threads)
			   : dcr_ckpt_digests(c, out, threads);
	uint64_t total = 0, done = 0, batch = 0;
	for (size_t i = 0; i < c->ntensors; i++)
		if (!sel || sel[i])
			total += dcr_tensor_bytes(c->tensors[i].info);
	uint64_t step = total / 100 > (1ull << 30) ? total / 100 : 1ull << 30;
	uint8_t *bsel = dcr_calloc(c->ntensors + 1, 1); /* this batch's */
	if (!bsel)
		return -ENOMEM;
	progress(ctx, 0, total);
	int r = 0;
	for (size_t i = 0, from = 0; i < c->ntensors && !r; i++) {
		if (!sel || sel[i]) {
			bsel[i] = 1;
			batch += dcr_tensor_bytes(c->tensors[i].info);
		}
		if (i + 1 < c->ntensors && batch < step)
			continue;
		r = dcr_ckpt_digests_sel(c, out, bsel, threads);
		memset(bsel + from, 0, i + 1 - from);
		from = i + 1;
		done += batch;
		batch = 0;
		if (!r)
			progress(ctx, done, total);
	}
	free(bsel);
	return r;
}

int dcr_ckpt_state_id_threads(const struct dcr_ckpt *c, int threads, dcr_digest *id,
			      dcr_digest *per_tensor, struct dcr_err *e)
{
	dcr_digest *dg = per_tensor ? per_tensor : dcr_calloc(c->ntensors, sizeof(*dg));
	if (!dg)
		return dcr_err_sys(e, ENOMEM, "%s", c->path);
	int r = dcr_ckpt_digests(c, dg, threads);
	if (r)
		r = dcr_err_sys(e, -r, "cannot hash '%s'", c->path);
	else
		dcr_ckpt_state_from(c, dg, id);
	if (!per_tensor)
		free(dg);
	return r;
}

int dcr_ckpt_state_id(const struct dcr_ckpt *c, dcr_digest *id, dcr_digest *per_tensor,
		      struct dcr_err *e)
{
	return dcr_ckpt_state_id_threads(c, 0, id, per_tensor, e);
}
