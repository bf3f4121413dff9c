/* net.h - what the HTTP(S) and S3 stores share (net.c): requests over
 * libcurl with retries, backoff and resumed downloads, a pool of handles
 * for connection reuse, and the store operations that are the same for
 * both once the kind has said where an object lives. Not part of the API. */
#ifndef DCR_TRANSPORT_NET_H
#define DCR_TRANSPORT_NET_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include "core/buf.h"
#include "transport/sigv4.h"
#include "transport/store-impl.h"

/* Name of the probe objects put_if_absent writes on remote stores; lists
 * skip them (net_is_probe). */
#define DCR_CAS_PROBE ".dcr-cas-probe-"

/* Headers one request may carry, the signer's included. */
#define NET_MAX_HEADERS 12

/* Receives a download's bytes in order; off counts from the requested
 * start; total is the object size when known, else 0. 0 or -errno. */
typedef int (*sink_fn)(void *arg, uint64_t off, const uint8_t *p, size_t n,
		       uint64_t total);

/* One request. Zero it (net_obj_req does, for an object), fill the part
 * above "per attempt", net_perform it, read status, etag and resp, then
 * net_req_free it. */
struct net_req {
	const char *method;
	const char *what;          /* the object, for messages */
	char *path;                /* %-encoded, appended to the store's base
				      (and signed) */
	const char *query;         /* %-encoded, or NULL */
	struct dcr_sigv4_header xh[4];
	size_t nxh;
	int has_body;
	const uint8_t *body;       /* or body_fd at body_off */
	int body_fd;
	uint64_t body_off, body_len;
	const char *body_sha;      /* hex SHA-256 of the body, for a signer */
	sink_fn sink;
	void *sink_arg;
	int ranged;
	uint64_t r_start, r_len;
	uint64_t max_body;         /* not ranged: refuse a body longer (0: any) */
	int keep_body;             /* collect a 2xx body into resp */
	int cond_put;              /* 412 means "exists" */

	/* per attempt */
	uint64_t up_pos;
	int sink_rc, read_rc;
	long status;
	char reason[128];
	char etag[256];
	char location[256];        /* a 3xx's Location, query cut, for messages */
	char bucket_region[64];    /* S3's x-amz-bucket-region, for messages */
	time_t date;               /* the answer's Date, or 0 */
	int resigned;              /* signed again with the server's clock */
	uint64_t clen, cr_start, cr_total;
	int have_clen, have_cr;
	int started, deliver;
	uint64_t skip;
	struct dcr_buf resp;
	char stamp[32];            /* the signer's: this attempt's date */
	char *tok;                 /* the signer's: this attempt's session token */

	int no_retry;              /* one attempt only */

	/* across attempts */
	uint64_t got;
	char pin[256];
	uint64_t total;
	int have_total;
};

/* What differs between the kinds that use net.c. */
struct net_hooks {
	/* The path of object name (%-encoded, appended to the base) and the
	 * name messages give it, both malloc'd; 0, or -ENOMEM with either
	 * possibly set. */
	int (*locate)(struct dcr_store *s, const char *name, char **path,
		      char **what);
	/* Add the headers that sign one attempt of q to h (*nh used, room
	 * for NET_MAX_HEADERS) and set *auth to a malloc'd Authorization
	 * value; 0 or -ENOMEM. NULL: requests go unsigned. Uploads to a
	 * store that signs carry the body's hash in q->body_sha. */
	int (*sign)(struct dcr_store *s, struct net_req *q,
		    struct dcr_sigv4_header *h, size_t *nh, char **auth);
	/* Send a whole object: buf, or len bytes of fd from its start.
	 * NULL: one PUT (net_put_once). */
	int (*upload)(struct dcr_store *s, const char *name, const uint8_t *buf,
		      int fd, uint64_t len, struct dcr_err *e);
	/* Downloads (GET, HEAD) follow up to NET_MAX_REDIRS redirects, to
	 * http or https (https only from an https base): an HTTP store's
	 * objects may sit behind a CDN or a moved path, and every byte is
	 * checked against the manifest whatever host serves it. 0: a 3xx is
	 * an error naming where it points (S3 redirects only a request sent
	 * to the wrong region, which a signed request cannot follow). */
	int follow_redirects;
	/* What the kind knows of why q failed for good with a 4xx answer
	 * (code: S3's error code, or NULL), written to out as a clause for
	 * the message ("" when nothing); NULL: nothing. */
	void (*why)(struct dcr_store *s, const struct net_req *q, const char *code, char *out,
		    size_t n);
};

