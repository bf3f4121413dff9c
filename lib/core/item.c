/* item.c - one tensor range's changes: positions and values, encoded and
 * decoded through the item codecs, and scattered into bytes. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <zstd.h>

#include "core/bytes.h"
#include "core/checkpoint.h"
#include "core/codec.h"
#include "core/item.h"

/* ---- changes ---- */

int dcr_changes_reserve(struct dcr_changes *c, size_t n)
{
	if (n <= c->cap)
		return 0;
	uint64_t *p = realloc(c->pos, n * sizeof(uint64_t));
	if (!p)
		return -ENOMEM;
	c->pos = p;
	uint64_t *v = realloc(c->val, n * sizeof(uint64_t));
	if (!v)
		return -ENOMEM;
	c->val = v;
	c->cap = n;
	return 0;
}

void dcr_changes_free(struct dcr_changes *c)
{
	free(c->pos);
	free(c->val);
	memset(c, 0, sizeof(*c));
}

/* ---- item data ----
 * codec 1 (PLAIN, the xor-zstd layout of dcr-format-codec(5)): positions as
 * zstd-compressed gap varints (absent when the item is dense), then values
 * byte-plane shuffled and zstd-compressed: XOR masks for XOR items, new
 * stored bits for OVERWRITE items.
 * codec 2 (DELTA): the delta codec; XOR items' values are coded against the
 * bits the receiver holds, OVERWRITE items' against zero. Never dense.
 * codec 3 (CLASSED): DELTA's values, positions coded by classes of the old
 * values of the whole range; XOR items only.
 * codec 4 (RAW): gap varints and values as they are; what an apply's
 * journal holds (dcr_item_to_overwrite). Never dense. */

/* Values only (dense items): byte planes, one zstd frame. */
static int planes_encode(const uint64_t *val, size_t n, unsigned unit, struct dcr_buf *out,
			 struct dcr_err *e)
{
	uint8_t *planes = malloc(n * unit + 1);
	size_t bound = ZSTD_compressBound(n * unit);
	if (!planes || dcr_buf_reserve(out, bound + 10)) {
		free(planes);
		return dcr_err_sys(e, ENOMEM, "item");
	}
	for (unsigned b = 0; b < unit; b++)
		for (size_t i = 0; i < n; i++)
			planes[(size_t)b * n + i] = (uint8_t)(val[i] >> (8 * b));
	struct dcr_buf z = {0};
	int r = dcr_buf_reserve(&z, bound) ? -ENOMEM : 0;
	size_t zl = r ? 0 : ZSTD_compress(z.p, bound, planes, n * unit, 1);
	free(planes);
	if (!r && ZSTD_isError(zl))
		r = dcr_err_set(e, DCR_EFORMAT, "zstd: %s", ZSTD_getErrorName(zl));
	else if (r || dcr_buf_add_varint(out, zl) || dcr_buf_add(out, z.p, zl))
		r = dcr_err_sys(e, ENOMEM, "item");
	dcr_buf_free(&z);
	return r;
}

/* The byte planes of a dense item's data (its length, one zstd frame of
 * exactly nb bytes, nothing after) into planes. */
static int planes_inflate(const uint8_t *p, size_t len, size_t nb, uint8_t *planes,
			  struct dcr_err *e)
{
	struct dcr_rd rd;
	dcr_rd_init(&rd, p, len);
	uint64_t zl = dcr_rd_varint(&rd);
	const uint8_t *z = rd.bad ? NULL : dcr_rd_bytes(&rd, zl);
	if (!z || dcr_rd_left(&rd))
		return dcr_err_set(e, DCR_EFORMAT, "item data is truncated or has trailing bytes");
	if (ZSTD_getFrameContentSize(z, zl) != (unsigned long long)nb)
		return dcr_err_set(e, DCR_EFORMAT, "item data frame has a bad size");
	size_t got = ZSTD_decompress(planes, nb, z, zl);
	if (ZSTD_isError(got) || got != nb)
		return dcr_err_set(e, DCR_EFORMAT, "item data is corrupt");
	return 0;
}

