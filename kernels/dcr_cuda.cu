// dcr_cuda.cu - diff, scatter and the positions scan on device memory, for
// units of 1, 2, 4 and 8 bytes (see dcr_cuda.h). Selection and scan are
// CUB's (the CUDA Toolkit's CCCL). The diff is one cub::DeviceSelect::If,
// in one of two ways (DK_DIFF_*): over the positions themselves, whose
// predicate loads the two units and whose output functor loads them again
// for the changed ones (from the cache: the same tile, just read), or over
// (position, old, new) triples that a transform iterator reads from the two
// buffers. Either reads the data from memory once, and either keeps CUB's
// stable order: increasing positions.
#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "dcr_cuda.h"

namespace {

// One unit of both buffers at a position.
template <class T> struct triple {
	unsigned long long pos;
	T a, b;
};

template <class T> struct load_triple {
	const T *__restrict__ a;
	const T *__restrict__ b;
	__host__ __device__ triple<T> operator()(long long i) const
	{
		return triple<T>{(unsigned long long)i, a[i], b[i]};
	}
};

template <class T> struct changed {
	__host__ __device__ bool operator()(const triple<T> &t) const { return t.a != t.b; }
};

// The k-th change: its position, and the new unit or the XOR mask; at most
// cap of them are kept.
template <class T> struct store_change {
	uint64_t *pos;
	T *val;
	unsigned long long cap;
	int newv;
	__host__ __device__ void operator()(ptrdiff_t k, const triple<T> &t) const
	{
		if ((unsigned long long)k >= cap)
			return;
		pos[k] = t.pos;
		val[k] = newv ? t.b : (T)(t.a ^ t.b);
	}
};

// By position: the items are the positions (CUB's tuning for 8-byte
// primitives: large tiles, striped loads of the items), the predicate
// compares the units there.
template <class T> struct differs {
	const T *__restrict__ a;
	const T *__restrict__ b;
	__host__ __device__ bool operator()(long long i) const { return a[i] != b[i]; }
};

template <class T> struct store_position_change {
	const T *__restrict__ a;
	const T *__restrict__ b;
	uint64_t *pos;
	T *val;
	unsigned long long cap;
	int newv;
	__host__ __device__ void operator()(ptrdiff_t k, long long i) const
	{
		if ((unsigned long long)k >= cap)
			return;
		T y = b[i];
		pos[k] = (uint64_t)i;
		val[k] = newv ? y : (T)(a[i] ^ y);
	}
};

template <class T>
cudaError_t diff_t(const void *d_a, const void *d_b, uint64_t n, int newv, uint64_t *d_pos,
		   void *d_val, uint64_t cap, unsigned long long *d_count, void *d_scratch,
		   size_t *scratch_bytes, int method, cudaStream_t s)
{
	const T *a = (const T *)d_a, *b = (const T *)d_b;
	if (method == DK_DIFF_TRIPLES) {
		auto in = thrust::make_transform_iterator(thrust::counting_iterator<long long>(0),
							  load_triple<T>{a, b});
		auto out = thrust::make_tabulate_output_iterator(
			store_change<T>{d_pos, (T *)d_val, (unsigned long long)cap, newv});
		return cub::DeviceSelect::If(d_scratch, *scratch_bytes, in, out, d_count, (int64_t)n,
					     changed<T>{}, s);
	}
	auto out = thrust::make_tabulate_output_iterator(
		store_position_change<T>{a, b, d_pos, (T *)d_val, (unsigned long long)cap, newv});
	return cub::DeviceSelect::If(d_scratch, *scratch_bytes, thrust::counting_iterator<long long>(0),
				     out, d_count, (int64_t)n, differs<T>{a, b}, s);
}

template <class T>
__global__ void scatter_k(T *__restrict__ dst, uint64_t n, const uint64_t *__restrict__ pos,
			  const T *__restrict__ val, uint64_t m, int xor_)
{
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < m; k += stride) {
		uint64_t p = pos[k];
		if (p >= n)
			continue;
		dst[p] = xor_ ? (T)(dst[p] ^ val[k]) : val[k];
	}
}

template <class T>
cudaError_t scatter_t(void *d_dst, uint64_t n, const uint64_t *d_pos, const void *d_val, uint64_t m,
		      int xor_, cudaStream_t s)
{
	if (!m)
		return cudaSuccess;
	const unsigned threads = 256;
	uint64_t blocks = (m + threads - 1) / threads;
	if (blocks > (1u << 20))
		blocks = 1u << 20; // grid-stride beyond
	scatter_k<T><<<(unsigned)blocks, threads, 0, s>>>((T *)d_dst, n, d_pos, (const T *)d_val, m,
							 xor_);
	return cudaGetLastError();
}

struct gap_step {
	__host__ __device__ unsigned long long operator()(uint32_t g) const
	{
		return (unsigned long long)g + 1;
	}
};

struct store_position {
	uint64_t *pos;
	unsigned long long first;
	__host__ __device__ void operator()(ptrdiff_t k, unsigned long long sum) const
	{
		pos[k] = first + sum - 1;
	}
};

} // namespace

extern "C" {

const char *dk_error_name(int err) { return cudaGetErrorName((cudaError_t)err); }
const char *dk_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }

