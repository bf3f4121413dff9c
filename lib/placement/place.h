/* place.h - a canonical delta placed into a serving rank's files.
 *
 * A canonical delta (partial or full) placed into one serving rank's
 * files. Items coded against the receiver's bits (codecs delta and
 * classed, dcr-diff's default) need the old canonical bits of their whole
 * range: one rank resolves those it holds entirely (replicated tensors,
 * slices that items do not cross) and refuses the others;
 * dcr_place_replica reads them through the map from every rank of a
 * replica. The canonical changes are mapped to the
 * rank's stored elements (replicas included), resolved against the bits the
 * receiver holds, and handed to dcr_apply as an ordinary delta from the
 * receiver's current state, so the journal, the crash safety and the
 * digest checks are dcr_apply's. .dcr/layout-applied records which
 * canonical delta took the receiver from which state to which, so that a
 * rerun after a crash does not place the same XOR masks twice.
 */
#ifndef DCR_PLACEMENT_PLACE_H
#define DCR_PLACEMENT_PLACE_H

#include "core/delta.h"
#include "placement/layout.h"
#include "refit/apply.h"

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

/* Place a canonical delta into every serving rank of map L: rcs[r] holds
 * rank r, nranks all of the map's ranks (a replica, e.g. a tensor-parallel
 * group on one node). Items coded against the receiver's bits are first
 * resolved against the canonical bits read through the map from the
 * ranks' files, into a PLAIN delta kept in rcs[0]'s .dcr/layout-resolved
 * (with .dcr/layout-resolved.src naming the canonical delta) until every
 * rank has placed it: a rerun after a crash uses it, not the bits the
 * ranks placed before already changed. res has nranks entries. */
int dcr_place_replica(struct dcr_receiver *const *rcs, uint32_t nranks,
		      const struct dcr_layout *L, struct dcr_source src, const uint8_t *head,
		      size_t head_len, const struct dcr_apply_opts *o,
		      struct dcr_place_result *res, struct dcr_err *e);

#endif
