/* bench-codec.c - compare item payload codecs on bf16 RL steps.
 *
 * Two sources of steps:
 *   generated (default): for each target change rate, an fp32 master ~
 *     N(0, 0.02) and one Adam-like step (lr * N(0,1), plus weight decay
 *     0.1 * lr * w), both sides rounded to bf16 round-to-nearest-even; lr
 *     calibrated on a sample to hit the rate;
 *   a pair of checkpoints (-p BASE -q NEW): every tensor the two share
 *     with the same dtype and shape, e.g. real AdamW steps written by
 *     scripts/adamw-steps.py.
 * Either way the step is cut into items of -c elements, as dcr-diff cuts
 * tensors, and every codec codes every item. Prints, in one run: bytes of
 * zstd -1 (and with -z of zstd -19) over the whole XOR mask, of each
 * codec (xor-zstd, delta, classed, and auto: what dcr-diff picks), an
 * order-0 entropy estimate, their ratios, and single-thread throughputs,
 * best of -t runs:
 *   codec:  encode (positions, old and new values -> payload), decode
 *           (payload and the old bits of the range -> positions, new values);
 *   path:   the trainer's side (compare old and new range, gather, encode)
 *           and the receiver's (decode against the range, write the new
 *           values into it).
 * Every decode is checked against the input. With -e, the change rate of
 * stored values by the old value's bf16 exponent.
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
#include "refit/diff.h"

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

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die("out of memory", NULL);
	return p;
}

/* ---- a step, cut into items ----------------------------------------- */

struct item {
	const uint8_t *old, *nw; /* the range's bits before and after */
	uint64_t len;
	unsigned unit;
	int dtype;
	size_t n, at; /* changes, and where they start in the step's arrays */
};

struct step {
	struct item *it;
	size_t nit, cap;
	uint64_t *pos, *ov, *nv; /* every item's changes, item after item */
	size_t n;
	uint64_t elems, bytes; /* dense */
	uint64_t ncap;
};

static void step_add(struct step *s, const uint8_t *old, const uint8_t *nw, uint64_t len,
		     unsigned unit, int dtype, uint64_t chunk)
{
	for (uint64_t a = 0; a < len; a += chunk) {
		uint64_t l = len - a < chunk ? len - a : chunk;
		if (s->nit == s->cap) {
			s->cap = s->cap ? 2 * s->cap : 64;
			s->it = realloc(s->it, s->cap * sizeof(*s->it));
			if (!s->it)
				die("out of memory", NULL);
		}
		if (s->n + l > s->ncap) {
			s->ncap = (s->n + l) * 2;
			s->pos = realloc(s->pos, s->ncap * 8);
			s->ov = realloc(s->ov, s->ncap * 8);
			s->nv = realloc(s->nv, s->ncap * 8);
			if (!s->pos || !s->ov || !s->nv)
				die("out of memory", NULL);
		}
		struct item *it = &s->it[s->nit++];
		*it = (struct item){old + a * unit, nw + a * unit, l, unit, dtype, 0, s->n};
		for (uint64_t i = 0; i < l; i++) {
			uint64_t x = load_unit(it->old + i * unit, unit);
			uint64_t y = load_unit(it->nw + i * unit, unit);
			if (x != y) {
				s->pos[s->n] = i;
				s->ov[s->n] = x;
				s->nv[s->n++] = y;
			}
		}
		it->n = s->n - it->at;
		s->elems += l;
		s->bytes += l * unit;
	}
}

/* ---- measuring ------------------------------------------------------ */

enum { C_XZ, C_DELTA, C_CLASSED, C_AUTO, NC };
static const char *cname[NC] = {"xor-zstd", "delta", "classed", "auto"};

struct result {
	size_t bytes;
	double enc, dec, diffp, applyp; /* best seconds */
	size_t used[4];			 /* items per codec id (auto) */
};

static int encode(int c, const struct step *s, const struct item *it, struct dcr_buf *b,
		  struct dcr_err *e)
{
	const uint64_t *pos = s->pos + it->at, *ov = s->ov + it->at, *nv = s->nv + it->at;
	if (c == C_AUTO)
		return dcr_codec_choose_range(0, it->unit, it->dtype, it->len, it->n, pos, ov, nv,
					      it->old, b, e);
	int id = c == C_XZ ? DCR_CODEC_XOR_ZSTD : c == C_DELTA ? DCR_CODEC_DELTA : DCR_CODEC_CLASSED;
	int r = dcr_codec_encode_range(id, it->unit, it->dtype, it->len, it->n, pos, ov, nv, it->old,
				       b, e);
	return r < 0 ? r : id;
}

