/* test-gpu - the CUDA kernels are bit-identical to their CPU references in
 * lib/ (dcr_scan_changes, dcr_scatter). Exit 77 (skip) where dcr was built
 * without CUDA or no CUDA device is present. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcr.h"
#include "core/bytes.h"

#ifdef HAVE_CUDA
#include "dcr_cuda.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int check(size_t n, unsigned rate_per_1000)
{
	uint16_t *a = malloc(n * 2 + 2), *b = malloc(n * 2 + 2), *gval = malloc(n * 2 + 2);
	uint64_t *cpos = malloc(n * 8 + 8), *cval = malloc(n * 8 + 8), *gpos = malloc(n * 8 + 8);
	uint64_t *v64 = malloc(n * 8 + 8);
	uint16_t *cdst = malloc(n * 2 + 2), *gdst = malloc(n * 2 + 2);
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		a[i] = (uint16_t)next();
		b[i] = next() % 1000 < rate_per_1000 ? (uint16_t)(a[i] ^ (1 + next() % 7)) : a[i];
	}
	if (n > 3) {
		a[0] = 0x0000; b[0] = 0x8000;          /* +0 vs -0 */
		a[1] = 0x7fc0; b[1] = 0x7fc1;          /* NaN payloads */
	}
	size_t cn = dcr_scan_changes((uint8_t *)a, (uint8_t *)b, n * 2, 2, cpos, cval), gn = 0;
	if (dcr_gpu_diff16(a, b, n, gpos, gval, &gn)) {
		fprintf(stderr, "dcr_gpu_diff16 failed\n");
		return 1;
	}
	if (gn != cn) {
		fprintf(stderr, "n=%zu: GPU found %zu changes, CPU %zu\n", n, gn, cn);
		bad = 1;
	}
	for (size_t k = 0; !bad && k < cn; k++)
		if (gpos[k] != cpos[k] || gval[k] != cval[k]) {
			fprintf(stderr, "n=%zu: change %zu differs\n", n, k);
			bad = 1;
		}
	for (int xor_ = 0; xor_ < 2 && !bad; xor_++) {
		memcpy(cdst, a, n * 2);
		memcpy(gdst, a, n * 2);
		for (size_t k = 0; k < cn; k++) {
			gval[k] = xor_ ? (uint16_t)cval[k] : b[cpos[k]];
			v64[k] = gval[k];
		}
		dcr_scatter((uint8_t *)cdst, 2, cpos, v64, cn, xor_);
		if (dcr_gpu_apply16(gdst, n, cpos, gval, cn, xor_) || memcmp(cdst, gdst, n * 2) ||
		    memcmp(cdst, b, n * 2)) {
			fprintf(stderr, "n=%zu: apply (xor=%d) differs\n", n, xor_);
			bad = 1;
		}
	}
	free(a); free(b); free(gval); free(cpos); free(cval); free(gpos); free(v64); free(cdst); free(gdst);
	return bad;
}

int main(void)
{
	if (!dcr_gpu_available()) {
		printf("test-gpu: no CUDA device here: skipping\n");
		return 77;
	}
	static const size_t sizes[] = {0, 1, 31, 32, 33, 255, 256, 257, 100000, 1u << 24};
	static const unsigned rates[] = {0, 10, 30, 1000};
	int bad = 0, runs = 0;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++)
		for (size_t j = 0; j < sizeof(rates) / sizeof(*rates); j++, runs++)
			bad |= check(sizes[i], rates[j]);
	printf("test-gpu: %d cases, %s\n", runs, bad ? "FAILED" : "all bit-identical to the CPU");
	return bad;
}
#else
int main(void)
{
	printf("test-gpu: dcr was configured without CUDA (--with-cuda): skipping\n");
	return 77;
}
#endif
