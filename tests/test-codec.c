/* test-codec.c - item payload codecs: exact round trips, hostile input. */
#include "config.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcr.h"
#include "core/bytes.h"

static const int codecs[] = {DCR_CODEC_XOR_ZSTD, DCR_CODEC_DELTA, DCR_CODEC_RAW};
#define NCODECS 3

static uint64_t rs;
static uint64_t rnd(void)
{
	uint64_t z = (rs += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t umask(unsigned unit)
{
	return unit == 8 ? ~0ULL : (1ULL << (8 * unit)) - 1;
}

/* Encode with codec, decode both steps, require the exact input back.
 * Returns the payload size. */
static size_t roundtrip(int codec, unsigned unit, int dtype, uint64_t range_len,
			size_t n, const uint64_t *pos, const uint64_t *oldv,
			const uint64_t *newv)
{
	struct dcr_buf b = {0};
	struct dcr_err e = {0};
	int rc = dcr_codec_encode(codec, unit, dtype, range_len, n, pos, oldv, newv, &b, &e);
	cr_assert_eq(rc, 0, "encode %s unit %u dtype %s: %s", dcr_codec_name(codec), unit,
		     dcr_dtype_name(dtype), e.msg);
	uint64_t *p2 = calloc(n + 1, 8), *v2 = calloc(n + 1, 8);
	rc = dcr_codec_decode_positions(codec, b.p, b.len, unit, range_len, n, p2, &e);
	cr_assert_eq(rc, 0, "decode positions %s: %s", dcr_codec_name(codec), e.msg);
	cr_assert(!n || !memcmp(p2, pos, n * 8), "positions differ (%s)", dcr_codec_name(codec));
	rc = dcr_codec_decode_values(codec, b.p, b.len, unit, dtype, range_len, n, p2, oldv, v2, &e);
	cr_assert_eq(rc, 0, "decode values %s: %s", dcr_codec_name(codec), e.msg);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(v2[i], newv[i],
			     "%s unit %u dtype %s change %zu: old %#llx new %#llx decoded %#llx",
			     dcr_codec_name(codec), unit, dcr_dtype_name(dtype), i,
			     oldv ? (unsigned long long)oldv[i] : 0ULL,
			     (unsigned long long)newv[i], (unsigned long long)v2[i]);
	size_t len = b.len;
	free(p2);
	free(v2);
	dcr_buf_free(&b);
	return len;
}

/* n sorted distinct positions in [0, range_len). */
static void random_positions(uint64_t range_len, size_t n, uint64_t *pos)
{
	if ((uint64_t)n == range_len) {
		for (size_t i = 0; i < n; i++)
			pos[i] = i;
		return;
	}
	/* selection sampling where dense */
	if (range_len <= 4 * (uint64_t)n + 64) {
		size_t k = 0;
		for (uint64_t i = 0; i < range_len && k < n; i++)
			if (rnd() % (range_len - i) < n - k)
				pos[k++] = i;
		return;
	}
	/* random gaps that fit: n + n * m <= range_len */
	uint64_t m = (range_len - n) / (n ? n : 1), next = 0;
	for (size_t i = 0; i < n; i++) {
		pos[i] = next + rnd() % (m + 1);
		next = pos[i] + 1;
	}
}

static const int all_dtypes[] = {
	DCR_DT_BOOL, DCR_DT_U8, DCR_DT_I8, DCR_DT_F8_E5M2, DCR_DT_F8_E4M3,
	DCR_DT_F8_E8M0, DCR_DT_F8_E4M3FNUZ, DCR_DT_F8_E5M2FNUZ, DCR_DT_I16,
	DCR_DT_U16, DCR_DT_F16, DCR_DT_BF16, DCR_DT_I32, DCR_DT_U32, DCR_DT_F32,
	DCR_DT_I64, DCR_DT_U64, DCR_DT_F64, DCR_DT_C64, DCR_DT_F4,
	DCR_DT_F6_E2M3, DCR_DT_F6_E3M2,
};
#define NDTYPES (sizeof(all_dtypes) / sizeof(all_dtypes[0]))

Test(codec, random_bit_patterns_round_trip_for_every_dtype)
{
	rs = 1;
	uint64_t *pos = malloc(3000 * 8), *o = malloc(3000 * 8), *nw = malloc(3000 * 8);
	for (size_t d = 0; d < NDTYPES; d++) {
		int dt = all_dtypes[d];
		unsigned unit = dcr_dtype_unit(dt);
		for (int trial = 0; trial < 12; trial++) {
			size_t n = trial == 0 ? 0 : trial == 1 ? 1 : 1 + rnd() % 2999;
			uint64_t range_len = n + rnd() % (trial & 1 ? 4 * n + 2 : 1000000);
			random_positions(range_len, n, pos);
			for (size_t i = 0; i < n; i++) {
				o[i] = rnd() & umask(unit);
				uint64_t r = rnd();
				/* mix: random bits, small steps, unchanged */
				nw[i] = (r % 4 == 0 ? rnd() : r % 4 == 1 ? o[i] + (r >> 40) % 5 - 2 :
					 r % 4 == 2 ? o[i] ^ (1ULL << (r >> 58) % (8 * unit)) : o[i]) &
					umask(unit);
			}
			for (int c = 0; c < NCODECS; c++) {
				roundtrip(codecs[c], unit, dt, range_len, n, pos, o, nw);
				roundtrip(codecs[c], unit, dt, range_len, n, pos, NULL, nw);
			}
		}
	}
	free(pos);
	free(o);
	free(nw);
}

/* Every ordered pair of edge values, for each float dtype. */
Test(codec, edge_values_round_trip_in_every_pair)
{
	static const struct {
		int dt;
		uint64_t v[24];
		int nv;
	} sets[] = {
		{DCR_DT_BF16, {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x807f, 0x8080,
			       0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xffff,
			       0x7fff, 0x3f80, 0xbf80, 0x3f7f, 0x3c00, 0xbc01}, 22},
		{DCR_DT_F16, {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff,
			      0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xffff, 0x7fff, 0x3c00}, 16},
		{DCR_DT_F32, {0, 0x80000000, 1, 0x80000001, 0x007fffff, 0x00800000,
			      0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000,
			      0xffc00000, 0x7f800001, 0xffffffff, 0x7fffffff, 0x3f800000,
			      0xbf800000, 0x3c23d70a}, 18},
		{DCR_DT_F64, {0, 0x8000000000000000ULL, 1, 0x8000000000000001ULL,
			      0x000fffffffffffffULL, 0x7fefffffffffffffULL, 0x7ff0000000000000ULL,
			      0xfff0000000000000ULL, 0x7ff8000000000000ULL, 0xfff8000000000001ULL,
			      0x7ff0000000000001ULL, ~0ULL, 0x7fffffffffffffffULL,
			      0x3ff0000000000000ULL, 0xbff0000000000000ULL}, 15},
		{DCR_DT_F8_E4M3, {0x00, 0x80, 0x01, 0x81, 0x7e, 0x7f, 0xfe, 0xff, 0x08, 0x38}, 10},
		{DCR_DT_F8_E5M2, {0x00, 0x80, 0x01, 0x81, 0x7b, 0x7c, 0x7d, 0xfc, 0xff, 0x3c}, 10},
		{DCR_DT_F8_E4M3FNUZ, {0x00, 0x80, 0x01, 0x81, 0x7f, 0xff}, 6},
		{DCR_DT_F8_E8M0, {0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff}, 6},
		{DCR_DT_I32, {0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 0x80000001}, 6},
		{DCR_DT_I64, {0, 1, 0x7fffffffffffffffULL, 0x8000000000000000ULL, ~0ULL}, 5},
		{DCR_DT_U8, {0, 1, 0x7f, 0x80, 0xff}, 5},
	};
	for (size_t si = 0; si < sizeof(sets) / sizeof(sets[0]); si++) {
		int nv = sets[si].nv, dt = sets[si].dt;
		unsigned unit = dcr_dtype_unit(dt);
		size_t n = (size_t)nv * nv;
		uint64_t *pos = malloc(n * 8), *o = malloc(n * 8), *nw = malloc(n * 8);
		for (size_t i = 0; i < n; i++) {
			pos[i] = 3 * i;
			o[i] = sets[si].v[i / nv];
			nw[i] = sets[si].v[i % nv];
		}
		for (int c = 0; c < NCODECS; c++)
			roundtrip(codecs[c], unit, dt, 3 * n, n, pos, o, nw);
		free(pos);
		free(o);
		free(nw);
	}
}

/* +-1 in the monotone order across every bf16 pattern, including +0/-0,
 * subnormals, infinities and NaNs. */
Test(codec, every_bf16_pattern_with_one_ulp_steps)
{
	size_t n = 3 * 65536;
	uint64_t *pos = malloc(n * 8), *o = malloc(n * 8), *nw = malloc(n * 8);
	for (size_t i = 0; i < n; i++) {
		pos[i] = i;
		o[i] = i / 3;
		nw[i] = (i % 3 == 0 ? o[i] + 1 : i % 3 == 1 ? o[i] - 1 : o[i] ^ 0x8000) & 0xffff;
	}
	for (int c = 0; c < NCODECS; c++)
		roundtrip(codecs[c], 2, DCR_DT_BF16, n, n, pos, o, nw);
	free(pos);
	free(o);
	free(nw);
}

/* The changes coded with codec on the portable loops (path 0) and on the
 * vector ones (path 3): the same bytes. old: the range's old bits, for
 * CLASSED. Leaves path 3 on. */
static void paths_agree(int codec, int dt, uint64_t range_len, size_t n, const uint64_t *pos,
			const uint64_t *o, const uint64_t *nw, const uint8_t *old, const char *what)
{
	struct dcr_buf ref = {0}, b = {0};
	struct dcr_err e = {0};
	cdc_cpu_limit(0);
	cr_assert_eq(dcr_codec_encode_range(codec, 2, dt, range_len, n, pos, o, nw, old, &ref, &e),
		     0, "%s: %s", what, e.msg);
	cdc_cpu_limit(3);
	cr_assert_eq(dcr_codec_encode_range(codec, 2, dt, range_len, n, pos, o, nw, old, &b, &e),
		     0, "%s: %s", what, e.msg);
	cr_assert(b.len == ref.len && !memcmp(b.p, ref.p, b.len),
		  "%s %s %s: the vector path writes other bytes (%zu against %zu)", what,
		  dcr_dtype_name(dt), dcr_codec_name(codec), b.len, ref.len);
	dcr_buf_free(&ref);
	dcr_buf_free(&b);
}

/* The vector path of the values (2-byte units, 8 changes at a time) must
 * write the portable loop's bytes: every 16-bit old pattern against a
 * random one, +-1, the sign flipped, itself and the farthest one, for each
 * 2-byte dtype, with a count that leaves a tail of 5 changes. */
Test(codec, delta_code_paths_write_the_same_bytes)
{
	static const int dts[] = {DCR_DT_BF16, DCR_DT_F16, DCR_DT_I16, DCR_DT_U16};
	size_t n = 6 * 65536 + 5;
	uint64_t *pos = malloc(n * 8), *o = malloc(n * 8), *nw = malloc(n * 8);
	rs = 29;
	for (size_t i = 0; i < n; i++) {
		pos[i] = 2 * i + rnd() % 2;
		o[i] = i < 6 * 65536 ? i / 6 : rnd() & 0xffff;
		uint64_t k = i % 6;
		nw[i] = (k == 0 ? rnd() : k == 1 ? o[i] + 1 : k == 2 ? o[i] - 1 :
			 k == 3 ? o[i] ^ 0x8000 : k == 4 ? o[i] : o[i] ^ 0x7fff) & 0xffff;
	}
	uint8_t *old = calloc(2 * n + 2, 2);
	for (size_t i = 0; i < n; i++)
		put_le16(old + 2 * pos[i], (uint16_t)o[i]);
	for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
		paths_agree(DCR_CODEC_DELTA, dts[d], 2 * n + 2, n, pos, o, nw, NULL, "patterns");
		paths_agree(DCR_CODEC_CLASSED, dts[d], 2 * n + 2, n, pos, o, nw, old, "patterns");
		roundtrip(DCR_CODEC_DELTA, 2, dts[d], 2 * n + 2, n, pos, o, nw);
	}
	free(old);
	/* a CLASSED gap of 2^24 and more, which the vector path leaves to the
	 * portable one, among small ones on both sides */
	uint64_t range_len = 3ULL << 24;
	old = malloc(range_len * 2);
	for (uint64_t i = 0; i < range_len; i++)
		put_le16(old + 2 * i, 0x3f80); /* one class: the gaps count every element */
	for (size_t i = 0; i < 40; i++) {
		/* the gap before change 12 is 2^25 - 2: 2^25 - 1 rounds up as a float */
		pos[i] = i < 12 ? i : (1ULL << 25) + 10 + (i - 12) * 5;
		o[i] = 0x3f80 + i;
		nw[i] = o[i] + 1;
		put_le16(old + 2 * pos[i], (uint16_t)o[i]);
	}
	paths_agree(DCR_CODEC_CLASSED, DCR_DT_BF16, range_len, 40, pos, o, nw, old, "gaps of 2^24");
	free(old);
	free(pos);
	free(o);
	free(nw);
}

Test(codec, extreme_gaps_and_huge_ranges)
{
	uint64_t o[4] = {1, 2, 3, 4}, nw[4] = {5, 6, 7, 8};
	uint64_t ranges[] = {1ULL << 40, (1ULL << 40) + 12345, UINT64_MAX, UINT64_MAX - 1};
	for (int r = 0; r < 4; r++) {
		uint64_t L = ranges[r];
		uint64_t cases[][3] = {{0, L / 2, L - 1}, {L - 3, L - 2, L - 1}, {0, 1, 2}};
		for (int k = 0; k < 3; k++)
			for (int c = 0; c < NCODECS; c++) {
				roundtrip(codecs[c], 2, DCR_DT_BF16, L, 3, cases[k], o, nw);
				roundtrip(codecs[c], 8, DCR_DT_U64, L, 1, &cases[k][2], o, nw);
			}
	}
	/* sparse positions in a 2^40 range */
	size_t n = 5000;
	uint64_t *pos = malloc(n * 8), *ov = malloc(n * 8), *nv = malloc(n * 8);
	rs = 7;
	random_positions(1ULL << 40, n, pos);
	for (size_t i = 0; i < n; i++) {
		ov[i] = rnd() & 0xffffffff;
		nv[i] = (ov[i] + 1) & 0xffffffff;
	}
	for (int c = 0; c < NCODECS; c++)
		roundtrip(codecs[c], 4, DCR_DT_F32, 1ULL << 40, n, pos, ov, nv);
	free(pos);
	free(ov);
	free(nv);
}

Test(codec, empty_and_dense_items)
{
	uint64_t pos[64], o[64], nw[64];
	for (int i = 0; i < 64; i++) {
		pos[i] = i;
		o[i] = 0x3c00 + i;
		nw[i] = 0x3c01 + i;
	}
	for (int c = 0; c < NCODECS; c++) {
		roundtrip(codecs[c], 2, DCR_DT_BF16, 0, 0, pos, o, nw);
		roundtrip(codecs[c], 2, DCR_DT_BF16, 100, 0, pos, o, nw);
		roundtrip(codecs[c], 2, DCR_DT_BF16, 64, 64, pos, o, nw);
		roundtrip(codecs[c], 2, DCR_DT_BF16, 1, 1, pos, o, nw);
	}
	/* a dense run costs nothing for positions */
	struct dcr_buf b = {0};
	cr_assert_eq(dcr_codec_encode(DCR_CODEC_DELTA, 2, DCR_DT_BF16, 64, 64, pos, o, nw, &b, NULL), 0);
	cr_assert_lt(b.len, 24, "dense +1 item is %zu bytes", b.len);
	dcr_buf_free(&b);
}

/* A generated bf16 step (fp32 master, lr-sized update, round to nearest
 * even): every change round-trips and DELTA beats xor-zstd. */
static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

Test(codec, generated_bf16_step_round_trips_and_delta_is_smaller)
{
	size_t N = 1 << 20, n = 0;
	uint64_t *pos = malloc(N * 8), *o = malloc(N * 8), *nw = malloc(N * 8);
	rs = 99;
	for (size_t i = 0; i < N; i++) {
		/* sum of uniforms: roughly normal */
		double g = 0, u = 0;
		for (int k = 0; k < 4; k++) {
			g += (double)(rnd() >> 11) / 9007199254740992.0 - 0.5;
			u += (double)(rnd() >> 11) / 9007199254740992.0 - 0.5;
		}
		float w = (float)(g * 0.035), w2 = (float)(w - 1.5e-6 * u * 1.7);
		uint16_t a = to_bf16(w), b = to_bf16(w2);
		if (a != b) {
			pos[n] = i;
			o[n] = a;
			nw[n] = b;
			n++;
		}
	}
	cr_assert(n > N / 200 && n < N / 10, "%zu changes", n);
	size_t xz = roundtrip(DCR_CODEC_XOR_ZSTD, 2, DCR_DT_BF16, N, n, pos, o, nw);
	size_t dl = roundtrip(DCR_CODEC_DELTA, 2, DCR_DT_BF16, N, n, pos, o, nw);
	cr_assert_lt(dl, xz * 9 / 10, "delta %zu bytes, xor-zstd %zu", dl, xz);
	free(pos);
	free(o);
	free(nw);
}

/* A valid payload for the hostile-input tests. */
static void sample(int codec, struct dcr_buf *b, size_t *n, uint64_t *range_len,
		   uint64_t *o)
{
	uint64_t pos[300], nw[300];
	*n = 300;
	*range_len = 20000;
	rs = 5;
	random_positions(*range_len, *n, pos);
	for (size_t i = 0; i < *n; i++) {
		o[i] = 0x3c00 + (rnd() & 0x3ff);
		/* mostly +-1 ULP; every fourth random, so raw bits end the item */
		nw[i] = (i % 4 ? o[i] + (rnd() % 3) - 1 : rnd()) & 0xffff;
	}
	cr_assert_eq(dcr_codec_encode(codec, 2, DCR_DT_BF16, *range_len, *n, pos, o, nw, b, NULL), 0);
}

/* rc must be 0 or DCR_EFORMAT; successful positions must obey the contract. */
static int try_decode(int codec, const uint8_t *p, size_t len, uint64_t range_len,
		      size_t n, const uint64_t *o)
{
	uint64_t *pos = calloc(n + 1, 8), *v = calloc(n + 1, 8);
	struct dcr_err e = {0};
	int rp = dcr_codec_decode_positions(codec, p, len, 2, range_len, n, pos, &e);
	cr_assert(rp == 0 || rp == DCR_EFORMAT, "positions rc %d", rp);
	if (rp < 0)
		cr_assert(e.msg[0], "error without a message");
	if (rp == 0)
		for (size_t i = 0; i < n; i++)
			cr_assert(pos[i] < range_len && (!i || pos[i] > pos[i - 1]),
				  "accepted positions break the contract");
	int rv = dcr_codec_decode_values(codec, p, len, 2, DCR_DT_BF16, range_len, n, pos, o, v, &e);
	cr_assert(rv == 0 || rv == DCR_EFORMAT, "values rc %d", rv);
	for (size_t i = 0; i < n && rv == 0; i++)
		cr_assert(v[i] <= 0xffff, "decoded value wider than the unit");
	free(pos);
	free(v);
	return rp < 0 || rv < 0 ? -1 : 0;
}

Test(codec, every_truncation_is_refused)
{
	for (int c = 0; c < NCODECS; c++) {
		struct dcr_buf b = {0};
		size_t n;
		uint64_t L, o[300];
		sample(codecs[c], &b, &n, &L, o);
		for (size_t len = 0; len < b.len; len++)
			cr_assert_lt(try_decode(codecs[c], b.p, len, L, n, o), 0,
				     "%s: truncation to %zu of %zu bytes accepted",
				     dcr_codec_name(codecs[c]), len, b.len);
		cr_assert_eq(try_decode(codecs[c], b.p, b.len, L, n, o), 0);
		dcr_buf_free(&b);
	}
}

Test(codec, wrong_n_or_range_is_refused)
{
	for (int c = 0; c < NCODECS; c++) {
		struct dcr_buf b = {0};
		size_t n;
		uint64_t L, o[301] = {0};
		sample(codecs[c], &b, &n, &L, o);
		uint64_t pos[301];
		struct dcr_err e = {0};
		cr_assert_lt(try_decode(codecs[c], b.p, b.len, L, n - 1, o), 0);
		cr_assert_lt(try_decode(codecs[c], b.p, b.len, L, n + 1, o), 0);
		cr_assert_eq(dcr_codec_decode_positions(codecs[c], b.p, b.len, 2, 299, n, pos, &e),
			     DCR_EFORMAT, "range shorter than n accepted");
		/* a range that ends before the last position */
		uint64_t last;
		cr_assert_eq(dcr_codec_decode_positions(codecs[c], b.p, b.len, 2, L, n, pos, &e), 0);
		last = pos[n - 1];
		cr_assert_eq(dcr_codec_decode_positions(codecs[c], b.p, b.len, 2, last, n, pos, &e),
			     DCR_EFORMAT);
		cr_assert(strstr(e.msg, "range"), "message: %s", e.msg);
		cr_assert_eq(dcr_codec_decode_positions(codecs[c], b.p, b.len, 3, L, n, pos, &e),
			     DCR_EFORMAT);
		cr_assert_eq(dcr_codec_decode_positions(77, b.p, b.len, 2, L, n, pos, &e), DCR_EFORMAT);
		dcr_buf_free(&b);
	}
}

Test(codec, corrupted_and_random_payloads_never_crash)
{
	for (int c = 0; c < NCODECS; c++) {
		struct dcr_buf b = {0};
		size_t n;
		uint64_t L, o[300];
		sample(codecs[c], &b, &n, &L, o);
		uint8_t *p = malloc(b.len);
		rs = 11;
		for (int t = 0; t < 3000; t++) {
			memcpy(p, b.p, b.len);
			int flips = 1 + (int)(rnd() % 4);
			for (int k = 0; k < flips; k++)
				p[rnd() % b.len] ^= (uint8_t)(1u << (rnd() % 8));
			try_decode(codecs[c], p, b.len, L, n, o);
		}
		for (int t = 0; t < 3000; t++) {
			size_t len = rnd() % 600;
			uint8_t *q = malloc(len + 1);
			for (size_t i = 0; i < len; i++)
				q[i] = (uint8_t)rnd();
			if (len && t % 3 == 0)
				q[0] = 0xac, q[1 % len] = 0x02; /* n = 300 to get past the header */
			try_decode(codecs[c], q, len, L, n, o);
			free(q);
		}
		free(p);
		dcr_buf_free(&b);
	}
}

/* RAW's bytes as dcr-format-codec(5) gives them: varint(glen), the gap
 * varints, then each value's unit bytes, little-endian. */
Test(codec, raw_payload_is_the_documented_bytes)
{
	uint64_t pos[3] = {0, 5, 300}, o[3] = {0x00ff, 0x1111, 0x8000}, nw[3] = {0x1234, 0xabcd, 0x0001};
	static const uint8_t overwrite[] = {0x04, 0x00, 0x04, 0xa6, 0x02,
					    0x34, 0x12, 0xcd, 0xab, 0x01, 0x00};
	static const uint8_t xored[] = {0x04, 0x00, 0x04, 0xa6, 0x02,
					0xcb, 0x12, 0xdc, 0xba, 0x01, 0x80};
	struct dcr_buf b = {0};
	struct dcr_err e = {0};
	cr_assert_eq(dcr_codec_encode(DCR_CODEC_RAW, 2, DCR_DT_BF16, 301, 3, pos, NULL, nw, &b, &e), 0);
	cr_assert_eq(b.len, sizeof(overwrite));
	cr_assert(!memcmp(b.p, overwrite, b.len), "overwrite bytes differ");
	b.len = 0;
	cr_assert_eq(dcr_codec_encode(DCR_CODEC_RAW, 2, DCR_DT_BF16, 301, 3, pos, o, nw, &b, &e), 0);
	cr_assert_eq(b.len, sizeof(xored));
	cr_assert(!memcmp(b.p, xored, b.len), "xor bytes differ");
	uint64_t p2[3], v2[3];
	cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_RAW, xored, sizeof(xored), 2, 301, 3, p2, &e), 0);
	cr_assert(!memcmp(p2, pos, sizeof(pos)));
	cr_assert_eq(dcr_codec_decode_values(DCR_CODEC_RAW, xored, sizeof(xored), 2, DCR_DT_BF16, 301, 3,
					     p2, o, v2, &e), 0);
	cr_assert(!memcmp(v2, nw, sizeof(nw)));
	/* the last position must stay inside the range */
	cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_RAW, xored, sizeof(xored), 2, 300, 3, p2, &e),
		     DCR_EFORMAT);
	/* a gap varint running into the values, an over-long one */
	static const uint8_t runon[] = {0x01, 0x80, 0x34, 0x12};
	cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_RAW, runon, sizeof(runon), 2, 301, 1, p2, &e),
		     DCR_EFORMAT);
	static const uint8_t wide[] = {0x0b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
				       0xff, 0x01, 0x34, 0x12};
	cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_RAW, wide, sizeof(wide), 2, UINT64_MAX, 1,
						p2, &e), DCR_EFORMAT);
	cr_assert_str_eq(dcr_codec_name(DCR_CODEC_RAW), "raw");
	dcr_buf_free(&b);
}

