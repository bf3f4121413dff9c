/* checkpoint.h - a checkpoint: a directory of safetensors files (with or
 * without the Hugging Face index), or a single file; tensors by name. */
#ifndef DCR_CORE_CHECKPOINT_H
#define DCR_CORE_CHECKPOINT_H

#include "core/buf.h"
#include "core/safetensors.h"

struct dcr_ckpt_tensor {
	const struct dcr_tensor_info *info;
	size_t file;          /* index into files[] */
	const uint8_t *data;  /* mapped bytes, info->end - info->begin long */
	uint64_t file_off;    /* absolute offset of the data in its file */
	int fd;               /* its file, open read-only */
};

struct dcr_ckpt {
	char *path;              /* directory, or the single file */
	int is_dir;
	int has_index;           /* model.safetensors.index.json present */
	size_t nfiles;
	char **file_names;       /* relative to path (basename for single file) */
	struct dcr_st **files;
	size_t ntensors;
	struct dcr_ckpt_tensor *tensors; /* sorted by name (strcmp) */
};

/* Open a directory of *.safetensors (with or without the HF index) or a
 * single .safetensors file. */
int dcr_ckpt_open(const char *path, struct dcr_ckpt **out, struct dcr_err *e);
void dcr_ckpt_close(struct dcr_ckpt *c);
const struct dcr_ckpt_tensor *dcr_ckpt_find(const struct dcr_ckpt *c,
					    const char *name);
/* Is ct (or NULL) a tensor of this dtype and shape? */
int dcr_ckpt_tensor_is(const struct dcr_ckpt_tensor *ct, int dtype, unsigned ndim,
		       const uint64_t *shape);
uint64_t dcr_tensor_bytes(const struct dcr_tensor_info *t);
/* Bytes [off, off + n) of ct's data (within the tensor), at *out: read
 * into buf (reset, grown as needed) when ct has a file, else where they
 * are mapped. A copy from the page cache is about twice as fast as
 * reading a file's pages through its mapping for the first time (a
 * page-table entry and a TLB miss each). 0, or an error set in e. */
int dcr_ckpt_tensor_read(const struct dcr_ckpt_tensor *ct, uint64_t off, size_t n,
			 struct dcr_buf *buf, const uint8_t **out, struct dcr_err *e);

/* 0 if every file of c has the size and modification time it had when
 * opened; else DCR_EFORMAT naming the first that changed: something
 * wrote it while it was read (a save still in progress, an asynchronous
 * checkpoint), so what was read may be neither its old bytes nor its
 * new ones. */
int dcr_ckpt_unchanged(const struct dcr_ckpt *c, struct dcr_err *e);

/* A plain file name: no '/', no control characters, not "." or "..". */
int dcr_safe_file_name(const char *s);
#endif
