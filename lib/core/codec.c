/* codec.c - item payload codecs: the XOR+zstd reference and DELTA.
 *
 * DELTA codes each change as two symbols under static, per-item rANS tables
 * (12-bit probabilities, two interleaved 32-bit states, 16-bit renormalisation)
 * plus raw extra bits in a separate little-endian bit stream:
 *
 *   gap   g = pos[i] - pos[i-1] - 1 (pos[-1] = -1), v = g + 1 >= 1:
 *         v = 1, 2, 3 are symbols 0, 1, 2; otherwise with k = floor(log2 v)
 *         the symbol is 3 + 4 (k - 2) + (the two bits below the leading one)
 *         and the k - 2 bits below those are raw;
 *   value d = M(new) - M(old) modulo 2^(8 unit), read as signed; M is the
 *         identity, or for sign-magnitude floats the monotone map
 *         (x >= 0: x | signbit, x < 0: ~x), so +1 ULP is +1 even across
 *         +0/-0; if the old value is negative d is negated, so d > 0 always
 *         means "magnitude grows". d = 0 is symbol 0; otherwise with
 *         a = |d|, k = floor(log2 a) the symbol is 1 + 2k + (d < 0) and the
 *         k bits below the leading one are raw. The table is chosen by a
 *         context: the old value's exponent field e (8 bits at most) mapped
 *         to clamp(pivot - e, 0, nctx - 1); the encoder picks pivot and
 *         nctx (1..8) that minimise the estimated size.
 *
 * Every map above is a bijection on the unit's bit patterns, so decoding is
 * exact for NaN payloads, infinities, subnormals and signed zeros.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "core/bytes.h"
#include "core/codec.h"
#include "core/dtype.h"

#define PB 12		     /* probability bits */
#define PM (1u << PB)	     /* probability scale */
#define RL (1u << 15)	     /* rANS state lower bound: state in [RL, RL << 16) */
#define GAP_NSYM 251	     /* 3 + 4 * 62 */
#define VAL_NSYM_MAX 129     /* 1 + 2 * 64 */
#define MAXCTX 8
#define NE 256		     /* exponent contexts before mapping */
#define SYM_BAD 0xffu	     /* decode-table filler of an empty context */

#define VF_FLOAT 1u	     /* value flag: sign-magnitude monotone map */
#define VF_FOLD 2u	     /* value flag: negate d when old is negative */
#define VF_KNOWN (VF_FLOAT | VF_FOLD)

const char *dcr_codec_name(int codec)
{
	switch (codec) {
	case DCR_CODEC_XOR_ZSTD: return "xor-zstd";
	case DCR_CODEC_DELTA: return "delta";
	case DCR_CODEC_CLASSED: return "classed";
	case DCR_CODEC_RAW: return "raw";
	default: return "?";
	}
}

static inline uint64_t unit_mask(unsigned unit)
{
	return unit >= 8 ? ~0ULL : (1ULL << (8 * unit)) - 1;
}

static inline unsigned bitlen(uint64_t v) /* v > 0 */
{
	return 64 - (unsigned)__builtin_clzll(v);
}

/* ---- value mapping by dtype ------------------------------------------ */

struct vmap {
	unsigned flags;	  /* VF_* */
	unsigned mshift;  /* exponent field: bits [mshift, mshift + ebits) */
	unsigned ebits;	  /* 0: no exponent context */
};

static void vmap_for_dtype(int dtype, unsigned unit, struct vmap *m)
{
	unsigned mant = 0, ebits = 0, flt = 1;
	switch (dtype) {
	case DCR_DT_BF16: mant = 7; ebits = 8; break;
	case DCR_DT_F16: mant = 10; ebits = 5; break;
	case DCR_DT_F32: mant = 23; ebits = 8; break;
	case DCR_DT_F64: mant = 52; ebits = 11; break;
	case DCR_DT_F8_E5M2: case DCR_DT_F8_E5M2FNUZ: mant = 2; ebits = 5; break;
	case DCR_DT_F8_E4M3: case DCR_DT_F8_E4M3FNUZ: mant = 3; ebits = 4; break;
	case DCR_DT_F8_E8M0: mant = 0; ebits = 8; flt = 0; break; /* unsigned */
	default: flt = 0; break;
	}
	if (mant + ebits > 8 * unit) /* a dtype that does not match unit */
		mant = ebits = flt = 0;
	m->flags = flt ? VF_FLOAT | VF_FOLD : 0;
	m->mshift = mant;
	m->ebits = ebits;
}

static inline unsigned vmap_exp(const struct vmap *m, uint64_t x)
{
	unsigned eb = m->ebits;
	unsigned v = (unsigned)((x >> m->mshift) & ((1ULL << eb) - 1));
	return eb > 8 ? v >> (eb - 8) : v;
}

static inline uint64_t mono(uint64_t x, uint64_t half, uint64_t mask)
{
	return (x & half) ? ~x & mask : x | half;
}

static inline uint64_t unmono(uint64_t m, uint64_t half, uint64_t mask)
{
	return (m & half) ? m ^ half : ~m & mask;
}

/* ---- code paths ----------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#define CLS_AVX2 1
#endif

/* The highest code path the vector loops may take (cdc_cpu_limit). */
static int cpu_cap = 3;

void cdc_cpu_limit(int level)
{
	cpu_cap = level < 0 ? 0 : level > 3 ? 3 : level;
}

#ifdef CLS_AVX2
/* 2: AVX2 (with POPCNT), 1: POPCNT, 0: neither. */
static int cpu_level(void)
{
	static int known = -1;
	if (known < 0)
		known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") ? 2
			: __builtin_cpu_supports("popcnt") ? 1 : 0;
	return known < cpu_cap ? known : cpu_cap;
}

/* BMI2's PDEP where it is fast: not on AMD before Zen 3, which runs it
 * in microcode (hundreds of cycles). */
static int cpu_fast_pdep(void)
{
	static int known = -1;
	if (known < 0)
		known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") &&
			__builtin_cpu_supports("bmi2") && !__builtin_cpu_is("znver1") &&
			!__builtin_cpu_is("znver2");
	return known && cpu_cap >= 3;
}
#endif

/* ---- bit stream ------------------------------------------------------ */

struct bitw {
	uint8_t *p;	/* caller-sized: 8 bytes per change plus 16 */
	size_t len;
	uint64_t acc;
	unsigned n;
};

static inline void bw_put32(struct bitw *w, uint64_t v, unsigned nb) /* nb <= 32 */
{
	w->acc |= v << w->n;
	w->n += nb;
	if (w->n >= 32) {
		put_le32(w->p + w->len, (uint32_t)w->acc);
		w->len += 4;
		w->acc >>= 32;
		w->n -= 32;
	}
}

static inline void bw_put(struct bitw *w, uint64_t v, unsigned nb) /* nb <= 64 */
{
	if (nb > 32) {
		bw_put32(w, v & 0xffffffffu, 32);
		bw_put32(w, v >> 32, nb - 32);
	} else {
		bw_put32(w, v, nb);
	}
}

static void bw_flush(struct bitw *w)
{
	while (w->n > 0) {
		w->p[w->len++] = (uint8_t)w->acc;
		w->acc >>= 8;
		w->n = w->n > 8 ? w->n - 8 : 0;
	}
}

struct bitr {
	const uint8_t *p, *end;
	uint64_t acc;
	unsigned n;	   /* valid bits in acc */
	const uint8_t *start;
	uint64_t pad;	   /* zero bytes loaded past the end */
};

/* The reader's state in local variables, for hot loops: BR_LOCALS(R)
 * copies it in, BITS32(K, V) takes K (<= 32) raw bits into V, BITS64 K
 * (<= 64), BR_SAVE(R) copies it back. */
#define BR_LOCALS(R)                                                       \
	uint64_t bacc = (R)->acc, bpad = (R)->pad;                         \
	unsigned bn = (R)->n;                                              \
	const uint8_t *bp = (R)->p, *const bend = (R)->end
#define BR_SAVE(R)                                                         \
	do {                                                               \
		(R)->acc = bacc;                                           \
		(R)->n = bn;                                               \
		(R)->p = bp;                                               \
		(R)->pad = bpad;                                           \
	} while (0)
#define BITS32(K, V)                                                       \
	do {                                                               \
		if (__builtin_expect(bn < (K), 0)) {                       \
			if (bend - bp >= 8) {                              \
				bacc |= get_le64(bp) << bn;                \
				bp += (63 - bn) >> 3;                      \
				bn |= 56;                                  \
			} else {                                           \
				while (bn <= 56) {                         \
					uint64_t c_ = 0;                   \
					if (bp < bend)                     \
						c_ = *bp++;                \
					else                               \
						bpad++;                    \
					bacc |= c_ << bn;                  \
					bn += 8;                           \
				}                                          \
			}                                                  \
		}                                                          \
		(V) = bacc & ((1ULL << (K)) - 1);                          \
		bacc >>= (K);                                              \
		bn -= (K);                                                 \
	} while (0)
#define BITS64(K, V)                                                       \
	do {                                                               \
		unsigned k64_ = (K);                                       \
		if (k64_ > 32) {                                           \
			uint64_t lo_, hi_;                                 \
			BITS32(32, lo_);                                   \
			BITS32(k64_ - 32, hi_);                            \
			(V) = lo_ | hi_ << 32;                             \
		} else {                                                   \
			BITS32(k64_, V);                                   \
		}                                                          \
	} while (0)

/* The stream must have been used up to its last byte. */
static int br_check(const struct bitr *r, size_t len)
{
	uint64_t used = 8 * ((uint64_t)(r->p - r->start) + r->pad) - r->n;
	return used <= 8 * (uint64_t)len && 8 * (uint64_t)len - used < 8;
}

/* ---- rANS tables ----------------------------------------------------- */

struct esym {
	uint32_t x_max, rcp, bias;
	uint16_t cmpl, shift;
};

/* Decode entry: (freq - 1) | (slot - start) << 12 | sym << 24. */
typedef uint32_t dent;

static void esym_init(struct esym *s, uint32_t start, uint32_t freq)
{
	s->x_max = ((RL >> PB) << 16) * freq;
	s->cmpl = (uint16_t)(PM - freq);
	if (freq < 2) {
		s->rcp = ~0u;
		s->shift = 0;
		s->bias = start + PM - 1;
	} else {
		uint32_t shift = 0;
		while (freq > (1u << shift))
			shift++;
		s->rcp = (uint32_t)(((1ULL << (shift + 31)) + freq - 1) / freq);
		s->shift = (uint16_t)(shift - 1);
		s->bias = start;
	}
	s->shift += 32;
}

/* Scale counts (total > 0) to frequencies summing to PM, >= 1 where the
 * count is non-zero. */
static void normalize(const uint64_t *c, unsigned nsym, uint32_t *f)
{
	uint64_t total = 0;
	for (unsigned s = 0; s < nsym; s++)
		total += c[s];
	int64_t sum = 0;
	unsigned best = 0;
	for (unsigned s = 0; s < nsym; s++) {
		f[s] = 0;
		if (!c[s])
			continue;
		/* c * PM fits: counts are below 2^52 */
		uint64_t q = (c[s] * PM + total / 2) / total;
		f[s] = q ? (uint32_t)q : 1;
		sum += f[s];
		if (c[s] > c[best])
			best = s;
	}
	if (sum < PM) {
		f[best] += (uint32_t)(PM - sum);
		return;
	}
	while (sum > PM) { /* take from the largest frequencies, a bit at a time */
		unsigned big = 0;
		for (unsigned s = 1; s < nsym; s++)
			if (f[s] > f[big])
				big = s;
		uint32_t take = f[big] / 8 + 1;
		if (take > f[big] - 1)
			take = f[big] - 1;
		if (take > sum - PM)
			take = (uint32_t)(sum - PM);
		f[big] -= take;
		sum -= take;
	}
}

static int table_write(struct dcr_buf *b, const uint32_t *f, unsigned nsym)
{
	unsigned nnz = 0;
	for (unsigned s = 0; s < nsym; s++)
		nnz += f[s] != 0;
	if (dcr_buf_add_varint(b, nnz) < 0)
		return -ENOMEM;
	unsigned next = 0;
	for (unsigned s = 0; s < nsym; s++) {
		if (!f[s])
			continue;
		if (dcr_buf_add_varint(b, s - next) < 0 ||
		    (nnz > 1 && dcr_buf_add_varint(b, f[s] - 1) < 0))
			return -ENOMEM;
		next = s + 1;
	}
	return 0;
}

/* Read a table; fill the decode entries. An empty table (nnz 0) decodes
 * every slot to SYM_BAD. Returns 0 or -1 with *why set. */
static int table_read(struct dcr_rd *r, unsigned nsym, dent *d, int *empty,
		      const char **why)
{
	uint64_t nnz = dcr_rd_varint(r);
	if (r->bad) {
		*why = "truncated table";
		return -1;
	}
	if (nnz > nsym) {
		*why = "table has more symbols than the alphabet";
		return -1;
	}
	*empty = nnz == 0;
	if (!nnz) {
		for (unsigned i = 0; i < PM; i++)
			d[i] = (PM - 1) | i << 12 | SYM_BAD << 24;
		return 0;
	}
	uint64_t next = 0, start = 0;
	for (uint64_t j = 0; j < nnz; j++) {
		uint64_t s = next + dcr_rd_varint(r);
		uint64_t f = nnz > 1 ? dcr_rd_varint(r) + 1 : PM;
		if (r->bad) {
			*why = "truncated table";
			return -1;
		}
		if (s < next || s >= nsym) {
			*why = "table symbol out of range";
			return -1;
		}
		if (f > PM || f == 0 || start + f > PM) {
			*why = "table frequencies exceed the scale";
			return -1;
		}
		for (uint64_t i = 0; i < f; i++)
			d[start + i] = (uint32_t)(f - 1) | (uint32_t)i << 12 |
				       (uint32_t)s << 24;
		start += f;
		next = s + 1;
	}
	if (start != PM) {
		*why = "table frequencies do not sum to the scale";
		return -1;
	}
	return 0;
}

/* ---- rANS encoder (writes backwards into a scratch buffer) ----------- */

struct renc {
	uint8_t *base, *p;  /* p moves down from base + cap */
	uint32_t x[2];
};

static inline void renc_put(struct renc *e, int j, const struct esym *s)
{
	uint32_t x = e->x[j];
	if (x >= s->x_max) {
		e->p -= 2;
		put_le16(e->p, (uint16_t)x);
		x >>= 16;
	}
	uint32_t q = (uint32_t)(((uint64_t)x * s->rcp) >> s->shift);
	e->x[j] = x + s->bias + q * s->cmpl;
}

/* Flush states; append varint length and stream to out. A stream whose
 * states never left RL (every symbol had probability 1) is written as
 * length 0. */
static int renc_finish(struct renc *e, uint8_t *end, struct dcr_buf *out)
{
	if (e->p == end && e->x[0] == RL && e->x[1] == RL)
		return dcr_buf_add_varint(out, 0) < 0 ? -ENOMEM : 0;
	e->p -= 4;
	put_le32(e->p, e->x[1]);
	e->p -= 4;
	put_le32(e->p, e->x[0]);
	size_t n = (size_t)(end - e->p);
	if (dcr_buf_add_varint(out, n) < 0 || dcr_buf_add(out, e->p, n) < 0)
		return -ENOMEM;
	return 0;
}

struct rdec {
	const uint8_t *p, *end;
	uint32_t x[2];
	int bad;
};

static int rdec_init(struct rdec *d, const uint8_t *p, size_t n)
{
	d->bad = 0;
	if (n == 0) {
		d->p = d->end = p;
		d->x[0] = d->x[1] = RL;
		return 0;
	}
	if (n < 8 || (n & 1))
		return -1;
	d->x[0] = get_le32(p);
	d->x[1] = get_le32(p + 4);
	d->p = p + 8;
	d->end = p + n;
	for (int j = 0; j < 2; j++)
		if (d->x[j] < RL || d->x[j] >= RL << 16)
			return -1;
	return 0;
}

static int rdec_done(const struct rdec *d)
{
	return !d->bad && d->p == d->end && d->x[0] == RL && d->x[1] == RL;
}

/* ---- symbol maps ----------------------------------------------------- */

static inline unsigned gap_sym(uint64_t v, unsigned *nb, uint64_t *extra)
{
	if (v < 4) {
		*nb = 0;
		*extra = 0;
		return (unsigned)v - 1;
	}
	unsigned k = bitlen(v) - 1;
	*nb = k - 2;
	*extra = v & ((1ULL << (k - 2)) - 1);
	return 3 + 4 * (k - 2) + (unsigned)((v >> (k - 2)) & 3);
}