/* n gaps in n bytes (every gap one byte: a dense item's positions, the
 * journal's) decode on their own path; it must agree with the general one
 * and refuse the same payloads. */
Test(codec, one_byte_gaps_decode_and_refuse_as_the_general_path)
{
	enum { N = 1000 };
	static uint64_t pos[N], o[N], nw[N], p2[N], v2[N];
	struct dcr_buf b = {0};
	struct dcr_err e = {0};
	rs = 7;
	uint64_t at = 0;
	for (size_t i = 0; i < N; i++) {
		at += i % 3 ? 0 : rnd() % 128; /* gaps 0..127: one byte each */
		pos[i] = at++;
		o[i] = rnd() & 0xffff;
		nw[i] = rnd() & 0xffff;
	}
	uint64_t range = pos[N - 1] + 1;
	cr_assert_eq(dcr_codec_encode(DCR_CODEC_RAW, 2, DCR_DT_BF16, range, N, pos, o, nw, &b, &e), 0);
	cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_RAW, b.p, b.len, 2, range, N, p2, &e), 0,
		     "%s", e.msg);
	cr_assert(!memcmp(p2, pos, sizeof(pos)));
	cr_assert_eq(dcr_codec_decode_values(DCR_CODEC_RAW, b.p, b.len, 2, DCR_DT_BF16, range, N, p2,
					     o, v2, &e), 0);
	cr_assert(!memcmp(v2, nw, sizeof(nw)));
	/* the last position one beyond the range */
	cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_RAW, b.p, b.len, 2, range - 1, N, p2, &e),
		     DCR_EFORMAT);
	cr_assert(strstr(e.msg, "beyond the range"), "%s", e.msg);
	/* every element changed: gaps all zero */
	for (size_t i = 0; i < N; i++)
		pos[i] = i;
	b.len = 0;
	cr_assert_eq(dcr_codec_encode(DCR_CODEC_RAW, 2, DCR_DT_BF16, N, N, pos, NULL, nw, &b, &e), 0);
	cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_RAW, b.p, b.len, 2, N, N, p2, &e), 0);
	cr_assert(!memcmp(p2, pos, sizeof(pos)));
	cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_RAW, b.p, b.len, 2, N - 1, N, p2, &e),
		     DCR_EFORMAT);
	/* n bytes holding a two-byte varint: fewer than n gaps, refused */
	static const uint8_t two[] = {0x02, 0x81, 0x01, 0x34, 0x12, 0x78, 0x56};
	cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_RAW, two, sizeof(two), 2, 1000, 2, p2, &e),
		     DCR_EFORMAT);
	dcr_buf_free(&b);
}

