/* pset.h - the payloads of a pack that have arrived, by index, with their
 * sizes and digests: memory in proportion to the payloads that arrived,
 * never to the indices they claim (an index near 2^32 costs one entry).
 * Internal to libdcr (not installed). */
#ifndef DCR_CORE_PSET_H
#define DCR_CORE_PSET_H

#include <stddef.h>
#include <stdint.h>

#include "core/digest.h"

struct pset_ent {
	uint32_t idx;
	uint64_t size;
	dcr_digest digest;
};

/* Sorted by index, no index twice. */
struct pset {
	struct pset_ent *v;
	size_t n, cap;
};

/* The entry of index idx, or NULL. */
const struct pset_ent *pset_find(const struct pset *s, uint32_t idx);
/* Add idx: 1 when added, 0 when it is there already with this size and
 * digest (a duplicate), -EEXIST when it is there with others, -ENOMEM. */
int pset_add(struct pset *s, uint32_t idx, uint64_t size, const dcr_digest *d);
/* Whether the set holds exactly the indices 0..n-1. */
int pset_is_range(const struct pset *s, uint32_t n);
void pset_free(struct pset *s);

#endif