static int planes_decode(const uint8_t *p, size_t len, size_t n, unsigned unit, uint64_t *val,
			 struct dcr_err *e)
{
	uint8_t *tmp = malloc(n * unit + 1);
	if (!tmp)
		return dcr_err_sys(e, ENOMEM, "item");
	int r = planes_inflate(p, len, n * unit, tmp, e);
	if (r) {
		free(tmp);
		return r;
	}
	for (size_t i = 0; i < n; i++)
		val[i] = 0;
	for (unsigned b = 0; b < unit; b++)
		for (size_t i = 0; i < n; i++)
			val[i] |= (uint64_t)tmp[(size_t)b * n + i] << (8 * b);
	free(tmp);
	return 0;
}

int dcr_item_encode(const struct dcr_changes *ch, unsigned unit, uint64_t len,
		    int dense, uint8_t *codec, struct dcr_buf *out, struct dcr_err *e)
{
	*codec = DCR_CODEC_PLAIN;
	if (dense)
		return planes_encode(ch->val, ch->n, unit, out, e);
	return dcr_codec_encode(DCR_CODEC_XOR_ZSTD, unit, 0, len, ch->n, ch->pos, NULL, ch->val,
				out, e);
}

int dcr_item_encode_xor(size_t n, const uint64_t *pos, const uint64_t *oldv,
			const uint64_t *newv, const uint8_t *old, unsigned unit, int dtype,
			uint64_t len, int codec, uint8_t *used, struct dcr_buf *out,
			struct dcr_err *e)
{
	size_t at = out->len;
	int fixed = codec == DCR_CODEC_PLAIN || codec == DCR_CODEC_DELTA ||
		    codec == DCR_CODEC_CLASSED;
	int c = fixed ? dcr_codec_encode_range(codec, unit, dtype, len, n, pos, oldv, newv, old,
					       out, e)
		      : dcr_codec_choose_range(0, unit, dtype, len, n, pos, oldv, newv, old, out, e);
	if (c < 0)
		return c;
	if (fixed)
		c = codec;
	/* auto: where the delta codecs barely compress (changes that are not
	 * small steps, e.g. unrelated weights), let xor-zstd compete too */
	if (!fixed && c != DCR_CODEC_XOR_ZSTD && (out->len - at) * 10 > (uint64_t)n * unit * 7) {
		out->len = at;
		c = dcr_codec_choose_range(1, unit, dtype, len, n, pos, oldv, newv, old, out, e);
		if (c < 0)
			return c;
	}
	*used = (uint8_t)c;
	return 0;
}

int dcr_item_needs_base(const struct dcr_item *it)
{
	return it->enc == DCR_ENC_XOR &&
	       (it->codec == DCR_CODEC_DELTA || it->codec == DCR_CODEC_CLASSED);
}

/* What every decoder checks first: codec, counts, the dense rules. */
static int check_head(const struct dcr_item *it, struct dcr_err *e)
{
	if (it->codec != DCR_CODEC_PLAIN && it->codec != DCR_CODEC_DELTA &&
	    it->codec != DCR_CODEC_CLASSED && it->codec != DCR_CODEC_RAW)
		return dcr_err_set(e, DCR_EFORMAT, "item uses unknown codec %u", it->codec);
	if (it->codec == DCR_CODEC_CLASSED && it->enc != DCR_ENC_XOR)
		return dcr_err_set(e, DCR_EFORMAT, "codec classed codes XOR items only");
	if (it->n > it->len || it->len > DCR_ITEM_MAX_ELEMS)
		return dcr_err_set(e, DCR_EFORMAT, "item claims %llu changes in %llu elements",
				   (unsigned long long)it->n, (unsigned long long)it->len);
	int dense = it->flags & DCR_ITEM_DENSE;
	if (dense && (it->n != it->len || it->codec != DCR_CODEC_PLAIN))
		return dcr_err_set(e, DCR_EFORMAT, "malformed dense item");
	return 0;
}

static int check_item(const struct dcr_item *it, struct dcr_changes *ch, struct dcr_err *e)
{
	int r = check_head(it, e);
	if (r)
		return r;
	if (dcr_changes_reserve(ch, (size_t)it->n + 1))
		return dcr_err_sys(e, ENOMEM, "item");
	ch->n = (size_t)it->n;
	return 0;
}

