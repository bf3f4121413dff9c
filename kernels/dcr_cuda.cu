// dcr_cuda.cu - CUDA kernels for diff (XOR + compaction of changed
// positions) and apply (scatter of new stored bits). See dcr_cuda.h.
#include <cerrno>
#include <new>
#include <cstdint>

#include <cuda_runtime.h>

#include "dcr_cuda.h"

namespace {

constexpr int kThreads = 256;

// Pass 1: per block, count changed units.
__global__ void count_changes(const uint16_t *a, const uint16_t *b, size_t n,
			      unsigned *counts)
{
	__shared__ unsigned total;
	if (threadIdx.x == 0)
		total = 0;
	__syncthreads();
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n && a[i] != b[i])
		atomicAdd(&total, 1u);
	__syncthreads();
	if (threadIdx.x == 0)
		counts[blockIdx.x] = total;
}

// Pass 2: write each block's changes at its exclusive-scan offset, in
// increasing position order within the block (a warp-ballot prefix).
__global__ void emit_changes(const uint16_t *a, const uint16_t *b, size_t n,
			     const unsigned long long *offsets, uint64_t *pos, uint16_t *val)
{
	__shared__ unsigned warp_counts[kThreads / 32];
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	bool changed = i < n && a[i] != b[i];
	unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	unsigned ballot = __ballot_sync(0xffffffffu, changed);
	if (lane == 0)
		warp_counts[warp] = __popc(ballot);
	__syncthreads();
	if (!changed)
		return;
	unsigned before = 0;
	for (unsigned w = 0; w < warp; w++)
		before += warp_counts[w];
	before += __popc(ballot & ((1u << lane) - 1));
	unsigned long long at = offsets[blockIdx.x] + before;
	pos[at] = i;
	val[at] = (uint16_t)(a[i] ^ b[i]);
}

__global__ void scatter(uint16_t *dst, size_t n, const uint64_t *pos, const uint16_t *val,
			size_t m, int xor_)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= m || pos[i] >= n)
		return;
	dst[pos[i]] = xor_ ? (uint16_t)(dst[pos[i]] ^ val[i]) : val[i];
}

int err(cudaError_t e)
{
	return e == cudaSuccess ? 0 : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? -ENODEV : -EIO);
}

} // namespace

extern "C" int dcr_gpu_available(void)
{
	int n = 0;
	return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

extern "C" int dcr_gpu_diff16(const uint16_t *a, const uint16_t *b, size_t n, uint64_t *pos,
			      uint16_t *val, size_t *nout)
{
	*nout = 0;
	if (!dcr_gpu_available())
		return -ENODEV;
	if (!n)
		return 0;
	size_t blocks = (n + kThreads - 1) / kThreads;
	uint16_t *da = nullptr, *db = nullptr, *dval = nullptr;
	uint64_t *dpos = nullptr;
	unsigned *dcounts = nullptr;
	unsigned long long *doff = nullptr;
	unsigned *hcounts = nullptr;
	unsigned long long *hoff = nullptr;
	int r = err(cudaMalloc(&da, n * 2));
	if (!r) r = err(cudaMalloc(&db, n * 2));
	if (!r) r = err(cudaMalloc(&dcounts, blocks * sizeof(unsigned)));
	if (!r) r = err(cudaMalloc(&doff, blocks * sizeof(unsigned long long)));
	if (!r) r = err(cudaMemcpy(da, a, n * 2, cudaMemcpyHostToDevice));
	if (!r) r = err(cudaMemcpy(db, b, n * 2, cudaMemcpyHostToDevice));
	if (!r) {
		count_changes<<<(unsigned)blocks, kThreads>>>(da, db, n, dcounts);
		r = err(cudaGetLastError());
	}
	hcounts = new (std::nothrow) unsigned[blocks];
	hoff = new (std::nothrow) unsigned long long[blocks];
	if (!r && (!hcounts || !hoff))
		r = -ENOMEM;
	if (!r) r = err(cudaMemcpy(hcounts, dcounts, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost));
	unsigned long long total = 0;
	if (!r) {
		for (size_t k = 0; k < blocks; k++) {
			hoff[k] = total;
			total += hcounts[k];
		}
		r = err(cudaMemcpy(doff, hoff, blocks * sizeof(unsigned long long), cudaMemcpyHostToDevice));
	}
	if (!r && total) {
		r = err(cudaMalloc(&dpos, total * sizeof(uint64_t)));
		if (!r) r = err(cudaMalloc(&dval, total * 2));
		if (!r) {
			emit_changes<<<(unsigned)blocks, kThreads>>>(da, db, n, doff, dpos, dval);
			r = err(cudaGetLastError());
		}
		if (!r) r = err(cudaMemcpy(pos, dpos, total * sizeof(uint64_t), cudaMemcpyDeviceToHost));
		if (!r) r = err(cudaMemcpy(val, dval, total * 2, cudaMemcpyDeviceToHost));
	}
	if (!r)
		*nout = (size_t)total;
	delete[] hcounts;
	delete[] hoff;
	cudaFree(da);
	cudaFree(db);
	cudaFree(dcounts);
	cudaFree(doff);
	cudaFree(dpos);
	cudaFree(dval);
	return r;
}

extern "C" int dcr_gpu_apply16(uint16_t *dst, size_t n, const uint64_t *pos, const uint16_t *val,
			       size_t m, int xor_)
{
	if (!dcr_gpu_available())
		return -ENODEV;
	uint16_t *ddst = nullptr, *dval = nullptr;
	uint64_t *dpos = nullptr;
	int r = err(cudaMalloc(&ddst, n * 2 + 2));
	if (!r) r = err(cudaMalloc(&dpos, m * sizeof(uint64_t) + 8));
	if (!r) r = err(cudaMalloc(&dval, m * 2 + 2));
	if (!r) r = err(cudaMemcpy(ddst, dst, n * 2, cudaMemcpyHostToDevice));
	if (!r) r = err(cudaMemcpy(dpos, pos, m * sizeof(uint64_t), cudaMemcpyHostToDevice));
	if (!r) r = err(cudaMemcpy(dval, val, m * 2, cudaMemcpyHostToDevice));
	if (!r && m) {
		scatter<<<(unsigned)((m + kThreads - 1) / kThreads), kThreads>>>(ddst, n, dpos, dval, m, xor_);
		r = err(cudaGetLastError());
	}
	if (!r) r = err(cudaMemcpy(dst, ddst, n * 2, cudaMemcpyDeviceToHost));
	cudaFree(ddst);
	cudaFree(dpos);
	cudaFree(dval);
	return r;
}
