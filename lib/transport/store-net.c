/* store_net.c - HTTP(S) and S3 stores over libcurl.
 *
 * One request path for both: perform() sends a request, retries it with
 * exponential backoff while the failure is transient (5xx, 408, 429, S3
 * RequestTimeout, timeouts, resets, truncated bodies), resumes downloads with
 * Range + If-Match at the first byte not yet delivered, and turns the final
 * answer into a one-line error naming the object and the cause. S3 requests
 * are signed with SigV4 (sigv4.c) on each attempt. Bodies are streamed: an
 * upload is read from the caller's buffer or file as curl asks for it, a
 * download is handed to a sink (memory, the caller's buffer, an fd) as it
 * arrives. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "core/blake3.h"
#include "core/file.h"
#include "core/util.h"
#include "transport/sigv4.h"
#include "transport/store-net.h"

struct net_store {
	int s3;
	char *base;     /* URL that object paths are appended to: http base, or
			   s3 endpoint origin (scheme://host[:port]) */
	char *epath;    /* s3: the endpoint's own path ("" or "/x"), then
			   "/bucket" */
	char *hostport; /* s3: Host header value */
	char *bucket, *prefix; /* s3; prefix without trailing '/' ("" if none) */
	char *akid, *secret, *token, *region;
	pthread_mutex_t curl_mu;
	void **idle;    /* CURL handles kept for connection reuse */
	size_t nidle, cap_idle;
	pthread_mutex_t cas_mu;
	int cas_state;  /* 0 unknown, 1 honoured, -1 ignored */
};

static struct net_store *ns(struct dcr_store *s) { return s->impl; }

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define MAX_SMALL_BODY (64u << 20) /* listings, XML answers */
#define MAX_ERR_BODY (64u << 10)
#define MAX_PARTS 10000

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

/* ---- handles --------------------------------------------------------- */

static CURL *handle_get(struct dcr_store *s)
{
	CURL *c = NULL;
	pthread_mutex_lock(&ns(s)->curl_mu);
	if (ns(s)->nidle)
		c = ns(s)->idle[--ns(s)->nidle];
	pthread_mutex_unlock(&ns(s)->curl_mu);
	if (c)
		curl_easy_reset(c); /* keeps the connection cache */
	else
		c = curl_easy_init();
	return c;
}

