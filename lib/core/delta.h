/* delta.h - the delta stream (see dcr-format-delta(5)).
 *
 *   stream  = header record* END trailer
 *   header  = magic[8] le32 version le32 flags base_id[32] attempt[16]
 *   record  = le32 type le32 flags le64 length body[length]
 *   trailer = BLAKE3 of every byte before it (version 2; version 1, whose
 *             tensor digests and state ids were SHA-256, is refused)
 */
#ifndef DCR_DELTA_H
#define DCR_DELTA_H

#include "core/blake3.h"
#include "core/buf.h"
#include "core/safetensors.h"
#include "core/digest.h"
#include "core/item.h"

#define DCR_DELTA_MAGIC "\x89" "DCRD\r\n\x1a"
#define DCR_DELTA_VERSION 2
#define DCR_DELTA_HDR_LEN (8 + 4 + 4 + 32 + 16)
#define DCR_REC_HDR_LEN 16
#define DCR_REC_MAX (64u << 20)     /* largest record body accepted (an item
				      of DCR_ITEM_MAX_ELEMS 8-byte units fits) */
/* TENSOR and REMOVE records in one delta (and tensors and removed names
 * in one manifest), together, at most: every reader keeps each in memory,
 * a few hundred bytes apiece, so a stream of small records naming
 * millions would grow it without bound. Seven times the tensors of the
 * largest mixture-of-experts checkpoints published (with their scales). */
#define DCR_DELTA_TENSORS_MAX (1u << 20)
/* ...and their record bodies (names, files, shapes) together at most this
 * many bytes: each name may be 65,535 bytes long, and 2^20 of the longest
 * were 128 GiB kept. 256 bytes a tensor at the most tensors. */
#define DCR_DELTA_NAMES_BYTES ((uint64_t)256 << 20)
/* Take n more bytes of names into *used: 0, or -1 (*used as it was) when
 * they would go past DCR_DELTA_NAMES_BYTES. Every reader and writer that
 * keeps names counts them so. */
static inline int dcr_delta_names_take(uint64_t *used, uint64_t n)
{
	if (n > DCR_DELTA_NAMES_BYTES - *used)
		return -1;
	*used += n;
	return 0;
}

enum dcr_rec_type {
	DCR_REC_TENSOR = 1, /* a target tensor's name, file, dtype, shape */
	DCR_REC_ITEM = 2,   /* changes in an element range of a tensor */
	DCR_REC_REMOVE = 3, /* a base tensor absent from the target */
	DCR_REC_DONE = 4,   /* a target tensor's digest, after its items */
	DCR_REC_END = 5,    /* target state id and counts */
	DCR_REC_JRENAME = 0x20, /* journal only: rename .dcr/stage/F to F */
	DCR_REC_JUNLINK = 0x21, /* journal only: remove F */
	DCR_REC_ANCILLARY = 0x1000, /* types at or above may be skipped */
	DCR_REC_BASES = 0x1001, /* alternative base state ids (overwrite-only deltas) */
	DCR_REC_PARTS = 0x1002, /* a partial delta's digest parts of a tensor */
	DCR_REC_CANON = 0x1003, /* a partial delta's whole canonical tensor set */
};

enum { DCR_TENSOR_NEW = 1 }; /* TENSOR flag: not XOR-able from base */
/* Header flag, must be understood: a PARTIAL delta (one training rank's, or
 * a merge without target digests) carries changes in canonical coordinates
 * but no DONE records and a zero END target id; its base id may be zero.
 * Only readers that ask for it (dcr_delta_reader_init_flags) accept it. */
enum { DCR_DELTA_PARTIAL = 1 };
/* Header flag, must be understood: a DENSE delta (a dense copy) holds every
 * target tensor whole, as OVERWRITE items of NEW tensors, and fits a
 * receiver in any state; its base id is zero. Readers accept it only when
 * they ask for it. */
enum { DCR_DELTA_DENSE = 2 };

struct dcr_delta_tensor {
	char *name;
	char *file;
	uint32_t flags;
	int dtype;
	unsigned ndim;
	uint64_t shape[DCR_MAX_NDIM];
	uint64_t nelem;
	int have_digest;
	dcr_digest digest;
};

/* The units (core/dtype.h: dcr_dtype_unit bytes each) of t's stored bytes,
 * in which its items' ranges count. */
uint64_t dcr_delta_tensor_units(const struct dcr_delta_tensor *t);

/* A delta's attempt id: `given` (16 bytes) when non-NULL, else random. */
int dcr_attempt_id(const uint8_t *given, uint8_t out[16], struct dcr_err *e);

/* An output: the delta writer hashes and forwards every byte. */
struct dcr_sink {
	int (*write)(void *ctx, const void *p, size_t n);
	void *ctx;
};
int dcr_sink_fd_write(void *ctx, const void *p, size_t n); /* ctx: int* fd */

