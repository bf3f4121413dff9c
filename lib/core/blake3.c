/* blake3.c - BLAKE3 in hash mode with a 32-byte output, written from the
 * specification (J. O'Connor, J.-P. Aumasson, S. Neves, Z. Wilcox-O'Hearn,
 * "BLAKE3: one function, fast everywhere", 2020).
 *
 * The input is cut into 1 KiB chunks of sixteen 64-byte blocks; each chunk
 * is chained through the compression function into a chaining value (CV),
 * and CVs are joined pairwise by parent nodes up a binary tree whose left
 * subtrees are complete and as large as possible. The last node compressed
 * (the root) carries the ROOT flag, so a chunk or parent is finished only
 * once we know that more input follows it.
 *
 * Speed comes from hashing many chunks (and many parents) side by side,
 * one per 32-bit lane: eight with AVX2 (with AVX-512VL's rotates where the
 * CPU has them, blake3-lanes.h), sixteen with AVX-512F (blake3-lanes16.h).
 * The portable code gives the same bits; tests compare every path against
 * b3sum. dcr uses BLAKE3 for payload and piece digests (dcr-format-pack(5))
 * and for tensor digests and state ids (dcr-format-delta(5)): on a core
 * with SHA extensions it runs about three times as fast as SHA-256, and
 * that is the cost a receiver pays on every byte it passes on and every
 * byte it verifies. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

#include "core/blake3.h"
#include "core/bytes.h"
#include "core/error.h"

#define BLOCK_LEN 64
#define CHUNK_LEN 1024
#define MAX_SUBTREE 128 /* chunks hashed as one subtree by update */

enum { CHUNK_START = 1, CHUNK_END = 2, PARENT = 4, ROOT = 8 };

static const uint32_t IV[8] = {0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A,
			       0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19};

/* message word order of each of the seven rounds: the permutation
 * 2 6 3 10 7 0 4 13 1 11 12 5 9 14 15 8 applied round after round */
static const uint8_t SCHED[7][16] = {
	{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
	{2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8},
	{3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1},
	{10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6},
	{12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4},
	{9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7},
	{11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13},
};

static int use_simd = -1; /* -1: not yet asked */

/* one round, columns then diagonals, with the mixing function GG; the
 * rounds are written out so that every message index is a constant */
#define ROUND(GG, r)                                                  \
	do {                                                          \
		GG(0, 4, 8, 12, m[SCHED[r][0]], m[SCHED[r][1]]);      \
		GG(1, 5, 9, 13, m[SCHED[r][2]], m[SCHED[r][3]]);      \
		GG(2, 6, 10, 14, m[SCHED[r][4]], m[SCHED[r][5]]);     \
		GG(3, 7, 11, 15, m[SCHED[r][6]], m[SCHED[r][7]]);     \
		GG(0, 5, 10, 15, m[SCHED[r][8]], m[SCHED[r][9]]);     \
		GG(1, 6, 11, 12, m[SCHED[r][10]], m[SCHED[r][11]]);   \
		GG(2, 7, 8, 13, m[SCHED[r][12]], m[SCHED[r][13]]);    \
		GG(3, 4, 9, 14, m[SCHED[r][14]], m[SCHED[r][15]]);    \
	} while (0)

/* ---- the portable compression function ---- */

static inline uint32_t rotr32(uint32_t x, int n)
{
	return x >> n | x << (32 - n);
}

#define G(a, b, c, d, x, y)                        \
	do {                                       \
		v##a = v##a + v##b + (x);          \
		v##d = rotr32(v##d ^ v##a, 16);    \
		v##c = v##c + v##d;                \
		v##b = rotr32(v##b ^ v##c, 12);    \
		v##a = v##a + v##b + (y);          \
		v##d = rotr32(v##d ^ v##a, 8);     \
		v##c = v##c + v##d;                \
		v##b = rotr32(v##b ^ v##c, 7);     \
	} while (0)

/* cv = the first half of compress(cv, block, ...): the next chaining value */
static void compress(uint32_t cv[8], const uint8_t block[BLOCK_LEN], uint32_t block_len,
		     uint64_t counter, uint32_t flags)
{
	uint32_t m[16];
	for (int i = 0; i < 16; i++)
		m[i] = get_le32(block + 4 * i);
	uint32_t v0 = cv[0], v1 = cv[1], v2 = cv[2], v3 = cv[3], v4 = cv[4], v5 = cv[5],
		 v6 = cv[6], v7 = cv[7], v8 = IV[0], v9 = IV[1], v10 = IV[2], v11 = IV[3],
		 v12 = (uint32_t)counter, v13 = (uint32_t)(counter >> 32), v14 = block_len,
		 v15 = flags;
	ROUND(G, 0);
	ROUND(G, 1);
	ROUND(G, 2);
	ROUND(G, 3);
	ROUND(G, 4);
	ROUND(G, 5);
	ROUND(G, 6);
	cv[0] = v0 ^ v8;
	cv[1] = v1 ^ v9;
	cv[2] = v2 ^ v10;
	cv[3] = v3 ^ v11;
	cv[4] = v4 ^ v12;
	cv[5] = v5 ^ v13;
	cv[6] = v6 ^ v14;
	cv[7] = v7 ^ v15;
}

static void cv_bytes(const uint32_t cv[8], uint8_t out[32])
{
	for (int i = 0; i < 8; i++)
		put_le32(out + 4 * i, cv[i]);
}

/* hash_many: n inputs of `blocks` blocks each, all with the same flags;
 * input i gets counter + i when inc, else counter. The first block adds
 * `start`, the last `end`. Writes n 32-byte CVs to out. */
static void hash_one(const uint8_t *in, size_t blocks, uint64_t counter, uint32_t flags,
		     uint32_t start, uint32_t end, uint8_t out[32])
{
	uint32_t cv[8];
	memcpy(cv, IV, 32);
	uint32_t f = flags | start;
	for (size_t b = 0; b < blocks; b++) {
		if (b + 1 == blocks)
			f |= end;
		compress(cv, in + b * BLOCK_LEN, BLOCK_LEN, counter, f);
		f = flags;
	}
	cv_bytes(cv, out);
}

#ifdef HAVE_AVX2_PATH
/* ---- eight inputs at once, one per 32-bit lane ----
 * blake3-lanes.h, included once per instruction set: AVX2, and AVX2 with
 * AVX-512VL's rotate (one instruction where AVX2 takes three: the 12 and
 * 7-bit rotations were a third of the mixing function's work; measured
 * here 3.5 GB/s a core, against 2.4). */

/* how far ahead to prefetch: the same block of the next eight chunks,
 * which the next call hashes (measured from the page cache here: 2.9
 * GB/s, against 2.5 with a few blocks ahead and 2.6 with none) */
#define PREFETCH (8 * CHUNK_LEN)

/* The 16 and 8-bit rotations are byte shuffles whose masks stay memory
 * operands: AVX2 has sixteen vector registers and the state needs all of
 * them, yet GCC hoists loop-invariant masks into two, and the state then
 * spills, its stores and reloads on the mixing function's critical path
 * (measured here, 256 KiB hashed in cache, an AMD EPYC Zen 3: 3.5 GB/s a
 * core against 2.9 with the masks in registers). */
static const uint8_t rot16_mask[32] __attribute__((aligned(32))) = {
	2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13,
	2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13};
static const uint8_t rot8_mask[32] __attribute__((aligned(32))) = {
	1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12,
	1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12};

__attribute__((target("avx2"))) static inline __m256i shuffle_mem(__m256i x, const uint8_t *mask)
{
	__asm__("vpshufb %1, %0, %0" : "+x"(x) : "m"(*(const uint8_t(*)[32])mask));
	return x;
}

#define LANES(name) name##_avx2
#define LANES_TARGET "avx2"
#define LANES_ROTR(x, n) _mm256_or_si256(_mm256_srli_epi32((x), (n)), _mm256_slli_epi32((x), 32 - (n)))
#define LANES_ROT16(x) shuffle_mem((x), rot16_mask)
#define LANES_ROT8(x) shuffle_mem((x), rot8_mask)
#include "core/blake3-lanes.h"
#undef LANES
#undef LANES_TARGET
#undef LANES_ROTR
#undef LANES_ROT16
#undef LANES_ROT8

#define LANES(name) name##_avx512
#define LANES_TARGET "avx2,avx512f,avx512vl"
#define LANES_ROTR(x, n) _mm256_ror_epi32((x), (n))
#define LANES_ROT16(x) _mm256_ror_epi32((x), 16)
#define LANES_ROT8(x) _mm256_ror_epi32((x), 8)
#include "core/blake3-lanes.h"

#include "core/blake3-lanes16.h"

/* a function of eight or sixteen lanes: in, ctr and out have one entry
 * (32 bytes of out) per lane */
typedef void hashn_fn(const uint8_t *const *in, size_t blocks, const uint64_t *ctr,
		      uint32_t flags, uint32_t start, uint32_t end, size_t pitch,
		      unsigned seg_log2, uint8_t *out);

/* 3: AVX-512F and VL (sixteen lanes), 2: AVX-512VL (eight), 1: AVX2, 0:
 * neither */
static int cpu_level(void)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2"))
		return 0;
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") ? 3 : 1;
}
#else
static int cpu_level(void)
{
	return 0;
}
#endif