static void handle_put(struct dcr_store *s, CURL *c)
{
	pthread_mutex_lock(&ns(s)->curl_mu);
	if (ns(s)->nidle == ns(s)->cap_idle) {
		size_t cap = ns(s)->cap_idle ? 2 * ns(s)->cap_idle : 16;
		void **v = realloc(ns(s)->idle, cap * sizeof(*v));
		if (v) {
			ns(s)->idle = v;
			ns(s)->cap_idle = cap;
		}
	}
	if (ns(s)->nidle < ns(s)->cap_idle) {
		ns(s)->idle[ns(s)->nidle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&ns(s)->curl_mu);
	if (c)
		curl_easy_cleanup(c);
}

/* ---- small helpers --------------------------------------------------- */

static void sha256_hex(const void *p, size_t n, char out[65])
{
	dcr_digest d;
	dcr_sha256(p, n, &d);
	dcr_hex(d.b, 32, out);
}

static int file_sha256_hex(int fd, uint64_t off, uint64_t len, char out[65])
{
	size_t cap = 1u << 20;
	uint8_t *b = malloc(cap);
	struct dcr_sha *h = dcr_sha_new();
	int r = b && h ? 0 : -ENOMEM;
	while (!r && len) {
		size_t n = len < cap ? (size_t)len : cap;
		r = dcr_pread_full(fd, b, n, off);
		if (r == -EPIPE)
			r = -EIO; /* the file shrank */
		if (!r)
			dcr_sha_update(h, b, n);
		off += n;
		len -= n;
	}
	if (!r) {
		dcr_digest d;
		dcr_sha_final(h, &d);
		dcr_hex(d.b, 32, out);
	}
	dcr_sha_free(h);
	free(b);
	return r;
}

/* Text of the first <tag>...</tag> in xml[0..n), entities decoded, or NULL. */
static char *xml_text(const char *xml, size_t n, const char *tag, const char **after)
{
	char open[64], close[64];
	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	const char *a = memmem(xml, n, open, strlen(open));
	if (!a)
		return NULL;
	a += strlen(open);
	const char *b = memmem(a, n - (size_t)(a - xml), close, strlen(close));
	if (!b)
		return NULL;
	if (after)
		*after = b + strlen(close);
	char *out = malloc((size_t)(b - a) + 1), *o = out;
	if (!out)
		return NULL;
	for (const char *p = a; p < b;) {
		static const struct { const char *ent; char c; } ents[] = {
			{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''},
		};
		int done = 0;
		if (*p == '&') {
			for (size_t i = 0; i < sizeof(ents) / sizeof(ents[0]); i++) {
				size_t l = strlen(ents[i].ent);
				if ((size_t)(b - p) >= l && !memcmp(p, ents[i].ent, l)) {
					*o++ = ents[i].c;
					p += l;
					done = 1;
					break;
				}
			}
			if (!done && p + 2 < b && p[1] == '#') {
				char *end;
				unsigned long v = p[2] == 'x' ? strtoul(p + 3, &end, 16)
							      : strtoul(p + 2, &end, 10);
				if (end < b && *end == ';' && v > 0 && v < 0x110000) {
					/* UTF-8 encode */
					if (v < 0x80) {
						*o++ = (char)v;
					} else if (v < 0x800) {
						*o++ = (char)(0xc0 | v >> 6);
						*o++ = (char)(0x80 | (v & 0x3f));
					} else if (v < 0x10000) {
						*o++ = (char)(0xe0 | v >> 12);
						*o++ = (char)(0x80 | ((v >> 6) & 0x3f));
						*o++ = (char)(0x80 | (v & 0x3f));
					} else {
						*o++ = (char)(0xf0 | v >> 18);
						*o++ = (char)(0x80 | ((v >> 12) & 0x3f));
						*o++ = (char)(0x80 | ((v >> 6) & 0x3f));
						*o++ = (char)(0x80 | (v & 0x3f));
					}
					p = end + 1;
					done = 1;
				}
			}
		}
		if (!done)
			*o++ = *p++;
	}
	*o = '\0';
	return out;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static long backoff(const struct dcr_store *s, int attempt)
{
	long d = s->o.backoff_ms;
	for (int i = 0; i < attempt && d < 10000; i++)
		d *= 2;
	if (d > 10000)
		d = 10000;
	unsigned r = 0;
	RAND_bytes((unsigned char *)&r, sizeof(r));
	return d / 2 + (long)(r % (unsigned)(d / 2 + 1));
}

/* ---- one request, with retries -------------------------------------- */

/* Receives a download's bytes in order; off counts from the requested
 * start; total is the object size when known, else 0. 0 or -errno. */
typedef int (*sink_fn)(void *arg, uint64_t off, const uint8_t *p, size_t n,
		       uint64_t total);

#define SINK_BADRANGE 1

struct req {
	const char *method;
	const char *what;          /* the object, for messages */
	char *path;                /* s3: %-encoded path; http: full URL */
	const char *query;         /* %-encoded, or NULL */
	struct dcr_sigv4_header xh[4];
	size_t nxh;
	int has_body;
	const uint8_t *body;       /* or body_fd at body_off */
	int body_fd;
	uint64_t body_off, body_len;
	const char *body_sha;      /* s3 */
	sink_fn sink;
	void *sink_arg;
	int ranged;
	uint64_t r_start, r_len;
	int keep_body;             /* collect a 2xx body into resp */
	int cond_put;              /* 412 means "exists" */

	/* per attempt */
	uint64_t up_pos;
	int sink_rc, read_rc;
	long status;
	char reason[128];
	char etag[256];
	uint64_t clen, cr_start, cr_total;
	int have_clen, have_cr;
	int started, deliver;
	uint64_t skip;
	struct dcr_buf resp;

	int no_retry;              /* one attempt only */

	/* across attempts */
	uint64_t got;
	char pin[256];
	uint64_t total;
	int have_total;
};

static size_t on_header(char *p, size_t sz, size_t nm, void *arg)
{
	struct req *q = arg;
	size_t n = sz * nm, l = n;
	while (l && (p[l - 1] == '\r' || p[l - 1] == '\n'))
		l--;
	if (l > 5 && !memcmp(p, "HTTP/", 5)) {
		/* A new response (after a 100 Continue, or a new attempt). */
		q->etag[0] = '\0';
		q->have_clen = q->have_cr = 0;
		q->reason[0] = '\0';
		const char *sp = memchr(p, ' ', l);
		if (sp) {
			q->status = strtol(sp + 1, NULL, 10);
			const char *sp2 = memchr(sp + 1, ' ', l - (size_t)(sp + 1 - p));
			if (sp2) {
				size_t rl = l - (size_t)(sp2 + 1 - p);
				if (rl >= sizeof(q->reason))
					rl = sizeof(q->reason) - 1;
				memcpy(q->reason, sp2 + 1, rl);
				q->reason[rl] = '\0';
			}
		}
		return n;
	}
	const char *colon = memchr(p, ':', l);
	if (!colon)
		return n;
	size_t kl = (size_t)(colon - p);
	const char *v = colon + 1;
	while (v < p + l && (*v == ' ' || *v == '\t'))
		v++;
	size_t vl = (size_t)(p + l - v);
	char val[256];
	if (vl >= sizeof(val))
		vl = sizeof(val) - 1;
	memcpy(val, v, vl);
	val[vl] = '\0';
	if (kl == 4 && !strncasecmp(p, "etag", 4)) {
		memcpy(q->etag, val, vl + 1);
	} else if (kl == 14 && !strncasecmp(p, "content-length", 14)) {
		q->clen = strtoull(val, NULL, 10);
		q->have_clen = 1;
	} else if (kl == 13 && !strncasecmp(p, "content-range", 13)) {
		unsigned long long a, b, t;
		if (sscanf(val, "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
			q->cr_start = a;
			q->cr_total = t;
			q->have_cr = 1;
		}
	}
	return n;
}

static size_t on_data(char *p, size_t sz, size_t nm, void *arg)
{
	struct req *q = arg;
	size_t n = sz * nm;
	if (!q->started) {
		q->started = 1;
		q->deliver = q->sink && (q->status == 200 || q->status == 206);
		if (q->deliver) {
			uint64_t want = q->r_start + q->got;
			if (q->status == 206) {
				if (!q->have_cr || q->cr_start != want) {
					q->sink_rc = SINK_BADRANGE;
					return 0;
				}
				q->skip = 0;
				q->total = q->cr_total;
				q->have_total = 1;
			} else {
				q->skip = want; /* the server ignored Range */
				if (q->have_clen) {
					q->total = q->clen;
					q->have_total = 1;
				}
			}
		}
	}
	if (!q->deliver) {
		size_t cap = q->status >= 200 && q->status < 300 ? MAX_SMALL_BODY : MAX_ERR_BODY;
		size_t room = q->resp.len < cap ? cap - q->resp.len : 0;
		if (q->status >= 200 && q->status < 300 && n > room) {
			q->sink_rc = -EFBIG;
			return 0;
		}
		if (room && dcr_buf_add(&q->resp, p, n < room ? n : room)) {
			q->sink_rc = -ENOMEM;
			return 0;
		}
		return n;
	}
	size_t used = 0;
	if (q->skip) {
		used = q->skip < n ? (size_t)q->skip : n;
		q->skip -= used;
	}
	size_t m = n - used;
	if (q->ranged && m > q->r_len - q->got)
		m = (size_t)(q->r_len - q->got);
	if (m) {
		int r = q->sink(q->sink_arg, q->got, (const uint8_t *)p + used, m,
				q->have_total ? q->total : 0);
		if (r) {
			q->sink_rc = r;
			return 0;
		}
		q->got += m;
	}
	return n;
}

static size_t on_read(char *buf, size_t sz, size_t nm, void *arg)
{
	struct req *q = arg;
	size_t n = sz * nm;
	uint64_t left = q->body_len - q->up_pos;
	if (n > left)
		n = (size_t)left;
	if (!n)
		return 0;
	if (q->body) {
		memcpy(buf, q->body + q->up_pos, n);
	} else {
		int r = dcr_pread_full(q->body_fd, buf, n, q->body_off + q->up_pos);
		if (r) {
			q->read_rc = r == -EPIPE ? -EIO : r;
			return CURL_READFUNC_ABORT;
		}
	}
	q->up_pos += n;
	return n;
}

static int on_seek(void *arg, curl_off_t off, int origin)
{
	struct req *q = arg;
	if (origin != SEEK_SET || off < 0 || (uint64_t)off > q->body_len)
		return CURL_SEEKFUNC_CANTSEEK;
	q->up_pos = (uint64_t)off;
	return CURL_SEEKFUNC_OK;
}

static int curl_retryable(CURLcode c)
{
	switch (c) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_WEIRD_SERVER_REPLY:
		return 1;
	default:
		return 0;
	}
}

/* The cause of a non-2xx answer: "403 SignatureDoesNotMatch: The ..." from
 * an S3 XML error body, else the status, reason and the body's first line. */
static void http_cause(const struct req *q, char *out, size_t n, char **codep)
{
	const char *body = (const char *)q->resp.p;
	size_t bl = q->resp.len;
	char *code = bl ? xml_text(body, bl, "Code", NULL) : NULL;
	char *msg = bl ? xml_text(body, bl, "Message", NULL) : NULL;
	if (code) {
		snprintf(out, n, "%ld %s%s%s", q->status, code, msg ? ": " : "", msg ? msg : "");
	} else {
		char line[200] = "";
		size_t l = 0;
		while (l < bl && l < sizeof(line) - 1 && body[l] != '\n' && body[l] != '\r' &&
		       (unsigned char)body[l] >= 0x20)
			l++;
		if (l)
			memcpy(line, body, l);
		line[l] = '\0';
		snprintf(out, n, "%ld%s%s%s%s", q->status, q->reason[0] ? " " : "", q->reason,
			 l ? ": " : "", line);
	}
	free(msg);
	if (codep)
		*codep = code;
	else
		free(code);
}

static struct curl_slist *add_hdr(struct curl_slist *l, const char *k, const char *v, int *bad)
{
	char *h = dcr_asprintf("%s: %s", k, v);
	struct curl_slist *n = h ? curl_slist_append(l, h) : NULL;
	free(h);
	if (!n) {
		*bad = 1;
		return l;
	}
	return n;
}

/* Build the header list for one attempt (signing it for S3). */
static int build_headers(struct dcr_store *s, struct req *q, struct curl_slist **out)
{
	struct dcr_sigv4_header h[12];
	size_t nh = 0;
	char range[80], amz_date[17];
	int bad = 0;
	for (size_t i = 0; i < q->nxh; i++)
		h[nh++] = q->xh[i];
	if (q->ranged || q->got) {
		uint64_t a = q->r_start + q->got;
		if (q->ranged)
			snprintf(range, sizeof(range), "bytes=%llu-%llu", (unsigned long long)a,
				 (unsigned long long)(q->r_start + q->r_len - 1));
		else
			snprintf(range, sizeof(range), "bytes=%llu-", (unsigned long long)a);
		h[nh++] = (struct dcr_sigv4_header){"Range", range};
	}
	if (q->pin[0] && (q->got || q->ranged))
		h[nh++] = (struct dcr_sigv4_header){"If-Match", q->pin};
	struct curl_slist *l = NULL;
	if (ns(s)->s3) {
		time_t now = time(NULL);
		struct tm tm;
		gmtime_r(&now, &tm);
		strftime(amz_date, sizeof(amz_date), "%Y%m%dT%H%M%SZ", &tm);
		h[nh++] = (struct dcr_sigv4_header){"Host", ns(s)->hostport};
		h[nh++] = (struct dcr_sigv4_header){"x-amz-content-sha256",
						     q->body_sha ? q->body_sha : EMPTY_SHA256};
		h[nh++] = (struct dcr_sigv4_header){"x-amz-date", amz_date};
		if (ns(s)->token)
			h[nh++] = (struct dcr_sigv4_header){"x-amz-security-token", ns(s)->token};
		struct dcr_sigv4 sg = {
			.method = q->method, .uri = q->path, .query = q->query,
			.headers = h, .nheaders = nh,
			.payload_hash = q->body_sha ? q->body_sha : EMPTY_SHA256,
			.amz_date = amz_date, .region = ns(s)->region, .service = "s3",
			.access_key = ns(s)->akid, .secret_key = ns(s)->secret,
		};
		struct dcr_sigv4_out so;
		if (dcr_sigv4_sign(&sg, &so))
			return -ENOMEM;
		l = add_hdr(l, "Authorization", so.authorization, &bad);
		dcr_sigv4_out_free(&so);
	}
	for (size_t i = 0; i < nh; i++)
		l = add_hdr(l, h[i].name, h[i].value, &bad);
	l = add_hdr(l, "Expect", "", &bad); /* "Expect:" removes it */
	if (bad) {
		curl_slist_free_all(l);
		return -ENOMEM;
	}
	*out = l;
	return 0;
}

/* Run q until it succeeds, fails for good, or retries run out. 0 on a 2xx;
 * else a negative code with e filled. The final status is in q->status. */
static int perform(struct dcr_store *s, struct req *q, struct dcr_err *e)
{
	char cause[700] = "", errbuf[CURL_ERROR_SIZE];
	char *url = NULL;
	const char *m = q->method;
	int attempts = 0, r = -EIO;
	if (ns(s)->s3)
		url = dcr_asprintf("%s%s%s%s", ns(s)->base, q->path, q->query ? "?" : "",
				   q->query ? q->query : "");
	else
		url = dcr_asprintf("%s%s%s", q->path, q->query ? "?" : "", q->query ? q->query : "");
	CURL *c = handle_get(s);
	if (!url || !c) {
		free(url);
		if (c)
			curl_easy_cleanup(c);
		return dcr_err_sys(e, ENOMEM, "cannot %s '%s'", m, q->what);
	}
	for (;; attempts++) {
		if (attempts) {
			if (attempts > (q->no_retry ? 0 : s->o.retries)) {
				r = dcr_err_set(e, -EIO, "cannot %s '%s': %s (gave up after %d attempts)",
						m, q->what, cause, attempts);
				break;
			}
			sleep_ms(backoff(s, attempts - 1));
			curl_easy_reset(c);
		}
		if (!q->ranged && q->have_total && q->got == q->total && q->got) {
			r = 0; /* everything arrived before the connection broke */
			break;
		}
		struct curl_slist *hl = NULL;
		if (build_headers(s, q, &hl)) {
			r = dcr_err_sys(e, ENOMEM, "cannot %s '%s'", m, q->what);
			break;
		}
		q->up_pos = 0;
		q->sink_rc = q->read_rc = 0;
		q->status = 0;
		q->started = q->deliver = 0;
		q->skip = 0;
		q->resp.len = 0;
		errbuf[0] = '\0';
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
		curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, q);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, q);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)s->o.timeout_s);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)s->o.timeout_s);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
		if (s->o.cacert)
			curl_easy_setopt(c, CURLOPT_CAINFO, s->o.cacert);
		curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
		curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 2L * 1024 * 1024);
		curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
		if (q->has_body) {
			curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
			curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->body_len);
			curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
			curl_easy_setopt(c, CURLOPT_READDATA, q);
			curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
			curl_easy_setopt(c, CURLOPT_SEEKDATA, q);
			if (strcmp(m, "PUT"))
				curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, m);
		} else if (!strcmp(m, "HEAD")) {
			curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
		} else if (strcmp(m, "GET")) {
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, m);
		}
		CURLcode cc = curl_easy_perform(c);
		curl_slist_free_all(hl);
		long st = 0;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
		if (st)
			q->status = st;
		if (q->sink_rc == SINK_BADRANGE) {
			r = dcr_err_set(e, DCR_EREMOTE,
					"cannot %s '%s': the server answered a range request with the wrong range",
					m, q->what);
			break;
		}
		if (q->sink_rc) {
			r = q->sink_rc == -EFBIG
				? dcr_err_set(e, DCR_EFORMAT, "cannot %s '%s': the answer is larger than %u bytes",
					      m, q->what, MAX_SMALL_BODY)
				: dcr_err_sys(e, q->sink_rc, "cannot %s '%s': cannot store what arrived",
					      m, q->what);
			break;
		}
		if (q->read_rc) {
			r = dcr_err_sys(e, q->read_rc, "cannot %s '%s': cannot read the upload", m, q->what);
			break;
		}
		if (cc != CURLE_OK) {
			snprintf(cause, sizeof(cause), "%s", errbuf[0] ? errbuf : curl_easy_strerror(cc));
			if (curl_retryable(cc))
				continue;
			r = dcr_err_set(e, -EIO, "cannot %s '%s': %s", m, q->what, cause);
			break;
		}
		if (q->status >= 200 && q->status < 300) {
			if (!q->pin[0] && q->etag[0] && q->sink)
				snprintf(q->pin, sizeof(q->pin), "%s", q->etag);
			if (!q->started && q->sink && q->have_clen && q->status == 200 && !q->got) {
				q->total = q->clen; /* empty object */
				q->have_total = 1;
			}
			r = 0;
			break;
		}
		char *code = NULL;
		http_cause(q, cause, sizeof(cause), &code);
		int retry = q->status >= 500 || q->status == 408 || q->status == 429 ||
			    (code && (!strcmp(code, "RequestTimeout") || !strcmp(code, "SlowDown") ||
				      !strcmp(code, "ConditionalRequestConflict") ||
				      !strcmp(code, "OperationAborted")));
		if (retry) {
			free(code);
			continue;
		}
		if (q->status == 404 && !q->has_body && !(code && !strcmp(code, "NoSuchBucket")))
			r = dcr_err_set(e, DCR_ENOTFOUND, "cannot %s '%s': %s", m, q->what, cause);
		else if (q->status == 403 && !strcmp(m, "HEAD") && !q->resp.len)
			r = dcr_err_set(e, DCR_EREMOTE,
					"cannot HEAD '%s': %s (a HEAD answer has no error body: wrong credentials or no access?)",
					q->what, cause);
		else if (q->status == 412 && q->cond_put)
			r = dcr_err_set(e, DCR_ECONFLICT, "cannot create '%s': it already exists (%s)",
					q->what, cause);
		else if ((q->status == 412 || q->status == 304) && q->pin[0])
			r = dcr_err_set(e, -ESTALE,
					"cannot %s '%s': the object changed during the download (ETag %s no longer matches)",
					m, q->what, q->pin);
		else if (q->status == 416)
			r = dcr_err_set(e, DCR_EFORMAT, "cannot %s '%s': %s (the object is shorter than the range)",
					m, q->what, cause);
		else
			r = dcr_err_set(e, DCR_EREMOTE, "cannot %s '%s': %s", m, q->what, cause);
		free(code);
		break;
	}
	handle_put(s, c);
	free(url);
	return r;
}

