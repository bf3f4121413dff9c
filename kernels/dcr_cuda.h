/* dcr_cuda.h - the CUDA side of libdcr: diff, scatter and the positions
 * scan on device memory, and the few runtime calls libdcr needs.
 *
 * Reached only through lib/core/cuda.c (the dcr_cuda_* module), which
 * checks arguments, turns the codes into messages and is what callers see;
 * these dk_ functions are internal to libdcr (not exported). Every pointer
 * named d_* is device memory, h_* host memory. Each function returns 0 or
 * a cudaError_t (> 0): lib/core/cuda.c turns it into a negative code and a
 * message with dk_error_name and dk_error_string. Nothing here allocates
 * behind the caller's back, copies behind its back or synchronizes, but
 * dk_sync and the runtime calls that do so by their nature.
 *
 * The CPU references (the tests' oracle): dcr_scan_changes (refit/diff.h)
 * for dk_diff, dcr_scatter (core/item.h) for dk_scatter, dcr_gap_positions
 * (core/cuda.h) for dk_positions.
 */
#ifndef DCR_KERNELS_CUDA_H
#define DCR_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

const char *dk_error_name(int err);
const char *dk_error_string(int err);
/* the codes lib/core/cuda.c tells apart */
int dk_err_no_device(int err);     /* no device, no driver, driver too old */
int dk_err_out_of_memory(int err);
int dk_err_invalid_value(int err);

int dk_device_count(int *n);
/* "NAME, sm_XY, G GiB" of the current device */
int dk_device_name(char *out, size_t n);
int dk_malloc(void **d_p, size_t n);
int dk_free(void *d_p);
int dk_host_alloc(void **h_p, size_t n); /* page-locked */
int dk_host_free(void *h_p);
int dk_stream_new(void **stream);
int dk_stream_free(void *stream);
/* dir: 1 host to device, 2 device to host, 3 device to device; async on stream */
int dk_copy(void *dst, const void *src, size_t n, int dir, void *stream);
int dk_fill(void *d_p, int byte, size_t n, void *stream);
int dk_sync(void *stream);
/* *is_device: 1 when p is device (or managed) memory of this process */
int dk_is_device(const void *p, int *is_device);

/* Changed units of d_a[0..n) vs d_b[0..n) (unit 1, 2, 4 or 8 bytes): the
 * positions in increasing order into d_pos and, per newv, d_b's units
 * (newv != 0) or XOR masks d_a ^ d_b (newv == 0) into d_val (unit wide),
 * at most cap of them; *d_count (device) gets the number of changes, which
 * may exceed cap (then only the first cap are written); the data is read
 * once, by method: one cub::DeviceSelect::If, DK_DIFF_POSITIONS
 * (lib/core/cuda.c's) selecting positions, the predicate loading the
 * units, or DK_DIFF_TRIPLES selecting (position, old, new) items that a
 * transform iterator loads; or DK_DIFF_TILES, this file's own kernel,
 * 16-byte loads and a decoupled look-back, where d_a and d_b lie equally
 * far past a 16-byte boundary (else it goes by positions). The same
 * result; tests/test-gpu checks and scripts/bench-cuda times all three.
 * DK_DIFF_TILES has not run on a GPU yet (README, GPU): it becomes
 * libdcr's once scripts/gpu-check has passed it and timed it faster.
 * With d_scratch NULL, *scratch_bytes gets the scratch size for n (and
 * method; DK_DIFF_TILES's covers DK_DIFF_POSITIONS's, its fallback) and
 * nothing runs. */
enum { DK_DIFF_POSITIONS = 0, DK_DIFF_TRIPLES = 1, DK_DIFF_TILES = 2 };
int dk_diff(const void *d_a, const void *d_b, uint64_t n, unsigned unit, int newv,
	    uint64_t *d_pos, void *d_val, uint64_t cap, unsigned long long *d_count,
	    void *d_scratch, size_t *scratch_bytes, int method, void *stream);

/* d_dst[d_pos[k]] = d_val[k], or ^= when xor_, for k < m; positions at or
 * past n are skipped. Positions must be distinct. */
int dk_scatter(void *d_dst, uint64_t n, unsigned unit, const uint64_t *d_pos, const void *d_val,
	       uint64_t m, int xor_, void *stream);

/* d_pos[k] = first + sum over j <= k of (d_gaps[j] + 1) - 1: positions from
 * the gaps between them (cub::DeviceScan::InclusiveSum). Scratch as above. */
int dk_positions(const uint32_t *d_gaps, uint64_t m, uint64_t first, uint64_t *d_pos,
		 void *d_scratch, size_t *scratch_bytes, void *stream);

#ifdef __cplusplus
}
#endif
#endif
