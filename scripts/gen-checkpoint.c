/* gen-checkpoint.c - generate Llama-shaped bf16 checkpoints and realistic
 * RL steps for tests and benchmarks.
 *
 * Every tensor has fp32 master weights. v0 is the master rounded to bf16;
 * each further version applies one Adam step (warm optimizer state, a
 * per-element persistent gradient mean plus noise) to the master and rounds
 * again, so a step changes a few percent of the stored values, mostly by one
 * ULP, as RL post-training does.
 *
 * Output is a function of the seed and the model shape only: every tensor is
 * cut into CHUNK-element streams, each with its own PRNG seeded from (seed,
 * tensor index, chunk index), so the thread count does not matter. All
 * versions are written in one pass, block by block, so memory stays small
 * whatever the checkpoint size.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dcr.h"
#include "core/bytes.h"

/* The generator loops want vectorizing (with -fno-math-errno, set in
 * Makefile.am, for sqrtf); one setting for the whole file so that the small
 * helpers still inline. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#define CHUNK 65536          /* elements per PRNG stream (defines the output) */
#define BLOCK_MAX 32         /* chunks per write block, fewer for many steps */
#define LANES 8              /* interleaved xoshiro256** generators */
#define MAX_STEPS 256        /* every version of a shard is open at once */
#define MAX_SHARDS 99999

static const char *prog = "gen-checkpoint";

/* ---- messages -------------------------------------------------------- */

/* Writers to abort (removing their temp files) if we die. */
static struct dcr_st_writer **dying_writers;
static size_t dying_nwriters;

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	for (size_t i = 0; i < dying_nwriters; i++)
		dcr_st_writer_free(dying_writers[i]); /* NULL or uncommitted */
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: error: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(128);
}

static void usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: error: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	fprintf(stderr, "usage: %s [options] OUTDIR (see %s --help)\n", prog, prog);
	exit(129);
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = dcr_calloc(n, size);
	if (!p)
		die("out of memory");
	return p;
}

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	if (vasprintf(&s, fmt, ap) < 0)
		die("out of memory");
	va_end(ap);
	return s;
}

static uint64_t round_up(uint64_t x, uint64_t q) { return (x + q - 1) / q * q; }

/* ---- random numbers -------------------------------------------------- */

static inline uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* LANES independent xoshiro256** generators, stepped together in vector
 * registers (GCC/clang vector extensions; plain SSE2 is enough). */
typedef uint64_t u64v __attribute__((vector_size(LANES * 8)));

struct rng {
	u64v s0, s1, s2, s3;
};

static void rng_seed(struct rng *r, uint64_t seed, uint64_t tensor, uint64_t chunk)
{
	uint64_t x = seed;
	uint64_t h = splitmix64(&x);
	x = h ^ (tensor * 0xd1b54a32d192ed03ULL);
	h = splitmix64(&x);
	x = h ^ (chunk * 0xa0761d6478bd642fULL);
	for (int i = 0; i < LANES; i++) {
		r->s0[i] = splitmix64(&x);
		r->s1[i] = splitmix64(&x);
		r->s2[i] = splitmix64(&x);
		r->s3[i] = splitmix64(&x) | 1; /* never all zero */
	}
}

#define ROTL(x, k) (((x) << (k)) | ((x) >> (64 - (k))))

/* Fill out with n (a multiple of LANES) random 64-bit words. */
static void rng_fill(struct rng *restrict r, uint16_t *restrict out, size_t n)
{
	u64v s0 = r->s0, s1 = r->s1, s2 = r->s2, s3 = r->s3;
	for (size_t i = 0; i < n; i += LANES) {
		u64v x = s1 + (s1 << 2);         /* s1 * 5 */
		x = ROTL(x, 7);
		x = x + (x << 3);                /* * 9 */
		memcpy(out + 4 * i, &x, sizeof(x)); /* as 16-bit uniforms */
		u64v t = s1 << 17;
		s2 ^= s0;
		s3 ^= s1;
		s1 ^= s2;
		s0 ^= s3;
		s2 ^= t;
		s3 = ROTL(s3, 45);
	}
	r->s0 = s0;
	r->s1 = s1;
	r->s2 = s2;
	r->s3 = s3;
}

/* n approximately standard normals, times scale plus add: each is the sum
 * of `planes` 16-bit uniforms (Irwin-Hall; 4 planes cut the tails at 3.5
 * sigma, 8 at 4.9). The uniforms come in planes of nr entries so that the
 * sums are straight vector adds. Uses r and the scratch word buffer u. */
static void fill_normal(struct rng *r, uint16_t *u, float *restrict out, size_t n,
			    int planes, float scale, float add)
{
	size_t nr = round_up(n, 4 * LANES);
	rng_fill(r, u, planes * nr / 4);
	const uint16_t *restrict p = u;
	double var = planes * (65536.0 * 65536.0 - 1) / 12;
	float mul = (float)(scale / sqrt(var)), sub = planes * 65535.0f / 2;
	if (planes == 2) {
		for (size_t i = 0; i < n; i++) {
			int32_t t = (int32_t)p[i] + p[nr + i];
			out[i] = ((float)t - sub) * mul + add;
		}
	} else if (planes == 4) {
		for (size_t i = 0; i < n; i++) {
			int32_t t = (int32_t)p[i] + p[nr + i] + p[2 * nr + i] + p[3 * nr + i];
			out[i] = ((float)t - sub) * mul + add;
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			int32_t t = (int32_t)p[i] + p[nr + i] + p[2 * nr + i] + p[3 * nr + i] +
				    p[4 * nr + i] + p[5 * nr + i] + p[6 * nr + i] + p[7 * nr + i];
			out[i] = ((float)t - sub) * mul + add;
		}
	}
}