static void gap_tables(uint64_t *gbase, uint8_t *gnb)
{
	for (unsigned s = 0; s < GAP_NSYM; s++) {
		if (s < 3) {
			gbase[s] = s + 1;
			gnb[s] = 0;
		} else {
			unsigned k = 2 + (s - 3) / 4, t = (s - 3) % 4;
			gbase[s] = (uint64_t)(4 + t) << (k - 2);
			gnb[s] = (uint8_t)(k - 2);
		}
	}
}

/* ---- small helpers --------------------------------------------------- */

static double flog2(double x) /* x > 0, about 1e-6 accurate */
{
	union { double d; uint64_t u; } v = { x };
	int ex = (int)((v.u >> 52) & 0x7ff) - 1023;
	v.u = (v.u & ((1ULL << 52) - 1)) | 1023ULL << 52;
	double t = (v.d - 1) / (v.d + 1), t2 = t * t;
	return ex + 2.8853900817779268 * t *
			    (1 + t2 * (1.0 / 3 + t2 * (1.0 / 5 + t2 * (1.0 / 7 + t2 / 9))));
}

/* Estimated bits of coding counts h with one table. */
static double hist_cost(const uint64_t *h, const unsigned *used, unsigned nused)
{
	uint64_t t = 0;
	unsigned nnz = 0;
	double s = 0;
	for (unsigned i = 0; i < nused; i++) {
		uint64_t c = h[used[i]];
		if (c) {
			t += c;
			nnz++;
			s -= (double)c * flog2((double)c);
		}
	}
	if (!t)
		return 8;
	return s + (double)t * flog2((double)t) + 8 + 20.0 * nnz;
}

static int check_args(unsigned unit, uint64_t range_len, size_t n, int code,
		      struct dcr_err *e)
{
	if (unit != 1 && unit != 2 && unit != 4 && unit != 8)
		return dcr_err_set(e, code, "unit of %u bytes is not 1, 2, 4 or 8", unit);
	if ((uint64_t)n > range_len)
		return dcr_err_set(e, code, "%zu changes in a range of %llu elements",
				   n, (unsigned long long)range_len);
	return 0;
}

static int check_input(unsigned unit, uint64_t range_len, size_t n,
		       const uint64_t *pos, const uint64_t *oldv,
		       const uint64_t *newv, struct dcr_err *e)
{
	int rc = check_args(unit, range_len, n, -EINVAL, e);
	if (rc < 0)
		return rc;
	uint64_t mask = unit_mask(unit);
	/* branch-free passes (increasing positions need only the last one
	 * checked against the range); the loop below finds the culprit if any */
	uint64_t vbits = 0, bad = n && pos[n - 1] >= range_len;
	for (size_t i = 1; i < n; i++)
		bad |= pos[i] <= pos[i - 1];
	for (size_t i = 0; i < n; i++)
		vbits |= newv[i];
	for (size_t i = 0; oldv && i < n; i++)
		vbits |= oldv[i];
	if (!bad && !(vbits & ~mask))
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (pos[i] >= range_len || (i && pos[i] <= pos[i - 1]))
			return dcr_err_set(e, -EINVAL,
					   "change %zu: position %llu is not increasing within the range of %llu",
					   i, (unsigned long long)pos[i],
					   (unsigned long long)range_len);
		if ((newv[i] & ~mask) || (oldv && (oldv[i] & ~mask)))
			return dcr_err_set(e, -EINVAL,
					   "change %zu: value does not fit in %u bytes", i, unit);
	}
	return 0;
}

/* ---- histograms ------------------------------------------------------ */

/* h[s[i]] += 1 for i < n, into the nsym counts h. Changes of one class
 * or exponent mostly take the same few symbols, and one counter bumped
 * again and again waits on its own store each time: four counters per
 * symbol, summed at the end, keep four increments in flight. */
static void count_syms(const uint8_t *sym, size_t n, unsigned nsym, uint64_t *h)
{
	uint32_t c[4][256] = {{0}};
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		c[0][sym[i]]++;
		c[1][sym[i + 1]]++;
		c[2][sym[i + 2]]++;
		c[3][sym[i + 3]]++;
	}
	for (; i < n; i++)
		c[0][sym[i]]++;
	for (unsigned k = 0; k < nsym; k++)
		h[k] += (uint64_t)c[0][k] + c[1][k] + c[2][k] + c[3][k];
}

/* hist[x[i] * stride + y[i]] += 1 for i < n, where lo <= x[i] <= hi and
 * y[i] < stride (rows lo..hi of hist are set, the others untouched);
 * count_syms's four counters per cell when the rows fit and there are
 * more changes than cells, else one: a small item over a wide range of
 * exponents (up to 256 rows of 129 cells) paid for clearing and summing
 * four times the cells it never touched, a third of dcr-diff's CPU on a
 * checkpoint of 100,000 small tensors. */
static void count_pairs(const uint8_t *x, const uint8_t *y, size_t n, unsigned lo, unsigned hi,
			unsigned stride, uint64_t *hist)
{
	size_t cells = (size_t)(hi - lo + 1) * stride;
	uint32_t *c = n < UINT32_MAX && n >= cells ? calloc(4 * cells, sizeof(uint32_t)) : NULL;
	uint64_t *h = hist + (size_t)lo * stride;
	memset(h, 0, cells * sizeof(uint64_t));
	if (!c) {
		for (size_t i = 0; i < n; i++)
			h[(size_t)(x[i] - lo) * stride + y[i]]++;
		return;
	}
	uint32_t *c1 = c + cells, *c2 = c1 + cells, *c3 = c2 + cells;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		c[(size_t)(x[i] - lo) * stride + y[i]]++;
		c1[(size_t)(x[i + 1] - lo) * stride + y[i + 1]]++;
		c2[(size_t)(x[i + 2] - lo) * stride + y[i + 2]]++;
		c3[(size_t)(x[i + 3] - lo) * stride + y[i + 3]]++;
	}
	for (; i < n; i++)
		c[(size_t)(x[i] - lo) * stride + y[i]]++;
	for (size_t k = 0; k < cells; k++)
		h[k] = (uint64_t)c[k] + c1[k] + c2[k] + c3[k];
	free(c);
}

/* ---- DELTA encoder --------------------------------------------------- */

/* First pass over the values, specialised for each constant unit: symbols,
 * exponent fields, raw bits. */
static inline __attribute__((always_inline)) void
values_pass(const unsigned unit, size_t n, const uint64_t *oldv,
	    const uint64_t *newv, const struct vmap *vm, uint8_t *sym,
	    uint8_t *ex, struct bitw *w, unsigned *pemin, unsigned *pemax)
{
	const uint64_t mask = unit_mask(unit), half = mask ^ (mask >> 1);
	const int flt = (vm->flags & VF_FLOAT) != 0, fold = (vm->flags & VF_FOLD) != 0;
	const unsigned top = 8 * unit - 1;
	unsigned emin = *pemin, emax = *pemax;
	for (size_t i = 0; i < n; i++) {
		uint64_t o = oldv ? oldv[i] : 0, nw = newv[i];
		unsigned ev = vm->ebits ? vmap_exp(vm, o) : 0;
		uint64_t sg = o >> top, d;
		if (flt) {
			uint64_t mo = o ^ (sg ? mask : half);
			uint64_t mn = nw ^ (nw >> top ? mask : half);
			d = (fold && sg ? mo - mn : mn - mo) & mask;
		} else {
			d = (nw - o) & mask;
		}
		unsigned s = 0;
		if (d) {
			unsigned neg = d >= half;
			uint64_t a = neg ? (0 - d) & mask : d;
			unsigned k = bitlen(a) - 1;
			s = 1 + 2 * k + neg;
			if (unit <= 4)
				bw_put32(w, a & ((1ULL << k) - 1), k);
			else
				bw_put(w, a & ((1ULL << k) - 1), k);
		}
		sym[i] = (uint8_t)s;
		ex[i] = (uint8_t)ev;
		emin = ev < emin ? ev : emin;
		emax = ev > emax ? ev : emax;
	}
	*pemin = emin;
	*pemax = emax;
}

#ifdef CLS_AVX2
/* The low byte of each of v's 8 lanes to dst[0 .. 7]. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
lanes_to_bytes(__m256i v, uint8_t *dst)
{
	const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1,
					      -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1,
					      -1, -1, -1, -1, -1, -1);
	__m256i b = _mm256_shuffle_epi8(v, pick);
	uint64_t x = (uint32_t)_mm256_extract_epi32(b, 0) |
		     (uint64_t)(uint32_t)_mm256_extract_epi32(b, 4) << 32;
	memcpy(dst, &x, 8);
}

/* values_pass for 2-byte units, 8 changes at a time in 32-bit lanes (the
 * trainer's bf16 path; a third of dcr-diff's encoder time was this loop):
 * the same symbols, exponents and extra bits in the same order. The
 * bit length of a = |d| comes from the exponent of a as a float, exact
 * below 2^24. Returns how many changes it did (a multiple of 8); the
 * caller finishes with values_pass. */
__attribute__((target("avx2"))) static size_t
values_pass_u2_avx2(size_t n, const uint64_t *oldv, const uint64_t *newv,
		    const struct vmap *vm, uint8_t *sym, uint8_t *ex, struct bitw *w,
		    unsigned *pemin, unsigned *pemax)
{
	const __m256i m16 = _mm256_set1_epi32(0xffff), half = _mm256_set1_epi32(0x8000);
	const __m256i low15 = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
	const __m256i emask = _mm256_set1_epi32((int)((1u << vm->ebits) - 1));
	const __m256i bias = _mm256_set1_epi32(127);
	const __m128i msh = _mm_cvtsi32_si128((int)vm->mshift);
	const int flt = (vm->flags & VF_FLOAT) != 0, fold = (vm->flags & VF_FOLD) != 0;
	__m256i vmin = _mm256_set1_epi32((int)*pemin), vmax = _mm256_set1_epi32((int)*pemax);
	struct bitw lw = *w; /* a local copy stays in registers */
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		/* 4 + 4 values of 64 bits (below 2^16) to 8 lanes in order */
		__m256i o = _mm256_packus_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(oldv + i)),
						_mm256_loadu_si256((const __m256i *)(const void *)(oldv + i + 4)));
		__m256i nw = _mm256_packus_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(newv + i)),
						 _mm256_loadu_si256((const __m256i *)(const void *)(newv + i + 4)));
		o = _mm256_permute4x64_epi64(o, 0xd8);
		nw = _mm256_permute4x64_epi64(nw, 0xd8);
		__m256i d, sg = _mm256_srai_epi32(_mm256_slli_epi32(o, 16), 31);
		if (flt) {
			__m256i sn = _mm256_srai_epi32(_mm256_slli_epi32(nw, 16), 31);
			__m256i mo = _mm256_xor_si256(o, _mm256_or_si256(half, _mm256_and_si256(sg, low15)));
			__m256i mn = _mm256_xor_si256(nw, _mm256_or_si256(half, _mm256_and_si256(sn, low15)));
			d = _mm256_sub_epi32(mn, mo);
			if (fold)
				d = _mm256_blendv_epi8(d, _mm256_sub_epi32(mo, mn), sg);
		} else {
			d = _mm256_sub_epi32(nw, o);
		}
		d = _mm256_and_si256(d, m16);
		__m256i neg = _mm256_cmpgt_epi32(d, low15);
		__m256i a = _mm256_blendv_epi8(d, _mm256_and_si256(_mm256_sub_epi32(_mm256_setzero_si256(), d), m16), neg);
		__m256i zero = _mm256_cmpeq_epi32(d, _mm256_setzero_si256());
		__m256i k = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(a)), 23), bias);
		k = _mm256_andnot_si256(zero, k);
		__m256i x = _mm256_xor_si256(a, _mm256_andnot_si256(zero, _mm256_sllv_epi32(one, k)));
		__m256i s = _mm256_add_epi32(_mm256_add_epi32(k, k), _mm256_sub_epi32(one, neg));
		s = _mm256_andnot_si256(zero, s);
		__m256i ev = _mm256_and_si256(_mm256_srl_epi32(o, msh), emask);
		vmin = _mm256_min_epu32(vmin, ev);
		vmax = _mm256_max_epu32(vmax, ev);
		lanes_to_bytes(s, sym + i);
		lanes_to_bytes(ev, ex + i);
		/* pairs of (bits, count) into one: at most 2 x 15 bits */
		__m256i kk = _mm256_and_si256(k, _mm256_set1_epi64x(0xffffffff));
		__m256i xp = _mm256_or_si256(_mm256_and_si256(x, _mm256_set1_epi64x(0xffffffff)),
					     _mm256_sllv_epi64(_mm256_srli_epi64(x, 32), kk));
		__m256i kp = _mm256_add_epi64(kk, _mm256_srli_epi64(k, 32));
		uint64_t xs[4], ks[4];
		_mm256_storeu_si256((__m256i *)(void *)xs, xp);
		_mm256_storeu_si256((__m256i *)(void *)ks, kp);
		for (int j = 0; j < 4; j++)
			bw_put32(&lw, xs[j], (unsigned)ks[j]);
	}
	uint32_t lo[8], hi[8];
	_mm256_storeu_si256((__m256i *)(void *)lo, vmin);
	_mm256_storeu_si256((__m256i *)(void *)hi, vmax);
	for (int j = 0; j < 8; j++) {
		*pemin = lo[j] < *pemin ? lo[j] : *pemin;
		*pemax = hi[j] > *pemax ? hi[j] : *pemax;
	}
	*w = lw;
	return i;
}
#endif

/* What the DELTA encoder's steps share: the changes' count and value map,
 * the work buffers, and the exponent histograms with the contexts chosen
 * over them. */
struct denc {
	unsigned unit, vnsym;
	size_t n;
	struct vmap vm;
	uint8_t *sym, *ex, *scratch, *bits;
	size_t scap;
	uint64_t *hist;		/* NE x VAL_NSYM_MAX counts, per exponent */
	struct esym *es;	/* MAXCTX x VAL_NSYM_MAX encoder symbols */
	struct dcr_buf sec;	/* the section being built */
	unsigned emin, emax;	/* exponents seen */
	unsigned used[VAL_NSYM_MAX], nused; /* value symbols seen */
	unsigned pivot, nctx;	/* the contexts chosen */
};

/* The positions section: gap symbols under one table, rANS-coded in
 * reverse, then their extra bits; appended to out after its length. */
static int encode_positions(struct denc *d, const uint64_t *pos,
			    struct dcr_buf *out)
{
	const size_t n = d->n;
	uint8_t *sym = d->sym;
	struct esym *es = d->es;
	uint64_t cnt[GAP_NSYM] = {0};
	uint32_t f[GAP_NSYM];
	struct bitw w = {d->bits, 0, 0, 0};
	uint64_t next = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned nb;
		uint64_t x;
		unsigned s = gap_sym(pos[i] - next + 1, &nb, &x);
		next = pos[i] + 1;
		sym[i] = (uint8_t)s;
		cnt[s]++;
		bw_put(&w, x, nb);
	}
	bw_flush(&w);
	normalize(cnt, GAP_NSYM, f);
	uint32_t start = 0;
	for (unsigned s = 0; s < GAP_NSYM; s++) {
		if (f[s])
			esym_init(&es[s], start, f[s]);
		start += f[s];
	}
	if (table_write(&d->sec, f, GAP_NSYM) < 0)
		return -ENOMEM;
	uint8_t *end = d->scratch + d->scap;
	struct renc re = {d->scratch, end, {RL, RL}};
	size_t i = n;
	if (i & 1) {
		i--;
		renc_put(&re, 0, &es[sym[i]]);
	}
	while (i) {
		i -= 2;
		renc_put(&re, 1, &es[sym[i + 1]]);
		renc_put(&re, 0, &es[sym[i]]);
	}
	if (renc_finish(&re, end, &d->sec) < 0 ||
	    dcr_buf_add(&d->sec, d->bits, w.len) < 0)
		return -ENOMEM;
	if (dcr_buf_add_varint(out, d->sec.len) < 0 ||
	    dcr_buf_add(out, d->sec.p, d->sec.len) < 0)
		return -ENOMEM;
	d->sec.len = 0;
	return 0;
}

/* The values' symbols, exponents, histograms and extra bits (values_pass
 * for the unit), then the symbols in use; returns the extra bits' length. */
