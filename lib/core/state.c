/* state.c - tensor digests (BLAKE3 of the stripe stream) and state ids,
 * hashed on every core: across tensors, and within a large tensor over
 * pieces of BLAKE3's tree that join (see state.h, dcr-format-delta(5)).
 *
 * The stripe stream reorders a tensor's stored bytes; gathering it must not
 * cost what a transposition costs (reading 256-byte segments a row apart
 * defeats the prefetchers: the first version spent a third of its time
 * there). So the bytes are read in their stored order, a band of rows at a
 * time (at most 2 MiB, 16 KiB of each stripe), and each row's segments are
 * copied to their stripe's place in a band buffer that stays in the
 * caches; then each stripe's run of the stream takes its piece, whose
 * BLAKE3 nodes hash eight chunks at once. A tensor of at most 128 columns
 * has one stripe, its stored bytes, and is hashed in place. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/bytes.h"
#include "core/state.h"
#include "core/util.h"

#define GATHER_BYTES (16u << 10) /* per stripe and band */
#define BAND_BYTES (2u << 20)	 /* of stored rows per band, at most */
#define TASK_BYTES (4u << 20)	 /* of a tensor per thread's task */

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

/* k runs of w bytes a row: a row's segments to their places in the band
 * buffer (a run's nq segments follow each other) */
static inline void scatter_fixed(uint8_t *g, const uint8_t *row, const struct srun *run, size_t k,
				 size_t nq, size_t q, size_t w)
{
	g += q * w;
	for (size_t i = 0; i < k; i++, g += nq * w)
		memcpy(g, row + run[i].off, w);
}

/* Feed nrows local rows (lp bytes apart) to the runs a band of sb rows at
 * a time: the band is read in its stored order, row by row, and each
 * row's segments are copied to their run's place in g (sb x lp bytes),
 * so that every run then takes its nq segments as one piece. All runs
 * but perhaps the last have the same width. */
