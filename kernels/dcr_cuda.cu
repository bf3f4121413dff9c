// dcr_cuda.cu - diff, scatter and the positions scan on device memory, for
// units of 1, 2, 4 and 8 bytes (see dcr_cuda.h). Selection and scan are
// CUB's (the CUDA Toolkit's CCCL). The diff is one cub::DeviceSelect::If,
// in one of two ways (DK_DIFF_*): over the positions themselves, whose
// predicate loads the two units and whose output functor loads them again
// for the changed ones (from the cache: the same tile, just read), or over
// (position, old, new) triples that a transform iterator reads from the two
// buffers. Either reads the data from memory once, and either keeps CUB's
// stable order: increasing positions. DK_DIFF_TILES is this file's own
// kernel: one pass over 16-byte loads of both buffers, each tile's changes
// counted and scanned in the block, the tiles' offsets chained by a
// decoupled look-back (each tile publishes its count, then its running
// total once its predecessors' is known). It is written to beat the
// selects on 1- and 2-byte units (0.15 and 0.28 of a copy on an H100,
// where the 16-byte loads should reach about 0.8), but has not run on a
// GPU yet: libdcr goes by positions until scripts/gpu-check proves it.
#include <cstdint>
#include <cstdio>

#include <cuda/atomic>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
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

// DK_DIFF_TILES. The units are read as 16-byte vectors from the 16-byte
// boundary at or before d_a (d_b must sit as far past one): vector g holds
// units [g * U - h, (g + 1) * U - h), h the units before d_a in vector 0.
// A vector that holds units outside [0, n) is read unit by unit, so that
// nothing outside the buffers is touched. A block takes the next tile (in
// the order blocks start, from a counter, so that every tile it waits for
// is held by a block that runs) of TILE_V vectors per thread, loaded
// striped (vector v * THREADS + thread), counts each vector's changes,
// scans the four counts of every thread at once (16 bits each, packed in
// one 64-bit word: a strip has at most THREADS * 16 changes), learns the
// tile's offset from the look-back, and writes its changes in position
// order.
constexpr int TILE_THREADS = 256;
constexpr int TILE_V = 4;
constexpr uint64_t TILE_VECS = (uint64_t)TILE_THREADS * TILE_V;
// tile status words: the state in the top two bits, a count below
constexpr unsigned long long ST_PART = 1ull << 62, ST_FULL = 2ull << 62;
constexpr unsigned long long ST_VALUE = (1ull << 62) - 1;

__device__ void st_publish(unsigned long long *status, uint64_t tile, unsigned long long w)
{
	cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(status[tile])
		.store(w, cuda::memory_order_relaxed);
}

union vec16 {
	uint4 v;
	unsigned long long q[2];
	uint32_t w[4];
	uint16_t h[8];
	uint8_t b[16];
};

// bit j set when unit j of the 16 bytes differs
template <class T> __device__ unsigned change_mask(const vec16 &x);
template <> __device__ unsigned change_mask<uint8_t>(const vec16 &x)
{
	unsigned m = 0;
	for (int k = 0; k < 4; k++) {
		uint32_t w = x.w[k];
		// each byte's high bit: set when the byte is not zero
		uint32_t nz = ((w & 0x7f7f7f7fu) + 0x7f7f7f7fu | w) & 0x80808080u;
		m |= ((nz >> 7 & 1) | (nz >> 14 & 2) | (nz >> 21 & 4) | (nz >> 28 & 8)) << (4 * k);
	}
	return m;
}
template <> __device__ unsigned change_mask<uint16_t>(const vec16 &x)
{
	unsigned m = 0;
	for (int k = 0; k < 8; k++)
		m |= (unsigned)(x.h[k] != 0) << k;
	return m;
}
template <> __device__ unsigned change_mask<uint32_t>(const vec16 &x)
{
	unsigned m = 0;
	for (int k = 0; k < 4; k++)
		m |= (unsigned)(x.w[k] != 0) << k;
	return m;
}
template <> __device__ unsigned change_mask<unsigned long long>(const vec16 &x)
{
	return (unsigned)(x.q[0] != 0) | (unsigned)(x.q[1] != 0) << 1;
}

// unit j of the 16 bytes, by shifts (a dynamic index into the bytes
// would put the vectors in local memory)
template <class T> __device__ T unit_of(const vec16 &x, unsigned j)
{
	unsigned bit = j * 8 * sizeof(T);
	return (T)((bit < 64 ? x.q[0] : x.q[1]) >> (bit & 63));
}