/* ---- bf16 ------------------------------------------------------------ */

/* Round to nearest even; NaN stays NaN (quiet, sign kept), Inf stays Inf,
 * overflow rounds to Inf. */
static inline uint16_t f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
	uint32_t nan = (x >> 16) | 0x0040;
	uint32_t is_nan = -(uint32_t)((x & 0x7fffffffu) > 0x7f800000u);
	return (uint16_t)((rounded & ~is_nan) | (nan & is_nan)); /* no branch: vectorizes */
}

static inline float bf16_to_f32(uint16_t b)
{
	uint32_t x = (uint32_t)b << 16;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

/* The next bf16 value up (toward +Inf) or down. */
static uint16_t bf16_step(uint16_t b, int up)
{
	int neg = b & 0x8000, mag = b & 0x7fff;
	if (mag == 0)
		return up ? 0x0001 : 0x8001;
	if (!neg)
		return (uint16_t)(up ? b + 1 : b - 1);
	return (uint16_t)(up ? b - 1 : b + 1);
}

/* ---- model shape ----------------------------------------------------- */

struct model {
	uint64_t hidden, layers, heads, kv_heads, head_dim, inter, vocab;
};

struct overrides {
	uint64_t hidden, layers, heads, kv_heads, inter, vocab; /* 0 = pick */
};


static void fill_derived(struct model *m, const struct overrides *o)
{
	uint64_t h = m->hidden;
	if (o->heads) {
		m->heads = o->heads;
	} else {
		uint64_t hd = h >= 2048 ? 128 : h >= 128 ? 64 : 32;
		while (hd > 1 && h % hd)
			hd /= 2;
		m->heads = h / hd;
	}
	if (o->kv_heads)
		m->kv_heads = o->kv_heads;
	else
		m->kv_heads = m->heads % 4 == 0 ? m->heads / 4 :
			      m->heads % 2 == 0 ? m->heads / 2 : m->heads;
	m->head_dim = m->heads ? h / m->heads : 0;
	if (o->inter)
		m->inter = o->inter;
	else
		m->inter = round_up(8 * h / 3 + 1, h >= 1024 ? 256 : h >= 256 ? 64 : 32);
}

/* Parameters of one decoder layer. */
static uint64_t layer_params(const struct model *m)
{
	uint64_t h = m->hidden, kv = m->kv_heads * m->head_dim;
	return 2 * h * h + 2 * kv * h + 3 * h * m->inter + 2 * h;
}

static uint64_t model_params(const struct model *m)
{
	return m->layers * layer_params(m) + 2 * m->vocab * m->hidden + m->hidden;
}

#define VOCAB_MIN 64
#define VOCAB_MAX 131072

/* The vocabulary that brings the total closest to target, clamped. */
static uint64_t fill_vocab(const struct model *m, uint64_t target)
{
	uint64_t q = m->hidden >= 256 ? 64 : 8, used = m->layers * layer_params(m) + m->hidden;
	if (used >= target)
		return VOCAB_MIN;
	uint64_t v = (target - used + m->hidden) / (2 * m->hidden); /* rounded */
	v = (v + q / 2) / q * q;
	if (v < VOCAB_MIN)
		v = VOCAB_MIN;
	if (v > VOCAB_MAX)
		v = VOCAB_MAX;
	return v;
}

/* Choose a shape of about `params` parameters: the widest hidden size whose
 * natural depth (hidden/128 layers, at least 2) fills at most 85% of the
 * target, as many layers as fit in those 85%, and the vocabulary for the
 * rest. Explicit overrides are kept as given. */
static void pick_model(struct model *m, const struct overrides *o, uint64_t params)
{
	static const uint64_t widths[] = {
		32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 2560,
		3072, 4096, 5120, 6144, 8192, 12288, 16384,
	};
	size_t nw = sizeof(widths) / sizeof(widths[0]);
	uint64_t budget = params / 100 * 85 + params % 100 * 85 / 100;
	memset(m, 0, sizeof(*m));
	if (o->hidden) {
		m->hidden = o->hidden;
		fill_derived(m, o);
	} else {
		for (size_t i = 0; i < nw; i++) {
			struct model c = { .hidden = widths[i] };
			fill_derived(&c, o);
			if (o->heads && c.hidden % o->heads)
				continue;
			uint64_t depth = o->layers ? o->layers : c.hidden / 128 < 2 ? 2 : c.hidden / 128;
			if (i > 0 && depth * layer_params(&c) > budget)
				break;
			*m = c;
		}
		if (!m->hidden)
			usage_error("no hidden size fits --heads %llu", (unsigned long long)o->heads);
	}
	uint64_t lp = layer_params(m);
	if (o->layers)
		m->layers = o->layers;
	else
		m->layers = budget / lp ? budget / lp : 1;
	if (o->vocab) {
		m->vocab = o->vocab;
		return;
	}
	m->vocab = fill_vocab(m, params);
	if (o->layers)
		return;
	/* Vocabulary clamped: let depth absorb the difference. */
	uint64_t emb = 2 * m->vocab * m->hidden + m->hidden;
	if (m->vocab == VOCAB_MAX && params > emb)
		m->layers = (params - emb + lp / 2) / lp;
	else if (m->vocab == VOCAB_MIN && params > emb)
		m->layers = (params - emb) / lp;
	if (m->layers < 1)
		m->layers = 1;
	m->vocab = fill_vocab(m, params);
}

/* ---- tensors and shards ---------------------------------------------- */

enum { KIND_MATRIX, KIND_NORM };

struct tensor {
	struct dcr_tensor_info info; /* in its shard's layout */
	int kind;
	size_t shard;
};

static void add_tensor(struct tensor *t, size_t *n, char *name, int kind, unsigned ndim,
		       uint64_t d0, uint64_t d1)
{
	struct tensor *x = &t[(*n)++];
	memset(x, 0, sizeof(*x));
	x->info.name = name;
	x->info.dtype = DCR_DT_BF16;
	x->info.ndim = ndim;
	x->info.shape[0] = d0;
	x->info.shape[1] = d1;
	x->info.nelem = ndim == 1 ? d0 : d0 * d1;
	x->kind = kind;
}

static struct tensor *make_tensors(const struct model *m, size_t *count)
{
	size_t n = 0, cap = 3 + 9 * m->layers;
	struct tensor *t = xcalloc(cap, sizeof(*t));
	uint64_t h = m->hidden, q = m->heads * m->head_dim, kv = m->kv_heads * m->head_dim;
	add_tensor(t, &n, xasprintf("model.embed_tokens.weight"), KIND_MATRIX, 2, m->vocab, h);
	for (uint64_t i = 0; i < m->layers; i++) {
		unsigned long long l = i;
		add_tensor(t, &n, xasprintf("model.layers.%llu.self_attn.q_proj.weight", l),
			   KIND_MATRIX, 2, q, h);
		add_tensor(t, &n, xasprintf("model.layers.%llu.self_attn.k_proj.weight", l),
			   KIND_MATRIX, 2, kv, h);
		add_tensor(t, &n, xasprintf("model.layers.%llu.self_attn.v_proj.weight", l),
			   KIND_MATRIX, 2, kv, h);
		add_tensor(t, &n, xasprintf("model.layers.%llu.self_attn.o_proj.weight", l),
			   KIND_MATRIX, 2, h, q);
		add_tensor(t, &n, xasprintf("model.layers.%llu.mlp.gate_proj.weight", l),
			   KIND_MATRIX, 2, m->inter, h);
		add_tensor(t, &n, xasprintf("model.layers.%llu.mlp.up_proj.weight", l),
			   KIND_MATRIX, 2, m->inter, h);
		add_tensor(t, &n, xasprintf("model.layers.%llu.mlp.down_proj.weight", l),
			   KIND_MATRIX, 2, h, m->inter);
		add_tensor(t, &n, xasprintf("model.layers.%llu.input_layernorm.weight", l),
			   KIND_NORM, 1, h, 0);
		add_tensor(t, &n, xasprintf("model.layers.%llu.post_attention_layernorm.weight", l),
			   KIND_NORM, 1, h, 0);
	}
	add_tensor(t, &n, xasprintf("model.norm.weight"), KIND_NORM, 1, h, 0);
	add_tensor(t, &n, xasprintf("lm_head.weight"), KIND_MATRIX, 2, m->vocab, h);
	*count = n;
	return t;
}

/* Cut the tensor sequence into nshards contiguous, non-empty runs of about
 * equal bytes (a tensor goes where its middle byte falls). */
static void assign_shards(struct tensor *t, size_t n, size_t nshards)
{
	uint64_t total = 0, pos = 0;
	for (size_t i = 0; i < n; i++)
		total += 2 * t[i].info.nelem;
	size_t prev = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t b = 2 * t[i].info.nelem;
		size_t s = (size_t)((long double)(pos + b / 2) * nshards / total);
		if (i == 0)
			s = 0;
		else if (s < prev)
			s = prev;
		else if (s > prev + 1)
			s = prev + 1;
		if (s >= nshards)
			s = nshards - 1;
		if (i > 0 && n - 1 - i < nshards - 1 - prev)
			s = prev + 1; /* as many tensors left as shards to fill */
		if (i > 0 && s == prev && n - i <= nshards - 1 - prev)
			s = prev + 1;
		t[i].shard = s;
		prev = s;
		pos += b;
	}
}

