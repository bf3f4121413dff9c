/* transfer.h - moving packs between pack streams and stores. */
#ifndef DCR_TRANSPORT_TRANSFER_H
#define DCR_TRANSPORT_TRANSFER_H

#include "core/fault.h"
#include "core/pack.h"
#include "core/packio.h"
#include "core/trust.h"
#include "transport/store.h"

/* Split "STORE/NAME" at its last '/' into a store URL and a pack name
 * (trailing slashes ignored). */
int dcr_split_store_url(const char *arg, char **store, char **name, struct dcr_err *e);

#define DCR_PART_SIZE (16u << 20)

/* pull with wait_s: before the manifest has come, a listed payload is
 * fetched whole into memory, par at a time, only up to this many bytes
 * (twice dcr-pack's default --payload-size of 64M); a larger one waits
 * for the manifest, which lists its size, and the payloads after it with
 * it */
#define DCR_PULL_AHEAD_MAX (128ull << 20)

struct dcr_xfer_opts {
	int parallel;        /* transfers in flight (default 4) */
	double wait_s;       /* pull: follow a pack being pushed for this long */
	int dense;           /* the pack must be a dense copy (a push: checked
				before its manifest goes up) */
	uint64_t part_size;  /* pull from a server: bytes per ranged GET, rounded
				up to whole pieces (default DCR_PART_SIZE) */
	/* pull: a fault point before each entry is handed on; when armed, the
	 * entries go out whole and in order (no staging, no parts) so that
	 * the Nth point is the Nth entry */
	struct dcr_fault *fault;
	/* called after each payload: bytes moved so far, payloads moved so far */
	void (*progress)(void *ctx, uint64_t bytes, uint64_t payloads);
	void *progress_ctx;
	/* pull: the keys the manifest must be signed by, and the least
	 * version it must reach (NULL or no keys: none); checked as soon as
	 * the manifest and its signature are in, before anything goes on (with
	 * wait_s, payloads listed before the manifest exists go on ahead: no
	 * receiver applies anything before a manifest) */
	const struct dcr_trust *trust;
	/* the state the pack must reach (its manifest's target), or NULL: a
	 * committed version's (refs/vV), which a pack pushed under its name
	 * again, or a dense copy of another checkpoint, does not. A pull
	 * checks it before anything goes on, a push before its manifest goes
	 * up (DCR_ECONFLICT) */
	const dcr_digest *want_target;
};

/* The head of the manifest of pack NAME in s (dcr_manifest_head: base,
 * target, attempt, dense), read alone with a ranged GET: a dense copy's
 * manifest holds a CV per MiB of its payloads, tens of MB for a large
 * model. */
int dcr_store_manifest_head(struct dcr_store *s, const char *name, struct dcr_manifest *m,
			    struct dcr_err *e);

struct dcr_xfer_stats {
	uint32_t payloads;
	uint64_t bytes;
	int skipped; /* pull: payloads already present (resume) */
};

/* Upload each payload of `in` as NAME/<entry> while later ones are still
 * arriving, checking each, then the manifest last, once every payload it
 * lists is stored with the digest it names. */
int dcr_push(struct dcr_store *s, const char *name, struct dcr_pack_in *in,
	     const struct dcr_xfer_opts *o, struct dcr_xfer_stats *st, struct dcr_err *e);

/* Download NAME's payloads in parallel and hand them to out in order, each
 * checked against its own checksum and the manifest's digest, then the
 * manifest's signature (when the pack is signed) and the manifest. With wait_s, start before the manifest exists. `have`, when
 * non-NULL, reports payloads already on hand (resume): it returns 1 and
 * fills digest if payload `index` is present. */
int dcr_pull(struct dcr_store *s, const char *name, struct dcr_pack_out out,
	     int (*have)(void *ctx, uint32_t index, dcr_digest *digest), void *have_ctx,
	     const struct dcr_xfer_opts *o, struct dcr_xfer_stats *st, struct dcr_err *e);

/* The same from several sources of one pack (the same pack under each
 * store and name, e.g. relays and the store behind them), tried in order:
 * when a source fails (after its store's retries) or serves bytes that do
 * not check out, the fetch goes on at the next one, and the fetches after
 * it start there. Payloads already handed on are not fetched again; a
 * payload streamed in parts resumes after its last piece that checked
 * out, a payload fetched whole starts again. The manifest comes from the
 * first source that has one that parses. */
struct dcr_pull_source {
	struct dcr_store *s;
	const char *name;
};
/* Open the store of one STORE/NAME argument into src (src->name malloc'd):
 * with dense, NAME's dense copy, which lives beside the deltas as
 * NAME.dense (dcr-diff --dense NEW | dcr-pack | dcr-push - STORE/NAME.dense).
 * An argument that is no STORE/NAME is DCR_EFORMAT (a usage error, nothing
 * opened); a store that cannot be opened is the store's error, never that. */
int dcr_pull_source_open(const char *arg, int dense, const struct dcr_store_opts *so,
			 struct dcr_pull_source *src, struct dcr_err *e);
void dcr_pull_source_close(struct dcr_pull_source *src);
int dcr_pull_from(const struct dcr_pull_source *src, size_t nsrc, struct dcr_pack_out out,
		  int (*have)(void *ctx, uint32_t index, dcr_digest *digest), void *have_ctx,
		  const struct dcr_xfer_opts *o, struct dcr_xfer_stats *st, struct dcr_err *e);

#endif
