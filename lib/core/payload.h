/* payload.h - payloads, the unit of transport, retry and apply (see
 * dcr-format-pack(5)).
 *
 * payload  = header body trailer
 *   header = magic[8] "\x89DCRP\r\n\x1a", le32 version, le32 flags,
 *            base_id[32], attempt[16], le32 index, le32 codec,
 *            le64 raw_len, le64 body_len, le64 reserved 0     (96 bytes)
 *   body   = codec 1: one zstd frame of raw_len bytes of delta records
 *            (TENSOR, ITEM, REMOVE); item tensor numbers refer to the
 *            TENSOR records of the same payload
 *   trailer= digest of header and body: BLAKE3 with flag 1
 *            (DCR_PAYLOAD_BLAKE3), else SHA-256
 * Entry names: payload-NNNNNN.dcrp (index in decimal, 6+ digits).
 */
#ifndef DCR_CORE_PAYLOAD_H
#define DCR_CORE_PAYLOAD_H

#include "core/blake3.h"
#include "core/buf.h"
#include "core/delta.h"
#include "core/digest.h"
#include "core/error.h"

#define DCR_PAYLOAD_MAGIC "\x89" "DCRP\r\n\x1a"
/* of payloads and manifests: 2 since tensor digests and state ids are
 * BLAKE3 (version 1, SHA-256, is refused) */
#define DCR_PACK_VERSION 2
#define DCR_PAYLOAD_HDR_LEN 96
#define DCR_PAYLOAD_MAX_RAW (1ull << 32) /* 4 GiB decompressed at most */
#define DCR_PAYLOAD_MAX_FILE (1ull << 33) /* a sanity bound on sizes manifests list */
#define DCR_DEFAULT_PAYLOAD_SIZE (64u << 20)
/* raw bytes a payload holds at least to be closed by a linger (pack.h) */
#define DCR_LINGER_MIN_RAW (1u << 20)
#define DCR_PIECE_LOG2 20 /* payloads are checked in 1 MiB pieces */
#define DCR_PAYLOADS_MAX (1u << 24) /* payloads in one pack, indices 0 .. 2^24 - 1 */

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
};

/* Check a payload image without decompressing it: magic, version, flags,
 * sizes, trailer, codec and the zstd frame's stated size. `what` names it
 * in messages. Movers (dcr-push, dcr-pull) pass the bytes on unchanged;
 * dcr-apply then reads the records with dcr_payload_records_open. */
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
/* Nothing to free since payloads are read a record at a time; kept for
 * callers that pair it with dcr_payload_check. */
void dcr_payload_release(struct dcr_payload *p);

/* A checked payload's records, one at a time: the body is decompressed in
 * bounded windows (zstd's window at most 2^DCR_PAYLOAD_WINDOW_LOG bytes)
 * and each record's body is read into a buffer that grows as its bytes
 * arrive, so memory is bounded by the largest record (DCR_REC_MAX), not by
 * the raw size a header declares. */
#define DCR_PAYLOAD_WINDOW_LOG 24
struct dcr_delta_rec;
struct dcr_payload_records {
	const uint8_t *body;	/* the compressed body, body_len bytes */
	size_t body_len, in_pos;
	uint64_t raw_len, raw_done;
	uint32_t codec;
	void *zs;		/* ZSTD_DStream */
	uint8_t *win;		/* decompressed bytes not yet taken */
	size_t win_len, win_pos, win_cap;
	int frame_done;
	struct dcr_buf rec;	/* the current record's body */
	const char *what;
	struct dcr_delta_names names; /* TENSOR and REMOVE records so far */
};
/* Start reading the records of payload image buf (len bytes) that
 * dcr_payload_check (or _check_digest) accepted into p. */
int dcr_payload_records_open(struct dcr_payload_records *it, const uint8_t *buf, size_t len,
			     const struct dcr_payload *p, const char *what, struct dcr_err *e);
/* 1 and the next record (its body valid until the next call), 0 once the
 * body has ended exactly at its stated raw size, or DCR_EFORMAT when the
 * framing is malformed (a record header cut short, a record longer than
 * DCR_REC_MAX or than the bytes left, unknown record flags, a body that
 * decompresses to more or less than raw_len). */
int dcr_payload_records_next(struct dcr_payload_records *it, struct dcr_delta_rec *rec,
			     struct dcr_err *e);
void dcr_payload_records_close(struct dcr_payload_records *it);

/* What a payload's records hold, for listings (dcr-pack --list). */
struct dcr_payload_summary {
	uint64_t tensors; /* TENSOR records */
	uint64_t items;   /* ITEM records */
	uint64_t changes; /* values the items change */
	uint64_t removed; /* REMOVE records */
};
/* Walk the records of payload image buf (checked into p) with the
 * iterator: DCR_EFORMAT when their framing or an item is malformed. */
int dcr_payload_summary(const uint8_t *buf, size_t len, const struct dcr_payload *p,
			const char *what, struct dcr_payload_summary *s, struct dcr_err *e);
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

#endif