/* The gap varints the way dcr-format-codec(5) spells them: 7 bits a
 * byte, low first, the top bit set on every byte but the last; at most
 * 10 bytes, over-long ones allowed. Written and read byte by byte here,
 * against the codec's word-at-a-time writer and reader. */
static size_t ref_put_varint(uint64_t v, uint8_t *q)
{
	size_t m = 0;
	for (; v >= 0x80; v >>= 7)
		q[m++] = (uint8_t)(v | 0x80);
	q[m++] = (uint8_t)v;
	return m;
}

/* n gaps from q[0..len) into pos: 0, or -1 where the codec must refuse */
static int ref_get_gaps(const uint8_t *q, size_t len, uint64_t range_len, size_t n,
			uint64_t *pos)
{
	size_t at = 0;
	uint64_t next = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t g = 0;
		int shift = 0, done = 0;
		while (!done) {
			if (at >= len || shift > 63)
				return -1;
			uint8_t c = q[at++];
			if (shift == 63 && (c & 0x7e))
				return -1;
			g |= (uint64_t)(c & 0x7f) << shift;
			shift += 7;
			done = !(c & 0x80);
		}
		if (g >= range_len - next)
			return -1;
		pos[i] = next + g;
		next = pos[i] + 1;
	}
	return at == len ? 0 : -1;
}

