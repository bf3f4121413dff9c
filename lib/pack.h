/* pack.h - packs: payloads and a manifest (see dcr-format-pack(5)).
 *
 * payload  = header body trailer
 *   header = magic[8] "\x89DCRP\r\n\x1a", le32 version, le32 flags,
 *            base_id[32], attempt[16], le32 index, le32 codec,
 *            le64 raw_len, le64 body_len                      (96 bytes)
 *   body   = codec 1: one zstd frame of raw_len bytes of delta records
 *            (TENSOR, ITEM, REMOVE); item tensor numbers refer to the
 *            TENSOR records of the same payload
 *   trailer= SHA-256 of header and body
 * manifest = magic[8] "\x89DCRM\r\n\x1a", le32 version, le32 flags,
 *            base_id[32], target_id[32], attempt[16],
 *            le32 npayloads, npayloads x (le64 size, digest[32]),
 *            le32 ntensors, ntensors x (TENSOR body as a varint-length
 *            string, digest[32]), le32 nremoved, nremoved x name,
 *            le64 nitems, le64 nchanges,
 *            [flags & 1: le32 nalt, nalt x alternative base id[32]]
 *            trailer SHA-256 of all before.
 *   Manifest flag 1 (DCR_MANIFEST_BASES): the delta is overwrite-only and
 *   also applies to receivers at the alternative bases (see
 *   dcr-format-delta(5), BASES); readers that do not know it refuse.
 * Entry names: payload-NNNNNN.dcrp (index in decimal, 6+ digits), manifest.dcrm.
 */
#ifndef DCR_PACK_H
#define DCR_PACK_H

#include "delta.h"

#define DCR_PAYLOAD_MAGIC "\x89" "DCRP\r\n\x1a"
#define DCR_MANIFEST_MAGIC "\x89" "DCRM\r\n\x1a"
#define DCR_PACK_VERSION 1
#define DCR_PAYLOAD_HDR_LEN 96
#define DCR_PAYLOAD_MAX_RAW (1ull << 32) /* 4 GiB decompressed at most */
#define DCR_PAYLOAD_MAX_FILE (1ull << 33) /* a sanity bound on sizes manifests list */
#define DCR_MANIFEST_NAME "manifest.dcrm"
#define DCR_MANIFEST_MAX (1u << 30)
#define DCR_DEFAULT_PAYLOAD_SIZE (64u << 20)

enum { DCR_PAYLOAD_STORED = 0, DCR_PAYLOAD_ZSTD = 1 };
/* payload header flags: bit 0 says the trailer is BLAKE3, not SHA-256 */
#define DCR_PAYLOAD_BLAKE3 1u
enum dcr_payload_digest_alg { DCR_PDIGEST_BLAKE3 = 0, DCR_PDIGEST_SHA256 = 1 };

struct dcr_payload {
	uint32_t version, flags, index, codec;
	dcr_digest base;
	uint8_t attempt[16];
	uint64_t raw_len, body_len;
	dcr_digest digest;  /* of the whole payload file but the trailer (BLAKE3 or SHA-256) */
	uint8_t *raw;       /* decompressed records (malloc'd), raw_len bytes */
};

/* Check a payload image (magic, version, sizes, trailer) and decompress its
 * body. `what` names it in messages. */
int dcr_payload_open(const uint8_t *buf, size_t len, const char *what,
		     struct dcr_payload *p, struct dcr_err *e);
/* The same checks without decompressing (p->raw stays NULL): magic,
 * version, flags, sizes, trailer, codec and the zstd frame's stated size.
 * For movers (dcr-push, dcr-pull) that pass the bytes on unchanged;
 * dcr-apply opens each payload in full. */
int dcr_payload_check(const uint8_t *buf, size_t len, const char *what,
		      struct dcr_payload *p, struct dcr_err *e);
