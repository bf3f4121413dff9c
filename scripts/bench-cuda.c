/* bench-cuda.c - the GPU diff and apply next to a device-to-device memcpy
 * of the same bytes and to the CPU path, in one run (scripts/bench-cuda).
 *
 * Per unit width, a random tensor A of --bytes bytes and, per change rate,
 * B: A with that share of its units changed in their low bits (positions
 * drawn with geometric gaps). Timed, best of --runs, each run between two
 * stream synchronizations:
 *   copy    cudaMemcpy device to device of A (bytes read + written: 2 |A|)
 *   diff    dcr_cuda_diff(A, B) into positions and masks (bytes read: 2 |A|)
 *   scatter dcr_cuda_scatter of the changes' new units into a copy of A
 *   apply   the in-memory apply's device write: the changes as gaps and
 *           units copied from page-locked host memory, dcr_cuda_positions,
 *           dcr_cuda_scatter
 *   cpu     the CPU path on the same data: dcr_scatter of the same
 *           positions and units into a host copy of A (one thread, as the
 *           file path's replay)
 * Every result is checked (the count, and B after the scatters).
 * Targets, marked PASS/MISS: diff at 3% >= 0.6 of the copy's bandwidth;
 * apply at 3% >= 10x faster than the CPU. Exit 0 when the run completed
 * (whatever PASS/MISS says), 77 without a device, 128 on error, 129 usage.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dcr.h"
#include "core/bytes.h"
#ifdef HAVE_CUDA
#include "dcr_cuda.h" /* dk_diff's other methods, timed beside */
#endif

static uint64_t rng_s = 42;
static uint64_t rng(void) /* splitmix64 */
{
	uint64_t z = (rng_s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct dcr_err e;
static void *stream;

static void need(int r)
{
	if (r) {
		fprintf(stderr, "bench-cuda: error: %s\n", e.msg);
		exit(128);
	}
}

static void *dmalloc(size_t n)
{
	void *p;
	need(dcr_cuda_malloc(&p, n, &e));
	return p;
}

static void *hmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		fprintf(stderr, "bench-cuda: error: out of host memory\n");
		exit(128);
	}
	return p;
}

