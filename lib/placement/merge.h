/* merge.h - merging the ranks' partial deltas.
 *
 * A k-way merge of the ranks' partial deltas, one canonical
 * tensor at a time: the union of their changes, each element once (two
 * inputs that carry the same element must agree bit for bit). With the
 * canonical target's tensor digests (and its base id) the result is an
 * ordinary, fully verifiable delta; without them it is PARTIAL again.
 */
#ifndef DCR_PLACEMENT_MERGE_H
#define DCR_PLACEMENT_MERGE_H

#include "core/delta.h"

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

#endif