static void req_free(struct req *q)
{
	free(q->path);
	dcr_buf_free(&q->resp);
}

/* ---- names to URLs --------------------------------------------------- */

/* The full key of an object (S3) with the store prefix. */
static char *s3_key(struct dcr_store *s, const char *name)
{
	return ns(s)->prefix[0] ? dcr_asprintf("%s/%s", ns(s)->prefix, name) : dcr_strdup(name);
}

/* Path (s3, encoded) or URL (http) of an object, and its display name. */
static int obj_req(struct dcr_store *s, const char *name, struct req *q,
		   char **what, struct dcr_err *e)
{
	memset(q, 0, sizeof(*q));
	q->body_fd = -1;
	char *key = ns(s)->s3 ? s3_key(s, name) : dcr_strdup(name);
	char *enc = key ? dcr_uri_encode(key, strlen(key), 1) : NULL;
	if (enc) {
		if (ns(s)->s3) {
			q->path = dcr_asprintf("%s/%s", ns(s)->epath, enc);
			*what = dcr_asprintf("s3://%s/%s", ns(s)->bucket, key);
		} else {
			q->path = dcr_asprintf("%s/%s", ns(s)->base, enc);
			*what = dcr_asprintf("%s/%s", ns(s)->base, name);
		}
	}
	free(key);
	free(enc);
	if (!q->path || !*what) {
		free(q->path);
		free(*what);
		q->path = *what = NULL;
		return dcr_err_sys(e, ENOMEM, "cannot reach '%s'", name);
	}
	q->what = *what;
	return 0;
}