/* ---- generation ------------------------------------------------------- */

#define INIT_STD 0.02f
#define NORM_STD 0.02f
#define BETA1 0.9f
#define BETA2 0.999f
#define ADAM_EPS 1e-8f
/* Warm Adam state: with g = mu + N(0,1), m has settled to mu plus noise of
 * variance (1-b1)/(1+b1), and v to about mu^2 + 1. */
#define M_NOISE 0.229f
#define V_NOISE 0.03f

struct gen {
	uint64_t seed;
	unsigned steps;
	float lr;
	int force; /* every value changes every step */
};

struct scratch {
	float *w, *mu, *m, *v, *g;
	uint16_t *u;
};

static void scratch_init(struct scratch *s)
{
	s->w = xcalloc(CHUNK, sizeof(float));
	s->mu = xcalloc(CHUNK, sizeof(float));
	s->m = xcalloc(CHUNK, sizeof(float));
	s->v = xcalloc(CHUNK, sizeof(float));
	s->g = xcalloc(CHUNK, sizeof(float));
	s->u = xcalloc(8 * CHUNK, sizeof(uint16_t)); /* up to 8 planes */
}

static void scratch_free(struct scratch *s)
{
	free(s->w);
	free(s->mu);
	free(s->m);
	free(s->v);
	free(s->g);
	free(s->u);
}