#define NET_MAX_REDIRS 8

/* The start of an HTTP or S3 store's state: s->impl points to a struct
 * whose first member is this. */
struct net {
	const struct net_hooks *k;
	char *base;     /* URL that object paths are appended to: the http base,
			   or the s3 endpoint's origin (scheme://host[:port]) */
	char *shown;    /* base as messages show it (dcr_url_redact): net_set_base */
	pthread_mutex_t curl_mu;
	void **idle;    /* CURL handles kept for connection reuse */
	size_t nidle, cap_idle;
	pthread_mutex_t cas_mu;
	int cas_state;  /* 0 unknown, 1 honoured, -1 ignored */
	long skew;      /* seconds a signing server's clock runs ahead of this
			   machine's, learnt from the Date of a request it
			   refused as too far off (atomic): a signer signs
			   with time(NULL) + skew */
	const char *region; /* S3: the region requests are signed for, else NULL */
	char *bearer;   /* HTTP: "Bearer TOKEN", the Authorization of every
			   request (a kind without a signer), else NULL */
};

static inline struct net *net_of(struct dcr_store *s) { return s->impl; }

/* Allocate size zeroed bytes (the kind's state, starting with a struct
 * net) as s->impl, with hooks k, and start libcurl. The kind sets base. */
int net_open(struct dcr_store *s, size_t size, const struct net_hooks *k,
	     struct dcr_err *e);
/* Set base (taking it) and what messages show of it; 0 or -ENOMEM. */
int net_set_base(struct dcr_store *s, char *base);
/* Free the handles, base and s->impl; the kind frees its own fields first. */
void net_close(struct dcr_store *s);

/* Run q until it succeeds, fails for good, or retries run out. 0 on a 2xx;
 * else a negative code with e filled. The final status is in q->status. */
int net_perform(struct dcr_store *s, struct net_req *q, struct dcr_err *e);
/* Zero q and point it at object name (path and what, *what malloc'd: free
 * it after net_req_free). */
int net_obj_req(struct dcr_store *s, const char *name, struct net_req *q,
		char **what, struct dcr_err *e);
void net_req_free(struct net_req *q);
/* One PUT of buf, or len bytes of fd at off, as name (query appended:
 * a multipart part); if_absent makes it conditional; what_suffix is added
 * to the name in messages; the answer's ETag goes to etag_out if given. */
int net_put_once(struct dcr_store *s, const char *name, const char *query,
		 const uint8_t *buf, int fd, uint64_t off, uint64_t len,
		 int if_absent, const char *what_suffix, char *etag_out,
		 size_t etag_cap, struct dcr_err *e);
/* Bytes per second below which a transfer, for the store's timeout_s in
 * a row, has failed (16 KiB/s, 128 kbit/s: no link a refit crosses is
 * slower, and a 64 MiB payload at that rate still ends in 68 minutes). */
#define NET_LOW_SPEED 16384

/* Sleep before retry attempt+1: opts.backoff_ms doubled per attempt,
 * capped at 10 s, jittered. */
void net_backoff(const struct dcr_store *s, int attempt);
/* Text of the first <tag>...</tag> in xml[0..n), entities decoded
 * (malloc'd), or NULL; *after (may be NULL) gets the end of the match. */
char *net_xml_text(const char *xml, size_t n, const char *tag, const char **after);
/* Does the root element of xml[0..n) (after white space, the XML
 * declaration and comments; a namespace prefix ignored) have a name that
 * starts with prefix? */
