/* ipool.h - items worked on threads and handed back in the order they were
 * given: an apply resolves every item of a delta against the receiver's
 * bits before it is journaled (apply.c), and the replay decodes and
 * writes the journal's overwrites (journal.c). Internal to libdcr. */
#ifndef DCR_REFIT_IPOOL_H
#define DCR_REFIT_IPOOL_H

#include "core/item.h"

struct ap_ipool;

/* What decoding an item takes: its positions and values, 16 bytes per
 * change it declares. The pool, and the journal's check, let decodes in
 * while those they hold stay within AP_DECODE_BUDGET (one always). */
#define AP_DECODE_BUDGET (64ull << 20)
static inline uint64_t ap_decode_bytes(const struct dcr_item *it)
{
	return 16 * (uint64_t)it->n;
}

/* The work on one item: in (its data a copy the pool keeps), the caller's
 * arg for it, scratch changes and bytes of the thread's own, out's data to
 * be put in enc (out starts as a copy of in). 0 or an error set in e. */
typedef int ap_ipool_fn(void *ctx, const struct dcr_item *in, void *arg, struct dcr_changes *ch,
			struct dcr_buf *scratch, struct dcr_buf *enc, struct dcr_item *out,
			struct dcr_err *e);

/* A pool running fn on `threads` threads (< 1: one per core; with one,
 * each item is worked on in ap_ipool_get, on the caller's thread). NULL:
 * no memory. */
struct ap_ipool *ap_ipool_new(int threads, ap_ipool_fn *fn, void *ctx);
/* Whether another item may be given before the next ap_ipool_get. */
int ap_ipool_room(const struct ap_ipool *p);
/* Give an item (copied) and its arg: -ENOMEM, -ENOSPC (no room) or 0. */
int ap_ipool_put(struct ap_ipool *p, const struct dcr_item *it, void *arg);
/* The oldest item given, worked on (1: its out, valid until the next call,
 * and its arg when arg is not NULL), 0 when none is left, or the error
 * working on it. */
int ap_ipool_get(struct ap_ipool *p, struct dcr_item *out, void **arg, struct dcr_err *e);
/* Stop the threads and free everything (items not taken are dropped). */
void ap_ipool_free(struct ap_ipool *p);

#endif