static int decode_positions(const struct dcr_item *it, unsigned unit, struct dcr_changes *ch,
			    struct dcr_err *e)
{
	int r = check_item(it, ch, e);
	if (r)
		return r;
	if (dcr_codec_needs_range(it->codec))
		return dcr_err_set(e, DCR_EFORMAT,
				   "item is coded against the receiver's bits (codec %s); it cannot be decoded without them",
				   dcr_codec_name(it->codec));
	if (it->flags & DCR_ITEM_DENSE) {
		for (size_t i = 0; i < ch->n; i++)
			ch->pos[i] = i;
		return 0;
	}
	return dcr_codec_decode_positions(it->codec, it->data, it->data_len, unit, it->len, ch->n,
					  ch->pos, e);
}

int dcr_item_check_range(const struct dcr_item *it, uint64_t units, const char *what,
			 const char *name, struct dcr_err *e)
{
	if (it->start > units || it->len > units - it->start)
		return dcr_err_set(e, DCR_EFORMAT, "%s: item for '%s' runs past its end", what, name);
	return 0;
}

int dcr_item_is_dense_overwrite(const struct dcr_item *it)
{
	return it->enc == DCR_ENC_OVERWRITE && (it->flags & DCR_ITEM_DENSE) &&
	       it->codec == DCR_CODEC_PLAIN;
}

int dcr_item_decode_dense(const struct dcr_item *it, unsigned unit, uint8_t *dst,
			  struct dcr_buf *tmp, struct dcr_err *e)
{
	int r = check_head(it, e);
	if (r)
		return r;
	if (!dcr_item_is_dense_overwrite(it))
		return dcr_err_set(e, DCR_EFORMAT, "item is not a dense overwrite");
	size_t n = (size_t)it->n, nb = n * unit;
	/* one byte a unit: the planes are the bytes */
	uint8_t *planes = dst;
	if (unit > 1) {
		if (dcr_buf_reserve(tmp, nb))
			return dcr_err_sys(e, ENOMEM, "item");
		planes = tmp->p;
	}
	if ((r = planes_inflate(it->data, it->data_len, nb, planes, e)))
		return r;
	if (unit == 2) {
		const uint8_t *lo = planes, *hi = planes + n;
		for (size_t i = 0; i < n; i++) {
			dst[2 * i] = lo[i];
			dst[2 * i + 1] = hi[i];
		}
	} else if (unit > 1) {
		for (unsigned b = 0; b < unit; b++)
			for (size_t i = 0; i < n; i++)
				dst[i * unit + b] = planes[(size_t)b * n + i];
	}
	return 0;
}

int dcr_item_decode(const struct dcr_item *it, unsigned unit, struct dcr_changes *ch,
		    struct dcr_err *e)
{
	int r = decode_positions(it, unit, ch, e);
	if (r)
		return r;
	if (it->flags & DCR_ITEM_DENSE)
		return planes_decode(it->data, it->data_len, ch->n, unit, ch->val, e);
	if (dcr_item_needs_base(it))
		return dcr_err_set(e, DCR_EFORMAT,
				   "item is coded against the receiver's bits (codec %s); it cannot be decoded without them",
				   dcr_codec_name(it->codec));
	return dcr_codec_decode_values(it->codec, it->data, it->data_len, unit, 0, it->len, ch->n,
				       ch->pos, NULL, ch->val, e);
}

int dcr_item_resolve(const struct dcr_item *it, unsigned unit, const uint8_t *old,
		     struct dcr_changes *ch, struct dcr_err *e)
{
	if (it->enc != DCR_ENC_XOR)
		return dcr_item_decode(it, unit, ch, e);
	if (dcr_codec_needs_range(it->codec)) {
		int r = check_item(it, ch, e);
		if (r)
			return r;
		if (!old)
			return dcr_err_set(e, DCR_EFORMAT, "XOR item without base bits");
		return dcr_codec_decode_range(it->codec, it->data, it->data_len, unit, it->len, ch->n,
					      old, ch->pos, ch->val, e);
	}
	int r = decode_positions(it, unit, ch, e);
	if (r)
		return r;
	if (!old)
		return dcr_err_set(e, DCR_EFORMAT, "XOR item without base bits");
	uint64_t *oldv = malloc((ch->n + 1) * sizeof(uint64_t));
	if (!oldv)
		return dcr_err_sys(e, ENOMEM, "item");
	for (size_t k = 0; k < ch->n; k++)
		oldv[k] = load_unit(old + ch->pos[k] * unit, unit);
	r = dcr_codec_decode_values(it->codec, it->data, it->data_len, unit, 0, it->len, ch->n,
				    ch->pos, oldv, ch->val, e);
	free(oldv);
	return r;
}

