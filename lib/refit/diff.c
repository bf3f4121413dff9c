/* diff.c - compare two checkpoints on stored bits and write a delta.
 *
 * Tensors are visited in name order. A tensor whose name, dtype and shape
 * are unchanged is compared chunk by chunk and its changes go out as XOR
 * items; any other target tensor goes out whole as OVERWRITE items.
 *
 * The work is cut into units: a tensor, or a run of whole rows of a large
 * one (SEG_BYTES, whole items). Worker threads (one per core) each take
 * the next unit, read base and new chunk by chunk into buffers of their
 * own (pread: the resident set stays a few chunks, and a copy from the
 * page cache is twice as fast as reading it through a mapping), compare,
 * encode items into the unit's output and hash the new bytes for the
 * tensor's target digest (core/state.h): a chunk is compared and hashed in
 * steps of SCAN_STEP bytes, so that the hash reads what the compare just
 * brought into the cache. A unit of rows hashes them into digest parts,
 * which the writer joins in order (dcr_tacc).
 * The calling thread writes the outputs in order as they complete;
 * workers run at most a few units ahead, so memory stays bounded by the
 * buffers and the encoded changes of the units in flight, and the first
 * items go out once the first unit is done, not the first tensor (a large
 * embedding first in name order held a stream's first byte back for a
 * third of a second).
 *
 * The base state id comes from --base-id, or BASE/.dcr/state when it still
 * describes BASE's files, or from hashing BASE first. After a diff, NEW's
 * digests are left in NEW/.dcr/state (best effort), so the next step's diff,
 * whose base is this NEW, needs no hashing of its base.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/bytes.h"
#include "core/cuda.h"
#include "core/file.h"
#include "core/state.h"
#include "core/util.h"
#include "refit/diff.h"
#include "refit/receiver.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_SCAN 1
#endif

#define SCAN_STEP (256u << 10)
#define SEG_BYTES (8u << 20) /* stored bytes of a unit of rows, about */

/* A unit of work: units [s0, s1) of tensor t, segment seg of its nseg,
 * and what its worker made of it. */
struct tout {
	size_t t;
	uint64_t s0, s1;
	uint32_t seg, nseg;
	struct dcr_buf recs;  /* framed ITEM records */
	dcr_digest digest;    /* the tensor's (a tensor in one unit) */
	struct dcr_parts parts; /* of its rows (a tensor in several) */
	uint64_t items, changed;
	int done;
	int err;
	struct dcr_err e;
};

struct dctx {
	const struct dcr_diff_opts *o;
	const struct dcr_ckpt *a, *b;
	uint64_t chunk;
	struct tout *out;
	size_t nout;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t next, written, window;
	int abort;
};

/* A change at unit `at` whose old bits are x and new bits y: with oldv,
 * x to oldv and y to val; without, the XOR mask to val. */
#define SCAN_PUT(at, x, y)                   \
	do {                                 \
		pos[n] = (at);               \
		if (oldv) {                  \
			oldv[n] = (x);       \
			val[n++] = (y);      \
		} else {                     \
			val[n++] = (x) ^ (y); \
		}                            \
	} while (0)

#ifdef HAVE_AVX2_SCAN
/* Append the changes of the 32 16-bit units at a + i, b + i whose bits
 * are set in m (bit 2j for unit j), and return the new count. A step
 * holds a few changes, a number the branch predictor cannot guess (at 3%
 * changed 38% of the steps hold none, 37% one, 18% two): the first two
 * are written without a branch (a slot past the step's last change gets
 * unit 31's bits, overwritten by the next step's), the rest one by one.
 * Never past the scan's units: before the step at byte i there are at
 * most i / 2 changes, and the step writes two slots from there. */
static inline __attribute__((always_inline)) size_t
scan16_emit(const uint8_t *a, const uint8_t *b, size_t i, uint64_t m, uint64_t *pos,
	    uint64_t *oldv, uint64_t *val, size_t n)
{
	const uint64_t top = 1ull << 62; /* unit 31: in the step, overwritten later */
	const size_t count = n + (size_t)__builtin_popcountll(m);
	size_t at0 = i + (size_t)__builtin_ctzll(m | top);
	m &= m - 1;
	size_t at1 = i + (size_t)__builtin_ctzll(m | top);
	m &= m - 1;
	SCAN_PUT(at0 / 2, get_le16(a + at0), get_le16(b + at0));
	SCAN_PUT(at1 / 2, get_le16(a + at1), get_le16(b + at1));
	for (; __builtin_expect(m != 0, 0); m &= m - 1) {
		size_t at = i + (size_t)__builtin_ctzll(m);
		SCAN_PUT(at / 2, get_le16(a + at), get_le16(b + at));
	}
	return count;
}