/* Initial master weights and optimizer state of one chunk. */
static void chunk_init(struct rng *r, struct scratch *restrict s, int kind, size_t n)
{
	float *restrict mu = s->mu, *restrict m = s->m, *restrict v = s->v;
	float base = kind == KIND_NORM ? 1.0f : 0.0f, sd = kind == KIND_NORM ? NORM_STD : INIT_STD;
	fill_normal(r, s->u, s->w, n, 8, sd, base);
	fill_normal(r, s->u, mu, n, 4, 1.0f, 0.0f);
	fill_normal(r, s->u, m, n, 2, M_NOISE, 0.0f);
	fill_normal(r, s->u, v, n, 2, V_NOISE, 1.0f);
	for (size_t i = 0; i < n; i++) {
		m[i] += mu[i];
		v[i] *= mu[i] * mu[i] + 1.0f;
	}
}

/* The gradient of the next step. */
static void chunk_grad(struct rng *r, struct scratch *s, size_t n)
{
	fill_normal(r, s->u, s->g, n, 4, 1.0f, 0.0f);
	for (size_t i = 0; i < n; i++)
		s->g[i] += s->mu[i];
}

/* One Adam step of one chunk; returns how many stored values changed. */
static uint64_t chunk_step(struct rng *r, struct scratch *restrict s, size_t n, float lr,
			       const uint16_t *restrict prev, uint16_t *restrict out)
{
	float *restrict w = s->w, *restrict m = s->m, *restrict v = s->v;
	const float *restrict gr = s->g;
	uint32_t changed = 0; /* n <= CHUNK */
	chunk_grad(r, s, n);
	for (size_t i = 0; i < n; i++) {
		float g = gr[i];
		float mi = BETA1 * m[i] + (1.0f - BETA1) * g;
		float vi = BETA2 * v[i] + (1.0f - BETA2) * g * g;
		m[i] = mi;
		v[i] = vi;
		float wi = w[i] - lr * mi / (sqrtf(vi) + ADAM_EPS);
		w[i] = wi;
		uint16_t b = f32_to_bf16(wi);
		out[i] = b;
		changed += b != prev[i];
	}
	return changed;
}

/* For --change 1: move every unchanged value one ULP the way Adam pushes it. */
static void chunk_force(struct scratch *s, size_t n, const uint16_t *prev, uint16_t *out)
{
	for (size_t i = 0; i < n; i++) {
		if (out[i] != prev[i])
			continue;
		out[i] = bf16_step(out[i], s->m[i] < 0.0f);
		s->w[i] = bf16_to_f32(out[i]);
	}
}

static void chunk_round(const float *restrict w, uint16_t *restrict out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = f32_to_bf16(w[i]);
}

/* Generate elements [off, off+n) of tensor `ti` into out[k] for every
 * version k, adding per-step change counts to changed[]. off is a multiple
 * of CHUNK, n at most CHUNK. */
static void gen_chunk(const struct gen *g, struct scratch *s, size_t ti, int kind, uint64_t off,
		      size_t n, uint16_t *const *out, uint64_t *changed)
{
	struct rng r;
	rng_seed(&r, g->seed, ti, off / CHUNK);
	chunk_init(&r, s, kind, n);
	chunk_round(s->w, out[0], n);
	for (unsigned k = 1; k <= g->steps; k++) {
		uint64_t c = chunk_step(&r, s, n, g->lr, out[k - 1], out[k]);
		if (g->force && c < n) {
			chunk_force(s, n, out[k - 1], out[k]);
			c = n;
		}
		changed[k - 1] += c;
	}
}

/* ---- lr calibration --------------------------------------------------- */

/* The learning rate whose first step changes `rate` of the stored values of
 * N(0, 0.02) weights, found by bisection on a fixed sample. It depends on
 * rate only, not on the seed or the model. */
static double calibrate_lr(double rate)
{
	enum { NCAL = 4 * CHUNK };
	float *w0 = xcalloc(NCAL, sizeof(float)), *rr = xcalloc(NCAL, sizeof(float));
	uint16_t *b0 = xcalloc(NCAL, sizeof(uint16_t));
	struct scratch s;
	scratch_init(&s);
	for (size_t c = 0; c < NCAL / CHUNK; c++) {
		struct rng r;
		rng_seed(&r, 0x63616c6962ULL, (uint64_t)-1, c);
		chunk_init(&r, &s, KIND_MATRIX, CHUNK);
		chunk_grad(&r, &s, CHUNK);
		for (size_t i = 0; i < CHUNK; i++) {
			float g = s.g[i];
			float mi = BETA1 * s.m[i] + (1.0f - BETA1) * g;
			float vi = BETA2 * s.v[i] + (1.0f - BETA2) * g * g;
			w0[c * CHUNK + i] = s.w[i];
			b0[c * CHUNK + i] = f32_to_bf16(s.w[i]);
			rr[c * CHUNK + i] = mi / (sqrtf(vi) + ADAM_EPS);
		}
	}
	double lo = log(1e-12), hi = log(1.0);
	for (int it = 0; it < 60; it++) {
		double mid = (lo + hi) / 2;
		float lr = (float)exp(mid);
		size_t cnt = 0;
		for (size_t i = 0; i < NCAL; i++)
			cnt += f32_to_bf16(w0[i] - lr * rr[i]) != b0[i];
		if ((double)cnt / NCAL < rate)
			lo = mid;
		else
			hi = mid;
	}
	scratch_free(&s);
	free(w0);
	free(rr);
	free(b0);
	return exp((lo + hi) / 2);
}