static size_t value_symbols(struct denc *d, const uint64_t *oldv,
			    const uint64_t *newv)
{
	const size_t n = d->n;
	const struct vmap vm = d->vm;
	uint8_t *sym = d->sym, *ex = d->ex;
	uint64_t *hist = d->hist;
	struct bitw w = {d->bits, 0, 0, 0};
	unsigned emin = NE, emax = 0;
	switch (d->unit) {
	case 1: values_pass(1, n, oldv, newv, &vm, sym, ex, &w, &emin, &emax); break;
	case 2: {
		size_t done = 0;
#ifdef CLS_AVX2
		if (oldv && vm.ebits <= 8 && cpu_level() >= 2)
			done = values_pass_u2_avx2(n, oldv, newv, &vm, sym, ex, &w, &emin, &emax);
#endif
		values_pass(2, n - done, oldv ? oldv + done : NULL, newv + done, &vm, sym + done,
			    ex + done, &w, &emin, &emax);
		break;
	}
	case 4: values_pass(4, n, oldv, newv, &vm, sym, ex, &w, &emin, &emax); break;
	default: values_pass(8, n, oldv, newv, &vm, sym, ex, &w, &emin, &emax); break;
	}
	bw_flush(&w);
	if (n)
		count_pairs(ex, sym, n, emin, emax, VAL_NSYM_MAX, hist);

	/* symbols in use, and cumulative histograms over exponents */
	d->nused = 0;
	for (unsigned s = 0; s < d->vnsym; s++) {
		uint64_t c = 0;
		for (unsigned ev = emin; ev <= emax; ev++)
			c += hist[(size_t)ev * VAL_NSYM_MAX + s];
		if (c)
			d->used[d->nused++] = s;
	}
	d->emin = emin;
	d->emax = emax;
	return w.len;
}

/* Choose pivot and nctx: the cost of each context is the cost of its
 * merged exponent range; one context unless splitting is cheaper. */
static void choose_contexts(struct denc *d)
{
	const uint64_t *hist = d->hist;
	const unsigned *used = d->used, nused = d->nused;
	const unsigned emin = d->emin, emax = d->emax;
	unsigned best_pivot = 0, best_nctx = 1;
	double best = 0;
	{
		uint64_t all[VAL_NSYM_MAX] = {0};
		for (unsigned ev = emin; ev <= emax; ev++)
			for (unsigned j = 0; j < nused; j++)
				all[used[j]] += hist[(size_t)ev * VAL_NSYM_MAX + used[j]];
		best = hist_cost(all, used, nused);
	}
	if (d->vm.ebits && d->n >= 256 && emax > emin) {
		/* pivots over the exponents that carry 99.8% of the changes */
		uint64_t lo_cut = d->n / 1000, acc = 0;
		unsigned plo = emin, phi = emax;
		for (unsigned ev = emin; ev <= emax; ev++) {
			for (unsigned j = 0; j < nused; j++)
				acc += hist[(size_t)ev * VAL_NSYM_MAX + used[j]];
			if (acc <= lo_cut)
				plo = ev + 1;
		}
		acc = 0;
		for (unsigned ev = emax + 1; ev-- > emin;) {
			for (unsigned j = 0; j < nused; j++)
				acc += hist[(size_t)ev * VAL_NSYM_MAX + used[j]];
			if (acc <= lo_cut)
				phi = ev ? ev - 1 : 0;
		}
		if (phi < plo)
			phi = plo;
		if (phi > plo + 47)
			phi = plo + 47;
		/* Each (pivot, nctx) splits the exponents into [pivot, emax],
		 * the single exponents pivot-1 .. pivot-nctx+2, and [emin,
		 * pivot-nctx+1]; precompute those costs once (running sums
		 * from either end), then every candidate is a few lookups. */
		double cs[NE], chi[NE], clo[NE];
		uint64_t acc_h[VAL_NSYM_MAX];
		memset(acc_h, 0, sizeof(acc_h));
		for (unsigned ev = emax + 1; ev-- > emin;) {
			for (unsigned j = 0; j < nused; j++)
				acc_h[used[j]] += hist[(size_t)ev * VAL_NSYM_MAX + used[j]];
			chi[ev] = hist_cost(acc_h, used, nused);
			cs[ev] = hist_cost(&hist[(size_t)ev * VAL_NSYM_MAX], used, nused);
		}
		memset(acc_h, 0, sizeof(acc_h));
		for (unsigned ev = emin; ev <= emax; ev++) {
			for (unsigned j = 0; j < nused; j++)
				acc_h[used[j]] += hist[(size_t)ev * VAL_NSYM_MAX + used[j]];
			clo[ev] = hist_cost(acc_h, used, nused);
		}
		const double empty = 8; /* hist_cost of no counts */
		for (unsigned pv = plo; pv <= phi + 1 && pv < NE; pv++) {
			double hi = pv > emax ? empty : chi[pv < emin ? emin : pv];
			double mid = 0;
			for (unsigned nc = 2; nc <= MAXCTX; nc++) {
				if (nc > 2) {
					int ev = (int)pv - (int)(nc - 2);
					mid += ev >= (int)emin && ev <= (int)emax ? cs[ev] : empty;
				}
				int x = (int)pv - (int)(nc - 1);
				double lo = x < (int)emin ? empty
							  : clo[x > (int)emax ? emax : (unsigned)x];
				double cost = hi + mid + lo;
				if (cost < best) {
					best = cost;
					best_pivot = pv;
					best_nctx = nc;
				}
			}
		}
	}
	d->pivot = best_pivot;
	d->nctx = best_nctx;
}

/* The values section's head: value map, pivot and nctx, then one table
 * per context over its merged histograms; sets the encoder symbols. */
static int write_value_tables(struct denc *d)
{
	const unsigned vnsym = d->vnsym, nused = d->nused;
	uint64_t (*ctxh)[VAL_NSYM_MAX] = calloc(MAXCTX, sizeof(*ctxh));
	int rc = -ENOMEM;
	if (!ctxh)
		return -ENOMEM;
	for (unsigned ev = d->emin; ev <= d->emax; ev++) {
		int c = d->nctx == 1 ? 0 : (int)d->pivot - (int)ev;
		c = c < 0 ? 0 : c > (int)d->nctx - 1 ? (int)d->nctx - 1 : c;
		for (unsigned j = 0; j < nused; j++)
			ctxh[c][d->used[j]] += d->hist[(size_t)ev * VAL_NSYM_MAX + d->used[j]];
	}

	if (dcr_buf_add_u8(&d->sec, (uint8_t)d->vm.flags) < 0 ||
	    dcr_buf_add_u8(&d->sec, (uint8_t)d->vm.mshift) < 0 ||
	    dcr_buf_add_u8(&d->sec, (uint8_t)d->vm.ebits) < 0 ||
	    dcr_buf_add_u8(&d->sec, (uint8_t)d->pivot) < 0 ||
	    dcr_buf_add_u8(&d->sec, (uint8_t)d->nctx) < 0)
		goto out;
	for (unsigned c = 0; c < d->nctx; c++) {
		uint32_t f[VAL_NSYM_MAX];
		uint64_t t = 0;
		for (unsigned s = 0; s < vnsym; s++)
			t += ctxh[c][s];
		if (t)
			normalize(ctxh[c], vnsym, f);
		else
			memset(f, 0, sizeof(f));
		uint32_t start = 0;
		for (unsigned s = 0; s < vnsym; s++) {
			if (f[s])
				esym_init(&d->es[c * VAL_NSYM_MAX + s], start, f[s]);
			start += f[s];
		}
		if (table_write(&d->sec, f, vnsym) < 0)
			goto out;
	}
	rc = 0;
out:
	free(ctxh);
	return rc;
}

/* The values section: symbols, contexts and tables, then the values
 * rANS-coded in reverse and their extra bits; appended to out (it runs
 * to the end, so without a length). */
static int encode_values(struct denc *d, const uint64_t *oldv,
			 const uint64_t *newv, struct dcr_buf *out)
{
	size_t nbits = value_symbols(d, oldv, newv);
	choose_contexts(d);
	if (write_value_tables(d) < 0)
		return -ENOMEM;

	/* contexts per change, then the reverse rANS pass */
	const uint8_t *sym = d->sym, *ex = d->ex;
	const struct esym *es = d->es;
	uint32_t cbase[NE]; /* esym offset of each exponent */
	for (int ev = 0; ev < NE; ev++) {
		int c = (int)d->pivot - ev;
		c = c < 0 ? 0 : c > (int)d->nctx - 1 ? (int)d->nctx - 1 : c;
		cbase[ev] = (uint32_t)c * VAL_NSYM_MAX;
	}
	uint8_t *end = d->scratch + d->scap;
	struct renc re = {d->scratch, end, {RL, RL}};
	size_t i = d->n;
	if (i & 1) {
		i--;
		renc_put(&re, 0, &es[cbase[ex[i]] + sym[i]]);
	}
	while (i) {
		i -= 2;
		renc_put(&re, 1, &es[cbase[ex[i + 1]] + sym[i + 1]]);
		renc_put(&re, 0, &es[cbase[ex[i]] + sym[i]]);
	}
	if (renc_finish(&re, end, &d->sec) < 0 ||
	    dcr_buf_add(&d->sec, d->bits, nbits) < 0 ||
	    dcr_buf_add(out, d->sec.p, d->sec.len) < 0)
		return -ENOMEM;
	return 0;
}

/* ---- CLASSED: positions by classes of the old value ------------------- */

/* Both sides classify every element of the range by the exponent field f
 * of its old value (8 bits at most, as for the value contexts): with
 * thresholds thr[0] > thr[1] > ... > thr[ncls - 2], the class of f is the
 * number of thresholds above f, so class 0 holds the largest magnitudes.
 * The changes of each class are coded as gaps within the class's own
 * subsequence of the range, each class with its own table: a small weight
 * (small ULP) changes far more often than a large one, and the receiver
 * holds every old value before it decodes. The price is a scan of the old
 * values of the range up to the last change, on both sides, 64 elements
 * at a time (SSE2 where there is SSE2). */

#define MAXCLS 8	/* classes a payload may have */
#define PLAN_CLS 4	/* classes the encoder uses at most: the scan's cost grows with them */
#define CBLK 64
#define QT_MAXQ 15 /* quantized table code: weight 2^(q - 1) */

struct clsmap {
	struct vmap vm;		   /* mshift, ebits of the field */
	unsigned ncls;
	unsigned thr[MAXCLS];	   /* thr[0 .. ncls-2], strictly decreasing */
	uint8_t cls[NE];	   /* class of each field value */
	/* thresholds for the vector paths: (thr - 1) ^ 0x80 in every byte */
	uint8_t tvb[MAXCLS][32] __attribute__((aligned(32)));
};

static void clsmap_fill(struct clsmap *cm)
{
	for (unsigned f = 0; f < NE; f++) {
		unsigned c = 0;
		while (c + 1 < cm->ncls && f < cm->thr[c])
			c++;
		cm->cls[f] = (uint8_t)c;
	}
	for (unsigned c = 0; c + 1 < cm->ncls; c++)
		memset(cm->tvb[c], (int)((cm->thr[c] - 1) ^ 0x80), sizeof(cm->tvb[c]));
}

/* The SSE2 path: units of 2 bytes whose field sits right below the sign
 * bit (bf16, f16), so that f = (x << 1) >> (16 - ebits). */
static inline int clsmap_fast(const struct clsmap *cm, unsigned unit)
{
	return unit == 2 && cm->vm.ebits && cm->vm.ebits <= 8 &&
	       cm->vm.mshift + cm->vm.ebits == 15;
}

/* A block's class masks (blk_masks_avx2), passed to the scans' bodies so
 * that their AVX2 instances inline it. */
typedef void blkfn(const uint8_t *old, const struct clsmap *cm, unsigned K, uint64_t *m);

/* Class masks of the nb <= CBLK elements at old: bit i of m[c] is set
 * when element i is in class c. fast: clsmap_fast() holds (1: SSE2, 2:
 * AVX2). */
#ifdef CLS_AVX2
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
blk_masks_avx2(const uint8_t *old, const struct clsmap *cm, const unsigned K, uint64_t *m)
{
	const __m128i sh = _mm_cvtsi32_si128((int)(16 - cm->vm.ebits));
	const __m256i flip = _mm256_set1_epi8((char)0x80);
	__m256i a0 = _mm256_loadu_si256((const __m256i *)(const void *)old);
	__m256i a1 = _mm256_loadu_si256((const __m256i *)(const void *)(old + 32));
	__m256i a2 = _mm256_loadu_si256((const __m256i *)(const void *)(old + 64));
	__m256i a3 = _mm256_loadu_si256((const __m256i *)(const void *)(old + 96));
	a0 = _mm256_srl_epi16(_mm256_slli_epi16(a0, 1), sh);
	a1 = _mm256_srl_epi16(_mm256_slli_epi16(a1, 1), sh);
	a2 = _mm256_srl_epi16(_mm256_slli_epi16(a2, 1), sh);
	a3 = _mm256_srl_epi16(_mm256_slli_epi16(a3, 1), sh);
	/* packus works within 128-bit lanes: restore the element order */
	__m256i f0 = _mm256_permute4x64_epi64(_mm256_packus_epi16(a0, a1), 0xd8);
	__m256i f1 = _mm256_permute4x64_epi64(_mm256_packus_epi16(a2, a3), 0xd8);
	f0 = _mm256_xor_si256(f0, flip);
	f1 = _mm256_xor_si256(f1, flip);
	uint64_t prev = 0;
#pragma GCC unroll 8
	for (unsigned c = 0; c + 1 < K; c++) {
		const __m256i t = _mm256_load_si256((const __m256i *)(const void *)cm->tvb[c]);
		uint64_t ge = (uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(f0, t)) |
			      (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(f1, t)) << 32;
		m[c] = ge & ~prev;
		prev = ge;
	}
	m[K - 1] = ~prev;
}
#endif

static inline __attribute__((always_inline)) void
blk_masks(const uint8_t *old, unsigned unit, unsigned nb, const struct clsmap *cm,
	  const int fast, const unsigned K, uint64_t *m)
{
	/* fast 2 (AVX2): the callers take blk_masks_avx2 for whole blocks */
#ifdef __SSE2__
	if (fast && nb == CBLK) {
		const __m128i sh = _mm_cvtsi32_si128((int)(16 - cm->vm.ebits));
		const __m128i flip = _mm_set1_epi8((char)0x80);
#define F16(Q)                                                                       \
	_mm_xor_si128(                                                                \
		_mm_packus_epi16(                                                     \
			_mm_srl_epi16(_mm_slli_epi16(_mm_loadu_si128((const __m128i *)(const void *)(old + 32 * (Q))), 1), sh), \
			_mm_srl_epi16(_mm_slli_epi16(_mm_loadu_si128((const __m128i *)(const void *)(old + 32 * (Q) + 16)), 1), sh)), \
		flip)
		const __m128i f0 = F16(0), f1 = F16(1), f2 = F16(2), f3 = F16(3);
#undef F16
		uint64_t prev = 0;
		for (unsigned c = 0; c + 1 < K; c++) {
			/* f >= thr as signed bytes after flipping the top bit */
			const __m128i t = _mm_load_si128((const __m128i *)(const void *)cm->tvb[c]);
			uint64_t ge = (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpgt_epi8(f0, t)) |
				      (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpgt_epi8(f1, t)) << 16 |
				      (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpgt_epi8(f2, t)) << 32 |
				      (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpgt_epi8(f3, t)) << 48;
			m[c] = ge & ~prev;
			prev = ge;
		}
		m[K - 1] = ~prev;
		return;
	}
#else
	(void)fast;
#endif
	for (unsigned c = 0; c < K; c++)
		m[c] = 0;
	for (unsigned i = 0; i < nb; i++) {
		uint64_t x = load_unit(old + (size_t)i * unit, unit);
		m[cm->cls[vmap_exp(&cm->vm, x)]] |= 1ULL << i;
	}
}

static inline unsigned pop64(uint64_t x)
{
	return (unsigned)__builtin_popcountll(x);
}

/* sel8[b][r]: the index of the set bit of byte b with r set bits below. */
static uint8_t sel8[256][8];

static void sel8_fill(void)
{
	for (unsigned b = 0; b < 256; b++) {
		unsigned r = 0;
		for (unsigned i = 0; i < 8; i++)
			if (b >> i & 1)
				sel8[b][r++] = (uint8_t)i;
	}
}

/* once per process: encoders and decoders run on many threads at once */
static void sel8_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, sel8_fill);
}

/* The index of the set bit of m with r set bits below it (r < pop64(m)),
 * without branches: the byte from the bytes' running counts, then sel8. */