Test(codec, gap_varints_of_every_length_are_the_documented_bytes)
{
	/* for every length, 1 to 10 bytes, an item whose gaps are the
	 * length's smallest and largest gap between short ones, in RAW
	 * (gaps as they are) and xor-zstd (gaps compressed) */
	for (int len = 1; len <= 10; len++) {
		uint64_t lo = len == 1 ? 0 : 1ULL << (7 * (len - 1));
		uint64_t hi = len == 10 ? (1ULL << 62) : (1ULL << (7 * len)) - 1;
		uint64_t gaps[] = {5, lo, 3, hi, 0, 200, 7}, pos[7], o[7], nw[7], p2[7];
		const size_t n = 7;
		uint64_t at = 0;
		for (size_t i = 0; i < n; i++) {
			pos[i] = at + gaps[i];
			at = pos[i] + 1;
			o[i] = i;
			nw[i] = i ^ 0x5a5a;
		}
		uint64_t range = at;
		uint8_t ref[7 * 10];
		size_t rl = 0;
		for (size_t i = 0; i < n; i++)
			rl += ref_put_varint(gaps[i], ref + rl);
		struct dcr_buf b = {0};
		struct dcr_err e = {0};
		cr_assert_eq(dcr_codec_encode(DCR_CODEC_RAW, 2, DCR_DT_BF16, range, n, pos, o, nw, &b,
					      &e), 0, "%s", e.msg);
		struct dcr_rd r;
		dcr_rd_init(&r, b.p, b.len);
		cr_assert_eq(dcr_rd_varint(&r), rl, "length %d", len);
		cr_assert(!memcmp(r.p, ref, rl), "length %d: not the documented varints", len);
		cr_assert_eq(b.len - (size_t)(r.p - b.p), rl + 2 * n);
		for (int c = 0; c < NCODECS; c++)
			if (codecs[c] != DCR_CODEC_DELTA)
				roundtrip(codecs[c], 2, DCR_DT_BF16, range, n, pos, o, nw);
		/* one less range: the last position is beyond it */
		cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_RAW, b.p, b.len, 2, range - 1, n, p2,
							&e), DCR_EFORMAT);
		dcr_buf_free(&b);
	}
}

/* RAW puts its gaps before it knows their length, where the count's
 * varint size would leave them: counts and gaps around the sizes where
 * the length's varint is longer than the count's (100 two-byte gaps, 200
 * bytes) must give the documented bytes, and a refused input must leave
 * the buffer as it was. */
Test(codec, raw_length_of_any_varint_size_is_the_documented_bytes)
{
	static const size_t counts[] = {0, 1, 63, 64, 100, 127, 128, 129, 8191, 8192, 20000};
	rs = 5;
	for (size_t t = 0; t < sizeof(counts) / sizeof(counts[0]); t++)
		for (int wide = 0; wide < 3; wide++) {
			size_t n = counts[t];
			uint64_t *pos = malloc((n + 1) * 8), *nw = malloc((n + 1) * 8);
			uint8_t *ref = malloc(10 + n * 12), *gaps = malloc(n * 10 + 1);
			uint64_t at = 0;
			size_t gl = 0;
			for (size_t i = 0; i < n; i++) {
				/* wide 0: one-byte gaps; 1: two-byte; 2: any length */
				uint64_t g = wide == 0 ? rnd() % 128 : wide == 1 ? 128 + rnd() % 16000
					: rnd() >> (rnd() % 64);
				if (g > (1ULL << 40))
					g >>= 24;
				pos[i] = at + g;
				at = pos[i] + 1;
				nw[i] = rnd() & 0xffff;
				gl += ref_put_varint(g, gaps + gl);
			}
			size_t rl = ref_put_varint(gl, ref);
			memcpy(ref + rl, gaps, gl);
			rl += gl;
			for (size_t i = 0; i < n; i++) {
				ref[rl++] = (uint8_t)nw[i];
				ref[rl++] = (uint8_t)(nw[i] >> 8);
			}
			struct dcr_buf b = {0};
			struct dcr_err e = {0};
			cr_assert_eq(dcr_buf_add(&b, "head", 4), 0);
			cr_assert_eq(dcr_codec_encode(DCR_CODEC_RAW, 2, DCR_DT_BF16, at + 1, n, pos, NULL, nw,
						      &b, &e), 0, "%s", e.msg);
			cr_assert_eq(b.len, 4 + rl, "n %zu, gaps of kind %d: %zu bytes, not %zu", n, wide,
				     b.len - 4, rl);
			cr_assert(!memcmp(b.p, "head", 4) && !memcmp(b.p + 4, ref, rl),
				  "n %zu, gaps of kind %d: not the documented bytes", n, wide);
			if (n > 1) {
				/* out of order, out of the range, too wide: refused,
				 * nothing added */
				uint64_t keep = pos[n / 2];
				pos[n / 2] = pos[n / 2 - 1];
				cr_assert_eq(dcr_codec_encode(DCR_CODEC_RAW, 2, DCR_DT_BF16, at + 1, n, pos,
							      NULL, nw, &b, &e), -EINVAL);
				pos[n / 2] = keep;
				cr_assert_eq(dcr_codec_encode(DCR_CODEC_RAW, 2, DCR_DT_BF16, at - 1, n, pos,
							      NULL, nw, &b, &e), -EINVAL);
				nw[n - 1] |= 0x10000;
				cr_assert_eq(dcr_codec_encode(DCR_CODEC_RAW, 2, DCR_DT_BF16, at + 1, n, pos,
							      NULL, nw, &b, &e), -EINVAL);
				cr_assert_eq(b.len, 4 + rl, "a refused input changed the buffer");
			}
			free(pos);
			free(nw);
			free(ref);
			free(gaps);
			dcr_buf_free(&b);
		}
}

Test(codec, gap_varints_read_as_the_byte_reader_reads_them)
{
	/* random gap bytes, each a continuation with probability 1/2 to
	 * 15/16: the codec's answer and positions are the byte reader's,
	 * including over-long varints, varints past 10 bytes or 64 bits,
	 * truncated ones and trailing bytes */
	enum { MAXN = 40, MAXL = 120 };
	uint8_t pl[MAXL + 16 + 2 * MAXN];
	uint64_t p1[MAXN], p2[MAXN];
	rs = 11;
	for (int k = 0; k < 200000; k++) {
		size_t n = 1 + rnd() % MAXN, len = rnd() % (MAXL + 1);
		unsigned cont = 1 + (unsigned)(rnd() % 15);
		uint8_t g[MAXL];
		for (size_t i = 0; i < len; i++)
			g[i] = (uint8_t)((rnd() % 16 < cont ? 0x80 : 0) | (rnd() % 4 ? rnd() & 0x7f : 0));
		uint64_t range = k % 3 == 0 ? UINT64_MAX : 1 + rnd() % (k % 3 == 1 ? 5000 : 1ULL << 50);
		struct dcr_buf b = {0};
		cr_assert_eq(dcr_buf_add_varint(&b, len), 0);
		size_t hl = b.len;
		memcpy(pl, b.p, hl);
		memcpy(pl + hl, g, len);
		memset(pl + hl + len, 0x11, 2 * n);
		dcr_buf_free(&b);
		/* exactly the payload's bytes: ASan sees a read past them */
		size_t plen = hl + len + 2 * n;
		uint8_t *q = malloc(plen);
		memcpy(q, pl, plen);
		struct dcr_err e = {0};
		int want = ref_get_gaps(g, len, range, n, p1);
		int got = dcr_codec_decode_positions(DCR_CODEC_RAW, q, plen, 2, range, n, p2, &e);
		cr_assert_eq(got, want ? DCR_EFORMAT : 0, "case %d: codec %d, byte reader %d (%s)", k,
			     got, want, e.msg);
		cr_assert(want || !memcmp(p1, p2, n * 8), "case %d: other positions", k);
		free(q);
	}
}

