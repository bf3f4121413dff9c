/* test-state.c - tensor digests v2 (lib/core/state.c) and digest parts
 * (lib/core/blake3.c), against the b3sum program.
 *
 * The test writes each tensor's stripe stream out itself, from the
 * definition in dcr-format-delta(5) (a loop over stripes, rows and the
 * elements of a segment, independent of lib/core/state.c's gathering), and
 * checks that every way dcr computes the digest gives b3sum of that file:
 * in memory on 1, 2 and 5 threads, fed in pieces of any size, from the parts
 * of random blocks of rows and columns (with and without cut segments) and
 * of random byte runs, encoded and decoded. Shapes: fewer, exactly and more
 * than 128 columns, a multiple of 128 and not, rows that do and do not make
 * whole chunks, 1-D, empty, sub-byte dtypes, and tensors large enough to be
 * split into several tasks. Parts that overlap, leave a gap or belong to
 * another tensor are refused. */
#include "config.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcr.h"
#include "core/bytes.h"

struct shape {
	int dtype;
	unsigned ndim;
	uint64_t dims[3];
};

static const struct shape shapes[] = {
	{DCR_DT_BF16, 2, {300, 100}},	  /* C < 128: the stored order */
	{DCR_DT_BF16, 2, {77, 128}},	  /* C = 128 */
	{DCR_DT_BF16, 2, {64, 512}},	  /* a multiple, rows make whole chunks */
	{DCR_DT_BF16, 2, {37, 300}},	  /* not a multiple, rows do not */
	{DCR_DT_BF16, 3, {3, 5, 1000}},	  /* 3-D: R is the product of the others */
	{DCR_DT_F32, 2, {9, 129}},	  /* a last stripe of one column */
	{DCR_DT_U8, 2, {41, 1000}},	  /* 128-byte segments */
	{DCR_DT_F64, 2, {13, 700}},	  /* 1 KiB segments */
	{DCR_DT_F32, 1, {5000}},	  /* 1-D: a column */
	{DCR_DT_BF16, 1, {1}},
	{DCR_DT_BF16, 2, {1, 4096}},	  /* one row: the stored order too */
	{DCR_DT_BF16, 2, {0, 300}},	  /* empty */
	{DCR_DT_BF16, 2, {300, 0}},
	{DCR_DT_F32, 1, {0}},
	{DCR_DT_F32, 0, {0}},		  /* a scalar */
	{DCR_DT_F4, 2, {34, 301}},	  /* sub-byte: not striped */
	{DCR_DT_F6_E2M3, 2, {8, 200}},
	{DCR_DT_BF16, 2, {3001, 1000}},	  /* several tasks, stripes not chunk-aligned */
	{DCR_DT_BF16, 2, {2048, 1536}},	  /* several tasks, aligned */
	{DCR_DT_F32, 2, {9000, 130}},
	{DCR_DT_BF16, 1, {3u << 20}},	  /* several tasks of one stripe */
};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

static unsigned lcg(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return *seed >> 8;
}

static uint64_t nbytes_of(const struct shape *sh)
{
	uint64_t n = 1;
	for (unsigned k = 0; k < sh->ndim; k++)
		n *= sh->dims[k];
	return n * dcr_dtype_bits(sh->dtype) / 8;
}

static uint8_t *random_tensor(const struct shape *sh, unsigned seed)
{
	uint64_t n = nbytes_of(sh);
	uint8_t *p = malloc(n + 1);
	cr_assert_not_null(p);
	for (uint64_t i = 0; i < n; i++)
		p[i] = (uint8_t)lcg(&seed);
	return p;
}

