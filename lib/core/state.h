/* state.h - tensor digests and state ids: what names a checkpoint's content.
 * Two checkpoints with the same state id are bit-identical.
 *
 * A tensor's digest is BLAKE3 of its stripe stream (dcr-format-delta(5),
 * TENSOR DIGESTS): its stored bytes, viewed as a matrix of R rows and C
 * columns, cut into segments of 128 elements per row; stripe j is segment
 * j of every row in row order, and the stream is the stripes in order.
 * BLAKE3's tree lets many threads (or a GPU) hash one tensor, and lets
 * ranks that each hold a slice contribute digest parts that join. */
#ifndef DCR_CORE_STATE_H
#define DCR_CORE_STATE_H

#include "core/blake3.h"
#include "core/checkpoint.h"
#include "core/digest.h"

#define DCR_STATE_MAGIC "dcr-state-v2\n"
#define DCR_STRIPE_ELEMS 128

/* The stripe stream of a tensor: the one definition that every digest
 * (CPU or GPU) follows. Sub-byte dtypes (F4, F6_*) are not striped: their
 * stream is the stored bytes, one "row" of nbytes one-byte columns. */
struct dcr_stripes {
	uint64_t rows, cols; /* R and C, in elements (bytes when esize is 0) */
	uint64_t nbytes;     /* the stream's length: the tensor's stored bytes */
	uint64_t pitch;      /* bytes per row */
	uint64_t seg;        /* bytes of a full segment (the pitch with one stripe) */
	uint64_t nstripes;   /* at least 1; the last may be narrower */
	unsigned esize;      /* bytes per element, 0 when not striped */
};
void dcr_stripes_init(struct dcr_stripes *s, int dtype, unsigned ndim, const uint64_t *shape);
/* Bytes per row of stripe j, and the stream offset where it starts. */
uint64_t dcr_stripes_width(const struct dcr_stripes *s, uint64_t j);
uint64_t dcr_stripes_start(const struct dcr_stripes *s, uint64_t j);
/* The stored byte that stream byte off is, and in *run how many stream
 * bytes from there on are contiguous in the stored bytes too. */
uint64_t dcr_stripes_map(const struct dcr_stripes *s, uint64_t off, uint64_t *run);
/* Stream bytes [off, off + n) from the tensor's stored bytes. */
void dcr_stripes_gather(const struct dcr_stripes *s, const uint8_t *data, uint64_t off,
			size_t n, uint8_t *out);

/* A growing list of digest parts (core/blake3.h). */
struct dcr_parts {
	struct dcr_blake3_part *v;
	size_t n, cap;
};
void dcr_parts_free(struct dcr_parts *ps);
/* The digest parts of the block rows [r0, r1) x columns [c0, c1) of a
 * tensor, given as its own row-major matrix at local (the block a rank
 * holds); added to ps. Columns that cut a segment give a part per row for
 * that segment's piece. */
int dcr_stripes_parts(const struct dcr_stripes *s, const uint8_t *local, uint64_t r0,
		      uint64_t r1, uint64_t c0, uint64_t c1, struct dcr_parts *ps,
		      struct dcr_err *e);
/* The tensor digest from the parts of all holders (checked to cover the
 * stream exactly once). */
int dcr_stripes_join(const struct dcr_stripes *s, const struct dcr_parts *ps, dcr_digest *out,
		     struct dcr_err *e);

/* The rows the hasher takes at once: ranges of whole rows that start at a
 * multiple of them are hashed fastest (their stripes in whole chunks). */
uint64_t dcr_stripes_band_rows(const struct dcr_stripes *s);
/* The digest parts of stored bytes [x0, x1) of a tensor (whole elements),
 * given at bytes, added to ps in stream order within each stripe (sorted
 * by where they start). */
int dcr_stripes_range_parts(const struct dcr_stripes *s, const uint8_t *bytes, uint64_t x0,
			    uint64_t x1, struct dcr_parts *ps, struct dcr_err *e);
/* A tensor digest from the parts of its stored bytes taken in order: each
 * dcr_tacc_add gives those of [pos, x1) (dcr_stripes_range_parts), their
 * whole chunks not hashed again. An add that does not follow on makes it
 * bad (-EINVAL from then on, and from final); final spends it. Memory: a
 * hasher per stripe, whatever the tensor's size. */
struct dcr_tacc;
struct dcr_tacc *dcr_tacc_new(int dtype, unsigned ndim, const uint64_t *shape);
uint64_t dcr_tacc_pos(const struct dcr_tacc *t);
int dcr_tacc_add(struct dcr_tacc *t, const struct dcr_parts *ps, uint64_t x1);
int dcr_tacc_final(struct dcr_tacc *t, dcr_digest *out);
void dcr_tacc_free(struct dcr_tacc *t);

/* A tensor digest from its stored bytes fed in order, in pieces of any
 * size (diff, apply and placement hash as they read or write). */
