/* lchg.h - canonical changes collected per tensor, and the items they
 * become: what a rank's diff and the merge share. Internal to libdcr. */
#ifndef DCR_PLACEMENT_LCHG_H
#define DCR_PLACEMENT_LCHG_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/delta.h"

/* One canonical change: index, value (XOR mask or new bits per enc), and
 * who sent it (rankdiff: the holder's key; merge: the input). */
struct lchg {
	uint64_t c;
	uint64_t val;
	uint32_t key;
	uint8_t enc;
	uint8_t shared; /* rankdiff: a lower holder may exist, check the owner */
};

struct lvec {
	struct lchg *v;
	size_t n, cap;
};

/* Order by canonical index, then by sender. */
int lchg_cmp(const void *a, const void *b);
int lvec_push(struct lvec *l, const struct lchg *c);
void lvec_free(struct lvec *l);
/* Framed ITEM records for sorted, distinct changes of tensor tidx: an item
 * spans at most `chunk` elements and holds changes of one encoding. */
int lchg_emit_items(struct dcr_buf *recs, uint32_t tidx, const struct lchg *v, size_t n,
		    unsigned unit, uint64_t chunk, uint64_t *nitems, struct dcr_err *e);

#endif