Test(codec, encoder_refuses_bad_input)
{
	uint64_t pos[3] = {1, 1, 2}, o[3] = {0}, nw[3] = {1, 2, 3};
	struct dcr_buf b = {0};
	struct dcr_err e = {0};
	for (int c = 0; c < NCODECS; c++) {
		cr_assert_eq(dcr_codec_encode(codecs[c], 2, DCR_DT_BF16, 10, 3, pos, o, nw, &b, &e), -EINVAL);
		uint64_t p2[3] = {1, 2, 10};
		cr_assert_eq(dcr_codec_encode(codecs[c], 2, DCR_DT_BF16, 10, 3, p2, o, nw, &b, &e), -EINVAL);
		uint64_t p3[3] = {1, 2, 3}, wide[3] = {1, 0x10000, 3};
		cr_assert_eq(dcr_codec_encode(codecs[c], 2, DCR_DT_BF16, 10, 3, p3, o, wide, &b, &e), -EINVAL);
		cr_assert_eq(dcr_codec_encode(codecs[c], 3, DCR_DT_BF16, 10, 3, p3, o, nw, &b, &e), -EINVAL);
	}
	cr_assert_eq(dcr_codec_encode(9, 2, DCR_DT_BF16, 10, 0, pos, o, nw, &b, &e), -EINVAL);
	dcr_buf_free(&b);
}

Test(codec, choose_keeps_the_smaller_encoding_and_it_decodes)
{
	/* periodic positions and one repeated value: zstd's kind of data */
	size_t n = 200;
	uint64_t pos[200], o[200], nw[200];
	for (size_t i = 0; i < n; i++) {
		pos[i] = 4097 * i + 5;
		o[i] = 0x1234;
		nw[i] = 0x9abc;
	}
	for (int effort = 0; effort < 2; effort++) {
		struct dcr_buf b = {0}, x = {0}, d = {0};
		dcr_buf_add_u8(&b, 0xee); /* appends after what is there */
		int codec = dcr_codec_choose(effort, 2, DCR_DT_BF16, 4097 * n, n, pos, o, nw, &b, NULL);
		cr_assert(codec == DCR_CODEC_DELTA || codec == DCR_CODEC_XOR_ZSTD, "codec %d", codec);
		cr_assert_eq(dcr_codec_encode(DCR_CODEC_XOR_ZSTD, 2, DCR_DT_BF16, 4097 * n, n, pos, o, nw, &x, NULL), 0);
		cr_assert_eq(dcr_codec_encode(DCR_CODEC_DELTA, 2, DCR_DT_BF16, 4097 * n, n, pos, o, nw, &d, NULL), 0);
		size_t best = x.len < d.len ? x.len : d.len;
		cr_assert_eq(b.len - 1, best, "chose %zu bytes, best %zu", b.len - 1, best);
		cr_assert_eq(b.p[0], 0xee);
		uint64_t p2[200], v2[200];
		cr_assert_eq(dcr_codec_decode_positions(codec, b.p + 1, b.len - 1, 2, 4097 * n, n, p2, NULL), 0);
		cr_assert_eq(dcr_codec_decode_values(codec, b.p + 1, b.len - 1, 2, DCR_DT_BF16, 4097 * n, n, p2, o, v2, NULL), 0);
		cr_assert(!memcmp(p2, pos, sizeof(pos)) && !memcmp(v2, nw, sizeof(nw)));
		dcr_buf_free(&b);
		dcr_buf_free(&x);
		dcr_buf_free(&d);
	}
}

/* ---- payloads written before this version still decode ---- */

/* Both written by the codecs of dcr 0.1.0 (before CLASSED) for gold_input. */
static const uint8_t gold_xz[] = {
	0x13, 0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x28, 0x55, 0x00, 0x00, 0x20, 0x00,
	0x07, 0x07, 0x04, 0x01, 0x00, 0x25, 0x1d, 0x11, 0x18, 0x28, 0xb5, 0x2f,
	0xfd, 0x20, 0x50, 0x7d, 0x00, 0x00, 0x38, 0x01, 0x01, 0x80, 0x00, 0x00,
	0x00, 0x00, 0x02, 0x00, 0x50, 0x48, 0xfd, 0x01, 0x58,
};
static const uint8_t gold_delta[] = {
	0x28, 0x1a, 0x03, 0x00, 0x65, 0x03, 0xb2, 0x0a, 0x02, 0xe6, 0x14, 0x0c,
	0x45, 0xd0, 0x44, 0x00, 0x73, 0x6b, 0x05, 0x00, 0xd0, 0xd8, 0xde, 0xf0,
	0x00, 0x00, 0x00, 0x00, 0x03, 0x07, 0x08, 0x00, 0x01, 0x04, 0x01, 0xe6,
	0x0c, 0x00, 0xe5, 0x0c, 0x1a, 0xcc, 0x01, 0x00, 0xe5, 0x04, 0x10, 0xc3,
	0x8e, 0x01, 0x00, 0x05, 0xca, 0x01, 0x00, 0x22, 0x71, 0x80, 0xbf, 0xea,
	0xb2, 0x74, 0x3f, 0x02, 0xb8, 0x5c, 0x6e, 0xae, 0x5b, 0xf1, 0xca, 0xbd,
	0xce, 0x2f, 0xf5, 0x8b, 0xf7,
};

static void gold_input(uint64_t *pos, uint64_t *o, uint64_t *nw)
{
	for (int i = 0; i < 40; i++) {
		pos[i] = 7 * i + (i % 3);
		o[i] = 0x3c00 + 37 * i;
		nw[i] = (i % 5 == 0) ? (o[i] ^ 0x8001) : o[i] + 1 - 2 * (i & 1);
	}
}

Test(codec, payloads_of_earlier_versions_still_decode)
{
	uint64_t pos[40], o[40], nw[40], p2[40], v2[40];
	gold_input(pos, o, nw);
	uint8_t old[600] = {0};
	for (int i = 0; i < 40; i++)
		put_le16(old + 2 * pos[i], (uint16_t)o[i]);
	const struct { int codec; const uint8_t *p; size_t len; } g[] = {
		{DCR_CODEC_XOR_ZSTD, gold_xz, sizeof(gold_xz)},
		{DCR_CODEC_DELTA, gold_delta, sizeof(gold_delta)},
	};
	for (int k = 0; k < 2; k++) {
		struct dcr_err e = {0};
		cr_assert_eq(dcr_codec_decode_positions(g[k].codec, g[k].p, g[k].len, 2, 300, 40, p2, &e),
			     0, "%s", e.msg);
		cr_assert(!memcmp(p2, pos, sizeof(pos)));
		cr_assert_eq(dcr_codec_decode_values(g[k].codec, g[k].p, g[k].len, 2, DCR_DT_BF16, 300,
						     40, p2, o, v2, &e), 0, "%s", e.msg);
		cr_assert(!memcmp(v2, nw, sizeof(nw)));
		memset(p2, 0, sizeof(p2));
		memset(v2, 0, sizeof(v2));
		cr_assert_eq(dcr_codec_decode_range(g[k].codec, g[k].p, g[k].len, 2, 300, 40, old, p2,
						    v2, &e), 0, "%s", e.msg);
		cr_assert(!memcmp(p2, pos, sizeof(pos)) && !memcmp(v2, nw, sizeof(nw)));
		/* and today's encoders still write exactly these bytes */
		struct dcr_buf b = {0};
		cr_assert_eq(dcr_codec_encode(g[k].codec, 2, DCR_DT_BF16, 300, 40, pos, o, nw, &b, &e), 0);
		cr_assert(b.len == g[k].len && !memcmp(b.p, g[k].p, b.len), "%s encoder changed",
			  dcr_codec_name(g[k].codec));
		dcr_buf_free(&b);
	}
}

/* Written by the first CLASSED encoder (dcr commit 535912b) for
 * gold_classed_input: every later reader must decode it. */
