/* trust.c - taking a pack on trust (see trust.h). */
#include "config.h"

#include <string.h>

#include "core/trust.h"

int dcr_trust_check(const struct dcr_trust *t, const uint8_t *man, size_t man_len,
		    const struct dcr_manifest *m, const uint8_t *sig, size_t sig_len,
		    const char *what, struct dcr_err *e)
{
	if (!t || !t->nkeys)
		return 0;
	if (!sig)
		return dcr_err_set(e, DCR_ETRUST,
				   "%s is not signed, and a signature by a trusted key is required",
				   what);
	struct dcr_err se;
	int r = dcr_verify_sig(t->keys, t->nkeys, man, man_len, sig, sig_len, what, NULL, &se);
	if (r) {
		*e = se;
		e->code = DCR_ETRUST;
		return DCR_ETRUST;
	}
	if (!m->have_version)
		return dcr_err_set(e, DCR_ETRUST,
				   "%s is signed but names no version (a signed pack must: dcr-pack --version)",
				   what);
	if (m->version < t->min_version)
		return dcr_err_set(e, DCR_ETRUST,
				   "%s: signed version %llu is below the least taken, %llu (a replay or a rollback)",
				   what, (unsigned long long)m->version,
				   (unsigned long long)t->min_version);
	return t->policy ? dcr_trust_policy(m, t->policy, "--policy or DCR_POLICY", what, e) : 0;
}

int dcr_trust_policy(const struct dcr_manifest *m, const char *follows, const char *whence,
		     const char *what, struct dcr_err *e)
{
	const char *pol = m->policy ? m->policy : "";
	if (!strcmp(pol, follows))
		return 0;
	return dcr_err_set(e, DCR_ETRUST,
			   "%s: signed for policy '%s', not '%s', which this receiver follows (%s): "
			   "another model's pack, signed by the same key",
			   what, pol, follows, whence);
}
