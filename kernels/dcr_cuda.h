/* dcr_cuda.h - the GPU versions of dcr's two hot loops.
 *
 * Both are bit-identical to the CPU reference in lib/ (the test oracle,
 * tests/test-gpu.c): dcr_gpu_diff finds the changed 16-bit units of a range
 * (positions in increasing order and XOR masks, as lib/diff.c's scan does),
 * dcr_gpu_apply scatters new stored bits into device memory (as apply's
 * replay writes them into the file). Pointers are host pointers; the
 * functions copy to and from the device. Return 0, -ENODEV when no CUDA
 * device is usable, or another negative code.
 */
#ifndef DCR_CUDA_H
#define DCR_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if a CUDA device can be used. */
int dcr_gpu_available(void);

/* Changed 16-bit units of a[0..n) vs b[0..n): writes *nout positions (sorted)
 * and masks (a ^ b); pos and val must hold n entries. */
int dcr_gpu_diff16(const uint16_t *a, const uint16_t *b, size_t n, uint64_t *pos,
		   uint16_t *val, size_t *nout);

/* dst[pos[i]] = val[i] for 16-bit units (overwrite), or dst[pos[i]] ^= val[i]
 * when xor is non-zero; dst has n units and is updated in place. */
int dcr_gpu_apply16(uint16_t *dst, size_t n, const uint64_t *pos, const uint16_t *val,
		    size_t m, int xor_);

#ifdef __cplusplus
}
#endif
#endif