static const uint8_t gold_classed[] = {
	0x86, 0x02, 0xb1, 0x01, 0x07, 0x08, 0x02, 0x77, 0x7d, 0x89, 0x01, 0x00,
	0x18, 0xdc, 0xdd, 0xdd, 0xdc, 0xee, 0xfd, 0xee, 0xde, 0xcd, 0xcb, 0x00,
	0xbb, 0x00, 0x0d, 0xef, 0xee, 0xdd, 0xcc, 0xba, 0x0a, 0x0a, 0x7a, 0xaf,
	0xd6, 0x05, 0x00, 0x9d, 0xea, 0xc0, 0x00, 0x16, 0x29, 0x37, 0x88, 0x3c,
	0x23, 0xa6, 0x49, 0xbf, 0x64, 0x3c, 0x74, 0x71, 0x6e, 0x19, 0x88, 0x3d,
	0xfd, 0xab, 0x2f, 0x60, 0xa5, 0x6d, 0x63, 0xf3, 0x07, 0xad, 0x13, 0xd8,
	0xfd, 0x38, 0xa4, 0x7f, 0x0e, 0x8d, 0xd7, 0x1b, 0xe6, 0xb4, 0x29, 0xa1,
	0x97, 0x49, 0xda, 0x2c, 0xa6, 0x00, 0xc2, 0x69, 0x24, 0xf5, 0xf3, 0x51,
	0xab, 0x1e, 0xea, 0x91, 0xd2, 0x9f, 0xfa, 0x4f, 0x26, 0xee, 0x81, 0xee,
	0x04, 0xe8, 0x28, 0x0d, 0xc4, 0x9b, 0x39, 0x52, 0xeb, 0xe1, 0x71, 0x39,
	0x09, 0x9d, 0x70, 0xdb, 0xde, 0x82, 0xf3, 0x7c, 0xb5, 0x65, 0x64, 0x19,
	0x64, 0x2f, 0xb6, 0x06, 0xc6, 0xd4, 0xc3, 0xe2, 0x2d, 0x74, 0x5a, 0xd1,
	0x5b, 0x63, 0xc0, 0xe3, 0x7d, 0x6c, 0xe5, 0x9a, 0x5e, 0x1f, 0xa9, 0x08,
	0xfd, 0x4c, 0xb0, 0xb4, 0x5d, 0x5d, 0xf3, 0x9f, 0x5b, 0x0f, 0xc2, 0x1f,
	0x15, 0x56, 0x45, 0xa5, 0x5d, 0xcc, 0xc2, 0x0c, 0x08, 0xdd, 0x66, 0xc8,
	0x25, 0x03, 0x07, 0x08, 0x00, 0x01, 0x02, 0x01, 0x92, 0x0f, 0x00, 0xec,
	0x10, 0x28, 0x02, 0xf2, 0x02, 0x00, 0x43, 0x49, 0x03, 0x00, 0xd1, 0xfe,
	0xd2, 0xca, 0xab, 0xec, 0xe4, 0x55, 0x28, 0x46, 0xb3, 0x96, 0x2d, 0x2d,
	0x59, 0xb4, 0x8a, 0x48, 0xb9, 0x12, 0x07, 0xfa, 0xaf, 0x72, 0x1a, 0x5e,
	0xd9, 0xb1, 0xde, 0x1d, 0x7d, 0x5e,
};

/* 3000 bf16 values, exponents 118..123, the smaller ones changing more,
 * each change one ULP up or down. Returns n. */
static size_t gold_classed_input(uint8_t *old, uint64_t *pos, uint64_t *nw)
{
	uint64_t s = 12345;
#define R() (s = s * 6364136223846793005ULL + 1442695040888963407ULL, s >> 33)
	size_t n = 0;
	for (unsigned i = 0; i < 3000; i++) {
		unsigned e = 118 + (unsigned)(R() % 6), m = (unsigned)(R() % 128);
		uint16_t x = (uint16_t)((R() & 1) << 15 | e << 7 | m);
		put_le16(old + 2 * i, x);
		if (R() % 1024 < (32u << (123 - e)) / 4) {
			pos[n] = i;
			nw[n++] = (uint16_t)(x + (R() & 1 ? 1 : -1));
		}
	}
#undef R
	return n;
}

Test(codec, classed_payloads_of_earlier_versions_still_decode)
{
	uint8_t old[6000];
	uint64_t pos[3000], nw[3000], p2[3000], v2[3000];
	size_t n = gold_classed_input(old, pos, nw);
	cr_assert_eq(n, 262);
	for (int lv = 0; lv <= 3; lv++) {
		struct dcr_err e = {0};
		cdc_cpu_limit(lv);
		memset(p2, 0, sizeof(p2));
		memset(v2, 0, sizeof(v2));
		cr_assert_eq(dcr_codec_decode_range(DCR_CODEC_CLASSED, gold_classed,
						    sizeof(gold_classed), 2, 3000, n, old, p2, v2, &e),
			     0, "path %d: %s", lv, e.msg);
		cr_assert(!memcmp(p2, pos, n * 8) && !memcmp(v2, nw, n * 8), "path %d", lv);
	}
	cdc_cpu_limit(3);
}

/* ---- CLASSED: positions need the old bits of the whole range ---- */

/* Encode n changes at pos of the range old[0..range_len) (oldv read from
 * it) to newv with codec (0: dcr_codec_choose_range), decode with
 * dcr_codec_decode_range, require the input back. Returns the payload
 * size; *used the codec. */
static size_t roundtrip_range(int codec, unsigned unit, int dtype, uint64_t range_len, size_t n,
			      const uint64_t *pos, const uint8_t *old, const uint64_t *newv,
			      int *used)
{
	uint64_t *oldv = calloc(n + 1, 8), *p2 = calloc(n + 1, 8), *v2 = calloc(n + 1, 8);
	for (size_t i = 0; i < n; i++)
		oldv[i] = load_unit(old + pos[i] * unit, unit);
	struct dcr_buf b = {0};
	struct dcr_err e = {0};
	int c = codec ? dcr_codec_encode_range(codec, unit, dtype, range_len, n, pos, oldv, newv,
					       old, &b, &e)
		      : dcr_codec_choose_range(1, unit, dtype, range_len, n, pos, oldv, newv, old,
					       &b, &e);
	cr_assert_geq(c, 0, "encode %d unit %u dtype %s: %s", codec, unit, dcr_dtype_name(dtype),
		      e.msg);
	if (codec)
		c = codec;
	if (used)
		*used = c;
	int r = dcr_codec_decode_range(c, b.p, b.len, unit, range_len, n, old, p2, v2, &e);
	cr_assert_eq(r, 0, "decode %s unit %u dtype %s n %zu range %llu: %s", dcr_codec_name(c),
		     unit, dcr_dtype_name(dtype), n, (unsigned long long)range_len, e.msg);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(p2[i], pos[i], "%s %s change %zu: position %llu decoded %llu",
			     dcr_codec_name(c), dcr_dtype_name(dtype), i, (unsigned long long)pos[i],
			     (unsigned long long)p2[i]);
		cr_assert_eq(v2[i], newv[i], "%s %s change %zu: old %#llx new %#llx decoded %#llx",
			     dcr_codec_name(c), dcr_dtype_name(dtype), i, (unsigned long long)oldv[i],
			     (unsigned long long)newv[i], (unsigned long long)v2[i]);
	}
	size_t len = b.len;
	free(oldv);
	free(p2);
	free(v2);
	dcr_buf_free(&b);
	return len;
}

/* A range of old values: random bits, or for float dtypes values whose
 * exponent field spreads over a dozen values around the middle; changes
 * where a coin weighted by the exponent (small values change more) falls,
 * new values random, a step away or unchanged. */
static size_t random_range(int dt, unsigned unit, uint64_t range_len, int structured, uint8_t *old,
			   uint64_t *pos, uint64_t *nw)
{
	static const struct { int dt; unsigned mshift, ebits; } f[] = {
		{DCR_DT_BF16, 7, 8}, {DCR_DT_F16, 10, 5}, {DCR_DT_F32, 23, 8},
		{DCR_DT_F64, 52, 11}, {DCR_DT_F8_E4M3, 3, 4}, {DCR_DT_F8_E5M2, 2, 5},
		{DCR_DT_F8_E8M0, 0, 8},
	};
	unsigned ms = 0, eb = 0;
	for (size_t k = 0; k < sizeof(f) / sizeof(f[0]); k++)
		if (f[k].dt == dt)
			ms = f[k].mshift, eb = f[k].ebits;
	size_t n = 0;
	uint64_t rate = 1 + rnd() % 200; /* per 1024 */
	for (uint64_t i = 0; i < range_len; i++) {
		uint64_t x = rnd() & umask(unit);
		unsigned w = 0;
		if (structured && eb) {
			uint64_t top = (1ULL << eb) - 1, e = top / 2 + rnd() % 12 - 6;
			w = (unsigned)(top / 2 + 6 - e);
			x = (x & ~(top << ms)) | (e & top) << ms;
		}
		store_unit(old + i * unit, unit, x);
		if ((rnd() & 1023) < (rate << w >> 3)) {
			uint64_t r = rnd();
			pos[n] = i;
			nw[n++] = (r % 4 == 0 ? rnd() : r % 4 == 1 ? x + (r >> 40) % 5 - 2 :
				   r % 4 == 2 ? x ^ (1ULL << (r >> 58) % (8 * unit)) : x) & umask(unit);
		}
	}
	return n;
}

Test(codec, classed_random_bit_patterns_round_trip_for_every_dtype)
{
	rs = 3;
	enum { MAXR = 70000 };
	uint8_t *old = malloc(MAXR * 8);
	uint64_t *pos = malloc(MAXR * 8), *nw = malloc(MAXR * 8);
	for (size_t d = 0; d < NDTYPES; d++) {
		int dt = all_dtypes[d];
		unsigned unit = dcr_dtype_unit(dt);
		for (int trial = 0; trial < 14; trial++) {
			uint64_t range_len = trial == 0 ? 0 : trial == 1 ? 1 : trial == 2 ? 64 :
					     trial == 3 ? 129 : 1 + rnd() % MAXR;
			size_t n = random_range(dt, unit, range_len, trial & 1, old, pos, nw);
			for (int codec = 0; codec <= DCR_CODEC_CLASSED; codec++)
				roundtrip_range(codec, unit, dt, range_len, n, pos, old, nw, NULL);
		}
	}
	free(old);
	free(pos);
	free(nw);
}