/* ---- open/close ------------------------------------------------------ */

static char *env(const char *k)
{
	const char *v = getenv(k);
	return v && *v ? dcr_strdup(v) : NULL;
}

/* Split "scheme://host[:port][/path]" into origin and path (no trailing
 * '/'). */
static int split_url(const char *url, char **origin, char **path)
{
	const char *p = strstr(url, "://");
	const char *h = p ? p + 3 : url;
	const char *slash = strchr(h, '/');
	size_t ol = slash ? (size_t)(slash - url) : strlen(url);
	*origin = p ? strndup(url, ol) : dcr_asprintf("https://%.*s", (int)ol, url);
	const char *pp = slash ? slash : "";
	size_t pl = strlen(pp);
	while (pl && pp[pl - 1] == '/')
		pl--;
	*path = strndup(pp, pl);
	return *origin && *path ? 0 : -ENOMEM;
}

static int net_open(struct dcr_store *s, const char *url, struct dcr_err *e)
{
	struct net_store *n = dcr_calloc(1, sizeof(*n));
	if (!n)
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", url);
	pthread_mutex_init(&n->curl_mu, NULL);
	pthread_mutex_init(&n->cas_mu, NULL);
	s->impl = n;
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return dcr_err_set(e, -EIO, "cannot open store '%s': libcurl initialisation failed: %s",
				   url, curl_easy_strerror(curl_init_rc));
	if (strncmp(url, "s3://", 5)) {
		size_t n = strlen(url);
		while (n && url[n - 1] == '/')
			n--;
		const char *h = strstr(url, "://") + 3;
		if (!*h || *h == '/')
			return dcr_err_set(e, -EINVAL, "cannot open store '%s': no host", url);
		if (strchr(url, '?') || strchr(url, '#'))
			return dcr_err_set(e, -EINVAL, "cannot open store '%s': a query or fragment is not allowed", url);
		ns(s)->base = strndup(url, n);
		return ns(s)->base ? 0 : dcr_err_sys(e, ENOMEM, "cannot open store '%s'", url);
	}
	n->s3 = 1;
	const char *b = url + 5, *slash = strchr(b, '/');
	size_t bl = slash ? (size_t)(slash - b) : strlen(b);
	if (!bl)
		return dcr_err_set(e, -EINVAL, "cannot open store '%s': no bucket", url);
	for (size_t i = 0; i < bl; i++) {
		char c = b[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		      c == '_' || (c >= 'A' && c <= 'Z')))
			return dcr_err_set(e, -EINVAL, "cannot open store '%s': invalid bucket name '%.*s'",
					   url, (int)bl, b);
	}
	ns(s)->bucket = strndup(b, bl);
	const char *pfx = slash ? slash + 1 : "";
	size_t pl = strlen(pfx);
	while (pl && pfx[pl - 1] == '/')
		pl--;
	ns(s)->prefix = strndup(pfx, pl);
	if (!ns(s)->bucket || !ns(s)->prefix)
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", url);
	if (pl) {
		if (dcr_store_check_name(ns(s)->prefix, NULL))
			return dcr_err_set(e, -EINVAL, "cannot open store '%s': invalid key prefix '%s'",
					   url, ns(s)->prefix);
	}
	ns(s)->akid = env("AWS_ACCESS_KEY_ID");
	ns(s)->secret = env("AWS_SECRET_ACCESS_KEY");
	ns(s)->token = env("AWS_SESSION_TOKEN");
	ns(s)->region = env("AWS_REGION");
	if (!ns(s)->region)
		ns(s)->region = env("AWS_DEFAULT_REGION");
	if (!ns(s)->region)
		ns(s)->region = dcr_strdup("us-east-1");
	if (!ns(s)->akid || !ns(s)->secret)
		return dcr_err_set(e, -EINVAL,
				   "cannot open store '%s': AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set",
				   url);
	char *ep = s->o.endpoint ? dcr_strdup(s->o.endpoint) : env("DCR_S3_ENDPOINT");
	/* AWS itself wants virtual-hosted requests (BUCKET.s3.REGION...; path
	 * style is refused for new buckets); S3-compatible servers at an
	 * endpoint get path style. DCR_S3_ADDRESSING=path|virtual overrides,
	 * and a bucket name with a dot (no valid TLS name) stays path style. */
	char *addr = env("DCR_S3_ADDRESSING");
	int vhost = addr ? !strcmp(addr, "virtual") : !ep;
	free(addr);
	if (strchr(ns(s)->bucket, '.'))
		vhost = 0;
	if (!ep)
		ep = vhost ? dcr_asprintf("https://%s.s3.%s.amazonaws.com", ns(s)->bucket, ns(s)->region)
			   : dcr_asprintf("https://s3.%s.amazonaws.com", ns(s)->region);
	else if (vhost && strstr(ep, "://")) {
		/* put the bucket first in the endpoint's host, unless it is there */
		char *sep = strstr(ep, "://");
		size_t bl = strlen(ns(s)->bucket);
		if (strncmp(sep + 3, ns(s)->bucket, bl) || sep[3 + bl] != '.') {
			char *v = dcr_asprintf("%.*s://%s.%s", (int)(sep - ep), ep, ns(s)->bucket,
					       sep + 3);
			free(ep);
			ep = v;
		}
	}
	char *epath = NULL;
	int r = ep ? split_url(ep, &ns(s)->base, &epath) : -ENOMEM;
	free(ep);
	if (!r) {
		ns(s)->epath = vhost ? dcr_strdup(epath) : dcr_asprintf("%s/%s", epath, ns(s)->bucket);
		ns(s)->hostport = dcr_strdup(strstr(ns(s)->base, "://") + 3);
		if (!ns(s)->epath || !ns(s)->hostport)
			r = -ENOMEM;
		for (char *p = ns(s)->hostport; p && *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
	}
	free(epath);
	if (r)
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", url);
	if (!ns(s)->hostport[0])
		return dcr_err_set(e, -EINVAL, "cannot open store '%s': endpoint has no host", url);
	return 0;
}

