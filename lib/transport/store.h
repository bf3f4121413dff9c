/* store.h - where payloads and manifests live: one interface, chosen by URL.
 *
 *   /some/dir, file:///some/dir   a directory. Objects are files under it,
 *                                 written to a temp file, fsync'd, renamed,
 *                                 and the directory fsync'd: never
 *                                 half-visible. No server.
 *   s3://bucket/prefix            S3 or an S3-compatible server: path-style
 *                                 requests to an endpoint, virtual-hosted
 *                                 ones to AWS (DCR_S3_ADDRESSING=path|virtual
 *                                 overrides; a dotted bucket stays in the
 *                                 path). Endpoint: opts.endpoint, else
 *                                 $DCR_S3_ENDPOINT, else AWS
 *                                 (https://BUCKET.s3.REGION.amazonaws.com), SigV4
 *                                 signed here, credentials from
 *                                 AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 *                                 AWS_SESSION_TOKEN, AWS_REGION (default
 *                                 us-east-1), else the AWS profile
 *                                 (awsconf.h), else a credential_process,
 *                                 a container's or the instance's
 *                                 endpoint (awscred.h). Multipart upload above
 *                                 opts.multipart_threshold; ListObjectsV2.
 *   http://host/base, https://... any server that takes PUT, GET, HEAD and
 *                                 DELETE of BASE/NAME (TLS verified;
 *                                 opts.cacert). Listing convention:
 *                                   GET BASE/?prefix=PFX   (PFX %-encoded)
 *                                 answers 200 text/plain with the names
 *                                 (relative to BASE) that start with PFX,
 *                                 one per line, each ended by '\n', any
 *                                 order. put_if_absent sends
 *                                 "If-None-Match: *" and expects 412 when
 *                                 the object exists.
 *
 * Object names are relative: "v42/payload-000003". A name is rejected when
 * it is empty, longer than 1024 bytes, starts or ends with '/', has an empty,
 * "." or ".." component, or holds a control character (DCR_EFORMAT).
 *
 * Every function is thread-safe on one store: several threads may call it
 * at once (that is how the async queue below works). Network errors are
 * retried with exponential backoff (5xx, 408, 429, S3 RequestTimeout and
 * SlowDown, timeouts, refused or reset connections, truncated bodies);
 * downloads resume with a Range request after a lost connection, pinned to
 * the object's ETag (If-Match) so a replaced object is never spliced. Other
 * 4xx answers fail at once with the server's code and message:
 *   cannot PUT 's3://b/p/v42/payload-0003': 403 SignatureDoesNotMatch: The ...
 * Absent objects give DCR_ENOTFOUND, lost put_if_absent races DCR_ECONFLICT,
 * other refusals DCR_EREMOTE, and exhausted retries -EIO.
 */
#ifndef DCR_TRANSPORT_STORE_H
#define DCR_TRANSPORT_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "core/digest.h"
#include "core/error.h"
#include "core/file.h"
#include "transport/names.h"

struct dcr_store;

struct dcr_store_opts {
	const char *endpoint;  /* s3: endpoint URL; NULL: $DCR_S3_ENDPOINT or AWS */
	const char *cacert;    /* https: CA bundle file; NULL: system default */
	int retries;           /* attempts after the first; 0: default 5, <0: none */
	int parallel;          /* async workers and multipart streams; 0: 8 */
	int timeout_s;         /* connect timeout, and abort a transfer that
				  moves under 16 KiB/s for this long; 0: 30 */
	uint64_t part_size;    /* s3 multipart part size; 0: 16 MiB (S3 needs
				  >= 5 MiB except the last part) */
	int backoff_ms;        /* first retry delay, doubled each time (capped
				  at 10 s, jittered); 0: 200 */
	int list_page;         /* s3 max-keys per ListObjectsV2 page; 0: 1000 */
	int beneath;           /* a directory: read and list only what lies
				  under it: an object reached through a
				  symbolic link that leads out of it is no
				  such object (a relay sets this: what it
				  reads, it serves to the network) */
	uint64_t multipart_threshold; /* s3: objects larger than this go up as
				  multipart uploads, parts in parallel; 0:
				  128 MiB (a 64 MiB payload is one PUT: push
				  gets its parallelism from payloads) */
};

/* Open a store. Nothing is contacted yet; a directory need not exist (it is
 * created by the first put). The opts may be NULL (all defaults). */
int dcr_store_open(const char *url, const struct dcr_store_opts *o,
		   struct dcr_store **out, struct dcr_err *e);