/* 16-bit units, 64 bytes a step: one bit per differing lane. The same
 * result as the portable loop below. */
__attribute__((target("avx2"))) static size_t scan16_avx2(const uint8_t *a, const uint8_t *b,
							   size_t nbytes, uint64_t *pos,
							   uint64_t *oldv, uint64_t *val)
{
	size_t n = 0, i = 0;
	const __m256i z = _mm256_setzero_si256();
	for (; i + 64 <= nbytes; i += 64) {
		__m256i d0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(a + i)),
					      _mm256_loadu_si256((const __m256i *)(b + i)));
		__m256i d1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(a + i + 32)),
					      _mm256_loadu_si256((const __m256i *)(b + i + 32)));
		uint64_t m0 = (uint32_t)~_mm256_movemask_epi8(_mm256_cmpeq_epi16(d0, z));
		uint64_t m1 = (uint32_t)~_mm256_movemask_epi8(_mm256_cmpeq_epi16(d1, z));
		n = scan16_emit(a, b, i, (m0 | m1 << 32) & 0x5555555555555555ull, pos, oldv, val, n);
	}
	for (; i < nbytes; i += 2) {
		uint16_t x = get_le16(a + i), y = get_le16(b + i);
		if (x != y)
			SCAN_PUT(i / 2, x, y);
	}
	return n;
}
#endif

/* Changed units of one chunk: positions, and (oldv NULL) XOR masks in
 * val, or old bits in oldv and new bits in val, what the encoder takes
 * without a second pass over the chunk for the old bits. The portable
 * scan: 32 bytes a step, the set units of a step walked. */
static size_t scan_changes(const uint8_t *a, const uint8_t *b, size_t nbytes, unsigned unit,
			   uint64_t *pos, uint64_t *oldv, uint64_t *val)
{
#ifdef HAVE_AVX2_SCAN
	if (unit == 2 && __builtin_cpu_supports("avx2"))
		return scan16_avx2(a, b, nbytes, pos, oldv, val);
#endif
	size_t n = 0, i = 0;
	for (; i + 32 <= nbytes; i += 32) {
		uint64_t x[4], y[4], d = 0;
		memcpy(x, a + i, 32);
		memcpy(y, b + i, 32);
		for (int k = 0; k < 4; k++)
			d |= x[k] ^ y[k];
		if (!d)
			continue;
		for (size_t at = i; at < i + 32; at += unit) {
			uint64_t u = load_unit(a + at, unit), v = load_unit(b + at, unit);
			if (u != v)
				SCAN_PUT(at / unit, u, v);
		}
	}
	for (; i < nbytes; i += unit) {
		uint64_t x = load_unit(a + i, unit), y = load_unit(b + i, unit);
		if (x != y)
			SCAN_PUT(i / unit, x, y);
	}
	return n;
}

/* Changed units of one chunk, as positions and XOR masks: the CPU reference
 * of kernels/dcr_cuda.cu's diff kernel. */
size_t dcr_scan_changes(const uint8_t *a, const uint8_t *b, size_t nbytes, unsigned unit,
		   uint64_t *pos, uint64_t *val)
{
	return scan_changes(a, b, nbytes, unit, pos, NULL, val);
}

struct worker {
	struct dctx *d;
	const uint8_t *ba, *bb; /* the current chunk of base and new */
	struct dcr_buf bufa, bufb; /* where they are read (dcr_ckpt_tensor_read) */
	struct dcr_changes ch;
	uint64_t *oldv;
	struct dcr_buf enc;
	struct dcr_cuda_ctx *gpu; /* --device cuda: the chunks are compared there (ch.val
				     then holds XOR masks; on the host, new bits) */
};