static inline unsigned select64(uint64_t m, unsigned r)
{
	const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
	uint64_t s = m - ((m >> 1) & 0x5555555555555555ULL);
	s = (s & 0x3333333333333333ULL) + ((s >> 2) & 0x3333333333333333ULL);
	s = (s + (s >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	uint64_t cum = s * ones; /* byte i: set bits in bytes 0..i */
	/* bytes whose running count is <= r: their number is the byte */
	uint64_t le = ((r * ones | highs) - cum) & highs;
	unsigned byte = (unsigned)((le >> 7) * ones >> 56);
	unsigned before = (unsigned)((cum << 8) >> (8 * byte) & 0xff);
	return 8 * byte + sel8[(m >> (8 * byte)) & 0xff][r - before];
}

/* Append the positions b + i of the set bits i of chg to pos[k..] and
 * return the new count; never past pos[n - 1] (a block never holds more
 * changes than are left). A block holds a few changes, a number the
 * branch predictor cannot guess: the first four are written without a
 * branch (the slots past the block's last change get values the next
 * blocks overwrite), the rest one by one. */
static inline __attribute__((always_inline)) size_t
emit_positions(uint64_t *pos, size_t k, size_t n, uint64_t b, uint64_t chg)
{
	const uint64_t top = 1ULL << 63; /* ctz of 0 | top: 63, a slot overwritten later */
	unsigned cnt = pop64(chg);
	if (__builtin_expect(k + 4 <= n, 1)) {
		uint64_t *q = pos + k;
		q[0] = b + (unsigned)__builtin_ctzll(chg | top);
		chg &= chg - 1;
		q[1] = b + (unsigned)__builtin_ctzll(chg | top);
		chg &= chg - 1;
		q[2] = b + (unsigned)__builtin_ctzll(chg | top);
		chg &= chg - 1;
		q[3] = b + (unsigned)__builtin_ctzll(chg | top);
		chg &= chg - 1;
		for (size_t j = k + 4; chg && j < n; j++) {
			pos[j] = b + (unsigned)__builtin_ctzll(chg);
			chg &= chg - 1;
		}
		return k + cnt < n ? k + cnt : n;
	}
	while (chg && k < n) {
		pos[k++] = b + (unsigned)__builtin_ctzll(chg);
		chg &= chg - 1;
	}
	return k;
}

/* Quantized gap tables: symbols [lo, lo + cnt) with a 4-bit code each;
 * code 0: absent, q > 0: weight 2^(q - 1). Frequencies: 1 + floor(w (PM -
 * nnz) / W) for each present symbol (W the sum of the weights), and what
 * is left of PM to the first symbol of the largest weight. */
static void qtable_freqs(const uint8_t *q, unsigned cnt, uint32_t *f)
{
	uint64_t W = 0;
	unsigned nnz = 0, big = 0, qmax = 0;
	for (unsigned s = 0; s < cnt; s++) {
		if (!q[s])
			continue;
		W += 1u << (q[s] - 1);
		nnz++;
		if (q[s] > qmax) {
			qmax = q[s];
			big = s;
		}
	}
	uint32_t sum = 0;
	for (unsigned s = 0; s < cnt; s++) {
		f[s] = q[s] ? 1 + (uint32_t)(((uint64_t)1 << (q[s] - 1)) * (PM - nnz) / W) : 0;
		sum += f[s];
	}
	f[big] += PM - sum;
}

/* Codes for counts c[0..GAP_NSYM) (some non-zero): the largest gets
 * QT_MAXQ, the others 2^(q - 1) nearest their share of it in log scale,
 * at least 1. Returns lo and sets *cnt and q[0..cnt). */
static unsigned qtable_quantize(const uint64_t *c, uint8_t *q, unsigned *cnt)
{
	unsigned lo = GAP_NSYM, hi = 0;
	uint64_t cmax = 0;
	for (unsigned s = 0; s < GAP_NSYM; s++) {
		if (!c[s])
			continue;
		lo = s < lo ? s : lo;
		hi = s;
		cmax = c[s] > cmax ? c[s] : cmax;
	}
	for (unsigned s = lo; s <= hi; s++) {
		if (!c[s]) {
			q[s - lo] = 0;
			continue;
		}
		double l = flog2((double)cmax / (double)c[s]); /* >= 0 */
		int v = QT_MAXQ - (int)(l + 0.5);
		q[s - lo] = (uint8_t)(v < 1 ? 1 : v > QT_MAXQ ? QT_MAXQ : v);
	}
	*cnt = hi - lo + 1;
	return lo;
}

/* ---- the encoder's plan: thresholds from a sample of the range -------- */

#define PLAN_SAMPLES 4096
#define PLAN_RUNS 8
#define PLAN_BINS 20
#define CLS_SCAN_BITS 0.003 /* bits a class must save per element of the range */

/* Bits of coding k changes among N elements as independent draws. */
static double bern_bits(double k, double N)
{
	if (k <= 0 || k >= N)
		return 0;
	return k * flog2(N / k) + (N - k) * flog2(N / (N - k));
}

/* The estimated bits of one class: its changes' positions, its table, its
 * count and threshold. */
static double class_bits(double k, double N)
{
	if (k <= 0)
		return 8 + 8;
	double span = 4 * flog2(N / k + 1) + 12;
	return bern_bits(k, N) + 4 * (span > GAP_NSYM ? GAP_NSYM : span) + 16 + 16 + 8;
}

/* Choose the classes for n changes (old values oldv) in a range of
 * range_len elements: field histogram of a sample of the range, the
 * changes' field histogram, then the best split of the field values into
 * at most MAXCLS contiguous classes under class_bits. *gain: the bits the
 * split saves over one class (0 when there is no field). */
static void class_plan(const uint8_t *old, unsigned unit, int dtype, uint64_t range_len,
		       size_t n, const uint64_t *oldv, struct clsmap *cm, double *gain)
{
	memset(cm, 0, sizeof(*cm));
	vmap_for_dtype(dtype, unit, &cm->vm);
	cm->ncls = 1;
	*gain = 0;
	sel8_init();
	if (!cm->vm.ebits || n < 32 || !old || range_len < 2 * CBLK) {
		if (!old)
			cm->vm.ebits = cm->vm.mshift = 0;
		clsmap_fill(cm);
		return;
	}
	const unsigned nf = cm->vm.ebits >= 8 ? NE : 1u << cm->vm.ebits;
	uint64_t kf[NE] = {0}, sf[NE] = {0};
	for (size_t i = 0; i < n; i++)
		kf[vmap_exp(&cm->vm, oldv[i])]++;
	/* PLAN_RUNS runs of values spread over the range, each read in
	 * order (so that the prefetcher keeps up) */
	uint64_t S = range_len < PLAN_SAMPLES ? range_len / PLAN_RUNS * PLAN_RUNS : PLAN_SAMPLES;
	uint64_t run = S / PLAN_RUNS, stride = range_len / PLAN_RUNS;
	for (uint64_t j = 0; j < PLAN_RUNS; j++) {
		const uint8_t *at = old + j * stride * unit;
		if (unit == 2)
			for (uint64_t i = 0; i < run; i++)
				sf[vmap_exp(&cm->vm, get_le16(at + 2 * i))]++;
		else
			for (uint64_t i = 0; i < run; i++)
				sf[vmap_exp(&cm->vm, load_unit(at + i * unit, unit))]++;
	}
	/* bins of field values, from the top down: [blo[b], bhi[b]] */
	double scale = (double)range_len / (double)S;
	unsigned nb = 0, blo[PLAN_BINS];
	double bk[PLAN_BINS], bN[PLAN_BINS];
	double accs = 0, acck = 0;
	for (unsigned f = nf; f-- > 0;) {
		if (!sf[f] && !kf[f] && f)
			continue;
		accs += (double)sf[f];
		acck += (double)kf[f];
		int close = accs >= (double)S / (PLAN_BINS - 2) || acck >= (double)n / (PLAN_BINS - 2) ||
			    f == 0;
		if (close && nb < PLAN_BINS) {
			blo[nb] = f;
			bk[nb] = acck;
			bN[nb] = accs * scale;
			nb++;
			accs = acck = 0;
		} else if (close) { /* PLAN_BINS reached: the rest joins the last */
			bk[nb - 1] += acck;
			bN[nb - 1] += accs * scale;
			blo[nb - 1] = f;
			accs = acck = 0;
		}
	}
	/* prefix sums; a class [i, j) of bins costs class_bits */
	double pk[PLAN_BINS + 1], pN[PLAN_BINS + 1];
	pk[0] = pN[0] = 0;
	for (unsigned b = 0; b < nb; b++) {
		pk[b + 1] = pk[b] + bk[b];
		pN[b + 1] = pN[b] + bN[b];
	}
	double seg[PLAN_BINS + 1][PLAN_BINS + 1];
	for (unsigned i = 0; i < nb; i++)
		for (unsigned j = i + 1; j <= nb; j++) {
			double k = pk[j] - pk[i], N = pN[j] - pN[i];
			seg[i][j] = class_bits(k, N < k ? k : N);
		}
	double dp[PLAN_CLS + 1][PLAN_BINS + 1];
	uint8_t from[PLAN_CLS + 1][PLAN_BINS + 1];
	for (unsigned q = 0; q <= PLAN_CLS; q++)
		for (unsigned j = 0; j <= nb; j++)
			dp[q][j] = 1e300;
	dp[0][0] = 0;
	unsigned best_q = 1;
	for (unsigned q = 1; q <= PLAN_CLS; q++) {
		for (unsigned j = q; j <= nb; j++)
			for (unsigned i = q - 1; i < j; i++) {
				double v = dp[q - 1][i] + seg[i][j];
				if (v < dp[q][j]) {
					dp[q][j] = v;
					from[q][j] = (uint8_t)i;
				}
			}
		/* each class costs the decoder's scan a compare per element:
		 * it must save CLS_SCAN_BITS per element of the range */
		if (dp[q][nb] + (q - best_q) * CLS_SCAN_BITS * (double)range_len < dp[best_q][nb])
			best_q = q;
	}
	*gain = dp[1][nb] - dp[best_q][nb];
	/* thresholds: the lowest field value of each class but the last */
	unsigned cut[PLAN_CLS + 1], j = nb;
	for (unsigned q = best_q; q > 0; q--) {
		cut[q] = j;
		j = from[q][j];
	}
	cm->ncls = best_q;
	for (unsigned c = 0; c + 1 < best_q; c++)
		cm->thr[c] = blo[cut[c + 1] - 1];
	clsmap_fill(cm);
}

/* Block b's class masks (the nb <= CBLK elements from b, nb returned):
 * mk (blk_masks_avx2, inlined in the callers' AVX2 instances) for whole
 * blocks when fast is 2, else blk_masks; every cache line of the block
 * BLK_AHEAD ahead prefetched (a bf16 block is two lines: prefetching one of
 * them, 16 blocks ahead, left the scans waiting on the other, 20-30% of
 * their time when the range comes from beyond the L2 cache). */
#define BLK_AHEAD 32
static inline __attribute__((always_inline)) unsigned
blk_at(const uint8_t *old, unsigned unit, uint64_t range_len, uint64_t b, const struct clsmap *cm,
       const int fast, blkfn *const mk, const unsigned K, uint64_t *m)
{
	unsigned nb = range_len - b < CBLK ? (unsigned)(range_len - b) : CBLK;
	for (unsigned l = 0; l < CBLK * unit; l += 64)
		__builtin_prefetch(old + (b + BLK_AHEAD * CBLK) * unit + l);
	if (fast == 2 && nb == CBLK)
		mk(old + b * unit, cm, K, m);
	else
		blk_masks(old + b * unit, unit, nb, cm, fast, K, m);
	return nb;
}

/* Each change's gap within its class (cc: the changes' classes), stored
 * class by class: gseq[at[c]++] for the changes of class c in order. The
 * class ranks come from the masks of the blocks up to the last change,
 * GAP_STRIP blocks at a time: first each block's masks and the class
 * counts before it (no branch), then each change of the strip's rank
 * from its block's (no loop per block, whose count of changes the branch
 * predictor cannot guess). sm: GAP_STRIP * K words for the masks, sb as
 * many for the counts. Returns non-zero when oldv differs from the
 * range's bits. */
#define GAP_STRIP 256
static inline __attribute__((always_inline)) uint64_t
class_gaps_body(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
		const uint64_t *pos, const uint64_t *oldv, const uint8_t *cc,
		const struct clsmap *cm, const int fast, blkfn *const mk, const unsigned K,
		size_t *at, uint64_t *gseq, uint64_t *sm, uint64_t *sb)
{
	uint64_t bad = 0;
	uint64_t base[MAXCLS] = {0}, next[MAXCLS] = {0};
	size_t k = 0;
	const uint64_t nblk = n ? pos[n - 1] / CBLK + 1 : 0;
	for (uint64_t b0 = 0; b0 < nblk; b0 += GAP_STRIP) {
		uint64_t b1 = nblk - b0 < GAP_STRIP ? nblk : b0 + GAP_STRIP;
		for (uint64_t j = 0; j < b1 - b0; j++) {
			uint64_t *m = sm + j * K, *bs = sb + j * K;
			blk_at(old, unit, range_len, (b0 + j) * CBLK, cm, fast, mk, K, m);
			for (unsigned c = 0; c < K; c++) {
				bs[c] = base[c];
				base[c] += pop64(m[c]);
			}
		}
		const uint64_t end = b1 * CBLK;
		for (; k < n && pos[k] < end; k++) {
			uint64_t p = pos[k], j = p / CBLK - b0;
			unsigned bit = (unsigned)(p % CBLK), c = cc[k];
			uint64_t rank = sb[j * K + c] + pop64(sm[j * K + c] & ((1ULL << bit) - 1));
			gseq[at[c]++] = rank - next[c];
			next[c] = rank + 1;
			bad |= load_unit(old + p * unit, unit) ^ oldv[k];
		}
	}
	return bad;
}

#ifdef CLS_AVX2
__attribute__((target("avx2,popcnt"))) static uint64_t
class_gaps_avx2(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
		const uint64_t *pos, const uint64_t *oldv, const uint8_t *cc,
		const struct clsmap *cm, size_t *at, uint64_t *gseq, uint64_t *sm, uint64_t *sb)
{
	/* the class count as a constant where the encoder's plan can put it */
	if (clsmap_fast(cm, unit))
		switch (cm->ncls) {
		case 1: return class_gaps_body(old, unit, range_len, n, pos, oldv, cc, cm, 2,
					       blk_masks_avx2, 1, at, gseq, sm, sb);
		case 2: return class_gaps_body(old, unit, range_len, n, pos, oldv, cc, cm, 2,
					       blk_masks_avx2, 2, at, gseq, sm, sb);
		case 3: return class_gaps_body(old, unit, range_len, n, pos, oldv, cc, cm, 2,
					       blk_masks_avx2, 3, at, gseq, sm, sb);
		case 4: return class_gaps_body(old, unit, range_len, n, pos, oldv, cc, cm, 2,
					       blk_masks_avx2, 4, at, gseq, sm, sb);
		default: return class_gaps_body(old, unit, range_len, n, pos, oldv, cc, cm, 2,
						blk_masks_avx2, cm->ncls, at, gseq, sm, sb);
		}
	return class_gaps_body(old, unit, range_len, n, pos, oldv, cc, cm, 0, NULL, cm->ncls, at,
			       gseq, sm, sb);
}

__attribute__((target("popcnt"))) static uint64_t
class_gaps_popcnt(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
		  const uint64_t *pos, const uint64_t *oldv, const uint8_t *cc,
		  const struct clsmap *cm, size_t *at, uint64_t *gseq, uint64_t *sm, uint64_t *sb)
{
	return class_gaps_body(old, unit, range_len, n, pos, oldv, cc, cm,
			       clsmap_fast(cm, unit), NULL, cm->ncls, at, gseq, sm, sb);
}
#endif

static uint64_t class_gaps(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
			   const uint64_t *pos, const uint64_t *oldv, const uint8_t *cc,
			   const struct clsmap *cm, size_t *at, uint64_t *gseq, uint64_t *sm,
			   uint64_t *sb)
{
#ifdef CLS_AVX2
	int lv = cpu_level();
	if (lv == 2)
		return class_gaps_avx2(old, unit, range_len, n, pos, oldv, cc, cm, at, gseq, sm, sb);
	if (lv == 1)
		return class_gaps_popcnt(old, unit, range_len, n, pos, oldv, cc, cm, at, gseq, sm, sb);
#endif
	return class_gaps_body(old, unit, range_len, n, pos, oldv, cc, cm,
			       cpu_cap >= 1 && clsmap_fast(cm, unit), NULL, cm->ncls, at, gseq, sm,
			       sb);
}

#ifdef CLS_AVX2
/* Gap symbols and extra bits of gseq (as gap_sym of g + 1), 8 at a time
 * while the 8 gaps are below 2^24 (so that g + 1 is exact as a float,
 * whose exponent is its bit length); stops at the first 8 with a larger
 * one. Returns how many it did; the caller goes on with gap_sym. */
__attribute__((target("avx2"))) static size_t
gap_syms_avx2(size_t n, const uint64_t *gseq, uint8_t *sym, struct bitw *w)
{
	const __m256i big = _mm256_set1_epi64x((long long)~0xffffffULL);
	const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
	const __m256i three = _mm256_set1_epi32(3), four = _mm256_set1_epi32(4);
	const __m256i bias = _mm256_set1_epi32(127);
	struct bitw lw = *w;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(gseq + i));
		__m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(gseq + i + 4));
		if (!_mm256_testz_si256(_mm256_or_si256(a, b), big))
			break;
		/* the low halves in order: [0 1 4 5 | 2 3 6 7], then 0 2 1 3 */
		__m256i v = _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(a),
								  _mm256_castsi256_ps(b), 0x88));
		v = _mm256_add_epi32(_mm256_permute4x64_epi64(v, 0xd8), one);
		__m256i small = _mm256_cmpgt_epi32(four, v);
		__m256i k = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(v)), 23), bias);
		__m256i nb = _mm256_andnot_si256(small, _mm256_sub_epi32(k, two));
		__m256i x = _mm256_and_si256(v, _mm256_sub_epi32(_mm256_sllv_epi32(one, nb), one));
		__m256i s = _mm256_add_epi32(_mm256_add_epi32(three, _mm256_slli_epi32(nb, 2)),
					     _mm256_and_si256(_mm256_srlv_epi32(v, nb), three));
		s = _mm256_blendv_epi8(s, _mm256_sub_epi32(v, one), small);
		lanes_to_bytes(s, sym + i);
		uint32_t xs[8], ks[8];
		_mm256_storeu_si256((__m256i *)(void *)xs, x);
		_mm256_storeu_si256((__m256i *)(void *)ks, nb);
		for (int j = 0; j < 8; j++) /* nb <= 22 */
			bw_put32(&lw, xs[j], ks[j]);
	}
	*w = lw;
	return i;
}
#endif