static void net_close(struct dcr_store *s)
{
	if (!ns(s))
		return;
	for (size_t i = 0; i < ns(s)->nidle; i++)
		curl_easy_cleanup(ns(s)->idle[i]);
	free(ns(s)->idle);
	free(ns(s)->base);
	free(ns(s)->epath);
	free(ns(s)->hostport);
	free(ns(s)->bucket);
	free(ns(s)->prefix);
	if (ns(s)->secret)
		OPENSSL_cleanse(ns(s)->secret, strlen(ns(s)->secret));
	free(ns(s)->akid);
	free(ns(s)->secret);
	free(ns(s)->token);
	free(ns(s)->region);
	pthread_mutex_destroy(&ns(s)->curl_mu);
	pthread_mutex_destroy(&ns(s)->cas_mu);
	free(ns(s));
}

/* ---- uploads --------------------------------------------------------- */

/* One PUT (or POST) of a body in memory or in a file region. */
static int put_once(struct dcr_store *s, const char *name, const char *query,
		    const uint8_t *buf, int fd, uint64_t off, uint64_t len,
		    int if_absent, const char *what_suffix, char *etag_out,
		    size_t etag_cap, struct dcr_err *e)
{
	struct req q;
	char *what = NULL, sha[65];
	int r = obj_req(s, name, &q, &what, e);
	if (r)
		return r;
	if (what_suffix) {
		char *w = dcr_asprintf("%s%s", what, what_suffix);
		if (!w) {
			req_free(&q);
			free(what);
			return dcr_err_sys(e, ENOMEM, "cannot PUT '%s'", name);
		}
		free(what);
		q.what = what = w;
	}
	q.method = "PUT";
	q.query = query;
	q.has_body = 1;
	q.body = buf;
	q.body_fd = fd;
	q.body_off = off;
	q.body_len = len;
	q.cond_put = if_absent;
	if (if_absent)
		q.xh[q.nxh++] = (struct dcr_sigv4_header){"If-None-Match", "*"};
	if (ns(s)->s3) {
		/* SigV4 signs the body's hash: a file is read twice (the
		 * second time from the page cache), never held whole. */
		if (buf)
			sha256_hex(buf, (size_t)len, sha);
		else if ((r = file_sha256_hex(fd, off, len, sha)))
			r = dcr_err_sys(e, r, "cannot read the file to upload as '%s'", q.what);
		q.body_sha = sha;
	}
	if (!r)
		r = perform(s, &q, e);
	if (!r && etag_out) {
		if (!q.etag[0])
			r = dcr_err_set(e, DCR_EREMOTE, "cannot PUT '%s': the server sent no ETag", q.what);
		else
			snprintf(etag_out, etag_cap, "%s", q.etag);
	}
	req_free(&q);
	free(what);
	return r;
}

struct mp {
	struct dcr_store *s;
	const char *name;
	const uint8_t *buf;
	int fd;
	uint64_t size, psize;
	unsigned nparts;
	char *query_id; /* "uploadId=..." encoded */
	char (*etags)[256];
	pthread_mutex_t mu;
	unsigned next;
	int rc;
	struct dcr_err err;
};

static void *mp_worker(void *arg)
{
	struct mp *m = arg;
	uint8_t *pb = NULL;
	struct dcr_err le;
	for (;;) {
		pthread_mutex_lock(&m->mu);
		if (m->rc || m->next >= m->nparts) {
			pthread_mutex_unlock(&m->mu);
			break;
		}
		unsigned idx = m->next++;
		pthread_mutex_unlock(&m->mu);
		uint64_t off = (uint64_t)idx * m->psize;
		uint64_t n = m->size - off < m->psize ? m->size - off : m->psize;
		const uint8_t *data = m->buf ? m->buf + off : NULL;
		int r = 0;
		if (!data) {
			if (!pb && !(pb = malloc((size_t)m->psize)))
				r = dcr_err_sys(&le, ENOMEM, "cannot upload '%s'", m->name);
			else if ((r = dcr_pread_full(m->fd, pb, (size_t)n, off)))
				r = dcr_err_sys(&le, r == -EPIPE ? EIO : -r,
						"cannot read part %u of the upload of '%s'", idx + 1, m->name);
			data = pb;
		}
		char *query = r ? NULL : dcr_asprintf("partNumber=%u&%s", idx + 1, m->query_id);
		char *sfx = r ? NULL : dcr_asprintf(" (part %u of %u)", idx + 1, m->nparts);
		if (!r && (!query || !sfx))
			r = dcr_err_sys(&le, ENOMEM, "cannot upload '%s'", m->name);
		if (!r)
			r = put_once(m->s, m->name, query, data, -1, 0, n, 0, sfx,
				     m->etags[idx], sizeof(m->etags[idx]), &le);
		free(query);
		free(sfx);
		if (r) {
			pthread_mutex_lock(&m->mu);
			if (!m->rc) {
				m->rc = r;
				m->err = le;
			}
			pthread_mutex_unlock(&m->mu);
			break;
		}
	}
	free(pb);
	return NULL;
}

/* A POST with an optional XML body; the 2xx answer is kept in q->resp. */
static int s3_post(struct dcr_store *s, const char *name, const char *query,
		   const char *body, struct dcr_buf *answer, struct dcr_err *e)
{
	struct req q;
	char *what = NULL, sha[65];
	int r = obj_req(s, name, &q, &what, e);
	if (r)
		return r;
	size_t bl = body ? strlen(body) : 0;
	q.method = "POST";
	q.query = query;
	q.has_body = 1;
	q.body = (const uint8_t *)(body ? body : "");
	q.body_len = bl;
	q.keep_body = 1;
	sha256_hex(q.body, bl, sha);
	q.body_sha = sha;
	if (body)
		q.xh[q.nxh++] = (struct dcr_sigv4_header){"Content-Type", "application/xml"};
	r = perform(s, &q, e);
	if (!r) {
		*answer = q.resp;
		q.resp = (struct dcr_buf){0};
	}
	req_free(&q);
	free(what);
	return r;
}