/* The same with the SHA-256 of buf's first len - 32 bytes already known. */
int dcr_payload_check_digest(const uint8_t *buf, size_t len, const char *what,
			     const dcr_digest *sum, struct dcr_payload *p, struct dcr_err *e);
/* The checks of the header alone, from the first avail bytes of a payload
 * of len bytes (its digest checked some other way): as above but the
 * trailer, and the zstd frame's size only when avail holds it. */
int dcr_payload_check_head(const uint8_t *buf, size_t avail, uint64_t len, const char *what,
			   struct dcr_payload *p, struct dcr_err *e);
void dcr_payload_release(struct dcr_payload *p);
/* Build a payload image from raw records, its trailer by alg; with
 * BLAKE3 and pieces, the CVs of its 2^DCR_PIECE_LOG2-byte pieces are
 * appended to pieces (SHA-256 payloads have none). */
int dcr_payload_build(const dcr_digest *base, const uint8_t attempt[16], uint32_t index,
		      const uint8_t *raw, size_t raw_len, enum dcr_payload_digest_alg alg,
		      struct dcr_buf *out, dcr_digest *digest, struct dcr_buf *pieces,
		      struct dcr_err *e);
/* A payload's digest: BLAKE3 or SHA-256 of its first len bytes (all but
 * the trailer), as the header's flags say. Hostile bytes are fine: too
 * short a header or unknown flags give some digest, and the checks that
 * follow reject the payload. */
void dcr_payload_digest(const uint8_t *buf, size_t len, dcr_digest *out);
/* The same over bytes as they arrive: init, update (a dcr_hasher
 * function), final. final returns -1 only when memory ran out. */
struct dcr_payload_hash {
	uint8_t head[16];
	size_t nhead;
	int alg; /* -1 until 16 bytes are in */
	int bad;
	struct dcr_sha *sha;
	struct dcr_blake3 b3;
};
void dcr_payload_hash_init(struct dcr_payload_hash *h);
void dcr_payload_hash_update(void *h, const void *p, size_t n);
int dcr_payload_hash_final(struct dcr_payload_hash *h, dcr_digest *out);
char *dcr_payload_name(uint32_t index);
/* 1 if name is a payload entry name (index in *index), else 0. */
int dcr_payload_name_parse(const char *name, uint32_t *index);

struct dcr_manifest_tensor {
	struct dcr_delta_tensor t; /* digest filled */
};

struct dcr_manifest {
	dcr_digest base, target;
	uint8_t attempt[16];
	uint32_t npayloads;
	uint64_t *psize;
	dcr_digest *pdigest;
	uint32_t ntensors;
	struct dcr_delta_tensor *tensors; /* sorted by name, digests set */
	uint32_t nremoved;
	char **removed;
	uint64_t nitems, nchanges;
	uint32_t nalt;     /* alternative bases (manifest flag 1) */
	int dense;         /* a dense copy (manifest flag 2): fits any receiver */
	dcr_digest *alt;
	/* manifest flag 4: the BLAKE3 CVs of every payload's pieces (see
	 * dcr_blake3_pieces), so that a receiver can check a payload piece by
	 * piece as it arrives; payload i's are pieces[piece0[i] ...] */
	unsigned piece_log2;
	uint8_t (*pieces)[32];
	size_t *piece0;
	size_t npieces;
};
enum { DCR_MANIFEST_BASES = 1, DCR_MANIFEST_DENSE = 2, DCR_MANIFEST_PIECES = 4 };
#define DCR_PIECE_LOG2 20 /* 1 MiB pieces */
/* Pieces of payload i (covering all but its trailer). */
static inline size_t dcr_manifest_npieces(const struct dcr_manifest *m, uint32_t i)
{
	return dcr_blake3_npieces(m->psize[i] - 32, m->piece_log2);
}

int dcr_manifest_build(const struct dcr_manifest *m, struct dcr_buf *out, struct dcr_err *e);
int dcr_manifest_parse(const uint8_t *buf, size_t len, const char *what, struct dcr_manifest *m,
		       struct dcr_err *e);
