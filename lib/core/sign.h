/* sign.h - Ed25519 keys and detached signatures in OpenBSD signify's file
 * formats, so that `signify -V -p KEY.pub -m FILE` checks what dcr signs and
 * keys made by `signify -G -n` sign for dcr (see dcr(7), TRUST).
 *
 *   public key   "untrusted comment: ...\n" base64("Ed" keynum[8] pubkey[32]) "\n"
 *   secret key   "untrusted comment: ...\n" base64("Ed" "BK" rounds[4, big-endian]
 *                salt[16] checksum[8] keynum[8] seckey[64]) "\n"; dcr reads and
 *                writes only unencrypted keys (rounds 0, as `signify -G -n`);
 *                checksum: the first 8 bytes of SHA-512(seckey); seckey is the
 *                32-byte seed followed by the public key
 *   signature    "untrusted comment: ...\n" base64("Ed" keynum[8] sig[64]) "\n",
 *                an Ed25519 signature of the message's bytes
 */
#ifndef DCR_CORE_SIGN_H
#define DCR_CORE_SIGN_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define DCR_SIG_SUFFIX ".sig"
#define DCR_SIG_MAX 4096 /* a signature file is about 150 bytes */

struct dcr_pubkey {
	uint8_t keynum[8];
	uint8_t key[32];
};

struct dcr_seckey {
	uint8_t keynum[8];
	uint8_t seed[32];
	uint8_t pub[32];
};

/* Make a key pair: pub_path written atomically, sec_path created 0600 with
 * O_EXCL (an existing file is never overwritten: -EEXIST). */
int dcr_keygen(const char *pub_path, const char *sec_path, struct dcr_err *e);

/* Parse key files from memory (what a file holds) or read them. An
 * encrypted secret key (made without signify -n) is refused. */
int dcr_pubkey_parse(const uint8_t *buf, size_t len, const char *what, struct dcr_pubkey *k,
		     struct dcr_err *e);
int dcr_pubkey_load(const char *path, struct dcr_pubkey *k, struct dcr_err *e);
int dcr_seckey_parse(const uint8_t *buf, size_t len, const char *what, struct dcr_seckey *k,
		     struct dcr_err *e);
int dcr_seckey_load(const char *path, struct dcr_seckey *k, struct dcr_err *e);

/* Sign msg: *out gets the signature file's text (malloc'd, *out_len bytes),
 * its comment line naming pub_name ("verify with PUB_NAME"). */
int dcr_sign(const struct dcr_seckey *k, const void *msg, size_t len, const char *pub_name,
	     char **out, size_t *out_len, struct dcr_err *e);

/* Check a signature file's text over msg against the keys: 0 when one of
 * them made it (*which, if non-NULL, gets its index); DCR_EDIGEST with a
 * one-line reason when none did (unknown key number, bad signature),
 * DCR_EFORMAT when sig is not a signature file. */
int dcr_verify_sig(const struct dcr_pubkey *keys, size_t nkeys, const void *msg, size_t len,
		   const uint8_t *sig, size_t sig_len, const char *what, size_t *which,
		   struct dcr_err *e);

#endif