static int s3_multipart(struct dcr_store *s, const char *name, const uint8_t *buf,
			int fd, uint64_t size, struct dcr_err *e)
{
	struct mp m = {.s = s, .name = name, .buf = buf, .fd = fd, .size = size};
	struct dcr_buf ans = {0};
	char *id = NULL, *what = NULL, *xml_s = NULL;
	int r;
	m.psize = s->o.part_size;
	if (m.psize < 1)
		m.psize = 1;
	if ((size + m.psize - 1) / m.psize > MAX_PARTS) {
		m.psize = (size + MAX_PARTS - 1) / MAX_PARTS;
		m.psize = (m.psize + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
	}
	m.nparts = (unsigned)((size + m.psize - 1) / m.psize);
	char *key = s3_key(s, name);
	what = key ? dcr_asprintf("s3://%s/%s", ns(s)->bucket, key) : NULL;
	free(key);
	if (!what)
		return dcr_err_sys(e, ENOMEM, "cannot upload '%s'", name);

	/* 1. initiate */
	r = s3_post(s, name, "uploads=", NULL, &ans, e);
	if (r)
		goto out;
	id = xml_text((char *)ans.p, ans.len, "UploadId", NULL);
	if (!id) {
		r = dcr_err_set(e, DCR_EREMOTE,
				"cannot start a multipart upload of '%s': the answer has no UploadId", what);
		goto out;
	}
	char *eid = dcr_uri_encode(id, strlen(id), 0);
	m.query_id = eid ? dcr_asprintf("uploadId=%s", eid) : NULL;
	free(eid);
	m.etags = dcr_calloc(m.nparts, sizeof(*m.etags));
	if (!m.query_id || !m.etags) {
		r = dcr_err_sys(e, ENOMEM, "cannot upload '%s'", what);
		goto abort;
	}

	/* 2. parts, in parallel: this thread and up to parallel-1 more */
	pthread_mutex_init(&m.mu, NULL);
	unsigned nt = (unsigned)s->o.parallel < m.nparts ? (unsigned)s->o.parallel : m.nparts;
	pthread_t *th = dcr_calloc(nt, sizeof(*th));
	unsigned started = 0;
	for (unsigned i = 1; th && i < nt; i++, started++)
		if (pthread_create(&th[started], NULL, mp_worker, &m))
			break;
	mp_worker(&m);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	pthread_mutex_destroy(&m.mu);
	if (m.rc) {
		r = m.rc;
		if (e)
			*e = m.err;
		goto abort;
	}

	/* 3. complete */
	struct dcr_buf x = {0};
	int bad = dcr_buf_add(&x, "<CompleteMultipartUpload>", 25);
	for (unsigned i = 0; !bad && i < m.nparts; i++) {
		char part[400];
		int l = snprintf(part, sizeof(part),
				 "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>",
				 i + 1, m.etags[i]);
		bad = dcr_buf_add(&x, part, (size_t)l);
	}
	if (bad || dcr_buf_add(&x, "</CompleteMultipartUpload>", 27)) { /* with NUL */
		dcr_buf_free(&x);
		r = dcr_err_sys(e, ENOMEM, "cannot upload '%s'", what);
		goto abort;
	}
	xml_s = (char *)x.p;
	/* S3 may answer 200 and still report an error in the body. */
	for (int attempt = 0;; attempt++) {
		dcr_buf_free(&ans);
		r = s3_post(s, name, m.query_id, xml_s, &ans, e);
		if (r)
			goto abort;
		if (ans.len && memmem(ans.p, ans.len, "<CompleteMultipartUploadResult", 30))
			break;
		char *code = xml_text((char *)ans.p, ans.len, "Code", NULL);
		char *msg = xml_text((char *)ans.p, ans.len, "Message", NULL);
		int retry = code && (!strcmp(code, "InternalError") || !strcmp(code, "SlowDown")) &&
			    attempt < s->o.retries;
		if (!retry)
			r = dcr_err_set(e, DCR_EREMOTE, "cannot complete the multipart upload of '%s': %s%s%s",
					what, code ? code : "unexpected answer", msg ? ": " : "",
					msg ? msg : "");
		free(code);
		free(msg);
		if (!retry)
			goto abort;
		sleep_ms(backoff(s, attempt));
	}
	goto out;
abort: {
		/* Best effort: free the parts; the error already says why. */
		struct req q;
		char *w2 = NULL;
		struct dcr_err ign;
		if (m.query_id && !obj_req(s, name, &q, &w2, &ign)) {
			q.method = "DELETE";
			q.query = m.query_id;
			q.no_retry = 1; /* never sleep on the way out */
			perform(s, &q, &ign);
			req_free(&q);
			free(w2);
		}
	}
out:
	dcr_buf_free(&ans);
	free(id);
	free(what);
	free(xml_s);
	free(m.query_id);
	free(m.etags);
	return r;
}

static int net_delete(struct dcr_store *s, const char *name, struct dcr_err *e);

/* Check once per store that the server honours "If-None-Match: *". */
static int cas_check(struct dcr_store *s, struct dcr_err *e)
{
	pthread_mutex_lock(&ns(s)->cas_mu);
	int r = 0;
	if (ns(s)->cas_state == 0) {
		uint8_t rnd[8];
		char hex[17], name[64];
		RAND_bytes(rnd, sizeof(rnd));
		dcr_hex(rnd, sizeof(rnd), hex);
		snprintf(name, sizeof(name), DCR_CAS_PROBE "%s", hex);
		static const uint8_t body[] = "dcr probe: does this server honour If-None-Match?\n";
		r = put_once(s, name, NULL, body, -1, 0, sizeof(body) - 1, 0, NULL, NULL, 0, e);
		if (!r) {
			struct dcr_err e2;
			int c = put_once(s, name, NULL, body, -1, 0, sizeof(body) - 1, 1, NULL, NULL, 0, &e2);
			if (c == DCR_ECONFLICT)
				ns(s)->cas_state = 1;
			else if (c == 0)
				ns(s)->cas_state = -1;
			else {
				r = c;
				if (e)
					*e = e2;
			}
			struct dcr_err ign;
			net_delete(s, name, &ign);
		}
	}
	pthread_mutex_unlock(&ns(s)->cas_mu);
	return r;
}

static int net_send(struct dcr_store *s, const char *name, const void *buf,
		    size_t len, int fd, uint64_t flen, int if_absent, struct dcr_err *e)
{
	uint64_t size = fd >= 0 ? flen : len;
	if (if_absent) {
		int r = cas_check(s, e);
		if (r)
			return r;
		if (ns(s)->cas_state < 0) {
			char *key = ns(s)->s3 ? s3_key(s, name) : NULL;
			char *w = key ? dcr_asprintf("s3://%s/%s", ns(s)->bucket, key)
				      : dcr_asprintf("%s/%s", ns(s)->base, name);
			r = dcr_err_set(e, DCR_EREMOTE,
					"cannot create '%s' only if absent: the server at '%s' ignores "
					"If-None-Match (a conditional PUT overwrote a probe object), so "
					"compare-and-set is not safe there", w ? w : name, ns(s)->base);
			free(key);
			free(w);
			return r;
		}
	}
	if (!ns(s)->s3)
		return put_once(s, name, NULL, buf, fd, 0, size, if_absent, NULL, NULL, 0, e);
	if (!if_absent && size > s->o.multipart_threshold)
		return s3_multipart(s, name, buf, fd, size, e);
	return put_once(s, name, NULL, buf, fd, 0, size, if_absent, NULL, NULL, 0, e);
}

static int net_put(struct dcr_store *s, const char *name, const void *buf,
		   size_t len, struct dcr_err *e)
{
	return net_send(s, name, buf, len, -1, 0, 0, e);
}

static int net_put_if_absent(struct dcr_store *s, const char *name,
			     const void *buf, size_t len, struct dcr_err *e)
{
	return net_send(s, name, buf, len, -1, 0, 1, e);
}

static int net_put_file(struct dcr_store *s, const char *name, const char *path,
			struct dcr_err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return dcr_err_sys(e, errno, "cannot open '%s'", path);
	int r;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		r = dcr_err_sys(e, errno ? errno : EINVAL, "cannot upload '%s': not a regular file", path);
		close(fd);
		return r;
	}
	r = net_send(s, name, NULL, 0, fd, (uint64_t)st.st_size, 0, e);
	close(fd);
	return r;
}