static void measure(const struct step *s, int reps, struct result *res)
{
	struct dcr_err e;
	uint64_t maxlen = 0, maxn = 0;
	for (size_t k = 0; k < s->nit; k++) {
		maxlen = s->it[k].len > maxlen ? s->it[k].len : maxlen;
		maxn = s->it[k].n > maxn ? s->it[k].n : maxn;
	}
	uint64_t *dpos = xmalloc((maxlen + 1) * 8), *dnv = xmalloc((maxlen + 1) * 8);
	uint64_t *xp = xmalloc((maxlen + 1) * 8), *xv = xmalloc((maxlen + 1) * 8);
	uint64_t *xo = xmalloc((maxlen + 1) * 8);
	uint8_t *work = xmalloc(maxlen * 8);
	struct dcr_buf *bufs = calloc(s->nit * NC, sizeof(*bufs));
	int *ids = calloc(s->nit * NC, sizeof(int));
	if (!bufs || !ids)
		die("out of memory", NULL);
	for (int c = 0; c < NC; c++) {
		res[c] = (struct result){0, 1e9, 1e9, 1e9, 1e9, {0}};
	}
	/* the codecs alternate inside each repetition, so that all see the
	 * same machine when it is shared and noisy */
	for (int t = 0; t < reps; t++) {
		for (int c = 0; c < NC; c++) {
			double te = 0, td = 0, tdp = 0, tap = 0;
			for (size_t k = 0; k < s->nit; k++) {
				const struct item *it = &s->it[k];
				struct dcr_buf *b = &bufs[k * NC + c];
				b->len = 0;
				double t0 = now();
				int id = encode(c, s, it, b, &e);
				te += now() - t0;
				if (id < 0)
					die(cname[c], &e);
				ids[k * NC + c] = id;
				t0 = now();
				if (dcr_codec_decode_range(id, b->p, b->len, it->unit, it->len, it->n,
							   it->old, dpos, dnv, &e) < 0)
					die("decode", &e);
				td += now() - t0;
				if (memcmp(dpos, s->pos + it->at, it->n * 8) ||
				    memcmp(dnv, s->nv + it->at, it->n * 8)) {
					fprintf(stderr, "bench-codec: error: %s does not round-trip\n",
						cname[c]);
					exit(128);
				}
				/* the trainer's side: compare, gather, encode */
				t0 = now();
				size_t n = dcr_scan_changes(it->old, it->nw, it->len * it->unit, it->unit,
							    xp, xv);
				for (size_t i = 0; i < n; i++) {
					xo[i] = load_unit(it->old + xp[i] * it->unit, it->unit);
					xv[i] ^= xo[i];
				}
				b->len = 0;
				int id2;
				if (c == C_AUTO)
					id2 = dcr_codec_choose_range(0, it->unit, it->dtype, it->len, n, xp,
								     xo, xv, it->old, b, &e);
				else
					id2 = dcr_codec_encode_range(id, it->unit, it->dtype, it->len, n,
								     xp, xo, xv, it->old, b, &e);
				tdp += now() - t0;
				if (id2 < 0 || n != it->n)
					die("diff path", &e);
				/* the receiver's side: decode against the range, write */
				memcpy(work, it->old, it->len * it->unit);
				t0 = now();
				if (dcr_codec_decode_range(id, b->p, b->len, it->unit, it->len, n, work,
							   dpos, dnv, &e) < 0)
					die("apply path", &e);
				dcr_scatter(work, it->unit, dpos, dnv, n, 0);
				tap += now() - t0;
				if (memcmp(work, it->nw, it->len * it->unit))
					die("apply path gives other bits", NULL);
			}
			if (te < res[c].enc)
				res[c].enc = te;
			if (td < res[c].dec)
				res[c].dec = td;
			if (tdp < res[c].diffp)
				res[c].diffp = tdp;
			if (tap < res[c].applyp)
				res[c].applyp = tap;
		}
	}
	for (int c = 0; c < NC; c++)
		for (size_t k = 0; k < s->nit; k++) {
			res[c].bytes += bufs[k * NC + c].len;
			int id = ids[k * NC + c];
			if (id >= 0 && id < 4)
				res[c].used[id]++;
			dcr_buf_free(&bufs[k * NC + c]);
		}
	free(bufs);
	free(ids);
	free(dpos);
	free(dnv);
	free(xp);
	free(xv);
	free(xo);
	free(work);
}

/* The receiver's journal codes every resolved change as an overwrite in
 * RAW (new bits against zero): its encode and decode (positions and
 * values), best of reps, in seconds for the whole step. */