/* the code path in use: 0 portable, 1 AVX2, 2 AVX-512VL, 3 AVX-512 with
 * sixteen lanes */
static int simd(void)
{
	int s = __atomic_load_n(&use_simd, __ATOMIC_RELAXED);
	if (s < 0) {
		s = cpu_level();
		__atomic_store_n(&use_simd, s, __ATOMIC_RELAXED);
	}
	return s;
}

int dcr_blake3_simd(int level)
{
	int was = simd(), best = cpu_level();
	__atomic_store_n(&use_simd, level < 0 ? 0 : level < best ? level : best, __ATOMIC_RELAXED);
	return was;
}

#ifdef HAVE_AVX2_PATH
#define MAX_LANES 16
/* The lanes to hash `left` more inputs with: sixteen where the CPU has
 * them and more than eight inputs are left (measured on this project's
 * AMD EPYC, Zen 5: 5.3 GB/s a core against 3.5 with eight, hashing 64
 * MiB in memory), else eight. */
static hashn_fn *lanes_for(size_t left, size_t *nl)
{
	int s = simd();
	*nl = s >= 3 && left > 8 ? 16 : 8;
	return *nl == 16 ? hash16_rows_avx512 : s >= 2 ? hash8_rows_avx512 : hash8_rows_avx2;
}
#endif

/* n inputs `stride` bytes apart */
static void hash_many(const uint8_t *in, size_t stride, size_t n, size_t blocks,
		      uint64_t counter, int inc, uint32_t flags, uint32_t start, uint32_t end,
		      uint8_t *out)
{
	size_t i = 0;
#ifdef HAVE_AVX2_PATH
	if (n > 2 && simd()) {
		for (size_t nl; i < n; i += nl) {
			hashn_fn *const hn = lanes_for(n - i, &nl);
			const uint8_t *p[MAX_LANES];
			uint8_t tmp[MAX_LANES * 32];
			size_t k = n - i < nl ? n - i : nl;
			uint64_t ctr[MAX_LANES];
			for (size_t j = 0; j < nl; j++) {
				p[j] = in + (i + (j < k ? j : 0)) * stride;
				ctr[j] = counter + (inc ? i + j : 0);
			}
			/* contiguous inputs: one segment as long as any input */
			hn(p, blocks, ctr, flags, start, end, 0, 8 * sizeof(size_t) - 1,
			   k == nl ? out + 32 * i : tmp);
			if (k < nl)
				memcpy(out + 32 * i, tmp, 32 * k);
		}
		return;
	}
#endif
	for (; i < n; i++)
		hash_one(in + i * stride, blocks, counter + (inc ? i : 0), flags, start, end,
			 out + 32 * i);
}

