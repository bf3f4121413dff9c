/* layout.h - layout maps: fixed affine maps between a layout's stored
 * tensors (a training rank's shards, a serving rank's parameters) and
 * canonical coordinates (Hugging Face tensor name, flat element index).
 *
 * The file format is specified in dcr-format-layout(5). In short: a map lists
 * the canonical tensors and, for every stored tensor of every rank it covers,
 * pieces. A piece is a box of stored elements:
 *
 *     stored flat    = soff + sum_k i_k * sstride_k
 *     canonical flat = coff + sum_k i_k * cstride_k      0 <= i_k < count_k
 *
 * of kind AFFINE (pure re-indexing, same dtype: XOR-safe), RESIDUAL (the
 * canonical value is a declared transform of the stored value: overwrite
 * only) or PADDING (stored elements that map to nothing, e.g. padded
 * vocabulary rows).
 *
 * Every loaded or built map is validated: shapes and spans are overflow
 * checked, pieces lie inside their tensors, and each piece is injective on
 * both sides (strides "dominate": sorted by stride, each stride exceeds the
 * largest offset reachable by the smaller ones), which also makes decoding a
 * flat index into a piece's multi-index a greedy division.
 */
#ifndef DCR_PLACEMENT_LAYOUT_H
#define DCR_PLACEMENT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include "core/dtype.h"
#include "core/error.h"
#include "core/safetensors.h"

#define DCR_LAYOUT_VERSION 1
#define DCR_LAYOUT_NONE UINT32_MAX

enum dcr_piece_kind { DCR_PIECE_AFFINE, DCR_PIECE_RESIDUAL, DCR_PIECE_PADDING };

/* Residual transforms, stored -> canonical. Values go through fp32; the
 * result is rounded to nearest even (NaN becomes the dtype's quiet NaN). */
enum dcr_xform {
	DCR_XF_NONE,  /* affine pieces */
	DCR_XF_CAST,  /* canonical = round(stored) */
	DCR_XF_ADD1,  /* canonical = round(fp32(stored) + 1.0f): zero-centered gamma */
};

struct dcr_layout_dim {
	uint64_t count, sstride, cstride;
};

struct dcr_layout_piece {
	int kind;            /* enum dcr_piece_kind */
	int xform;           /* enum dcr_xform */
	uint32_t tensor;     /* stored tensor index */
	uint32_t canon;      /* canonical tensor index, DCR_LAYOUT_NONE for padding */
	uint64_t soff, coff;
	uint64_t nelem;      /* product of counts */
	uint64_t slo, shi;   /* stored span [slo, shi): bounding, not dense */
	uint64_t clo, chi;   /* canonical span (0, 0 for padding) */
	unsigned ndim;       /* normalized: no count-1 dims, contiguous dims merged */
	struct dcr_layout_dim dim[DCR_MAX_NDIM];
	uint8_t sorder[DCR_MAX_NDIM], corder[DCR_MAX_NDIM]; /* dims by stride, desc */
	uint32_t ordinal;    /* position in the tensor's piece list as given */
};

struct dcr_layout_canon {
	char *name;
	int dtype;
	unsigned ndim;
	uint64_t shape[DCR_MAX_NDIM];
	uint64_t nelem;
	size_t npieces;
	uint32_t *pieces;    /* pieces mapping into it, sorted by clo */
};

struct dcr_layout_tensor {
	char *name;
	uint32_t rank;
	int dtype;
	unsigned ndim;
	uint64_t shape[DCR_MAX_NDIM];
	uint64_t nelem;
	size_t first_piece, npieces; /* its pieces, sorted by slo */
	uint64_t *maxhi;     /* prefix maximum of shi over its pieces */
};

struct dcr_layout {
	char *framework;     /* informational: "megatron", "vllm", ... (may be NULL) */
	char *model_type;    /* informational (may be NULL) */
	uint32_t tp, ep, world;
	int complete;        /* every rank present: canonical coverage is required */
	size_t ncanon;
	struct dcr_layout_canon *canon;    /* in map order */
	size_t ntensors;
	struct dcr_layout_tensor *tensors; /* in map order */
	size_t npieces;
	struct dcr_layout_piece *pieces;   /* grouped by tensor, sorted by slo */
	/* private */
	size_t cap_canon, cap_tensors, cap_pieces;
	uint32_t *chash;     /* open addressing over canon names */
	size_t chash_size;
	uint32_t *tsorted;   /* tensors sorted by (rank, name) */
	int finished;
};

/* ---- building and loading ------------------------------------------ */

struct dcr_layout *dcr_layout_new(void);
void dcr_layout_free(struct dcr_layout *L);
int dcr_layout_set_info(struct dcr_layout *L, const char *framework,
			const char *model_type, uint32_t tp, uint32_t ep,
			uint32_t world, int complete, struct dcr_err *e);
/* Returns the canonical tensor's index (>= 0) or a negative error. */
int dcr_layout_add_canon(struct dcr_layout *L, const char *name, int dtype,
			 unsigned ndim, const uint64_t *shape, struct dcr_err *e);
/* Returns the stored tensor's index (>= 0) or a negative error. */
int dcr_layout_add_tensor(struct dcr_layout *L, uint32_t rank, const char *name,
			  int dtype, unsigned ndim, const uint64_t *shape,
			  struct dcr_err *e);
/* Add a piece to stored tensor `tensor`. canon is a canonical name (NULL for
 * padding); dims are outer to inner (cstride ignored for padding). */