static void feed_rows(struct srun *run, size_t nrun, const uint8_t *src, size_t lp, uint64_t nrows,
		      uint8_t *g, size_t sb)
{
	size_t w = run[0].w, nfull = nrun > 1 && run[nrun - 1].w != w ? nrun - 1 : nrun;
	for (uint64_t q0 = 0; q0 < nrows; q0 += sb) {
		size_t nq = nrows - q0 < sb ? (size_t)(nrows - q0) : sb;
		const uint8_t *band = src + q0 * lp;
		uint8_t *last = g + nfull * nq * w;
		for (size_t q = 0; q < nq; q++) {
			const uint8_t *row = band + q * lp;
			switch (w) {
			case 128: scatter_fixed(g, row, run, nfull, nq, q, 128); break;
			case 256: scatter_fixed(g, row, run, nfull, nq, q, 256); break;
			case 512: scatter_fixed(g, row, run, nfull, nq, q, 512); break;
			case 1024: scatter_fixed(g, row, run, nfull, nq, q, 1024); break;
			default: scatter_fixed(g, row, run, nfull, nq, q, w); break;
			}
			if (nfull < nrun)
				memcpy(last + q * run[nrun - 1].w, row + run[nrun - 1].off,
				       run[nrun - 1].w);
		}
		for (size_t k = 0; k < nrun; k++)
			dcr_blake3_run_update(&run[k].r, g + k * nq * w, nq * run[k].w);
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
		g = malloc(sb * lp);
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
	uint64_t fed;
	struct srun *run; /* a run per stripe over all rows */
	uint8_t *stage;   /* rows not yet fed to the runs */
	size_t stage_len, stage_cap, min_rows, sb;
	uint8_t *g;
};

struct dcr_tdigest *dcr_tdigest_new(int dtype, unsigned ndim, const uint64_t *shape)
{
	struct dcr_tdigest *t = dcr_calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	dcr_stripes_init(&t->s, dtype, ndim, shape);
	const struct dcr_stripes *s = &t->s;
	size_t n = (size_t)s->nstripes;
	t->run = dcr_calloc(n, sizeof(*t->run));
	if (!t->run)
		goto fail;
	for (size_t j = 0; j < n; j++) {
		uint64_t w = dcr_stripes_width(s, j), at = dcr_stripes_start(s, j);
		if (dcr_blake3_run_init(&t->run[j].r, at, at + s->rows * w, s->nbytes)) {
			while (j--)
				dcr_blake3_run_release(&t->run[j].r);
			free(t->run);
			goto fail;
		}
		t->run[j].off = (size_t)(j * s->seg);
		t->run[j].w = (size_t)w;
	}
	if (n > 1) {
		/* rows are staged until there are enough for a gather of
		 * 8 KiB a stripe (or 1 MiB of rows) */
		t->sb = band_rows(s->seg, s->pitch);
		t->min_rows = (size_t)(8192 / s->seg);
		if (t->min_rows * s->pitch > (1u << 20))
			t->min_rows = (size_t)((1u << 20) / s->pitch);
		if (t->min_rows < 1)
			t->min_rows = 1;
		if (t->min_rows > t->sb)
			t->min_rows = t->sb;
		t->stage_cap = (size_t)(t->min_rows * s->pitch);
		t->stage = malloc(t->stage_cap);
		t->g = malloc(t->sb * s->pitch);
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

void dcr_tdigest_update(struct dcr_tdigest *t, const void *in, size_t n)
{
	const uint8_t *p = in;
	const struct dcr_stripes *s = &t->s;
	if (n > s->nbytes - t->fed)
		n = (size_t)(s->nbytes - t->fed); /* a caller's bug: final says so */
	t->fed += n;
	if (s->nstripes == 1) {
		dcr_blake3_run_update(&t->run[0].r, p, n);
		return;
	}
	while (n) {
		if (t->stage_len || n < t->stage_cap) {
			size_t k = t->stage_cap - t->stage_len < n ? t->stage_cap - t->stage_len : n;
			memcpy(t->stage + t->stage_len, p, k);
			t->stage_len += k;
			p += k;
			n -= k;
			if (t->stage_len == t->stage_cap) {
				feed_rows(t->run, (size_t)s->nstripes, t->stage, (size_t)s->pitch,
					  t->min_rows, t->g, t->sb);
				t->stage_len = 0;
			}
			continue;
		}
		uint64_t rows = n / s->pitch;
		feed_rows(t->run, (size_t)s->nstripes, p, (size_t)s->pitch, rows, t->g, t->sb);
		p += rows * s->pitch;
		n -= (size_t)(rows * s->pitch);
	}
}

int dcr_tdigest_final(struct dcr_tdigest *t, dcr_digest *out)
{
	const struct dcr_stripes *s = &t->s;
	struct dcr_parts ps = {0};
	struct dcr_err e;
	int r = t->fed == s->nbytes ? 0 : -EINVAL;
	if (!r && s->nstripes > 1 && t->stage_len)
		feed_rows(t->run, (size_t)s->nstripes, t->stage, (size_t)s->pitch,
			  t->stage_len / s->pitch, t->g, t->sb);
	t->stage_len = 0;
	for (size_t j = 0; j < s->nstripes; j++) {
		struct dcr_blake3_part *p = r ? NULL : parts_add(&ps);
		if (!p) {
			dcr_blake3_run_release(&t->run[j].r);
			r = r ? r : -ENOMEM;
		} else if (dcr_blake3_run_final(&t->run[j].r, p)) {
			ps.n--;
			r = -EINVAL;
		}
	}
	if (!r && dcr_blake3_join(ps.v, ps.n, s->nbytes, out, &e))
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

/* ---- many tensors on many threads ----
 * Each tensor is cut into tasks of about TASK_BYTES: bands of whole rows
 * when it has several stripes, else runs of its bytes (aligned nodes of
 * 4096 chunks). Threads take the tasks in order; whoever finishes a
 * tensor's last task joins its parts into the digest. */

struct hsrc {
	struct dcr_stripes s;
	const uint8_t *data;
	dcr_digest *out;
	size_t task0, ntasks, left;
	int release; /* mapped file pages: let them go once hashed */
};

struct htask {
	size_t src;
	uint64_t lo, hi; /* rows, or bytes when the tensor has one stripe */
	struct dcr_parts parts;
};

struct hjob {
	struct hsrc *src;
	size_t nsrc;
	struct htask *task;
	size_t ntasks, next;
	int err;
	pthread_mutex_t mu;
};

/* Drop the whole pages inside [p, p+n) from this process (not the cache). */
static void release(const uint8_t *p, uint64_t n)
{
	uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
	uintptr_t b = ((uintptr_t)p + (uintptr_t)n) & ~(uintptr_t)4095;
	if (b > a)
		madvise((void *)a, b - a, MADV_DONTNEED);
}

static int run_task(struct hjob *j, struct htask *t)
{
	struct hsrc *h = &j->src[t->src];
	const struct dcr_stripes *s = &h->s;
	struct dcr_err e;
	int r;
	if (s->nstripes == 1) {
		struct dcr_blake3_part *p = parts_add(&t->parts);
		r = p ? dcr_blake3_part_of(h->data + t->lo, t->lo, t->hi, s->nbytes, p) : -ENOMEM;
		if (r && p)
			t->parts.n--;
		if (h->release)
			release(h->data + t->lo, t->hi - t->lo);
	} else {
		r = dcr_stripes_parts(s, h->data + t->lo * s->pitch, t->lo, t->hi, 0, s->cols,
				      &t->parts, &e) ? -ENOMEM : 0;
		if (h->release)
			release(h->data + t->lo * s->pitch, (t->hi - t->lo) * s->pitch);
	}
	return r;
}

/* the last task of a tensor done: join every task's parts */
static int join_src(struct hjob *j, struct hsrc *h)
{
	size_t n = 0;
	for (size_t k = 0; k < h->ntasks; k++)
		n += j->task[h->task0 + k].parts.n;
	struct dcr_parts all = {.v = dcr_calloc(n + 1, sizeof(*all.v)), .cap = n + 1};
	struct dcr_err e;
	int r = all.v ? 0 : -ENOMEM;
	for (size_t k = 0; k < h->ntasks; k++) {
		struct dcr_parts *tp = &j->task[h->task0 + k].parts;
		if (all.v) {
			memcpy(all.v + all.n, tp->v, tp->n * sizeof(*tp->v));
			all.n += tp->n;
			free(tp->v);
			memset(tp, 0, sizeof(*tp));
		} else {
			dcr_parts_free(tp);
		}
	}
	if (!r && dcr_stripes_join(&h->s, &all, h->out, &e))
		r = e.code;
	if (r)
		memset(h->out, 0, sizeof(*h->out));
	dcr_parts_free(&all);
	return r;
}

static void *hash_worker(void *arg)
{
	struct hjob *j = arg;
	for (;;) {
		pthread_mutex_lock(&j->mu);
		size_t i = j->next++;
		pthread_mutex_unlock(&j->mu);
		if (i >= j->ntasks)
			return NULL;
		struct htask *t = &j->task[i];
		struct hsrc *h = &j->src[t->src];
		int r = run_task(j, t);
		pthread_mutex_lock(&j->mu);
		int last = --h->left == 0;
		if (r)
			j->err = r;
		pthread_mutex_unlock(&j->mu);
		if (last && (r = join_src(j, h))) {
			pthread_mutex_lock(&j->mu);
			j->err = r;
			pthread_mutex_unlock(&j->mu);
		}
	}
}

/* how many tasks a tensor is cut into, and the step between them */
static size_t src_tasks(const struct dcr_stripes *s, uint64_t *step, uint64_t *len)
{
	if (s->nstripes == 1) {
		*len = s->nbytes;
		*step = TASK_BYTES; /* a multiple of every power-of-two node below it */
	} else {
		*len = s->rows;
		uint64_t rows = s->pitch ? TASK_BYTES / s->pitch : s->rows;
		if (rows >= 8)
			rows &= ~(uint64_t)7; /* whole chunks of every aligned stripe */
		*step = rows ? rows : 1;
	}
	return *len ? (size_t)((*len + *step - 1) / *step) : 1;
}

static int hash_sources(struct hsrc *src, size_t nsrc, int threads)
{
	struct hjob j = {.src = src, .nsrc = nsrc};
	size_t n = 0;
	for (size_t i = 0; i < nsrc; i++) {
		uint64_t step, len;
		src[i].task0 = n;
		src[i].ntasks = src[i].left = src_tasks(&src[i].s, &step, &len);
		n += src[i].ntasks;
	}
	j.task = dcr_calloc(n + 1, sizeof(*j.task));
	if (!j.task)
		return -ENOMEM;
	for (size_t i = 0; i < nsrc; i++) {
		uint64_t step, len;
		src_tasks(&src[i].s, &step, &len);
		for (size_t k = 0; k < src[i].ntasks; k++) {
			struct htask *t = &j.task[src[i].task0 + k];
			t->src = i;
			t->lo = k * step;
			t->hi = t->lo + step < len ? t->lo + step : len;
		}
	}
	j.ntasks = n;
	pthread_mutex_init(&j.mu, NULL);
	if (threads < 1)
		threads = dcr_ncpu();
	if (threads > 64)
		threads = 64;
	if ((size_t)threads > n)
		threads = (int)n;
	pthread_t th[64];
	int started = 0;
	for (int i = 1; i < threads; i++)
		if (!pthread_create(&th[started], NULL, hash_worker, &j))
			started++;
	hash_worker(&j);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&j.mu);
	for (size_t k = 0; k < n; k++)
		dcr_parts_free(&j.task[k].parts);
	free(j.task);
	return j.err;
}

void dcr_digest_tensor_mem(int dtype, unsigned ndim, const uint64_t *shape,
			   const uint8_t *data, int threads, dcr_digest *out)
{
	struct hsrc h = {.data = data, .out = out};
	dcr_stripes_init(&h.s, dtype, ndim, shape);
	if (hash_sources(&h, 1, threads))
		memset(out, 0, sizeof(*out));
}

static void src_of(struct hsrc *h, const struct dcr_ckpt_tensor *t, dcr_digest *out)
{
	const struct dcr_tensor_info *ti = t->info;
	memset(h, 0, sizeof(*h));
	dcr_stripes_init(&h->s, ti->dtype, ti->ndim, ti->shape);
	h->data = t->data;
	h->out = out;
	h->release = t->fd >= 0;
}

void dcr_tensor_digest(const struct dcr_ckpt_tensor *t, dcr_digest *out)
{
	struct hsrc h;
	src_of(&h, t, out);
	if (hash_sources(&h, 1, 1))
		memset(out, 0, sizeof(*out));
}

int dcr_ckpt_digests(const struct dcr_ckpt *c, dcr_digest *out, int threads)
{
	return dcr_ckpt_digests_sel(c, out, NULL, threads);
}

int dcr_ckpt_digests_sel(const struct dcr_ckpt *c, dcr_digest *out, const uint8_t *sel,
			 int threads)
{
	struct hsrc *h = dcr_calloc(c->ntensors + 1, sizeof(*h));
	size_t n = 0;
	if (!h)
		return -ENOMEM;
	for (size_t i = 0; i < c->ntensors; i++)
		if (!sel || sel[i])
			src_of(&h[n++], &c->tensors[i], &out[i]);
	int r = n ? hash_sources(h, n, threads) : 0;
	free(h);
	return r;
}

/* ---- state ids ---- */

/* The state id: BLAKE3 over "dcr-state-v2\n" then, per tensor sorted by
 * name: le32 name length, name, le32 dtype name length, dtype name, le32
 * ndim, le64 dims, 32-byte digest. */
void dcr_state_id(const struct dcr_state_entry *ent, size_t n, dcr_digest *out)
{
	struct dcr_blake3 h;
	uint8_t t[8];
	dcr_blake3_init(&h);
	dcr_blake3_update(&h, DCR_STATE_MAGIC, strlen(DCR_STATE_MAGIC));
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
		dcr_blake3_update(&h, ent[i].digest.b, DCR_DIGEST_LEN);
	}
	dcr_blake3_final(&h, out);
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
