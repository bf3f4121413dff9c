/* layout-delta.h - deltas through layout maps (dcr(7) "Placement").
 *
 * dcr_rankdiff: one training rank diffs its own shards (BASE and NEW in the
 *   map's stored layout for that rank) and writes a PARTIAL delta in
 *   canonical coordinates. Affine pieces give XOR masks (same dtype, the
 *   bits move unchanged); residual pieces convert old and new stored values
 *   with the piece's transform and give OVERWRITE items of the converted new
 *   bits where the converted bits differ; padding is ignored. A canonical
 *   element held by several stored tensors (replicas: norms on every tensor-
 *   parallel rank, non-expert weights on every expert-parallel group) is
 *   sent only by its OWNER: the holder with the lowest (rank, stored tensor
 *   index in the map). Changes are collected per canonical tensor, which is
 *   encoded as soon as the rank's last stored tensor holding it has been
 *   read, so memory follows the rank's shards, never the model.
 *
 * dcr_merge: a k-way merge of the ranks' partial deltas, one canonical
 *   tensor at a time: the union of their changes, each element once (two
 *   inputs that carry the same element must agree bit for bit). With the
 *   canonical target's tensor digests (and its base id) the result is an
 *   ordinary, fully verifiable delta; without them it is PARTIAL again.
 *
 * dcr_place: a canonical delta (partial or full, PLAIN-coded items) placed
 *   into one serving rank's files. The canonical changes are mapped to the
 *   rank's stored elements (replicas included), resolved against the bits the
 *   receiver holds, and handed to dcr_apply as an ordinary delta from the
 *   receiver's current state, so the journal, the crash safety and the
 *   digest checks are dcr_apply's. .dcr/layout-applied records which
 *   canonical delta took the receiver from which state to which, so that a
 *   rerun after a crash does not place the same XOR masks twice.
 */
#ifndef DCR_LAYOUT_DELTA_H
#define DCR_LAYOUT_DELTA_H

#include "delta.h"
#include "layout.h"
#include "receiver.h"

struct dcr_rankdiff_opts {
	const struct dcr_layout *map;  /* must describe every rank (owner rule) */
	uint32_t rank;
	const char *base, *target;     /* the rank's shards: directory or file */
	const uint8_t *attempt;        /* 16 bytes, or NULL for random */
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
};

int dcr_rankdiff(const struct dcr_rankdiff_opts *o, struct dcr_sink sink,
		 struct dcr_rankdiff_stats *st, struct dcr_err *e);

struct dcr_merge_opts {
	const char *const *inputs;     /* delta files ("-" is standard input) */
	size_t ninputs;
	const char *target_digests;    /* "HEX<TAB>NAME" lines, or NULL: partial */
	const dcr_digest *base_id;     /* the canonical base (needed with digests) */
	const uint8_t *attempt;        /* 16 bytes, or NULL for random */
	uint64_t chunk_elems;
	const char *what;
};

struct dcr_merge_stats {
	dcr_digest target;
	int partial;
	uint64_t tensors, items, changed, duplicates, bytes_out;
};

int dcr_merge(const struct dcr_merge_opts *o, struct dcr_sink sink,
	      struct dcr_merge_stats *st, struct dcr_err *e);

struct dcr_place_result {
	struct dcr_apply_result apply; /* in the serving rank's own state ids */
	uint64_t canon_changes;        /* canonical changes read */
	uint64_t stored_changes;       /* stored elements written (replicas too) */
	int already;                   /* this delta was placed here before */
};

/* Read a canonical delta from src and place it into the receiver, which
 * holds serving rank `rank` of map L. */
int dcr_place(struct dcr_receiver *rc, const struct dcr_layout *L, uint32_t rank,
	      struct dcr_source src, const uint8_t *head, size_t head_len,
	      const struct dcr_apply_opts *o, struct dcr_place_result *res,
	      struct dcr_err *e);

#endif
