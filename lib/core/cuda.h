/* cuda.h - dcr's hot loops on CUDA device memory: diff (changed positions
 * and their XOR masks or new units, compacted), scatter (XOR or overwrite
 * at positions) and the positions scan of an item's decode, on the
 * caller's device pointers and stream; and the few runtime calls a C
 * program needs around them (memory, copies, streams) without the CUDA
 * headers.
 *
 * Every function exists in every libdcr. One built without CUDA (configure
 * found no nvcc that builds and links a kernel, or --without-cuda) returns
 * -ENOTSUP from each, with a message; one built with it returns -ENODEV
 * where no device (or no driver) is present. dcr_cuda_probe tells which,
 * at no cost beyond the runtime's first call.
 *
 * Pointers named d_* are device memory of the current device (as
 * cudaSetDevice left it), h_* host memory. A stream is a cudaStream_t
 * passed as void * (NULL: the legacy default stream). Unless a function
 * says otherwise it only enqueues work on the stream and returns: no
 * allocation, copy or synchronization behind the caller's back; a
 * failure of enqueued work shows at the next call that synchronizes.
 * Device buffers must be aligned to their unit (as cudaMalloc's are).
 *
 * The CPU references, the GPU tests' oracle: dcr_scan_changes
 * (refit/diff.h), dcr_scatter (core/item.h) and dcr_gap_positions (here).
 * See libdcr(3), DEVICE MEMORY.
 */
#ifndef DCR_CORE_CUDA_H
#define DCR_CORE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* Where a computation runs (dcr_diff_opts.device, dcr_apply_opts.device). */
enum dcr_device { DCR_DEVICE_CPU = 0, DCR_DEVICE_CUDA = 1 };
/* "cpu" or "cuda": the enum value, or -1. */
int dcr_device_parse(const char *s);

/* 1 if this libdcr was built with CUDA. */
int dcr_cuda_built(void);
/* 0 when a CUDA device is usable; -ENOTSUP (built without CUDA) or -ENODEV
 * (no device, no driver, or none this build's kernels run on), with a
 * message that says which. */
int dcr_cuda_probe(struct dcr_err *e);

/* The current device, as "NAME, sm_XY, G GiB", into out[0..n). */
int dcr_cuda_device_name(char *out, size_t n, struct dcr_err *e);

/* Device and page-locked host memory, freed with the matching call (free
 * functions accept NULL). */
int dcr_cuda_malloc(void **d_p, size_t n, struct dcr_err *e);
void dcr_cuda_free(void *d_p);
int dcr_cuda_host_alloc(void **h_p, size_t n, struct dcr_err *e);
void dcr_cuda_host_free(void *h_p);
int dcr_cuda_stream_new(void **stream, struct dcr_err *e);
void dcr_cuda_stream_free(void *stream);

enum { DCR_CUDA_H2D = 1, DCR_CUDA_D2H = 2, DCR_CUDA_D2D = 3 };
/* n bytes from src to dst (dir: DCR_CUDA_H2D, _D2H or _D2D), on stream. */
int dcr_cuda_copy(void *dst, const void *src, size_t n, int dir, void *stream,
		  struct dcr_err *e);
/* n bytes of d_p set to byte, on stream. */
int dcr_cuda_fill(void *d_p, int byte, size_t n, void *stream, struct dcr_err *e);
/* Wait for the stream's work; its errors are returned here. */
int dcr_cuda_sync(void *stream, struct dcr_err *e);
/* 1 if p is device (or managed) memory, 0 if not, or a negative code. */
int dcr_cuda_is_device(const void *p, struct dcr_err *e);

/* ---- the kernels, on device memory ---- */

/* Scratch bytes dcr_cuda_diff needs for n units of `unit` bytes. */
int dcr_cuda_diff_scratch(uint64_t n, unsigned unit, size_t *bytes, struct dcr_err *e);
/* The changed units of d_base[0..n) vs d_cur[0..n), units of 1, 2, 4 or 8
 * bytes compared on their stored bits: their positions, increasing, into
 * d_pos, and per enc their XOR masks d_base ^ d_cur (DCR_ENC_XOR) or d_cur's
 * units (DCR_ENC_OVERWRITE) into d_val (unit bytes each), at most cap of
 * them. *d_count (device memory) gets the number of changes when the stream
 * reaches it; when it exceeds cap, only the first cap were written. One
 * pass over the data. The result is dcr_scan_changes' (its masks, or the
 * new units at its positions) bit for bit. */
int dcr_cuda_diff(const void *d_base, const void *d_cur, uint64_t n, unsigned unit, int enc,
		  uint64_t *d_pos, void *d_val, uint64_t cap, uint64_t *d_count,
		  void *d_scratch, size_t scratch_bytes, void *stream, struct dcr_err *e);

/* d_dst[d_pos[k]] = d_val[k] (DCR_ENC_OVERWRITE) or ^= d_val[k]
 * (DCR_ENC_XOR) for k < m, on n units of `unit` bytes; positions must be
 * distinct, and any at or past n are skipped (never written). dcr_scatter's
 * result bit for bit. */
int dcr_cuda_scatter(void *d_dst, uint64_t n, unsigned unit, const uint64_t *d_pos,
		     const void *d_val, uint64_t m, int enc, void *stream, struct dcr_err *e);

/* Positions from the gaps between them, as items code them (a gap is the
 * number of unchanged units before a change, counted from the one after the
 * previous change, or from `first`): d_pos[k] = first + sum over j <= k of
 * (d_gaps[j] + 1) - 1, by a prefix scan. */
int dcr_cuda_positions_scratch(uint64_t m, size_t *bytes, struct dcr_err *e);
int dcr_cuda_positions(const uint32_t *d_gaps, uint64_t m, uint64_t first, uint64_t *d_pos,
		       void *d_scratch, size_t scratch_bytes, void *stream, struct dcr_err *e);
/* The CPU reference of dcr_cuda_positions (always present). */
void dcr_gap_positions(const uint32_t *gaps, size_t m, uint64_t first, uint64_t *pos);

/* ---- host buffers through the device ----
 * For code that holds its data in host memory (dcr-diff and dcr-apply
 * with --device cuda): a context owns a stream and device buffers that
 * grow as needed; each call copies its input to the device, runs the
 * kernel and copies the result back, synchronously. One context is used by
 * one thread at a time. */
struct dcr_cuda_ctx;
int dcr_cuda_ctx_new(struct dcr_cuda_ctx **c, struct dcr_err *e);
void dcr_cuda_ctx_free(struct dcr_cuda_ctx *c);
/* dcr_scan_changes on the device: pos and val hold nbytes / unit entries;
 * *n gets the count. */
int dcr_cuda_scan_changes(struct dcr_cuda_ctx *c, const uint8_t *a, const uint8_t *b,
			  size_t nbytes, unsigned unit, uint64_t *pos, uint64_t *val, size_t *n,
			  struct dcr_err *e);
/* dcr_scatter on the device into dst[0..nbytes). */
int dcr_cuda_scatter_host(struct dcr_cuda_ctx *c, uint8_t *dst, size_t nbytes, unsigned unit,
			  const uint64_t *pos, const uint64_t *val, size_t n, int xor_,
			  struct dcr_err *e);

#endif