static int add_item(struct tout *t, uint32_t tidx, uint8_t enc, uint64_t start, uint64_t len,
		    int dense, struct worker *w, unsigned unit, int dtype, struct dcr_err *e)
{
	w->enc.len = 0;
	struct dcr_item it = {.tensor = tidx, .enc = enc, .start = start, .len = len,
			      .n = w->ch.n, .flags = dense ? DCR_ITEM_DENSE : 0};
	int r;
	if (enc == DCR_ENC_XOR) {
		/* the device's masks: old bits from the base chunk, new = old ^ mask */
		for (size_t k = 0; w->gpu && k < w->ch.n; k++) {
			w->oldv[k] = load_unit(w->ba + w->ch.pos[k] * unit, unit);
			w->ch.val[k] ^= w->oldv[k];
		}
		r = dcr_item_encode_xor(w->ch.n, w->ch.pos, w->oldv, w->ch.val, w->ba, unit, dtype,
					len, w->d->o->codec, &it.codec, &w->enc, e);
	} else {
		r = dcr_item_encode(&w->ch, unit, len, dense, &it.codec, &w->enc, e);
	}
	if (r)
		return r;
	it.data = w->enc.p;
	it.data_len = w->enc.len;
	if (dcr_delta_item_record(&t->recs, &it))
		return dcr_err_sys(e, ENOMEM, "diff");
	t->items++;
	t->changed += it.n;
	return 0;
}

/* Units per item of tensor ni, about `chunk`: whole bands of rows where a
 * band fits (core/state.h, dcr_stripes_band_rows), so that the receiver,
 * which hashes each item's new bytes as it resolves it (refit/prehash.h),
 * hashes whole chunks of every stripe in batches. */
static uint64_t item_units(uint64_t chunk, const struct dcr_tensor_info *ni, unsigned unit)
{
	struct dcr_stripes st;
	dcr_stripes_init(&st, ni->dtype, ni->ndim, ni->shape);
	if (!st.esize || st.esize != unit)
		return chunk;
	uint64_t band = dcr_stripes_band_rows(&st) * st.cols;
	return band && band <= chunk ? chunk / band * band : chunk;
}

/* Units per unit of work of tensor ni (whole items of `chunk` units and
 * whole rows), or 0 when it is one unit: rows too wide for an item, a
 * dtype not striped, or a tensor of at most one. */
static uint64_t seg_units(uint64_t chunk, const struct dcr_tensor_info *ni, unsigned unit)
{
	struct dcr_stripes st;
	dcr_stripes_init(&st, ni->dtype, ni->ndim, ni->shape);
	uint64_t per = SEG_BYTES / unit / chunk * chunk;
	if (!st.esize || st.esize != unit || !st.cols || chunk % st.cols || per < chunk)
		return 0;
	return dcr_tensor_bytes(ni) / unit > per ? per : 0;
}

/* The units of work of b's tensors, in order: *out (*n of them). */
static int plan_units(struct dctx *d, struct dcr_err *e)
{
	const struct dcr_ckpt *b = d->b;
	size_t n = 0, cap = b->ntensors + 16;
	struct tout *v = dcr_calloc(cap, sizeof(*v));
	for (size_t i = 0; v && i < b->ntensors; i++) {
		const struct dcr_tensor_info *ni = b->tensors[i].info;
		unsigned unit = dcr_dtype_unit(ni->dtype);
		uint64_t nunits = dcr_tensor_bytes(ni) / unit;
		uint64_t per = seg_units(item_units(d->chunk, ni, unit), ni, unit);
		uint32_t nseg = per ? (uint32_t)((nunits + per - 1) / per) : 1;
		for (uint32_t k = 0; k < nseg; k++) {
			if (n == cap) {
				struct tout *x = realloc(v, 2 * cap * sizeof(*v));
				if (!x) {
					free(v);
					v = NULL;
					break;
				}
				memset(x + cap, 0, cap * sizeof(*v));
				v = x;
				cap *= 2;
			}
			struct tout *t = &v[n++];
			t->t = i;
			t->seg = k;
			t->nseg = nseg;
			t->s0 = per ? k * per : 0;
			t->s1 = per && (k + 1) * per < nunits ? (k + 1) * per : nunits;
		}
	}
	if (!v)
		return dcr_err_sys(e, ENOMEM, "diff");
	d->out = v;
	d->nout = n;
	return 0;
}

