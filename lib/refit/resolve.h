/* resolve.h - a delta's items resolved into encoded OVERWRITE items on
 * threads, handed back in the order they were given: what an apply does to
 * every item before it is journaled (XOR masks and bit-conditioned codes
 * decoded against the receiver's current bits). Internal to libdcr. */
#ifndef DCR_REFIT_RESOLVE_H
#define DCR_REFIT_RESOLVE_H

#include "refit/plan.h"

struct ap_resolver;

/* A resolver for the items of plan p (whose tensors' cur give the bits XOR
 * items are resolved against) on `threads` threads (< 1: one per core;
 * with one, items are resolved in ap_resolver_get). NULL: no memory. */
struct ap_resolver *ap_resolver_new(const struct plan *p, int threads);
/* Whether another item may be given before the next ap_resolver_get. */
int ap_resolver_room(const struct ap_resolver *r);
/* Give an item (copied; its tensor checked by the caller): -ENOMEM or 0. */
int ap_resolver_put(struct ap_resolver *r, const struct dcr_item *it);
/* The oldest item given, resolved and encoded (1; its data valid until
 * the next call), 0 when none is left, or the error resolving it. */
int ap_resolver_get(struct ap_resolver *r, struct dcr_item *out, struct dcr_err *e);
/* Stop the threads and free everything (items not taken are dropped). */
void ap_resolver_free(struct ap_resolver *r);

#endif
