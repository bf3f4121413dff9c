/* sign.c - Ed25519 keys and signatures in signify's formats (see sign.h),
 * over OpenSSL's EVP interface. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "core/digest.h"
#include "core/file.h"
#include "core/sign.h"
#include "core/util.h"

#define COMMENT "untrusted comment: "
#define COMMENT_MAX 1024
#define KEYFILE_MAX 4096
#define PUB_LEN 42  /* "Ed" keynum[8] key[32] */
#define SEC_LEN 104 /* "Ed" "BK" rounds[4] salt[16] checksum[8] keynum[8] seckey[64] */
#define SIG_LEN 74  /* "Ed" keynum[8] sig[64] */

/* The blob of a signify file: one comment line, one base64 line (an
 * optional final newline), decoding to exactly want bytes. */
static int parse_file(const uint8_t *buf, size_t len, const char *what, const char *kind,
		      uint8_t *out, size_t want, struct dcr_err *e)
{
	size_t cl = strlen(COMMENT);
	const uint8_t *nl = len > cl ? memchr(buf, '\n', len < COMMENT_MAX ? len : COMMENT_MAX) : NULL;
	if (!nl || memcmp(buf, COMMENT, cl))
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s is not a signify %s: no 'untrusted comment:' line", what, kind);
	const uint8_t *b = nl + 1, *end = buf + len;
	if (end > b && end[-1] == '\n')
		end--;
	size_t n = (size_t)(end - b);
	/* base64 of want bytes: 4 * ceil(want / 3) characters */
	size_t enc = 4 * ((want + 2) / 3);
	uint8_t tmp[(SEC_LEN + 2) / 3 * 3 + 3];
	if (n != enc || memchr(b, '\n', n) || enc / 4 * 3 > sizeof(tmp))
		return dcr_err_set(e, DCR_EFORMAT, "%s is not a signify %s: bad base64 line", what,
				   kind);
	char line[4 * ((SEC_LEN + 2) / 3) + 1];
	memcpy(line, b, n);
	line[n] = '\0';
	int got = EVP_DecodeBlock(tmp, (const unsigned char *)line, (int)n);
	size_t pad = (n && line[n - 1] == '=') + (n > 1 && line[n - 2] == '=');
	if (got < 0 || (size_t)got - pad != want)
		return dcr_err_set(e, DCR_EFORMAT, "%s is not a signify %s: bad base64 line", what,
				   kind);
	memcpy(out, tmp, want);
	if (memcmp(out, "Ed", 2))
		return dcr_err_set(e, DCR_EFORMAT, "%s: not an Ed25519 %s (algorithm '%.2s')", what,
				   kind, (const char *)out);
	return 0;
}

/* "untrusted comment: COMMENT\n" base64(blob) "\n", malloc'd. */
static char *format_file(const char *comment, const uint8_t *blob, size_t n, size_t *out_len)
{
	size_t enc = 4 * ((n + 2) / 3);
	size_t cl = strlen(COMMENT) + strlen(comment) + 1;
	char *s = malloc(cl + enc + 2);
	if (!s)
		return NULL;
	snprintf(s, cl + 1, "%s%s\n", COMMENT, comment);
	EVP_EncodeBlock((unsigned char *)s + cl, blob, (int)n);
	s[cl + enc] = '\n';
	s[cl + enc + 1] = '\0';
	*out_len = cl + enc + 1;
	return s;
}

static int load(const char *path, uint8_t **buf, size_t *len, struct dcr_err *e)
{
	return dcr_read_file(path, KEYFILE_MAX, buf, len, e);
}

static void seckey_checksum(const uint8_t seckey[64], uint8_t out[8])
{
	uint8_t md[64];
	unsigned int n = sizeof(md);
	EVP_Digest(seckey, 64, md, &n, EVP_sha512(), NULL);
	memcpy(out, md, 8);
}

int dcr_pubkey_parse(const uint8_t *buf, size_t len, const char *what, struct dcr_pubkey *k,
		     struct dcr_err *e)
{
	uint8_t b[PUB_LEN];
	int r = parse_file(buf, len, what, "public key", b, sizeof(b), e);
	if (r)
		return r;
	memcpy(k->keynum, b + 2, 8);
	memcpy(k->key, b + 10, 32);
	return 0;
}

int dcr_pubkey_load(const char *path, struct dcr_pubkey *k, struct dcr_err *e)
{
	uint8_t *buf;
	size_t len;
	int r = load(path, &buf, &len, e);
	if (r)
		return r;
	r = dcr_pubkey_parse(buf, len, path, k, e);
	free(buf);
	return r;
}

int dcr_seckey_parse(const uint8_t *buf, size_t len, const char *what, struct dcr_seckey *k,
		     struct dcr_err *e)
{
	uint8_t b[SEC_LEN], sum[8];
	int r = parse_file(buf, len, what, "secret key", b, sizeof(b), e);
	if (r)
		return r;
	if (memcmp(b + 2, "BK", 2))
		return dcr_err_set(e, DCR_EFORMAT, "%s: unknown key derivation '%.2s'", what,
				   (const char *)b + 2);
	if (b[4] | b[5] | b[6] | b[7])
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s is encrypted with a passphrase: dcr needs an unencrypted key (signify -G -n)",
				   what);
	const uint8_t *seckey = b + 40;
	seckey_checksum(seckey, sum);
	if (memcmp(sum, b + 24, 8))
		return dcr_err_set(e, DCR_EFORMAT, "%s: checksum mismatch (a damaged secret key)",
				   what);
	memcpy(k->keynum, b + 32, 8);
	memcpy(k->seed, seckey, 32);
	memcpy(k->pub, seckey + 32, 32);
	return 0;
}

