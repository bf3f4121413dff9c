/* tcount.h - how many elements of each tensor a pack's items change, as
 * they arrive: since no element changes twice in a step, a tensor's items
 * together change at most the elements it has, and a stream that goes
 * over and over one tensor (a few KB of compressed zeros that decode to
 * gigabytes) is refused at the item that goes past, before what it
 * decodes to is kept (the apply's spool, refit/apply-pack.c; the items an
 * in-memory apply holds, refit/apply-mem.c). Memory: one entry per tensor
 * named, at most DCR_DELTA_TENSORS_MAX (a pack names no more; the payloads
 * each keep within it, and a stream of them, together, past it is refused
 * at the first item past). Internal to libdcr. */
#ifndef DCR_REFIT_TCOUNT_H
#define DCR_REFIT_TCOUNT_H

#include <stdint.h>

#include "core/delta.h"
#include "core/error.h"
#include "core/ntab.h"

struct ap_tcount {
	struct dcr_ntab tab;
	uint64_t name_bytes; /* of the names kept, NULs counted */
};

/* Item it of tensor t (as its payload declares it), from `what`: 0, or a
 * refusal (DCR_EFORMAT) when the elements it changes (a dense one: all of
 * its range) bring t's to more than the least size any payload declared
 * for it, or when it names a tensor past DCR_DELTA_TENSORS_MAX or a name
 * past DCR_DELTA_NAMES_BYTES of them. */
int ap_tcount_item(struct ap_tcount *c, const struct dcr_delta_tensor *t,
		   const struct dcr_item *it, const char *what, struct dcr_err *e);
void ap_tcount_free(struct ap_tcount *c);

#endif