static void measure_raw(const struct step *s, int reps, double *enc, double *dec)
{
	struct dcr_err e;
	struct dcr_buf b = {0};
	uint64_t maxn = 1;
	for (size_t k = 0; k < s->nit; k++)
		maxn = s->it[k].n > maxn ? s->it[k].n : maxn;
	uint64_t *dpos = xmalloc(maxn * 8), *dnv = xmalloc(maxn * 8);
	*enc = *dec = 1e9;
	for (int t = 0; t < reps; t++) {
		double te = 0, td = 0;
		for (size_t k = 0; k < s->nit; k++) {
			const struct item *it = &s->it[k];
			const uint64_t *pos = s->pos + it->at, *nv = s->nv + it->at;
			b.len = 0;
			double t0 = now();
			if (dcr_codec_encode(DCR_CODEC_RAW, it->unit, it->dtype, it->len, it->n, pos,
					     NULL, nv, &b, &e) < 0)
				die("raw", &e);
			te += now() - t0;
			t0 = now();
			if (dcr_codec_decode_range(DCR_CODEC_RAW, b.p, b.len, it->unit, it->len, it->n,
						   NULL, dpos, dnv, &e) < 0)
				die("raw decode", &e);
			td += now() - t0;
			if (memcmp(dpos, pos, it->n * 8) || memcmp(dnv, nv, it->n * 8))
				die("raw does not round-trip", NULL);
		}
		*enc = te < *enc ? te : *enc;
		*dec = td < *dec ? td : *dec;
	}
	dcr_buf_free(&b);
	free(dpos);
	free(dnv);
}

/* zstd of the whole XOR mask at level lv; the mask is built item by item. */
static size_t zstd_mask(const struct step *s, int lv, double *secs)
{
	uint8_t *x = xmalloc(s->bytes);
	size_t o = 0;
	for (size_t k = 0; k < s->nit; k++) {
		const struct item *it = &s->it[k];
		for (uint64_t i = 0; i < it->len * it->unit; i++)
			x[o + i] = it->old[i] ^ it->nw[i];
		o += it->len * it->unit;
	}
	size_t cap = ZSTD_compressBound(s->bytes);
	uint8_t *z = xmalloc(cap);
	double t0 = now();
	size_t zl = ZSTD_compress(z, cap, x, s->bytes, lv);
	*secs = now() - t0;
	if (ZSTD_isError(zl))
		die("zstd", NULL);
	free(x);
	free(z);
	return zl;
}

/* Order-0 entropy: log2 C(N, n) + n * H(XOR values), for 2-byte units. */
static double entropy(const struct step *s, double *hpos, double *hval)
{
	double N = (double)s->elems, n = (double)s->n, p = n / N;
	*hpos = n ? N * (-(p * log2(p) + (1 - p) * log2(1 - p))) : 0;
	uint64_t *hx = calloc(65536, 8);
	if (!hx)
		die("out of memory", NULL);
	for (size_t i = 0; i < s->n; i++)
		hx[(s->ov[i] ^ s->nv[i]) & 0xffff]++;
	*hval = 0;
	for (int v = 0; v < 65536; v++)
		if (hx[v])
			*hval -= hx[v] * log2((double)hx[v] / n);
	free(hx);
	return (*hpos + *hval) / 8;
}

/* Change rate of bf16 items by the old value's exponent field. */
static void curve(const struct step *s)
{
	uint64_t all[256] = {0}, chg[256] = {0};
	for (size_t k = 0; k < s->nit; k++) {
		const struct item *it = &s->it[k];
		if (it->dtype != DCR_DT_BF16)
			continue;
		for (uint64_t i = 0; i < it->len; i++)
			all[(get_le16(it->old + 2 * i) >> 7) & 0xff]++;
		for (size_t i = 0; i < it->n; i++)
			chg[(s->ov[it->at + i] >> 7) & 0xff]++;
	}
	printf("  change rate by old exponent (bf16; exponent: |x| in [2^(e-127), 2^(e-126))):\n");
	printf("  %5s %12s %8s %9s\n", "e", "values", "share", "changed");
	uint64_t tot = 0;
	for (int v = 0; v < 256; v++)
		tot += all[v];
	for (int v = 0; v < 256; v++)
		if (all[v] * 2000 >= tot || chg[v] * 2000 >= s->n)
			printf("  %5d %12llu %7.2f%% %8.3f%%\n", v, (unsigned long long)all[v],
			       100.0 * all[v] / tot, all[v] ? 100.0 * chg[v] / all[v] : 0.0);
}

