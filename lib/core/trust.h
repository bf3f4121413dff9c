/* trust.h - what a receiver takes on trust: the keys whose signatures it
 * accepts and the least version it takes (see dcr(7), TRUST). A signature
 * is over the manifest's bytes (core/sign.h), so it binds everything the
 * manifest names: base and target state ids, every payload's size, digest
 * and piece table, the tensor table and its digests, the version and the
 * policy (manifest flag 8). */
#ifndef DCR_CORE_TRUST_H
#define DCR_CORE_TRUST_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/manifest.h"
#include "core/sign.h"

struct dcr_trust {
	const struct dcr_pubkey *keys;
	size_t nkeys;          /* 0: nothing is required */
	uint64_t min_version;  /* with keys: a signed version must be at least this */
	const char *policy;    /* with keys: the policy a signed pack must name
				  (NULL: any; a receiver's own record also counts,
				  refit/apply-pack.c) */
};

/* Whether a pack may be taken: 0 when t is NULL or has no keys, or when
 * sig (the pack's DCR_MANIFEST_SIG_NAME entry, NULL if it has none) is a
 * signature of the manifest's bytes man by one of t's keys and the manifest
 * (m, parsed from man) names a version of at least t->min_version and,
 * where t->policy is set, that policy. Else DCR_ETRUST with a one-line
 * reason: not signed, signed by another key, a manifest changed after it
 * was signed, no version named, a version below the least (a replay or a
 * rollback), another policy (another model's pack signed by the same key);
 * `what` names the manifest. */
int dcr_trust_check(const struct dcr_trust *t, const uint8_t *man, size_t man_len,
		    const struct dcr_manifest *m, const uint8_t *sig, size_t sig_len,
		    const char *what, struct dcr_err *e);

/* A signed manifest m whose policy is not `follows`, which `whence` says
 * where it comes from: DCR_ETRUST with the reason; else 0. */
int dcr_trust_policy(const struct dcr_manifest *m, const char *follows, const char *whence,
		     const char *what, struct dcr_err *e);

#endif
