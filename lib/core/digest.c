/* digest.c - hex digests and SHA-256. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "core/digest.h"
#include "core/util.h"

void dcr_hex(const void *p, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[b[i] >> 4];
		out[2 * i + 1] = hex[b[i] & 15];
	}
	out[2 * n] = '\0';
}

void dcr_digest_hex(const dcr_digest *d, char out[2 * DCR_DIGEST_LEN + 1])
{
	dcr_hex(d->b, DCR_DIGEST_LEN, out);
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int dcr_digest_parse_hex(const char *s, dcr_digest *d)
{
	if (strlen(s) != 2 * DCR_DIGEST_LEN)
		return -1;
	for (int i = 0; i < DCR_DIGEST_LEN; i++) {
		int h = hexval(s[2 * i]), l = hexval(s[2 * i + 1]);
		if (h < 0 || l < 0)
			return -1;
		d->b[i] = (uint8_t)(h << 4 | l);
	}
	return 0;
}

int dcr_digest_is_zero(const dcr_digest *d)
{
	for (int i = 0; i < DCR_DIGEST_LEN; i++)
		if (d->b[i])
			return 0;
	return 1;
}

void dcr_sha256(const void *p, size_t n, dcr_digest *out)
{
	unsigned int len = DCR_DIGEST_LEN;
	EVP_Digest(p, n, out->b, &len, EVP_sha256(), NULL);
}

struct dcr_sha {
	EVP_MD_CTX *c;
};

struct dcr_sha *dcr_sha_new(void)
{
	struct dcr_sha *s = dcr_calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->c = EVP_MD_CTX_new();
	if (!s->c || !EVP_DigestInit_ex(s->c, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(s->c);
		free(s);
		return NULL;
	}
	return s;
}

void dcr_sha_update(struct dcr_sha *s, const void *p, size_t n)
{
	EVP_DigestUpdate(s->c, p, n);
}

void dcr_sha_final(struct dcr_sha *s, dcr_digest *out)
{
	unsigned int len = DCR_DIGEST_LEN;
	EVP_DigestFinal_ex(s->c, out->b, &len);
	EVP_DigestInit_ex(s->c, EVP_sha256(), NULL);
}

void dcr_sha_free(struct dcr_sha *s)
{
	if (!s)
		return;
	EVP_MD_CTX_free(s->c);
	free(s);
}
