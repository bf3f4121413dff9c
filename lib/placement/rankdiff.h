/* rankdiff.h - one training rank diffs its own shards.
 *
 * One training rank diffs its own shards (BASE and NEW in the
 * map's stored layout for that rank) and writes a PARTIAL delta in
 * canonical coordinates. Affine pieces give XOR masks (same dtype, the
 * bits move unchanged); residual pieces convert old and new stored values
 * with the piece's transform and give OVERWRITE items of the converted new
 * bits where the converted bits differ; padding is ignored. A canonical
 * element held by several stored tensors (replicas: norms on every tensor-
 * parallel rank, non-expert weights on every expert-parallel group) is
 * sent only by its OWNER: the holder with the lowest (rank, stored tensor
 * index in the map). Changes are collected per canonical tensor, which is
 * encoded as soon as the rank's last stored tensor holding it has been
 * read, so memory follows the rank's shards, never the model.
 *
 * After each tensor's items come its digest parts (a PARTS record,
 * dcr-format-delta(5)): the parts of the canonical tensor's stripe stream
 * that hold the elements this rank sends (its own and, of replicas, those
 * it is the owner of), from NEW's values, so that the parts of all ranks
 * join into the canonical target digest without any rank seeing the
 * whole tensor.
 */
#ifndef DCR_PLACEMENT_RANKDIFF_H
#define DCR_PLACEMENT_RANKDIFF_H

#include "core/delta.h"
#include "placement/layout.h"

struct dcr_rankdiff_opts {
	const struct dcr_layout *map;  /* must describe every rank (owner rule) */
	uint32_t rank;
	const char *base, *target;     /* the rank's shards: directory or file */
	const uint8_t *attempt;        /* 16 bytes, or NULL for random */
	const dcr_digest *base_id;     /* the canonical base's state id, or NULL (zero) */
	uint64_t chunk_elems;          /* canonical elements an item may span (1Mi) */
	const char *file;              /* TENSOR records' file (model.safetensors) */
	const char *what;              /* output name for messages */
};

struct dcr_rankdiff_stats {
	uint64_t stored_tensors, skipped_tensors; /* skipped: replicas only */
	uint64_t stored_bytes;         /* bytes of the rank's NEW shards */
	uint64_t stored_changed;       /* stored elements whose bits changed */
	uint64_t padding_changed, replica_changed, residual_same;
	uint64_t changed, items, tensors, bytes_out;
	uint64_t parts;                /* digest parts written */
};

int dcr_rankdiff(const struct dcr_rankdiff_opts *o, struct dcr_sink sink,
		 struct dcr_rankdiff_stats *st, struct dcr_err *e);

#endif