/* The two child CVs (left half, right half) of the complete subtree of
 * n = 2^k chunks, k >= 1, whose chunk CVs are cv[0..n) (cv is scratch).
 * Its own node is left to the caller: it may be the root. */
static void subtree_halves(uint8_t *cv, size_t n, uint8_t out[64])
{
	uint8_t b[MAX_SUBTREE / 2 * 32];
	uint8_t *cur = cv, *nxt = b;
	for (; n > 2; n /= 2) {
		hash_many(cur, 64, n / 2, 1, 0, 0, PARENT, 0, 0, nxt);
		uint8_t *t = cur;
		cur = nxt;
		nxt = t;
	}
	memcpy(out, cur, 64);
}

/* ---- the incremental hasher ---- */

static void parent_cv(const uint8_t block[64], uint8_t out[32])
{
	hash_one(block, 1, 0, PARENT, 0, 0, out);
}

/* Push the CV of a finished subtree that starts at chunk number `start`.
 * Merging is lazy: only once input after them exists do we join the
 * finished subtrees before start, down to one per bit of start (which
 * cannot make a root); the last pair may wait for dcr_blake3_final. */
static void merge_stack(struct dcr_blake3 *h, uint64_t start)
{
	unsigned keep = (unsigned)__builtin_popcountll(start - h->base);
	while (h->nstack > keep) {
		h->nstack--;
		parent_cv(h->stack[h->nstack - 1], h->stack[h->nstack - 1]);
	}
}

static void push_cv(struct dcr_blake3 *h, const uint8_t cv[32], uint64_t start)
{
	merge_stack(h, start);
	memcpy(h->stack[h->nstack++], cv, 32);
}

void dcr_blake3_init(struct dcr_blake3 *h)
{
	dcr_blake3_init_at(h, 0);
}

void dcr_blake3_init_at(struct dcr_blake3 *h, uint64_t first_chunk)
{
	memset(h, 0, offsetof(struct dcr_blake3, stack));
	memcpy(h->cv, IV, 32);
	h->chunk = h->base = first_chunk;
}

/* finish the current (full) chunk, with more input after it */
static void chunk_done(struct dcr_blake3 *h)
{
	uint8_t cv[32];
	compress(h->cv, h->block, BLOCK_LEN, h->chunk, (h->blocks ? 0 : CHUNK_START) | CHUNK_END);
	cv_bytes(h->cv, cv);
	push_cv(h, cv, h->chunk++);
	memcpy(h->cv, IV, 32);
	h->blocks = 0;
	h->block_len = 0;
}

void dcr_blake3_update(struct dcr_blake3 *h, const void *p, size_t n)
{
	const uint8_t *in = p;
	while (n) {
		size_t have = (size_t)h->blocks * BLOCK_LEN + h->block_len;
		if (have == CHUNK_LEN) {
			chunk_done(h);
			have = 0;
		}
		if (!have && n > CHUNK_LEN) {
			/* Whole chunks, in subtrees: each the largest aligned
			 * power-of-two run of chunks that fits (a single chunk
			 * only with input after it), up to MAX_SUBTREE chunks in
			 * all, whose chunks are hashed in one go: a run that
			 * starts off a multiple of 16 chunks still fills every
			 * lane. */
			uint8_t a[MAX_SUBTREE * 32], cv[64];
			uint64_t size[8], c = h->chunk, tot = 0;
			size_t ns = 0, left = n;
			while (ns < 8 && tot < MAX_SUBTREE && left > CHUNK_LEN) {
				uint64_t z = MAX_SUBTREE;
				while (z * CHUNK_LEN > left || (c & (z - 1)) || tot + z > MAX_SUBTREE)
					z /= 2;
				size[ns++] = z;
				tot += z;
				c += z;
				left -= z * CHUNK_LEN;
			}
			hash_many(in, CHUNK_LEN, tot, CHUNK_LEN / BLOCK_LEN, h->chunk, 1, 0,
				  CHUNK_START, CHUNK_END, a);
			for (size_t i = 0, o = 0; i < ns; o += size[i++]) {
				if (size[i] == 1) {
					push_cv(h, a + 32 * o, h->chunk);
				} else {
					subtree_halves(a + 32 * o, (size_t)size[i], cv);
					push_cv(h, cv, h->chunk);
					push_cv(h, cv + 32, h->chunk + size[i] / 2);
				}
				h->chunk += size[i];
			}
			in += tot * CHUNK_LEN;
			n -= tot * CHUNK_LEN;
			continue;
		}
		/* into the chunk, a block at a time; the last block waits
		 * until we know whether the chunk ends there. Bytes in a new
		 * chunk make the subtrees before it final: join them. */
		if (!have)
			merge_stack(h, h->chunk);
		if (h->block_len == BLOCK_LEN) {
			compress(h->cv, h->block, BLOCK_LEN, h->chunk, h->blocks ? 0 : CHUNK_START);
			h->blocks++;
			h->block_len = 0;
		}
		size_t take = BLOCK_LEN - h->block_len;
		if (take > n)
			take = n;
		memcpy(h->block + h->block_len, in, take);
		h->block_len += (uint8_t)take;
		in += take;
		n -= take;
	}
}

static void finish(const struct dcr_blake3 *h, uint32_t root, uint8_t out[32]);

void dcr_blake3_final(const struct dcr_blake3 *h, dcr_digest *out)
{
	finish(h, ROOT, out->b);
}

void dcr_blake3_final_node(const struct dcr_blake3 *h, uint8_t cv[32])
{
	finish(h, 0, cv);
}

void dcr_blake3_final_piece(const struct dcr_blake3 *h, size_t npieces, uint8_t cv[32])
{
	finish(h, npieces == 1 ? ROOT : 0, cv);
}

