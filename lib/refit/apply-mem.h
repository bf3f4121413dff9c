/* apply-mem.h - applying a pack to tensors in memory, in place: host
 * memory, or CUDA device memory through the dcr_cuda_* module. The hook a
 * serving process's weight loader calls instead of reloading from disk.
 *
 * The pack is read whole and checked as dcr_apply_pack checks it (every
 * payload's trailer, the manifest's payload digests and counts, the base);
 * then every tensor an item touches is looked up, its new bytes computed
 * and hashed on the host, and compared with the manifest's target digest,
 * before any of them is written: a pack that does not fit the tensors'
 * bits changes nothing. Only then are the changes written, on the device
 * for device tensors. See libdcr(3), DEVICE MEMORY.
 */
#ifndef DCR_REFIT_APPLY_MEM_H
#define DCR_REFIT_APPLY_MEM_H

#include "core/cuda.h"
#include "core/packio.h"
#include "core/trust.h"

/* One tensor of the caller's, as its lookup describes it. */
struct dcr_mem_tensor {
	void *data;   /* its stored bytes: nelem * dtype bits / 8 of them */
	int device;   /* DCR_DEVICE_CPU: host memory; DCR_DEVICE_CUDA: device memory */
	int dtype;    /* enum dcr_dtype */
	unsigned ndim;
	uint64_t shape[DCR_MAX_NDIM];
};

struct dcr_mem_apply_opts {
	/* Fill *t for the tensor `name` and return 0, or DCR_ENOTFOUND when
	 * the caller holds no such tensor, or another negative code (with a
	 * message in e) to stop the apply before anything is written. Called
	 * from the calling thread, at most once per tensor. */
	int (*lookup)(void *ctx, const char *name, struct dcr_mem_tensor *t, struct dcr_err *e);
	void *ctx;
	/* cudaStream_t for device tensors (NULL: the default stream); every
	 * copy and kernel of the apply runs on it, and it is synchronized
	 * before the call returns. */
	void *stream;
	/* The state id the tensors hold, when the caller knows it (a previous
	 * result's target): it must be the pack's base (or one of its
	 * alternative bases, or anything for a dense copy); it equal to the
	 * target makes the call a no-op (res->already). NULL: the target
	 * digests alone decide. */
	const dcr_digest *base;
	/* Also look up and hash the tensors no item touches: then success
	 * means every tensor of the target holds its target digest. */
	int check_all;
	/* Changes per upload to the device (default 1 Mi). */
	size_t batch;
	void (*progress)(void *ctx, uint64_t done, uint64_t total); /* bytes hashed */
	void *progress_ctx;
	const char *what; /* names the pack in messages */
	/* The keys the pack's manifest must be signed by, and the least signed
	 * version (NULL or no keys: none required): checked at the manifest,
	 * before any tensor is looked up (DCR_ETRUST), as dcr_apply_pack does. */
	const struct dcr_trust *trust;
	/* The pack's items are held in memory until its manifest is checked:
	 * their first held_plain bytes as they came (0: 256 MiB; UINT64_MAX:
	 * all), the rest zstd-squeezed where that halves them (about 0.3 s of
	 * a core per 256 MiB that does not), so that a pack whose items decode
	 * to far more than its own bytes holds about what it is. */
	uint64_t held_plain;
};

struct dcr_mem_apply_result {
	dcr_digest base, target;
	uint8_t attempt[16];
	uint64_t items, changes;
	uint64_t tensors_written; /* tensors changed in place */
	uint64_t tensors_checked; /* tensors hashed to their target digest */
	uint64_t removed;         /* tensors the target no longer has (left alone) */
	int already;              /* opts->base was the target: nothing to do */
};

/* Apply the pack read from in to the tensors the lookup names. Returns 0,
 * DCR_EBASE (opts->base is not the pack's base; nothing written),
 * DCR_EDIGEST (a tensor would not reach its target digest; nothing
 * written), DCR_ENOTFOUND (the caller lacks a tensor the pack changes),
 * DCR_EFORMAT (a bad pack, or a tensor of another dtype or shape than the
 * target's), -ENOTSUP or -ENODEV (device tensors without CUDA), or another
 * negative code. Only a failure of the device while it writes (a CUDA
 * error after every check passed) leaves tensors partly written; its
 * message says so. */
int dcr_apply_mem(struct dcr_pack_in *in, const struct dcr_mem_apply_opts *o,
		  struct dcr_mem_apply_result *res, struct dcr_err *e);

#endif
