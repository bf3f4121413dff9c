/* finalize.h - the end of a pack that N producers pushed (dcr-pack
 * --producer, dcr-push): their summaries joined into its manifest, which
 * is written last (dcr-push --finalize; dcr-format-pack(5), PRODUCERS). */
#ifndef DCR_TRANSPORT_FINALIZE_H
#define DCR_TRANSPORT_FINALIZE_H

#include "core/fault.h"
#include "core/sign.h"
#include "transport/store.h"

struct dcr_finalize_opts {
	uint32_t producers;   /* N */
	double timeout_s;     /* wait this long for the N summaries (0: they are there) */
	/* sign the manifest (needs have_version): DCR_MANIFEST_SIG_NAME goes
	 * up just before it; sign_pub names the public key in its comment */
	const struct dcr_seckey *sign;
	const char *sign_pub;
	int have_version;
	uint64_t version;
	const char *policy;
	struct dcr_fault *fault; /* a point before the signature and the manifest */
	/* called when summaries arrive: how many of N are in */
	void (*progress)(void *ctx, uint32_t have, uint32_t n);
	void *progress_ctx;
};

struct dcr_finalize_stats {
	uint32_t payloads, tensors;
	uint64_t delta_bytes;    /* the payloads' sizes: what did not move */
	uint64_t summary_bytes;  /* fetched: the N summaries */
	uint64_t check_bytes;    /* fetched: each payload's trailer */
	uint64_t written_bytes;  /* the manifest and its signature */
	double wait_s;           /* waiting for summaries */
	dcr_digest target;
};

/* Wait for the summaries of producers 0..N-1 of pack NAME, check them (one
 * delta, each payload in the store with the trailer its summary names,
 * every canonical element claimed by exactly one producer), join the
 * target digests, and put the manifest last (a manifest already there
 * must be the same bytes: then nothing is written, st->written_bytes 0;
 * another is DCR_ECONFLICT). A producer's summary whose payloads do not yet
 * match is waited for like a missing one (its retry is being pushed). */
int dcr_finalize(struct dcr_store *s, const char *name, const struct dcr_finalize_opts *o,
		 struct dcr_finalize_stats *st, struct dcr_err *e);

#endif
