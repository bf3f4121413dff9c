/* place.h - a canonical delta placed into a serving rank's files.
 *
 * A canonical delta (partial or full, PLAIN-coded items) placed
 * into one serving rank's files. The canonical changes are mapped to the
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

#endif