int dk_err_no_device(int err)
{
	return err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
	       err == cudaErrorInitializationError || err == cudaErrorNotSupported ||
	       err == cudaErrorDevicesUnavailable || err == cudaErrorSystemDriverMismatch ||
	       err == cudaErrorCompatNotSupportedOnDevice || err == cudaErrorNoKernelImageForDevice ||
	       err == cudaErrorUnsupportedPtxVersion;
}

int dk_err_out_of_memory(int err) { return err == cudaErrorMemoryAllocation; }
int dk_err_invalid_value(int err)
{
	return err == cudaErrorInvalidValue || err == cudaErrorInvalidDevicePointer;
}

int dk_device_count(int *n)
{
	*n = 0;
	return cudaGetDeviceCount(n);
}

int dk_device_name(char *out, size_t n)
{
	int dev = 0;
	cudaDeviceProp p;
	cudaError_t r = cudaGetDevice(&dev);
	if (r == cudaSuccess)
		r = cudaGetDeviceProperties(&p, dev);
	if (r == cudaSuccess)
		snprintf(out, n, "%s, sm_%d%d, %.0f GiB", p.name, p.major, p.minor,
			 (double)p.totalGlobalMem / (1 << 30));
	return r;
}

int dk_malloc(void **d_p, size_t n) { return cudaMalloc(d_p, n ? n : 1); }
int dk_free(void *d_p) { return cudaFree(d_p); }
int dk_host_alloc(void **h_p, size_t n) { return cudaMallocHost(h_p, n ? n : 1); }
int dk_host_free(void *h_p) { return cudaFreeHost(h_p); }

int dk_stream_new(void **stream)
{
	cudaStream_t s = nullptr;
	cudaError_t r = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	*stream = s;
	return r;
}

int dk_stream_free(void *stream) { return cudaStreamDestroy((cudaStream_t)stream); }

int dk_copy(void *dst, const void *src, size_t n, int dir, void *stream)
{
	static const cudaMemcpyKind kinds[] = {cudaMemcpyDefault, cudaMemcpyHostToDevice,
					       cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
	if (dir < 0 || dir > 3)
		return cudaErrorInvalidValue;
	if (!n)
		return cudaSuccess;
	return cudaMemcpyAsync(dst, src, n, kinds[dir], (cudaStream_t)stream);
}

int dk_fill(void *d_p, int byte, size_t n, void *stream)
{
	return n ? cudaMemsetAsync(d_p, byte, n, (cudaStream_t)stream) : cudaSuccess;
}

int dk_sync(void *stream) { return cudaStreamSynchronize((cudaStream_t)stream); }

int dk_is_device(const void *p, int *is_device)
{
	cudaPointerAttributes a;
	*is_device = 0;
	cudaError_t r = cudaPointerGetAttributes(&a, p);
	if (r != cudaSuccess) {
		cudaGetLastError(); // not sticky: clear it
		return r == cudaErrorInvalidValue ? cudaSuccess : r;
	}
	*is_device = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
	return cudaSuccess;
}

int dk_diff(const void *d_a, const void *d_b, uint64_t n, unsigned unit, int newv,
	    uint64_t *d_pos, void *d_val, uint64_t cap, unsigned long long *d_count,
	    void *d_scratch, size_t *scratch_bytes, int method, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (method != DK_DIFF_POSITIONS && method != DK_DIFF_TRIPLES)
		return cudaErrorInvalidValue;
	switch (unit) {
	case 1:
		return diff_t<uint8_t>(d_a, d_b, n, newv, d_pos, d_val, cap, d_count, d_scratch,
				       scratch_bytes, method, s);
	case 2:
		return diff_t<uint16_t>(d_a, d_b, n, newv, d_pos, d_val, cap, d_count, d_scratch,
					scratch_bytes, method, s);
	case 4:
		return diff_t<uint32_t>(d_a, d_b, n, newv, d_pos, d_val, cap, d_count, d_scratch,
					scratch_bytes, method, s);
	case 8:
		return diff_t<unsigned long long>(d_a, d_b, n, newv, d_pos, d_val, cap, d_count,
						  d_scratch, scratch_bytes, method, s);
	}
	return cudaErrorInvalidValue;
}

int dk_scatter(void *d_dst, uint64_t n, unsigned unit, const uint64_t *d_pos, const void *d_val,
	       uint64_t m, int xor_, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	switch (unit) {
	case 1: return scatter_t<uint8_t>(d_dst, n, d_pos, d_val, m, xor_, s);
	case 2: return scatter_t<uint16_t>(d_dst, n, d_pos, d_val, m, xor_, s);
	case 4: return scatter_t<uint32_t>(d_dst, n, d_pos, d_val, m, xor_, s);
	case 8: return scatter_t<unsigned long long>(d_dst, n, d_pos, d_val, m, xor_, s);
	}
	return cudaErrorInvalidValue;
}

int dk_positions(const uint32_t *d_gaps, uint64_t m, uint64_t first, uint64_t *d_pos,
		 void *d_scratch, size_t *scratch_bytes, void *stream)
{
	auto in = thrust::make_transform_iterator(d_gaps, gap_step{});
	auto out = thrust::make_tabulate_output_iterator(
		store_position{d_pos, (unsigned long long)first});
	return cub::DeviceScan::InclusiveSum(d_scratch, *scratch_bytes, in, out, (int64_t)m,
					     (cudaStream_t)stream);
}

} // extern "C"
