/* blake3-lanes.h - BLAKE3's compression on eight inputs at once, one per
 * 32-bit lane of a 256-bit vector: included by blake3.c once per
 * instruction set, never on its own. The includer defines
 *
 *   LANES(name)       the name of this instance's functions (name##_avx2)
 *   LANES_TARGET      the target attribute ("avx2", ...)
 *   LANES_ROTR(x, n)  rotate each 32-bit lane of x right by n (12 and 7)
 *   LANES_ROT16(x), LANES_ROT8(x)   by 16 and by 8
 *
 * and has BLOCK_LEN, IV, SCHED, ROUND and PREFETCH. It defines
 * LANES(hash8_rows), of blake3.c's hash8_fn type. */

#define LANES_FN __attribute__((target(LANES_TARGET)))

/* the mixing function on eight lanes; the state lives in sixteen named
 * variables, not an array, so that GCC keeps it in registers */
#define LANES_G(a, b, c, d, x, y)                                              \
	do {                                                                   \
		v##a = _mm256_add_epi32(_mm256_add_epi32(v##a, v##b), (x));    \
		v##d = LANES_ROT16(_mm256_xor_si256(v##d, v##a));              \
		v##c = _mm256_add_epi32(v##c, v##d);                           \
		v##b = LANES_ROTR(_mm256_xor_si256(v##b, v##c), 12);           \
		v##a = _mm256_add_epi32(_mm256_add_epi32(v##a, v##b), (y));    \
		v##d = LANES_ROT8(_mm256_xor_si256(v##d, v##a));               \
		v##c = _mm256_add_epi32(v##c, v##d);                           \
		v##b = LANES_ROTR(_mm256_xor_si256(v##b, v##c), 7);            \
	} while (0)

/* transpose eight rows of eight 32-bit words in place */
LANES_FN static inline void LANES(transpose8)(__m256i r[8])
{
	__m256i a0 = _mm256_unpacklo_epi32(r[0], r[1]), a1 = _mm256_unpackhi_epi32(r[0], r[1]);
	__m256i a2 = _mm256_unpacklo_epi32(r[2], r[3]), a3 = _mm256_unpackhi_epi32(r[2], r[3]);
	__m256i a4 = _mm256_unpacklo_epi32(r[4], r[5]), a5 = _mm256_unpackhi_epi32(r[4], r[5]);
	__m256i a6 = _mm256_unpacklo_epi32(r[6], r[7]), a7 = _mm256_unpackhi_epi32(r[6], r[7]);
	__m256i b0 = _mm256_unpacklo_epi64(a0, a2), b1 = _mm256_unpackhi_epi64(a0, a2);
	__m256i b2 = _mm256_unpacklo_epi64(a1, a3), b3 = _mm256_unpackhi_epi64(a1, a3);
	__m256i b4 = _mm256_unpacklo_epi64(a4, a6), b5 = _mm256_unpackhi_epi64(a4, a6);
	__m256i b6 = _mm256_unpacklo_epi64(a5, a7), b7 = _mm256_unpackhi_epi64(a5, a7);
	r[0] = _mm256_permute2x128_si256(b0, b4, 0x20);
	r[1] = _mm256_permute2x128_si256(b1, b5, 0x20);
	r[2] = _mm256_permute2x128_si256(b2, b6, 0x20);
	r[3] = _mm256_permute2x128_si256(b3, b7, 0x20);
	r[4] = _mm256_permute2x128_si256(b0, b4, 0x31);
	r[5] = _mm256_permute2x128_si256(b1, b5, 0x31);
	r[6] = _mm256_permute2x128_si256(b2, b6, 0x31);
	r[7] = _mm256_permute2x128_si256(b3, b7, 0x31);
}

/* eight inputs, each with its own counter. An input is contiguous (pitch
 * 0 and a seg_log2 past any length), or (rows) a chunk cut in segments of
 * 2^seg_log2 blocks, `pitch` bytes apart: block b is at (b >> seg_log2) *
 * pitch + (b & mask) * 64. */
LANES_FN static void LANES(hash8_rows)(const uint8_t *const in[8], size_t blocks,
				       const uint64_t ctr[8], uint32_t flags, uint32_t start,
				       uint32_t end, size_t pitch, unsigned seg_log2,
				       uint8_t out[8 * 32])
{
	const size_t mask = ((size_t)1 << seg_log2) - 1;
	/* rows: prefetch the chunk of the rows below, which comes next */
	const size_t ahead = pitch ? pitch << (4 - seg_log2) : PREFETCH;
	__m256i h[8], m[16];
	uint32_t lo[8], hi[8];
	for (int j = 0; j < 8; j++) {
		lo[j] = (uint32_t)ctr[j];
		hi[j] = (uint32_t)(ctr[j] >> 32);
	}
	const __m256i clo = _mm256_loadu_si256((const __m256i *)lo);
	const __m256i chi = _mm256_loadu_si256((const __m256i *)hi);
	for (int i = 0; i < 8; i++)
		h[i] = _mm256_set1_epi32((int)IV[i]);
	uint32_t f = flags | start;
	for (size_t b = 0; b < blocks; b++) {
		if (b + 1 == blocks)
			f |= end;
		size_t off = (b >> seg_log2) * pitch + (b & mask) * BLOCK_LEN;
		/* unrolled, the eight lanes' message words need no array in
		 * memory: fewer of the state's registers spill */
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			/* eight streams 1 KiB apart are more than the hardware
			 * prefetcher follows well: ask for the next group's */
			_mm_prefetch((const char *)in[j] + off + ahead, _MM_HINT_T0);
			m[j] = _mm256_loadu_si256((const __m256i *)(in[j] + off));
			m[j + 8] = _mm256_loadu_si256((const __m256i *)(in[j] + off + 32));
		}
		LANES(transpose8)(m);
		LANES(transpose8)(m + 8);
		__m256i v0 = h[0], v1 = h[1], v2 = h[2], v3 = h[3], v4 = h[4], v5 = h[5],
			v6 = h[6], v7 = h[7];
		__m256i v8 = _mm256_set1_epi32((int)IV[0]), v9 = _mm256_set1_epi32((int)IV[1]),
			v10 = _mm256_set1_epi32((int)IV[2]), v11 = _mm256_set1_epi32((int)IV[3]);
		__m256i v12 = clo, v13 = chi, v14 = _mm256_set1_epi32(BLOCK_LEN),
			v15 = _mm256_set1_epi32((int)f);
		ROUND(LANES_G, 0);
		ROUND(LANES_G, 1);
		ROUND(LANES_G, 2);
		ROUND(LANES_G, 3);
		ROUND(LANES_G, 4);
		ROUND(LANES_G, 5);
		ROUND(LANES_G, 6);
		h[0] = _mm256_xor_si256(v0, v8);
		h[1] = _mm256_xor_si256(v1, v9);
		h[2] = _mm256_xor_si256(v2, v10);
		h[3] = _mm256_xor_si256(v3, v11);
		h[4] = _mm256_xor_si256(v4, v12);
		h[5] = _mm256_xor_si256(v5, v13);
		h[6] = _mm256_xor_si256(v6, v14);
		h[7] = _mm256_xor_si256(v7, v15);
		f = flags;
	}
	LANES(transpose8)(h);
	for (int j = 0; j < 8; j++)
		_mm256_storeu_si256((__m256i *)(out + 32 * j), h[j]);
}

#undef LANES_FN
#undef LANES_G
