/* buf.c - growable byte buffers and bounds-checked readers. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/bytes.h"

/* ---- buffers ---- */

int dcr_buf_reserve(struct dcr_buf *b, size_t extra)
{
	if (b->cap - b->len >= extra)
		return 0;
	size_t need = b->len + extra;
	if (need < b->len)
		return -ENOMEM;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	uint8_t *p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

int dcr_buf_add(struct dcr_buf *b, const void *p, size_t n)
{
	if (dcr_buf_reserve(b, n))
		return -ENOMEM;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

int dcr_buf_add_u8(struct dcr_buf *b, uint8_t v) { return dcr_buf_add(b, &v, 1); }

int dcr_buf_add_le32(struct dcr_buf *b, uint32_t v)
{
	uint8_t t[4];
	put_le32(t, v);
	return dcr_buf_add(b, t, 4);
}

int dcr_buf_add_le64(struct dcr_buf *b, uint64_t v)
{
	uint8_t t[8];
	put_le64(t, v);
	return dcr_buf_add(b, t, 8);
}

int dcr_buf_add_varint(struct dcr_buf *b, uint64_t v)
{
	uint8_t t[10];
	int n = 0;
	while (v >= 0x80) {
		t[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	t[n++] = (uint8_t)v;
	return dcr_buf_add(b, t, n);
}

void dcr_buf_free(struct dcr_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

/* ---- reader ---- */

const uint8_t *dcr_rd_bytes(struct dcr_rd *r, size_t n)
{
	if (r->bad || dcr_rd_left(r) < n) {
		r->bad = 1;
		return NULL;
	}
	const uint8_t *p = r->p;
	r->p += n;
	return p;
}

uint8_t dcr_rd_u8(struct dcr_rd *r)
{
	const uint8_t *p = dcr_rd_bytes(r, 1);
	return p ? p[0] : 0;
}

uint32_t dcr_rd_le32(struct dcr_rd *r)
{
	const uint8_t *p = dcr_rd_bytes(r, 4);
	return p ? get_le32(p) : 0;
}

uint64_t dcr_rd_le64(struct dcr_rd *r)
{
	const uint8_t *p = dcr_rd_bytes(r, 8);
	return p ? get_le64(p) : 0;
}

uint64_t dcr_rd_varint(struct dcr_rd *r)
{
	uint64_t v = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (r->bad || r->p >= r->end) {
			r->bad = 1;
			return 0;
		}
		uint8_t c = *r->p++;
		if (shift == 63 && (c & 0x7e)) {
			r->bad = 1; /* overflows 64 bits */
			return 0;
		}
		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return v;
	}
	r->bad = 1;
	return 0;
}

