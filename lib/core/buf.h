/* buf.h - growable byte buffers and bounds-checked readers. */
#ifndef DCR_CORE_BUF_H
#define DCR_CORE_BUF_H

#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer. */
struct dcr_buf {
	uint8_t *p;
	size_t len, cap;
};
int dcr_buf_reserve(struct dcr_buf *b, size_t extra);
int dcr_buf_add(struct dcr_buf *b, const void *p, size_t n);
int dcr_buf_add_u8(struct dcr_buf *b, uint8_t v);
int dcr_buf_add_le32(struct dcr_buf *b, uint32_t v);
int dcr_buf_add_le64(struct dcr_buf *b, uint64_t v);
int dcr_buf_add_varint(struct dcr_buf *b, uint64_t v);
void dcr_buf_free(struct dcr_buf *b);

/* A bounds-checked reader over a byte range. Every get fails once past end
 * and leaves r->bad set; callers check r->bad once per record. */
struct dcr_rd {
	const uint8_t *p, *end;
	int bad;
};
static inline void dcr_rd_init(struct dcr_rd *r, const void *p, size_t n)
{
	r->p = p;
	r->end = r->p + n;
	r->bad = 0;
}
static inline size_t dcr_rd_left(const struct dcr_rd *r) { return (size_t)(r->end - r->p); }
const uint8_t *dcr_rd_bytes(struct dcr_rd *r, size_t n);
uint8_t dcr_rd_u8(struct dcr_rd *r);
uint32_t dcr_rd_le32(struct dcr_rd *r);
uint64_t dcr_rd_le64(struct dcr_rd *r);
uint64_t dcr_rd_varint(struct dcr_rd *r);

#endif