/* ---- worker pool ------------------------------------------------------ */

struct job {
	size_t ti;
	int kind;
	uint64_t off; /* first element of the block in the tensor */
	uint64_t n;   /* elements in the block */
	uint16_t **out; /* steps+1 buffers of one block */
};

struct worker {
	pthread_t th;
	struct pool *pool;
	struct scratch s;
	uint64_t *changed; /* per step */
};

struct pool {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	unsigned gen;
	int quit;
	unsigned busy;
	struct job job;
	atomic_size_t next;
	const struct gen *g;
	size_t nworkers;
	struct worker *w;
};

static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	struct pool *p = wk->pool;
	unsigned seen = 0;
	uint16_t **out = xcalloc(p->g->steps + 1, sizeof(*out));
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (p->gen == seen && !p->quit)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		seen = p->gen;
		struct job j = p->job;
		pthread_mutex_unlock(&p->mu);
		size_t nchunks = (j.n + CHUNK - 1) / CHUNK;
		for (;;) {
			size_t c = atomic_fetch_add(&p->next, 1);
			if (c >= nchunks)
				break;
			uint64_t o = (uint64_t)c * CHUNK;
			size_t n = j.n - o < CHUNK ? (size_t)(j.n - o) : CHUNK;
			for (unsigned k = 0; k <= p->g->steps; k++)
				out[k] = j.out[k] + o;
			gen_chunk(p->g, &wk->s, j.ti, j.kind, j.off + o, n, out, wk->changed);
		}
		pthread_mutex_lock(&p->mu);
		if (--p->busy == 0)
			pthread_cond_signal(&p->done);
		pthread_mutex_unlock(&p->mu);
	}
	free(out);
	return NULL;
}

static void pool_start(struct pool *p, const struct gen *g, size_t nworkers)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	p->g = g;
	p->nworkers = nworkers;
	p->w = xcalloc(nworkers, sizeof(*p->w));
	for (size_t i = 0; i < nworkers; i++) {
		p->w[i].pool = p;
		scratch_init(&p->w[i].s);
		p->w[i].changed = xcalloc(g->steps + 1, sizeof(uint64_t));
		int r = pthread_create(&p->w[i].th, NULL, worker_main, &p->w[i]);
		if (r)
			die("cannot start a thread: %s", strerror(r));
	}
}

static void pool_dispatch(struct pool *p, const struct job *j)
{
	pthread_mutex_lock(&p->mu);
	p->job = *j;
	atomic_store(&p->next, 0);
	p->busy = (unsigned)p->nworkers;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
}