static void report(const struct step *s, int reps, int z19, double target, int show_curve)
{
	struct result r[NC];
	measure(s, reps, r);
	double tz1, tz19 = 0;
	size_t z1 = zstd_mask(s, 1, &tz1), z19b = z19 ? zstd_mask(s, 19, &tz19) : 0;
	double hpos, hval, ent = entropy(s, &hpos, &hval);
	double dense = (double)s->bytes;
	printf("%zu changes in %llu values (%.3f%%), %zu items\n", s->n,
	       (unsigned long long)s->elems, 100.0 * s->n / s->elems, s->nit);
	printf("  %-26s %12zu  %6.3f%%\n", "zstd -1 of XOR mask", z1, 100 * z1 / dense);
	if (z19)
		printf("  %-26s %12zu  %6.3f%%\n", "zstd -19 of XOR mask", z19b, 100 * z19b / dense);
	for (int c = 0; c < NC; c++)
		printf("  %-26s %12zu  %6.3f%%   %.3fx xor-zstd\n", cname[c], r[c].bytes,
		       100 * r[c].bytes / dense, (double)r[c].bytes / r[0].bytes);
	printf("  %-26s %12.0f  %6.3f%%   (positions %.0f + values %.0f)\n",
	       "order-0 entropy estimate", ent, 100 * ent / dense, hpos / 8, hval / 8);
	printf("  auto chose: xor-zstd %zu, delta %zu, classed %zu items\n", r[C_AUTO].used[1],
	       r[C_AUTO].used[2], r[C_AUTO].used[3]);
	printf("  auto / delta %.3f (%.1f%% smaller)   auto / zstd-mask %.3f   bits per change: auto %.2f\n",
	       (double)r[C_AUTO].bytes / r[C_DELTA].bytes,
	       100 * (1 - (double)r[C_AUTO].bytes / r[C_DELTA].bytes),
	       (double)r[C_AUTO].bytes / z1, 8.0 * r[C_AUTO].bytes / (s->n ? s->n : 1));
	printf("  throughput, GB/s of dense (M changes/s); single thread, best of %d:\n", reps);
	printf("  %-9s %22s %22s %22s %22s\n", "", "encode", "decode", "diff path", "apply path");
	for (int c = 0; c < NC; c++) {
		printf("  %-9s", cname[c]);
		double t[4] = {r[c].enc, r[c].dec, r[c].diffp, r[c].applyp};
		for (int j = 0; j < 4; j++)
			printf("   %7.2f (%7.1f M/s)", dense / t[j] / 1e9, s->n / t[j] / 1e6);
		printf("\n");
	}
	double rawe, rawd;
	measure_raw(s, reps, &rawe, &rawd);
	printf("  %-9s   %7.2f (%7.1f M/s)   %7.2f (%7.1f M/s)   (the receiver's journal: overwrites)\n",
	       "raw", dense / rawe / 1e9, s->n / rawe / 1e6, dense / rawd / 1e9, s->n / rawd / 1e6);
	for (int c = 1; c < NC; c++)
		printf("  %-8s vs xor-zstd: encode %.2fx decode %.2fx  diff path %.2fx apply path %.2fx\n",
		       cname[c], r[0].enc / r[c].enc, r[0].dec / r[c].dec, r[0].diffp / r[c].diffp,
		       r[0].applyp / r[c].applyp);
	const struct result *a = &r[C_AUTO];
	int speed = r[0].enc / a->enc >= 0.5 && r[0].dec / a->dec >= 0.5;
	int pspeed = r[0].diffp / a->diffp >= 0.5 && r[0].applyp / a->applyp >= 0.5;
	printf("  target auto <= 0.75x zstd -1 of XOR mask:        %s\n",
	       a->bytes <= 0.75 * z1 ? "PASS" : "MISS");
	if (target > 0)
		printf("  target auto <= %.2f%% of dense:                  %s\n", target,
		       a->bytes <= target / 100 * dense ? "PASS" : "MISS");
	printf("  target auto codec speed >= 0.5x xor-zstd:        %s\n", speed ? "PASS" : "MISS");
	printf("  target auto path speed >= 0.5x xor-zstd's:       %s\n\n", pspeed ? "PASS" : "MISS");
	if (show_curve)
		curve(s);
	fflush(stdout);
}

/* ---- sources -------------------------------------------------------- */

static float *master, *upd;

static size_t gen_step(size_t n, double lr, uint16_t *o, uint16_t *nw)
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

