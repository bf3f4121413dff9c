/* squash.h - composing a chain of deltas into one, for a receiver that
 * missed versions (see dcr(7), COMMIT PROTOCOL). */
#ifndef DCR_REFIT_SQUASH_H
#define DCR_REFIT_SQUASH_H

#include "core/delta.h"

struct dcr_squash_stats {
	dcr_digest base, target;
	uint64_t items, changes, bytes_in, bytes_out;
};

/* Compose the chain of delta files paths[0..n) (each one's base is the
 * previous one's target) into one delta from the first base to the last
 * target, written to sink. XOR then XOR = XOR of the masks; anything then
 * OVERWRITE = that overwrite; OVERWRITE then XOR = OVERWRITE of value ^
 * mask. Memory is bounded by one item per input and one output range. */
int dcr_squash(const char *const *paths, size_t n, const uint8_t *attempt,
	       struct dcr_sink sink, const char *what, struct dcr_squash_stats *st,
	       struct dcr_err *e);

#endif
