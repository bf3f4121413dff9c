/* dcr.h - public interface of libdcr.
 *
 * The library never prints and never exits. Every fallible function returns
 * 0 (or a count) on success and a negative errno-style code on failure, after
 * filling the caller's struct dcr_err with a one-line message.
 */
#ifndef DCR_H
#define DCR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DCR_VERSION_STRING "0.1.0"

/* ---- errors ---------------------------------------------------------- */

/* Library-specific codes, in addition to negative errno values. */
enum {
	DCR_EFORMAT = -10001,   /* malformed or hostile input */
	DCR_EBASE = -10002,     /* receiver is not at the delta's base */
	DCR_EDIGEST = -10003,   /* digest mismatch */
	DCR_ENOTFOUND = -10004, /* object or tensor does not exist */
	DCR_ECONFLICT = -10005, /* compare-and-set lost */
	DCR_EREMOTE = -10006,   /* remote server refused (4xx) */
	DCR_ELOCKED = -10007,   /* receiver busy */
};

struct dcr_err {
	int code;
	char msg[1024];
};

int dcr_err_set(struct dcr_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Like dcr_err_set, appending ": strerror(errnum)"; returns -errnum. */
int dcr_err_sys(struct dcr_err *e, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- dtypes ---------------------------------------------------------- */

enum dcr_dtype {
	DCR_DT_BOOL, DCR_DT_U8, DCR_DT_I8, DCR_DT_F8_E5M2, DCR_DT_F8_E4M3,
	DCR_DT_F8_E8M0, DCR_DT_F8_E4M3FNUZ, DCR_DT_F8_E5M2FNUZ, DCR_DT_I16,
	DCR_DT_U16, DCR_DT_F16, DCR_DT_BF16, DCR_DT_I32, DCR_DT_U32, DCR_DT_F32,
	DCR_DT_I64, DCR_DT_U64, DCR_DT_F64, DCR_DT_C64, DCR_DT_F4,
	DCR_DT_F6_E2M3, DCR_DT_F6_E3M2,
	DCR_DT_COUNT
};

const char *dcr_dtype_name(int dt);
int dcr_dtype_parse(const char *s); /* -1 if unknown */
unsigned dcr_dtype_bits(int dt);    /* bits per element */
/* Bytes per diff unit: the dtype's size, or 1 for sub-byte dtypes
 * (F4, F6_*), which are compared and changed byte by byte. */
unsigned dcr_dtype_unit(int dt);

/* ---- digests --------------------------------------------------------- */

#define DCR_DIGEST_LEN 32 /* SHA-256 */
typedef struct { uint8_t b[DCR_DIGEST_LEN]; } dcr_digest;

void dcr_digest_hex(const dcr_digest *d, char out[2 * DCR_DIGEST_LEN + 1]);
/* n bytes as 2 n lowercase hex digits and a NUL. */
void dcr_hex(const void *p, size_t n, char *out);
int dcr_digest_parse_hex(const char *s, dcr_digest *d); /* 0 or -1 */
int dcr_digest_is_zero(const dcr_digest *d);

/* ---- safetensors files ---------------------------------------------- */

#define DCR_MAX_NDIM 16
#define DCR_ST_MAX_HEADER 100000000ULL

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
/* Check every byte was written, fsync, rename into place, fsync dir. */
int dcr_st_writer_commit(struct dcr_st_writer *w, struct dcr_err *e);
void dcr_st_writer_free(struct dcr_st_writer *w); /* aborts if not committed */
/* Compute the data offsets (begin/end) of t[] laid out in order. */
int dcr_st_layout(struct dcr_tensor_info *t, size_t n, struct dcr_err *e);

/* ---- checkpoints ----------------------------------------------------- */

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

/* SHA-256 of a tensor's stored bytes. */
void dcr_tensor_digest(const struct dcr_ckpt_tensor *t, dcr_digest *out);

/* The state id binds names, dtypes, shapes and tensor digests. Entries must
 * be sorted by name. */
struct dcr_state_entry {
	const char *name;
	int dtype;
	unsigned ndim;
	const uint64_t *shape;
	dcr_digest digest;
};
void dcr_state_id(const struct dcr_state_entry *ent, size_t n, dcr_digest *out);
/* Hash every tensor (optionally return per-tensor digests, ntensors long,
 * in c->tensors order) and compute the state id. */
int dcr_ckpt_state_id(const struct dcr_ckpt *c, dcr_digest *id,
		      dcr_digest *per_tensor, struct dcr_err *e);

#endif