struct dcr_delta_writer {
	struct dcr_sink sink;
	struct dcr_blake3 *sum; /* of every byte: the trailer */
	struct dcr_buf rec;
	struct dcr_buf frame; /* small records waiting to go in one write */
	uint32_t ntensors, nremoved;
	uint64_t name_bytes; /* of their bodies */
	uint64_t nitems, nchanges, bytes;
	const char *what; /* for messages */
};
int dcr_delta_writer_init(struct dcr_delta_writer *w, struct dcr_sink sink,
			  const dcr_digest *base, const uint8_t attempt[16],
			  const char *what, struct dcr_err *e);
/* The same, with header flags (DCR_DELTA_PARTIAL). */
int dcr_delta_writer_init_flags(struct dcr_delta_writer *w, struct dcr_sink sink,
				const dcr_digest *base, const uint8_t attempt[16],
				uint32_t flags, const char *what, struct dcr_err *e);
/* Append a TENSOR record body (no framing). */
int dcr_delta_tensor_body(struct dcr_buf *b, const struct dcr_delta_tensor *t);
int dcr_delta_write_tensor(struct dcr_delta_writer *w, const struct dcr_delta_tensor *t,
			   struct dcr_err *e);
int dcr_delta_write_item(struct dcr_delta_writer *w, const struct dcr_item *it,
			 struct dcr_err *e);
int dcr_delta_write_remove(struct dcr_delta_writer *w, const char *name, struct dcr_err *e);
/* Append a framed ITEM record to b (for writers that prepare records off
 * the output thread), then pass such records through dcr_delta_write_raw. */
int dcr_delta_item_record(struct dcr_buf *b, const struct dcr_item *it);
int dcr_delta_write_raw(struct dcr_delta_writer *w, const uint8_t *p, size_t len,
			uint64_t nitems, uint64_t nchanges, struct dcr_err *e);
/* A record whose body is one name (REMOVE, JRENAME, JUNLINK). */
int dcr_delta_write_name(struct dcr_delta_writer *w, uint32_t type, const char *name,
			 struct dcr_err *e);
int dcr_delta_write_done(struct dcr_delta_writer *w, uint32_t tensor,
			 const dcr_digest *d, struct dcr_err *e);
int dcr_delta_write_end(struct dcr_delta_writer *w, const dcr_digest *target,
			struct dcr_err *e);
void dcr_delta_writer_release(struct dcr_delta_writer *w);

/* A source: read exactly n bytes, or fail. */
struct dcr_source {
	int (*read)(void *ctx, void *p, size_t n); /* 0, -EPIPE at EOF, -errno */
	void *ctx;
};
int dcr_source_fd_read(void *ctx, void *p, size_t n); /* ctx: int* fd */

/* A source reading an fd through a buffer: a delta's records are small,
 * and a read() each cost a system call (about 7,000 in dcr-apply of a
 * 1 GB step: the delta staged, read again, and the journal read twice).
 * The fd's offset runs ahead of what was consumed (up to cap bytes): only
 * for an fd nothing else reads after the source. */
struct dcr_fdbuf {
	int fd;
	uint8_t *p;
	size_t cap, at, len; /* p[at..len) read and not yet consumed */
};
#define DCR_FDBUF_SIZE (256u << 10)
/* 0, or -ENOMEM; release with dcr_fdbuf_release (also after a failure). */
int dcr_fdbuf_init(struct dcr_fdbuf *b, int fd, size_t cap);
void dcr_fdbuf_release(struct dcr_fdbuf *b);
/* Read again from the start of the fd: 0 or -errno. */
int dcr_fdbuf_rewind(struct dcr_fdbuf *b);
int dcr_source_fdbuf_read(void *ctx, void *p, size_t n); /* ctx: struct dcr_fdbuf * */

struct dcr_delta_rec {
	uint32_t type, flags;
	uint64_t len;
	const uint8_t *body; /* valid until the next call */
};
/* TENSOR and REMOVE records so far, and their bodies' bytes. */
struct dcr_delta_names {
	uint64_t n, bytes;
};
/* Count rec in *c when it is a TENSOR or REMOVE record (from its header:
 * before its body is read): DCR_EFORMAT past DCR_DELTA_TENSORS_MAX records
 * or DCR_DELTA_NAMES_BYTES bytes (what names the stream), else 0. */
int dcr_delta_count_names(const struct dcr_delta_rec *rec, struct dcr_delta_names *c,
			  const char *what, struct dcr_err *e);

struct dcr_delta_reader {
	struct dcr_source src;
	struct dcr_blake3 *sum;
	struct dcr_buf body;
	const char *what;
	uint32_t version, flags;
	dcr_digest base;
	uint8_t attempt[16];
	int ended;
	dcr_digest target; /* from END */
	uint64_t end_tensors, end_items, end_changes;
	uint64_t offset;   /* bytes consumed */
	int journal;       /* accept journal-only records */
	struct dcr_delta_names names; /* TENSOR and REMOVE records so far */
};
/* Read a delta's header from src. A reader that failed to start holds
 * nothing (releasing it too is harmless); one that started is released
 * with dcr_delta_reader_release. */
int dcr_delta_reader_init(struct dcr_delta_reader *r, struct dcr_source src,
			  const char *what, struct dcr_err *e);
/* Initialise from a header already read (its 16 magic+version+flags bytes
 * consumed by a sniffer); `head` holds those bytes. */
