/* relay.h - a node of a relay tree: an HTTP server (GNU libmicrohttpd)
 * that looks to its children exactly like an http:// store (store.h) and
 * serves the objects of its parents, which may be any store URL or other
 * relays.
 *
 * Every object is fetched from a parent once, however many children ask,
 * into a spool file (the cache directory, or a temporary one), and is
 * served to every child while it arrives (cut-through). Pack payloads are
 * checked before a byte of them is passed on: against the manifest's
 * BLAKE3 piece table (1 MiB pieces), piece by piece as they arrive; or,
 * for packs without one (SHA-256 payloads) and before the manifest exists
 * (a push in progress), whole against their own trailer and the manifest's
 * digest when there is one; a manifest that comes while such a payload
 * is fetched judges it too (one it does not list with that digest is
 * dropped, and its readers cut off). A piece that fails is never written
 * to the spool, served or cached: the relay refetches from that byte on
 * from the next parent. Manifests are checked by their trailer, and with
 * opts.trust by their signature (manifest.dcrm.sig beside them, at most
 * DCR_SIG_MAX bytes taken of it, which receivers check again); then a
 * payload is served only once its pack's manifest is held. Other objects
 * (commit records, refs, a signature not fetched with its manifest) are
 * passed through per request, never cached: nothing checks them here. A
 * GET of one brings from a parent only the range it asks for, at most
 * 256 MiB (403 past that), through a temporary file in the spool; 1 GiB
 * of them at most at once (503 past that).
 *
 * Served: GET and HEAD of NAME (Range "bytes=A-B", "bytes=A-", "bytes=-N";
 * If-Match against the ETag, a payload's digest), GET DIR/?prefix=PFX (the
 * parents' listing), GET /.dcr/status (JSON: parents, cache, objects).
 * Answers: 400 a bad name (a ".." component, ...), 403 more than 256 MiB
 * of an object passed through, 404 absent or outside its pack's manifest
 * (with opts.trust: a payload whose pack has no manifest yet), 405 another
 * method, 412 If-Match failed, 416 bad range, 502 every parent failed (or
 * with opts.trust, the pack's manifest is not trusted), 503 stopping or
 * too much passed through at once. A failure mid-body closes
 * that child's connection (its store client resumes with a Range
 * request); nothing else is affected.
 *
 * Memory: parallel x window bytes of fetch buffers, 256 KiB per response
 * in progress, libmicrohttpd's 32 KiB per connection, and the manifests of
 * the packs in the table: never an object whole. The spool holds at most
 * cache_size bytes of finished objects, and the table at most 262,144
 * objects; the oldest packs' idle objects are dropped first (objects in
 * flight may exceed it). Open files: a finished object holds none; a
 * fetch in flight holds its spool file, and so does each response in
 * progress. The table grows with what it holds, and a manifest of many
 * payloads is prefetched a few hundred names per hold of the lock.
 */
#ifndef DCR_TRANSPORT_RELAY_H
#define DCR_TRANSPORT_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/pack.h"
#include "transport/store.h"
#include "transport/transfer.h"

struct dcr_relay;

struct dcr_relay_opts {
	const char *listen;          /* "ADDR:PORT", "[ADDR6]:PORT"; PORT 0: any free port */
	const char *const *parents;  /* store URLs, tried in order */
	size_t nparents;
	const struct dcr_store_opts *store; /* for the parents (NULL: defaults) */
	const char *cache_dir;       /* kept across runs; NULL: a temporary
					directory, removed by dcr_relay_stop */
	uint64_t cache_size;         /* bytes of finished objects kept; 0: 16 GiB */
	int parallel;                /* objects fetched at once; 0: 4 */
	uint64_t window;             /* bytes per ranged GET to a parent, whole
					pieces; 0: one piece (1 MiB) */
	int threads;                 /* server threads; 0: 4 */
	unsigned max_connections;    /* 0: 4096 */
	unsigned max_per_ip;         /* connections from one address at once;
					0: a quarter of max_connections */
	unsigned idle_timeout_s;     /* close a connection idle this long; 0: 60 */
	int no_prefetch;             /* fetch payloads only when asked, not the
					whole pack once its manifest is asked for */
	/* manifests must be signed by one of these keys (NULL or no keys:
	 * none): a parent serving one that is not, or whose signature does
	 * not check out, is passed over as one serving bad bytes, and no
	 * payload is fetched before its pack's manifest is held, so the relay
	 * never caches, serves or prefetches an untrusted pack; cached
	 * manifests are then not reloaded at start (their signatures are not
	 * kept), and fetched again */
	const struct dcr_trust *trust;
	/* one line per object served, failover and failure (no newline); may
	 * be called from any thread, never with a lock held */
	void (*log)(void *ctx, const char *line);
	void *log_ctx;
};

/* Open the parents, create or reload the cache, and start serving. */
int dcr_relay_start(const struct dcr_relay_opts *o, struct dcr_relay **out, struct dcr_err *e);
/* The port it listens on (useful with PORT 0). */
unsigned dcr_relay_port(const struct dcr_relay *r);
/* The status document GET /.dcr/status answers (malloc'd JSON), or NULL:
 * at most DCR_RELAY_STATUS_MAX objects, those in flight first, and how
 * many it holds (objects_held); _for only those whose names start with
 * prefix (NULL: all), as GET /.dcr/status?prefix=PFX. */
#define DCR_RELAY_STATUS_MAX 1000
char *dcr_relay_status(struct dcr_relay *r);
char *dcr_relay_status_for(struct dcr_relay *r, const char *prefix);
/* Stop serving (children in flight get their connection closed), wait for
 * the fetches in flight to end, free. Accepts NULL. */
void dcr_relay_stop(struct dcr_relay *r);

/* The pack NAME as this relay verifies it, through the same table as its
 * children (fetched once): its payloads in order, in parts as their
 * pieces check out when out.begin is set, then the manifest's signature
 * (when a parent has one) and the manifest, into out, like dcr_pull. Waits up to wait_s for the manifest to appear. This is
 * what dcr-relay --apply feeds to the receiver. */
int dcr_relay_pull(struct dcr_relay *r, const char *name, struct dcr_pack_out out, double wait_s,
		   struct dcr_xfer_stats *st, struct dcr_err *e);

#endif