/* The CLASSED positions section: the field, the classes, each class's
 * count and table, then the gap symbols rANS-coded class by class and
 * their extra bits; appended to out after its length. */
static int encode_class_positions(struct denc *d, const struct clsmap *cm,
				  const uint8_t *old, uint64_t range_len,
				  const uint64_t *pos, const uint64_t *oldv,
				  struct dcr_buf *out)
{
	const size_t n = d->n;
	const unsigned K = cm->ncls;
	int rc = -ENOMEM;
	uint8_t *cc = malloc(n);
	uint64_t *gseq = malloc(n * sizeof(uint64_t));
	uint64_t (*hist)[GAP_NSYM] = calloc(K, sizeof(*hist));
	struct esym *es = malloc((size_t)K * GAP_NSYM * sizeof(*es));
	uint64_t *strip = malloc((size_t)2 * GAP_STRIP * K * sizeof(uint64_t));
	if (!cc || !gseq || !hist || !es || !strip)
		goto out;
	uint64_t count[MAXCLS] = {0};
	for (size_t i = 0; i < n; i++)
		cc[i] = cm->cls[vmap_exp(&cm->vm, oldv[i])];
	count_syms(cc, n, K, count);
	size_t off[MAXCLS + 1], at[MAXCLS];
	off[0] = 0;
	for (unsigned c = 0; c < K; c++) {
		off[c + 1] = off[c] + count[c];
		at[c] = off[c];
	}
	if (class_gaps(old, d->unit, range_len, n, pos, oldv, cc, cm, at, gseq, strip,
		       strip + (size_t)GAP_STRIP * K)) {
		rc = -EINVAL; /* the caller's old values are not the range's */
		goto out;
	}
	struct bitw w = {d->bits, 0, 0, 0};
	size_t i = 0;
#ifdef CLS_AVX2
	if (cpu_level() >= 2)
		i = gap_syms_avx2(n, gseq, d->sym, &w);
#endif
	for (; i < n; i++) {
		unsigned nb;
		uint64_t x;
		d->sym[i] = (uint8_t)gap_sym(gseq[i] + 1, &nb, &x);
		bw_put(&w, x, nb);
	}
	bw_flush(&w);
	for (unsigned c = 0; c < K; c++)
		count_syms(d->sym + off[c], off[c + 1] - off[c], GAP_NSYM, hist[c]);
	/* head, counts and tables */
	struct dcr_buf *sec = &d->sec;
	if (dcr_buf_add_u8(sec, (uint8_t)cm->vm.mshift) < 0 ||
	    dcr_buf_add_u8(sec, (uint8_t)cm->vm.ebits) < 0 ||
	    dcr_buf_add_u8(sec, (uint8_t)K) < 0)
		goto out;
	for (unsigned c = 0; c + 1 < K; c++)
		if (dcr_buf_add_u8(sec, (uint8_t)cm->thr[c]) < 0)
			goto out;
	for (unsigned c = 0; c < K; c++)
		if (dcr_buf_add_varint(sec, count[c]) < 0)
			goto out;
	for (unsigned c = 0; c < K; c++) {
		if (!count[c])
			continue;
		uint8_t qc[GAP_NSYM];
		uint32_t f[GAP_NSYM];
		unsigned cnt, lo = qtable_quantize(hist[c], qc, &cnt);
		qtable_freqs(qc, cnt, f);
		if (dcr_buf_add_u8(sec, (uint8_t)lo) < 0 || dcr_buf_add_u8(sec, (uint8_t)cnt) < 0)
			goto out;
		for (unsigned s = 0; s < cnt; s += 2)
			if (dcr_buf_add_u8(sec, (uint8_t)(qc[s] | (s + 1 < cnt ? qc[s + 1] << 4 : 0))) < 0)
				goto out;
		uint32_t start = 0;
		for (unsigned s = 0; s < cnt; s++) {
			if (f[s])
				esym_init(&es[c * GAP_NSYM + lo + s], start, f[s]);
			start += f[s];
		}
	}
	/* change i (in class order) uses state i mod 2 */
	uint8_t *end = d->scratch + d->scap;
	struct renc re = {d->scratch, end, {RL, RL}};
	for (unsigned c = K; c-- > 0;) {
		const struct esym *ec = es + c * GAP_NSYM;
		for (size_t i = off[c + 1]; i-- > off[c];)
			renc_put(&re, (int)(i & 1), &ec[d->sym[i]]);
	}
	if (renc_finish(&re, end, sec) < 0 || dcr_buf_add(sec, d->bits, w.len) < 0 ||
	    dcr_buf_add_varint(out, sec->len) < 0 || dcr_buf_add(out, sec->p, sec->len) < 0)
		goto out;
	sec->len = 0;
	rc = 0;
out:
	free(cc);
	free(gseq);
	free(hist);
	free(es);
	free(strip);
	return rc;
}

/* DELTA, or CLASSED when cm is given (old: the range's old bits). */
static int delta_encode(unsigned unit, int dtype, size_t n, const uint64_t *pos,
			const uint64_t *oldv, const uint64_t *newv,
			const struct clsmap *cm, const uint8_t *old, uint64_t range_len,
			struct dcr_buf *out, struct dcr_err *e)
{
	struct denc d = { .unit = unit, .vnsym = 1 + 16 * unit, .n = n };
	vmap_for_dtype(dtype, unit, &d.vm);

	if (dcr_buf_add_varint(out, n) < 0)
		return dcr_err_set(e, -ENOMEM, "out of memory");
	if (!n)
		return 0;

	int rc = -ENOMEM;
	d.sym = malloc(n);
	d.ex = malloc(n);
	d.scap = 2 * n + 16; /* at most one 16-bit word per symbol */
	d.scratch = malloc(d.scap);
	d.bits = malloc(8 * n + 16);
	d.hist = malloc((size_t)NE * VAL_NSYM_MAX * sizeof(uint64_t));
	d.es = malloc(sizeof(*d.es) * MAXCTX * VAL_NSYM_MAX);
	if (!d.sym || !d.ex || !d.scratch || !d.bits || !d.hist || !d.es)
		goto out;
	/* (value_symbols sets the histograms of the exponents there are) */
	if (cm && (rc = encode_class_positions(&d, cm, old, range_len, pos, oldv, out)) < 0)
		goto out;
	rc = -ENOMEM;
	if ((!cm && encode_positions(&d, pos, out) < 0) || encode_values(&d, oldv, newv, out) < 0)
		goto out;
	rc = 0;
out:
	free(d.sym);
	free(d.ex);
	free(d.scratch);
	free(d.bits);
	free(d.hist);
	free(d.es);
	dcr_buf_free(&d.sec);
	if (rc == -EINVAL)
		dcr_err_set(e, rc, "old values differ from the range's old bits");
	else if (rc < 0)
		dcr_err_set(e, rc, "out of memory");
	return rc;
}

/* ---- DELTA decoder --------------------------------------------------- */

static int bad(struct dcr_err *e, const char *codec, const char *what)
{
	return dcr_err_set(e, DCR_EFORMAT, "%s payload: %s", codec, what);
}

/* Parse the header; on success (ps, pn) is the positions section and
 * (vs, vn) the values section. */
static int delta_header(const uint8_t *p, size_t len, uint64_t range_len,
			size_t n, const uint8_t **ps, size_t *pn,
			const uint8_t **vs, size_t *vn, struct dcr_err *e)
{
	struct dcr_rd r;
	dcr_rd_init(&r, p, len);
	uint64_t hn = dcr_rd_varint(&r);
	if (r.bad)
		return bad(e, "delta", "truncated header");
	if (hn != (uint64_t)n)
		return dcr_err_set(e, DCR_EFORMAT,
				   "delta payload: holds %llu changes, the item says %zu",
				   (unsigned long long)hn, n);
	if ((uint64_t)n > range_len)
		return dcr_err_set(e, DCR_EFORMAT,
				   "delta payload: %zu changes in a range of %llu elements",
				   n, (unsigned long long)range_len);
	if (!n) {
		if (dcr_rd_left(&r))
			return bad(e, "delta", "trailing bytes after an empty item");
		*ps = *vs = r.p;
		*pn = *vn = 0;
		return 0;
	}
	uint64_t plen = dcr_rd_varint(&r);
	if (r.bad || plen > dcr_rd_left(&r))
		return bad(e, "delta", "truncated positions section");
	*ps = r.p;
	*pn = (size_t)plen;
	*vs = r.p + plen;
	*vn = dcr_rd_left(&r) - (size_t)plen;
	return 0;
}

/* Split a section after its table(s) into rANS stream and raw bits. */
static int split_streams(struct dcr_rd *r, struct rdec *d, struct bitr *br,
			 size_t *rawlen)
{
	uint64_t rl = dcr_rd_varint(r);
	if (r->bad || rl > dcr_rd_left(r))
		return -1;
	if (rdec_init(d, r->p, (size_t)rl) < 0)
		return -1;
	r->p += rl;
	br->p = r->p;
	br->end = r->end;
	br->acc = 0;
	br->n = 0;
	br->start = r->p;
	br->pad = 0;
	*rawlen = dcr_rd_left(r);
	return 0;
}

/* Refill rANS state X from the stream at rp (end re) after a decode
 * step: RENORM_FAST without a branch, for when 2 bytes are surely left;
 * RENORM_SAFE checked, setting rbad when the stream has run out. */
#define RENORM_FAST(X)                                                     \
	do {                                                               \
		uint32_t r_ = (X) < RL;                                    \
		uint32_t w_ = (X) << 16 | get_le16(rp);                    \
		(X) = r_ ? w_ : (X);                                       \
		rp += 2 * r_;                                              \
	} while (0)
#define RENORM_SAFE(X)                                                     \
	do {                                                               \
		if ((X) < RL) {                                            \
			if (re - rp >= 2) {                                \
				(X) = (X) << 16 | get_le16(rp);            \
				rp += 2;                                   \
			} else {                                           \
				rbad = 1;                                  \
				(X) = RL;                                  \
			}                                                  \
		}                                                          \
	} while (0)

/* One rANS decode step on local state X into symbol S, from the tables
 * FC (freq | (slot - cum) << 16 per slot) and SY (symbol per slot),
 * refilled by RENORM. */
#define RDEC(X, FC, SY, S, RENORM)                                         \
	do {                                                               \
		uint32_t sl_ = (X) & (PM - 1), fc_ = (FC)[sl_];            \
		(S) = (SY)[sl_];                                           \
		(X) = (fc_ & 0xffff) * ((X) >> PB) + (fc_ >> 16);          \
		RENORM(X);                                                 \
	} while (0)

/* Why a positions section's rANS stream or raw bits do not end where the
 * item does, or NULL when both were used up exactly. */
static const char *positions_end(const struct rdec *d, const struct bitr *br, size_t rawlen)
{
	if (!rdec_done(d))
		return "positions stream does not end where the item does";
	if (!br_check(br, rawlen))
		return "positions raw bits do not end where the item does";
	return NULL;
}

static int delta_decode_positions(const uint8_t *p, size_t len,
				  uint64_t range_len, size_t n, uint64_t *pos,
				  struct dcr_err *e)
{
	const uint8_t *ps, *vs;
	size_t pn, vn;
	int rc = delta_header(p, len, range_len, n, &ps, &pn, &vs, &vn, e);
	if (rc < 0 || !n)
		return rc;
	dent *tab = malloc(PM * (sizeof(dent) + 1));
	if (!tab)
		return dcr_err_set(e, -ENOMEM, "out of memory");
	uint64_t gbase[GAP_NSYM];
	uint8_t gnb[GAP_NSYM];
	gap_tables(gbase, gnb);
	struct dcr_rd r;
	dcr_rd_init(&r, ps, pn);
	const char *why = NULL;
	int empty;
	struct rdec d;
	struct bitr br;
	size_t rawlen;
	if (table_read(&r, GAP_NSYM, tab, &empty, &why) < 0)
		goto fail;
	if (empty) {
		why = "empty gap table";
		goto fail;
	}
	if (split_streams(&r, &d, &br, &rawlen) < 0) {
		why = "bad positions stream header";
		goto fail;
	}
	/* in place: freq | (slot - cum) << 16, and the symbols after */
	uint32_t *fc = tab;
	uint8_t *sy = (uint8_t *)(tab + PM);
	for (unsigned sl = 0; sl < PM; sl++) {
		sy[sl] = (uint8_t)(tab[sl] >> 24);
		fc[sl] = ((tab[sl] & 0xfff) + 1) | ((tab[sl] >> 12) & 0xfff) << 16;
	}
	uint32_t x0 = d.x[0], x1 = d.x[1];
	const uint8_t *rp = d.p, *re = d.end;
	int rbad = 0;
	uint64_t next = 0; /* first free position; next <= range_len */
	int over = 0;
	BR_LOCALS(&br);
	/* G: the gap of symbol S; g < range_len - next keeps the position in
	 * range */
#define GAP(S, G)                                                          \
	do {                                                               \
		BITS64(gnb[S], G);                                         \
		(G) += gbase[S] - 1;                                       \
	} while (0)
	size_t i = 0;
	for (; i + 1 < n; i += 2) {
		unsigned s0, s1;
		if (re - rp >= 4) {
			RDEC(x0, fc, sy, s0, RENORM_FAST);
			RDEC(x1, fc, sy, s1, RENORM_FAST);
		} else {
			RDEC(x0, fc, sy, s0, RENORM_SAFE);
			RDEC(x1, fc, sy, s1, RENORM_SAFE);
		}
		uint64_t g0, g1;
		GAP(s0, g0);
		GAP(s1, g1);
		over |= g0 >= range_len - next;
		next += g0 + 1;
		pos[i] = next - 1;
		over |= next > range_len || g1 >= range_len - next;
		next += g1 + 1;
		pos[i + 1] = next - 1;
		if (__builtin_expect(over, 0))
			break;
	}
	if (!over && i < n) {
		unsigned s0;
		RDEC(x0, fc, sy, s0, RENORM_SAFE);
		uint64_t g0;
		GAP(s0, g0);
		over |= g0 >= range_len - next;
		next += g0 + 1;
		pos[i] = next - 1;
	}
#undef GAP
	BR_SAVE(&br);
	d.x[0] = x0;
	d.x[1] = x1;
	d.p = rp;
	d.bad = rbad;
	if (over) {
		why = "position beyond the range";
		goto fail;
	}
	if ((why = positions_end(&d, &br, rawlen)))
		goto fail;
	free(tab);
	return 0;
fail:
	free(tab);
	return bad(e, "delta", why);
}

/* Layout of the decode tables of the value symbols: slot -> symbol for
 * every context, then freq | cum << 16 for every (context, symbol), at
 * fixed offsets from one base. */