static void finish(const struct dcr_blake3 *h, uint32_t root, uint8_t out[32])
{
	/* The last node: the open chunk (possibly empty, for empty input),
	 * or when the input ended with a subtree, the parent of the two
	 * CVs on top of the stack (there are at least two then). Then up
	 * the stack; the node compressed last is the root. */
	uint32_t cv[8];
	uint8_t block[BLOCK_LEN] = {0};
	uint32_t len, flags;
	uint64_t counter;
	unsigned left = h->nstack;
	if (h->blocks || h->block_len || !h->nstack) {
		memcpy(cv, h->cv, 32);
		memcpy(block, h->block, h->block_len);
		len = h->block_len;
		flags = (h->blocks ? 0 : CHUNK_START) | CHUNK_END;
		counter = h->chunk;
	} else {
		left -= 2;
		memcpy(cv, IV, 32);
		memcpy(block, h->stack[left], 64);
		len = BLOCK_LEN;
		flags = PARENT;
		counter = 0;
	}
	for (; left > 0; left--) {
		compress(cv, block, len, counter, flags);
		cv_bytes(cv, block + 32);
		memcpy(block, h->stack[left - 1], 32);
		memcpy(cv, IV, 32);
		len = BLOCK_LEN;
		flags = PARENT;
		counter = 0;
	}
	compress(cv, block, len, counter, flags | root);
	cv_bytes(cv, out);
}

/* ---- pieces: verified streaming ---- */

void dcr_blake3_pieces(const void *p, size_t n, unsigned log2, uint8_t (*cv)[32],
		       dcr_digest *root)
{
	size_t piece = (size_t)1 << log2, np = dcr_blake3_npieces(n, log2);
	for (size_t i = 0; i < np; i++) {
		struct dcr_blake3 h;
		size_t off = i * piece;
		dcr_blake3_init_at(&h, (uint64_t)off / CHUNK_LEN);
		dcr_blake3_update(&h, (const uint8_t *)p + off, n - off < piece ? n - off : piece);
		dcr_blake3_final_piece(&h, np, cv[i]);
	}
	dcr_blake3_root_of_pieces(cv, np, root);
}

size_t dcr_blake3_npieces(uint64_t n, unsigned log2)
{
	uint64_t np = (n >> log2) + ((n & (((uint64_t)1 << log2) - 1)) != 0);
	return np ? (size_t)np : 1;
}

/* The node over pieces [0, n): the left subtree takes the largest power
 * of two below n, as the chunk tree does (pieces are aligned subtrees). */
static void pieces_node(const uint8_t (*cv)[32], size_t n, uint32_t root, uint8_t out[32])
{
	if (n == 1) {
		memcpy(out, cv[0], 32);
		return;
	}
	size_t k = 1;
	while (k * 2 < n)
		k *= 2;
	uint8_t block[64];
	pieces_node(cv, k, 0, block);
	pieces_node(cv + k, n - k, 0, block + 32);
	hash_one(block, 1, 0, PARENT | root, 0, 0, out);
}

void dcr_blake3_root_of_pieces(const uint8_t (*cv)[32], size_t n, dcr_digest *root)
{
	if (n == 1)
		memcpy(root->b, cv[0], 32);
	else
		pieces_node(cv, n, ROOT, root->b);
}

void dcr_blake3(const void *p, size_t n, dcr_digest *out)
{
	struct dcr_blake3 h;
	dcr_blake3_init(&h);
	dcr_blake3_update(&h, p, n);
	dcr_blake3_final(&h, out);
}

/* ---- the tree: covers, parts and joins ----
 *
 * A node of the tree over an input of n bytes covers chunks [c0, c1): the
 * root covers them all; a node of m >= 2 chunks has a left child of the
 * largest power of two below m chunks, and the rest is its right child.
 * So every node but the root is an aligned run of 2^k chunks or one that
 * ends at the input's end, and its CV follows from its bytes and c0 alone:
 * whoever holds a run of the input can send the CVs of the largest nodes
 * inside it instead of the bytes. */

uint64_t dcr_blake3_nchunks(uint64_t n)
{
	return n ? n / CHUNK_LEN + (n % CHUNK_LEN != 0) : 1; /* (n + 1023 could wrap) */
}

/* chunks in the left child of a node of m >= 2 chunks */
static uint64_t left_len(uint64_t m)
{
	return (uint64_t)1 << (63 - __builtin_clzll(m - 1));
}

static size_t cover(uint64_t s, uint64_t e, uint64_t c0, uint64_t c1, int root,
		    struct dcr_blake3_node *out, size_t k)
{
	if (e <= c0 || s >= c1)
		return k;
	if (!root && c0 <= s && e <= c1) {
		out[k].c0 = s;
		out[k].c1 = e;
		return k + 1;
	}
	if (e - s < 2)
		return k;
	uint64_t m = s + left_len(e - s);
	k = cover(s, m, c0, c1, 0, out, k);
	return cover(m, e, c0, c1, 0, out, k);
}

size_t dcr_blake3_cover(uint64_t n, uint64_t c0, uint64_t c1, struct dcr_blake3_node *out)
{
	return cover(0, dcr_blake3_nchunks(n), c0, c1, 1, out, 0);
}

/* The CV of chunk number `counter` of len <= 1024 bytes (the root's hash
 * when root). */
static void chunk_cv(const uint8_t *p, size_t len, uint64_t counter, uint32_t root,
		     uint8_t out[32])
{
	uint32_t cv[8];
	memcpy(cv, IV, 32);
	size_t nb = len ? (len + BLOCK_LEN - 1) / BLOCK_LEN : 1;
	for (size_t b = 0; b < nb; b++) {
		uint8_t block[BLOCK_LEN] = {0};
		size_t bl = len - b * BLOCK_LEN < BLOCK_LEN ? len - b * BLOCK_LEN : BLOCK_LEN;
		memcpy(block, p + b * BLOCK_LEN, bl);
		uint32_t f = (b ? 0 : CHUNK_START) | (b + 1 == nb ? CHUNK_END | root : 0);
		compress(cv, block, (uint32_t)bl, counter, f);
	}
	cv_bytes(cv, out);
}

