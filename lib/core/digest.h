/* digest.h - 32-byte digests, hex, SHA-256, and streaming hashers. */
#ifndef DCR_CORE_DIGEST_H
#define DCR_CORE_DIGEST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define DCR_DIGEST_LEN 32
typedef struct { uint8_t b[DCR_DIGEST_LEN]; } dcr_digest;

void dcr_digest_hex(const dcr_digest *d, char out[2 * DCR_DIGEST_LEN + 1]);
/* n bytes as 2 n lowercase hex digits and a NUL. */
void dcr_hex(const void *p, size_t n, char *out);
int dcr_digest_parse_hex(const char *s, dcr_digest *d); /* 0 or -1 */
int dcr_digest_is_zero(const dcr_digest *d);

/* SHA-256, one shot and streaming (OpenSSL EVP underneath). */
void dcr_sha256(const void *p, size_t n, dcr_digest *out);
struct dcr_sha;
struct dcr_sha *dcr_sha_new(void);
void dcr_sha_update(struct dcr_sha *s, const void *p, size_t n);
void dcr_sha_final(struct dcr_sha *s, dcr_digest *out); /* resets s */
void dcr_sha_free(struct dcr_sha *s);

/* A streaming digest, fed bytes in order as they arrive. */
struct dcr_hasher {
	void (*update)(void *ctx, const void *p, size_t n);
	void *ctx;
};

/* Does a stored checksum differ from the computed one? Fuzzing builds
 * (libFuzzer's FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, scripts/fuzz) say
 * no, so that random inputs reach the parsers behind the checksums; no
 * normal build defines it. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define DCR_CHECKSUM_DIFFERS(computed, stored) ((void)(computed), (void)(stored), 0)
#else
#define DCR_CHECKSUM_DIFFERS(computed, stored) (memcmp((computed), (stored), 32) != 0)
#endif

#endif