#define VT_SYM 0				/* u8 [MAXCTX][PM] */
#define VT_FC (MAXCTX * PM)			/* u32 [MAXCTX][256] */
#define VT_SIZE (VT_FC + MAXCTX * 256 * 4)

/* Values are decoded in two passes, so that each keeps its state in
 * registers: the symbols (rANS, context from the old value), then the
 * values (raw bits and arithmetic). */

/* Pass 1, specialised for each unit and the common exponent fields.
 * ctxoff[field] is the context times 256: its entries are at VT_FC +
 * 4 (ctxoff + sym), its slots at VT_SYM + 16 ctxoff + slot. Returns
 * nonzero when the stream ran out. */
static inline __attribute__((always_inline)) int
value_syms(const unsigned unit, size_t n, const uint64_t *op, uint8_t *sym,
	   const uint8_t *vt, const uint32_t *ctxoff, const unsigned mshift,
	   const uint64_t emask, struct rdec *d)
{
	const uint64_t mask = unit_mask(unit);
	const uint32_t *tfc = (const uint32_t *)(vt + VT_FC);
	uint32_t x0 = d->x[0], x1 = d->x[1];
	const uint8_t *rp = d->p, *re = d->end;
	int rbad = 0;
#define SSTEP(X, I)                                                        \
	do {                                                               \
		uint32_t co_ = ctxoff[((op[I] & mask) >> mshift) & emask]; \
		uint32_t sl_ = (X) & (PM - 1);                             \
		unsigned s_ = vt[VT_SYM + (co_ << 4) + sl_];               \
		uint32_t fc_ = tfc[co_ + s_];                              \
		(X) = (fc_ & 0xffff) * ((X) >> PB) + sl_ - (fc_ >> 16);   \
		sym[I] = (uint8_t)s_;                                      \
	} while (0)
	size_t i = 0;
	for (; i + 1 < n && re - rp >= 4; i += 2) {
		SSTEP(x0, i);
		RENORM_FAST(x0);
		SSTEP(x1, i + 1);
		RENORM_FAST(x1);
	}
	for (; i + 1 < n; i += 2) {
		SSTEP(x0, i);
		RENORM_SAFE(x0);
		SSTEP(x1, i + 1);
		RENORM_SAFE(x1);
	}
	if (i < n) {
		SSTEP(x0, i);
		RENORM_SAFE(x0);
	}
#undef SSTEP
	d->x[0] = x0;
	d->x[1] = x1;
	d->p = rp;
	return rbad;
}

/* Pass 2, specialised for each unit and value map. Symbol 0 is d = 0;
 * s > 0 is |d| = 2^k + k raw bits with k = (s - 1) / 2, d < 0 when s - 1
 * is odd. With the sign-folded float map d is the change of the
 * magnitude, so unless the magnitude leaves [0, mag] (the value crosses
 * zero or overflows: rare) the new value is the old sign with the new
 * magnitude. Otherwise, and for the other maps, the general formula:
 * new = M^-1(M(old) + d), d negated for negative old under folding.
 * Returns -1 for a symbol outside the alphabet. */
static inline __attribute__((always_inline)) int
value_vals(const unsigned unit, size_t n, const uint64_t *op,
	   const uint8_t *sym, uint64_t *newv, const int flt, const int fold,
	   struct bitr *br)
{
	const uint64_t mask = unit_mask(unit), half = mask ^ (mask >> 1);
	const uint64_t mag = mask >> 1;
	const unsigned top = 8 * unit - 1, vnsym = 1 + 16 * unit;
	BR_LOCALS(br);
	unsigned smax = 0;
	/* per symbol: k, 2^k (0 for s = 0), all ones if d < 0; symbols
	 * outside the alphabet decode as 1 and are reported */
	uint8_t kt[256];
	uint64_t bt[256], st[256];
	for (unsigned s = 0; s < 256; s++) {
		unsigned c = s < vnsym ? s : 1, nz = c != 0;
		kt[s] = (uint8_t)((c - nz) >> 1);
		bt[s] = (uint64_t)nz << kt[s];
		st[s] = 0 - (uint64_t)((c - nz) & 1);
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t o = op[i] & mask;
		unsigned s = sym[i], k = kt[s];
		smax = s > smax ? s : smax;
		uint64_t a;
		if (unit <= 4)
			BITS32(k, a);
		else
			BITS64(k, a);
		a += bt[s];
		uint64_t sm = st[s];
		uint64_t sd = (a ^ sm) - sm;
		uint64_t nw, m2 = (o & mag) + sd;
		if (fold && __builtin_expect(m2 <= mag, 1)) {
			nw = (o & half) | m2;
		} else if (flt) {
			uint64_t sg = o >> top;
			uint64_t mo = o ^ (sg ? mask : half);
			uint64_t mn = (fold && sg ? mo - sd : mo + sd) & mask;
			nw = mn ^ (mn >> top ? half : mask);
		} else {
			nw = (o + sd) & mask;
		}
		newv[i] = nw;
	}
	BR_SAVE(br);
	return smax >= vnsym ? -1 : 0;
}

/* The values section's head: the value map, the pivot and the number of
 * contexts, each checked against the unit. */
static int values_head(struct dcr_rd *r, unsigned unit, struct vmap *vm,
		       unsigned *pivot, unsigned *nctx, struct dcr_err *e)
{
	vm->flags = dcr_rd_u8(r);
	vm->mshift = dcr_rd_u8(r);
	vm->ebits = dcr_rd_u8(r);
	*pivot = dcr_rd_u8(r);
	*nctx = dcr_rd_u8(r);
	if (r->bad)
		return bad(e, "delta", "truncated values header");
	if (vm->flags & ~VF_KNOWN)
		return bad(e, "delta", "unknown value flags");
	if ((vm->flags & VF_FOLD) && !(vm->flags & VF_FLOAT))
		return bad(e, "delta", "sign folding without the float map");
	/* the field must lie within the unit: a shift by the unit's width
	 * (64 with no exponent bits) is undefined (found by fuzzing) */
	if (vm->ebits > 11 || vm->mshift >= 8 * unit || vm->mshift + vm->ebits > 8 * unit)
		return bad(e, "delta", "exponent field outside the unit");
	if (*nctx < 1 || *nctx > MAXCTX || (!vm->ebits && *nctx != 1))
		return bad(e, "delta", "bad number of value contexts");
	return 0;
}

/* The values section vs[0..vn) of n > 0 changes (DELTA and CLASSED). */
static int values_decode(const uint8_t *vs, size_t vn, unsigned unit, size_t n,
			 const uint64_t *oldv, uint64_t *newv, struct dcr_err *e)
{
	const unsigned vnsym = 1 + 16 * unit;
	struct dcr_rd r;
	dcr_rd_init(&r, vs, vn);
	struct vmap vm;
	unsigned pivot, nctx;
	int rc = values_head(&r, unit, &vm, &pivot, &nctx, e);
	if (rc < 0)
		return rc;
	size_t nfield = (size_t)1 << vm.ebits;
	/* the loops' tables (VT_*), the dent tables as read, the context of
	 * each exponent field value; the symbols; zeros when there are no
	 * old values */
	uint8_t *vt = malloc(VT_SIZE + (size_t)nctx * PM * sizeof(dent) +
			     nfield * sizeof(uint32_t) + n);
	uint64_t *zeros = oldv ? NULL : calloc(n, sizeof(uint64_t));
	if (!vt || (!oldv && !zeros)) {
		free(vt);
		free(zeros);
		return dcr_err_set(e, -ENOMEM, "out of memory");
	}
	uint32_t *tfc = (uint32_t *)(vt + VT_FC);
	uint8_t *tsym = vt + VT_SYM;
	dent *tab = (dent *)(vt + VT_SIZE);
	uint32_t *ctxoff = (uint32_t *)(tab + (size_t)nctx * PM);
	uint8_t *sym = (uint8_t *)(ctxoff + nfield);
	const char *why = NULL;
	struct rdec d;
	struct bitr br;
	size_t rawlen;
	for (unsigned c = 0; c < nctx; c++) {
		int empty;
		if (table_read(&r, vnsym, tab + (size_t)c * PM, &empty, &why) < 0)
			goto fail;
	}
	if (split_streams(&r, &d, &br, &rawlen) < 0) {
		why = "bad values stream header";
		goto fail;
	}
	/* context of each exponent field value */
	for (size_t f = 0; f < nfield; f++) {
		int ev = (int)(vm.ebits > 8 ? f >> (vm.ebits - 8) : f);
		int c = (int)pivot - ev;
		c = c < 0 ? 0 : c > (int)nctx - 1 ? (int)nctx - 1 : c;
		ctxoff[f] = (uint32_t)c * 256;
	}
	for (size_t c = 0; c < nctx; c++) {
		const dent *t = tab + c * PM;
		for (unsigned sl = 0; sl < PM; sl++) {
			unsigned sy = t[sl] >> 24;
			tsym[c * PM + sl] = (uint8_t)sy;
			/* freq | cum << 16; SYM_BAD gets freq PM, cum 0 */
			tfc[c * 256 + sy] = ((t[sl] & 0xfff) + 1) | (sl - ((t[sl] >> 12) & 0xfff)) << 16;
		}
	}
	const int flt = (vm.flags & VF_FLOAT) != 0, fold = (vm.flags & VF_FOLD) != 0;
	const uint64_t emask = nfield - 1;
	const uint64_t *ov = oldv ? oldv : zeros;
	/* pass 1 specialised for each unit and the exponent fields of bf16,
	 * f16 and f32; pass 2 for each unit and value map (fold implies flt) */
#define SYMS(U, MS, EM) value_syms(U, n, ov, sym, vt, ctxoff, MS, EM, &d)
	if (unit == 2 && vm.mshift == 7 && emask == 255)
		d.bad = SYMS(2, 7, 255);
	else if (unit == 2 && vm.mshift == 10 && emask == 31)
		d.bad = SYMS(2, 10, 31);
	else if (unit == 4 && vm.mshift == 23 && emask == 255)
		d.bad = SYMS(4, 23, 255);
	else switch (unit) {
	case 1: d.bad = SYMS(1, vm.mshift, emask); break;
	case 2: d.bad = SYMS(2, vm.mshift, emask); break;
	case 4: d.bad = SYMS(4, vm.mshift, emask); break;
	default: d.bad = SYMS(8, vm.mshift, emask); break;
	}
#undef SYMS
#define VALS(U) (fold ? value_vals(U, n, ov, sym, newv, 1, 1, &br) : \
		 flt ? value_vals(U, n, ov, sym, newv, 1, 0, &br) : \
		 value_vals(U, n, ov, sym, newv, 0, 0, &br))
	switch (unit) {
	case 1: rc = VALS(1); break;
	case 2: rc = VALS(2); break;
	case 4: rc = VALS(4); break;
	default: rc = VALS(8); break;
	}
#undef VALS
	if (rc < 0) {
		why = "value in a context with no symbols";
		goto fail;
	}
	if (!rdec_done(&d)) {
		why = "values stream does not end where the item does";
		goto fail;
	}
	if (!br_check(&br, rawlen)) {
		why = "values raw bits do not end where the item does";
		goto fail;
	}
	free(vt);
	free(zeros);
	return 0;
fail:
	free(vt);
	free(zeros);
	return bad(e, "delta", why);
}

static int delta_decode_values(const uint8_t *p, size_t len, unsigned unit,
			       uint64_t range_len, size_t n,
			       const uint64_t *oldv, uint64_t *newv,
			       struct dcr_err *e)
{
	const uint8_t *ps, *vs;
	size_t pn, vn;
	int rc = delta_header(p, len, range_len, n, &ps, &pn, &vs, &vn, e);
	if (rc < 0 || !n)
		return rc;
	return values_decode(vs, vn, unit, n, oldv, newv, e);
}

/* ---- CLASSED decoder ------------------------------------------------- */

/* The CLASSED positions section's head: field, classes, counts; then the
 * decode tables of the classes that have changes: the symbol of each slot
 * (sy[c * PM + slot]) and freq | cum << 16 of each symbol (fc[c *
 * GAP_NSYM + s]). Returns 0 or -1 with *why. */
static int class_head(struct dcr_rd *r, unsigned unit, size_t n, struct clsmap *cm,
		      uint64_t *count, uint32_t *fc, uint8_t *sy, const char **why)
{
	memset(cm, 0, sizeof(*cm));
	cm->vm.mshift = dcr_rd_u8(r);
	cm->vm.ebits = dcr_rd_u8(r);
	cm->ncls = dcr_rd_u8(r);
	if (r->bad) {
		*why = "truncated classes header";
		return -1;
	}
	if (cm->vm.ebits > 11 || cm->vm.mshift + cm->vm.ebits > 8 * unit) {
		*why = "exponent field outside the unit";
		return -1;
	}
	if (cm->ncls < 1 || cm->ncls > MAXCLS || (!cm->vm.ebits && cm->ncls != 1)) {
		*why = "bad number of classes";
		return -1;
	}
	const unsigned nf = cm->vm.ebits >= 8 ? NE : 1u << cm->vm.ebits;
	for (unsigned c = 0; c + 1 < cm->ncls; c++) {
		cm->thr[c] = dcr_rd_u8(r);
		if (cm->thr[c] < 1 || cm->thr[c] >= nf || (c && cm->thr[c] >= cm->thr[c - 1])) {
			*why = "class thresholds are not decreasing within the field";
			return -1;
		}
	}
	uint64_t sum = 0;
	for (unsigned c = 0; c < cm->ncls; c++) {
		count[c] = dcr_rd_varint(r);
		if (r->bad || count[c] > n - sum) {
			*why = r->bad ? "truncated class counts" : "class counts exceed the changes";
			return -1;
		}
		sum += count[c];
	}
	if (sum != n) {
		*why = "class counts do not add up to the changes";
		return -1;
	}
	for (unsigned c = 0; c < cm->ncls; c++) {
		if (!count[c])
			continue;
		unsigned lo = dcr_rd_u8(r), cnt = dcr_rd_u8(r);
		const uint8_t *nib = r->bad ? NULL : dcr_rd_bytes(r, (cnt + 1) / 2);
		if (!nib) {
			*why = "truncated class table";
			return -1;
		}
		if (!cnt || lo + cnt > GAP_NSYM || ((cnt & 1) && nib[cnt / 2] >> 4)) {
			*why = "class table outside the gap symbols";
			return -1;
		}
		uint8_t q[GAP_NSYM];
		unsigned any = 0;
		for (unsigned s = 0; s < cnt; s++) {
			q[s] = (uint8_t)(nib[s / 2] >> (4 * (s & 1)) & 15);
			any |= q[s];
		}
		if (!any) {
			*why = "empty class table";
			return -1;
		}
		uint32_t f[GAP_NSYM];
		qtable_freqs(q, cnt, f);
		uint32_t cum = 0;
		for (unsigned s = 0; s < cnt; s++) {
			fc[c * GAP_NSYM + lo + s] = f[s] | cum << 16;
			memset(sy + (size_t)c * PM + cum, (int)(lo + s), f[s]);
			cum += f[s];
		}
	}
	clsmap_fill(cm);
	return 0;
}

/* Phase 1: the gaps of each class in turn (class order, the way the
 * encoder wrote them), as class ranks: rk[off[c] + j] is the rank in
 * class c of its j-th change; each class's list ends in UINT64_MAX.
 * Returns -1 when a rank reaches range_len. */
static int class_ranks(const uint64_t *count, unsigned K, const uint32_t *fc, const uint8_t *sy,
		       const uint64_t *gbase, const uint8_t *gnb, uint64_t range_len,
		       struct rdec *d, struct bitr *br, uint64_t *rk)
{
	uint32_t x0 = d->x[0], x1 = d->x[1];
	const uint8_t *rp = d->p, *re = d->end;
	int rbad = 0, over = 0;
	size_t si = 0, o = 0;
	BR_LOCALS(br);
#define CSTEP(X)                                                           \
	do {                                                               \
		unsigned s_;                                               \
		uint64_t g_;                                               \
		uint32_t sl_ = (X) & (PM - 1);                             \
		s_ = y[sl_];                                               \
		uint32_t fc_ = f[s_];                                      \
		(X) = (fc_ & 0xffff) * ((X) >> PB) + sl_ - (fc_ >> 16);    \
		RENORM_SAFE(X);                                            \
		BITS64(gnb[s_], g_);                                       \
		g_ += gbase[s_] - 1;                                       \
		over |= g_ >= range_len - next;                            \
		next += g_ + 1;                                            \
		rk[o++] = next - 1;                                        \
		si++;                                                      \
	} while (0)
	for (unsigned c = 0; c < K && !over; c++) {
		const uint32_t *f = fc + (size_t)c * GAP_NSYM;
		const uint8_t *y = sy + (size_t)c * PM;
		uint64_t next = 0, left = count[c];
		if (left && (si & 1)) {
			CSTEP(x1);
			left--;
		}
		for (; left >= 2 && !over; left -= 2) {
			CSTEP(x0);
			CSTEP(x1);
		}
		if (left && !over)
			CSTEP(x0);
		rk[o++] = UINT64_MAX;
	}
#undef CSTEP
	BR_SAVE(br);
	d->x[0] = x0;
	d->x[1] = x1;
	d->p = rp;
	d->bad = rbad;
	return over ? -1 : 0;
}

