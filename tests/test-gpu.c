/* test-gpu - the CUDA path is bit-identical to the CPU path, which is the
 * reference: dcr_cuda_diff (masks and new units) against dcr_scan_changes,
 * dcr_cuda_scatter (XOR and overwrite) against dcr_scatter,
 * dcr_cuda_positions against dcr_gap_positions, for units of 1, 2, 4 and 8
 * bytes, on random tensors at change rates from none to all, on generated
 * bf16 weights one optimizer step apart, and on +0/-0 and NaN payloads;
 * sizes 0, 1 and around warp, block and tile sizes; every diff method,
 * and buffers off a 16-byte boundary; the diff's cap; the
 * scatter never writes past n; misaligned buffers refused; the host-buffer
 * wrappers dcr-diff and dcr-apply use; and 2^32 + 7 one-byte elements
 * (positions past 2^32). Exit 77 (skip) where libdcr was built without
 * CUDA or no CUDA device is present. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcr.h"
#include "core/bytes.h"
#ifdef HAVE_CUDA
#include "dcr_cuda.h" /* dk_diff's other methods */
#endif

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int failures, cases;

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "test-gpu: FAIL: " __VA_ARGS__);  \
			fputc('\n', stderr);                              \
			failures++;                                       \
			goto out;                                         \
		}                                                         \
	} while (0)

static struct dcr_err e;
static void *stream;

/* the device's view of things, for the checks */
static void *dev(size_t n)
{
	void *p = NULL;
	if (dcr_cuda_malloc(&p, n ? n : 1, &e)) {
		fprintf(stderr, "test-gpu: %s\n", e.msg);
		exit(1);
	}
	return p;
}

static void put(void *d, const void *h, size_t n)
{
	if (dcr_cuda_copy(d, h, n, DCR_CUDA_H2D, stream, &e) || dcr_cuda_sync(stream, &e)) {
		fprintf(stderr, "test-gpu: %s\n", e.msg);
		exit(1);
	}
}

static void get(void *h, const void *d, size_t n)
{
	if (dcr_cuda_copy(h, d, n, DCR_CUDA_D2H, stream, &e) || dcr_cuda_sync(stream, &e)) {
		fprintf(stderr, "test-gpu: %s\n", e.msg);
		exit(1);
	}
}

static uint64_t mask_of(unsigned unit)
{
	return unit == 8 ? ~0ull : (1ull << (8 * unit)) - 1;
}

/* Special stored bits per width: +0/-0, NaN payloads, infinities. */
static void specials(uint8_t *a, uint8_t *b, size_t n, unsigned unit)
{
	static const uint64_t pairs[4][6][2] = {
		{{0x00, 0x80}, {0x7f, 0xff}, {0x7c, 0x7d}, {0x01, 0x01}, {0xff, 0x7f}, {0x80, 0x00}},
		{{0x0000, 0x8000}, {0x7fc0, 0x7fc1}, {0x7f80, 0xff80}, {0xffff, 0x7fff},
		 {0x7fc1, 0x7fc1}, {0x8000, 0x0000}},
		{{0, 0x80000000}, {0x7fc00000, 0x7fc00001}, {0x7f800000, 0xff800000},
		 {0xffc00000, 0x7fc00000}, {0x7fc00001, 0x7fc00001}, {0x80000000, 0}},
		{{0, 0x8000000000000000}, {0x7ff8000000000000, 0x7ff8000000000001},
		 {0x7ff0000000000000, 0xfff0000000000000}, {0xfff8000000000000, 0x7ff8000000000000},
		 {0x7ff8000000000001, 0x7ff8000000000001}, {0x8000000000000000, 0}},
	};
	int w = unit == 1 ? 0 : unit == 2 ? 1 : unit == 4 ? 2 : 3;
	for (size_t k = 0; k < 6 && k < n; k++) {
		size_t i = k * (n / 6);
		store_unit(a + i * unit, unit, pairs[w][k][0]);
		store_unit(b + i * unit, unit, pairs[w][k][1]);
	}
}

