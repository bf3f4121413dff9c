/* test-sign.c - Ed25519 keys and signatures in signify's formats: dcr's
 * signatures verify with signify-openbsd, signify's keys and signatures
 * work with dcr, and every tampered, foreign or malformed input is refused. */
#include "config.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "dcr.h"

static char dir[64];

static void setup(void)
{
	strcpy(dir, "/tmp/dcr-test-sign.XXXXXX");
	cr_assert(mkdtemp(dir));
}

static void teardown(void)
{
	char *cmd = dcr_asprintf("rm -rf '%s'", dir);
	cr_assert(cmd && system(cmd) == 0);
	free(cmd);
}

TestSuite(sign, .init = setup, .fini = teardown);

static char *path(const char *name)
{
	char *p = dcr_asprintf("%s/%s", dir, name);
	cr_assert(p);
	return p;
}

static void write_file(const char *p, const void *buf, size_t n)
{
	FILE *f = fopen(p, "wb");
	cr_assert(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0);
}

static uint8_t *read_all(const char *p, size_t *n)
{
	uint8_t *b;
	struct dcr_err e = {0};
	cr_assert(dcr_read_file(p, 1 << 20, &b, n, &e) == 0, "%s", e.msg);
	return b;
}

static int have_signify(void)
{
	return system("command -v signify-openbsd >/dev/null 2>&1") == 0;
}

static int sh(const char *fmt, const char *a, const char *b, const char *c)
{
	char *cmd = dcr_asprintf(fmt, a, b, c);
	cr_assert(cmd);
	int r = system(cmd);
	free(cmd);
	return r;
}

static const char msg[] = "\x89" "DCRM a manifest's bytes, any bytes at all\n";

Test(sign, dcr_signature_verifies_with_signify)
{
	struct dcr_err e = {0};
	char *pub = path("k.pub"), *sec = path("k.sec"), *m = path("m"), *sig = path("m.sig");
	cr_assert(dcr_keygen(pub, sec, &e) == 0, "%s", e.msg);
	struct stat st;
	cr_assert(stat(sec, &st) == 0 && (st.st_mode & 0777) == 0600, "secret key not 0600");
	struct dcr_seckey k;
	struct dcr_pubkey p;
	cr_assert(dcr_seckey_load(sec, &k, &e) == 0, "%s", e.msg);
	cr_assert(dcr_pubkey_load(pub, &p, &e) == 0, "%s", e.msg);
	cr_assert(!memcmp(k.pub, p.key, 32) && !memcmp(k.keynum, p.keynum, 8));
	char *s;
	size_t sl;
	cr_assert(dcr_sign(&k, msg, sizeof(msg) - 1, "k.pub", &s, &sl, &e) == 0, "%s", e.msg);
	cr_assert(dcr_verify_sig(&p, 1, msg, sizeof(msg) - 1, (uint8_t *)s, sl, "m.sig", NULL, &e) ==
		  0, "%s", e.msg);
	write_file(m, msg, sizeof(msg) - 1);
	write_file(sig, s, sl);
	if (!have_signify())
		cr_skip_test("signify-openbsd is not installed: dcr checked itself only");
	cr_assert(sh("signify-openbsd -V -q -p '%s' -m '%s' -x '%s'", pub, m, sig) == 0,
		  "signify-openbsd refused a dcr signature");
	write_file(m, "tampered", 8);
	cr_assert(sh("signify-openbsd -V -q -p '%s' -m '%s' -x '%s' 2>/dev/null", pub, m, sig) != 0,
		  "signify-openbsd accepted a tampered message: the check above proves nothing");
	free(s);
	free(pub);
	free(sec);
	free(m);
	free(sig);
}

Test(sign, signify_keys_and_signatures_work_with_dcr)
{
	if (!have_signify())
		cr_skip_test("signify-openbsd is not installed");
	struct dcr_err e = {0};
	char *pub = path("s.pub"), *sec = path("s.sec"), *m = path("m"), *sig = path("m.sig");
	cr_assert(sh("signify-openbsd -G -n -q -p '%s' -s '%s'%s", pub, sec, "") == 0);
	write_file(m, msg, sizeof(msg) - 1);
	cr_assert(sh("signify-openbsd -S -s '%s' -m '%s' -x '%s'", sec, m, sig) == 0);
	struct dcr_pubkey p;
	struct dcr_seckey k;
	cr_assert(dcr_pubkey_load(pub, &p, &e) == 0, "%s", e.msg);
	cr_assert(dcr_seckey_load(sec, &k, &e) == 0, "%s", e.msg);
	size_t sl;
	uint8_t *s = read_all(sig, &sl);
	cr_assert(dcr_verify_sig(&p, 1, msg, sizeof(msg) - 1, s, sl, "m.sig", NULL, &e) == 0, "%s",
		  e.msg);
	/* and dcr signing with signify's secret key verifies with signify */
	char *ds;
	size_t dl;
	cr_assert(dcr_sign(&k, msg, sizeof(msg) - 1, "s.pub", &ds, &dl, &e) == 0, "%s", e.msg);
	write_file(sig, ds, dl);
	cr_assert(sh("signify-openbsd -V -q -p '%s' -m '%s' -x '%s'", pub, m, sig) == 0);
	free(ds);
	free(s);
	free(pub);
	free(sec);
	free(m);
	free(sig);
}