/* Phase 2: scan the old values block by block; a class's next change is
 * the element of its next rank. Positions come out in order. Returns -1
 * when a change lies beyond the range. */
static inline __attribute__((always_inline)) int
class_scan_body(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
		const struct clsmap *cm, const uint64_t *const *rkc, const int fast,
		blkfn *const mk, uint64_t *pos)
{
	const unsigned K = cm->ncls;
	const uint64_t *rk[MAXCLS];
	uint64_t base[MAXCLS] = {0}, m[MAXCLS];
	size_t k = 0;
	for (unsigned c = 0; c < K; c++)
		rk[c] = rkc[c];
	for (uint64_t b = 0; k < n; b += CBLK) {
		if (b >= range_len)
			return -1;
		blk_at(old, unit, range_len, b, cm, fast, mk, K, m);
		uint64_t chg = 0;
		for (unsigned c = 0; c < K; c++) {
			uint64_t top = base[c] + pop64(m[c]);
			while (*rk[c] < top)
				chg |= 1ULL << select64(m[c], (unsigned)(*rk[c]++ - base[c]));
			base[c] = top;
		}
		k = emit_positions(pos, k, n, b, chg);
	}
	return 0;
}

#ifdef CLS_AVX2
__attribute__((target("avx2,popcnt"))) static int
class_scan_avx2(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
		const struct clsmap *cm, const uint64_t *const *rk, uint64_t *pos)
{
	if (clsmap_fast(cm, unit))
		return class_scan_body(old, unit, range_len, n, cm, rk, 2, blk_masks_avx2, pos);
	return class_scan_body(old, unit, range_len, n, cm, rk, 0, NULL, pos);
}

__attribute__((target("popcnt"))) static int
class_scan_popcnt(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
		  const struct clsmap *cm, const uint64_t *const *rk, uint64_t *pos)
{
	if (clsmap_fast(cm, unit))
		return class_scan_body(old, unit, range_len, n, cm, rk, 1, NULL, pos);
	return class_scan_body(old, unit, range_len, n, cm, rk, 0, NULL, pos);
}
#endif

#ifdef CLS_AVX2
/* Phase 2 with PDEP: each class's ranks as a bitmap over the class's
 * subsequence (rb[c], nw[c] words and a zero word after them); the
 * changes of class c in a block are the class's next pop64(m[c]) bits
 * deposited on the set bits of m[c]. No branch per change or per class;
 * the same positions and the same refusals as class_scan_body. */
__attribute__((target("avx2,popcnt,bmi2"))) static inline __attribute__((always_inline)) int
class_dep_body(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
	       const struct clsmap *cm, uint64_t *const *rb, const uint64_t *nw, const int fast,
	       const unsigned K, uint64_t *pos)
{
	uint64_t base[MAXCLS] = {0}, m[MAXCLS];
	size_t k = 0;
	for (uint64_t b = 0; k < n; b += CBLK) {
		if (b >= range_len)
			return -1;
		blk_at(old, unit, range_len, b, cm, fast, blk_masks_avx2, K, m);
		uint64_t chg = 0;
#pragma GCC unroll 8
		for (unsigned c = 0; c < K; c++) {
			uint64_t o = base[c], w = o >> 6;
			unsigned sh = (unsigned)(o & 63);
			uint64_t bits = w < nw[c] ? rb[c][w] >> sh | rb[c][w + 1] << 1 << (63 - sh) : 0;
			chg |= _pdep_u64(bits, m[c]);
			base[c] = o + pop64(m[c]);
		}
		k = emit_positions(pos, k, n, b, chg);
	}
	return 0;
}

__attribute__((target("avx2,popcnt,bmi2"))) static int
class_dep_avx2(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
	       const struct clsmap *cm, uint64_t *const *rb, const uint64_t *nw, uint64_t *pos)
{
	/* the class count as a constant where the encoder's plan can put it */
	if (clsmap_fast(cm, unit))
		switch (cm->ncls) {
		case 1: return class_dep_body(old, unit, range_len, n, cm, rb, nw, 2, 1, pos);
		case 2: return class_dep_body(old, unit, range_len, n, cm, rb, nw, 2, 2, pos);
		case 3: return class_dep_body(old, unit, range_len, n, cm, rb, nw, 2, 3, pos);
		case 4: return class_dep_body(old, unit, range_len, n, cm, rb, nw, 2, 4, pos);
		default: return class_dep_body(old, unit, range_len, n, cm, rb, nw, 2, cm->ncls, pos);
		}
	return class_dep_body(old, unit, range_len, n, cm, rb, nw, 0, cm->ncls, pos);
}

/* The rank bitmaps of class_dep_body from the rank lists, then the scan.
 * More than n changes can never come out: a block deposits at most the
 * class's remaining ranks, and the lists hold n in all. */
static int class_scan_dep(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
			  const struct clsmap *cm, const uint64_t *const *rk, uint64_t *pos)
{
	const unsigned K = cm->ncls;
	uint64_t nw[MAXCLS], tot = 0;
	for (unsigned c = 0; c < K; c++) {
		const uint64_t *r = rk[c];
		uint64_t last = 0;
		for (; *r != UINT64_MAX; r++)
			last = *r;
		nw[c] = r == rk[c] ? 0 : (last >> 6) + 1;
		tot += nw[c] + 1;
	}
	uint64_t *words = calloc(tot, sizeof(uint64_t)), *rb[MAXCLS];
	if (!words)
		return -2;
	size_t o = 0;
	for (unsigned c = 0; c < K; c++) {
		rb[c] = words + o;
		o += nw[c] + 1;
		for (const uint64_t *r = rk[c]; *r != UINT64_MAX; r++)
			rb[c][*r >> 6] |= 1ULL << (*r & 63);
	}
	int rc = class_dep_avx2(old, unit, range_len, n, cm, rb, nw, pos);
	free(words);
	return rc;
}
#endif

static int class_scan(const uint8_t *old, unsigned unit, uint64_t range_len, size_t n,
		      const struct clsmap *cm, const uint64_t *const *rk, uint64_t *pos)
{
#ifdef CLS_AVX2
	int lv = cpu_level();
	if (lv == 2 && cpu_fast_pdep())
		return class_scan_dep(old, unit, range_len, n, cm, rk, pos);
	if (lv == 2)
		return class_scan_avx2(old, unit, range_len, n, cm, rk, pos);
	if (lv == 1)
		return class_scan_popcnt(old, unit, range_len, n, cm, rk, pos);
#endif
	if (cpu_cap >= 1 && clsmap_fast(cm, unit))
		return class_scan_body(old, unit, range_len, n, cm, rk, 1, NULL, pos);
	return class_scan_body(old, unit, range_len, n, cm, rk, 0, NULL, pos);
}

/* Positions and new values of a CLASSED payload, given the old bits of
 * the whole range. */
static int class_decode(const uint8_t *p, size_t len, unsigned unit, uint64_t range_len,
			size_t n, const uint8_t *old, uint64_t *pos, uint64_t *newv,
			struct dcr_err *e)
{
	const uint8_t *ps, *vs;
	size_t pn, vn;
	int rc = delta_header(p, len, range_len, n, &ps, &pn, &vs, &vn, e);
	if (rc < 0 || !n)
		return rc;
	sel8_init();
	struct dcr_rd r;
	dcr_rd_init(&r, ps, pn);
	struct clsmap cm;
	uint64_t count[MAXCLS];
	const char *why = NULL;
	struct rdec d;
	struct bitr br;
	size_t rawlen;
	/* tables for the classes with changes; ranks (n plus an end per
	 * class), later the old values */
	uint32_t *fc = malloc((size_t)MAXCLS * GAP_NSYM * sizeof(uint32_t));
	uint8_t *sy = malloc((size_t)MAXCLS * PM);
	uint64_t *rk = malloc((n + MAXCLS) * sizeof(uint64_t));
	if (!fc || !sy || !rk) {
		free(fc);
		free(sy);
		free(rk);
		return dcr_err_set(e, -ENOMEM, "out of memory");
	}
	uint64_t gbase[GAP_NSYM];
	uint8_t gnb[GAP_NSYM];
	gap_tables(gbase, gnb);
	if (class_head(&r, unit, n, &cm, count, fc, sy, &why) < 0)
		goto fail;
	if (split_streams(&r, &d, &br, &rawlen) < 0) {
		why = "bad positions stream header";
		goto fail;
	}
	if (class_ranks(count, cm.ncls, fc, sy, gbase, gnb, range_len, &d, &br, rk) < 0) {
		why = "position beyond the range";
		goto fail;
	}
	if ((why = positions_end(&d, &br, rawlen)))
		goto fail;
	const uint64_t *rkc[MAXCLS];
	size_t o = 0;
	for (unsigned c = 0; c < cm.ncls; c++) {
		rkc[c] = rk + o;
		o += count[c] + 1;
	}
	if ((rc = class_scan(old, unit, range_len, n, &cm, rkc, pos)) < 0) {
		if (rc == -2) {
			free(fc);
			free(sy);
			free(rk);
			return dcr_err_set(e, -ENOMEM, "out of memory");
		}
		why = "position beyond the range";
		goto fail;
	}
	free(fc);
	free(sy);
	for (size_t i = 0; i < n; i++)
		rk[i] = load_unit(old + pos[i] * unit, unit);
	rc = values_decode(vs, vn, unit, n, rk, newv, e);
	free(rk);
	return rc;
fail:
	free(fc);
	free(sy);
	free(rk);
	return bad(e, "classed", why);
}

/* ---- gap varints (XOR_ZSTD and RAW) ----------------------------------
 * gap[0] = pos[0], gap[i] = pos[i] - pos[i-1] - 1, each a varint. */

#define VARINT_SLACK 8 /* bytes put_gaps may write past its last gap */

/* A varint of at most 8 bytes (v < 2^56) and the same bytes back: its
 * 7-bit groups spread to the bytes of a word, or gathered from them. */
static inline uint64_t varint_spread(uint64_t v)
{
	v = (v & 0x000000000fffffffULL) | (v << 4 & 0x0fffffff00000000ULL);
	v = (v & 0x00003fff00003fffULL) | (v << 2 & 0x3fff00003fff0000ULL);
	return (v & 0x007f007f007f007fULL) | (v << 1 & 0x7f007f007f007f00ULL);
}

static inline uint64_t varint_gather(uint64_t w) /* w: the groups, top bits clear */
{
	w = (w & 0x007f007f007f007fULL) | (w >> 1 & 0x3f803f803f803f80ULL);
	w = (w & 0x00003fff00003fffULL) | (w >> 2 & 0x0fffc0000fffc000ULL);
	return (w & 0x000000000fffffffULL) | (w >> 4 & 0x00fffffff0000000ULL);
}

/* The gap g written at q: its bytes. A gap below 2^56 is written as one
 * 8-byte word without a branch (at 1% changed 0.99^128, more than a
 * quarter, of the gaps take two bytes: a branch no predictor guesses),
 * so up to VARINT_SLACK bytes past it are written too. */
static inline unsigned varint_len(uint64_t v)
{
	return (bitlen(v | 1) + 6) / 7;
}

static inline unsigned put_gap(uint8_t *q, uint64_t g)
{
	unsigned len = varint_len(g), m = 0;
	if (__builtin_expect(len <= 8, 1)) {
		uint64_t cont = 0x8080808080808080ULL & ((1ULL << (8 * len - 8)) - 1);
		put_le64(q, varint_spread(g) | cont);
		return len;
	}
	for (; g >= 0x80; g >>= 7)
		q[m++] = (uint8_t)(g | 0x80);
	q[m++] = (uint8_t)g;
	return m;
}

/* The n gaps of rising positions written at q: their bytes (at most 10
 * a gap, and VARINT_SLACK past the last). */
static size_t put_gaps(const uint64_t *pos, size_t n, uint8_t *q)
{
	size_t m = 0;
	uint64_t next = 0;
	for (size_t i = 0; i < n; i++) {
		m += put_gap(q + m, pos[i] - next);
		next = pos[i] + 1;
	}
	return m;
}

/* Exactly n gaps in q[0..len) into positions below range_len. */
static int get_gaps(const uint8_t *q, size_t len, uint64_t range_len, size_t n, uint64_t *pos,
		    const char *codec, struct dcr_err *e)
{
	const uint8_t *end = q + len;
	uint64_t next = 0;
	if (len == n && n) {
		/* n bytes for n gaps: every gap is one byte, unless some byte
		 * continues a varint (then the positions written here are
		 * wrong, and the loop below writes them again or says what is
		 * wrong with the payload) */
		uint8_t any = 0;
		for (size_t i = 0; i < n; i++) {
			any |= q[i];
			pos[i] = next + q[i];
			next = pos[i] + 1;
		}
		if (!(any & 0x80)) {
			/* positions rise by at least one: only the last can be
			 * beyond the range */
			if (pos[n - 1] >= range_len)
				return bad(e, codec, "position beyond the range");
			return 0;
		}
		next = 0;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t g, w, stop;
		if (end - q >= 8 && (stop = ~(w = get_le64(q)) & 0x8080808080808080ULL)) {
			/* a varint that ends within the next 8 bytes: its length
			 * from the first byte without the top bit, no branch */
			unsigned len = (unsigned)__builtin_ctzll(stop) / 8 + 1;
			g = varint_gather(w & 0x7f7f7f7f7f7f7f7fULL & (~0ULL >> (64 - 8 * len)));
			q += len;
		} else if (q < end && *q < 0x80) {
			g = *q++;
		} else {
			struct dcr_rd r;
			dcr_rd_init(&r, q, (size_t)(end - q));
			g = dcr_rd_varint(&r);
			if (r.bad)
				return bad(e, codec, "truncated gaps");
			q = r.p;
		}
		if (g >= range_len - next)
			return bad(e, codec, "position beyond the range");
		pos[i] = next + g;
		next = pos[i] + 1;
	}
	if (q != end)
		return bad(e, codec, "trailing gap bytes");
	return 0;
}

/* ---- XOR_ZSTD -------------------------------------------------------- */

static int xz_encode(unsigned unit, size_t n, const uint64_t *pos,
		     const uint64_t *oldv, const uint64_t *newv,
		     struct dcr_buf *out, struct dcr_err *e)
{
	int rc = -ENOMEM;
	/* gaps: at most 10 bytes each, and put_gaps' slack (the last starts
	 * at most 10 (n - 1) bytes in) */
	size_t rawcap = (n ? n : 1) * (unit > 10 ? unit : 10) + VARINT_SLACK;
	uint8_t *raw = malloc(rawcap);
	size_t zcap = ZSTD_compressBound(rawcap);
	uint8_t *z = malloc(zcap);
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	if (!raw || !z || !cc)
		goto out;
	size_t m = put_gaps(pos, n, raw);
	for (int part = 0; part < 2; part++) {
		if (part == 1) {
			/* XOR masks, byte plane b of change i at raw[b * n + i] */
			for (size_t i = 0; i < n; i++) {
				uint64_t x = newv[i] ^ (oldv ? oldv[i] : 0);
				for (unsigned b = 0; b < unit; b++)
					raw[b * n + i] = (uint8_t)(x >> (8 * b));
			}
			m = n * unit;
		}
		size_t zn = ZSTD_compressCCtx(cc, z, zcap, raw, m, 1);
		if (ZSTD_isError(zn)) {
			rc = dcr_err_set(e, -EIO, "zstd: %s", ZSTD_getErrorName(zn));
			goto out;
		}
		if (dcr_buf_add_varint(out, zn) < 0 || dcr_buf_add(out, z, zn) < 0)
			goto out;
	}
	rc = 0;
out:
	if (rc == -ENOMEM)
		dcr_err_set(e, rc, "out of memory");
	free(raw);
	free(z);
	ZSTD_freeCCtx(cc);
	return rc;
}

