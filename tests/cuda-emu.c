/* cuda-emu.c - kernels/dcr_cuda.h on the host, for testing libdcr's device
 * paths on a machine without a GPU (configure --with-cuda=emulate): every
 * dk_ function as the CUDA one behaves, on "device memory" that is host
 * memory this file hands out and keeps a list of, so that each call can
 * check that what it is given as device memory is device memory, and that
 * each range a kernel would read or write lies inside one allocation (an
 * error, as an illegal address is on a GPU, where it does not). Copies
 * check their direction the same way.
 *
 * It proves the host side of the device path (lib/core/cuda.c, the
 * in-memory apply, dcr-diff and dcr-apply --device cuda, the GPU tests and
 * scripts themselves): never that the kernels in kernels/dcr_cuda.cu run,
 * nor how fast. A libdcr built this way is for tests only. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcr_cuda.h"

/* the cudaError_t values this file returns */
enum {
	OK = 0,
	INVALID_VALUE = 1,
	MEMORY_ALLOCATION = 2,
	ILLEGAL_ADDRESS = 700,
};

struct alloc {
	uint8_t *p;
	size_t n;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc *allocs;
static size_t nallocs, cap;

const char *dk_error_name(int err)
{
	return err == INVALID_VALUE	  ? "cudaErrorInvalidValue"
	       : err == MEMORY_ALLOCATION ? "cudaErrorMemoryAllocation"
	       : err == ILLEGAL_ADDRESS	  ? "cudaErrorIllegalAddress"
					  : "cudaSuccess";
}

const char *dk_error_string(int err)
{
	return err == INVALID_VALUE	  ? "invalid argument"
	       : err == MEMORY_ALLOCATION ? "out of memory"
	       : err == ILLEGAL_ADDRESS	  ? "an illegal memory access was encountered (emulated)"
					  : "no error";
}

int dk_err_no_device(int err) { (void)err; return 0; }
int dk_err_out_of_memory(int err) { return err == MEMORY_ALLOCATION; }
int dk_err_invalid_value(int err) { return err == INVALID_VALUE; }

int dk_device_count(int *n)
{
	*n = 1;
	return OK;
}

/* Is [p, p + n) inside one allocation? */
int dk_device_name(char *out, size_t n)
{
	snprintf(out, n, "emulated on the host (tests/cuda-emu.c)");
	return OK;
}

static int inside(const void *p, size_t n)
{
	const uint8_t *q = p;
	int ok = 0;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nallocs && !ok; i++)
		ok = q >= allocs[i].p && q <= allocs[i].p + allocs[i].n &&
		     n <= (size_t)(allocs[i].p + allocs[i].n - q);
	pthread_mutex_unlock(&mu);
	return ok;
}

static int is_device(const void *p)
{
	return inside(p, 0);
}

int dk_malloc(void **d_p, size_t n)
{
	uint8_t *p = malloc(n ? n : 1);
	if (!p)
		return MEMORY_ALLOCATION;
	memset(p, 0xd5, n); /* device memory is not zeroed */
	pthread_mutex_lock(&mu);
	if (nallocs == cap) {
		size_t nc = cap ? 2 * cap : 64;
		struct alloc *v = realloc(allocs, nc * sizeof(*v));
		if (!v) {
			pthread_mutex_unlock(&mu);
			free(p);
			return MEMORY_ALLOCATION;
		}
		allocs = v;
		cap = nc;
	}
	allocs[nallocs++] = (struct alloc){p, n};
	pthread_mutex_unlock(&mu);
	*d_p = p;
	return OK;
}

int dk_free(void *d_p)
{
	int found = 0;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nallocs; i++)
		if (allocs[i].p == d_p) {
			allocs[i] = allocs[--nallocs];
			found = 1;
			break;
		}
	pthread_mutex_unlock(&mu);
	if (!found)
		return INVALID_VALUE;
	free(d_p);
	return OK;
}

int dk_host_alloc(void **h_p, size_t n)
{
	*h_p = malloc(n ? n : 1);
	return *h_p ? OK : MEMORY_ALLOCATION;
}

int dk_host_free(void *h_p)
{
	free(h_p);
	return OK;
}

static int streams;

int dk_stream_new(void **stream)
{
	*stream = &streams;
	return OK;
}

int dk_stream_free(void *stream)
{
	return stream == &streams ? OK : INVALID_VALUE;
}

static int check_stream(void *s)
{
	return !s || s == &streams ? OK : INVALID_VALUE;
}