static int diff_unit(struct worker *w, struct tout *t)
{
	struct dctx *d = w->d;
	size_t i = t->t;
	const struct dcr_ckpt_tensor *nt = &d->b->tensors[i];
	const struct dcr_tensor_info *ni = nt->info;
	const struct dcr_ckpt_tensor *bt = dcr_ckpt_find(d->a, ni->name);
	int same = dcr_ckpt_tensor_is(bt, ni->dtype, ni->ndim, ni->shape);
	unsigned unit = dcr_dtype_unit(ni->dtype);
	uint64_t chunk = item_units(d->chunk, ni, unit);
	struct dcr_tdigest *td;
	if (t->nseg == 1) {
		td = dcr_tdigest_new(ni->dtype, ni->ndim, ni->shape);
	} else {
		struct dcr_stripes st; /* its rows are the stripes' (seg_units) */
		dcr_stripes_init(&st, ni->dtype, ni->ndim, ni->shape);
		td = dcr_tdigest_new_rows(ni->dtype, ni->ndim, ni->shape, t->s0 / st.cols,
					  t->s1 / st.cols);
	}
	int r = td ? 0 : dcr_err_sys(&t->e, ENOMEM, "diff");
	for (uint64_t s = t->s0; s < t->s1 && !r; s += chunk) {
		uint64_t len = t->s1 - s < chunk ? t->s1 - s : chunk;
		size_t nb = (size_t)(len * unit);
		/* each chunk read into the worker's buffers: reading page-cached
		 * files through a mapping costs the kernel a page-table entry per
		 * page and the compare a TLB miss per page, about half the speed
		 * of a copy into a buffer that stays in the cache */
		if ((r = dcr_ckpt_tensor_read(nt, s * unit, nb, &w->bufb, &w->bb, &t->e)) ||
		    (same && (r = dcr_ckpt_tensor_read(bt, s * unit, nb, &w->bufa, &w->ba, &t->e))))
			break;
		if (same) {
			w->ch.n = 0;
			if (w->gpu) {
				/* the chunk compared on the device, hashed here */
				if ((r = dcr_cuda_scan_changes(w->gpu, w->ba, w->bb, nb, unit, w->ch.pos,
								w->ch.val, &w->ch.n, &t->e)))
					break;
				dcr_tdigest_update(td, w->bb, nb);
			}
			/* in steps, so that the hash reads what the compare just read */
			for (size_t at = 0; !w->gpu && at < nb; at += SCAN_STEP) {
				size_t k = nb - at < SCAN_STEP ? nb - at : SCAN_STEP;
				size_t got = scan_changes(w->ba + at, w->bb + at, k, unit,
							      w->ch.pos + w->ch.n, w->oldv + w->ch.n,
							      w->ch.val + w->ch.n);
				for (size_t q = w->ch.n; q < w->ch.n + got; q++)
					w->ch.pos[q] += at / unit;
				w->ch.n += got;
				dcr_tdigest_update(td, w->bb + at, k);
			}
			if (w->ch.n)
				r = add_item(t, (uint32_t)i, DCR_ENC_XOR, s, len, 0, w, unit, ni->dtype,
					     &t->e);
		} else {
			dcr_tdigest_update(td, w->bb, nb);
			for (uint64_t k = 0; k < len; k++) {
				w->ch.pos[k] = k;
				w->ch.val[k] = load_unit(w->bb + k * unit, unit);
			}
			w->ch.n = len;
			r = add_item(t, (uint32_t)i, DCR_ENC_OVERWRITE, s, len, 1, w, unit, ni->dtype,
				     &t->e);
		}
	}
	if (!r && (t->nseg == 1 ? dcr_tdigest_final(td, &t->digest)
				: dcr_tdigest_parts(td, &t->parts)))
		r = dcr_err_set(&t->e, -EINVAL, "diff: tensor '%s' was not hashed whole", ni->name);
	dcr_tdigest_free(td);
	return r;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct dctx *d = w->d;
	for (;;) {
		pthread_mutex_lock(&d->mu);
		while (!d->abort && d->next < d->nout && d->next >= d->written + d->window)
			pthread_cond_wait(&d->cv, &d->mu);
		size_t i = d->next;
		if (d->abort || i >= d->nout) {
			pthread_mutex_unlock(&d->mu);
			return NULL;
		}
		d->next++;
		pthread_mutex_unlock(&d->mu);
		struct tout *t = &d->out[i];
		t->err = diff_unit(w, t);
		pthread_mutex_lock(&d->mu);
		t->done = 1;
		pthread_cond_broadcast(&d->cv);
		pthread_mutex_unlock(&d->mu);
	}
}