/* The stripe stream, straight from its definition. */
static uint8_t *stripe_stream(const struct shape *sh, const uint8_t *t)
{
	uint64_t n = nbytes_of(sh);
	uint8_t *out = malloc(n + 1), *o = out;
	cr_assert_not_null(out);
	unsigned bits = dcr_dtype_bits(sh->dtype);
	if (bits < 8) {
		memcpy(out, t, n);
		return out;
	}
	uint64_t es = bits / 8, R, C;
	if (sh->ndim >= 2) {
		C = sh->dims[sh->ndim - 1];
		R = 1;
		for (unsigned k = 0; k + 1 < sh->ndim; k++)
			R *= sh->dims[k];
	} else {
		C = 1;
		R = n / es;
	}
	for (uint64_t c0 = 0; c0 < C; c0 += 128)
		for (uint64_t r = 0; r < R; r++)
			for (uint64_t c = c0; c < c0 + 128 && c < C; c++) {
				memcpy(o, t + (r * C + c) * es, es);
				o += es;
			}
	cr_assert_eq((uint64_t)(o - out), n);
	return out;
}

static int have_b3sum(void)
{
	static int have = -1;
	if (have < 0)
		have = !system("b3sum --version >/dev/null 2>&1");
	return have;
}

/* b3sum of n bytes, as 64 hex digits */
static void b3sum(const uint8_t *p, uint64_t n, char out[65])
{
	char path[] = "/tmp/dcr-test-state.XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	for (uint64_t off = 0; off < n;) {
		ssize_t k = write(fd, p + off, n - off);
		cr_assert_gt(k, 0);
		off += (uint64_t)k;
	}
	close(fd);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "b3sum --no-names %s", path);
	FILE *f = popen(cmd, "r");
	cr_assert_not_null(f);
	char line[128] = "";
	cr_assert_not_null(fgets(line, sizeof(line), f));
	cr_assert_eq(pclose(f), 0);
	unlink(path);
	line[64] = '\0';
	memcpy(out, line, 65);
}

static void expect_hex(const dcr_digest *d, const char *want, const char *how, size_t s)
{
	char hex[65];
	dcr_digest_hex(d, hex);
	cr_expect_str_eq(hex, want, "shape %zu, %s", s, how);
}

/* the reference digest of shape s: b3sum of its stripe stream */
static void reference(size_t s, const uint8_t *t, char want[65])
{
	uint8_t *st = stripe_stream(&shapes[s], t);
	b3sum(st, nbytes_of(&shapes[s]), want);
	free(st);
}

/* a pool's feed: rows [r0, r1) of the tensor in pieces of odd sizes */
struct feedctx {
	const uint8_t *t;
	uint64_t pitch;
	unsigned seed;
};

static int feed_rows_oddly(void *ctx, uint64_t r0, uint64_t r1, struct dcr_tdigest *td)
{
	struct feedctx *f = ctx;
	unsigned seed = f->seed + (unsigned)r0;
	uint64_t a = r0 * f->pitch, b = r1 * f->pitch;
	while (a < b) {
		uint64_t k = 1 + lcg(&seed) % 300000;
		if (k > b - a)
			k = b - a;
		dcr_tdigest_update(td, f->t + a, (size_t)k);
		a += k;
	}
	return 0;
}