/* ---- downloads ------------------------------------------------------- */

static int get_stream(struct dcr_store *s, const char *name, int ranged,
		      uint64_t off, uint64_t len, sink_fn sink, void *arg,
		      uint64_t *got, uint64_t *total, struct dcr_err *e)
{
	struct req q;
	char *what = NULL;
	int r = obj_req(s, name, &q, &what, e);
	if (r)
		return r;
	q.method = "GET";
	q.sink = sink;
	q.sink_arg = arg;
	q.ranged = ranged;
	q.r_start = off;
	q.r_len = len;
	r = perform(s, &q, e);
	if (!r && ranged && q.got != len)
		r = dcr_err_set(e, DCR_EFORMAT,
				"cannot GET %llu bytes at %llu of '%s': only %llu arrived (the object is shorter)",
				(unsigned long long)len, (unsigned long long)off, q.what,
				(unsigned long long)q.got);
	if (!r && !ranged && q.have_total && q.got != q.total)
		r = dcr_err_set(e, -EIO, "cannot GET '%s': %llu of %llu bytes arrived", q.what,
				(unsigned long long)q.got, (unsigned long long)q.total);
	if (got)
		*got = q.got;
	if (total)
		*total = q.have_total ? q.total : q.got;
	req_free(&q);
	free(what);
	return r;
}

static int sink_mem(void *arg, uint64_t off, const uint8_t *p, size_t n, uint64_t total)
{
	struct dcr_buf *b = arg;
	(void)off;
	if (!b->len && total && total < SIZE_MAX) {
		if (dcr_buf_reserve(b, (size_t)total + 1))
			return -ENOMEM;
		dcr_prefault(b->p, (size_t)total);
	}
	return dcr_buf_add(b, p, n) ? -ENOMEM : 0;
}

/* Feed h the bytes of p from *fed up to have, while they are in cache: in
 * whole 64 KiB steps (which BLAKE3 hashes eight chunks at a time), or
 * with last, all of them. */
#define HASH_STEP (64u << 10)
static void feed_hasher(const struct dcr_hasher *h, const uint8_t *p, size_t *fed, size_t have,
			int last)
{
	if (have <= *fed || (!last && have - *fed < HASH_STEP))
		return;
	size_t k = last ? have - *fed : (have - *fed) / HASH_STEP * HASH_STEP;
	h->update(h->ctx, p + *fed, k);
	*fed += k;
}

/* sink_mem, hashing all but the last tail bytes */
struct sink_hash {
	struct dcr_buf *b;
	const struct dcr_hasher *h;
	size_t tail, fed;
};

static int sink_mem_hash(void *arg, uint64_t off, const uint8_t *p, size_t n, uint64_t total)
{
	struct sink_hash *sh = arg;
	int r = sink_mem(sh->b, off, p, n, total);
	if (!r && sh->b->len > sh->tail)
		feed_hasher(sh->h, sh->b->p, &sh->fed, sh->b->len - sh->tail, 0);
	return r;
}

static int net_get(struct dcr_store *s, const char *name, struct dcr_buf *b,
		   size_t tail, const struct dcr_hasher *h, struct dcr_err *e)
{
	b->len = 0;
	if (!h)
		return get_stream(s, name, 0, 0, 0, sink_mem, b, NULL, NULL, e);
	struct sink_hash sh = {.b = b, .h = h, .tail = tail};
	int r = get_stream(s, name, 0, 0, 0, sink_mem_hash, &sh, NULL, NULL, e);
	if (!r && b->len > tail)
		feed_hasher(h, b->p, &sh.fed, b->len - tail, 1);
	return r;
}

/* into the heap buffer b may bring, grown as needed: a recycled buffer
 * costs no page faults */
static int net_get_blob(struct dcr_store *s, const char *name, struct dcr_blob *b,
			size_t tail, const struct dcr_hasher *h, struct dcr_err *e)
{
	if (b->map)
		dcr_blob_free(b);
	struct dcr_buf buf = {b->p, 0, b->cap};
	int r = net_get(s, name, &buf, tail, h, e);
	b->p = buf.p;
	b->len = buf.len;
	b->cap = buf.cap;
	return r;
}

static int sink_range(void *arg, uint64_t off, const uint8_t *p, size_t n, uint64_t total)
{
	(void)total;
	memcpy((uint8_t *)arg + off, p, n);
	return 0;
}

/* sink_range, feeding h the bytes that have come in order (a retry may
 * send bytes again) */
struct sink_range_hash {
	uint8_t *buf;
	size_t fed;
	const struct dcr_hasher *h;
};

static int sink_range_hash(void *arg, uint64_t off, const uint8_t *p, size_t n, uint64_t total)
{
	struct sink_range_hash *sh = arg;
	sink_range(sh->buf, off, p, n, total);
	if (off <= sh->fed)
		feed_hasher(sh->h, sh->buf, &sh->fed, (size_t)off + n, 0);
	return 0;
}

static int net_get_range(struct dcr_store *s, const char *name, uint64_t off,
			 size_t len, uint8_t *buf, const struct dcr_hasher *h,
			 struct dcr_err *e)
{
	if (!len)
		return 0;
	if (!h)
		return get_stream(s, name, 1, off, len, sink_range, buf, NULL, NULL, e);
	struct sink_range_hash sh = {.buf = buf, .h = h};
	int r = get_stream(s, name, 1, off, len, sink_range_hash, &sh, NULL, NULL, e);
	if (!r)
		feed_hasher(h, buf, &sh.fed, len, 1);
	return r;
}

static int sink_fd(void *arg, uint64_t off, const uint8_t *p, size_t n, uint64_t total)
{
	(void)off;
	(void)total;
	return dcr_write_full(*(int *)arg, p, n);
}

static int net_get_to_fd(struct dcr_store *s, const char *name, int fd,
		      uint64_t *size, struct dcr_err *e)
{
	uint64_t got = 0;
	int r = get_stream(s, name, 0, 0, 0, sink_fd, &fd, &got, NULL, e);
	if (!r && size)
		*size = got;
	return r;
}

