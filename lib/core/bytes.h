/* bytes.h - little-endian integers, element loads and stores, and checked
 * arithmetic: the inline helpers every format in libdcr is written with.
 * Internal to libdcr (not installed). */
#ifndef DCR_CORE_BYTES_H
#define DCR_CORE_BYTES_H

#include <stdint.h>
#include <string.h>

/* Little-endian hosts copy the bytes (one load or store; GCC does not
 * merge a loop of byte stores into one), others assemble them. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define DCR_LE_COPY(T, p, v) memcpy((p), &(T){(v)}, sizeof(T))
static inline void put_le16(uint8_t *p, uint16_t v) { DCR_LE_COPY(uint16_t, p, v); }
static inline void put_le32(uint8_t *p, uint32_t v) { DCR_LE_COPY(uint32_t, p, v); }
static inline void put_le64(uint8_t *p, uint64_t v) { DCR_LE_COPY(uint64_t, p, v); }
static inline uint16_t get_le16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t get_le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t get_le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
#undef DCR_LE_COPY
#else
static inline void put_le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}
static inline uint64_t get_le64(const uint8_t *p)
{
	return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}
#endif

/* Load/store one element of `unit` bytes (1, 2, 4 or 8) as an integer. */
static inline uint64_t load_unit(const uint8_t *p, unsigned unit)
{
	switch (unit) {
	case 1: return p[0];
	case 2: return get_le16(p);
	case 4: return get_le32(p);
	default: return get_le64(p);
	}
}
static inline void store_unit(uint8_t *p, unsigned unit, uint64_t v)
{
	switch (unit) {
	case 1: p[0] = (uint8_t)v; break;
	case 2: put_le16(p, (uint16_t)v); break;
	case 4: put_le32(p, (uint32_t)v); break;
	default: put_le64(p, v); break;
	}
}

/* Checked arithmetic. */
static inline int mul_ovf(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_mul_overflow(a, b, r);
}
static inline int add_ovf(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_add_overflow(a, b, r);
}

#endif