/* Waits for queued async jobs, then frees. Accepts NULL. */
void dcr_store_close(struct dcr_store *s);
/* "s3://b/p", "http://h/base" or the directory path, as opened, but as
 * messages show it (dcr_url_redact). */
const char *dcr_store_url(const struct dcr_store *s);
/* (dcr_url_redact, in names.h, makes what messages show of a URL.) */
/* A directory store (its objects can be mapped), not a server. */
int dcr_store_is_local(const struct dcr_store *s);
/* A directory store whose directory does not exist (yet: a push creates
 * it), for messages that should name it; 0 for a server. */
int dcr_store_dir_missing(const struct dcr_store *s);

/* Store len bytes as name, replacing any old object; atomic: readers see the
 * old object or the whole new one. On S3, objects above multipart_threshold
 * go up as a multipart upload, parts in parallel. buf is read in place (no
 * copy). */
int dcr_store_put(struct dcr_store *s, const char *name, const void *buf,
		  size_t len, struct dcr_err *e);
/* Same, from a file, streamed: never read whole into memory (S3 hashes it in
 * a first pass, multipart reads one part at a time per stream). */
int dcr_store_put_file(struct dcr_store *s, const char *name, const char *path,
		       struct dcr_err *e);
/* Create name only if no object has that name: DCR_ECONFLICT if one with
 * other content does. If the object already holds exactly these bytes the
 * call succeeds: that is how a retried create whose first answer was lost
 * looks, so callers must put something unique to them (an id, the state id
 * they bind) in the content.
 * Directory: link(2) of a complete temp file. HTTP and S3: a PUT with
 * "If-None-Match: *". The first call on a remote store checks, once, that the
 * server honours that header (it writes, re-puts conditionally and deletes
 * an object "<prefix>/.dcr-cas-probe-*"); a server that ignores it makes
 * this fail with DCR_EREMOTE and a message saying so, never a silent
 * overwrite. */
int dcr_store_put_if_absent(struct dcr_store *s, const char *name,
			    const void *buf, size_t len, struct dcr_err *e);

/* Whole object into malloc'd memory (*buf, free() it; a NUL follows the
 * *len bytes). DCR_ENOTFOUND if absent; DCR_EFORMAT when it is longer than
 * DCR_STORE_GET_MAX (the largest manifest or summary there may be), however
 * much a hostile server would send. */
#define DCR_STORE_GET_MAX (1ull << 30)
int dcr_store_get(struct dcr_store *s, const char *name, uint8_t **buf,
		  size_t *len, struct dcr_err *e);
/* The same, asking a cache on the way (a relay) to check its copy again
 * before it answers (HTTP's Cache-Control: no-cache): for a second try
 * after bytes that did not check out. */
int dcr_store_get_fresh(struct dcr_store *s, const char *name, uint8_t **buf,
			size_t *len, struct dcr_err *e);
/* The same into a blob (util.h; dcr_blob_free it): a read-only mapping for
 * the directory store, no copy; no NUL after it. From a server, at most
 * b->max bytes when set (a payload's size in its manifest), else
 * DCR_PAYLOAD_MAX_FILE. */
struct dcr_blob;
struct dcr_hasher;
int dcr_store_get_blob(struct dcr_store *s, const char *name, struct dcr_blob *b,
		       struct dcr_err *e);
/* A small object whole into malloc'd memory (*buf, free() it, with a NUL
 * after it; NULL and 0 when absent, which is no error), no more than max
 * bytes of it taken: a
 * server's answer is cut off there, a directory's file is measured before
 * it is mapped. One larger is DCR_EFORMAT, "'URL/NAME' is N bytes, not
 * <what>". */
int dcr_store_get_small(struct dcr_store *s, const char *name, size_t max, const char *what,
			uint8_t **buf, size_t *len, struct dcr_err *e);
/* The same, feeding all but its last tail bytes to h (a payload's
 * checksum) while they arrive from a server, while they are in cache. */
int dcr_store_get_blob_hashed(struct dcr_store *s, const char *name, struct dcr_blob *b,
			      size_t tail, const struct dcr_hasher *h, struct dcr_err *e);
/* Exactly len bytes at off into buf; DCR_EFORMAT if the object is shorter. */
int dcr_store_get_range(struct dcr_store *s, const char *name, uint64_t off,
			size_t len, uint8_t *buf, struct dcr_err *e);
/* The same, feeding h the bytes in order as they arrive; with fresh, a
 * cache on the way (a relay) is asked to check its copy again before it
 * answers (as dcr_blob's fresh for a whole object). */