static int xz_header(const uint8_t *p, size_t len, uint64_t range_len, size_t n,
		     const uint8_t **pz, size_t *pzn, const uint8_t **vz,
		     size_t *vzn, struct dcr_err *e)
{
	(void)range_len; /* checked by the caller: n <= range_len */
	(void)n;
	struct dcr_rd r;
	dcr_rd_init(&r, p, len);
	uint64_t zl = dcr_rd_varint(&r);
	if (r.bad || zl > dcr_rd_left(&r))
		return bad(e, "xor-zstd", "truncated positions frame");
	*pz = r.p;
	*pzn = (size_t)zl;
	r.p += zl;
	zl = dcr_rd_varint(&r);
	if (r.bad || zl > dcr_rd_left(&r))
		return bad(e, "xor-zstd", "truncated values frame");
	if (zl != dcr_rd_left(&r))
		return bad(e, "xor-zstd", "bytes after the values frame");
	*vz = r.p;
	*vzn = (size_t)zl;
	return 0;
}

/* Decompress one frame whose content size must be at most max (exact if
 * exact); returns a malloc'd buffer. */
static int xz_unzip(const uint8_t *z, size_t zn, size_t max, int exact,
		    uint8_t **outp, size_t *outn, const char *what,
		    struct dcr_err *e)
{
	unsigned long long cs = ZSTD_getFrameContentSize(z, zn);
	if (cs == ZSTD_CONTENTSIZE_ERROR || cs == ZSTD_CONTENTSIZE_UNKNOWN ||
	    cs > max || (exact && cs != max))
		return dcr_err_set(e, DCR_EFORMAT, "xor-zstd payload: bad %s frame", what);
	if (ZSTD_findFrameCompressedSize(z, zn) != zn)
		return dcr_err_set(e, DCR_EFORMAT,
				   "xor-zstd payload: %s frame does not end where it should", what);
	uint8_t *b = malloc(cs ? cs : 1);
	if (!b)
		return dcr_err_set(e, -ENOMEM, "out of memory");
	size_t got = ZSTD_decompress(b, cs, z, zn);
	if (ZSTD_isError(got) || got != cs) {
		free(b);
		return dcr_err_set(e, DCR_EFORMAT, "xor-zstd payload: %s frame: %s", what,
				   ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
	}
	*outp = b;
	*outn = (size_t)cs;
	return 0;
}

static int xz_decode_positions(const uint8_t *p, size_t len, uint64_t range_len,
			       size_t n, uint64_t *pos, struct dcr_err *e)
{
	const uint8_t *pz = NULL, *vz = NULL;
	size_t pzn = 0, vzn = 0;
	int rc = xz_header(p, len, range_len, n, &pz, &pzn, &vz, &vzn, e);
	if (rc < 0)
		return rc;
	uint8_t *raw;
	size_t m;
	if (n > SIZE_MAX / 10)
		return bad(e, "xor-zstd", "too many changes");
	rc = xz_unzip(pz, pzn, 10 * n, 0, &raw, &m, "positions", e);
	if (rc < 0)
		return rc;
	rc = get_gaps(raw, m, range_len, n, pos, "xor-zstd", e);
	free(raw);
	return rc;
}

static int xz_decode_values(const uint8_t *p, size_t len, unsigned unit,
			    uint64_t range_len, size_t n, const uint64_t *oldv,
			    uint64_t *newv, struct dcr_err *e)
{
	const uint8_t *pz = NULL, *vz = NULL;
	size_t pzn = 0, vzn = 0;
	int rc = xz_header(p, len, range_len, n, &pz, &pzn, &vz, &vzn, e);
	if (rc < 0)
		return rc;
	if (n > SIZE_MAX / unit)
		return bad(e, "xor-zstd", "too many changes");
	uint8_t *raw;
	size_t m;
	rc = xz_unzip(vz, vzn, n * unit, 1, &raw, &m, "values", e);
	if (rc < 0)
		return rc;
	const uint64_t mask = unit_mask(unit);
	switch (unit) {
	case 1:
		for (size_t i = 0; i < n; i++)
			newv[i] = ((oldv ? oldv[i] : 0) ^ raw[i]) & mask;
		break;
	case 2:
		for (size_t i = 0; i < n; i++)
			newv[i] = ((oldv ? oldv[i] : 0) ^ (raw[i] | (uint64_t)raw[n + i] << 8)) & mask;
		break;
	default:
		for (size_t i = 0; i < n; i++) {
			uint64_t x = 0;
			for (unsigned b = 0; b < unit; b++)
				x |= (uint64_t)raw[b * n + i] << (8 * b);
			newv[i] = ((oldv ? oldv[i] : 0) ^ x) & mask;
		}
	}
	free(raw);
	return 0;
}

/* ---- RAW --------------------------------------------------------------
 * varint(glen) gaps[glen] values[n * unit]: the gaps as varints, then each
 * value (XOR mask, or new bits against zero) as unit little-endian bytes,
 * in change order. What a journal pays for it: about 3 bytes a bf16
 * change against about 2.3 with xor-zstd, and no zstd on either side. */

/* RAW in two passes over the changes (gaps, then values), each checking
 * what check_input checks as it goes (the journal writes every change of
 * an apply through here): the gaps go where a length of n's varint size
 * puts them (they take at least a byte each) and move only if their
 * length's varint is longer. A bad input leaves out as it was. */
static int raw_encode(unsigned unit, uint64_t range_len, size_t n, const uint64_t *pos,
		      const uint64_t *oldv, const uint64_t *newv, struct dcr_buf *out,
		      struct dcr_err *e)
{
	int rc = check_args(unit, range_len, n, -EINVAL, e);
	if (rc < 0)
		return rc;
	unsigned vl = varint_len(n);
	if (n > (SIZE_MAX - 32) / (10 + unit) ||
	    dcr_buf_reserve(out, 10 + n * (10 + unit) + VARINT_SLACK) < 0)
		return dcr_err_set(e, -ENOMEM, "out of memory");
	uint8_t *h = out->p + out->len, *q = h + vl;
	size_t glen = 0;
	uint64_t next = 0, bad = 0;
	for (size_t i = 0; i < n; i++) {
		/* a position below next makes a gap of 2^64 - k: flagged,
		 * and written in ten bytes at most */
		bad |= (uint64_t)(pos[i] < next) | (uint64_t)(pos[i] >= range_len);
		glen += put_gap(q + glen, pos[i] - next);
		next = pos[i] + 1;
	}
	uint64_t vbits = 0, mask = unit_mask(unit);
	if (!bad) {
		unsigned gl = varint_len(glen);
		if (gl != vl) {
			memmove(h + gl, q, glen);
			q = h + gl;
		}
		uint8_t *v = q + glen;
		if (unit == 2 && !oldv)
			for (size_t i = 0; i < n; i++) {
				vbits |= newv[i];
				put_le16(v + 2 * i, (uint16_t)newv[i]);
			}
		else
			for (size_t i = 0; i < n; i++, v += unit) {
				uint64_t x = newv[i] ^ (oldv ? oldv[i] : 0);
				vbits |= newv[i] | (oldv ? oldv[i] : 0);
				store_unit(v, unit, x);
			}
		if (!(vbits & ~mask)) {
			/* the length's gl bytes at h: reserved, so h stays */
			if (dcr_buf_add_varint(out, glen) < 0)
				return dcr_err_set(e, -ENOMEM, "out of memory");
			out->len += glen + n * unit;
			return 0;
		}
	}
	rc = check_input(unit, range_len, n, pos, oldv, newv, e);
	return rc < 0 ? rc : dcr_err_set(e, -EINVAL, "raw: bad input");
}

/* The gap and value sections of a RAW payload of n changes. */
static int raw_header(const uint8_t *p, size_t len, unsigned unit, size_t n,
		      const uint8_t **gaps, size_t *glen, const uint8_t **vals,
		      struct dcr_err *e)
{
	struct dcr_rd r;
	dcr_rd_init(&r, p, len);
	uint64_t gl = dcr_rd_varint(&r);
	if (r.bad || gl > dcr_rd_left(&r))
		return bad(e, "raw", "truncated gaps");
	if (n > SIZE_MAX / unit || dcr_rd_left(&r) - gl != (uint64_t)n * unit)
		return bad(e, "raw", "values section is not n units long");
	*gaps = r.p;
	*glen = (size_t)gl;
	*vals = r.p + gl;
	return 0;
}

static int raw_decode_positions(const uint8_t *p, size_t len, unsigned unit, uint64_t range_len,
				size_t n, uint64_t *pos, struct dcr_err *e)
{
	const uint8_t *q, *v;
	size_t glen;
	int rc = raw_header(p, len, unit, n, &q, &glen, &v, e);
	return rc < 0 ? rc : get_gaps(q, glen, range_len, n, pos, "raw", e);
}

static int raw_decode_values(const uint8_t *p, size_t len, unsigned unit, size_t n,
			     const uint64_t *oldv, uint64_t *newv, struct dcr_err *e)
{
	const uint8_t *q, *v;
	size_t glen;
	int rc = raw_header(p, len, unit, n, &q, &glen, &v, e);
	if (rc < 0)
		return rc;
	if (unit == 2)
		for (size_t i = 0; i < n; i++)
			newv[i] = (oldv ? oldv[i] : 0) ^ get_le16(v + 2 * i);
	else
		for (size_t i = 0; i < n; i++)
			newv[i] = (oldv ? oldv[i] : 0) ^ load_unit(v + (size_t)unit * i, unit);
	return 0;
}

/* ---- entry points ---------------------------------------------------- */

int dcr_codec_needs_range(int codec)
{
	return codec == DCR_CODEC_CLASSED;
}

int dcr_codec_encode_range(int codec, unsigned unit, int dtype, uint64_t range_len,
			   size_t n, const uint64_t *pos, const uint64_t *oldv,
			   const uint64_t *newv, const uint8_t *old, struct dcr_buf *out,
			   struct dcr_err *e)
{
	if (codec == DCR_CODEC_RAW) /* checks as it writes */
		return raw_encode(unit, range_len, n, pos, oldv, newv, out, e);
	int rc = check_input(unit, range_len, n, pos, oldv, newv, e);
	if (rc < 0)
		return rc;
	switch (codec) {
	case DCR_CODEC_XOR_ZSTD:
		return xz_encode(unit, n, pos, oldv, newv, out, e);
	case DCR_CODEC_DELTA:
		return delta_encode(unit, dtype, n, pos, oldv, newv, NULL, NULL, range_len, out, e);
	case DCR_CODEC_CLASSED: {
		if (!old || !oldv)
			return dcr_err_set(e, -EINVAL, "codec classed needs the old bits of the range");
		struct clsmap cm;
		double gain;
		class_plan(old, unit, dtype, range_len, n, oldv, &cm, &gain);
		return delta_encode(unit, dtype, n, pos, oldv, newv, &cm, old, range_len, out, e);
	}
	default:
		return dcr_err_set(e, -EINVAL, "unknown codec %d", codec);
	}
}

int dcr_codec_encode(int codec, unsigned unit, int dtype, uint64_t range_len,
		     size_t n, const uint64_t *pos, const uint64_t *oldv,
		     const uint64_t *newv, struct dcr_buf *out,
		     struct dcr_err *e)
{
	return dcr_codec_encode_range(codec, unit, dtype, range_len, n, pos, oldv, newv, NULL,
				      out, e);
}

int dcr_codec_decode_positions(int codec, const uint8_t *p, size_t len,
			       unsigned unit, uint64_t range_len, size_t n,
			       uint64_t *pos, struct dcr_err *e)
{
	int rc = check_args(unit, range_len, n, DCR_EFORMAT, e);
	if (rc < 0)
		return rc;
	switch (codec) {
	case DCR_CODEC_XOR_ZSTD:
		return xz_decode_positions(p, len, range_len, n, pos, e);
	case DCR_CODEC_RAW:
		return raw_decode_positions(p, len, unit, range_len, n, pos, e);
	case DCR_CODEC_DELTA:
		return delta_decode_positions(p, len, range_len, n, pos, e);
	case DCR_CODEC_CLASSED:
		return dcr_err_set(e, DCR_EFORMAT,
				   "classed payload: positions need the old bits of the range");
	default:
		return dcr_err_set(e, DCR_EFORMAT, "unknown codec %d", codec);
	}
}

int dcr_codec_decode_values(int codec, const uint8_t *p, size_t len,
			    unsigned unit, int dtype, uint64_t range_len,
			    size_t n, const uint64_t *pos, const uint64_t *oldv,
			    uint64_t *newv, struct dcr_err *e)
{
	(void)dtype;
	(void)pos;
	int rc = check_args(unit, range_len, n, DCR_EFORMAT, e);
	if (rc < 0)
		return rc;
	switch (codec) {
	case DCR_CODEC_XOR_ZSTD:
		return xz_decode_values(p, len, unit, range_len, n, oldv, newv, e);
	case DCR_CODEC_RAW:
		return raw_decode_values(p, len, unit, n, oldv, newv, e);
	case DCR_CODEC_DELTA:
		return delta_decode_values(p, len, unit, range_len, n, oldv, newv, e);
	case DCR_CODEC_CLASSED:
		return dcr_err_set(e, DCR_EFORMAT,
				   "classed payload: decode it whole with the old bits of the range");
	default:
		return dcr_err_set(e, DCR_EFORMAT, "unknown codec %d", codec);
	}
}

int dcr_codec_decode_range(int codec, const uint8_t *p, size_t len, unsigned unit,
			   uint64_t range_len, size_t n, const uint8_t *old, uint64_t *pos,
			   uint64_t *newv, struct dcr_err *e)
{
	int rc = check_args(unit, range_len, n, DCR_EFORMAT, e);
	if (rc < 0)
		return rc;
	if (codec == DCR_CODEC_CLASSED) {
		if (!old)
			return dcr_err_set(e, DCR_EFORMAT,
					   "classed payload: positions need the old bits of the range");
		return class_decode(p, len, unit, range_len, n, old, pos, newv, e);
	}
	if ((rc = dcr_codec_decode_positions(codec, p, len, unit, range_len, n, pos, e)) < 0)
		return rc;
	uint64_t *oldv = NULL;
	if (old && n) {
		if (!(oldv = malloc(n * sizeof(uint64_t))))
			return dcr_err_set(e, -ENOMEM, "out of memory");
		for (size_t i = 0; i < n; i++)
			oldv[i] = load_unit(old + pos[i] * unit, unit);
	}
	rc = dcr_codec_decode_values(codec, p, len, unit, 0, range_len, n, pos, oldv, newv, e);
	free(oldv);
	return rc;
}

/* Where CLASSED pays: it saves at least this share of DELTA's positions
 * (estimated), since its decoder scans the range. */
#define CLASSED_MIN_GAIN 0.04

int dcr_codec_choose_range(int effort, unsigned unit, int dtype, uint64_t range_len,
			   size_t n, const uint64_t *pos, const uint64_t *oldv,
			   const uint64_t *newv, const uint8_t *old, struct dcr_buf *out,
			   struct dcr_err *e)
{
	size_t base = out->len;
	int codec = DCR_CODEC_DELTA, rc;
	if (old && oldv) {
		int rc = check_input(unit, range_len, n, pos, oldv, newv, e);
		if (rc < 0)
			return rc;
		struct clsmap cm;
		double gain;
		class_plan(old, unit, dtype, range_len, n, oldv, &cm, &gain);
		double pbits = bern_bits((double)n, (double)range_len);
		if (cm.ncls > 1 && gain > 64 && gain >= CLASSED_MIN_GAIN * pbits) {
			rc = delta_encode(unit, dtype, n, pos, oldv, newv, &cm, old, range_len, out, e);
			if (rc < 0)
				return rc;
			codec = DCR_CODEC_CLASSED;
		}
	}
	if (codec == DCR_CODEC_DELTA) {
		rc = dcr_codec_encode(DCR_CODEC_DELTA, unit, dtype, range_len, n, pos, oldv, newv,
				      out, e);
		if (rc < 0)
			return rc;
	}
	if (effort < 1 && n >= 256)
		return codec;
	struct dcr_buf alt = {0};
	rc = xz_encode(unit, n, pos, oldv, newv, &alt, e);
	if (rc < 0) {
		dcr_buf_free(&alt);
		return rc;
	}
	if (alt.len < out->len - base) {
		out->len = base;
		if (dcr_buf_add(out, alt.p, alt.len) < 0) {
			dcr_buf_free(&alt);
			return dcr_err_set(e, -ENOMEM, "out of memory");
		}
		codec = DCR_CODEC_XOR_ZSTD;
	}
	dcr_buf_free(&alt);
	return codec;
}

int dcr_codec_choose(int effort, unsigned unit, int dtype, uint64_t range_len,
		     size_t n, const uint64_t *pos, const uint64_t *oldv,
		     const uint64_t *newv, struct dcr_buf *out,
		     struct dcr_err *e)
{
	return dcr_codec_choose_range(effort, unit, dtype, range_len, n, pos, oldv, newv, NULL,
				      out, e);
}