static void generated(size_t N, const double *rates, int nrates, uint64_t chunk, int reps,
		      int z19, int show_curve)
{
	uint64_t seed = rng_s;
	master = xmalloc(N * sizeof(float));
	upd = xmalloc(N * sizeof(float));
	uint16_t *o = xmalloc(N * 2), *nw = xmalloc(N * 2);
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
	printf("bench-codec: generated steps, %zu bf16 values (%.1f MiB dense), seed %llu, items of %llu\n\n",
	       N, N * 2 / 1048576.0, (unsigned long long)seed, (unsigned long long)chunk);
	for (int ri = 0; ri < nrates; ri++) {
		/* calibrate lr on a 1M-element prefix: rate is near-linear in lr */
		size_t ns = N < (1u << 20) ? N : (1u << 20);
		double lr = 1e-6;
		for (int it = 0; it < 6; it++) {
			double r = (double)gen_step(ns, lr, o, nw) / ns;
			lr *= r > 0 ? rates[ri] / r : 10;
		}
		gen_step(N, lr, o, nw);
		struct step s = {0};
		step_add(&s, (const uint8_t *)o, (const uint8_t *)nw, N, 2, DCR_DT_BF16, chunk);
		printf("rate %.2f%% (lr %.3g): ", 100.0 * rates[ri], lr);
		report(&s, reps, z19, 0, show_curve);
		free(s.it);
		free(s.pos);
		free(s.ov);
		free(s.nv);
	}
	free(master);
	free(upd);
	free(o);
	free(nw);
}

static void pair(const char *a, const char *b, uint64_t chunk, int reps, int z19, double target,
		 int show_curve)
{
	struct dcr_ckpt *ca, *cb;
	struct dcr_err e = {0};
	if (dcr_ckpt_open(a, &ca, &e) || dcr_ckpt_open(b, &cb, &e))
		die("cannot open the pair", &e);
	struct step s = {0};
	size_t skipped = 0;
	for (size_t i = 0; i < cb->ntensors; i++) {
		const struct dcr_ckpt_tensor *nt = &cb->tensors[i];
		const struct dcr_tensor_info *ni = nt->info;
		const struct dcr_ckpt_tensor *ot = dcr_ckpt_find(ca, ni->name);
		if (!dcr_ckpt_tensor_is(ot, ni->dtype, ni->ndim, ni->shape)) {
			skipped++;
			continue;
		}
		unsigned unit = dcr_dtype_unit(ni->dtype);
		step_add(&s, ot->data, nt->data, dcr_tensor_bytes(ni) / unit, unit, ni->dtype, chunk);
	}
	printf("bench-codec: %s -> %s, %.1f MiB dense, items of %llu%s\n\n", a, b,
	       s.bytes / 1048576.0, (unsigned long long)chunk,
	       skipped ? " (tensors not in both, skipped)" : "");
	report(&s, reps, z19, target, show_curve);
	dcr_ckpt_close(ca);
	dcr_ckpt_close(cb);
}

int main(int argc, char **argv)
{
	size_t N = 64u << 20;
	int reps = 3, z19 = 0, show_curve = 0;
	double rates[8] = {0.01, 0.03, 0.05}, target = 0;
	int nrates = 3;
	uint64_t chunk = 1u << 20;
	const char *pa = NULL, *pb = NULL;
	rng_s = 42;
	int c;
	while ((c = getopt(argc, argv, "n:r:s:t:c:p:q:g:zeh")) != -1) {
		switch (c) {
		case 'n': N = strtoull(optarg, NULL, 0); break;
		case 's': rng_s = strtoull(optarg, NULL, 0); break;
		case 't': reps = atoi(optarg); break;
		case 'c': chunk = strtoull(optarg, NULL, 0); break;
		case 'p': pa = optarg; break;
		case 'q': pb = optarg; break;
		case 'g': target = atof(optarg); break;
		case 'z': z19 = 1; break;
		case 'e': show_curve = 1; break;
		case 'r': {
			nrates = 0;
			for (char *t = strtok(optarg, ","); t && nrates < 8; t = strtok(NULL, ","))
				rates[nrates++] = atof(t);
			break;
		}
		default:
			printf("usage: bench-codec-run [-n ELEMENTS] [-r RATE,...] [-s SEED] [-t REPS] [-c CHUNK]\n"
			       "                      [-p BASE -q NEW] [-g TARGET%%] [-z] [-e]\n");
			return c == 'h' ? 0 : 129;
		}
	}
	if (N < 1024 || reps < 1 || chunk < 1 || nrates < 1 || !pa != !pb)
		return 129;
	if (pa)
		pair(pa, pb, chunk, reps, z19, target, show_curve);
	else
		generated(N, rates, nrates, chunk, reps, z19, show_curve);
	if (fflush(stdout) || ferror(stdout))
		return 128;
	return 0;
}