/* A CLASSED payload of the changes, encoded on every code path (0
 * portable C, 1 POPCNT and SSE2, 2 AVX2, 3 AVX2 and PDEP), each of which
 * must write path 3's bytes (left in *ref), and decoded on each path into
 * buffers of exactly n entries (so that ASan sees a write past them) to
 * the same changes; `what` names the case. Leaves path 3 on. */
static void classed_every_path(unsigned unit, int dt, uint64_t range_len, size_t n,
			       const uint64_t *pos, const uint64_t *oldv, const uint64_t *nw,
			       const uint8_t *old, struct dcr_buf *ref, const char *what)
{
	cdc_cpu_limit(3);
	cr_assert_eq(dcr_codec_encode_range(DCR_CODEC_CLASSED, unit, dt, range_len, n, pos, oldv,
					    nw, old, ref, NULL), 0, "%s", what);
	for (int lv = 0; lv <= 3; lv++) {
		cdc_cpu_limit(lv);
		struct dcr_buf b = {0};
		cr_assert_eq(dcr_codec_encode_range(DCR_CODEC_CLASSED, unit, dt, range_len, n, pos,
						    oldv, nw, old, &b, NULL), 0, "%s", what);
		cr_assert(b.len == ref->len && !memcmp(b.p, ref->p, b.len),
			  "%s: path %d encodes other bytes", what, lv);
		dcr_buf_free(&b);
		uint64_t *p1 = malloc(n ? n * 8 : 1), *v1 = malloc(n ? n * 8 : 1);
		struct dcr_err e = {0};
		cr_assert_eq(dcr_codec_decode_range(DCR_CODEC_CLASSED, ref->p, ref->len, unit,
						    range_len, n, old, p1, v1, &e),
			     0, "%s: path %d: %s", what, lv, e.msg);
		cr_assert(!memcmp(p1, pos, n * 8) && !memcmp(v1, nw, n * 8),
			  "%s: path %d decodes other changes", what, lv);
		free(p1);
		free(v1);
	}
	cdc_cpu_limit(3);
}

Test(codec, classed_blocks_of_any_change_count_decode_into_exact_buffers)
{
	/* Both scans handle a block's changes in bulk (the decoder writes a
	 * block's first four positions without a branch, the encoder ranks
	 * a strip of blocks at once): blocks of 0 to 64 changes, items of 1
	 * to 300 changes and ranges that end inside a block, decoded into
	 * buffers of exactly n entries (so that ASan sees a write past
	 * them), on every code path. */
	rs = 41;
	enum { MAXR = 64 * 300 + 37 };
	uint8_t *old = malloc(MAXR * 2);
	uint64_t *pos = malloc(MAXR * 8), *nw = malloc(MAXR * 8), *oldv = malloc(MAXR * 8);
	for (int trial = 0; trial < 40; trial++) {
		uint64_t range_len = trial < 4 ? 64 * (uint64_t)(trial + 1) - trial : 1 + rnd() % MAXR;
		size_t n = 0, cap = trial < 10 ? 1 + (size_t)trial : 1 + rnd() % 300;
		for (uint64_t i = 0; i < range_len; i++) {
			/* two magnitudes, so that there are classes */
			uint16_t x = (uint16_t)((rnd() & 1) << 15 | (i / 64 % 3 ? 120 : 126) << 7 |
						(rnd() & 127));
			put_le16(old + 2 * i, x);
		}
		for (uint64_t b = 0; b < range_len && n < cap; b += 64) {
			/* this block's share: none, a few, or all of it */
			unsigned want = (unsigned)(rnd() % 4 == 0 ? 0 : rnd() % 3 == 0 ? 64 : rnd() % 9);
			for (uint64_t i = b; i < b + 64 && i < range_len && n < cap; i++)
				if (want == 64 || rnd() % 64 < want) {
					pos[n] = i;
					oldv[n] = get_le16(old + 2 * i);
					nw[n] = oldv[n] ^ (1 + rnd() % 3);
					n++;
				}
		}
		if (!n)
			continue;
		struct dcr_buf ref = {0};
		char what[32];
		snprintf(what, sizeof(what), "trial %d", trial);
		classed_every_path(2, DCR_DT_BF16, range_len, n, pos, oldv, nw, old, &ref, what);
		dcr_buf_free(&ref);
	}
	free(old);
	free(pos);
	free(nw);
	free(oldv);
}

/* The number of classes a CLASSED payload declares (byte 2 of its
 * positions section). */
static unsigned classes_of(const struct dcr_buf *b)
{
	struct dcr_rd r;
	dcr_rd_init(&r, b->p, b->len);
	dcr_rd_varint(&r);
	dcr_rd_varint(&r);
	dcr_rd_u8(&r);
	dcr_rd_u8(&r);
	return dcr_rd_u8(&r);
}

Test(codec, classed_uses_the_exponent_and_beats_delta)
{
	/* the generated bf16 step of the DELTA test: small weights change more */
	size_t N = 1 << 20, n = 0;
	uint8_t *old = malloc(N * 2);
	uint64_t *pos = malloc(N * 8), *o = malloc(N * 8), *nw = malloc(N * 8);
	rs = 99;
	for (size_t i = 0; i < N; i++) {
		double g = 0, u = 0;
		for (int k = 0; k < 4; k++) {
			g += (double)(rnd() >> 11) / 9007199254740992.0 - 0.5;
			u += (double)(rnd() >> 11) / 9007199254740992.0 - 0.5;
		}
		float w = (float)(g * 0.035), w2 = (float)(w - 1.5e-6 * u * 1.7);
		uint16_t a = to_bf16(w), b = to_bf16(w2);
		put_le16(old + 2 * i, a);
		if (a != b) {
			pos[n] = i;
			o[n] = a;
			nw[n++] = b;
		}
	}
	int used;
	size_t dl = roundtrip(DCR_CODEC_DELTA, 2, DCR_DT_BF16, N, n, pos, o, nw);
	size_t cl = roundtrip_range(DCR_CODEC_CLASSED, 2, DCR_DT_BF16, N, n, pos, old, nw, NULL);
	size_t au = roundtrip_range(0, 2, DCR_DT_BF16, N, n, pos, old, nw, &used);
	cr_assert_lt(cl, dl * 17 / 20, "classed %zu bytes, delta %zu", cl, dl);
	cr_assert_eq(used, DCR_CODEC_CLASSED, "choose_range picked %s", dcr_codec_name(used));
	cr_assert_eq(au, cl);
	struct dcr_buf b = {0};
	cr_assert_eq(dcr_codec_encode_range(DCR_CODEC_CLASSED, 2, DCR_DT_BF16, N, n, pos, o, nw, old,
					    &b, NULL), 0);
	cr_assert_gt(classes_of(&b), 1);
	/* the same step as f32 (a non-vector class path) round-trips too */
	uint8_t *o32 = malloc(N * 4);
	uint64_t *nw32 = malloc(N * 8);
	for (size_t i = 0; i < N; i++)
		put_le32(o32 + 4 * i, (uint32_t)get_le16(old + 2 * i) << 16);
	for (size_t i = 0; i < n; i++)
		nw32[i] = nw[i] << 16;
	size_t d32 = roundtrip_range(DCR_CODEC_DELTA, 4, DCR_DT_F32, N, n, pos, o32, nw32, NULL);
	size_t c32 = roundtrip_range(DCR_CODEC_CLASSED, 4, DCR_DT_F32, N, n, pos, o32, nw32, NULL);
	cr_assert_lt(c32, d32 - (dl - cl) / 2, "f32: classed %zu bytes, delta %zu", c32, d32);
	free(o32);
	free(nw32);
	dcr_buf_free(&b);
	free(old);
	free(pos);
	free(o);
	free(nw);
}

/* A valid CLASSED payload with several classes, for the hostile tests. */
static void classed_sample(struct dcr_buf *b, size_t *n, uint64_t *range_len, uint8_t *old)
{
	static uint64_t pos[20000], nw[20000], oldv[20000];
	*range_len = 20000;
	rs = 5;
	*n = random_range(DCR_DT_BF16, 2, *range_len, 1, old, pos, nw);
	cr_assert(*n > 300, "%zu changes", *n);
	for (size_t i = 0; i < *n; i++)
		oldv[i] = get_le16(old + 2 * pos[i]);
	cr_assert_eq(dcr_codec_encode_range(DCR_CODEC_CLASSED, 2, DCR_DT_BF16, *range_len, *n, pos,
					    oldv, nw, old, b, NULL), 0);
	cr_assert_gt(classes_of(b), 1);
}

static int try_range(const uint8_t *p, size_t len, uint64_t range_len, size_t n, const uint8_t *old)
{
	uint64_t *pos = calloc(n + 1, 8), *v = calloc(n + 1, 8);
	struct dcr_err e = {0};
	int r = dcr_codec_decode_range(DCR_CODEC_CLASSED, p, len, 2, range_len, n, old, pos, v, &e);
	cr_assert(r == 0 || r == DCR_EFORMAT, "rc %d", r);
	if (r < 0)
		cr_assert(e.msg[0], "error without a message");
	for (size_t i = 0; i < n && r == 0; i++)
		cr_assert(pos[i] < range_len && (!i || pos[i] > pos[i - 1]) && v[i] <= 0xffff,
			  "accepted output breaks the contract");
	free(pos);
	free(v);
	return r;
}

/* Decode p[0..len) as CLASSED at the current code path: the return code,
 * and the output when it is 0, into pos/v. */