static int base_state(const struct dcr_diff_opts *o, const struct dcr_ckpt *a, dcr_digest *id,
		      struct dcr_err *e)
{
	if (o->base_id || o->dense) {
		if (o->dense)
			memset(id, 0, sizeof(*id));
		else
			*id = *o->base_id;
		return 0;
	}
	if (a->is_dir) {
		struct dcr_receiver rc = {.dir = a->path, .sdir = dcr_path_join(a->path, ".dcr"),
					  .lock_fd = -1};
		dcr_digest *dg = dcr_calloc(a->ntensors, sizeof(*dg));
		int hit = rc.sdir && dg && !dcr_receiver_cached_state(&rc, a, id, dg);
		free(dg);
		free(rc.sdir);
		if (hit)
			return 0;
	}
	return dcr_ckpt_state_id_threads(a, o->threads, id, NULL, e);
}

/* Leave NEW's digests in NEW/.dcr/state for the next step (best effort). */
static void save_target_state(const struct dcr_ckpt *b, const dcr_digest *id,
			      const dcr_digest *dg)
{
	if (!b->is_dir)
		return;
	struct dcr_receiver rc = {.dir = b->path, .sdir = dcr_path_join(b->path, ".dcr"),
				  .lock_fd = -1};
	struct dcr_err ignore;
	if (rc.sdir && (mkdir(rc.sdir, 0777) == 0 || errno == EEXIST))
		dcr_receiver_save_state(&rc, b, id, dg, &ignore);
	free(rc.sdir);
}

int dcr_diff_tensor_record(const struct dcr_ckpt *a, const struct dcr_ckpt *b, size_t i,
			   struct dcr_delta_tensor *dt)
{
	const struct dcr_ckpt_tensor *nt = &b->tensors[i];
	const struct dcr_tensor_info *ni = nt->info;
	int same = dcr_ckpt_tensor_is(dcr_ckpt_find(a, ni->name), ni->dtype, ni->ndim, ni->shape);
	memset(dt, 0, sizeof(*dt));
	dt->name = ni->name;
	dt->file = b->file_names[nt->file];
	dt->flags = same ? 0 : DCR_TENSOR_NEW;
	dt->dtype = ni->dtype;
	dt->ndim = ni->ndim;
	memcpy(dt->shape, ni->shape, sizeof(dt->shape));
	return same;
}

int dcr_diff_write_targets(struct dcr_delta_writer *w, const struct dcr_ckpt *a,
			   const struct dcr_ckpt *b, const dcr_digest *dg, dcr_digest *target,
			   struct dcr_err *e)
{
	/* before the end that makes the delta whole: base and target as
	 * they were when opened, or no delta (a receiver refuses one that
	 * has no end) */
	int r = dcr_ckpt_unchanged(a, e);
	if (r || (r = dcr_ckpt_unchanged(b, e)))
		return r;
	for (size_t i = 0; i < b->ntensors; i++)
		if ((r = dcr_delta_write_done(w, (uint32_t)i, &dg[i], e)))
			return r;
	dcr_ckpt_state_from(b, dg, target);
	return dcr_delta_write_end(w, target, e);
}

/* The two checkpoints: the base (an empty one for a dense copy) and the
 * target. */
static int open_ckpts(const struct dcr_diff_opts *o, struct dcr_ckpt **pa, struct dcr_ckpt **pb,
		      struct dcr_err *e)
{
	int r;
	if (o->dense) {
		/* a dense copy: against an empty checkpoint, every tensor is new */
		struct dcr_ckpt *a = *pa = dcr_calloc(1, sizeof(*a));
		if (!a || !(a->path = dcr_strdup("(none)")))
			return dcr_err_sys(e, ENOMEM, "diff");
	} else if ((r = dcr_ckpt_open(o->base, pa, e))) {
		return r;
	}
	if ((r = dcr_ckpt_open(o->target, pb, e)))
		return r;
	/* a target without tensors is a wrong path or a trainer that has
	 * not written yet far more often than a wish to empty every
	 * receiver, which a delta to it would do */
	if (!(*pb)->ntensors && (o->dense || (*pa)->ntensors))
		return dcr_err_set(e, DCR_ENOTFOUND,
				   "'%s' holds no tensors (%s): a delta to it would remove every tensor a receiver holds; name the checkpoint the trainer wrote",
				   o->target, (*pb)->is_dir ? "no .safetensors files in it" : "an empty safetensors file");
	return 0;
}

