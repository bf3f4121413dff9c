/* blake3.h - BLAKE3 (hash mode, 32-byte output), one shot and streaming,
 * AVX2 where the CPU has it; pieces for verified streaming. */
#ifndef DCR_CORE_BLAKE3_H
#define DCR_CORE_BLAKE3_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/digest.h"
#include "core/error.h"

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
/* tests: the code path, 0 portable, 1 AVX2, 2 AVX-512VL (eight lanes), 3
 * AVX-512 (sixteen lanes; at most what the CPU has); returns the old one */
int dcr_blake3_simd(int level);
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

/* ---- the tree, for digests joined from parts (tensor digests:
 * dcr-format-delta(5), TENSOR DIGESTS) ----
 * An input of n bytes has dcr_blake3_nchunks(n) chunks of 1 KiB (at least
 * one; the last may be shorter). A node of its tree covers chunks
 * [c0, c1); every node but the root has a chaining value (CV) that follows
 * from its bytes and c0 alone. */
#define DCR_BLAKE3_CHUNK_LEN 1024
#define DCR_BLAKE3_MAX_NODES 128
struct dcr_blake3_node {
	uint64_t c0, c1;
	uint8_t cv[32];
};
uint64_t dcr_blake3_nchunks(uint64_t n);
/* The largest nodes, the root excepted, that chunks [c0, c1) of an input
 * of n bytes consist of, in order (at most DCR_BLAKE3_MAX_NODES). */
size_t dcr_blake3_cover(uint64_t n, uint64_t c0, uint64_t c1, struct dcr_blake3_node *out);

/* A digest part: what a holder of bytes [a, b) of an input of n bytes
 * contributes to its hash. The bytes of the chunks the run covers only in
 * part (head: [a, a + head_len), tail: [b - tail_len, b); at most 1 KiB
 * each, and all of the run when it holds no whole chunk or the input is a
 * single chunk), and the CVs of the largest nodes between them (about
 * 2 log2 of its chunks). Parts of runs that cover the input exactly once
 * join into its hash. */
struct dcr_blake3_part {
	uint64_t a, b, n;
	size_t head_len, tail_len;
	uint8_t *bytes; /* head_len + tail_len: the head's, then the tail's */
	size_t nnodes;
	struct dcr_blake3_node *node;
};
void dcr_blake3_part_free(struct dcr_blake3_part *p);
/* The part of bytes [a, b) (at p) of an input of n bytes: 0, -EINVAL or
 * -ENOMEM. */
int dcr_blake3_part_of(const void *p, uint64_t a, uint64_t b, uint64_t n,
		       struct dcr_blake3_part *out);
/* The same from the run's bytes fed in order, in pieces of any size. */
struct dcr_blake3_run {
	struct dcr_blake3_part p; /* being filled */
	uint64_t pos;		  /* the offset of the next byte */
	size_t inode;		  /* the node being hashed, with h */
	struct dcr_blake3 h;
};
int dcr_blake3_run_init(struct dcr_blake3_run *r, uint64_t a, uint64_t b, uint64_t n);
void dcr_blake3_run_update(struct dcr_blake3_run *r, const void *p, size_t len);
/* The same from the parts of the runs that follow each other from where
 * the run is (each at its end): 0, or -EINVAL for a part of another input
 * or that does not start where the run is, which leaves the run unusable
 * (release it). Whole chunks are not hashed again. */
int dcr_blake3_run_append(struct dcr_blake3_run *r, const struct dcr_blake3_part *q);
/* The part, once all b - a bytes came (else -EINVAL); the run is spent. */
int dcr_blake3_run_final(struct dcr_blake3_run *r, struct dcr_blake3_part *out);
void dcr_blake3_run_release(struct dcr_blake3_run *r);
/* Feed n runs (of one input or several) nq * w bytes each, run i's as nq
 * segments of w bytes, the first at src[i] and each pitch bytes after the
 * one before (the stripes of a band of rows): the same as
 * dcr_blake3_run_update on each, but whole aligned chunks inside a node
 * are hashed where they lie, eight chunks and eight parents at a time
 * across the runs; the rest is gathered. */
void dcr_blake3_runs_update_rows(struct dcr_blake3_run *const *run, const uint8_t *const *src,
				 size_t n, size_t w, size_t nq, size_t pitch);
/* The hash of the input from parts (in any order) that cover [0, n)
 * exactly once; overlaps, gaps and malformed parts are DCR_EFORMAT. */
int dcr_blake3_join(const struct dcr_blake3_part *v, size_t k, uint64_t n, dcr_digest *out,
		    struct dcr_err *e);
/* A part as bytes: le64 a, le64 b, le64 n, the head, the nodes' CVs, the
 * tail (their sizes follow from a, b and n); decode sets *used to the
 * bytes it took. */
int dcr_blake3_part_encode(const struct dcr_blake3_part *p, struct dcr_buf *out);
int dcr_blake3_part_decode(const uint8_t *buf, size_t len, size_t *used,
			   struct dcr_blake3_part *p, struct dcr_err *e);

#endif
