/* prehash.h - tensor digests put together from an apply's items as they
 * are resolved, so that the journal's check need not read and hash the
 * touched tensors again.
 *
 * The thread that resolves an XOR item reads the old bits of its range
 * into its own scratch to decode it; it puts the item's new values there
 * and hashes those bytes into digest parts (ap_prehash_parts). The items,
 * taken in the order they are journaled (ap_prehash_take), put each
 * tensor's digest together (core/state.h, dcr_tacc), with the bytes no
 * item touches read from the receiver. The check asks for the digest
 * (ap_prehash_get) when it has the tensor's items: so the receiver's
 * touched bytes are read once before the commit instead of twice.
 *
 * Only an aid: a tensor whose items do not come so (out of order,
 * overlapping, an item not resolved from bytes read, a rebuilt file's,
 * a new tensor's) gets no digest here and the check hashes it as before.
 * Nothing here fails an apply. Memory: a hasher per stripe (of at most
 * 4096) for at most PREHASH_LIVE tensors at once, and about 100 bytes
 * per tensor touched. Internal to
 * libdcr. */
#ifndef DCR_REFIT_PREHASH_H
#define DCR_REFIT_PREHASH_H

#include "core/checkpoint.h"
#include "core/item.h"
#include "core/state.h"

#define PREHASH_LIVE 4

struct ap_prehash;
struct ap_prehash *ap_prehash_new(void);
void ap_prehash_free(struct ap_prehash *h);

/* In a resolving thread: XOR item it of a tensor of dtype and shape,
 * resolved into ch (positions and new values); bytes holds the old bits
 * of its range, the thread's own, which become its new bits. Their digest
 * parts, or NULL (no memory). */
struct dcr_parts *ap_prehash_parts(int dtype, unsigned ndim, const uint64_t *shape,
				   const struct dcr_item *it, uint8_t *bytes,
				   const struct dcr_changes *ch);

/* In the order the items are journaled, on one thread: item it of tensor
 * name, whose old bits are ct's (the receiver's, with the target's dtype
 * and shape; NULL for none), and its parts (taken and freed; NULL when it
 * has none, which spoils the tensor). */
void ap_prehash_take(struct ap_prehash *h, const char *name, const struct dcr_ckpt_tensor *ct,
		     const struct dcr_item *it, struct dcr_parts *parts);

/* The digest of tensor name's new bytes when each of its items was taken
 * in order, with parts, and there were nitems of them: 1 and *out; else
 * 0. The tensor is finished then: an item for it that comes after spoils
 * it. */
int ap_prehash_get(struct ap_prehash *h, const char *name, uint64_t nitems, dcr_digest *out);

/* Where an item's parts go from the pool thread that makes them to the
 * one that takes the item (refit/ipool.h hands items back in the order
 * they were given, and holds at most 66 at once): a ring of cells, one
 * given with each item (with the base tensor the item is resolved
 * against), taken back in the same order. */
#define AP_PARTS_RING 128
struct ap_parts_cell {
	const struct dcr_ckpt_tensor *base;
	struct dcr_parts *parts;
};
struct ap_parts_ring {
	struct ap_parts_cell cell[AP_PARTS_RING];
	uint64_t given, taken;
};
struct ap_parts_cell *ap_ring_give(struct ap_parts_ring *r, const struct dcr_ckpt_tensor *base);
/* The oldest cell given (NULL when all were taken). */
struct ap_parts_cell *ap_ring_take(struct ap_parts_ring *r);
void ap_ring_release(struct ap_parts_ring *r); /* frees the parts left */

#endif