/* Each worker's buffers, then up to threads threads (*nth of them
 * started; fewer than asked is fine, none is an error). */
static int start_workers(struct dctx *d, struct worker *ws, int threads, pthread_t *th, int *nth,
			 struct dcr_err *e)
{
	for (int k = 0; k < threads; k++) {
		ws[k].d = d;
		ws[k].oldv = malloc((size_t)d->chunk * sizeof(uint64_t));
		if (!ws[k].oldv ||
		    dcr_changes_reserve(&ws[k].ch, d->chunk))
			return dcr_err_sys(e, ENOMEM, "diff");
		int r;
		if (d->o->device == DCR_DEVICE_CUDA && (r = dcr_cuda_ctx_new(&ws[k].gpu, e)))
			return r;
	}
	for (int k = 0; k < threads; k++) {
		if (pthread_create(&th[*nth], NULL, work, &ws[k])) {
			if (!*nth)
				return dcr_err_sys(e, EAGAIN, "cannot start a thread");
			break;
		}
		(*nth)++;
	}
	return 0;
}

/* Every target tensor's record and, as its workers are done, the items
 * of its units, in order; dg gets the tensors' digests (a tensor of
 * several units: its units' parts joined in order), *changed and
 * *total_bytes the totals. */
static int write_tensors(struct dctx *d, struct dcr_delta_writer *w, dcr_digest *dg,
			 uint64_t *changed, uint64_t *total_bytes, struct dcr_err *e)
{
	const struct dcr_diff_opts *o = d->o;
	const struct dcr_ckpt *a = d->a, *b = d->b;
	struct dcr_tacc *acc = NULL;
	uint64_t done_bytes = 0;
	int r = 0;
	for (size_t i = 0; i < b->ntensors; i++)
		*total_bytes += dcr_tensor_bytes(b->tensors[i].info);
	for (size_t u = 0; u < d->nout && !r; u++) {
		struct tout *t = &d->out[u];
		const struct dcr_tensor_info *ni = b->tensors[t->t].info;
		unsigned unit = dcr_dtype_unit(ni->dtype);
		if (t->seg == 0) {
			struct dcr_delta_tensor dt;
			dcr_diff_tensor_record(a, b, t->t, &dt);
			if ((r = dcr_delta_write_tensor(w, &dt, e)))
				break;
			if (t->nseg > 1 && !(acc = dcr_tacc_new(ni->dtype, ni->ndim, ni->shape))) {
				r = dcr_err_sys(e, ENOMEM, "diff");
				break;
			}
		}
		pthread_mutex_lock(&d->mu);
		while (!t->done)
			pthread_cond_wait(&d->cv, &d->mu);
		pthread_mutex_unlock(&d->mu);
		if (t->err) {
			*e = t->e;
			r = t->err;
			break;
		}
		r = dcr_delta_write_raw(w, t->recs.p, t->recs.len, t->items, t->changed, e);
		if (!r && t->nseg == 1) {
			dg[t->t] = t->digest;
		} else if (!r && (dcr_tacc_add(acc, &t->parts, t->s1 * unit) ||
				  (t->seg + 1 == t->nseg && dcr_tacc_final(acc, &dg[t->t])))) {
			r = dcr_err_set(e, -EINVAL, "diff: tensor '%s' was not hashed whole",
					ni->name);
		}
		if (t->seg + 1 == t->nseg) {
			dcr_tacc_free(acc);
			acc = NULL;
		}
		*changed += t->changed;
		dcr_buf_free(&t->recs);
		dcr_parts_free(&t->parts);
		pthread_mutex_lock(&d->mu);
		d->written = u + 1;
		pthread_cond_broadcast(&d->cv);
		pthread_mutex_unlock(&d->mu);
		done_bytes += (t->s1 - t->s0) * unit;
		if (!r && o->progress)
			o->progress(o->progress_ctx, done_bytes, *total_bytes);
	}
	dcr_tacc_free(acc);
	return r;
}