int dcr_layout_add_piece(struct dcr_layout *L, uint32_t tensor, int kind,
			 int xform, const char *canon, uint64_t soff,
			 uint64_t coff, unsigned ndim,
			 const struct dcr_layout_dim *dims, struct dcr_err *e);
/* Validate and index. Required before any lookup; add_* fail afterwards. */
int dcr_layout_finish(struct dcr_layout *L, struct dcr_err *e);

/* Parse/serialize the JSON form (dcr-format-layout(5)). */
int dcr_layout_parse(const char *json, size_t len, struct dcr_layout **out,
		     struct dcr_err *e);
int dcr_layout_load(const char *path, struct dcr_layout **out,
		    struct dcr_err *e);
/* malloc'd NUL-terminated JSON text. */
int dcr_layout_dump(const struct dcr_layout *L, char **out, struct dcr_err *e);
/* Atomic write; path "-" writes to stdout. */
int dcr_layout_save(const struct dcr_layout *L, const char *path,
		    struct dcr_err *e);

/* ---- lookups -------------------------------------------------------- */

int dcr_layout_find_canon(const struct dcr_layout *L, const char *name); /* -1 */
int dcr_layout_find_tensor(const struct dcr_layout *L, uint32_t rank,
			   const char *name); /* -1 */
static inline const struct dcr_layout_piece *
dcr_layout_tensor_piece(const struct dcr_layout *L, uint32_t tensor, size_t k)
{
	return &L->pieces[L->tensors[tensor].first_piece + k];
}

/* Stored flat index -> canonical. Returns 1 and fills canon/cflat when the
 * element maps to a canonical element, 0 for a padding element (canon set to
 * DCR_LAYOUT_NONE), DCR_ENOTFOUND when no piece covers it (a map that failed
 * dcr_layout_check), -ERANGE for an index outside the tensor. piece may be
 * NULL. O(log pieces) on a checked map. */
int dcr_layout_to_canonical(const struct dcr_layout *L, uint32_t tensor,
			    uint64_t sflat, uint32_t *canon, uint64_t *cflat,
			    uint32_t *piece);

/* Decode inside one piece: 1 and the other side's index, or 0 if the index
 * is not an element of the piece. */
int dcr_layout_piece_s2c(const struct dcr_layout_piece *p, uint64_t sflat,
			 uint64_t *cflat);
int dcr_layout_piece_c2s(const struct dcr_layout_piece *p, uint64_t cflat,
			 uint64_t *sflat);

/* Placement: canonical tensor `canon`, n canonical flat indices sorted
 * ascending (duplicates allowed). Produces every stored element holding one of
 * them: replicas give several hits per index, an index held nowhere gives
 * none. Hits are sorted by (tensor, stored). Cost per piece: two binary
 * searches plus a decode per index inside the piece's canonical span. */
struct dcr_layout_hit {
	uint64_t pos;      /* index into idx[] */
	uint64_t stored;   /* stored flat index */
	uint32_t tensor;
	uint32_t piece;
};
int dcr_layout_place(const struct dcr_layout *L, uint32_t canon,
		     const uint64_t *idx, size_t n, struct dcr_layout_hit **out,
		     size_t *nout, struct dcr_err *e);

/* Contiguous runs of a piece: calls fn(arg, sflat, cflat, len) for each
 * maximal run where both sides advance by one (cflat is 0 for padding).
 * Stops at and returns the first nonzero fn result. */
typedef int (*dcr_layout_run_fn)(void *arg, uint64_t sflat, uint64_t cflat,
				 uint64_t len);
int dcr_layout_piece_runs(const struct dcr_layout_piece *p,
			  dcr_layout_run_fn fn, void *arg);

/* ---- checking -------------------------------------------------------- */

struct dcr_layout_report {
	uint64_t stored_elems;     /* all stored elements */
	uint64_t affine_elems, residual_elems, padding_elems;
	uint64_t canon_elems;      /* all canonical elements */
	uint64_t canon_uncovered;  /* canonical elements no stored element holds */
	uint64_t canon_replicated; /* canonical elements held more than once */
	uint64_t replica_copies;   /* extra copies beyond the first, summed */
	char problem[1024];        /* first gap/overlap/duplicate, "" if none */
};

/* Prove every stored element of every stored tensor is covered by exactly
 * one piece, and no stored tensor holds a canonical element twice; when the
 * map is complete, also that every canonical element is held somewhere.
 * Returns 0 (exact), 1 (problem described in r->problem), or a negative
 * error (e.g. a map too fragmented to check). */
#define DCR_LAYOUT_MAX_RUNS (1ULL << 26)
int dcr_layout_check(const struct dcr_layout *L, struct dcr_layout_report *r,
		     struct dcr_err *e);

/* ---- residual transforms --------------------------------------------- */

const char *dcr_xform_name(int xf);
int dcr_xform_parse(const char *s); /* -1 if unknown */
/* 1 if xf can convert between these dtypes (F32, BF16, F16). */
int dcr_xform_supported(int xf, int stored_dt, int canon_dt);
/* stored bits -> canonical bits. */
uint64_t dcr_xform_forward(int xf, int stored_dt, int canon_dt, uint64_t bits);
/* canonical bits -> stored bits (for placement; not always an exact inverse,
 * which is why residual placements are overwrites). */
uint64_t dcr_xform_inverse(int xf, int stored_dt, int canon_dt, uint64_t bits);

#endif