// vector g of both buffers (va, vb: the aligned base), units outside
// [0, n) read as equal
template <class T>
__device__ void load_vec(const uint4 *__restrict__ va, const uint4 *__restrict__ vb,
			 const T *__restrict__ a, const T *__restrict__ b, uint64_t n, unsigned h,
			 uint64_t g, vec16 &x, vec16 &y)
{
	constexpr unsigned U = 16 / sizeof(T);
	uint64_t first = g * U; // of the vector's units, counted from h before a
	if (first >= h && first - h + U <= n) {
		x.v = __ldg(va + g);
		y.v = __ldg(vb + g);
		return;
	}
	unsigned long long xq[2] = {0, 0}, yq[2] = {0, 0};
#pragma unroll
	for (unsigned j = 0; j < U; j++) {
		uint64_t i = first + j;
		if (i < h || i - h >= n)
			continue;
		unsigned bit = j * 8 * sizeof(T);
		xq[bit / 64] |= (unsigned long long)a[i - h] << (bit & 63);
		yq[bit / 64] |= (unsigned long long)b[i - h] << (bit & 63);
	}
	x.q[0] = xq[0], x.q[1] = xq[1];
	y.q[0] = yq[0], y.q[1] = yq[1];
}

template <class T>
__global__ void __launch_bounds__(TILE_THREADS)
	tiles_k(const T *__restrict__ a, const T *__restrict__ b, uint64_t n, unsigned h,
		uint64_t nvec, int newv, uint64_t *__restrict__ pos, T *__restrict__ val,
		unsigned long long cap, unsigned long long *__restrict__ d_count,
		unsigned long long *status, unsigned long long *counter)
{
	constexpr unsigned U = 16 / sizeof(T);
	using scan_t = cub::BlockScan<unsigned long long, TILE_THREADS>;
	__shared__ typename scan_t::TempStorage scan_tmp;
	__shared__ unsigned long long s_tile, s_prefix;

	if (threadIdx.x == 0)
		s_tile = atomicAdd(counter, 1ull);
	__syncthreads();
	const uint64_t tile = s_tile;
	const uint4 *va = (const uint4 *)((const uint8_t *)a - h * sizeof(T));
	const uint4 *vb = (const uint4 *)((const uint8_t *)b - h * sizeof(T));

	vec16 x[TILE_V], y[TILE_V];
	unsigned mask[TILE_V];
	unsigned long long packed = 0;
#pragma unroll
	for (int v = 0; v < TILE_V; v++) { // every load in flight before any is used
		uint64_t g = tile * TILE_VECS + (uint64_t)v * TILE_THREADS + threadIdx.x;
		if (g < nvec)
			load_vec<T>(va, vb, a, b, n, h, g, x[v], y[v]);
		else
			x[v].q[0] = x[v].q[1] = y[v].q[0] = y[v].q[1] = 0;
	}
#pragma unroll
	for (int v = 0; v < TILE_V; v++) {
		vec16 d;
		d.q[0] = x[v].q[0] ^ y[v].q[0];
		d.q[1] = x[v].q[1] ^ y[v].q[1];
		x[v] = d; // from here on x holds the XOR masks
		mask[v] = change_mask<T>(d);
		packed |= (unsigned long long)__popc(mask[v]) << (16 * v);
	}
	unsigned long long excl, agg;
	scan_t(scan_tmp).ExclusiveSum(packed, excl, agg);
	unsigned long long total = 0;
#pragma unroll
	for (int v = 0; v < TILE_V; v++)
		total += agg >> (16 * v) & 0xffff;

	// the tile's offset: the look-back, by the first warp
	if (threadIdx.x < 32) {
		const unsigned lane = threadIdx.x;
		unsigned long long before = 0;
		if (tile == 0) {
			if (lane == 0)
				st_publish(status, 0, ST_FULL | total);
		} else {
			if (lane == 0)
				st_publish(status, tile, ST_PART | total);
			long long p = (long long)tile - 1 - (long long)lane;
			for (;;) {
				unsigned long long w = ST_FULL;
				if (p >= 0) {
					cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>
						st(status[p]);
					while (!((w = st.load(cuda::memory_order_relaxed)) >> 62))
						__nanosleep(20);
				}
				unsigned full = __ballot_sync(0xffffffffu, (w >> 62) == 2);
				// the nearest full predecessor ends the window
				unsigned last = full ? (unsigned)__ffs(full) - 1 : 31;
				unsigned long long c = lane <= last ? (w & ST_VALUE) : 0;
				for (int o = 16; o; o >>= 1)
					c += __shfl_down_sync(0xffffffffu, c, o);
				before += __shfl_sync(0xffffffffu, c, 0);
				if (full)
					break;
				p -= 32;
			}
			if (lane == 0)
				st_publish(status, tile, ST_FULL | (before + total));
		}
		if (lane == 0) {
			s_prefix = before;
			if ((tile + 1) * TILE_VECS >= nvec)
				*d_count = before + total;
		}
	}
	__syncthreads();

	unsigned long long off = s_prefix;
#pragma unroll
	for (int v = 0; v < TILE_V; v++) {
		unsigned long long o = off + (excl >> (16 * v) & 0xffff);
		uint64_t g = tile * TILE_VECS + (uint64_t)v * TILE_THREADS + threadIdx.x;
		for (unsigned m = mask[v]; m; m &= m - 1, o++) {
			if (o >= cap)
				break;
			unsigned j = __ffs(m) - 1;
			pos[o] = g * U + j - h;
			val[o] = newv ? unit_of<T>(y[v], j) : unit_of<T>(x[v], j);
		}
		off += agg >> (16 * v) & 0xffff;
	}
}