struct dcr_tdigest;
struct dcr_tdigest *dcr_tdigest_new(int dtype, unsigned ndim, const uint64_t *shape);
void dcr_tdigest_update(struct dcr_tdigest *t, const void *p, size_t n);
/* 0 and the digest once every stored byte came; -EINVAL otherwise. */
int dcr_tdigest_final(struct dcr_tdigest *t, dcr_digest *out);
void dcr_tdigest_free(struct dcr_tdigest *t);
/* Bytes it hashes at once: fed in pieces of whole steps, at whole steps
 * from its start, it copies nothing. */
size_t dcr_tdigest_step(const struct dcr_tdigest *t);
/* The same for rows [r0, r1) only (NULL when they are not the tensor's):
 * its digest parts, added to ps once those rows' bytes came. */
struct dcr_tdigest *dcr_tdigest_new_rows(int dtype, unsigned ndim, const uint64_t *shape,
					 uint64_t r0, uint64_t r1);
int dcr_tdigest_parts(struct dcr_tdigest *t, struct dcr_parts *ps);

/* Tensor digests on a pool of threads, for tensors added as they become
 * ready: each is cut into bands of rows (about 4 MiB) that threads hash at
 * once, and the thread that waits works too. A tensor's bytes are at data,
 * or, when data is NULL, feed gives rows [r0, r1) in order to t (0, or an
 * error that the pool's wait returns). out is set once its last band is
 * done, and then done (when not NULL) is called with ctx, once, by that
 * thread: no feed of the tensor runs any more. release says data is a
 * mapping whose pages may be dropped. */
typedef int (*dcr_hpool_feed)(void *ctx, uint64_t r0, uint64_t r1, struct dcr_tdigest *t);
typedef void (*dcr_hpool_done)(void *ctx);
struct dcr_hpool;
struct dcr_hpool *dcr_hpool_new(int threads); /* threads: 0 for every core */
int dcr_hpool_add(struct dcr_hpool *p, int dtype, unsigned ndim, const uint64_t *shape,
		  const uint8_t *data, dcr_hpool_feed feed, dcr_hpool_done done, void *ctx,
		  int release, dcr_digest *out);
/* A checkpoint's tensor: read from its file band by band (see
 * dcr_ckpt_tensor_read), or through its mapping when it has no file. */
int dcr_hpool_add_tensor(struct dcr_hpool *p, const struct dcr_ckpt_tensor *t, dcr_digest *out);
/* Work until every tensor added is done: 0 or the first error. */
int dcr_hpool_wait(struct dcr_hpool *p);
void dcr_hpool_free(struct dcr_hpool *p); /* waits first */

/* The digest of a tensor's stored bytes in memory, on `threads` threads
 * (0: every core). */
void dcr_digest_tensor_mem(int dtype, unsigned ndim, const uint64_t *shape,
			   const uint8_t *data, int threads, dcr_digest *out);
/* The digest of a checkpoint's tensor (its mapped bytes), on one thread. */
void dcr_tensor_digest(const struct dcr_ckpt_tensor *t, dcr_digest *out);

/* The state id binds names, dtypes, shapes and tensor digests. Entries must
 * be sorted by name. */
struct dcr_state_entry {
	const char *name;
	int dtype;
	unsigned ndim;
	const uint64_t *shape;
	dcr_digest digest;
};
void dcr_state_id(const struct dcr_state_entry *ent, size_t n, dcr_digest *out);
/* BLAKE3 of magic, then of each entry's name, dtype and shape (and digest
 * when digests is set), each length-prefixed: dcr_state_id with
 * DCR_STATE_MAGIC and digests, a pack's tensor set id without them. */
void dcr_state_hash_entries(const char *magic, const struct dcr_state_entry *ent, size_t n,
			    int digests, dcr_digest *out);
/* Hash every tensor (optionally return per-tensor digests, ntensors long,
 * in c->tensors order) and compute the state id, on `threads` threads (0:
 * every core). */
int dcr_ckpt_state_id(const struct dcr_ckpt *c, dcr_digest *id, dcr_digest *per_tensor,
		      struct dcr_err *e);
int dcr_ckpt_state_id_threads(const struct dcr_ckpt *c, int threads, dcr_digest *id,
			      dcr_digest *per_tensor, struct dcr_err *e);

/* Digest every tensor (c->tensors order) using `threads` threads (0: all
 * cores), across tensors and within large ones. */
int dcr_ckpt_digests(const struct dcr_ckpt *c, dcr_digest *out, int threads);
/* Only the tensors i with sel[i] != 0. */
int dcr_ckpt_digests_sel(const struct dcr_ckpt *c, dcr_digest *out, const uint8_t *sel,
			 int threads);
/* The same (sel NULL: every tensor), telling progress(ctx, bytes done,
 * bytes in all) at the start and after each batch of at least 1 GiB and 1%
 * of the selected bytes, each batch on `threads` threads; progress NULL:
 * one batch, as dcr_ckpt_digests_sel. 0 or -errno. */
int dcr_ckpt_digests_progress(const struct dcr_ckpt *c, dcr_digest *out, const uint8_t *sel,
			      int threads, void (*progress)(void *ctx, uint64_t done, uint64_t total),
			      void *ctx);
/* State id from precomputed per-tensor digests. */
void dcr_ckpt_state_from(const struct dcr_ckpt *c, const dcr_digest *dg, dcr_digest *id);

#endif