static int net_stat(struct dcr_store *s, const char *name, uint64_t *size,
		 struct dcr_err *e)
{
	struct req q;
	char *what = NULL;
	int r = obj_req(s, name, &q, &what, e);
	if (r)
		return r;
	q.method = "HEAD";
	r = perform(s, &q, e);
	if (!r && !q.have_clen)
		r = dcr_err_set(e, DCR_EREMOTE, "cannot HEAD '%s': the answer has no Content-Length",
				q.what);
	if (!r)
		*size = q.clen;
	req_free(&q);
	free(what);
	return r;
}

static int net_delete(struct dcr_store *s, const char *name, struct dcr_err *e)
{
	struct req q;
	char *what = NULL;
	int r = obj_req(s, name, &q, &what, e);
	if (r)
		return r;
	q.method = "DELETE";
	r = perform(s, &q, e);
	req_free(&q);
	free(what);
	return r;
}

/* ---- listing --------------------------------------------------------- */

static int is_probe(const char *name)
{
	const char *b = strrchr(name, '/');
	b = b ? b + 1 : name;
	return !strncmp(b, DCR_CAS_PROBE, strlen(DCR_CAS_PROBE));
}

static int s3_list(struct dcr_store *s, const char *prefix, struct dcr_names *l,
		   struct dcr_err *e)
{
	char *full = ns(s)->prefix[0] ? dcr_asprintf("%s/%s", ns(s)->prefix, prefix) : dcr_strdup(prefix);
	char *efull = full ? dcr_uri_encode(full, strlen(full), 0) : NULL;
	char *what = full ? dcr_asprintf("s3://%s/%s", ns(s)->bucket, full) : NULL;
	char *token = NULL;
	size_t strip = ns(s)->prefix[0] ? strlen(ns(s)->prefix) + 1 : 0;
	int r = 0;
	if (!efull || !what) {
		r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", prefix);
		goto out;
	}
	for (int page = 0;; page++) {
		char *etok = token ? dcr_uri_encode(token, strlen(token), 0) : NULL;
		char *query = dcr_asprintf("list-type=2&max-keys=%d&prefix=%s%s%s", s->o.list_page,
					   efull, etok ? "&continuation-token=" : "",
					   etok ? etok : "");
		free(etok);
		struct req q;
		memset(&q, 0, sizeof(q));
		q.body_fd = -1;
		q.method = "GET";
		q.what = what;
		q.path = dcr_strdup(ns(s)->epath[0] ? ns(s)->epath : "/");
		q.query = query;
		q.keep_body = 1;
		if (!query || !q.path) {
			free(query);
			req_free(&q);
			r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", what);
			goto out;
		}
		r = perform(s, &q, e);
		free(query);
		if (r) {
			if (r == DCR_ENOTFOUND) { /* no such bucket: not "no object" */
				r = DCR_EREMOTE;
				if (e)
					e->code = r;
			}
			req_free(&q);
			goto out;
		}
		const char *x = (const char *)q.resp.p, *end = x + q.resp.len;
		const char *after;
		char *k;
		while (x < end && (k = xml_text(x, (size_t)(end - x), "Key", &after))) {
			x = after;
			if (strlen(k) < strip || strncmp(k, full, strlen(full)) || is_probe(k + strip)) {
				free(k);
				continue;
			}
			char *rel = dcr_strdup(k + strip);
			free(k);
			if (!rel || store_names_add(l, rel)) {
				free(rel);
				req_free(&q);
				r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", what);
				goto out;
			}
		}
		char *trunc = xml_text((char *)q.resp.p, q.resp.len, "IsTruncated", NULL);
		free(token);
		token = trunc && !strcmp(trunc, "true")
			? xml_text((char *)q.resp.p, q.resp.len, "NextContinuationToken", NULL) : NULL;
		int more = trunc && !strcmp(trunc, "true");
		free(trunc);
		req_free(&q);
		if (!more)
			break;
		if (!token) {
			r = dcr_err_set(e, DCR_EREMOTE,
					"cannot list '%s': a truncated page has no NextContinuationToken", what);
			goto out;
		}
	}
out:
	free(full);
	free(efull);
	free(what);
	free(token);
	return r;
}

static int http_list(struct dcr_store *s, const char *prefix, struct dcr_names *l,
		     struct dcr_err *e)
{
	struct req q;
	memset(&q, 0, sizeof(q));
	q.body_fd = -1;
	char *ep = dcr_uri_encode(prefix, strlen(prefix), 0);
	char *query = ep ? dcr_asprintf("prefix=%s", ep) : NULL;
	char *what = dcr_asprintf("%s/%s", ns(s)->base, prefix);
	q.path = dcr_asprintf("%s/", ns(s)->base);
	int r = 0;
	if (!query || !what || !q.path) {
		r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", prefix);
		goto out;
	}
	q.method = "GET";
	q.what = what;
	q.query = query;
	q.keep_body = 1;
	r = perform(s, &q, e);
	if (r) {
		if (r == DCR_ENOTFOUND || r == DCR_EREMOTE)
			r = dcr_err_set(e, DCR_EREMOTE,
					"cannot list '%s': the server does not list (GET %s/?prefix=... answered %ld); "
					"see store.h for the convention",
					what, ns(s)->base, q.status);
		goto out;
	}
	const char *p = (const char *)q.resp.p, *end = p + q.resp.len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (n && p[n - 1] == '\r')
			n--;
		char *name = n ? strndup(p, n) : NULL;
		p = nl ? nl + 1 : end;
		if (!n)
			continue;
		if (!name) {
			r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", what);
			goto out;
		}
		struct dcr_err ne;
		if (dcr_store_check_name(name, &ne)) {
			r = dcr_err_set(e, DCR_EFORMAT, "cannot list '%s': the server listed a bad name: %s",
					what, ne.msg);
			free(name);
			goto out;
		}
		if (strncmp(name, prefix, strlen(prefix)) || is_probe(name)) {
			free(name);
			continue;
		}
		if (store_names_add(l, name)) {
			free(name);
			r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", what);
			goto out;
		}
	}
out:
	req_free(&q);
	free(query);
	free(ep);
	free(what);
	return r;
}

static int net_list(struct dcr_store *s, const char *prefix, struct dcr_names *l,
		    struct dcr_err *e)
{
	return ns(s)->s3 ? s3_list(s, prefix, l, e) : http_list(s, prefix, l, e);
}

const struct dcr_store_ops store_http_ops = {
	.open = net_open,
	.close = net_close,
	.put = net_put,
	.put_file = net_put_file,
	.put_if_absent = net_put_if_absent,
	.get = net_get,
	.get_blob = net_get_blob,
	.get_range = net_get_range,
	.get_to_fd = net_get_to_fd,
	.stat = net_stat,
	.list = net_list,
	.delete = net_delete,
};

const struct dcr_store_ops store_s3_ops = {
	.open = net_open,
	.close = net_close,
	.put = net_put,
	.put_file = net_put_file,
	.put_if_absent = net_put_if_absent,
	.get = net_get,
	.get_blob = net_get_blob,
	.get_range = net_get_range,
	.get_to_fd = net_get_to_fd,
	.stat = net_stat,
	.list = net_list,
	.delete = net_delete,
};