int dcr_diff(const struct dcr_diff_opts *o, struct dcr_sink sink, struct dcr_diff_stats *st,
	     struct dcr_err *e)
{
	struct dcr_ckpt *a = NULL, *b = NULL;
	struct dcr_delta_writer w = {0};
	struct dctx d = {.o = o};
	struct worker *ws = NULL;
	pthread_t th[64];
	int nth = 0, r;
	int threads = o->threads > 0 ? o->threads : dcr_ncpu();
	if (threads > 64)
		threads = 64;
	dcr_digest *dg = NULL;
	d.chunk = o->chunk_elems ? o->chunk_elems : (1u << 20);
	if (d.chunk > DCR_ITEM_MAX_ELEMS)
		d.chunk = DCR_ITEM_MAX_ELEMS;
	pthread_mutex_init(&d.mu, NULL);
	pthread_cond_init(&d.cv, NULL);
	if (o->device == DCR_DEVICE_CUDA && (r = dcr_cuda_probe(e)))
		goto out;

	if ((r = open_ckpts(o, &a, &b, e)))
		goto out;
	d.a = a;
	d.b = b;
	dcr_digest base_id;
	if ((r = base_state(o, a, &base_id, e)))
		goto out;
	uint8_t attempt[16];
	if ((r = dcr_attempt_id(o->attempt, attempt, e)))
		goto out;
	if ((r = plan_units(&d, e)))
		goto out;
	dg = dcr_calloc(b->ntensors, sizeof(*dg));
	ws = dcr_calloc((size_t)threads, sizeof(*ws));
	if (!dg || !ws) {
		r = dcr_err_sys(e, ENOMEM, "diff");
		goto out;
	}
	d.window = (size_t)threads + 2;
	if ((r = dcr_delta_writer_init_flags(&w, sink, &base_id, attempt,
					     o->dense ? DCR_DELTA_DENSE : 0, o->what, e)))
		goto out;

	/* removed tensors */
	for (size_t i = 0; i < a->ntensors; i++)
		if (!dcr_ckpt_find(b, a->tensors[i].info->name) &&
		    (r = dcr_delta_write_remove(&w, a->tensors[i].info->name, e)))
			goto out;

	uint64_t total_bytes = 0, changed = 0;
	dcr_digest target;
	if ((r = start_workers(&d, ws, threads, th, &nth, e)) ||
	    (r = write_tensors(&d, &w, dg, &changed, &total_bytes, e)) ||
	    (r = dcr_diff_write_targets(&w, a, b, dg, &target, e)))
		goto out;
	if (!o->no_cache)
		save_target_state(b, &target, dg);
	if (st) {
		st->base = base_id;
		st->target = target;
		st->bytes_out = w.bytes;
		st->dense_bytes = total_bytes;
		st->items = w.nitems;
		st->tensors = b->ntensors;
		st->changed = changed;
	}
out:
	pthread_mutex_lock(&d.mu);
	d.abort = 1;
	pthread_cond_broadcast(&d.cv);
	pthread_mutex_unlock(&d.mu);
	for (int k = 0; k < nth; k++)
		pthread_join(th[k], NULL);
	if (ws)
		for (int k = 0; k < threads; k++) {
			free(ws[k].oldv);
			dcr_buf_free(&ws[k].bufa);
			dcr_buf_free(&ws[k].bufb);
			dcr_cuda_ctx_free(ws[k].gpu);
			dcr_changes_free(&ws[k].ch);
			dcr_buf_free(&ws[k].enc);
		}
	free(ws);
	for (size_t i = 0; i < d.nout; i++) {
		dcr_buf_free(&d.out[i].recs);
		dcr_parts_free(&d.out[i].parts);
	}
	free(d.out);
	free(dg);
	pthread_mutex_destroy(&d.mu);
	pthread_cond_destroy(&d.cv);
	dcr_delta_writer_release(&w);
	dcr_ckpt_close(a);
	dcr_ckpt_close(b);
	return r;
}
