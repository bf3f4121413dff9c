/* bench-codec.c - compare item payload codecs on generated bf16 RL steps.
 *
 * For each target change rate: an fp32 master ~ N(0, 0.02), one Adam-like
 * step (lr * N(0,1), plus weight decay 0.1 * lr * w), both sides rounded to
 * bf16 round-to-nearest-even; lr is calibrated on a sample to hit the rate.
 * Prints, in one run, bytes of zstd -1 over the whole XOR mask, of the
 * xor-zstd and delta codecs, an order-0 entropy estimate (independent
 * positions + empirical XOR value distribution), ratios, and throughputs.
 * Every decode is checked against the input.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "dcr.h"
#include "core/bytes.h"

static uint64_t rng_s;
static uint64_t rng(void) /* splitmix64 */
{
	uint64_t z = (rng_s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}
static double unif(void) { return ((rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static void gauss2(double *a, double *b)
{
	double r = sqrt(-2 * log(unif())), t = 2 * M_PI * unif();
	*a = r * cos(t);
	*b = r * sin(t);
}

static uint16_t bf16(float f) /* round to nearest even; NaN stays NaN */
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* Timings are CPU seconds of this thread: the codecs are single-threaded,
 * and on a shared machine wall time mostly measures the scheduler. */
static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const struct dcr_err *e)
{
	fprintf(stderr, "bench-codec: error: %s: %s\n", what, e ? e->msg : strerror(errno));
	exit(128);
}

/* master and per-element unit update, fixed for the run */
static float *master;
static float *upd;

static size_t step(size_t n, double lr, uint16_t *o, uint16_t *nw)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++) {
		float w = master[i];
		float w2 = w - (float)lr * (upd[i] + 0.1f * w);
		o[i] = bf16(w);
		nw[i] = bf16(w2);
		c += o[i] != nw[i];
	}
	return c;
}

int main(int argc, char **argv)
{
	size_t N = 64u << 20;
	int reps = 3;
	double rates[8] = {0.01, 0.03, 0.05};
	int nrates = 3;
	rng_s = 42;
	int c;
	while ((c = getopt(argc, argv, "n:r:s:t:h")) != -1) {
		switch (c) {
		case 'n': N = strtoull(optarg, NULL, 0); break;
		case 's': rng_s = strtoull(optarg, NULL, 0); break;
		case 't': reps = atoi(optarg); break;
		case 'r': {
			nrates = 0;
			for (char *t = strtok(optarg, ","); t && nrates < 8; t = strtok(NULL, ","))
				rates[nrates++] = atof(t);
			break;
		}
		default:
			printf("usage: bench-codec-run [-n ELEMENTS] [-r RATE,RATE,...] [-s SEED] [-t REPS]\n");
			return c == 'h' ? 0 : 129;
		}
	}
	if (N < 1024 || reps < 1)
		return 129;
	uint64_t seed = rng_s;

	master = malloc(N * sizeof(float));
	upd = malloc(N * sizeof(float));
	uint16_t *o = malloc(N * 2), *nw = malloc(N * 2), *x = malloc(N * 2);
	uint64_t *pos = malloc(N * 8), *ov = malloc(N * 8), *nv = malloc(N * 8);
	uint64_t *dpos = malloc(N * 8), *dnv = malloc(N * 8);
	size_t zcap = ZSTD_compressBound(N * 2);
	uint8_t *z = malloc(zcap);
	if (!master || !upd || !o || !nw || !x || !pos || !ov || !nv || !dpos || !dnv || !z)
		die("out of memory", NULL);
	for (size_t i = 0; i < N; i += 2) {
		double a, b, ua, ub;
		gauss2(&a, &b);
		gauss2(&ua, &ub);
		master[i] = (float)(0.02 * a);
		upd[i] = (float)ua;
		if (i + 1 < N) {
			master[i + 1] = (float)(0.02 * b);
			upd[i + 1] = (float)ub;
		}
	}

	printf("bench-codec: %zu bf16 elements (%.1f MiB dense), seed %llu, best of %d\n",
	       N, N * 2 / 1048576.0, (unsigned long long)seed, reps);
	printf("sizes in bytes; %% of dense; throughput in M changes/s (GB/s of dense bf16 range),\n"
	       "single thread, CPU time (best of runs)\n\n");

	ZSTD_CCtx *cc = ZSTD_createCCtx();
	for (int ri = 0; ri < nrates; ri++) {
		double target = rates[ri];
		/* calibrate lr on a 1M-element prefix: rate is near-linear in lr */
		size_t ns = N < (1u << 20) ? N : (1u << 20);
		double lr = 1e-6;
		for (int it = 0; it < 6; it++) {
			double r = (double)step(ns, lr, o, nw) / ns;
			lr *= r > 0 ? target / r : 10;
		}
		size_t n = step(N, lr, o, nw);
		size_t k = 0;
		for (size_t i = 0; i < N; i++) {
			x[i] = o[i] ^ nw[i];
			if (x[i]) {
				pos[k] = i;
				ov[k] = o[i];
				nv[k] = nw[i];
				k++;
			}
		}

		/* zstd -1 over the whole XOR mask */
		double t0 = now();
		size_t zfull = ZSTD_compressCCtx(cc, z, zcap, x, N * 2, 1);
		double tzfull = now() - t0;
		if (ZSTD_isError(zfull))
			die("zstd", NULL);

		/* order-0 entropy: log2 C(N, n) + n * H(XOR values) */
		double p = (double)n / N;
		double hpos = N * (-(p * log2(p) + (1 - p) * log2(1 - p)));
		uint64_t *hx = calloc(65536, 8);
		for (size_t i = 0; i < n; i++)
			hx[ov[i] ^ nv[i]]++;
		double hval = 0;
		for (int v = 0; v < 65536; v++)
			if (hx[v])
				hval -= hx[v] * log2((double)hx[v] / n);
		free(hx);
		double ent = (hpos + hval) / 8;

		struct { int codec; size_t bytes; double enc, dec, decp; } r[2] = {
			{DCR_CODEC_XOR_ZSTD, 0, 1e9, 1e9, 1e9}, {DCR_CODEC_DELTA, 0, 1e9, 1e9, 1e9}};
		struct dcr_err e;
		/* the codecs alternate inside each repetition, so that both
		 * see the same machine when it is shared and noisy */
		struct dcr_buf bufs[2] = {{0}, {0}};
		for (int t = 0; t < reps; t++) {
			for (int j = 0; j < 2; j++) {
				struct dcr_buf b = bufs[j];
				b.len = 0;
				t0 = now();
				if (dcr_codec_encode(r[j].codec, 2, DCR_DT_BF16, N, n, pos, ov, nv, &b, &e) < 0)
					die("encode", &e);
				double te = now() - t0;
				if (te < r[j].enc)
					r[j].enc = te;
				memset(dpos, 0xff, n * 8);
				t0 = now();
				if (dcr_codec_decode_positions(r[j].codec, b.p, b.len, 2, N, n, dpos, &e) < 0)
					die("decode positions", &e);
				double tp = now() - t0;
				if (tp < r[j].decp)
					r[j].decp = tp;
				if (dcr_codec_decode_values(r[j].codec, b.p, b.len, 2, DCR_DT_BF16, N, n, dpos, ov, dnv, &e) < 0)
					die("decode values", &e);
				double td = now() - t0;
				if (td < r[j].dec)
					r[j].dec = td;
				if (memcmp(dpos, pos, n * 8) || memcmp(dnv, nv, n * 8)) {
					fprintf(stderr, "bench-codec: error: %s does not round-trip\n",
						dcr_codec_name(r[j].codec));
					return 128;
				}
				bufs[j] = b;
			}
		}
		for (int j = 0; j < 2; j++) {
			r[j].bytes = bufs[j].len;
			dcr_buf_free(&bufs[j]);
		}

		double dense = N * 2.0;
		printf("rate %.2f%% (lr %.3g): %zu changes\n", 100.0 * n / N, lr, n);
		printf("  %-26s %12zu  %6.3f%%\n", "zstd -1 of XOR mask", zfull, 100 * zfull / dense);
		printf("  %-26s %12zu  %6.3f%%\n", "xor-zstd (old encoding)", r[0].bytes, 100 * r[0].bytes / dense);
		printf("  %-26s %12zu  %6.3f%%\n", "delta (new encoding)", r[1].bytes, 100 * r[1].bytes / dense);
		printf("  %-26s %12.0f  %6.3f%%   (positions %.0f + values %.0f)\n", "order-0 entropy estimate",
		       ent, 100 * ent / dense, hpos / 8, hval / 8);
		printf("  delta / zstd-mask %.3f (%.1f%% smaller)   delta / xor-zstd %.3f   delta / entropy %.3f\n",
		       (double)r[1].bytes / zfull, 100 * (1 - (double)r[1].bytes / zfull),
		       (double)r[1].bytes / r[0].bytes, r[1].bytes / ent);
		printf("  bits per change: xor-zstd %.2f  delta %.2f  entropy %.2f\n",
		       8.0 * r[0].bytes / n, 8.0 * r[1].bytes / n, 8 * ent / n);
		printf("  zstd -1 of XOR mask: compress %.0f MB/s of dense\n", dense / tzfull / 1e6);
		for (int j = 0; j < 2; j++)
			printf("  %-9s encode %7.1f M/s (%5.2f GB/s)   decode %7.1f M/s (%5.2f GB/s; positions alone %.1f M/s)\n",
			       dcr_codec_name(r[j].codec), n / r[j].enc / 1e6, dense / r[j].enc / 1e9,
			       n / r[j].dec / 1e6, dense / r[j].dec / 1e9, n / r[j].decp / 1e6);
		double se = r[0].enc / r[1].enc, sd = r[0].dec / r[1].dec;
		printf("  delta speed vs xor-zstd: encode %.2fx  decode %.2fx\n", se, sd);
		printf("  target delta <= 0.75x zstd -1 of XOR mask: %s\n",
		       r[1].bytes <= 0.75 * zfull ? "PASS" : "MISS");
		printf("  target delta <= 1.15x entropy estimate:    %s\n",
		       r[1].bytes <= 1.15 * ent ? "PASS" : "MISS");
		printf("  target delta speed >= 0.5x xor-zstd:       %s\n\n",
		       se >= 0.5 && sd >= 0.5 ? "PASS" : "MISS");
		fflush(stdout);
	}
	ZSTD_freeCCtx(cc);
	if (fflush(stdout) || ferror(stdout))
		return 128;
	return 0;
}
