/* util.h - internal helpers: byte order, varints, files, memory. */
#ifndef DCR_UTIL_H
#define DCR_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "dcr.h"

static inline void put_le16(uint8_t *p, uint16_t v) { p[0] = v; p[1] = v >> 8; }
static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}
static inline uint64_t get_le64(const uint8_t *p)
{
	return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

/* Load/store one element of `unit` bytes (1, 2, 4 or 8) as an integer. */
static inline uint64_t load_unit(const uint8_t *p, unsigned unit)
{
	switch (unit) {
	case 1: return p[0];
	case 2: return get_le16(p);
	case 4: return get_le32(p);
	default: return get_le64(p);
	}
}
static inline void store_unit(uint8_t *p, unsigned unit, uint64_t v)
{
	switch (unit) {
	case 1: p[0] = (uint8_t)v; break;
	case 2: put_le16(p, (uint16_t)v); break;
	case 4: put_le32(p, (uint32_t)v); break;
	default: put_le64(p, v); break;
	}
}

/* A growable byte buffer. */
struct dcr_buf {
	uint8_t *p;
	size_t len, cap;
};
int dcr_buf_reserve(struct dcr_buf *b, size_t extra);
int dcr_buf_add(struct dcr_buf *b, const void *p, size_t n);
int dcr_buf_add_u8(struct dcr_buf *b, uint8_t v);
int dcr_buf_add_le32(struct dcr_buf *b, uint32_t v);
int dcr_buf_add_le64(struct dcr_buf *b, uint64_t v);
int dcr_buf_add_varint(struct dcr_buf *b, uint64_t v);
void dcr_buf_free(struct dcr_buf *b);

/* A bounds-checked reader over a byte range. Every get fails once past end
 * and leaves r->bad set; callers check r->bad once per record. */
struct dcr_rd {
	const uint8_t *p, *end;
	int bad;
};
static inline void dcr_rd_init(struct dcr_rd *r, const void *p, size_t n)
{
	r->p = p;
	r->end = r->p + n;
	r->bad = 0;
}
static inline size_t dcr_rd_left(const struct dcr_rd *r) { return (size_t)(r->end - r->p); }
const uint8_t *dcr_rd_bytes(struct dcr_rd *r, size_t n);
uint8_t dcr_rd_u8(struct dcr_rd *r);
uint32_t dcr_rd_le32(struct dcr_rd *r);
uint64_t dcr_rd_le64(struct dcr_rd *r);
uint64_t dcr_rd_varint(struct dcr_rd *r);

/* Files. */
int dcr_read_full(int fd, void *buf, size_t n); /* 0, -errno, or -EPIPE at EOF */
int dcr_write_full(int fd, const void *buf, size_t n);
int dcr_pread_full(int fd, void *buf, size_t n, uint64_t off);
int dcr_pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
int dcr_fsync_dir(const char *dir);
/* fsync the directory holding path (after a rename, link or unlink in it). */
int dcr_fsync_parent(const char *path, struct dcr_err *e);
int dcr_mkdir_p(const char *path, struct dcr_err *e);
char *dcr_path_join(const char *a, const char *b);
char *dcr_dirname(const char *path);

/* Atomic file creation: a temp file beside the final name, fsync, rename,
 * fsync the directory. */
struct dcr_atomic {
	char *final;
	char *tmp;
	int fd;
};
int dcr_atomic_open(struct dcr_atomic *a, const char *final, struct dcr_err *e);
int dcr_atomic_commit(struct dcr_atomic *a, struct dcr_err *e);
/* The first half of commit: fsync and close the temporary file (any
 * thread, ahead of an ordered commit). */
int dcr_atomic_sync(struct dcr_atomic *a, struct dcr_err *e);
void dcr_atomic_abort(struct dcr_atomic *a);
/* Write a whole small file atomically. */
int dcr_write_file_atomic(const char *path, const void *buf, size_t n,
			  struct dcr_err *e);
/* Read a whole file (at most max bytes) into malloc'd memory, NUL added. */
int dcr_read_file(const char *path, size_t max, uint8_t **out, size_t *len,
		  struct dcr_err *e);

/* Fault in n bytes at p about to be written, in one call and with huge
 * pages where the kernel allows: touching fresh memory page by page costs
 * more than the copy into it (measured: 192 MB in 200 ms one 4 KiB fault
 * at a time, 25 ms this way). Best effort: nothing happens where it is not
 * supported; small ranges are left alone. */
void dcr_prefault(void *p, size_t n);

/* Bytes that travel with their owner: a read-only mapping of a file, or a
 * heap buffer (map == NULL). dcr_blob_free releases either and zeroes b. */
struct dcr_blob {
	uint8_t *p;
	size_t len;
	void *map;
	size_t map_len;
	size_t cap;	/* heap: bytes allocated at p, for reuse */
};
/* Map PATH (a regular file of at most MAX bytes) into b, pages populated:
 * no copy, no page faults one by one. An empty file gets a heap byte. */
int dcr_blob_map(struct dcr_blob *b, const char *path, size_t max, struct dcr_err *e);
int dcr_blob_map_fd(struct dcr_blob *b, int fd, const char *path, size_t max,
		    struct dcr_err *e);
void dcr_blob_free(struct dcr_blob *b);

/* Does a stored checksum differ from the computed one? Fuzzing builds
 * (libFuzzer's FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, scripts/fuzz) say
 * no, so that random inputs reach the parsers behind the checksums; no
 * normal build defines it. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define DCR_CHECKSUM_DIFFERS(computed, stored) ((void)(computed), (void)(stored), 0)
#else
#define DCR_CHECKSUM_DIFFERS(computed, stored) (memcmp((computed), (stored), 32) != 0)
#endif

/* SHA-256, one shot and streaming (OpenSSL EVP underneath). */
void dcr_sha256(const void *p, size_t n, dcr_digest *out);
struct dcr_sha;
struct dcr_sha *dcr_sha_new(void);
void dcr_sha_update(struct dcr_sha *s, const void *p, size_t n);
void dcr_sha_final(struct dcr_sha *s, dcr_digest *out); /* resets s */
void dcr_sha_free(struct dcr_sha *s);

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

/* A streaming digest, fed bytes in order as they arrive. */
struct dcr_hasher {
	void (*update)(void *ctx, const void *p, size_t n);
	void *ctx;
};

int dcr_ncpu(void); /* online CPUs, 1..64 */

/* Memory: abort-free; callers handle NULL. */
void *dcr_calloc(size_t n, size_t size);
char *dcr_strdup(const char *s);
char *dcr_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Checked arithmetic. */
static inline int mul_ovf(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_mul_overflow(a, b, r);
}
static inline int add_ovf(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_add_overflow(a, b, r);
}

#endif
