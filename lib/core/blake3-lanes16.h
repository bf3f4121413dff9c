/* blake3-lanes16.h - BLAKE3's compression on sixteen inputs at once, one
 * per 32-bit lane of a 512-bit vector (AVX-512F): included by blake3.c
 * once, never on its own. The includer has BLOCK_LEN, CHUNK_LEN, IV,
 * SCHED and ROUND. It defines hash16_rows_avx512, of blake3.c's hashn_fn
 * type with sixteen inputs: the same contract as blake3-lanes.h's
 * hash8_rows, twice as wide. On a core whose vector units are 512 bits
 * wide (AMD Zen 5, Intel since Ice Lake) it does twice the work of the
 * eight-lane code per instruction. */

#define L16_FN __attribute__((target("avx512f")))

#define L16_G(a, b, c, d, x, y)                                                \
	do {                                                                   \
		v##a = _mm512_add_epi32(_mm512_add_epi32(v##a, v##b), (x));    \
		v##d = _mm512_ror_epi32(_mm512_xor_si512(v##d, v##a), 16);     \
		v##c = _mm512_add_epi32(v##c, v##d);                           \
		v##b = _mm512_ror_epi32(_mm512_xor_si512(v##b, v##c), 12);     \
		v##a = _mm512_add_epi32(_mm512_add_epi32(v##a, v##b), (y));    \
		v##d = _mm512_ror_epi32(_mm512_xor_si512(v##d, v##a), 8);      \
		v##c = _mm512_add_epi32(v##c, v##d);                           \
		v##b = _mm512_ror_epi32(_mm512_xor_si512(v##b, v##c), 7);      \
	} while (0)

/* Transpose sixteen rows of sixteen 32-bit words in place: r[i] word w
 * becomes r[w] word i. Within each 128-bit lane first (a 4x4 transpose of
 * words in each group of four rows), then the 128-bit lanes across the
 * groups (a 4x4 transpose of lanes). */
L16_FN static inline void transpose16(__m512i r[16])
{
	__m512i g[16];
	for (int q = 0; q < 4; q++) {
		__m512i *x = r + 4 * q;
		__m512i a0 = _mm512_unpacklo_epi32(x[0], x[1]), a1 = _mm512_unpackhi_epi32(x[0], x[1]);
		__m512i a2 = _mm512_unpacklo_epi32(x[2], x[3]), a3 = _mm512_unpackhi_epi32(x[2], x[3]);
		/* g[4q + m], lane L: word 4L + m of rows 4q .. 4q+3 */
		g[4 * q + 0] = _mm512_unpacklo_epi64(a0, a2);
		g[4 * q + 1] = _mm512_unpackhi_epi64(a0, a2);
		g[4 * q + 2] = _mm512_unpacklo_epi64(a1, a3);
		g[4 * q + 3] = _mm512_unpackhi_epi64(a1, a3);
	}
	for (int m = 0; m < 4; m++) {
		/* lanes (0, 1) and (2, 3) of groups 0 and 1, then 2 and 3 */
		__m512i x0 = _mm512_shuffle_i32x4(g[m], g[4 + m], 0x44);
		__m512i x1 = _mm512_shuffle_i32x4(g[m], g[4 + m], 0xEE);
		__m512i y0 = _mm512_shuffle_i32x4(g[8 + m], g[12 + m], 0x44);
		__m512i y1 = _mm512_shuffle_i32x4(g[8 + m], g[12 + m], 0xEE);
		/* word 4L + m: lane L of each group, in group order */
		r[0 + m] = _mm512_shuffle_i32x4(x0, y0, 0x88);
		r[4 + m] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
		r[8 + m] = _mm512_shuffle_i32x4(x1, y1, 0x88);
		r[12 + m] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
	}
}

/* sixteen inputs, each with its own counter; addressing as hash8_rows
 * (blake3-lanes.h): contiguous (pitch 0), or a chunk cut in segments of
 * 2^seg_log2 blocks `pitch` bytes apart */
L16_FN static void hash16_rows_avx512(const uint8_t *const in[16], size_t blocks,
				      const uint64_t ctr[16], uint32_t flags, uint32_t start,
				      uint32_t end, size_t pitch, unsigned seg_log2,
				      uint8_t out[16 * 32])
{
	const size_t mask = ((size_t)1 << seg_log2) - 1;
	const size_t ahead = pitch ? pitch << (4 - seg_log2) : 16 * CHUNK_LEN;
	__m512i h[8], m[16];
	uint32_t lo[16], hi[16];
	for (int j = 0; j < 16; j++) {
		lo[j] = (uint32_t)ctr[j];
		hi[j] = (uint32_t)(ctr[j] >> 32);
	}
	const __m512i clo = _mm512_loadu_si512(lo), chi = _mm512_loadu_si512(hi);
	for (int i = 0; i < 8; i++)
		h[i] = _mm512_set1_epi32((int)IV[i]);
	uint32_t f = flags | start;
	for (size_t b = 0; b < blocks; b++) {
		if (b + 1 == blocks)
			f |= end;
		size_t off = (b >> seg_log2) * pitch + (b & mask) * BLOCK_LEN;
		for (int j = 0; j < 16; j++) {
			_mm_prefetch((const char *)in[j] + off + ahead, _MM_HINT_T0);
			m[j] = _mm512_loadu_si512(in[j] + off);
		}
		transpose16(m);
		__m512i v0 = h[0], v1 = h[1], v2 = h[2], v3 = h[3], v4 = h[4], v5 = h[5],
			v6 = h[6], v7 = h[7];
		__m512i v8 = _mm512_set1_epi32((int)IV[0]), v9 = _mm512_set1_epi32((int)IV[1]),
			v10 = _mm512_set1_epi32((int)IV[2]), v11 = _mm512_set1_epi32((int)IV[3]);
		__m512i v12 = clo, v13 = chi, v14 = _mm512_set1_epi32(BLOCK_LEN),
			v15 = _mm512_set1_epi32((int)f);
		ROUND(L16_G, 0);
		ROUND(L16_G, 1);
		ROUND(L16_G, 2);
		ROUND(L16_G, 3);
		ROUND(L16_G, 4);
		ROUND(L16_G, 5);
		ROUND(L16_G, 6);
		h[0] = _mm512_xor_si512(v0, v8);
		h[1] = _mm512_xor_si512(v1, v9);
		h[2] = _mm512_xor_si512(v2, v10);
		h[3] = _mm512_xor_si512(v3, v11);
		h[4] = _mm512_xor_si512(v4, v12);
		h[5] = _mm512_xor_si512(v5, v13);
		h[6] = _mm512_xor_si512(v6, v14);
		h[7] = _mm512_xor_si512(v7, v15);
		f = flags;
	}
	/* word i of lane j is byte 4i of input j's chaining value */
	uint32_t w[8][16];
	for (int i = 0; i < 8; i++)
		_mm512_storeu_si512(w[i], h[i]);
	for (int j = 0; j < 16; j++)
		for (int i = 0; i < 8; i++)
			memcpy(out + 32 * j + 4 * i, &w[i][j], 4);
}

#undef L16_FN
#undef L16_G
