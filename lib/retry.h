/* retry.h - overwrite-only deltas with alternative bases, and squashing a
 * chain of deltas into one (see dcr(7), COMMIT PROTOCOL). */
#ifndef DCR_RETRY_H
#define DCR_RETRY_H

#include "delta.h"

struct dcr_retry_opts {
	const char *base, *target;   /* checkpoint paths */
	const char *const *also;     /* checkpoints of alternative bases */
	size_t nalso;
	const dcr_digest *base_id;   /* trust this base state id */
	const uint8_t *attempt;      /* 16 bytes, or NULL for random */
	uint64_t chunk_elems;
	const char *what;
};

struct dcr_retry_stats {
	dcr_digest base, target;
	uint64_t changed, items, bytes_out;
	size_t nalt;
};

/* Write an overwrite-only delta from base to target that names the
 * alternative bases' state ids in a BASES record. */
int dcr_diff_retry(const struct dcr_retry_opts *o, struct dcr_sink sink,
		   struct dcr_retry_stats *st, struct dcr_err *e);

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
