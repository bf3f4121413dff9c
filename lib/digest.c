/* digest.c - SHA-256 digests of tensors and checkpoint state ids. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "util.h"

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

/* Read through a bounded buffer rather than the mapping, so that hashing a
 * large checkpoint does not leave it all resident in this process. */
void dcr_tensor_digest(const struct dcr_ckpt_tensor *t, dcr_digest *out)
{
	uint64_t n = dcr_tensor_bytes(t->info);
	size_t cap = n < (4u << 20) ? (size_t)n : (4u << 20);
	uint8_t *buf = t->fd >= 0 && n ? malloc(cap) : NULL;
	if (!buf) {
		dcr_sha256(t->data, n, out);
		return;
	}
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned int len = DCR_DIGEST_LEN;
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	for (uint64_t off = 0; off < n;) {
		size_t k = n - off < cap ? (size_t)(n - off) : cap;
		if (dcr_pread_full(t->fd, buf, k, t->file_off + off))
			memcpy(buf, t->data + off, k); /* the mapping is the fallback */
		EVP_DigestUpdate(c, buf, k);
		off += k;
	}
	EVP_DigestFinal_ex(c, out->b, &len);
	EVP_MD_CTX_free(c);
	free(buf);
}

/* The state id: SHA-256 over "dcr-state-v1\n" then, per tensor sorted by
 * name: le32 name length, name, le32 dtype name length, dtype name, le32
 * ndim, le64 dims, 32-byte digest. */
void dcr_state_id(const struct dcr_state_entry *ent, size_t n, dcr_digest *out)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned int len = DCR_DIGEST_LEN;
	uint8_t t[8];
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	EVP_DigestUpdate(c, "dcr-state-v1\n", 13);
	for (size_t i = 0; i < n; i++) {
		const char *dt = dcr_dtype_name(ent[i].dtype);
		size_t nl = strlen(ent[i].name), dl = strlen(dt);
		put_le32(t, (uint32_t)nl);
		EVP_DigestUpdate(c, t, 4);
		EVP_DigestUpdate(c, ent[i].name, nl);
		put_le32(t, (uint32_t)dl);
		EVP_DigestUpdate(c, t, 4);
		EVP_DigestUpdate(c, dt, dl);
		put_le32(t, ent[i].ndim);
		EVP_DigestUpdate(c, t, 4);
		for (unsigned k = 0; k < ent[i].ndim; k++) {
			put_le64(t, ent[i].shape[k]);
			EVP_DigestUpdate(c, t, 8);
		}
		EVP_DigestUpdate(c, ent[i].digest.b, DCR_DIGEST_LEN);
	}
	EVP_DigestFinal_ex(c, out->b, &len);
	EVP_MD_CTX_free(c);
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