int dcr_delta_reader_init_with(struct dcr_delta_reader *r, struct dcr_source src,
			       const uint8_t *head, size_t head_len, const char *what,
			       struct dcr_err *e);
/* The same, also accepting the header flags in `accept` (DCR_DELTA_PARTIAL);
 * the others refuse a partial delta with a message that says what it is. */
int dcr_delta_reader_init_flags(struct dcr_delta_reader *r, struct dcr_source src,
				const uint8_t *head, size_t head_len, uint32_t accept,
				const char *what, struct dcr_err *e);
/* Read the first bytes of input fd into head (DCR_DELTA_SNIFF of room) to
 * tell a delta stream from anything else (a tar pack, to be opened with
 * head[0..*got)): 1 a delta (the first five bytes of its magic, so that a
 * damaged rest is the reader's to report), 0 not, or an error naming what;
 * *got is 0 at an empty input. */
#define DCR_DELTA_SNIFF 8
int dcr_delta_sniff(int fd, uint8_t *head, size_t *got, const char *what, struct dcr_err *e);
/* 1 and a record, 0 after END and a verified trailer, or an error. */
int dcr_delta_next(struct dcr_delta_reader *r, struct dcr_delta_rec *rec, struct dcr_err *e);
/* After dcr_delta_next returned 0: END's counts against the TENSOR and
 * ITEM records the caller saw and the changes its items declared (their
 * n); DCR_EFORMAT if they differ. */
int dcr_delta_check_end(const struct dcr_delta_reader *r, uint64_t tensors, uint64_t items,
			uint64_t changes, struct dcr_err *e);
void dcr_delta_reader_release(struct dcr_delta_reader *r);

/* Record body parsers (hostile-input safe). */
int dcr_delta_parse_tensor(const struct dcr_delta_rec *rec, struct dcr_delta_tensor *t,
			   struct dcr_err *e);
void dcr_delta_tensor_clear(struct dcr_delta_tensor *t);
int dcr_delta_parse_item(const struct dcr_delta_rec *rec, struct dcr_item *it,
			 struct dcr_err *e);
/* The ITEM record body of len bytes at off in fd (a spool, a journal, a
 * resolved delta: a file dcr wrote earlier) read into body and parsed into
 * *it, whose data points into body. A short read is EIO "cannot read back
 * <what>". */
int dcr_delta_item_at(int fd, uint64_t off, uint64_t len, struct dcr_buf *body,
		      struct dcr_item *it, const char *what, struct dcr_err *e);
/* A payload's TENSOR records, in order: its items name their tensor by
 * its place here. */
struct dcr_tensor_table {
	struct dcr_delta_tensor *v;
	size_t n, cap;
};
/* TENSOR record rec parsed onto the end of tt (whose v may move). */
int dcr_tensor_table_add(struct dcr_tensor_table *tt, const struct dcr_delta_rec *rec,
			 const char *what, struct dcr_err *e);
/* ITEM record rec parsed into *it, its tensor (*t) one that tt declared. */
int dcr_tensor_table_item(const struct dcr_tensor_table *tt, const struct dcr_delta_rec *rec,
			  const char *what, struct dcr_item *it, const struct dcr_delta_tensor **t,
			  struct dcr_err *e);
void dcr_tensor_table_clear(struct dcr_tensor_table *tt);
int dcr_delta_parse_name(const struct dcr_delta_rec *rec, char **name, struct dcr_err *e);
/* BASES: varint count, count x state id[32]. *v is malloc'd. */
int dcr_delta_write_bases(struct dcr_delta_writer *w, const dcr_digest *v, size_t n,
			  struct dcr_err *e);
int dcr_delta_parse_bases(const struct dcr_delta_rec *rec, dcr_digest **v, size_t *n,
			  struct dcr_err *e);
int dcr_delta_parse_done(const struct dcr_delta_rec *rec, uint32_t *tensor, dcr_digest *d,
			 struct dcr_err *e);
/* PARTS: varint tensor, varint count, count x digest part (core/blake3.h,
 * dcr_blake3_part_encode): the parts of the tensor's stripe stream that a
 * training rank is responsible for. Parsed parts are added to *v (n of
 * them, cap allocated: a struct dcr_parts of core/state.h). */
/* CANON: le32 count, set id[32]: the canonical tensors of the whole
 * layout (every rank's), of which a partial delta declares its own
 * (dcr_tensor_set_id, core/summary.h). */
int dcr_delta_write_canon(struct dcr_delta_writer *w, uint32_t n, const dcr_digest *id,
			  struct dcr_err *e);
int dcr_delta_parse_canon(const struct dcr_delta_rec *rec, uint32_t *n, dcr_digest *id,
			  struct dcr_err *e);
int dcr_delta_write_parts(struct dcr_delta_writer *w, uint32_t tensor,
			  const struct dcr_blake3_part *v, size_t n, struct dcr_err *e);
int dcr_delta_parse_parts(const struct dcr_delta_rec *rec, uint32_t *tensor,
			  struct dcr_blake3_part **v, size_t *n, size_t *cap, struct dcr_err *e);

#endif
