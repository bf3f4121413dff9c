/* blake3.h - BLAKE3 (hash mode, 32-byte output), one shot and streaming,
 * AVX2 where the CPU has it; pieces for verified streaming. */
#ifndef DCR_CORE_BLAKE3_H
#define DCR_CORE_BLAKE3_H

#include <stddef.h>
#include <stdint.h>

#include "core/digest.h"

/* BLAKE3 (hash mode, 32-byte output; lib/blake3.c), one shot and
 * streaming; AVX2 where the CPU has it. */
struct dcr_blake3 {
	uint32_t cv[8];	   /* of the current chunk so far */
	uint64_t chunk;	   /* its number */
	uint64_t base;	   /* the first chunk's (dcr_blake3_init_at) */
	uint8_t block[64]; /* its last, unfinished block */
	uint8_t block_len, blocks, nstack;
	uint8_t stack[56][32]; /* CVs of finished subtrees, largest first */
};
void dcr_blake3_init(struct dcr_blake3 *h);
void dcr_blake3_update(struct dcr_blake3 *h, const void *p, size_t n);
void dcr_blake3_final(const struct dcr_blake3 *h, dcr_digest *out);
void dcr_blake3(const void *p, size_t n, dcr_digest *out);
int dcr_blake3_simd(int on); /* tests: 0 forces the portable code; returns the old setting */
/* Verified streaming. A piece is an aligned 2^log2-byte run of the input
 * (log2 >= 10; the last piece may be shorter), and a node of BLAKE3's tree
 * whenever there are two pieces or more: its chaining value (CV) checks
 * it on its own, and the CVs of all pieces give the root.
 * dcr_blake3_init_at starts a hasher at chunk (1 KiB) number first_chunk,
 * dcr_blake3_final_node gives the CV of what it was fed as a non-root
 * node: fed one piece at its chunk, that is the piece's CV. */
void dcr_blake3_init_at(struct dcr_blake3 *h, uint64_t first_chunk);
void dcr_blake3_final_node(const struct dcr_blake3 *h, uint8_t cv[32]);
/* The CV of a piece of an input of npieces: a single piece is the root. */
void dcr_blake3_final_piece(const struct dcr_blake3 *h, size_t npieces, uint8_t cv[32]);
size_t dcr_blake3_npieces(uint64_t n, unsigned log2); /* at least 1 */
/* cv gets npieces CVs (a single piece: the root itself) and root the hash. */
void dcr_blake3_pieces(const void *p, size_t n, unsigned log2, uint8_t (*cv)[32],
		       dcr_digest *root);
void dcr_blake3_root_of_pieces(const uint8_t (*cv)[32], size_t n, dcr_digest *root);

#endif