static double gbps(double bytes, double s)
{
	return s > 0 ? bytes / s / 1e9 : 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"bytes", required_argument, NULL, 'b'}, {"rates", required_argument, NULL, 'r'},
		{"units", required_argument, NULL, 'u'}, {"runs", required_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},	 {NULL, 0, NULL, 0},
	};
	uint64_t bytes = 1ull << 30;
	int runs = 5, c;
	double rates[8] = {0.005, 0.03, 0.10};
	int nrates = 3;
	unsigned units[4] = {1, 2, 4, 8};
	int nunits = 4;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'b': bytes = strtoull(optarg, NULL, 0); break;
		case 'n': runs = atoi(optarg); break;
		case 'r':
			nrates = 0;
			for (char *s = strtok(optarg, ","); s && nrates < 8; s = strtok(NULL, ","))
				rates[nrates++] = atof(s);
			break;
		case 'u':
			nunits = 0;
			for (char *s = strtok(optarg, ","); s && nunits < 4; s = strtok(NULL, ","))
				units[nunits++] = (unsigned)atoi(s);
			break;
		case 'h':
			printf("usage: bench-cuda-run [--bytes N] [--rates R,...] [--units U,...] [--runs N]\n");
			return 0;
		default: return 129;
		}
	}
	if (runs < 1 || !nrates || !nunits || bytes < 4096)
		return 129;
	if (dcr_cuda_probe(&e)) {
		printf("bench-cuda: %s: nothing to measure\n", e.msg);
		return 77;
	}
	char name[256];
	need(dcr_cuda_device_name(name, sizeof(name), &e));
	need(dcr_cuda_stream_new(&stream, &e));
	printf("bench-cuda: device %s; %llu bytes a tensor, best of %d runs\n", name,
	       (unsigned long long)bytes, runs);
	double maxrate = 0;
	for (int i = 0; i < nrates; i++)
		maxrate = rates[i] > maxrate ? rates[i] : maxrate;

	for (int ui = 0; ui < nunits; ui++) {
		unsigned unit = units[ui];
		uint64_t n = bytes / unit, nb = n * unit;
		size_t cap = (size_t)(n * maxrate * 1.5) + 4096;
		uint8_t *a = hmalloc(nb), *b = hmalloc(nb), *h = hmalloc(nb);
		uint64_t *pos = hmalloc(cap * 8), *val = hmalloc(cap * 8);
		uint32_t *gaps = NULL;
		uint8_t *units_h = NULL;
		need(dcr_cuda_host_alloc((void **)&gaps, cap * 4, &e));
		need(dcr_cuda_host_alloc((void **)&units_h, cap * unit, &e));
		for (uint64_t i = 0; i < nb; i += 8) {
			uint64_t r = rng();
			memcpy(a + i, &r, nb - i < 8 ? nb - i : 8);
		}
		void *da = dmalloc(nb), *db = dmalloc(nb), *dc = dmalloc(nb), *dpos = dmalloc(cap * 8);
		void *dval = dmalloc(cap * unit), *dcnt = dmalloc(8), *dgaps = dmalloc(cap * 4);
		size_t sb = 0, pb = 0;
		need(dcr_cuda_diff_scratch(n, unit, &sb, &e));
		need(dcr_cuda_positions_scratch(cap, &pb, &e));
		void *scr = dmalloc(sb), *pscr = dmalloc(pb);
		need(dcr_cuda_copy(da, a, nb, DCR_CUDA_H2D, stream, &e));
		need(dcr_cuda_sync(stream, &e));

		double tcopy = 1e30;
		for (int k = 0; k < runs; k++) {
			double t0 = now();
			need(dcr_cuda_copy(dc, da, nb, DCR_CUDA_D2D, stream, &e));
			need(dcr_cuda_sync(stream, &e));
			double t = now() - t0;
			tcopy = t < tcopy ? t : tcopy;
		}
		printf("unit %u, %llu units: copy %.3f ms, %.0f GB/s (read + written)\n", unit,
		       (unsigned long long)n, tcopy * 1e3, gbps(2.0 * nb, tcopy));

		for (int ri = 0; ri < nrates; ri++) {
			double rate = rates[ri];
			if (rate <= 0 || rate > 0.5)
				continue;
			/* B: A with about rate of its units changed in their low bits */
			memcpy(b, a, nb);
			size_t m = 0;
			uint64_t p = 0, mean = (uint64_t)(1 / rate);
			for (;;) {
				p += rng() % (2 * mean) + (m ? 1 : 0);
				if (p >= n || m >= cap)
					break;
				uint64_t x = load_unit(b + p * unit, unit);
				uint64_t y = x ^ (1 + rng() % 3);
				store_unit(b + p * unit, unit, y);
				pos[m] = p;
				val[m] = y & (unit == 8 ? ~0ull : (1ull << (8 * unit)) - 1);
				gaps[m] = (uint32_t)(p - (m ? pos[m - 1] + 1 : 0));
				store_unit(units_h + m * unit, unit, val[m]);
				m++;
			}
			need(dcr_cuda_copy(db, b, nb, DCR_CUDA_H2D, stream, &e));
			need(dcr_cuda_sync(stream, &e));

			double tdiff = 1e30;
			uint64_t count = 0;
			for (int k = 0; k < runs; k++) {
				double t0 = now();
				need(dcr_cuda_diff(da, db, n, unit, DCR_ENC_OVERWRITE, dpos, dval, cap, dcnt,
						   scr, sb, stream, &e));
				need(dcr_cuda_sync(stream, &e));
				double t = now() - t0;
				tdiff = t < tdiff ? t : tdiff;
			}
			need(dcr_cuda_copy(&count, dcnt, 8, DCR_CUDA_D2H, stream, &e));
			need(dcr_cuda_sync(stream, &e));
			/* the other methods, each checked by its count */
			static const char *const other_name[] = {
				"by tiles (dcr_cuda.cu's kernel, not yet libdcr's)",
				"by triples (cub::DeviceSelect::If)"};
			double tother[2] = {0, 0};
#ifdef HAVE_CUDA
			static const int others[] = {DK_DIFF_TILES, DK_DIFF_TRIPLES};
			for (int o = 0; o < 2; o++) {
				tother[o] = 1e30;
				for (int k = 0; k < runs; k++) {
					size_t tb = sb;
					uint64_t c2 = 0;
					double t0 = now();
					int err = dk_diff(da, db, n, unit, 1, dpos, dval, cap,
							  (unsigned long long *)dcnt, scr, &tb,
							  others[o], stream);
					need(dcr_cuda_sync(stream, &e));
					double t = now() - t0;
					if (err) {
						fprintf(stderr, "bench-cuda: error: %s: %s\n",
							other_name[o], dk_error_string(err));
						return 128;
					}
					need(dcr_cuda_copy(&c2, dcnt, 8, DCR_CUDA_D2H, stream, &e));
					need(dcr_cuda_sync(stream, &e));
					if (c2 != m) {
						fprintf(stderr,
							"bench-cuda: error: %s: %llu changes\n",
							other_name[o], (unsigned long long)c2);
						return 128;
					}
					tother[o] = t < tother[o] ? t : tother[o];
				}
			}
			/* the positions and units again, as the scatters below take them */
			need(dcr_cuda_diff(da, db, n, unit, DCR_ENC_OVERWRITE, dpos, dval, cap, dcnt, scr,
					   sb, stream, &e));
			need(dcr_cuda_sync(stream, &e));
#endif
			if (count != m) {
				fprintf(stderr, "bench-cuda: error: the diff found %llu changes, not %zu\n",
					(unsigned long long)count, m);
				return 128;
			}

			/* scatter: the diff's positions and new units into a copy of A */
			double tscat = 1e30, tapply = 1e30, tcpu = 1e30;
			for (int k = 0; k < runs; k++) {
				need(dcr_cuda_copy(dc, da, nb, DCR_CUDA_D2D, stream, &e));
				need(dcr_cuda_sync(stream, &e));
				double t0 = now();
				need(dcr_cuda_scatter(dc, n, unit, dpos, dval, m, DCR_ENC_OVERWRITE, stream,
						      &e));
				need(dcr_cuda_sync(stream, &e));
				double t = now() - t0;
				tscat = t < tscat ? t : tscat;
			}
			/* apply: gaps and units from host memory, positions, scatter */
			for (int k = 0; k < runs; k++) {
				need(dcr_cuda_copy(dc, da, nb, DCR_CUDA_D2D, stream, &e));
				need(dcr_cuda_sync(stream, &e));
				double t0 = now();
				need(dcr_cuda_copy(dgaps, gaps, m * 4, DCR_CUDA_H2D, stream, &e));
				need(dcr_cuda_copy(dval, units_h, m * unit, DCR_CUDA_H2D, stream, &e));
				need(dcr_cuda_positions(dgaps, m, 0, dpos, pscr, pb, stream, &e));
				need(dcr_cuda_scatter(dc, n, unit, dpos, dval, m, DCR_ENC_OVERWRITE, stream,
						      &e));
				need(dcr_cuda_sync(stream, &e));
				double t = now() - t0;
				tapply = t < tapply ? t : tapply;
			}
			need(dcr_cuda_copy(h, dc, nb, DCR_CUDA_D2H, stream, &e));
			need(dcr_cuda_sync(stream, &e));
			if (memcmp(h, b, nb)) {
				fprintf(stderr, "bench-cuda: error: the device apply did not give B\n");
				return 128;
			}
			for (int k = 0; k < runs; k++) {
				memcpy(h, a, nb);
				double t0 = now();
				dcr_scatter(h, unit, pos, val, m, 0);
				double t = now() - t0;
				tcpu = t < tcpu ? t : tcpu;
			}
			if (memcmp(h, b, nb)) {
				fprintf(stderr, "bench-cuda: error: the CPU scatter did not give B\n");
				return 128;
			}
			double ratio = tcopy / tdiff, speed = tcpu / tapply;
			int at3 = rate > 0.0299 && rate < 0.0301;
			printf("  rate %5.2f%% (%zu changes, %.2f%%): diff %.3f ms, %.0f GB/s = %.2f x copy%s\n",
			       100 * rate, m, 100.0 * m / n, tdiff * 1e3, gbps(2.0 * nb, tdiff), ratio,
			       at3 ? (ratio >= 0.6 ? "  [target >= 0.60: PASS]"
						   : "  [target >= 0.60: MISS]")
				   : "");
			for (int o = 0; o < 2; o++)
				if (tother[o] > 0)
					printf("    diff %s %.3f ms, %.2f x copy\n",
					       other_name[o], tother[o] * 1e3, tcopy / tother[o]);
			printf("    scatter %.3f ms (%.0f M changes/s); apply from host gaps %.3f ms; cpu %.3f ms: apply %.1fx the cpu, scatter %.1fx%s\n",
			       tscat * 1e3, m / tscat / 1e6, tapply * 1e3, tcpu * 1e3, speed,
			       tcpu / tscat,
			       at3 ? (speed >= 10 ? "  [target >= 10x: PASS]" : "  [target >= 10x: MISS]")
				   : "");
			fflush(stdout);
		}
		dcr_cuda_free(da), dcr_cuda_free(db), dcr_cuda_free(dc), dcr_cuda_free(dpos);
		dcr_cuda_free(dval), dcr_cuda_free(dcnt), dcr_cuda_free(dgaps);
		dcr_cuda_free(scr), dcr_cuda_free(pscr);
		dcr_cuda_host_free(gaps), dcr_cuda_host_free(units_h);
		free(a), free(b), free(h), free(pos), free(val);
	}
	dcr_cuda_stream_free(stream);
	return 0;
}