Test(state, digest_is_b3sum_of_the_stripe_stream)
{
	if (!have_b3sum())
		cr_skip_test("b3sum is not installed");
	for (size_t s = 0; s < NSHAPES; s++) {
		const struct shape *sh = &shapes[s];
		uint8_t *t = random_tensor(sh, (unsigned)s + 1);
		char want[65];
		reference(s, t, want);
		static const int threads[] = {1, 2, 5};
		for (int k = 0; k < 3; k++) {
			dcr_digest d;
			dcr_digest_tensor_mem(sh->dtype, sh->ndim, sh->dims, t, threads[k], &d);
			expect_hex(&d, want, threads[k] == 1 ? "1 thread" : "threads", s);
		}
		/* eight lanes with AVX-512VL's rotates, without them (AVX2),
		 * and no vectors: every chunk gathered and hashed alone */
		static const char *const path[] = {"portable code", "AVX2 code", "AVX-512VL code"};
		for (int lv = 0; lv < 3; lv++) {
			dcr_digest d0;
			int was = dcr_blake3_simd(lv);
			dcr_digest_tensor_mem(sh->dtype, sh->ndim, sh->dims, t, 1, &d0);
			dcr_blake3_simd(was);
			expect_hex(&d0, want, path[lv], s);
		}
		/* a pool of threads: tensors given by their bytes or fed by bands */
		struct dcr_stripes st;
		dcr_stripes_init(&st, sh->dtype, sh->ndim, sh->dims);
		struct feedctx fc = {t, st.pitch, (unsigned)s};
		dcr_digest d1, d2;
		struct dcr_hpool *pool = dcr_hpool_new(3);
		cr_assert_not_null(pool);
		cr_assert_eq(dcr_hpool_add(pool, sh->dtype, sh->ndim, sh->dims, t, NULL, NULL, NULL, 0,
					   &d1), 0);
		cr_assert_eq(dcr_hpool_add(pool, sh->dtype, sh->ndim, sh->dims, NULL, feed_rows_oddly,
					   NULL, &fc, 0, &d2), 0);
		cr_assert_eq(dcr_hpool_wait(pool), 0);
		dcr_hpool_free(pool);
		expect_hex(&d1, want, "pool", s);
		expect_hex(&d2, want, "pool, fed", s);
		/* fed in order, in pieces of random sizes (and all at once) */
		unsigned seed = 99 + (unsigned)s;
		uint64_t n = nbytes_of(sh);
		for (int way = 0; way < 3; way++) {
			struct dcr_tdigest *td = dcr_tdigest_new(sh->dtype, sh->ndim, sh->dims);
			cr_assert_not_null(td);
			for (uint64_t off = 0; off < n;) {
				uint64_t k = way == 0 ? n : way == 1 ? 1 + lcg(&seed) % 5000
								    : 1 + lcg(&seed) % (3u << 20);
				if (k > n - off)
					k = n - off;
				dcr_tdigest_update(td, t + off, (size_t)k);
				off += k;
			}
			dcr_digest d;
			cr_assert_eq(dcr_tdigest_final(td, &d), 0);
			dcr_tdigest_free(td);
			expect_hex(&d, want, "fed in pieces", s);
		}
		free(t);
	}
}

/* the stream map agrees with the definition, byte for byte */
Test(state, map_and_gather_follow_the_definition)
{
	for (size_t s = 0; s < NSHAPES; s++) {
		const struct shape *sh = &shapes[s];
		uint64_t n = nbytes_of(sh);
		if (n > (1u << 20))
			continue;
		uint8_t *t = random_tensor(sh, (unsigned)s + 7), *want = stripe_stream(sh, t);
		uint8_t *got = malloc(n + 1);
		cr_assert_not_null(got);
		struct dcr_stripes st;
		dcr_stripes_init(&st, sh->dtype, sh->ndim, sh->dims);
		cr_assert_eq(st.nbytes, n);
		dcr_stripes_gather(&st, t, 0, (size_t)n, got);
		cr_expect_eq(memcmp(got, want, n), 0, "shape %zu: gather", s);
		for (uint64_t off = 0; off < n; off += 1 + off / 3) {
			uint64_t run, at = dcr_stripes_map(&st, off, &run);
			cr_assert(run >= 1 && off + run <= n, "shape %zu at %llu", s,
				  (unsigned long long)off);
			cr_expect_eq(memcmp(t + at, want + off, run), 0, "shape %zu at %llu", s,
				     (unsigned long long)off);
		}
		free(got);
		free(want);
		free(t);
	}
}