void dcr_manifest_release(struct dcr_manifest *m);

/* Where a packer puts finished entries, in order; manifest last. */
struct dcr_pack_out {
	int (*entry)(void *ctx, const char *name, const uint8_t *buf, size_t len,
		     struct dcr_err *e);
	void *ctx;
	/* optional: an entry in parts, its size given first (tar streams):
	 * dcr-pull passes payloads on piece by piece as they check out */
	int (*begin)(void *ctx, const char *name, uint64_t len, struct dcr_err *e);
	int (*data)(void *ctx, const uint8_t *buf, size_t len, struct dcr_err *e);
	int (*end)(void *ctx, struct dcr_err *e);
	/* optional, for directories: write and fsync an entry from any thread
	 * (stage), then make the staged entries visible in order (commit), or
	 * drop them: dcr-pull -o DIR flushes several payloads at once */
	int (*stage)(void *ctx, const char *name, const uint8_t *buf, size_t len, void **tok,
		     struct dcr_err *e);
	int (*commit)(void *ctx, void *tok, struct dcr_err *e);
	void (*drop)(void *ctx, void *tok);
};

struct dcr_pack_opts {
	uint64_t payload_size; /* raw bytes per payload (default 64 MiB) */
	enum dcr_payload_digest_alg digest; /* payload trailers (default BLAKE3) */
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
};

struct dcr_pack_stats {
	uint32_t npayloads;
	uint64_t bytes, items, changes;
	dcr_digest base, target;
};

/* Read one delta stream and write a pack. */
int dcr_pack(struct dcr_source src, const char *what, const struct dcr_pack_opts *o,
	     struct dcr_pack_out out, struct dcr_pack_stats *st, struct dcr_err *e);

/* Pack outputs: a directory (each entry written atomically), or a tar
 * stream on an fd (libarchive, ustar). */
struct dcr_pack_dir;
int dcr_pack_dir_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
		       struct dcr_err *e); /* ctx: const char *dir */
int dcr_pack_dir_stage(void *ctx, const char *name, const uint8_t *buf, size_t len, void **tok,
		       struct dcr_err *e);
int dcr_pack_dir_commit(void *ctx, void *tok, struct dcr_err *e);
void dcr_pack_dir_drop(void *ctx, void *tok);
struct dcr_tar_out;
int dcr_tar_out_open(int fd, struct dcr_tar_out **out, struct dcr_err *e);
int dcr_tar_out_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
		      struct dcr_err *e);
int dcr_tar_out_begin(void *ctx, const char *name, uint64_t len, struct dcr_err *e);
int dcr_tar_out_data(void *ctx, const uint8_t *buf, size_t len, struct dcr_err *e);
int dcr_tar_out_end(void *ctx, struct dcr_err *e);
int dcr_tar_out_close(struct dcr_tar_out *t, struct dcr_err *e);

/* Reading a pack: a directory or a tar stream; entries in stream order. */
struct dcr_pack_in;
int dcr_pack_in_open_dir(const char *dir, struct dcr_pack_in **out, struct dcr_err *e);
/* A tar stream from fd; head (may be NULL) holds bytes already read from it. */
int dcr_pack_in_open_tar(int fd, const uint8_t *head, size_t head_len, struct dcr_pack_in **out,
			 struct dcr_err *e);
/* 1 and the next entry (name and bytes valid until the next call), 0 at the end. */
int dcr_pack_in_next(struct dcr_pack_in *in, const char **name, const uint8_t **buf,
		     size_t *len, struct dcr_err *e);
/* Take the bytes of the entry dcr_pack_in_next returned last: they stay
 * valid, at the same address, until dcr_blob_free(b). */
void dcr_pack_in_take(struct dcr_pack_in *in, struct dcr_blob *b);
void dcr_pack_in_close(struct dcr_pack_in *in);

#endif