static int decode_at(const uint8_t *p, size_t len, uint64_t range_len, size_t n,
		     const uint8_t *old, unsigned unit, uint64_t *pos, uint64_t *v)
{
	struct dcr_err e = {0};
	memset(pos, 0, (n + 1) * 8);
	memset(v, 0, (n + 1) * 8);
	return dcr_codec_decode_range(DCR_CODEC_CLASSED, p, len, unit, range_len, n, old, pos, v,
				      &e);
}

Test(codec, classed_code_paths_write_and_read_the_same_bytes)
{
	/* 0 portable C, 1 POPCNT and SSE2, 2 AVX2, 3 AVX2 and PDEP: each
	 * encodes the same bytes and decodes every payload, good or
	 * damaged, to the same answer */
	enum { MAXR = 40000 };
	static const int dts[] = {DCR_DT_BF16, DCR_DT_F16, DCR_DT_F32, DCR_DT_F8_E4M3};
	uint8_t *old = malloc(MAXR * 4);
	uint64_t *pos = malloc(MAXR * 8), *nw = malloc(MAXR * 8), *oldv = malloc(MAXR * 8);
	uint64_t *p0 = malloc((MAXR + 1) * 8), *v0 = malloc((MAXR + 1) * 8);
	uint64_t *p1 = malloc((MAXR + 1) * 8), *v1 = malloc((MAXR + 1) * 8);
	rs = 17;
	for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
		unsigned unit = dcr_dtype_unit(dts[d]);
		for (int trial = 0; trial < 6; trial++) {
			uint64_t range_len = trial == 0 ? 4096 : trial == 1 ? 4099 : 200 + rnd() % MAXR;
			size_t n = random_range(dts[d], unit, range_len, 1, old, pos, nw);
			for (size_t i = 0; i < n; i++)
				oldv[i] = load_unit(old + pos[i] * unit, unit);
			struct dcr_buf ref = {0};
			classed_every_path(unit, dts[d], range_len, n, pos, oldv, nw, old, &ref,
					   dcr_dtype_name(dts[d]));
			/* damaged copies: one to three bytes, and wrong counts */
			for (int k = 0; k < 60; k++) {
				uint8_t *q = malloc(ref.len);
				memcpy(q, ref.p, ref.len);
				for (int f = 0; f < 1 + k % 3; f++)
					q[rnd() % ref.len] ^= (uint8_t)(1 + rnd() % 255);
				size_t nn = k % 10 == 9 ? n + 1 : n;
				cdc_cpu_limit(0);
				int r0 = decode_at(q, ref.len, range_len, nn, old, unit, p0, v0);
				for (int lv = 1; lv <= 3; lv++) {
					cdc_cpu_limit(lv);
					int r1 = decode_at(q, ref.len, range_len, nn, old, unit, p1, v1);
					cr_assert_eq(r1, r0, "%s: path %d answers %d, portable %d",
						     dcr_dtype_name(dts[d]), lv, r1, r0);
					cr_assert(r0 || (!memcmp(p0, p1, nn * 8) && !memcmp(v0, v1, nn * 8)),
						  "%s: path %d decodes a damaged payload otherwise",
						  dcr_dtype_name(dts[d]), lv);
				}
				free(q);
			}
			dcr_buf_free(&ref);
		}
	}
	cdc_cpu_limit(3);
	free(old);
	free(pos);
	free(nw);
	free(oldv);
	free(p0);
	free(v0);
	free(p1);
	free(v1);
}

Test(codec, classed_hostile_payloads_are_refused_and_never_crash)
{
	uint8_t *old = malloc(20000 * 2);
	struct dcr_buf b = {0};
	size_t n;
	uint64_t L;
	classed_sample(&b, &n, &L, old);
	cr_assert_eq(try_range(b.p, b.len, L, n, old), 0);
	for (size_t len = 0; len < b.len; len++)
		cr_assert_lt(try_range(b.p, len, L, n, old), 0, "truncation to %zu of %zu accepted",
			     len, b.len);
	cr_assert_lt(try_range(b.p, b.len, L, n - 1, old), 0);
	cr_assert_lt(try_range(b.p, b.len, L, n + 1, old), 0);
	uint8_t *p = malloc(b.len + 1);
	rs = 13;
	for (int t = 0; t < 4000; t++) {
		memcpy(p, b.p, b.len);
		int flips = 1 + (int)(rnd() % 4);
		for (int k = 0; k < flips; k++) {
			/* the head (classes, counts, tables) more often than the streams */
			size_t at = t & 1 ? rnd() % (b.len < 40 ? b.len : 40) : rnd() % b.len;
			p[at] ^= (uint8_t)(1u << (rnd() % 8));
		}
		try_range(p, b.len, L, n, old);
	}
	/* thresholds that do not decrease, counts that do not add up */
	size_t h = 0;
	struct dcr_rd r;
	dcr_rd_init(&r, b.p, b.len);
	dcr_rd_varint(&r);
	dcr_rd_varint(&r);
	h = (size_t)(r.p - b.p); /* mshift, ebits, ncls, thresholds, counts */
	unsigned K = b.p[h + 2];
	memcpy(p, b.p, b.len);
	p[h + 4] = p[h + 3]; /* thr[1] = thr[0] */
	cr_assert_eq(try_range(p, b.len, L, n, old), DCR_EFORMAT);
	memcpy(p, b.p, b.len);
	p[h + 3] = 0; /* thr[0] = 0 */
	cr_assert_eq(try_range(p, b.len, L, n, old), DCR_EFORMAT);
	memcpy(p, b.p, b.len);
	p[h + 2] = 9; /* more classes than a payload may have */
	cr_assert_eq(try_range(p, b.len, L, n, old), DCR_EFORMAT);
	memcpy(p, b.p, b.len);
	p[h + 3 + K - 1] ^= 1; /* the first count changes: the sum breaks */
	cr_assert_eq(try_range(p, b.len, L, n, old), DCR_EFORMAT);
	/* the range ends before the last change */
	cr_assert_eq(try_range(b.p, b.len, L / 2, n, old), DCR_EFORMAT);
	/* other old bits give other classes: refused or decoded within bounds */
	uint8_t *other = malloc(20000 * 2);
	for (size_t i = 0; i < 20000; i++)
		put_le16(other + 2 * i, (uint16_t)rnd());
	try_range(b.p, b.len, L, n, other);
	/* random bytes after a plausible header */
	for (int t = 0; t < 2000; t++) {
		size_t len = 8 + rnd() % 400;
		uint8_t *q = malloc(len);
		for (size_t i = 0; i < len; i++)
			q[i] = (uint8_t)rnd();
		memcpy(q, b.p, t % 2 ? 6 : 3);
		try_range(q, len, L, n, old);
		free(q);
	}
	/* CLASSED decodes only whole, with the old bits */
	static uint64_t pos[20000], v[20000];
	struct dcr_err e = {0};
	cr_assert_eq(dcr_codec_decode_positions(DCR_CODEC_CLASSED, b.p, b.len, 2, L, n, pos, &e),
		     DCR_EFORMAT);
	cr_assert_eq(dcr_codec_decode_values(DCR_CODEC_CLASSED, b.p, b.len, 2, DCR_DT_BF16, L, n,
					     pos, v, v, &e), DCR_EFORMAT);
	cr_assert_eq(dcr_codec_decode_range(DCR_CODEC_CLASSED, b.p, b.len, 2, L, n, NULL, pos, v, &e),
		     DCR_EFORMAT);
	free(other);
	free(p);
	free(old);
	dcr_buf_free(&b);
}

Test(codec, classed_encoder_needs_the_true_old_bits)
{
	uint8_t old[200];
	for (int i = 0; i < 100; i++)
		put_le16(old + 2 * i, (uint16_t)(0x3c00 + i));
	uint64_t pos[3] = {1, 5, 9}, o[3] = {0x3c01, 0x3c05, 0x3c09}, nw[3] = {1, 2, 3};
	struct dcr_buf b = {0};
	struct dcr_err e = {0};
	cr_assert_eq(dcr_codec_encode(DCR_CODEC_CLASSED, 2, DCR_DT_BF16, 100, 3, pos, o, nw, &b, &e),
		     -EINVAL);
	cr_assert_eq(dcr_codec_encode_range(DCR_CODEC_CLASSED, 2, DCR_DT_BF16, 100, 3, pos, NULL, nw,
					    old, &b, &e), -EINVAL);
	cr_assert_eq(dcr_codec_encode_range(DCR_CODEC_CLASSED, 2, DCR_DT_BF16, 100, 3, pos, o, nw,
					    old, &b, &e), 0, "%s", e.msg);
	o[1] ^= 1;
	b.len = 0;
	cr_assert_eq(dcr_codec_encode_range(DCR_CODEC_CLASSED, 2, DCR_DT_BF16, 100, 3, pos, o, nw,
					    old, &b, &e), -EINVAL);
	cr_assert(strstr(e.msg, "old"), "message: %s", e.msg);
	cr_assert_eq(dcr_codec_needs_range(DCR_CODEC_CLASSED), 1);
	cr_assert_eq(dcr_codec_needs_range(DCR_CODEC_DELTA), 0);
	cr_assert_str_eq(dcr_codec_name(DCR_CODEC_CLASSED), "classed");
	dcr_buf_free(&b);
}