int dk_copy(void *dst, const void *src, size_t n, int dir, void *stream)
{
	if (check_stream(stream))
		return INVALID_VALUE;
	if (!n)
		return OK;
	int dd = inside(dst, n), ds = inside(src, n);
	if ((dir == 1 && (!dd || is_device(src))) || (dir == 2 && (!ds || is_device(dst))) ||
	    (dir == 3 && (!dd || !ds)) || dir < 1 || dir > 3)
		return INVALID_VALUE;
	memmove(dst, src, n);
	return OK;
}

int dk_fill(void *d_p, int byte, size_t n, void *stream)
{
	if (check_stream(stream) || (n && !inside(d_p, n)))
		return INVALID_VALUE;
	memset(d_p, byte, n);
	return OK;
}

int dk_sync(void *stream)
{
	return check_stream(stream);
}

int dk_is_device(const void *p, int *dev)
{
	*dev = is_device(p);
	return OK;
}

static uint64_t load(const uint8_t *p, unsigned unit)
{
	uint64_t v = 0;
	memcpy(&v, p, unit); /* little-endian, as the GPU */
	return v;
}

static void store(uint8_t *p, unsigned unit, uint64_t v)
{
	memcpy(p, &v, unit);
}

/* a scratch size that depends on n, so that too little of it shows */
static size_t scratch_for(uint64_t n)
{
	return 256 + (size_t)(n / 256) * 16;
}

int dk_diff(const void *d_a, const void *d_b, uint64_t n, unsigned unit, int newv,
	    uint64_t *d_pos, void *d_val, uint64_t cap_, unsigned long long *d_count,
	    void *d_scratch, size_t *scratch_bytes, int method, void *stream)
{
	if (method != DK_DIFF_POSITIONS && method != DK_DIFF_TRIPLES && method != DK_DIFF_TILES)
		return INVALID_VALUE;
	if (unit != 1 && unit != 2 && unit != 4 && unit != 8)
		return INVALID_VALUE;
	if (!d_scratch) {
		*scratch_bytes = scratch_for(n);
		return OK;
	}
	if (check_stream(stream) || *scratch_bytes < scratch_for(n) ||
	    !inside(d_scratch, scratch_for(n)))
		return INVALID_VALUE;
	if (!inside(d_a, n * unit) || !inside(d_b, n * unit) || !inside(d_count, 8))
		return ILLEGAL_ADDRESS;
	const uint8_t *a = d_a, *b = d_b;
	uint64_t k = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t x = load(a + i * unit, unit), y = load(b + i * unit, unit);
		if (x == y)
			continue;
		if (k < cap_) {
			if (!inside(d_pos + k, 8) || !inside((uint8_t *)d_val + k * unit, unit))
				return ILLEGAL_ADDRESS;
			d_pos[k] = i;
			store((uint8_t *)d_val + k * unit, unit, newv ? y : x ^ y);
		}
		k++;
	}
	*d_count = k;
	return OK;
}

int dk_scatter(void *d_dst, uint64_t n, unsigned unit, const uint64_t *d_pos, const void *d_val,
	       uint64_t m, int xor_, void *stream)
{
	if (check_stream(stream) || (unit != 1 && unit != 2 && unit != 4 && unit != 8))
		return INVALID_VALUE;
	if (!m)
		return OK;
	if (!inside(d_pos, m * 8) || !inside(d_val, m * unit) || !inside(d_dst, n * unit))
		return ILLEGAL_ADDRESS;
	uint8_t *dst = d_dst;
	for (uint64_t k = 0; k < m; k++) {
		uint64_t p = d_pos[k];
		if (p >= n)
			continue;
		if (!inside(dst + p * unit, unit))
			return ILLEGAL_ADDRESS;
		uint64_t v = load((const uint8_t *)d_val + k * unit, unit);
		store(dst + p * unit, unit, xor_ ? load(dst + p * unit, unit) ^ v : v);
	}
	return OK;
}

int dk_positions(const uint32_t *d_gaps, uint64_t m, uint64_t first, uint64_t *d_pos,
		 void *d_scratch, size_t *scratch_bytes, void *stream)
{
	if (!d_scratch) {
		*scratch_bytes = scratch_for(m);
		return OK;
	}
	if (check_stream(stream) || *scratch_bytes < scratch_for(m) ||
	    !inside(d_scratch, scratch_for(m)))
		return INVALID_VALUE;
	if (!inside(d_gaps, m * 4) || !inside(d_pos, m * 8))
		return ILLEGAL_ADDRESS;
	uint64_t next = first;
	for (uint64_t k = 0; k < m; k++) {
		d_pos[k] = next + d_gaps[k];
		next = d_pos[k] + 1;
	}
	return OK;
}
