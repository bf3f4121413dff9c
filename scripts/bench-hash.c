/* bench-hash.c - BLAKE3's speed a core, on every code path this CPU has.
 *
 * A benchmark, never a test. BLAKE3 is the hash of every tensor digest,
 * state id and payload (dcr-format-delta(5), dcr-format-pack(5)): a third
 * of dcr-diff's and dcr-apply's CPU. For each code path lib/core/blake3.c
 * can take here (portable; AVX2, eight lanes; AVX-512VL, eight lanes with
 * its rotates; AVX-512F, sixteen lanes), it hashes a buffer that stays in
 * cache (default 256 KiB) and one that does not (default 256 MiB), one
 * thread, best of --runs repetitions (each hashing 64 MiB or more), and
 * prints GB/s, and each path against the portable one:
 *
 *   path        in-cache GB/s   memory GB/s   vs portable
 *
 * Every path must give the same digest, or it exits 128.
 *
 *   bench-hash [-c BYTES] [-m BYTES] [-r RUNS]
 *
 * Exit status: 0 done, 128 error, 129 usage error.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/blake3.h"
#include "core/digest.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* GB/s hashing n bytes at p, reps times a run, best of runs; *d the digest */
static double rate(const uint8_t *p, size_t n, int runs, dcr_digest *d)
{
	size_t reps = n >= (64u << 20) ? 1 : (64u << 20) / n;
	double best = 0;
	for (int r = 0; r < runs; r++) {
		double t = now();
		for (size_t k = 0; k < reps; k++)
			dcr_blake3(p, n, d);
		t = now() - t;
		double g = (double)n * (double)reps / t / 1e9;
		if (g > best)
			best = g;
	}
	return best;
}

static size_t size_arg(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
	if (end == s || (shift && end[1]) || (!shift && *end) || !v || v > (1ull << 40) >> shift) {
		fprintf(stderr, "bench-hash: error: bad size '%s'\n", s);
		exit(129);
	}
	return (size_t)(v << shift);
}

int main(int argc, char **argv)
{
	size_t nc = 256u << 10, nm = 256u << 20;
	int runs = 10, c;
	while ((c = getopt(argc, argv, "c:m:r:h")) != -1) {
		switch (c) {
		case 'c': nc = size_arg(optarg); break;
		case 'm': nm = size_arg(optarg); break;
		case 'r':
			runs = atoi(optarg);
			if (runs < 1 || runs > 1000) {
				fprintf(stderr, "bench-hash: error: bad -r '%s'\n", optarg);
				return 129;
			}
			break;
		case 'h':
			printf("usage: bench-hash [-c BYTES] [-m BYTES] [-r RUNS]\n\n"
			       "BLAKE3's speed a core on every code path this CPU has: a buffer\n"
			       "in cache (-c, default 256K) and one from memory (-m, default 256M),\n"
			       "best of RUNS (default 10).\n");
			return 0;
		default: return 129;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "bench-hash: error: no arguments, only options\n");
		return 129;
	}
	size_t n = nc > nm ? nc : nm;
	uint8_t *p = malloc(n);
	if (!p) {
		fprintf(stderr, "bench-hash: error: cannot allocate %zu bytes\n", n);
		return 128;
	}
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		p[i] = (uint8_t)x;
	}
	static const char *names[] = {"portable", "AVX2 x8", "AVX-512VL x8", "AVX-512F x16"};
	dcr_blake3_simd(3); /* the highest the CPU has: what dcr uses */
	int best = dcr_blake3_simd(3);
	printf("BLAKE3, one thread: in cache %zu bytes, from memory %zu bytes, best of %d\n", nc,
	       nm, runs);
	printf("%-14s %14s %14s %12s\n", "path", "in-cache GB/s", "memory GB/s", "vs portable");
	double base = 0;
	dcr_digest d0c, d0m;
	for (int lv = 0; lv <= best; lv++) {
		dcr_blake3_simd(lv);
		dcr_digest dc, dm;
		double rc = rate(p, nc, runs, &dc), rm = rate(p, nm, runs > 3 ? 3 : runs, &dm);
		if (!lv) {
			base = rc;
			d0c = dc;
			d0m = dm;
		} else if (memcmp(&dc, &d0c, sizeof(dc)) || memcmp(&dm, &d0m, sizeof(dm))) {
			fprintf(stderr, "bench-hash: error: the %s path gives another digest\n",
				names[lv]);
			return 128;
		}
		printf("%-14s %14.3f %14.3f %11.2fx%s\n", names[lv], rc, rm, rc / base,
		       lv == best ? "  (dcr's)" : "");
	}
	dcr_blake3_simd(best);
	free(p);
	return 0;
}