static void pool_wait(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	while (p->busy)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

static void pool_stop(struct pool *p, uint64_t *changed)
{
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (size_t i = 0; i < p->nworkers; i++) {
		pthread_join(p->w[i].th, NULL);
		for (unsigned k = 0; k < p->g->steps; k++)
			changed[k] += p->w[i].changed[k];
		scratch_free(&p->w[i].s);
		free(p->w[i].changed);
	}
	free(p->w);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
}

/* ---- output ----------------------------------------------------------- */

struct out {
	const char *outdir;
	unsigned nver;
	size_t nshards;
	char **dirs;                  /* per version */
	struct tensor *t;
	size_t nt;
	size_t *first;                /* first tensor of each shard, plus nt */
	struct dcr_st_writer **w;     /* per version, for the open shard */
	size_t open;                  /* open shard, or SIZE_MAX */
};

static char *shard_name(size_t s, size_t nshards)
{
	if (nshards == 1)
		return xasprintf("model.safetensors");
	return xasprintf("model-%05zu-of-%05zu.safetensors", s + 1, nshards);
}

static void close_shard(struct out *o)
{
	struct dcr_err e;
	if (o->open == SIZE_MAX)
		return;
	for (unsigned k = 0; k < o->nver; k++) {
		if (dcr_st_writer_commit(o->w[k], &e))
			die("%s", e.msg);
		dcr_st_writer_free(o->w[k]);
		o->w[k] = NULL;
	}
	o->open = SIZE_MAX;
}

static void open_shard(struct out *o, size_t s)
{
	static const char *const meta[] = { "format", "pt" };
	struct dcr_err e;
	size_t a = o->first[s], b = o->first[s + 1];
	struct dcr_tensor_info *info = xcalloc(b - a, sizeof(*info));
	for (size_t i = a; i < b; i++)
		info[i - a] = o->t[i].info;
	if (dcr_st_layout(info, b - a, &e))
		die("%s", e.msg);
	char *name = shard_name(s, o->nshards);
	for (unsigned k = 0; k < o->nver; k++) {
		char *path = dcr_path_join(o->dirs[k], name);
		if (!path)
			die("out of memory");
		if (dcr_st_writer_new(path, info, b - a, meta, 1, &o->w[k], &e))
			die("%s", e.msg);
		free(path);
	}
	free(name);
	free(info);
	o->open = s;
}

static void write_block(struct out *o, const struct job *j)
{
	struct dcr_err e;
	size_t s = o->t[j->ti].shard;
	if (o->open != s) {
		close_shard(o);
		open_shard(o, s);
	}
	for (unsigned k = 0; k < o->nver; k++) {
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
		for (uint64_t i = 0; i < j->n; i++)
			put_le16((uint8_t *)&j->out[k][i], j->out[k][i]);
#endif
		if (dcr_st_writer_write(o->w[k], j->out[k], j->n * 2, &e))
			die("%s", e.msg);
	}
}

static void write_json(const char *dir, const char *name, json_t *root)
{
	struct dcr_err e;
	char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
	char *path = dcr_path_join(dir, name);
	if (!text || !path)
		die("out of memory");
	size_t len = strlen(text);
	char *buf = xcalloc(len + 2, 1);
	memcpy(buf, text, len);
	buf[len] = '\n';
	if (dcr_write_file_atomic(path, buf, len + 1, &e))
		die("%s", e.msg);
	free(buf);
	free(text);
	free(path);
}

static void write_index(const struct out *o, const char *dir)
{
	json_t *root = json_object(), *meta = json_object(), *map = json_object();
	uint64_t total = 0;
	for (size_t i = 0; i < o->nt; i++) {
		char *f = shard_name(o->t[i].shard, o->nshards);
		json_object_set_new(map, o->t[i].info.name, json_string(f));
		free(f);
		total += 2 * o->t[i].info.nelem;
	}
	json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
	json_object_set_new(root, "metadata", meta);
	json_object_set_new(root, "weight_map", map);
	write_json(dir, "model.safetensors.index.json", root);
	json_decref(root);
}

static void write_config(const struct model *m, const char *dir)
{
	json_t *root = json_object(), *arch = json_array();
	json_array_append_new(arch, json_string("LlamaForCausalLM"));
	json_object_set_new(root, "architectures", arch);
	json_object_set_new(root, "model_type", json_string("llama"));
	json_object_set_new(root, "hidden_size", json_integer((json_int_t)m->hidden));
	json_object_set_new(root, "intermediate_size", json_integer((json_int_t)m->inter));
	json_object_set_new(root, "num_hidden_layers", json_integer((json_int_t)m->layers));
	json_object_set_new(root, "num_attention_heads", json_integer((json_int_t)m->heads));
	json_object_set_new(root, "num_key_value_heads", json_integer((json_int_t)m->kv_heads));
	json_object_set_new(root, "head_dim", json_integer((json_int_t)m->head_dim));
	json_object_set_new(root, "vocab_size", json_integer((json_int_t)m->vocab));
	json_object_set_new(root, "hidden_act", json_string("silu"));
	json_object_set_new(root, "rms_norm_eps", json_real(1e-5));
	json_object_set_new(root, "rope_theta", json_real(500000.0));
	json_object_set_new(root, "max_position_embeddings", json_integer(4096));
	json_object_set_new(root, "tie_word_embeddings", json_false());
	json_object_set_new(root, "torch_dtype", json_string("bfloat16"));
	write_json(dir, "config.json", root);
	json_decref(root);
}

static void check_empty_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		die("cannot open directory '%s': %s", dir, strerror(errno));
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			closedir(d);
			die("'%s' is not empty", dir);
		}
	}
	closedir(d);
}

/* ---- options ---------------------------------------------------------- */

static void usage(void)
{
	printf("usage: %s [options] OUTDIR\n"
	       "\n"
	       "Write OUTDIR/v0 .. OUTDIR/vK: Llama-shaped bf16 checkpoints, each version\n"
	       "one Adam step (on fp32 master weights) after the previous one. Each\n"
	       "OUTDIR/vN must be absent or empty. Change shares go to stderr.\n"
	       "\n"
	       "  --size SIZE        total bf16 bytes to aim for: 100K, 64M, 2G, 20G (default 64M)\n"
	       "  --steps K          versions after v0 (default 1)\n"
	       "  --shards N         files per version (default 1: model.safetensors, no index)\n"
	       "  --seed N           generator seed (default 1)\n"
	       "  --change RATE      pick the learning rate so a step changes RATE of the stored\n"
	       "                     values (default 0.03); 1 changes every value\n"
	       "  --lr LR            learning rate instead of --change\n"
	       "  --hidden N, --layers N, --heads N, --kv-heads N, --intermediate N, --vocab N\n"
	       "                     fix part of the shape; the rest still follows --size\n"
	       "  -j, --jobs N       generator threads (default: online CPUs)\n"
	       "  -n, --dry-run      print the shape and learning rate, write nothing\n"
	       "  -q, --quiet        print nothing on success\n"
	       "  -h, --help         show this help\n"
	       "\n"
	       "Output depends only on the seed, the shape, the learning rate and the steps.\n"
	       "Exit status: 0 success, 128 fatal error, 129 usage error.\n",
	       prog);
}