int dcr_seckey_load(const char *path, struct dcr_seckey *k, struct dcr_err *e)
{
	uint8_t *buf;
	size_t len;
	int r = load(path, &buf, &len, e);
	if (r)
		return r;
	r = dcr_seckey_parse(buf, len, path, k, e);
	OPENSSL_cleanse(buf, len);
	free(buf);
	return r;
}

static int ed25519_public(const uint8_t seed[32], uint8_t pub[32])
{
	EVP_PKEY *p = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
	size_t n = 32;
	int ok = p && EVP_PKEY_get_raw_public_key(p, pub, &n) == 1 && n == 32;
	EVP_PKEY_free(p);
	return ok ? 0 : -1;
}

int dcr_keygen(const char *pub_path, const char *sec_path, struct dcr_err *e)
{
	uint8_t sec[SEC_LEN] = {'E', 'd', 'B', 'K'}, pub[PUB_LEN] = {'E', 'd'};
	uint8_t keynum[8], *seed = sec + 40;
	if (getrandom(keynum, 8, 0) != 8 || getrandom(sec + 8, 16, 0) != 16 ||
	    getrandom(seed, 32, 0) != 32)
		return dcr_err_sys(e, errno, "cannot get random bytes for a key");
	if (ed25519_public(seed, seed + 32))
		return dcr_err_set(e, -EINVAL, "cannot make an Ed25519 key (OpenSSL)");
	seckey_checksum(seed, sec + 24);
	memcpy(sec + 32, keynum, 8);
	memcpy(pub + 2, keynum, 8);
	memcpy(pub + 10, seed + 32, 32);
	size_t sl, pl;
	char *st = format_file("signify secret key", sec, sizeof(sec), &sl);
	char *pt = format_file("signify public key", pub, sizeof(pub), &pl);
	OPENSSL_cleanse(sec, sizeof(sec));
	int r = 0, fd = -1;
	if (!st || !pt) {
		r = dcr_err_sys(e, ENOMEM, "keygen");
		goto out;
	}
	/* the secret key first, exclusively: an existing one is never replaced */
	fd = open(sec_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", sec_path);
		goto out;
	}
	if (!(r = dcr_write_full(fd, st, sl)) && fsync(fd))
		r = -errno;
	if (r) {
		r = dcr_err_sys(e, r, "cannot write '%s'", sec_path);
		unlink(sec_path);
		goto out;
	}
	if ((r = dcr_fsync_parent(sec_path, e)))
		goto out;
	/* the public key must not replace another key pair's either */
	if (!access(pub_path, F_OK)) {
		unlink(sec_path);
		r = dcr_err_sys(e, EEXIST, "cannot create '%s'", pub_path);
		goto out;
	}
	if ((r = dcr_write_file_atomic(pub_path, pt, pl, e)))
		unlink(sec_path);
out:
	if (fd >= 0)
		close(fd);
	if (st)
		OPENSSL_cleanse(st, sl);
	free(st);
	free(pt);
	return r;
}

int dcr_sign(const struct dcr_seckey *k, const void *msg, size_t len, const char *pub_name,
	     char **out, size_t *out_len, struct dcr_err *e)
{
	uint8_t sig[SIG_LEN] = {'E', 'd'};
	memcpy(sig + 2, k->keynum, 8);
	EVP_PKEY *p = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, k->seed, 32);
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	size_t n = 64;
	int ok = p && c && EVP_DigestSignInit(c, NULL, NULL, NULL, p) == 1 &&
		 EVP_DigestSign(c, sig + 10, &n, msg, len) == 1 && n == 64;
	EVP_MD_CTX_free(c);
	EVP_PKEY_free(p);
	if (!ok)
		return dcr_err_set(e, -EINVAL, "cannot sign (OpenSSL Ed25519)");
	char *comment = dcr_asprintf("verify with %s", pub_name ? pub_name : "the trainer's key");
	*out = comment ? format_file(comment, sig, sizeof(sig), out_len) : NULL;
	free(comment);
	return *out ? 0 : dcr_err_sys(e, ENOMEM, "sign");
}

int dcr_verify_sig(const struct dcr_pubkey *keys, size_t nkeys, const void *msg, size_t len,
		   const uint8_t *sig, size_t sig_len, const char *what, size_t *which,
		   struct dcr_err *e)
{
	uint8_t b[SIG_LEN];
	int r = parse_file(sig, sig_len, what, "signature", b, sizeof(b), e);
	if (r)
		return r;
	for (size_t i = 0; i < nkeys; i++) {
		if (memcmp(keys[i].keynum, b + 2, 8))
			continue;
		EVP_PKEY *p = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, keys[i].key, 32);
		EVP_MD_CTX *c = EVP_MD_CTX_new();
		int ok = p && c && EVP_DigestVerifyInit(c, NULL, NULL, NULL, p) == 1 &&
			 EVP_DigestVerify(c, b + 10, 64, msg, len) == 1;
		EVP_MD_CTX_free(c);
		EVP_PKEY_free(p);
		if (ok) {
			if (which)
				*which = i;
			return 0;
		}
		return dcr_err_set(e, DCR_EDIGEST,
				   "%s: signature verification failed: the signed bytes were changed",
				   what);
	}
	char kn[17];
	dcr_hex(b + 2, 8, kn);
	return dcr_err_set(e, DCR_EDIGEST, "%s: signed by key %s, which is not one of the %zu trusted",
			   what, kn, nkeys);
}