int net_xml_root_is(const char *xml, size_t n, const char *prefix);
void net_sha256_hex(const void *p, size_t n, char out[65]);
/* Is the last component of name a CAS probe object? */
int net_is_probe(const char *name);

/* What libcurl hands a request (net_perform sets them as its callbacks;
 * fuzz targets feed them answers directly): one header line (the status
 * line starts a new answer), and body bytes, given to q's sink or kept in
 * q->resp (bounded) as the status says. Body bytes past the announced
 * size, or a 206 for another range, stop the transfer with q->sink_rc
 * NET_SINK_LONG or NET_SINK_BADRANGE. */
#define NET_SINK_BADRANGE 1
#define NET_SINK_LONG 2
#define NET_SINK_BIG 3    /* longer than max_body */
#define NET_SINK_ENOUGH 4 /* a range served whole: stopped at its end */
size_t net_on_header(char *p, size_t sz, size_t nm, void *arg);
size_t net_on_data(char *p, size_t sz, size_t nm, void *arg);
/* The cause of a non-2xx answer for a message: "403 Code: Message" from an
 * S3 XML error body, else the status, reason and the body's first line;
 * *codep (if given) gets the S3 code (malloc'd) or NULL. */
void net_http_cause(const struct net_req *q, char *out, size_t n, char **codep);

/* A secret token kept in file (a bearer token, a web identity): at most
 * max bytes, the white space at its end (CR, LF, blanks, tabs) dropped, as
 * a string in *out; 0, else an error that names var (the variable that
 * named the file) and why. Free it with net_wipe_free. */
int net_read_token_file(const char *var, const char *file, size_t max, char **out,
			struct dcr_err *e);
/* Free a string that held a secret (or NULL), wiped first. */
void net_wipe_free(char *s);

/* One small request that belongs to no store (the S3 store's credential
 * sources, awscred.h): method (GET, or PUT or POST with body, NULL for
 * none) to url, http or https only, with headers ("Name: value"), through no
 * proxy, following no redirect, all of it within timeout_ms; the body, at
 * most max bytes (else -EFBIG), into out. 0 when an answer came, whatever
 * its *status; else negative with e filled (the cause alone: the caller
 * says what was asked): -ETIMEDOUT where the peer took the connection
 * and did not answer in time. Loads libcurl if no store has. */
int net_fetch_small(const char *method, const char *url, const char *const *headers, size_t nh,
		    const char *body, long timeout_ms, size_t max, struct dcr_buf *out,
		    long *status, struct dcr_err *e);

/* Store operations (store-impl.h) for a kind that has set its hooks. */
int net_put(struct dcr_store *s, const char *name, const void *buf,
	    size_t len, struct dcr_err *e);
int net_put_file(struct dcr_store *s, const char *name, const char *path,
		 struct dcr_err *e);
/* Checks first, once per store, that the server honours If-None-Match. */
int net_put_if_absent(struct dcr_store *s, const char *name, const void *buf,
		      size_t len, struct dcr_err *e);
int net_get(struct dcr_store *s, const char *name, struct dcr_buf *b,
	    size_t tail, const struct dcr_hasher *h, struct dcr_err *e);
/* Into the heap buffer b may bring, grown as needed. */
int net_get_blob(struct dcr_store *s, const char *name, struct dcr_blob *b,
		 size_t tail, const struct dcr_hasher *h, struct dcr_err *e);
int net_get_range(struct dcr_store *s, const char *name, uint64_t off,
		  size_t len, uint8_t *buf, const struct dcr_hasher *h, int fresh,
		  struct dcr_err *e);
int net_get_to_fd(struct dcr_store *s, const char *name, int fd,
		  uint64_t *size, struct dcr_err *e);
int net_stat(struct dcr_store *s, const char *name, uint64_t *size,
	     struct dcr_err *e);
int net_delete(struct dcr_store *s, const char *name, struct dcr_err *e);

#endif