static void parent_of(const uint8_t l[32], const uint8_t r[32], uint32_t root, uint8_t out[32])
{
	uint8_t block[64];
	memcpy(block, l, 32);
	memcpy(block + 32, r, 32);
	hash_one(block, 1, 0, PARENT | root, 0, 0, out);
}

/* Where a run [a, b) of an input of n bytes has whole chunks ([*ca, *cb),
 * empty when none) and how many bytes lie before and after them. A part
 * of a one-chunk input is all bytes: that chunk is the root. */
static void part_shape(uint64_t a, uint64_t b, uint64_t n, uint64_t *ca, uint64_t *cb,
		       size_t *head, size_t *tail)
{
	uint64_t nch = dcr_blake3_nchunks(n);
	uint64_t x = a / CHUNK_LEN + (a % CHUNK_LEN != 0), y = b == n ? nch : b / CHUNK_LEN;
	if (nch == 1 || x >= y) {
		*ca = *cb = 0;
		*head = (size_t)(b - a);
		*tail = 0;
		return;
	}
	*ca = x;
	*cb = y;
	*head = (size_t)(x * CHUNK_LEN - a);
	*tail = y == nch ? 0 : (size_t)(b - y * CHUNK_LEN);
}

void dcr_blake3_part_free(struct dcr_blake3_part *p)
{
	if (!p)
		return;
	free(p->node);
	free(p->bytes);
	memset(p, 0, sizeof(*p));
}

/* the part's shape and room for its bytes and nodes */
static int part_alloc(struct dcr_blake3_part *p, uint64_t a, uint64_t b, uint64_t n)
{
	memset(p, 0, sizeof(*p));
	if (a > b || b > n)
		return -EINVAL;
	struct dcr_blake3_node tmp[DCR_BLAKE3_MAX_NODES];
	uint64_t ca, cb;
	part_shape(a, b, n, &ca, &cb, &p->head_len, &p->tail_len);
	p->a = a;
	p->b = b;
	p->n = n;
	p->nnodes = ca < cb ? dcr_blake3_cover(n, ca, cb, tmp) : 0;
	p->bytes = malloc(p->head_len + p->tail_len + 1);
	p->node = malloc(p->nnodes * sizeof(*p->node) + 1);
	if (!p->bytes || !p->node) {
		dcr_blake3_part_free(p);
		return -ENOMEM;
	}
	memcpy(p->node, tmp, p->nnodes * sizeof(*p->node));
	return 0;
}

/* the byte offset where a node ending at chunk c1 ends */
static uint64_t node_end_of(uint64_t c1, uint64_t n)
{
	return c1 * CHUNK_LEN < n ? c1 * CHUNK_LEN : n;
}

static uint64_t node_end(const struct dcr_blake3_run *r, size_t k)
{
	return node_end_of(r->p.node[k].c1, r->p.n);
}

int dcr_blake3_run_init(struct dcr_blake3_run *r, uint64_t a, uint64_t b, uint64_t n)
{
	int q = part_alloc(&r->p, a, b, n);
	r->pos = a;
	r->inode = 0;
	if (!q && r->p.nnodes)
		dcr_blake3_init_at(&r->h, r->p.node[0].c0);
	return q;
}

void dcr_blake3_run_update(struct dcr_blake3_run *r, const void *in, size_t len)
{
	const uint8_t *p = in;
	struct dcr_blake3_part *pt = &r->p;
	uint64_t head_end = pt->a + pt->head_len;
	if (len > pt->b - r->pos)
		len = (size_t)(pt->b - r->pos); /* a caller's bug; never past the run */
	while (len) {
		size_t k;
		if (r->pos < head_end) {
			k = head_end - r->pos < len ? (size_t)(head_end - r->pos) : len;
			memcpy(pt->bytes + (r->pos - pt->a), p, k);
		} else if (r->inode < pt->nnodes) {
			uint64_t end = node_end(r, r->inode);
			k = end - r->pos < len ? (size_t)(end - r->pos) : len;
			dcr_blake3_update(&r->h, p, k);
			if (r->pos + k == end) {
				dcr_blake3_final_node(&r->h, pt->node[r->inode].cv);
				if (++r->inode < pt->nnodes)
					dcr_blake3_init_at(&r->h, pt->node[r->inode].c0);
			}
		} else {
			k = len;
			memcpy(pt->bytes + pt->head_len + (r->pos - (pt->b - pt->tail_len)), p, k);
		}
		p += k;
		len -= k;
		r->pos += k;
	}
}

int dcr_blake3_run_final(struct dcr_blake3_run *r, struct dcr_blake3_part *out)
{
	if (r->pos != r->p.b) {
		dcr_blake3_part_free(&r->p);
		return -EINVAL;
	}
	*out = r->p;
	memset(&r->p, 0, sizeof(r->p));
	return 0;
}

void dcr_blake3_run_release(struct dcr_blake3_run *r)
{
	dcr_blake3_part_free(&r->p);
}

/* The run takes part q, which starts where the run is: its head's and
 * tail's bytes as update() takes bytes, its nodes' CVs as finished
 * subtrees of the run's node they lie in (tree nodes nest, so each lies in
 * one), or as that node's CV when it is the node itself. */