static uint16_t bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
	return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static double gauss(void)
{
	double u = ((double)(next() >> 11) + 0.5) / 9007199254740992.0;
	double v = ((double)(next() >> 11) + 0.5) / 9007199254740992.0;
	return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* The whole check of one pair a, b of n units. */
static void check_pair(const uint8_t *a, const uint8_t *b, size_t n, unsigned unit,
		       const char *what)
{
	size_t nb = n * unit;
	uint64_t *cpos = malloc(n * 8 + 8), *cval = malloc(n * 8 + 8), *gpos = malloc(n * 8 + 8);
	uint64_t *nval = malloc(n * 8 + 8), *hpos = malloc(n * 8 + 8), *hval = malloc(n * 8 + 8);
	uint8_t *gval = malloc(nb + 8), *nv8 = malloc(nb + 8), *cdst = malloc(nb + 64);
	uint8_t *gdst = malloc(nb + 64), *guard = malloc(64);
	void *da = dev(nb), *db = dev(nb), *dpos = dev(n * 8 + 16), *dval = dev(nb + 16);
	void *dcnt = dev(8), *ddst = dev(nb + 64);
	void *scr = NULL;
	size_t sb = 0, m = 0;
	uint64_t count = 0;
	cases++;
	if (!cpos || !cval || !gpos || !nval || !hpos || !hval || !gval || !nv8 || !cdst ||
	    !gdst || !guard) {
		fprintf(stderr, "test-gpu: out of memory\n");
		exit(1);
	}
	size_t cn = dcr_scan_changes(a, b, nb, unit, cpos, cval);
	put(da, a, nb);
	put(db, b, nb);
	CHECK(!dcr_cuda_diff_scratch(n, unit, &sb, &e), "%s: scratch: %s", what, e.msg);
	scr = dev(sb);

	/* masks */
	CHECK(!dcr_cuda_diff(da, db, n, unit, DCR_ENC_XOR, dpos, dval, n, dcnt, scr, sb, stream, &e),
	      "%s: diff: %s", what, e.msg);
	get(&count, dcnt, 8);
	CHECK(count == cn, "%s: the GPU found %llu changes, the CPU %zu", what,
	      (unsigned long long)count, cn);
	get(gpos, dpos, cn * 8);
	get(gval, dval, cn * unit);
	for (size_t k = 0; k < cn; k++)
		CHECK(gpos[k] == cpos[k] && load_unit(gval + k * unit, unit) == cval[k],
		      "%s: change %zu: GPU %llu/%llx, CPU %llu/%llx", what, k,
		      (unsigned long long)gpos[k], (unsigned long long)load_unit(gval + k * unit, unit),
		      (unsigned long long)cpos[k], (unsigned long long)cval[k]);

	/* the other ways of reading the data (lib/core/cuda.c goes by
	 * positions), where libdcr has them */
	static const char *const other_name[] = {"by tiles", "by triples"};
#ifdef HAVE_CUDA
	static const int others[] = {DK_DIFF_TILES, DK_DIFF_TRIPLES};
	const int nothers = 2;
#else
	const int nothers = 0;
#endif
	/* each way (o < 0: dcr_cuda_diff's, checked above from the boundary):
	 * from the 16-byte boundary; from one unit past it (the tiles read
	 * around the head); base and input at different phases, base a[2..]
	 * and input b[1..] copied one unit past ddst's start (the tiles go by
	 * positions). The CPU's changes once per shift. */
	for (unsigned shift = 0; shift < 3 && shift < n; shift++) {
		const uint8_t *da1 = (const uint8_t *)da + (shift ? unit : 0);
		const uint8_t *db1 = (const uint8_t *)db + (shift ? unit : 0);
		const uint64_t *ep = cpos, *ev = cval;
		uint64_t n1 = n - (shift ? 1 : 0);
		size_t hn = cn;
		if (shift == 2) {
			da1 += unit, n1 = n - 2;
			db1 = (const uint8_t *)ddst + unit;
			put((void *)db1, b + unit, n1 * unit);
		}
		if (shift) {
			hn = dcr_scan_changes(a + shift * unit, b + unit, n1 * unit, unit, hpos, hval);
			ep = hpos, ev = hval;
		}
		for (int o = shift ? -1 : 0; o < nothers; o++) {
			const char *how = o < 0 ? "by dcr_cuda_diff" : other_name[o];
			memset(gpos, 0, hn * 8);
#ifdef HAVE_CUDA
			if (o >= 0) {
				size_t tb = sb;
				int err = dk_diff(da1, db1, n1, unit, 0, dpos, dval, n1, dcnt, scr, &tb,
						  others[o], stream);
				CHECK(!err, "%s: diff %s: %s", what, how, dk_error_string(err));
			}
#endif
			if (o < 0)
				CHECK(!dcr_cuda_diff(da1, db1, n1, unit, DCR_ENC_XOR, dpos, dval, n1,
						     dcnt, scr, sb, stream, &e),
				      "%s: diff %s, shift %u: %s", what, how, shift, e.msg);
			get(&count, dcnt, 8);
			CHECK(count == hn, "%s: %s, shift %u: the GPU found %llu changes, the CPU %zu",
			      what, how, shift, (unsigned long long)count, hn);
			get(gpos, dpos, hn * 8);
			get(gval, dval, hn * unit);
			for (size_t k = 0; k < hn; k++)
				CHECK(gpos[k] == ep[k] && load_unit(gval + k * unit, unit) == ev[k],
				      "%s: %s, shift %u: change %zu differs", what, how, shift, k);
		}
	}

	/* new units */
	CHECK(!dcr_cuda_diff(da, db, n, unit, DCR_ENC_OVERWRITE, dpos, dval, n, dcnt, scr, sb, stream,
			     &e),
	      "%s: diff (new units): %s", what, e.msg);
	get(&count, dcnt, 8);
	CHECK(count == cn, "%s: new units: %llu changes, %zu expected", what,
	      (unsigned long long)count, cn);
	get(gpos, dpos, cn * 8);
	get(nv8, dval, cn * unit);
	for (size_t k = 0; k < cn; k++) {
		nval[k] = load_unit(b + cpos[k] * unit, unit);
		CHECK(gpos[k] == cpos[k] && load_unit(nv8 + k * unit, unit) == nval[k],
		      "%s: new unit %zu differs", what, k);
	}

	/* the cap: the count is all changes, only cap entries written */
	if (cn >= 2) {
		uint64_t cap = cn / 2;
		memset(gpos, 0xa5, cn * 8);
		put(dpos, gpos, cn * 8);
		CHECK(!dcr_cuda_diff(da, db, n, unit, DCR_ENC_XOR, dpos, dval, cap, dcnt, scr, sb,
				     stream, &e),
		      "%s: capped diff: %s", what, e.msg);
		get(&count, dcnt, 8);
		get(gpos, dpos, cn * 8);
		CHECK(count == cn, "%s: capped diff counted %llu, not %zu", what,
		      (unsigned long long)count, cn);
		for (size_t k = 0; k < cn; k++)
			CHECK(k < cap ? gpos[k] == cpos[k] : gpos[k] == 0xa5a5a5a5a5a5a5a5ull,
			      "%s: capped diff wrote entry %zu (cap %llu)", what, k,
			      (unsigned long long)cap);
	}

	/* scatter: masks by XOR, new units by overwrite, each equals the CPU's
	 * and b; positions at or past n never written */
	memset(guard, 0x5a, 64);
	for (int xor_ = 0; xor_ < 2; xor_++) {
		const uint64_t *vals = xor_ ? cval : nval;
		memcpy(cdst, a, nb);
		dcr_scatter(cdst, unit, cpos, vals, cn, xor_);
		CHECK(!memcmp(cdst, b, nb), "%s: the CPU scatter does not give b", what);
		for (size_t k = 0; k < cn; k++)
			store_unit(gval + k * unit, unit, vals[k]);
		uint64_t extra[2] = {n, n + 3};
		put(ddst, a, nb);
		put((uint8_t *)ddst + nb, guard, 64);
		put(dpos, cpos, cn * 8);
		put((uint8_t *)dpos + cn * 8, extra, 16);
		put(dval, gval, cn * unit);
		put((uint8_t *)dval + cn * unit, guard, 2 * unit);
		CHECK(!dcr_cuda_scatter(ddst, n, unit, dpos, dval, cn + 2,
					xor_ ? DCR_ENC_XOR : DCR_ENC_OVERWRITE, stream, &e),
		      "%s: scatter: %s", what, e.msg);
		get(gdst, ddst, nb + 64);
		CHECK(!memcmp(gdst, cdst, nb), "%s: scatter (%s) differs from the CPU's", what,
		      xor_ ? "xor" : "overwrite");
		CHECK(!memcmp(gdst + nb, guard, 64), "%s: scatter wrote past n", what);
	}

	/* the host-buffer wrappers */
	{
		struct dcr_cuda_ctx *c = NULL;
		CHECK(!dcr_cuda_ctx_new(&c, &e), "%s: context: %s", what, e.msg);
		int r = dcr_cuda_scan_changes(c, a, b, nb, unit, hpos, hval, &m, &e);
		if (!r && (m != cn || memcmp(hpos, cpos, cn * 8) || memcmp(hval, cval, cn * 8)))
			r = 1, snprintf(e.msg, sizeof(e.msg), "differs from dcr_scan_changes");
		memcpy(gdst, a, nb);
		if (!r)
			r = dcr_cuda_scatter_host(c, gdst, nb, unit, cpos, cval, cn, 1, &e);
		if (!r && memcmp(gdst, b, nb))
			r = 1, snprintf(e.msg, sizeof(e.msg), "scatter differs from dcr_scatter");
		dcr_cuda_ctx_free(c);
		CHECK(!r, "%s: host wrappers: %s", what, e.msg);
	}
out:
	dcr_cuda_free(scr);
	dcr_cuda_free(da);
	dcr_cuda_free(db);
	dcr_cuda_free(dpos);
	dcr_cuda_free(dval);
	dcr_cuda_free(dcnt);
	dcr_cuda_free(ddst);
	free(cpos), free(cval), free(gpos), free(nval), free(hpos), free(hval);
	free(gval), free(nv8), free(cdst), free(gdst), free(guard);
}

/* Random units, a share rate/1000 of them changed (low bits, or any). */
static void check_random(size_t n, unsigned unit, unsigned rate)
{
	uint8_t *a = malloc(n * unit + 1), *b = malloc(n * unit + 1);
	for (size_t i = 0; i < n; i++) {
		uint64_t x = next() & mask_of(unit), y = x;
		if (next() % 1000 < rate) {
			uint64_t d = next() % 4 ? 1 + next() % 7 : next();
			y = (x ^ d) & mask_of(unit);
			if (y == x)
				y = x ^ 1;
		}
		store_unit(a + i * unit, unit, x);
		store_unit(b + i * unit, unit, y);
	}
	specials(a, b, n, unit);
	char what[96];
	snprintf(what, sizeof(what), "random, %zu x %u bytes, %u/1000 changed", n, unit, rate);
	check_pair(a, b, n, unit, what);
	free(a);
	free(b);
}

/* bf16 weights one step of about 1e-4 apart: changes of a unit or two in
 * the last place, about a few percent of them. */
static void check_generated(size_t n)
{
	uint8_t *a = malloc(n * 2 + 1), *b = malloc(n * 2 + 1);
	for (size_t i = 0; i < n; i++) {
		float w = (float)(0.02 * gauss());
		uint16_t x = bf16(w);
		float step = (float)(1e-6 * gauss() * 60);
		store_unit(a + i * 2, 2, x);
		store_unit(b + i * 2, 2, bf16(from_bf16(x) + step));
	}
	char what[64];
	snprintf(what, sizeof(what), "generated bf16, %zu units", n);
	check_pair(a, b, n, 2, what);
	free(a);
	free(b);
}

static void check_positions(size_t m)
{
	uint32_t *gaps = malloc(m * 4 + 4);
	uint64_t *cpos = malloc(m * 8 + 8), *gpos = malloc(m * 8 + 8);
	void *dg = dev(m * 4 + 4), *dp = dev(m * 8 + 8), *scr = NULL;
	size_t sb = 0;
	uint64_t first = next() % 1000;
	cases++;
	for (size_t k = 0; k < m; k++)
		gaps[k] = next() % 8 ? (uint32_t)(next() % 5) : (uint32_t)next();
	if (m)
		gaps[m - 1] = UINT32_MAX;
	dcr_gap_positions(gaps, m, first, cpos);
	put(dg, gaps, m * 4);
	CHECK(!dcr_cuda_positions_scratch(m, &sb, &e), "positions scratch: %s", e.msg);
	scr = dev(sb);
	CHECK(!dcr_cuda_positions(dg, m, first, dp, scr, sb, stream, &e), "positions: %s", e.msg);
	get(gpos, dp, m * 8);
	for (size_t k = 0; k < m; k++)
		CHECK(gpos[k] == cpos[k], "positions of %zu gaps: %zu is %llu, not %llu", m, k,
		      (unsigned long long)gpos[k], (unsigned long long)cpos[k]);
out:
	dcr_cuda_free(dg);
	dcr_cuda_free(dp);
	dcr_cuda_free(scr);
	free(gaps), free(cpos), free(gpos);
}

static void check_refusals(void)
{
	void *d = dev(64), *scr = NULL;
	size_t sb = 0;
	cases++;
	CHECK(dcr_cuda_diff_scratch(16, 3, &sb, &e) == -EINVAL, "unit 3 accepted");
	CHECK(!dcr_cuda_diff_scratch(16, 2, &sb, &e), "scratch: %s", e.msg);
	scr = dev(sb);
	CHECK(dcr_cuda_diff((uint8_t *)d + 1, d, 16, 2, DCR_ENC_XOR, (uint64_t *)d, d, 16,
			    (uint64_t *)d, scr, sb, stream, &e) == -EINVAL,
	      "a misaligned diff was accepted");
	CHECK(dcr_cuda_diff(d, d, 16, 2, DCR_ENC_XOR, (uint64_t *)d, d, 16, (uint64_t *)d, scr,
			    sb ? sb - 1 : 0, stream, &e) == -EINVAL || !sb,
	      "too little scratch was accepted");
	CHECK(dcr_cuda_scatter((uint8_t *)d + 2, 4, 4, (uint64_t *)d, d, 1, DCR_ENC_XOR, stream,
			       &e) == -EINVAL,
	      "a misaligned scatter was accepted");
	CHECK(dcr_cuda_scatter(d, 4, 4, (uint64_t *)d, d, 1, 7, stream, &e) == -EINVAL,
	      "a bad encoding was accepted");
	CHECK(dcr_cuda_is_device(d, &e) == 1, "device memory is not device memory");
	CHECK(dcr_cuda_is_device(&sb, &e) == 0, "the stack is device memory");
out:
	dcr_cuda_free(d);
	dcr_cuda_free(scr);
}

/* 2^32 + 7 one-byte units: zeros against zeros with bytes set at chosen
 * positions around 2^31 and 2^32; their positions come back exactly, and
 * a scatter of the masks turns one into the other. */
static void check_large(void)
{
	const uint64_t n = (1ull << 32) + 7;
	static const uint64_t at[] = {0, 1, (1ull << 31) - 1, 1ull << 31, (1ull << 32) - 1,
				      1ull << 32, (1ull << 32) + 1, (1ull << 32) + 6};
	const size_t na = sizeof(at) / sizeof(*at);
	void *da = NULL, *db = NULL, *dpos = NULL, *dval = NULL, *dcnt = NULL, *scr = NULL;
	size_t sb = 0;
	uint64_t count = 0, pos[16];
	uint8_t val[16];
	cases++;
	if (dcr_cuda_malloc(&da, n, &e) || dcr_cuda_malloc(&db, n, &e)) {
		printf("test-gpu: 2^32 + 7 units: skipped, %s\n", e.msg);
		cases--;
		goto out;
	}
	dpos = dev(64 * 8);
	dval = dev(64);
	dcnt = dev(8);
	CHECK(!dcr_cuda_fill(da, 0, n, stream, &e) && !dcr_cuda_fill(db, 0, n, stream, &e),
	      "fill: %s", e.msg);
	for (size_t k = 0; k < na; k++) {
		uint8_t v = (uint8_t)(0x11 * (k + 1));
		CHECK(!dcr_cuda_copy((uint8_t *)db + at[k], &v, 1, DCR_CUDA_H2D, stream, &e) &&
			      !dcr_cuda_sync(stream, &e),
		      "set: %s", e.msg);
	}
	CHECK(!dcr_cuda_diff_scratch(n, 1, &sb, &e), "scratch: %s", e.msg);
	scr = dev(sb);
	CHECK(!dcr_cuda_diff(da, db, n, 1, DCR_ENC_XOR, dpos, dval, 64, dcnt, scr, sb, stream, &e),
	      "diff of 2^32 + 7: %s", e.msg);
	get(&count, dcnt, 8);
	CHECK(count == na, "2^32 + 7: %llu changes, not %zu", (unsigned long long)count, na);
	get(pos, dpos, na * 8);
	get(val, dval, na);
	for (size_t k = 0; k < na; k++)
		CHECK(pos[k] == at[k] && val[k] == (uint8_t)(0x11 * (k + 1)),
		      "2^32 + 7: change %zu at %llu (%02x), not %llu", k, (unsigned long long)pos[k],
		      val[k], (unsigned long long)at[k]);
	CHECK(!dcr_cuda_scatter(da, n, 1, dpos, dval, na, DCR_ENC_XOR, stream, &e),
	      "scatter: %s", e.msg);
	CHECK(!dcr_cuda_diff(da, db, n, 1, DCR_ENC_XOR, dpos, dval, 64, dcnt, scr, sb, stream, &e),
	      "diff after scatter: %s", e.msg);
	get(&count, dcnt, 8);
	CHECK(count == 0, "2^32 + 7: %llu changes left after the scatter", (unsigned long long)count);
	printf("test-gpu: 2^32 + 7 one-byte units: positions past 2^32 exact\n");
out:
	dcr_cuda_free(da);
	dcr_cuda_free(db);
	dcr_cuda_free(dpos);
	dcr_cuda_free(dval);
	dcr_cuda_free(dcnt);
	dcr_cuda_free(scr);
}

int main(int argc, char **argv)
{
	int large = 1, quick = 0;
#ifdef DCR_CUDA_EMULATED
	/* the host stand-in for the kernels (configure --with-cuda=emulate,
	 * scripts/test's sanitized build) proves this program and
	 * lib/core/cuda.c, not the kernels: the small sizes, unless --full;
	 * 8 GiB of host memory only with --large */
	printf("test-gpu: the kernels are emulated on the host (tests/cuda-emu.c)\n");
	quick = 1, large = 0;
#endif
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--no-large"))
			large = 0;
		else if (!strcmp(argv[i], "--large"))
			large = 1;
		else if (!strcmp(argv[i], "--quick"))
			quick = 1, large = 0; /* for compute-sanitizer: small sizes only */
		else if (!strcmp(argv[i], "--full"))
			quick = 0;
		else {
			fprintf(stderr, "usage: test-gpu [--quick|--full] [--large|--no-large]\n");
			return 129;
		}
	if (!dcr_cuda_built()) {
		printf("test-gpu: libdcr was built without CUDA: skipping\n");
		return 77;
	}
	if (dcr_cuda_probe(&e)) {
		printf("test-gpu: %s: skipping\n", e.msg);
		return 77;
	}
	if (dcr_cuda_stream_new(&stream, &e)) {
		fprintf(stderr, "test-gpu: %s\n", e.msg);
		return 1;
	}
	/* ... 2047, 2049, 16383, 16385: around the diff's tiles (16 KiB) for
	 * 8- and 1-byte units */
	static const size_t sizes[] = {0, 1, 2, 3, 7, 31, 32, 33, 127, 255, 256, 257, 1023, 1025,
				       2047, 2049, 4095, 4097, 16383, 16385, 65535, 65537, 100003,
				       (1u << 20) + 1, (1u << 22) + 3};
	static const unsigned rates[] = {0, 1, 30, 500, 1000};
	static const unsigned units[] = {1, 2, 4, 8};
	for (size_t u = 0; u < 4; u++)
		for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++)
			for (size_t j = 0; j < sizeof(rates) / sizeof(*rates); j++)
				if (!quick || (sizes[i] <= 65537 && j % 2 == 0))
					check_random(sizes[i], units[u], rates[j]);
	check_generated(quick ? 100003 : 1000003);
	if (!quick)
		check_generated(1u << 24);
	static const size_t gaps[] = {0, 1, 255, 257, 100003, (1u << 22) + 5};
	for (size_t i = 0; i < sizeof(gaps) / sizeof(*gaps) - (size_t)quick; i++)
		check_positions(gaps[i]);
	check_refusals();
	if (large)
		check_large();
	dcr_cuda_stream_free(stream);
	printf("test-gpu: %d cases, %s\n", cases,
	       failures ? "FAILED" : "all bit-identical to the CPU");
	return failures ? 1 : 0;
}