/* a block of the tensor as its own row-major matrix */
static uint8_t *block_of(const struct dcr_stripes *st, const uint8_t *t, uint64_t r0, uint64_t r1,
			 uint64_t c0, uint64_t c1)
{
	uint64_t eb = st->esize ? st->esize : 1, lp = (c1 - c0) * eb;
	uint8_t *b = malloc((r1 - r0) * lp + 1);
	cr_assert_not_null(b);
	for (uint64_t r = r0; r < r1; r++)
		memcpy(b + (r - r0) * lp, t + r * st->pitch + c0 * eb, lp);
	return b;
}

/* random cuts of [0, n) into k pieces (cuts[0] = 0, cuts[k] = n) */
static void random_cuts(uint64_t n, size_t k, unsigned *seed, int multiple, uint64_t *cuts)
{
	cuts[0] = 0;
	cuts[k] = n;
	for (size_t i = 1; i < k; i++) {
		uint64_t c = n ? lcg(seed) % (n + 1) : 0;
		if (multiple && c % 128)
			c -= c % 128;
		cuts[i] = c;
	}
	for (size_t i = 1; i < k; i++) /* sort */
		for (size_t j = i; j > 1 && cuts[j] < cuts[j - 1]; j--) {
			uint64_t x = cuts[j];
			cuts[j] = cuts[j - 1];
			cuts[j - 1] = x;
		}
}

/* Join the parts, also after encoding and decoding every one. */
static void join_both_ways(const struct dcr_stripes *st, struct dcr_parts *ps, const char *want,
			   const char *how, size_t s)
{
	struct dcr_err e = {0};
	dcr_digest d;
	cr_assert_eq(dcr_stripes_join(st, ps, &d, &e), 0, "shape %zu, %s: %s", s, how, e.msg);
	expect_hex(&d, want, how, s);
	struct dcr_buf b = {0};
	for (size_t i = 0; i < ps->n; i++)
		cr_assert_eq(dcr_blake3_part_encode(&ps->v[i], &b), 0);
	struct dcr_parts back = {.v = calloc(ps->n + 1, sizeof(*back.v)), .cap = ps->n + 1};
	size_t off = 0;
	for (size_t i = 0; i < ps->n; i++) {
		size_t used;
		cr_assert_eq(dcr_blake3_part_decode(b.p + off, b.len - off, &used, &back.v[back.n++],
						    &e), 0, "%s", e.msg);
		off += used;
	}
	cr_assert_eq(off, b.len);
	cr_assert_eq(dcr_stripes_join(st, &back, &d, &e), 0, "%s", e.msg);
	expect_hex(&d, want, "decoded parts", s);
	dcr_parts_free(&back);
	dcr_buf_free(&b);
}

Test(state, parts_of_random_blocks_join)
{
	if (!have_b3sum())
		cr_skip_test("b3sum is not installed");
	unsigned seed = 5;
	for (size_t s = 0; s < NSHAPES; s++) {
		const struct shape *sh = &shapes[s];
		struct dcr_stripes st;
		dcr_stripes_init(&st, sh->dtype, sh->ndim, sh->dims);
		if (st.nbytes > (8u << 20))
			continue;
		uint8_t *t = random_tensor(sh, (unsigned)s + 3);
		char want[65];
		reference(s, t, want);
		/* row runs, column runs (multiples of 128 or not), grids */
		for (int way = 0; way < 4; way++) {
			size_t kr = way == 1 ? 1 : 1 + lcg(&seed) % 4;
			size_t kc = way == 0 ? 1 : 1 + lcg(&seed) % 4;
			uint64_t rc[8], cc[8];
			random_cuts(st.rows, kr, &seed, 0, rc);
			random_cuts(st.cols, kc, &seed, way == 1, cc);
			struct dcr_parts ps = {0};
			for (size_t i = 0; i < kr; i++)
				for (size_t j = 0; j < kc; j++) {
					uint8_t *b = block_of(&st, t, rc[i], rc[i + 1], cc[j], cc[j + 1]);
					struct dcr_err e = {0};
					cr_assert_eq(dcr_stripes_parts(&st, b, rc[i], rc[i + 1], cc[j],
								       cc[j + 1], &ps, &e), 0, "%s", e.msg);
					free(b);
				}
			static const char *how[] = {"row runs", "column runs of 128s",
						    "column runs", "blocks"};
			join_both_ways(&st, &ps, want, how[way], s);
			dcr_parts_free(&ps);
		}
		/* byte runs of the stream, any cuts */
		uint8_t *stream = stripe_stream(sh, t);
		uint64_t cuts[10];
		size_t k = 1 + lcg(&seed) % 9;
		random_cuts(st.nbytes, k, &seed, 0, cuts);
		struct dcr_parts ps = {.v = calloc(k, sizeof(*ps.v)), .cap = k};
		for (size_t i = 0; i < k; i++)
			cr_assert_eq(dcr_blake3_part_of(stream + cuts[i], cuts[i], cuts[i + 1],
							st.nbytes, &ps.v[ps.n++]), 0);
		join_both_ways(&st, &ps, want, "byte runs", s);
		dcr_parts_free(&ps);
		free(stream);
		free(t);
	}
}