int dcr_blake3_run_append(struct dcr_blake3_run *r, const struct dcr_blake3_part *q)
{
	struct dcr_blake3_part *pt = &r->p;
	if (q->n != pt->n || q->a != r->pos || q->b > pt->b || q->b < q->a ||
	    q->head_len + q->tail_len > q->b - q->a)
		return -EINVAL;
	dcr_blake3_run_update(r, q->bytes, q->head_len);
	for (size_t k = 0; k < q->nnodes; k++) {
		const struct dcr_blake3_node *nd = &q->node[k];
		if (r->inode >= pt->nnodes || r->pos != nd->c0 * CHUNK_LEN)
			return -EINVAL;
		struct dcr_blake3_node *t = &pt->node[r->inode];
		struct dcr_blake3 *h = &r->h;
		if (nd->c0 < t->c0 || nd->c1 > t->c1 || nd->c1 <= nd->c0)
			return -EINVAL;
		if (nd->c0 == t->c0 && nd->c1 == t->c1) {
			memcpy(t->cv, nd->cv, 32);
		} else {
			/* the open chunk, full, is done first; a part of one
			 * never lies on the hasher's stack alone at the end
			 * (it is not the whole node) */
			size_t have = (size_t)h->blocks * BLOCK_LEN + h->block_len;
			if (have == CHUNK_LEN)
				chunk_done(h);
			else if (have)
				return -EINVAL;
			if (h->chunk != nd->c0)
				return -EINVAL;
			push_cv(h, nd->cv, nd->c0);
			h->chunk = nd->c1;
		}
		r->pos = node_end_of(nd->c1, pt->n);
		if (r->pos == node_end(r, r->inode)) {
			if (nd->c0 != t->c0 || nd->c1 != t->c1)
				dcr_blake3_final_node(h, t->cv);
			if (++r->inode < pt->nnodes)
				dcr_blake3_init_at(h, pt->node[r->inode].c0);
		}
	}
	if (r->pos + q->tail_len != q->b)
		return -EINVAL;
	dcr_blake3_run_update(r, q->bytes + q->head_len, q->tail_len);
	return 0;
}

int dcr_blake3_part_of(const void *p, uint64_t a, uint64_t b, uint64_t n,
		       struct dcr_blake3_part *out)
{
	struct dcr_blake3_run r;
	int q = dcr_blake3_run_init(&r, a, b, n);
	if (q)
		return q;
	dcr_blake3_run_update(&r, p, (size_t)(b - a));
	return dcr_blake3_run_final(&r, out);
}

/* ---- many runs at once ----
 * Runs that each take whole, aligned chunks inside one node at the same
 * time (the stripes of a band of rows) are hashed together: their chunks
 * eight at a time whatever run they belong to, then each level of parents
 * of all of them at once, down to two CVs per run, which go on the run's
 * hasher as update() would put them; so that parents, which are one
 * compression per chunk, are not hashed one by one (with a stripe's 16 to
 * 64 chunks per band, that cost a tenth of the time). */

#define BATCH_CVS 2048 /* chunk CVs hashed in one go */

/* Can run r take its next len bytes (kc >= 2 aligned whole chunks, a power
 * of two) in a batch? */
static int batchable(const struct dcr_blake3_run *r, size_t kc)
{
	const struct dcr_blake3_part *pt = &r->p;
	if (r->inode >= pt->nnodes || r->pos % CHUNK_LEN || r->pos < pt->a + pt->head_len)
		return 0;
	uint64_t c = r->pos / CHUNK_LEN;
	const struct dcr_blake3_node *nd = &pt->node[r->inode];
	return !(c % kc) && c + kc <= nd->c1 && (c + kc) * CHUNK_LEN <= node_end(r, r->inode) &&
	       r->h.chunk == c && !r->h.blocks && !r->h.block_len;
}

/* the halves of a subtree of kc chunks at c are on its hasher: advance */
static void push_halves(struct dcr_blake3_run *r, const uint8_t cv[64], size_t kc)
{
	struct dcr_blake3_part *pt = &r->p;
	uint64_t c = r->pos / CHUNK_LEN;
	push_cv(&r->h, cv, c);
	push_cv(&r->h, cv + 32, c + kc / 2);
	r->h.chunk = c + kc;
	r->pos += (uint64_t)kc * CHUNK_LEN;
	if (r->pos == node_end(r, r->inode)) {
		dcr_blake3_final_node(&r->h, pt->node[r->inode].cv);
		if (++r->inode < pt->nnodes)
			dcr_blake3_init_at(&r->h, pt->node[r->inode].c0);
	}
}

/* Run i's bytes are nq segments of w bytes, src[i] and then pitch bytes
 * apart (a stripe's segments in a band of rows): whole chunks are hashed
 * where they lie, eight lanes reading eight runs' chunks of the same rows,
 * so that the rows are read in their stored order (gathering the segments
 * into contiguous chunks first cost a third of the hashing time). */
static void batch_rows(struct dcr_blake3_run *const *run, const uint8_t *const *src, size_t k,
		       size_t kc, size_t w, size_t pitch, uint8_t (*cv)[32], uint8_t (*up)[32])
{
#ifdef HAVE_AVX2_PATH
	size_t n = k * kc, rpc = CHUNK_LEN / w;
	unsigned seg_log2 = (unsigned)__builtin_ctzll(w / BLOCK_LEN);
	for (size_t i = 0, nl; i < n; i += nl) {
		hashn_fn *const hn = lanes_for(n - i, &nl);
		const uint8_t *p[MAX_LANES];
		uint64_t ctr[MAX_LANES];
		uint8_t tmp[MAX_LANES * 32];
		size_t m = n - i < nl ? n - i : nl;
		for (size_t j = 0; j < nl; j++) {
			size_t q = i + (j < m ? j : 0), t = q / k, r = q % k;
			p[j] = src[r] + t * rpc * pitch;
			ctr[j] = run[r]->pos / CHUNK_LEN + t;
		}
		hn(p, CHUNK_LEN / BLOCK_LEN, ctr, 0, CHUNK_START, CHUNK_END, pitch, seg_log2, tmp);
		for (size_t j = 0; j < m; j++) {
			size_t q = i + j;
			memcpy(cv[(q % k) * kc + q / k], tmp + 32 * j, 32);
		}
	}
	for (size_t wd = kc; wd > 2; wd /= 2) {
		hash_many(cv[0], 64, k * wd / 2, 1, 0, 0, PARENT, 0, 0, up[0]);
		memcpy(cv, up, k * wd / 2 * 32);
	}
	for (size_t i = 0; i < k; i++)
		push_halves((struct dcr_blake3_run *)run[i], cv[2 * i], kc);
#else
	(void)run, (void)src, (void)k, (void)kc, (void)w, (void)pitch, (void)cv, (void)up;
#endif
}

