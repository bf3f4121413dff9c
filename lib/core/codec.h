/* codec.h - payload codecs for one item's changes.
 *
 * An item carries, for one tensor and an element range [0, range_len), the
 * sorted changed positions and their values. Elements are units of 1, 2, 4
 * or 8 bytes; a value is the stored bits of a unit as an unsigned integer.
 *
 * Every codec encodes positions and values in two independently decodable
 * parts, because values may be conditioned on the old value the receiver
 * already holds at each decoded position:
 *
 *	dcr_codec_decode_positions()  needs only the payload;
 *	dcr_codec_decode_values()     needs the payload and the old values.
 *
 * Both codecs are exact inverses for every bit pattern of every unit size.
 * Decoding validates everything against the caller's n and range_len and
 * returns DCR_EFORMAT on malformed or hostile input; it never reads or
 * writes outside p[0..len), pos[0..n), oldv[0..n), newv[0..n).
 *
 * oldv may be NULL on both sides: values are then coded against 0 (a pure
 * overwrite). The encoder's oldv must be exactly the bits the receiver will
 * read; an apply journal must decode values before it writes any of them.
 *
 * The byte layouts are specified in man/dcr-format-codec.5.
 */
#ifndef DCR_CODEC_H
#define DCR_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/error.h"

enum {
	/* Reference: gap varints and byte-plane-shuffled XOR masks, each
	 * compressed with zstd level 1. */
	DCR_CODEC_XOR_ZSTD = 1,
	/* Gaps and value differences (old->new in a monotone integer order
	 * for float dtypes, conditioned on the old exponent) under static
	 * rANS tables plus raw bits. */
	DCR_CODEC_DELTA = 2,
	/* DELTA's values, positions coded per class of the old value's
	 * exponent (gaps within each class's subsequence of the range): needs
	 * the old bits of the whole range on both sides. */
	DCR_CODEC_CLASSED = 3,
	/* Gap varints and the values' bits as they are, unit bytes each:
	 * no compression, for what is read back on the same machine (an
	 * apply's journal), where writing and reading it twice must cost
	 * less than the bytes it saves. */
	DCR_CODEC_RAW = 4,
};

const char *dcr_codec_name(int codec); /* "xor-zstd", "delta", "classed", "raw", "?" */

/* 1 for codecs whose positions depend on the old bits of the whole range
 * (CLASSED): such payloads decode only through dcr_codec_decode_range(). */
int dcr_codec_needs_range(int codec);

/* Encode n changes: pos strictly increasing and < range_len; oldv (or NULL)
 * and newv the stored bits, which must fit in unit bytes. newv[i] may equal
 * oldv[i]. Appends the payload to out. Returns 0 or a negative code
 * (-EINVAL for arguments that break these rules, -ENOMEM). */
int dcr_codec_encode(int codec, unsigned unit, int dtype, uint64_t range_len,
		     size_t n, const uint64_t *pos, const uint64_t *oldv,
		     const uint64_t *newv, struct dcr_buf *out,
		     struct dcr_err *e);

/* The same, with old: the old bits of the whole range (range_len units,
 * little-endian, as stored), which CLASSED needs; oldv must match it at
 * the positions. The other codecs ignore old. */
int dcr_codec_encode_range(int codec, unsigned unit, int dtype, uint64_t range_len,
			   size_t n, const uint64_t *pos, const uint64_t *oldv,
			   const uint64_t *newv, const uint8_t *old, struct dcr_buf *out,
			   struct dcr_err *e);

/* Decode the n positions of payload p[0..len) into pos[0..n) (not for
 * CLASSED). */
int dcr_codec_decode_positions(int codec, const uint8_t *p, size_t len,
			       unsigned unit, uint64_t range_len, size_t n,
			       uint64_t *pos, struct dcr_err *e);

/* Decode the n new values into newv[0..n), given the old values the
 * receiver holds at the decoded positions (oldv NULL if the encoder's was).
 * pos may be NULL; it is not needed by the current codecs. dtype is
 * informational: DELTA payloads describe their own value mapping. */
int dcr_codec_decode_values(int codec, const uint8_t *p, size_t len,
			    unsigned unit, int dtype, uint64_t range_len,
			    size_t n, const uint64_t *pos, const uint64_t *oldv,
			    uint64_t *newv, struct dcr_err *e);

/* Positions and new values at once, given the old bits of the whole range
 * (old, as for dcr_codec_encode_range; NULL where the encoder's oldv was,
 * which CLASSED refuses). Every codec decodes this way. */
int dcr_codec_decode_range(int codec, const uint8_t *p, size_t len, unsigned unit,
			   uint64_t range_len, size_t n, const uint8_t *old, uint64_t *pos,
			   uint64_t *newv, struct dcr_err *e);

/* Encode with the codec that pays for this item and append the payload to
 * out. Returns the codec id (> 0) or a negative code.
 * effort 0: DELTA, except that items of fewer than 256 changes are encoded
 *           both ways and the smaller kept;
 * effort 1: always encode both ways and keep the smaller. */
int dcr_codec_choose(int effort, unsigned unit, int dtype, uint64_t range_len,
		     size_t n, const uint64_t *pos, const uint64_t *oldv,
		     const uint64_t *newv, struct dcr_buf *out,
		     struct dcr_err *e);
/* The same, given the old bits of the range (or NULL): CLASSED first where
 * its estimated saving over DELTA's positions is worth the decoder's scan
 * of the range, else as dcr_codec_choose(). */
int dcr_codec_choose_range(int effort, unsigned unit, int dtype, uint64_t range_len,
			   size_t n, const uint64_t *pos, const uint64_t *oldv,
			   const uint64_t *newv, const uint8_t *old, struct dcr_buf *out,
			   struct dcr_err *e);

/* Tests only: cap the code paths of the vector loops: the CLASSED scans,
 * the DELTA and CLASSED encoders' value and gap symbols (0: portable C, 1:
 * POPCNT, 2: AVX2, 3: AVX2 and PDEP, the default: the best the CPU has).
 * Every path reads and writes the same bytes. Not thread-safe. */
void cdc_cpu_limit(int level);

#endif