static uint64_t parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	char *end;
	errno = 0;
	if (!*s || *s == '-' || *s == '+')
		usage_error("%s: '%s' is not a number", opt, s);
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		usage_error("%s: '%s' is not a number", opt, s);
	if (v < min || v > max)
		usage_error("%s: %s is out of range (%llu..%llu)", opt, s,
			    (unsigned long long)min, (unsigned long long)max);
	return v;
}

static double parse_double(const char *opt, const char *s, double min, double max)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || errno || *end || !(v >= min && v <= max))
		usage_error("%s: '%s' is not a number in [%g, %g]", opt, s, min, max);
	return v;
}

/* "64M", "2G", "1.5G", "100K", "12345": bytes, binary suffixes. */
static uint64_t parse_size(const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || !(v > 0))
		usage_error("--size: '%s' is not a size", s);
	double mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	}
	if (mul > 1 && *end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		usage_error("--size: '%s' is not a size", s);
	v *= mul;
	if (v < 4096 || v > 64.0 * 1024 * 1024 * 1024 * 1024)
		usage_error("--size: '%s' is out of range (4K..64T)", s);
	return (uint64_t)v;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	enum { O_SIZE = 256, O_STEPS, O_SHARDS, O_SEED, O_LR, O_CHANGE, O_HIDDEN, O_LAYERS,
	       O_HEADS, O_KV, O_INTER, O_VOCAB };
	static const struct option longopts[] = {
		{ "size", required_argument, NULL, O_SIZE },
		{ "steps", required_argument, NULL, O_STEPS },
		{ "shards", required_argument, NULL, O_SHARDS },
		{ "seed", required_argument, NULL, O_SEED },
		{ "lr", required_argument, NULL, O_LR },
		{ "change", required_argument, NULL, O_CHANGE },
		{ "hidden", required_argument, NULL, O_HIDDEN },
		{ "layers", required_argument, NULL, O_LAYERS },
		{ "heads", required_argument, NULL, O_HEADS },
		{ "kv-heads", required_argument, NULL, O_KV },
		{ "intermediate", required_argument, NULL, O_INTER },
		{ "vocab", required_argument, NULL, O_VOCAB },
		{ "jobs", required_argument, NULL, 'j' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t size = 64ULL << 20, seed = 1, steps = 1, shards = 1, jobs = 0;
	double lr = -1, change = -1;
	int quiet = 0, dry_run = 0, c;
	struct overrides ov = { 0 };
	const uint64_t DIM_MAX = 1ULL << 24;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hnqj:", longopts, NULL)) != -1) {
		switch (c) {
		case 'h': usage(); return 0;
		case 'q': quiet = 1; break;
		case 'n': dry_run = 1; break;
		case 'j': jobs = parse_u64("--jobs", optarg, 1, 1024); break;
		case O_SIZE: size = parse_size(optarg); break;
		case O_STEPS: steps = parse_u64("--steps", optarg, 0, MAX_STEPS); break;
		case O_SHARDS: shards = parse_u64("--shards", optarg, 1, MAX_SHARDS); break;
		case O_SEED: seed = parse_u64("--seed", optarg, 0, UINT64_MAX); break;
		case O_LR: lr = parse_double("--lr", optarg, 0, 1); break;
		case O_CHANGE: change = parse_double("--change", optarg, 0, 1); break;
		case O_HIDDEN: ov.hidden = parse_u64("--hidden", optarg, 1, DIM_MAX); break;
		case O_LAYERS: ov.layers = parse_u64("--layers", optarg, 1, 100000); break;
		case O_HEADS: ov.heads = parse_u64("--heads", optarg, 1, DIM_MAX); break;
		case O_KV: ov.kv_heads = parse_u64("--kv-heads", optarg, 1, DIM_MAX); break;
		case O_INTER: ov.inter = parse_u64("--intermediate", optarg, 1, DIM_MAX); break;
		case O_VOCAB: ov.vocab = parse_u64("--vocab", optarg, 1, DIM_MAX); break;
		case ':':
			usage_error("option '%s' needs a value", argv[optind - 1]);
		default:
			if (optopt && optopt < 256)
				usage_error("unknown option '-%c'", optopt);
			usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		usage_error(optind < argc ? "too many arguments" : "no OUTDIR given");
	if (lr >= 0 && change >= 0)
		usage_error("--lr and --change exclude each other");
	const char *outdir = argv[optind];

	struct model m;
	pick_model(&m, &ov, size / 2);
	if (m.hidden % m.heads)
		usage_error("--heads %llu does not divide hidden size %llu",
			    (unsigned long long)m.heads, (unsigned long long)m.hidden);
	if (m.heads % m.kv_heads)
		usage_error("--kv-heads %llu does not divide %llu heads",
			    (unsigned long long)m.kv_heads, (unsigned long long)m.heads);
	size_t nt;
	struct tensor *t = make_tensors(&m, &nt);
	if (shards > nt)
		usage_error("--shards %llu: the model has only %zu tensors",
			    (unsigned long long)shards, nt);
	assign_shards(t, nt, (size_t)shards);

	struct gen g = { .seed = seed, .steps = (unsigned)steps };
	if (lr < 0) {
		if (change < 0)
			change = 0.03;
		g.force = change >= 1.0;
		lr = change <= 0 ? 0 : calibrate_lr(g.force ? 0.5 : change);
	}
	g.lr = (float)lr;

	if (!jobs) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		jobs = n < 1 ? 1 : n > 64 ? 64 : (uint64_t)n;
	}

	uint64_t params = model_params(&m);
	if (!quiet && !dry_run)
		fprintf(stderr,
			"%s: hidden %llu, layers %llu, heads %llu/%llu, intermediate %llu, "
			"vocab %llu: %llu parameters, %.1f MiB per version; lr %.3g%s\n",
			prog, (unsigned long long)m.hidden, (unsigned long long)m.layers,
			(unsigned long long)m.heads, (unsigned long long)m.kv_heads,
			(unsigned long long)m.inter, (unsigned long long)m.vocab,
			(unsigned long long)params, params * 2.0 / (1 << 20), lr,
			g.force ? " (every value changes)" : "");

	if (dry_run) {
		printf("hidden %llu layers %llu heads %llu kv_heads %llu intermediate %llu "
		       "vocab %llu params %llu bytes %llu lr %.6g\n",
		       (unsigned long long)m.hidden, (unsigned long long)m.layers,
		       (unsigned long long)m.heads, (unsigned long long)m.kv_heads,
		       (unsigned long long)m.inter, (unsigned long long)m.vocab,
		       (unsigned long long)params, (unsigned long long)params * 2, lr);
		return 0;
	}

	struct out o = { .outdir = outdir, .nver = g.steps + 1, .nshards = shards, .t = t,
			 .nt = nt, .open = SIZE_MAX };
	struct dcr_err e;
	o.dirs = xcalloc(o.nver, sizeof(char *));
	o.w = xcalloc(o.nver, sizeof(*o.w));
	dying_writers = o.w;
	dying_nwriters = o.nver;
	for (unsigned k = 0; k < o.nver; k++) {
		o.dirs[k] = xasprintf("%s/v%u", outdir, k);
		if (dcr_mkdir_p(o.dirs[k], &e))
			die("%s", e.msg);
		check_empty_dir(o.dirs[k]);
	}
	o.first = xcalloc(shards + 1, sizeof(size_t));
	for (size_t i = nt; i-- > 0;)
		o.first[t[i].shard] = i;
	o.first[shards] = nt;

	/* Two sets of block buffers: the pool fills one while we write the other.
	 * They take 2 * (steps + 1) * block * 2 bytes: 16 MiB for one step, at
	 * most 128 MiB. */
	size_t block = 512 / o.nver;
	block = (block < 1 ? 1 : block > BLOCK_MAX ? BLOCK_MAX : block) * (size_t)CHUNK;
	uint16_t **buf[2];
	for (int b = 0; b < 2; b++) {
		buf[b] = xcalloc(o.nver, sizeof(uint16_t *));
		for (unsigned k = 0; k < o.nver; k++)
			buf[b][k] = xcalloc(block, sizeof(uint16_t));
	}
	struct pool pool;
	pool_start(&pool, &g, (size_t)jobs);
	double t0 = now();
	struct job pending = { 0 };
	int have_pending = 0, cur = 0;
	for (size_t i = 0; i < nt; i++) {
		uint64_t ne = t[i].info.nelem;
		for (uint64_t off = 0; off < ne; off += block) {
			struct job j = { .ti = i, .kind = t[i].kind, .off = off,
					 .n = ne - off < block ? ne - off : block,
					 .out = buf[cur] };
			pool_dispatch(&pool, &j);
			if (have_pending)
				write_block(&o, &pending);
			pool_wait(&pool);
			pending = j;
			have_pending = 1;
			cur ^= 1;
		}
	}
	if (have_pending)
		write_block(&o, &pending);
	uint64_t *changed = xcalloc(g.steps + 1, sizeof(uint64_t));
	pool_stop(&pool, changed);
	close_shard(&o);
	for (unsigned k = 0; k < o.nver; k++) {
		if (shards > 1)
			write_index(&o, o.dirs[k]);
		write_config(&m, o.dirs[k]);
		int r = dcr_fsync_dir(o.dirs[k]);
		if (r < 0)
			die("cannot sync '%s': %s", o.dirs[k], strerror(-r));
	}
	double dt = now() - t0;

	if (!quiet) {
		for (unsigned k = 1; k <= g.steps; k++)
			fprintf(stderr, "%s: step %u: %.3f%% of stored values changed (%llu of %llu)\n",
				prog, k, 100.0 * changed[k - 1] / params,
				(unsigned long long)changed[k - 1], (unsigned long long)params);
		double bytes = (double)params * 2 * o.nver;
		fprintf(stderr, "%s: wrote %u versions, %.1f MiB in %.2f s (%.0f MiB/s)\n", prog,
			o.nver, bytes / (1 << 20), dt, dt > 0 ? bytes / (1 << 20) / dt : 0);
	}

	for (int b = 0; b < 2; b++) {
		for (unsigned k = 0; k < o.nver; k++)
			free(buf[b][k]);
		free(buf[b]);
	}
	for (unsigned k = 0; k < o.nver; k++)
		free(o.dirs[k]);
	for (size_t i = 0; i < nt; i++)
		free(t[i].info.name);
	free(o.dirs);
	free(o.w);
	free(o.first);
	free(changed);
	free(t);
	return 0;
}