/* A digest taken from the parts of consecutive ranges of the stored bytes
 * (an apply's items, in order, with the bytes between them), cut at random
 * elements, at rows and at single elements: the tensor's digest. A range
 * out of order spoils it. */
Test(state, ranges_taken_in_order_give_the_digest)
{
	unsigned seed = 4242;
	for (size_t s = 0; s < NSHAPES; s++) {
		const struct shape *sh = &shapes[s];
		struct dcr_stripes st;
		dcr_stripes_init(&st, sh->dtype, sh->ndim, sh->dims);
		if (!st.nbytes)
			continue;
		uint8_t *t = random_tensor(sh, 7 + (unsigned)s);
		dcr_digest whole;
		dcr_digest_tensor_mem(sh->dtype, sh->ndim, sh->dims, t, 1, &whole);
		uint64_t es = st.esize ? st.esize : 1, nel = st.nbytes / es;
		for (int way = 0; way < 4; way++) {
			struct dcr_tacc *acc = dcr_tacc_new(sh->dtype, sh->ndim, sh->dims);
			cr_assert_not_null(acc);
			uint64_t cuts[34];
			size_t k = way == 3 ? 1 : 1 + lcg(&seed) % 33;
			random_cuts(nel, k, &seed, 0, cuts);
			if (way == 1) /* at rows */
				for (size_t i = 1; i < k; i++)
					cuts[i] -= st.esize ? cuts[i] % st.cols : 0;
			for (size_t i = 0; i < k; i++) {
				uint64_t x0 = cuts[i] * es, x1 = cuts[i + 1] * es;
				struct dcr_parts ps = {0};
				struct dcr_err e = {0};
				cr_assert_eq(dcr_tacc_pos(acc), x0);
				cr_assert_eq(dcr_stripes_range_parts(&st, t + x0, x0, x1, &ps, &e), 0,
					     "%s", e.msg);
				cr_assert_eq(dcr_tacc_add(acc, &ps, x1), 0, "shape %zu, way %d, range %zu",
					     s, way, i);
				dcr_parts_free(&ps);
			}
			dcr_digest d;
			cr_assert_eq(dcr_tacc_final(acc, &d), 0, "shape %zu, way %d", s, way);
			cr_assert_eq(memcmp(d.b, whole.b, 32), 0, "shape %zu, way %d: another digest", s,
				     way);
			dcr_tacc_free(acc);
		}
		if (nel >= 4 && st.esize) {
			/* single elements: the second range given before the first */
			struct dcr_tacc *acc = dcr_tacc_new(sh->dtype, sh->ndim, sh->dims);
			struct dcr_parts ps = {0};
			struct dcr_err e = {0};
			cr_assert_eq(dcr_stripes_range_parts(&st, t + es, es, 2 * es, &ps, &e), 0);
			int q = dcr_tacc_add(acc, &ps, 2 * es);
			dcr_parts_free(&ps);
			dcr_digest d;
			cr_assert(q || dcr_tacc_final(acc, &d), "shape %zu: a range out of order was taken", s);
			dcr_tacc_free(acc);
		}
		free(t);
	}
}