int dcr_item_to_overwrite(const struct dcr_item *it, unsigned unit, const uint8_t *old,
			  struct dcr_changes *ch, struct dcr_buf *enc, struct dcr_item *out,
			  struct dcr_err *e)
{
	int r = dcr_item_resolve(it, unit, old, ch, e);
	if (r)
		return r;
	enc->len = 0;
	out->enc = DCR_ENC_OVERWRITE;
	if (it->flags & DCR_ITEM_DENSE)
		r = dcr_item_encode(ch, unit, it->len, 1, &out->codec, enc, e);
	else if (!(r = dcr_codec_encode(DCR_CODEC_RAW, unit, 0, it->len, ch->n, ch->pos, NULL,
					ch->val, enc, e)))
		out->codec = DCR_CODEC_RAW;
	if (r)
		return r;
	out->data = enc->p;
	out->data_len = enc->len;
	return 0;
}

void dcr_scatter(uint8_t *dst, unsigned unit, const uint64_t *pos, const uint64_t *val, size_t n,
		 int xor_)
{
	if (!xor_) {
		dcr_scatter_at(dst, unit, 0, pos, val, n);
		return;
	}
	for (size_t k = 0; k < n; k++) {
		uint8_t *p = dst + pos[k] * unit;
		store_unit(p, unit, load_unit(p, unit) ^ val[k]);
	}
}

void dcr_scatter_at(uint8_t *dst, unsigned unit, uint64_t first, const uint64_t *pos,
		    const uint64_t *val, size_t n)
{
	if (unit == 2)
		for (size_t k = 0; k < n; k++)
			put_le16(dst + 2 * (pos[k] - first), (uint16_t)val[k]);
	else
		for (size_t k = 0; k < n; k++)
			store_unit(dst + (pos[k] - first) * unit, unit, val[k]);
}


#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; EINVAL before */
#endif
#define POP_PAGE 4096u
#define POP_MIN_RUN 8 /* pages: a shorter run takes its faults */

static int populate_off; /* the kernel refused once: do not ask again */

static void populate_run(uintptr_t a, uintptr_t z)
{
	if (z - a < (uintptr_t)POP_MIN_RUN * POP_PAGE ||
	    __atomic_load_n(&populate_off, __ATOMIC_RELAXED))
		return;
	if (madvise((void *)a, z - a, MADV_POPULATE_WRITE) && errno == EINVAL)
		__atomic_store_n(&populate_off, 1, __ATOMIC_RELAXED);
}

void dcr_scatter_populate(uint8_t *dst, unsigned unit, const uint64_t *pos, size_t n)
{
	uintptr_t a = 0, z = 0; /* the run of pages [a, z) */
	for (size_t k = 0; k < n; k++) {
		uintptr_t p = (uintptr_t)(dst + pos[k] * unit);
		uintptr_t p0 = p & ~(uintptr_t)(POP_PAGE - 1);
		uintptr_t p1 = ((p + unit - 1) & ~(uintptr_t)(POP_PAGE - 1)) + POP_PAGE;
		if (p0 > z) {
			populate_run(a, z);
			a = p0;
		}
		if (p1 > z)
			z = p1;
	}
	if (n)
		populate_run(a, z);
}

int dcr_item_base(const struct dcr_ckpt_tensor *ct, const struct dcr_item *it, unsigned unit,
		  struct dcr_buf *buf, const uint8_t **old, struct dcr_err *e)
{
	uint64_t bytes = it->len * unit;
	/* about one change per 2 KiB or more: every page of the range is read */
	if (it->n >= bytes / 2048 || dcr_codec_needs_range(it->codec))
		return dcr_ckpt_tensor_read(ct, it->start * unit, (size_t)bytes, buf, old, e);
	*old = ct->data + it->start * unit;
	return 0;
}
