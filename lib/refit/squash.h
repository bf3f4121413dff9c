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
/* The same, given base_dir, the checkpoint the chain starts from (its state
 * id must be the first delta's base): then items coded against the
 * receiver's bits (codecs delta and classed, dcr-diff's default), which
 * dcr_squash refuses, compose too. Each tensor is rebuilt from the base
 * through the chain, checked against the last delta's digest, and written
 * as its changes from the base, coded as dcr-diff codes them. Memory: the
 * largest tensor, plus one item per input. */
int dcr_squash_base(const char *const *paths, size_t n, const char *base_dir,
		    const uint8_t *attempt, struct dcr_sink sink, const char *what,
		    struct dcr_squash_stats *st, struct dcr_err *e);

#endif