void dcr_blake3_runs_update_rows(struct dcr_blake3_run *const *run, const uint8_t *const *src,
				 size_t n, size_t w, size_t nq, size_t pitch)
{
	size_t len = w * nq, kc = len / CHUNK_LEN;
	int rows = w >= 2 * BLOCK_LEN && w <= CHUNK_LEN && !(w & (w - 1)) && kc >= 2 &&
		   kc <= BATCH_CVS / 2 && !(kc & (kc - 1)) && !(len % CHUNK_LEN) && simd();
	struct dcr_blake3_run *b[64];
	const uint8_t *bs[64];
	uint8_t (*cv)[32] = NULL, (*up)[32] = NULL, *g = NULL;
	size_t nb = 0, most = rows ? BATCH_CVS / kc : 0;
	if (most > 64)
		most = 64;
	if (rows) {
		cv = malloc(BATCH_CVS * 32);
		up = malloc(BATCH_CVS / 2 * 32);
	}
	for (size_t i = 0; i < n; i++) {
		if (!cv || !up || !batchable(run[i], kc)) {
			/* gathered, and fed as bytes */
			if (!g && !(g = malloc(len ? len : 1)))
				continue; /* the run stays short: its final says so */
			for (size_t q = 0; q < nq; q++)
				memcpy(g + q * w, src[i] + q * pitch, w);
			dcr_blake3_run_update(run[i], g, len);
			continue;
		}
		b[nb] = run[i];
		bs[nb++] = src[i];
		if (nb == most) {
			batch_rows(b, bs, nb, kc, w, pitch, cv, up);
			nb = 0;
		}
	}
	if (nb)
		batch_rows(b, bs, nb, kc, w, pitch, cv, up);
	free(cv);
	free(up);
	free(g);
}

/* ---- joining parts ---- */

struct jnodes {
	struct dcr_blake3_node *v;
	size_t n, cap;
};