/* Many small runs around chunk boundaries, in a shuffled order; a part's
 * bytes are only what it cannot send as nodes. */
Test(state, parts_of_tiny_runs_join)
{
	if (!have_b3sum())
		cr_skip_test("b3sum is not installed");
	unsigned seed = 11;
	static const uint64_t lens[] = {1, 1023, 1024, 1025, 2047, 2048, 5000, 70000, 300001};
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		uint64_t n = lens[l];
		uint8_t *p = malloc(n);
		for (uint64_t i = 0; i < n; i++)
			p[i] = (uint8_t)lcg(&seed);
		char want[65];
		b3sum(p, n, want);
		uint64_t cuts[40];
		size_t k = n < 39 ? (size_t)n : 39;
		random_cuts(n, k, &seed, 0, cuts);
		struct dcr_parts ps = {.v = calloc(k, sizeof(*ps.v)), .cap = k};
		for (size_t i = k; i-- > 0;)
			cr_assert_eq(dcr_blake3_part_of(p + cuts[i], cuts[i], cuts[i + 1], n,
							&ps.v[ps.n++]), 0);
		for (size_t i = 0; i < ps.n; i++) {
			const struct dcr_blake3_part *q = &ps.v[i];
			cr_expect_leq(q->head_len, 2047);
			cr_expect_leq(q->tail_len, 1023);
			cr_expect_leq(q->nnodes, 2 * 64);
		}
		struct dcr_err e;
		dcr_digest d;
		cr_assert_eq(dcr_blake3_join(ps.v, ps.n, n, &d, &e), 0, "%s", e.msg);
		expect_hex(&d, want, "tiny runs", l);
		dcr_parts_free(&ps);
		free(p);
	}
}

/* room for one more part (shallow copies: the test frees only the array) */
static struct dcr_blake3_part *parts_add_for_test(struct dcr_parts *ps)
{
	if (ps->n == ps->cap) {
		ps->cap = ps->cap ? 2 * ps->cap : 16;
		ps->v = realloc(ps->v, ps->cap * sizeof(*ps->v));
		cr_assert_not_null(ps->v);
	}
	return &ps->v[ps->n++];
}