int dcr_store_get_range_hashed(struct dcr_store *s, const char *name, uint64_t off,
			       size_t len, uint8_t *buf, const struct dcr_hasher *h, int fresh,
			       struct dcr_err *e);
/* Stream the whole object to fd (file, pipe or socket), written in order,
 * resuming after connection loss; *size (may be NULL) gets its length. On
 * failure some bytes may already be written. From a server, at most
 * DCR_PAYLOAD_MAX_FILE bytes (the largest object a pack holds). */
int dcr_store_get_to_fd(struct dcr_store *s, const char *name, int fd,
			uint64_t *size, struct dcr_err *e);
/* Size of an object; DCR_ENOTFOUND if absent. */
int dcr_store_stat(struct dcr_store *s, const char *name, uint64_t *size,
		   struct dcr_err *e);
/* Names starting with prefix ("" for all; "v42/" for one directory), sorted
 * by strcmp. *names is a malloc'd array of *n malloc'd strings: free with
 * dcr_store_names_free. Directory stores skip their own temp files. A
 * listing is bounded: more than DCR_STORE_LIST_MAX names, names of more
 * than DCR_STORE_LIST_BYTES bytes in all (each counted with its NUL: 4M
 * names of 64 bytes; without it, 4M names of the longest length held 4
 * GiB), or DCR_STORE_LIST_EMPTY truncated pages in a row that name
 * nothing (a server paging without end), is an error (DCR_EREMOTE; a
 * directory's DCR_EFORMAT), and so is a name listed that no store could
 * hold (dcr_store_check_name; DCR_EFORMAT). */
#define DCR_STORE_LIST_MAX (1u << 22)
#define DCR_STORE_LIST_BYTES ((size_t)256 << 20)
#define DCR_STORE_LIST_EMPTY 8
int dcr_store_list(struct dcr_store *s, const char *prefix, char ***names,
		   size_t *n, struct dcr_err *e);

/* Remove an object; DCR_ENOTFOUND if absent (S3 cannot tell: always 0). */
int dcr_store_delete(struct dcr_store *s, const char *name, struct dcr_err *e);

/* ---- parallel transfers --------------------------------------------- */

/* A caller-owned job run by the store's pool of opts.parallel threads
 * (started on first use). Zero it, set op and the fields that op reads,
 * dcr_store_submit it, later dcr_store_wait it, then read rc/err and the
 * outputs. Everything it points to must stay valid until the wait returns.
 * Jobs run in submit order on the first free worker. */
enum dcr_store_op {
	DCR_STORE_PUT = 1,        /* name, data, len */
	DCR_STORE_PUT_FILE,       /* name, path */
	DCR_STORE_PUT_IF_ABSENT,  /* name, data, len */
	DCR_STORE_GET,            /* name -> buf, buf_len (caller frees buf) */
	DCR_STORE_GET_RANGE,      /* name, off, len, dst */
	DCR_STORE_GET_TO_FD,      /* name, fd -> size */
	DCR_STORE_STAT,           /* name -> size */
	DCR_STORE_DELETE,         /* name */
};

struct dcr_store_job {
	int op;
	const char *name;
	const void *data;   /* PUT, PUT_IF_ABSENT */
	size_t len;         /* PUT, PUT_IF_ABSENT, GET_RANGE */
	const char *path;   /* PUT_FILE */
	uint64_t off;       /* GET_RANGE */
	uint8_t *dst;       /* GET_RANGE */
	int fd;             /* GET_TO_FD */
	void *user;         /* for the caller */
	/* results */
	uint8_t *buf;       /* GET */
	size_t buf_len;     /* GET */
	uint64_t size;      /* GET_TO_FD, STAT */
	int rc;
	struct dcr_err err;
	/* private */
	struct dcr_store_job *next_;
	int state_;
};

/* Queue a job; returns at once. Fails (and the job is not queued) only if
 * the workers cannot be started. */
int dcr_store_submit(struct dcr_store *s, struct dcr_store_job *j,
		     struct dcr_err *e);
/* Block until j is done; returns j->rc (j->err holds the message). */
int dcr_store_wait(struct dcr_store *s, struct dcr_store_job *j);
/* Submit n jobs and wait for all; returns 0 or the first failing job's rc,
 * copying its message to e. */
int dcr_store_run(struct dcr_store *s, struct dcr_store_job *jobs, size_t n,
		  struct dcr_err *e);

#endif