static int jn_add(struct jnodes *j, uint64_t c0, uint64_t c1, const uint8_t cv[32])
{
	if (j->n == j->cap) {
		size_t cap = j->cap ? 2 * j->cap : 256;
		struct dcr_blake3_node *nv = realloc(j->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		j->v = nv;
		j->cap = cap;
	}
	j->v[j->n].c0 = c0;
	j->v[j->n].c1 = c1;
	memcpy(j->v[j->n].cv, cv, 32);
	j->n++;
	return 0;
}

/* Bytes of the input between nodes, gathered into chunks: each chunk is
 * hashed once it is whole (or the input ends). */
struct jbytes {
	uint8_t buf[CHUNK_LEN];
	size_t fill;
	uint64_t pos; /* the input offset of buf[0] */
};

static int jb_add(struct jbytes *jb, struct jnodes *jn, uint64_t n, const uint8_t *p, size_t len)
{
	uint32_t root = dcr_blake3_nchunks(n) == 1 ? ROOT : 0;
	while (len) {
		size_t k = CHUNK_LEN - jb->fill < len ? CHUNK_LEN - jb->fill : len;
		memcpy(jb->buf + jb->fill, p, k);
		jb->fill += k;
		p += k;
		len -= k;
		if (jb->fill == CHUNK_LEN || jb->pos + jb->fill == n) {
			uint8_t cv[32];
			uint64_t c = jb->pos / CHUNK_LEN;
			chunk_cv(jb->buf, jb->fill, c, root, cv);
			if (jn_add(jn, c, c + 1, cv))
				return -ENOMEM;
			jb->pos += jb->fill;
			jb->fill = 0;
		}
	}
	return 0;
}

/* The CV of node [s, e) from the nodes v[*i...] in order (the root's hash
 * when root), or -1 when they are not the nodes of a tree. */
static int build(const struct jnodes *j, size_t *i, uint64_t s, uint64_t e, uint32_t root,
		 uint8_t out[32])
{
	if (*i >= j->n || j->v[*i].c0 != s || j->v[*i].c1 > e)
		return -1;
	if (j->v[*i].c1 == e && !root) {
		memcpy(out, j->v[*i].cv, 32);
		(*i)++;
		return 0;
	}
	if (e - s < 2)
		return -1;
	uint64_t m = s + left_len(e - s);
	uint8_t l[32], r[32];
	if (build(j, i, s, m, 0, l) || build(j, i, m, e, 0, r))
		return -1;
	parent_of(l, r, root, out);
	return 0;
}

static int cmp_part(const void *x, const void *y)
{
	const struct dcr_blake3_part *a = *(const struct dcr_blake3_part *const *)x;
	const struct dcr_blake3_part *b = *(const struct dcr_blake3_part *const *)y;
	if (a->a != b->a)
		return a->a < b->a ? -1 : 1;
	return a->b < b->b ? -1 : a->b > b->b;
}

/* a part's fields agree with its run (a decoded part was made so; this
 * catches parts built by hand) */
static int part_sane(const struct dcr_blake3_part *p, uint64_t n)
{
	uint64_t ca, cb;
	size_t h, t;
	if (p->n != n || p->a > p->b || p->b > n)
		return 0;
	part_shape(p->a, p->b, n, &ca, &cb, &h, &t);
	if (h != p->head_len || t != p->tail_len)
		return 0;
	struct dcr_blake3_node tmp[DCR_BLAKE3_MAX_NODES];
	size_t k = ca < cb ? dcr_blake3_cover(n, ca, cb, tmp) : 0;
	if (k != p->nnodes)
		return 0;
	for (size_t i = 0; i < k; i++)
		if (tmp[i].c0 != p->node[i].c0 || tmp[i].c1 != p->node[i].c1)
			return 0;
	return 1;
}

int dcr_blake3_join(const struct dcr_blake3_part *v, size_t k, uint64_t n, dcr_digest *out,
		    struct dcr_err *e)
{
	const struct dcr_blake3_part **s = malloc((k + 1) * sizeof(*s));
	struct jnodes jn = {0};
	struct jbytes *jb = calloc(1, sizeof(*jb));
	int r = 0;
	if (!s || !jb) {
		r = dcr_err_sys(e, ENOMEM, "digest parts");
		goto out;
	}
	size_t m = 0;
	for (size_t i = 0; i < k; i++) {
		if (!part_sane(&v[i], n)) {
			r = dcr_err_set(e, DCR_EFORMAT,
					"digest part %zu is malformed or of another length (%llu bytes, not %llu)",
					i, (unsigned long long)v[i].n, (unsigned long long)n);
			goto out;
		}
		if (v[i].a < v[i].b)
			s[m++] = &v[i];
	}
	qsort(s, m, sizeof(*s), cmp_part);
	uint64_t at = 0;
	for (size_t i = 0; i < m; i++) {
		if (s[i]->a != at) {
			r = s[i]->a < at
				    ? dcr_err_set(e, DCR_EFORMAT,
						  "digest parts overlap: bytes [%llu, %llu) are covered twice",
						  (unsigned long long)s[i]->a,
						  (unsigned long long)(s[i]->b < at ? s[i]->b : at))
				    : dcr_err_set(e, DCR_EFORMAT,
						  "digest parts leave bytes [%llu, %llu) uncovered",
						  (unsigned long long)at, (unsigned long long)s[i]->a);
			goto out;
		}
		at = s[i]->b;
	}
	if (at != n) {
		r = dcr_err_set(e, DCR_EFORMAT, "digest parts leave bytes [%llu, %llu) uncovered",
				(unsigned long long)at, (unsigned long long)n);
		goto out;
	}
	if (!n) {
		dcr_blake3(NULL, 0, out);
		goto out;
	}
	for (size_t i = 0; i < m && !r; i++) {
		const struct dcr_blake3_part *p = s[i];
		r = jb_add(jb, &jn, n, p->bytes, p->head_len);
		if (!r && p->nnodes && jb->fill)
			r = -1; /* bytes before a node end inside a chunk: cannot be */
		for (size_t q = 0; q < p->nnodes && !r; q++)
			r = jn_add(&jn, p->node[q].c0, p->node[q].c1, p->node[q].cv);
		if (!r && p->nnodes)
			jb->pos = node_end_of(p->node[p->nnodes - 1].c1, n);
		if (!r)
			r = jb_add(jb, &jn, n, p->bytes + p->head_len, p->tail_len);
	}
	size_t i = 0;
	uint64_t nch = dcr_blake3_nchunks(n);
	if (!r && nch == 1) {
		if (jn.n != 1)
			r = -1;
		else
			memcpy(out->b, jn.v[0].cv, 32);
	} else if (!r && (build(&jn, &i, 0, nch, ROOT, out->b) || i != jn.n)) {
		r = -1;
	}
	if (r == -ENOMEM)
		r = dcr_err_sys(e, ENOMEM, "digest parts");
	else if (r)
		r = dcr_err_set(e, DCR_EFORMAT, "digest parts do not make a tree");
out:
	free(s);
	free(jb);
	free(jn.v);
	return r;
}

/* ---- parts on the wire ----
 * le64 a, le64 b, le64 n, the head's bytes, the nodes' CVs, the tail's
 * bytes: how many of each follows from a, b and n. */

int dcr_blake3_part_encode(const struct dcr_blake3_part *p, struct dcr_buf *out)
{
	int r = dcr_buf_add_le64(out, p->a) || dcr_buf_add_le64(out, p->b) ||
		dcr_buf_add_le64(out, p->n) || dcr_buf_add(out, p->bytes, p->head_len);
	for (size_t i = 0; i < p->nnodes && !r; i++)
		r = dcr_buf_add(out, p->node[i].cv, 32);
	r = r || dcr_buf_add(out, p->bytes + p->head_len, p->tail_len);
	return r ? -ENOMEM : 0;
}

int dcr_blake3_part_decode(const uint8_t *buf, size_t len, size_t *used,
			   struct dcr_blake3_part *p, struct dcr_err *e)
{
	memset(p, 0, sizeof(*p));
	if (len < 24)
		return dcr_err_set(e, DCR_EFORMAT, "digest part is truncated");
	uint64_t a = get_le64(buf), b = get_le64(buf + 8), n = get_le64(buf + 16);
	if (a > b || b > n)
		return dcr_err_set(e, DCR_EFORMAT, "digest part names bytes [%llu, %llu) of %llu",
				   (unsigned long long)a, (unsigned long long)b,
				   (unsigned long long)n);
	/* the bytes it claims are there before any room is made for them */
	uint64_t ca, cb;
	size_t hl, tl;
	part_shape(a, b, n, &ca, &cb, &hl, &tl);
	if (hl > len - 24 || tl > len - 24 - hl)
		return dcr_err_set(e, DCR_EFORMAT, "digest part is truncated");
	int r = part_alloc(p, a, b, n);
	if (r)
		return dcr_err_sys(e, -r, "digest part");
	size_t need = 24 + p->head_len + 32 * p->nnodes + p->tail_len;
	if (len < need) {
		dcr_blake3_part_free(p);
		return dcr_err_set(e, DCR_EFORMAT, "digest part is truncated");
	}
	const uint8_t *q = buf + 24;
	memcpy(p->bytes, q, p->head_len);
	q += p->head_len;
	for (size_t i = 0; i < p->nnodes; i++, q += 32)
		memcpy(p->node[i].cv, q, 32);
	memcpy(p->bytes + p->head_len, q, p->tail_len);
	if (used)
		*used = need;
	return 0;
}