template <class T>
cudaError_t tiles_t(const void *d_a, const void *d_b, uint64_t n, int newv, uint64_t *d_pos,
		    void *d_val, uint64_t cap, unsigned long long *d_count, void *d_scratch,
		    size_t *scratch_bytes, cudaStream_t s)
{
	constexpr unsigned U = 16 / sizeof(T);
	unsigned h = (unsigned)((uintptr_t)d_a % 16 / sizeof(T));
	uint64_t nvec = (n + U - 1 + U) / U; // at most; exact below
	uint64_t ntiles = (nvec + TILE_VECS - 1) / TILE_VECS;
	size_t need = (size_t)(ntiles + 1) * sizeof(unsigned long long);
	if (!d_scratch) {
		// h is not known before the buffers are: the most it can need
		*scratch_bytes = need;
		return cudaSuccess;
	}
	if (!n)
		return cudaMemsetAsync(d_count, 0, sizeof(*d_count), s);
	if (*scratch_bytes < need)
		return cudaErrorInvalidValue;
	nvec = (n + h + U - 1) / U;
	ntiles = (nvec + TILE_VECS - 1) / TILE_VECS;
	if (ntiles > 0x7fffffffu)
		return cudaErrorInvalidValue;
	unsigned long long *counter = (unsigned long long *)d_scratch, *status = counter + 1;
	cudaError_t err = cudaMemsetAsync(d_scratch, 0, (ntiles + 1) * sizeof(*counter), s);
	if (err)
		return err;
	tiles_k<T><<<(unsigned)ntiles, TILE_THREADS, 0, s>>>(
		(const T *)d_a, (const T *)d_b, n, h, nvec, newv, d_pos, (T *)d_val,
		(unsigned long long)cap, d_count, status, counter);
	return cudaGetLastError();
}

template <class T>
cudaError_t diff_t(const void *d_a, const void *d_b, uint64_t n, int newv, uint64_t *d_pos,
		   void *d_val, uint64_t cap, unsigned long long *d_count, void *d_scratch,
		   size_t *scratch_bytes, int method, cudaStream_t s)
{
	const T *a = (const T *)d_a, *b = (const T *)d_b;
	// the tiles read both buffers from one 16-byte phase; other pairs go
	// by positions (the scratch asked for is the larger of the two)
	if (method == DK_DIFF_TILES) {
		if (!d_scratch) {
			size_t t = 0, p = 0;
			cudaError_t err = tiles_t<T>(NULL, NULL, n, 0, NULL, NULL, 0, NULL, NULL, &t, s);
			if (!err)
				err = diff_t<T>(NULL, NULL, n, 0, NULL, NULL, 0, NULL, NULL, &p,
						DK_DIFF_POSITIONS, s);
			*scratch_bytes = t > p ? t : p;
			return err;
		}
		if ((uintptr_t)d_a % 16 == (uintptr_t)d_b % 16)
			return tiles_t<T>(d_a, d_b, n, newv, d_pos, d_val, cap, d_count, d_scratch,
					  scratch_bytes, s);
		method = DK_DIFF_POSITIONS;
	}
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
	if (method != DK_DIFF_POSITIONS && method != DK_DIFF_TRIPLES && method != DK_DIFF_TILES)
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
