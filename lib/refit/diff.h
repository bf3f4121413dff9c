/* diff.h - compare two checkpoints and write a delta stream. */
#ifndef DCR_REFIT_DIFF_H
#define DCR_REFIT_DIFF_H

#include "core/checkpoint.h"
#include "core/delta.h"

struct dcr_diff_opts {
	const char *base, *target;     /* checkpoint paths */
	const dcr_digest *base_id;     /* trust this base state id (skip hashing base) */
	const uint8_t *attempt;        /* 16 bytes, or NULL for random */
	uint64_t chunk_elems;          /* elements per item (default 1Mi) */
	const char *what;              /* output name for messages */
	int threads;                   /* workers (default: one per core) */
	int dense;                     /* a dense copy of target: no base (base ignored) */
	int codec;                     /* DCR_CODEC_AUTO (default), _PLAIN, _DELTA or _CLASSED */
	int no_cache;                  /* do not leave NEW's digests in NEW/.dcr/state */
	int device;                    /* DCR_DEVICE_CPU (default) or DCR_DEVICE_CUDA (core/cuda.h):
					  where the chunks are compared */
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
};

struct dcr_diff_stats {
	dcr_digest base, target;
	uint64_t changed, items, tensors, bytes_out, dense_bytes;
};

/* The changed units of a[0..nbytes) vs b[0..nbytes): positions (in units,
 * increasing) and XOR masks; returns their count. pos and val hold
 * nbytes/unit entries. The CPU reference of the GPU diff kernel. */
size_t dcr_scan_changes(const uint8_t *a, const uint8_t *b, size_t nbytes, unsigned unit,
			uint64_t *pos, uint64_t *val);

/* The TENSOR record of b's tensor i diffed against base a: DCR_TENSOR_NEW
 * unless a holds a tensor of that name with the same layout. Returns
 * whether it does. */
int dcr_diff_tensor_record(const struct dcr_ckpt *a, const struct dcr_ckpt *b, size_t i,
			   struct dcr_delta_tensor *dt);

/* The end of a delta from the checkpoint a (may be NULL) whose target is
 * the checkpoint b: a DONE record per tensor (digests dg, in b's order),
 * then END with the state id; nothing, and the error of
 * dcr_ckpt_unchanged, where a file of a or b was written while it was
 * read. */
int dcr_diff_write_targets(struct dcr_delta_writer *w, const struct dcr_ckpt *a,
			   const struct dcr_ckpt *b, const dcr_digest *dg, dcr_digest *target,
			   struct dcr_err *e);

int dcr_diff(const struct dcr_diff_opts *o, struct dcr_sink sink, struct dcr_diff_stats *st,
	     struct dcr_err *e);

#endif
