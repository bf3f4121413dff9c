/* pack.h - the packer: one delta stream into payloads of about 64 MiB of
 * records each, then the manifest; and where a packer's entries go. */
#ifndef DCR_CORE_PACK_H
#define DCR_CORE_PACK_H

#include "core/delta.h"
#include "core/payload.h"
#include "core/sign.h"

/* Where a packer puts finished entries, in order; manifest last. */
struct dcr_pack_out {
	int (*entry)(void *ctx, const char *name, const uint8_t *buf, size_t len,
		     struct dcr_err *e);
	void *ctx;
	/* optional: an entry in parts, its size given first (tar streams):
	 * dcr-pull passes payloads on piece by piece as they check out */
	int (*begin)(void *ctx, const char *name, uint64_t len, struct dcr_err *e);
	int (*data)(void *ctx, const uint8_t *buf, size_t len, struct dcr_err *e);
	int (*end)(void *ctx, struct dcr_err *e);
	/* optional, for directories: write and fsync an entry from any thread
	 * (stage), then make the staged entries visible in order (commit), or
	 * drop them: dcr-pull -o DIR flushes several payloads at once */
	int (*stage)(void *ctx, const char *name, const uint8_t *buf, size_t len, void **tok,
		     struct dcr_err *e);
	int (*commit)(void *ctx, void *tok, struct dcr_err *e);
	void (*drop)(void *ctx, void *tok);
};

struct dcr_pack_opts {
	uint64_t payload_size; /* raw bytes per payload (default 64 MiB) */
	enum dcr_payload_digest_alg digest; /* payload trailers (default BLAKE3) */
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
	/* the version the pack reaches and its policy, named in the manifest
	 * (flag 8) for a signature to vouch for; policy may be NULL */
	int have_version;
	uint64_t version;
	const char *policy;
	/* sign the manifest: DCR_MANIFEST_SIG_NAME goes out just before it
	 * (needs have_version); sign_pub names the public key in its comment */
	const struct dcr_seckey *sign;
	const char *sign_pub;
	/* one producer of several (dcr-pack --producer R/N; see
	 * core/summary.h): the delta may be partial but must name the
	 * canonical base and carry every tensor's digest parts; the payloads
	 * are named by producer and the producer's summary comes last, in
	 * place of the manifest. attempt (16 bytes, or NULL: derived from
	 * the base and N, the same on every producer) names the pack. */
	int producers;         /* N, or 0 */
	uint32_t producer;     /* R */
	const uint8_t *attempt;
	/* a payload of DCR_LINGER_MIN_RAW or more is also closed once
	 * linger_ms passed since its first item came (0: by size alone), so
	 * that what a slow producer of a stream made goes out within about
	 * that; the pack then depends on the timing (dcr-pack sets it for
	 * pipes only). Last, so that the fields before keep their places. */
	unsigned linger_ms;
};

struct dcr_pack_stats {
	uint32_t npayloads;
	uint64_t summary_bytes; /* a producer's summary */
	uint64_t bytes, items, changes;
	dcr_digest base, target;
};

/* The attempt id that producers of one pack share when not given one. */
void dcr_producers_attempt(const dcr_digest *base, uint32_t n, uint8_t attempt[16]);

/* Read one delta stream and write a pack. */
int dcr_pack(struct dcr_source src, const char *what, const struct dcr_pack_opts *o,
	     struct dcr_pack_out out, struct dcr_pack_stats *st, struct dcr_err *e);

#endif
