/* retry.h - overwrite-only deltas with alternative bases, for a retry that
 * must fit receivers in either state (see dcr(7), COMMIT PROTOCOL). */
#ifndef DCR_REFIT_RETRY_H
#define DCR_REFIT_RETRY_H

#include "core/delta.h"

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

#endif
