/* item.h - an item: one tensor range's changes (see dcr-format-delta(5),
 * ITEM), how its data is coded, and how changes reach bytes. */
#ifndef DCR_CORE_ITEM_H
#define DCR_CORE_ITEM_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/codec.h"
#include "core/error.h"

#define DCR_ITEM_MAX_ELEMS (1u << 22) /* largest item range accepted: decoding
					 one takes at most 16 bytes a unit */
enum { DCR_ENC_XOR = 1, DCR_ENC_OVERWRITE = 2 };
enum { DCR_ITEM_DENSE = 1 }; /* ITEM flag: every element of the range */

struct dcr_item {
	uint32_t tensor;   /* index of its TENSOR record */
	uint32_t flags;    /* DCR_ITEM_DENSE */
	uint8_t enc;       /* DCR_ENC_* */
	uint8_t codec;     /* how data is coded */
	uint64_t start;    /* first element of the range */
	uint64_t len;      /* elements in the range */
	uint64_t n;        /* changed elements */
	const uint8_t *data;
	size_t data_len;
};

/* Decoded changes of one item: positions relative to start, and values
 * (XOR masks or new stored bits, per enc). */
struct dcr_changes {
	size_t n, cap;
	uint64_t *pos;
	uint64_t *val;
};
int dcr_changes_reserve(struct dcr_changes *c, size_t n);
void dcr_changes_free(struct dcr_changes *c);

/* Codec of item data; see dcr-format-delta(5) and dcr-format-codec(5).
 * PLAIN is the xor-zstd layout (values against zero for overwrites, XOR
 * masks for XOR items); DELTA codes XOR items' values against the bits the
 * receiver holds, CLASSED their positions too. */
enum { DCR_CODEC_AUTO = 0, DCR_CODEC_PLAIN = DCR_CODEC_XOR_ZSTD };
/* Encode values as they are (masks or new bits): PLAIN. */
int dcr_item_encode(const struct dcr_changes *ch, unsigned unit, uint64_t len,
		    int dense, uint8_t *codec, struct dcr_buf *out, struct dcr_err *e);
/* Encode an XOR item from old and new bits with `codec` (PLAIN, DELTA,
 * CLASSED, or AUTO: the one that pays); old is the range's old bits (len
 * units, as stored), which CLASSED needs (NULL: AUTO does without it).
 * *used gets the codec chosen. */
int dcr_item_encode_xor(size_t n, const uint64_t *pos, const uint64_t *oldv,
			const uint64_t *newv, const uint8_t *old, unsigned unit, int dtype,
			uint64_t len, int codec, uint8_t *used, struct dcr_buf *out,
			struct dcr_err *e);
/* 1 when the item decodes only against the receiver's bits: an XOR item
 * coded with DELTA or CLASSED. */
int dcr_item_needs_base(const struct dcr_item *it);
/* 0 when the item's range lies inside a tensor of `units` elements, else
 * a DCR_EFORMAT error "WHAT: item for 'NAME' runs past its end". */
int dcr_item_check_range(const struct dcr_item *it, uint64_t units, const char *what,
			 const char *name, struct dcr_err *e);
/* Positions and values as coded (masks for PLAIN XOR items); fails for
 * items that need the receiver's bits (dcr_item_needs_base). */
int dcr_item_decode(const struct dcr_item *it, unsigned unit, struct dcr_changes *ch,
		    struct dcr_err *e);
/* A DENSE OVERWRITE item's new bytes (len * unit, as stored) straight into
 * dst, without positions or 64-bit values (16 bytes a change where the
 * bytes are unit); tmp is the caller's scratch, reused. Refuses what
 * dcr_item_decode refuses, and any other item. */
int dcr_item_decode_dense(const struct dcr_item *it, unsigned unit, uint8_t *dst,
			  struct dcr_buf *tmp, struct dcr_err *e);
/* 1 for an item dcr_item_decode_dense takes. */
int dcr_item_is_dense_overwrite(const struct dcr_item *it);
/* Positions and the NEW stored bits, given the current bits of the item's
 * range (old points at element it->start; unused for OVERWRITE items). */
int dcr_item_resolve(const struct dcr_item *it, unsigned unit, const uint8_t *old,
		     struct dcr_changes *ch, struct dcr_err *e);
/* The item resolved (dcr_item_resolve, scratch ch) and its new bits encoded
 * as an OVERWRITE into enc (codec RAW; a DENSE item PLAIN): out's enc,
 * codec and data are set, the rest of out is left to the caller (an
 * apply's journal holds only these, written and read back on the same
 * machine, so they are not compressed). */
int dcr_item_to_overwrite(const struct dcr_item *it, unsigned unit, const uint8_t *old,
			  struct dcr_changes *ch, struct dcr_buf *enc, struct dcr_item *out,
			  struct dcr_err *e);
/* The current bits of an XOR item's range in the receiver's tensor ct, for
 * dcr_item_resolve: the whole range read into buf where the codec scans it
 * or the changes touch most of its pages (dcr_ckpt_tensor_read), else
 * where ct maps it (a sparse item reads a few pages). */
struct dcr_ckpt_tensor;
int dcr_item_base(const struct dcr_ckpt_tensor *ct, const struct dcr_item *it, unsigned unit,
		  struct dcr_buf *buf, const uint8_t **old, struct dcr_err *e);

/* dst[pos[k]] = val[k] (or ^= with xor_) for units of `unit` bytes: how
 * changes reach the bytes; the CPU reference of the GPU apply kernel. */
void dcr_scatter(uint8_t *dst, unsigned unit, const uint64_t *pos, const uint64_t *val, size_t n,
		 int xor_);
/* Overwrite n elements of the piece of a range that starts at element
 * first, dst its bytes: val[k] at element pos[k] (each first or after). */
void dcr_scatter_at(uint8_t *dst, unsigned unit, uint64_t first, const uint64_t *pos,
		    const uint64_t *val, size_t n);
/* Map the pages that dst[pos[k]] (k < n, pos increasing) fall in
 * writable before dcr_scatter writes them: one madvise(MADV_POPULATE_WRITE)
 * per run of such pages costs far less than a write fault per page where
 * most pages of a file mapping are written. Pages no change falls in are
 * left alone (populating a page of a file mapping dirties it); short runs
 * take their faults. Nothing on kernels before Linux 5.14. */
void dcr_scatter_populate(uint8_t *dst, unsigned unit, const uint64_t *pos, size_t n);

#endif