Test(state, overlaps_gaps_and_strangers_refused)
{
	const struct shape sh = {DCR_DT_BF16, 2, {300, 1000}};
	struct dcr_stripes st;
	dcr_stripes_init(&st, sh.dtype, sh.ndim, sh.dims);
	uint8_t *t = random_tensor(&sh, 1);
	struct dcr_err e;
	dcr_digest d, whole;
	dcr_digest_tensor_mem(sh.dtype, sh.ndim, sh.dims, t, 1, &whole);
	/* rows [0, 100), [100, 200), [200, 300) */
	struct dcr_parts ps = {0};
	for (uint64_t r = 0; r < 300; r += 100)
		cr_assert_eq(dcr_stripes_parts(&st, t + r * st.pitch, r, r + 100, 0, 1000, &ps, &e), 0);
	cr_assert_eq(dcr_stripes_join(&st, &ps, &d, &e), 0, "%s", e.msg);
	cr_assert_eq(memcmp(d.b, whole.b, 32), 0);
	size_t per = ps.n / 3; /* parts per block of rows: one per stripe */
	/* a gap: the middle block missing */
	struct dcr_parts gap = ps;
	struct dcr_blake3_part *v = malloc(ps.n * sizeof(*v));
	memcpy(v, ps.v, per * sizeof(*v));
	memcpy(v + per, ps.v + 2 * per, per * sizeof(*v));
	gap.v = v;
	gap.n = 2 * per;
	cr_assert_eq(dcr_stripes_join(&st, &gap, &d, &e), DCR_EFORMAT);
	cr_assert(strstr(e.msg, "uncovered"), "%s", e.msg);
	/* an overlap: one block twice (and rows [50, 150) besides) */
	struct dcr_parts twice = {0};
	for (size_t i = 0; i < ps.n; i++)
		*parts_add_for_test(&twice) = ps.v[i];
	*parts_add_for_test(&twice) = ps.v[0];
	cr_assert_eq(dcr_stripes_join(&st, &twice, &d, &e), DCR_EFORMAT);
	cr_assert(strstr(e.msg, "overlap"), "%s", e.msg);
	struct dcr_parts more = {0};
	cr_assert_eq(dcr_stripes_parts(&st, t + 50 * st.pitch, 50, 150, 0, 1000, &more, &e), 0);
	struct dcr_parts mixed = {0};
	for (size_t i = 0; i < ps.n; i++)
		*parts_add_for_test(&mixed) = ps.v[i];
	*parts_add_for_test(&mixed) = more.v[0];
	cr_assert_eq(dcr_stripes_join(&st, &mixed, &d, &e), DCR_EFORMAT);
	cr_assert(strstr(e.msg, "overlap"), "%s", e.msg);
	/* a part of another tensor's stream length */
	struct dcr_stripes other = st;
	other.nbytes += 2;
	cr_assert_eq(dcr_stripes_join(&other, &ps, &d, &e), DCR_EFORMAT);
	/* a truncated encoding */
	struct dcr_buf b = {0};
	struct dcr_blake3_part back;
	cr_assert_eq(dcr_blake3_part_encode(&ps.v[0], &b), 0);
	cr_assert_eq(dcr_blake3_part_decode(b.p, b.len - 1, NULL, &back, &e), DCR_EFORMAT);
	cr_assert_eq(dcr_blake3_part_decode(b.p, b.len, NULL, &back, &e), 0, "%s", e.msg);
	dcr_blake3_part_free(&back);
	/* a part that claims more bytes than follow it, of a stream whose
	 * length is near 2^64: its chunk count once wrapped to 0, which made
	 * its last 4 GiB one "head" of bytes, allocated before the check */
	cr_assert_eq(dcr_blake3_nchunks(UINT64_MAX), (UINT64_MAX >> 10) + 1);
	cr_assert_eq(dcr_blake3_nchunks(UINT64_MAX - 1023), UINT64_MAX >> 10);
	uint8_t huge[24 + 16] = {0};
	put_le64(huge, UINT64_MAX - ((uint64_t)1 << 32));
	put_le64(huge + 8, UINT64_MAX);
	put_le64(huge + 16, UINT64_MAX);
	cr_assert_eq(dcr_blake3_part_decode(huge, sizeof(huge), NULL, &back, &e), DCR_EFORMAT);
	cr_assert(strstr(e.msg, "truncated"), "%s", e.msg);
	/* a run past its stream, and rows outside the tensor */
	cr_assert_neq(dcr_blake3_part_of(t, 10, 5, 100, &back), 0);
	cr_assert_neq(dcr_stripes_parts(&st, t, 0, 301, 0, 1000, &more, &e), 0);
	dcr_buf_free(&b);
	free(twice.v);
	free(mixed.v);
	free(v);
	dcr_parts_free(&more);
	dcr_parts_free(&ps);
	free(t);
}

Test(state, state_id_of_nothing)
{
	if (!have_b3sum())
		cr_skip_test("b3sum is not installed");
	dcr_digest d;
	char want[65];
	dcr_state_id(NULL, 0, &d);
	b3sum((const uint8_t *)"dcr-state-v2\n", 13, want);
	expect_hex(&d, want, "state id", 0);
}