Test(sign, refusals)
{
	struct dcr_err e = {0};
	char *pub = path("a.pub"), *sec = path("a.sec"), *pub2 = path("b.pub"), *sec2 = path("b.sec");
	cr_assert(dcr_keygen(pub, sec, &e) == 0, "%s", e.msg);
	cr_assert(dcr_keygen(pub2, sec2, &e) == 0, "%s", e.msg);
	/* never overwritten */
	size_t n0, n1;
	uint8_t *before = read_all(sec, &n0);
	cr_assert(dcr_keygen(pub, sec, &e) == -EEXIST, "keygen replaced an existing key: %s", e.msg);
	uint8_t *after = read_all(sec, &n1);
	cr_assert(n0 == n1 && !memcmp(before, after, n0));
	struct dcr_seckey k;
	struct dcr_pubkey p[2];
	cr_assert(dcr_seckey_load(sec, &k, &e) == 0);
	cr_assert(dcr_pubkey_load(pub, &p[0], &e) == 0);
	cr_assert(dcr_pubkey_load(pub2, &p[1], &e) == 0);
	char *s;
	size_t sl;
	cr_assert(dcr_sign(&k, msg, sizeof(msg) - 1, NULL, &s, &sl, &e) == 0);
	size_t which = 9;
	cr_assert(dcr_verify_sig(p, 2, msg, sizeof(msg) - 1, (uint8_t *)s, sl, "sig", &which, &e) == 0);
	cr_assert(which == 0);
	/* wrong key: not one of the trusted */
	cr_assert(dcr_verify_sig(&p[1], 1, msg, sizeof(msg) - 1, (uint8_t *)s, sl, "sig", NULL, &e) ==
		  DCR_EDIGEST);
	cr_assert(strstr(e.msg, "not one of"), "%s", e.msg);
	/* tampered message, one bit */
	char m2[sizeof(msg)];
	memcpy(m2, msg, sizeof(msg));
	m2[10] ^= 1;
	cr_assert(dcr_verify_sig(p, 2, m2, sizeof(msg) - 1, (uint8_t *)s, sl, "sig", NULL, &e) ==
		  DCR_EDIGEST);
	cr_assert(strstr(e.msg, "failed"), "%s", e.msg);
	/* every single-byte change of the signature file is refused */
	for (size_t i = 0; i < sl; i++) {
		char *t = malloc(sl);
		memcpy(t, s, sl);
		t[i] ^= 0x20;
		int r = dcr_verify_sig(p, 2, msg, sizeof(msg) - 1, (uint8_t *)t, sl, "sig", NULL, &e);
		/* the comment's text is untrusted and free: only its prefix matters */
		if (i >= strlen("untrusted comment: ") && i < (size_t)(strchr(s, '\n') - s))
			cr_assert(r == 0, "byte %zu of the comment changed the verdict", i);
		else
			cr_assert(r == DCR_EDIGEST || r == DCR_EFORMAT,
				  "signature with byte %zu flipped accepted", i);
		free(t);
	}
	/* truncated and empty files */
	for (size_t n = 0; n < sl - 1; n += 7)
		cr_assert(dcr_verify_sig(p, 2, msg, sizeof(msg) - 1, (uint8_t *)s, n, "sig", NULL, &e) <
			  0);
	/* a public key is not a secret key, and a secret key with a bad
	 * checksum or a passphrase is refused */
	size_t pl;
	uint8_t *pb = read_all(pub, &pl);
	cr_assert(dcr_seckey_parse(pb, pl, "a.pub", &k, &e) == DCR_EFORMAT);
	size_t skl;
	uint8_t *sk = read_all(sec, &skl);
	const char *nl = memchr(sk, '\n', skl);
	uint8_t raw[104 + 2];
	int got = EVP_DecodeBlock(raw, (const uint8_t *)nl + 1, (int)(skl - (size_t)(nl + 1 - (char *)sk) - 1));
	cr_assert(got >= 104);
	raw[7] = 42; /* kdfrounds != 0: encrypted */
	char line[200];
	int ll = EVP_EncodeBlock((uint8_t *)line, raw, 104);
	char *enc = dcr_asprintf("untrusted comment: x\n%.*s\n", ll, line);
	cr_assert(dcr_seckey_parse((uint8_t *)enc, strlen(enc), "enc.sec", &k, &e) == DCR_EFORMAT);
	cr_assert(strstr(e.msg, "passphrase"), "%s", e.msg);
	free(enc);
	raw[7] = 0;
	raw[50] ^= 1; /* the seed: checksum mismatch */
	ll = EVP_EncodeBlock((uint8_t *)line, raw, 104);
	enc = dcr_asprintf("untrusted comment: x\n%.*s\n", ll, line);
	cr_assert(dcr_seckey_parse((uint8_t *)enc, strlen(enc), "bad.sec", &k, &e) == DCR_EFORMAT);
	cr_assert(strstr(e.msg, "checksum"), "%s", e.msg);
	free(enc);
	free(sk);
	free(pb);
	free(s);
	free(before);
	free(after);
	free(pub);
	free(sec);
	free(pub2);
	free(sec2);
}
