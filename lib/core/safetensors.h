/* safetensors.h - reading and writing safetensors files, validated as the
 * reference implementation does. */
#ifndef DCR_CORE_SAFETENSORS_H
#define DCR_CORE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

#define DCR_MAX_NDIM 16
#define DCR_ST_MAX_HEADER 100000000ULL
#define DCR_ST_MAX_TENSORS 1000000 /* per file: a sane bound on what a header may declare */

struct dcr_tensor_info {
	char *name;
	int dtype;
	unsigned ndim;
	uint64_t shape[DCR_MAX_NDIM];
	uint64_t nelem;   /* product of shape */
	uint64_t begin;   /* byte offsets relative to the data section */
	uint64_t end;
};

struct dcr_st {
	char *path;
	int fd;
	const uint8_t *map;     /* whole file, read-only */
	uint64_t size;          /* file size */
	int64_t mtime_s, mtime_ns; /* modification time when opened (fd >= 0) */
	uint64_t data_off;      /* 8 + header length */
	size_t ntensors;
	struct dcr_tensor_info *tensors; /* in header order */
	size_t nmeta;
	char **meta_keys, **meta_vals;
};

/* Map and validate a safetensors file as the reference implementation does. */
int dcr_st_open(const char *path, struct dcr_st **out, struct dcr_err *e);
/* Validate an in-memory image (no file). The result borrows buf. */
int dcr_st_parse(const uint8_t *buf, uint64_t size, struct dcr_st **out,
		 struct dcr_err *e);
void dcr_st_close(struct dcr_st *st);
const struct dcr_tensor_info *dcr_st_find(const struct dcr_st *st,
					  const char *name);

/* Writing: describe tensors, then stream their bytes in order. */
struct dcr_st_writer;
int dcr_st_writer_new(const char *path, const struct dcr_tensor_info *t,
		      size_t n, const char *const *meta_kv, size_t nmeta,
		      struct dcr_st_writer **out, struct dcr_err *e);
int dcr_st_writer_write(struct dcr_st_writer *w, const void *buf, size_t len,
			struct dcr_err *e);
/* len zero bytes, reserved on the disk (posix_fallocate) rather than
 * written where the file system can (not tmpfs, where that is slower), so
 * that a tensor whose bytes come later costs no copy now and cannot fail
 * for room later. */
int dcr_st_writer_zeros(struct dcr_st_writer *w, uint64_t len, struct dcr_err *e);
/* Where the data section starts in the file (tensor t's bytes are at
 * that plus t.begin). */
uint64_t dcr_st_writer_data_off(const struct dcr_st_writer *w);
/* Check every byte was written, fsync, rename into place, fsync dir. */
int dcr_st_writer_commit(struct dcr_st_writer *w, struct dcr_err *e);
void dcr_st_writer_free(struct dcr_st_writer *w); /* aborts if not committed */
/* Compute the data offsets (begin/end) of t[] laid out in order. */
int dcr_st_layout(struct dcr_tensor_info *t, size_t n, struct dcr_err *e);

#endif
