/* net.c - what the HTTP(S) and S3 stores share over libcurl.
 *
 * One request path for both: net_perform() sends a request, retries it with
 * exponential backoff while the failure is transient (5xx, 408, 429, S3
 * RequestTimeout, timeouts, resets, truncated bodies), resumes downloads with
 * Range + If-Match at the first byte not yet delivered, and turns the final
 * answer into a one-line error naming the object and the cause. The kind's
 * hooks (net.h) say where an object is and sign each attempt (S3: SigV4).
 * Bodies are streamed: an upload is read from the caller's buffer or file as
 * curl asks for it, a download is handed to a sink (memory, the caller's
 * buffer, an fd) as it arrives. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "core/dynlib.h"
#include "core/file.h"
#include "core/payload.h"
#include "core/util.h"
#include "transport/net.h"
#include "transport/names.h"
#include "transport/sigv4.h"

#define MAX_SMALL_BODY (64u << 20) /* listings, XML answers */
#define MAX_ERR_BODY (64u << 10)

/* libcurl, loaded when the first HTTP or S3 store opens (core/dynlib.h):
 * with it come some thirty libraries that a command using only directory
 * stores would otherwise map and relocate at every start */
static struct {
	CURLcode (*global_init)(long);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_perform)(CURL *);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	void (*easy_reset)(CURL *);
	void (*easy_cleanup)(CURL *);
	const char *(*easy_strerror)(CURLcode);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
} cu;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_load_rc;
static struct dcr_err curl_load_err;
static CURLcode curl_init_rc;
static void curl_init(void)
{
	static const char *const so[] = {"libcurl.so.4", "libcurl-gnutls.so.4", "libcurl.so", NULL};
	const struct dcr_dynsym sym[] = {
		{"curl_global_init", &cu.global_init},
		{"curl_easy_init", &cu.easy_init},
		{"curl_easy_setopt", &cu.easy_setopt},
		{"curl_easy_perform", &cu.easy_perform},
		{"curl_easy_getinfo", &cu.easy_getinfo},
		{"curl_easy_reset", &cu.easy_reset},
		{"curl_easy_cleanup", &cu.easy_cleanup},
		{"curl_easy_strerror", &cu.easy_strerror},
		{"curl_slist_append", &cu.slist_append},
		{"curl_slist_free_all", &cu.slist_free_all},
	};
	curl_load_rc = dcr_dynlib_load("for the HTTP and S3 stores", so, sym,
				       sizeof(sym) / sizeof(sym[0]), &curl_load_err);
	if (!curl_load_rc)
		curl_init_rc = cu.global_init(CURL_GLOBAL_DEFAULT);
}

/* libcurl loaded and started (once per process): 0, else why not. */
static int curl_ready(struct dcr_err *e)
{
	pthread_once(&curl_once, curl_init);
	if (curl_load_rc)
		return dcr_err_set(e, curl_load_rc, "%s", curl_load_err.msg);
	if (curl_init_rc != CURLE_OK)
		return dcr_err_set(e, -EIO, "libcurl initialisation failed: %s",
				   cu.easy_strerror(curl_init_rc));
	return 0;
}

/* ---- handles --------------------------------------------------------- */

static CURL *handle_get(struct dcr_store *s)
{
	struct net *n = net_of(s);
	CURL *c = NULL;
	pthread_mutex_lock(&n->curl_mu);
	if (n->nidle)
		c = n->idle[--n->nidle];
	pthread_mutex_unlock(&n->curl_mu);
	if (c)
		cu.easy_reset(c); /* keeps the connection cache */
	else
		c = cu.easy_init();
	return c;
}

static void handle_put(struct dcr_store *s, CURL *c)
{
	struct net *n = net_of(s);
	pthread_mutex_lock(&n->curl_mu);
	if (n->nidle == n->cap_idle) {
		size_t cap = n->cap_idle ? 2 * n->cap_idle : 16;
		void **v = realloc(n->idle, cap * sizeof(*v));
		if (v) {
			n->idle = v;
			n->cap_idle = cap;
		}
	}
	if (n->nidle < n->cap_idle) {
		n->idle[n->nidle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&n->curl_mu);
	if (c)
		cu.easy_cleanup(c);
}

/* ---- small helpers --------------------------------------------------- */

void net_sha256_hex(const void *p, size_t n, char out[65])
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

/* The root element's name starts with prefix: see net.h. */
int net_xml_root_is(const char *xml, size_t n, const char *prefix)
{
	const char *p = xml, *end = xml + n;
	for (;;) {
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
			p++;
		if (end - p < 2 || *p != '<')
			return 0;
		if (p[1] != '?' && p[1] != '!')
			break;
		const char *close = p[1] == '?' ? "?>" : (end - p >= 4 && !memcmp(p, "<!--", 4)) ? "-->" : ">";
		const char *c = memmem(p + 2, (size_t)(end - p - 2), close, strlen(close));
		if (!c)
			return 0;
		p = c + strlen(close);
	}
	const char *name = ++p;
	while (p < end && *p != '>' && *p != '/' && *p != ' ' && *p != '\t' && *p != '\r' &&
	       *p != '\n') {
		if (*p == ':')
			name = p + 1;
		p++;
	}
	size_t l = strlen(prefix);
	return (size_t)(p - name) >= l && !memcmp(name, prefix, l);
}

/* Text of the first <tag>...</tag> in xml[0..n), entities decoded, or NULL. */
char *net_xml_text(const char *xml, size_t n, const char *tag, const char **after)
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

void net_backoff(const struct dcr_store *s, int attempt)
{
	sleep_ms(backoff(s, attempt));
}

/* ---- one request, with retries -------------------------------------- */


size_t net_on_header(char *p, size_t sz, size_t nm, void *arg)
{
	struct net_req *q = arg;
	size_t n = sz * nm, l = n;
	while (l && (p[l - 1] == '\r' || p[l - 1] == '\n'))
		l--;
	if (l > 5 && !memcmp(p, "HTTP/", 5)) {
		/* A new response (after a 100 Continue, or a new attempt). */
		q->etag[0] = '\0';
		q->have_clen = q->have_cr = 0;
		q->reason[0] = '\0';
		q->location[0] = '\0';
		q->bucket_region[0] = '\0';
		q->date = 0;
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
	} else if (kl == 8 && !strncasecmp(p, "location", 8)) {
		/* no query: a presigned URL's signature stays out of messages */
		size_t ql = strcspn(val, "?#");
		if (ql >= sizeof(q->location))
			ql = sizeof(q->location) - 1;
		memcpy(q->location, val, ql);
		q->location[ql] = '\0';
	} else if (kl == 19 && !strncasecmp(p, "x-amz-bucket-region", 19)) {
		/* a region's name, or nothing */
		size_t ok = vl && vl < sizeof(q->bucket_region) ? strspn(val, "abcdefghijklmnopqrstuvwxyz0123456789-") : 0;
		if (ok == vl)
			memcpy(q->bucket_region, val, vl + 1);
	} else if (kl == 4 && !strncasecmp(p, "date", 4)) {
		struct tm tm;
		memset(&tm, 0, sizeof(tm));
		const char *end = strptime(val, "%a, %d %b %Y %H:%M:%S GMT", &tm);
		q->date = end && !*end ? timegm(&tm) : 0;
		if (q->date < 0)
			q->date = 0;
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

size_t net_on_data(char *p, size_t sz, size_t nm, void *arg)
{
	struct net_req *q = arg;
	size_t n = sz * nm;
	if (!q->started) {
		q->started = 1;
		q->deliver = q->sink && (q->status == 200 || q->status == 206);
		if (q->deliver) {
			uint64_t want = q->r_start + q->got;
			if (q->status == 206) {
				if (!q->have_cr || q->cr_start != want) {
					q->sink_rc = NET_SINK_BADRANGE;
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
	if (!q->ranged && q->have_total && (q->got > q->total || m > q->total - q->got)) {
		q->sink_rc = NET_SINK_LONG; /* more than the announced size */
		return 0;
	}
	if (!q->ranged && q->max_body &&
	    ((q->have_total && q->total > q->max_body) || m > q->max_body - q->got)) {
		q->sink_rc = NET_SINK_BIG; /* more than the object may hold */
		return 0;
	}
	if (m) {
		int r = q->sink(q->sink_arg, q->got, (const uint8_t *)p + used, m,
				q->have_total ? q->total : 0);
		if (r) {
			q->sink_rc = r;
			return 0;
		}
		q->got += m;
	}
	/* a server that ignored Range sends the object whole, or without end,
	 * and one that answered 206 may send more than the range: the range
	 * is here, stop reading (a 206 that ends where it should is read to
	 * its end, so that its connection can serve the next request) */
	if (q->ranged && q->got == q->r_len && (q->status == 200 || used + m < n)) {
		q->sink_rc = NET_SINK_ENOUGH;
		return 0;
	}
	return n;
}

static size_t on_read(char *buf, size_t sz, size_t nm, void *arg)
{
	struct net_req *q = arg;
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
	struct net_req *q = arg;
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
void net_http_cause(const struct net_req *q, char *out, size_t n, char **codep)
{
	const char *body = (const char *)q->resp.p;
	size_t bl = q->resp.len;
	char *code = bl ? net_xml_text(body, bl, "Code", NULL) : NULL;
	char *msg = bl ? net_xml_text(body, bl, "Message", NULL) : NULL;
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
	struct curl_slist *n = h ? cu.slist_append(l, h) : NULL;
	free(h);
	if (!n) {
		*bad = 1;
		return l;
	}
	return n;
}

/* Build the header list for one attempt (signed by the kind's hook). */
static int build_headers(struct dcr_store *s, struct net_req *q, struct curl_slist **out)
{
	struct dcr_sigv4_header h[NET_MAX_HEADERS];
	size_t nh = 0;
	char range[80], *auth = NULL;
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
	if (net_of(s)->k->sign && net_of(s)->k->sign(s, q, h, &nh, &auth))
		return -ENOMEM;
	struct curl_slist *l = NULL;
	if (auth)
		l = add_hdr(l, "Authorization", auth, &bad);
	else if (net_of(s)->bearer)
		l = add_hdr(l, "Authorization", net_of(s)->bearer, &bad);
	free(auth);
	for (size_t i = 0; i < nh; i++)
		l = add_hdr(l, h[i].name, h[i].value, &bad);
	l = add_hdr(l, "Expect", "", &bad); /* "Expect:" removes it */
	if (bad) {
		cu.slist_free_all(l);
		return -ENOMEM;
	}
	*out = l;
	return 0;
}

/* Whether q follows redirects (net_hooks.follow_redirects: downloads
 * only), having told c where to: http or https, https only from an https
 * base. Where libcurl cannot be told, none is followed, and a 3xx is an
 * error as for an upload. libcurl sends the Authorization and Cookie
 * headers and a URL's user and password to no other host. */
static long follows_redirects(struct dcr_store *s, const struct net_req *q, CURL *c)
{
	if (!net_of(s)->k->follow_redirects || q->has_body)
		return 0;
	int tls = !strncmp(net_of(s)->base, "https:", 6);
#if LIBCURL_VERSION_NUM >= 0x075500
	CURLcode cc = cu.easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, tls ? "https" : "http,https");
#else
	CURLcode cc = cu.easy_setopt(c, CURLOPT_REDIR_PROTOCOLS,
				     tls ? CURLPROTO_HTTPS : CURLPROTO_HTTP | CURLPROTO_HTTPS);
#endif
	return cc == CURLE_OK;
}

/* One attempt's options on handle c (reset before each retry). */
static void net_setup(struct dcr_store *s, struct net_req *q, CURL *c, const char *url,
		      struct curl_slist *hl, char *errbuf)
{
	const char *m = q->method;
	cu.easy_setopt(c, CURLOPT_URL, url);
	cu.easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
	cu.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	cu.easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	cu.easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	cu.easy_setopt(c, CURLOPT_HEADERFUNCTION, net_on_header);
	cu.easy_setopt(c, CURLOPT_HEADERDATA, q);
	cu.easy_setopt(c, CURLOPT_WRITEFUNCTION, net_on_data);
	cu.easy_setopt(c, CURLOPT_WRITEDATA, q);
	cu.easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)s->o.timeout_s);
	/* a transfer averaging under NET_LOW_SPEED for timeout_s has failed:
	 * a server that trickles a byte a second held a pull for ever */
	cu.easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, (long)NET_LOW_SPEED);
	cu.easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)s->o.timeout_s);
	cu.easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
	cu.easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
	if (s->o.cacert)
		cu.easy_setopt(c, CURLOPT_CAINFO, s->o.cacert);
	cu.easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
	cu.easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 2L * 1024 * 1024);
	cu.easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	cu.easy_setopt(c, CURLOPT_FOLLOWLOCATION, follows_redirects(s, q, c));
	cu.easy_setopt(c, CURLOPT_MAXREDIRS, (long)NET_MAX_REDIRS);
	if (q->has_body) {
		cu.easy_setopt(c, CURLOPT_UPLOAD, 1L);
		cu.easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->body_len);
		cu.easy_setopt(c, CURLOPT_READFUNCTION, on_read);
		cu.easy_setopt(c, CURLOPT_READDATA, q);
		cu.easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
		cu.easy_setopt(c, CURLOPT_SEEKDATA, q);
		if (strcmp(m, "PUT"))
			cu.easy_setopt(c, CURLOPT_CUSTOMREQUEST, m);
	} else if (!strcmp(m, "HEAD")) {
		cu.easy_setopt(c, CURLOPT_NOBODY, 1L);
	} else if (strcmp(m, "GET")) {
		cu.easy_setopt(c, CURLOPT_CUSTOMREQUEST, m);
	}
}

/* What the callbacks refused during an attempt (a wrong range, a body
 * longer than announced, a sink or upload that failed): an error, never
 * retried; 0 when they refused nothing. */
static int net_callback_error(const struct net_req *q, struct dcr_err *e)
{
	const char *m = q->method;
	if (q->sink_rc == NET_SINK_BADRANGE)
		return dcr_err_set(e, DCR_EREMOTE,
				   "cannot %s '%s': the server answered a range request with the wrong range",
				   m, q->what);
	if (q->sink_rc == NET_SINK_LONG)
		return dcr_err_set(e, DCR_EREMOTE,
				   "cannot %s '%s': the body is longer than the %llu bytes the server announced",
				   m, q->what, (unsigned long long)q->total);
	if (q->sink_rc == NET_SINK_BIG)
		return dcr_err_set(e, DCR_EFORMAT,
				   "cannot %s '%s': the server sends more than %llu bytes, the most it may hold",
				   m, q->what, (unsigned long long)q->max_body);
	if (q->sink_rc)
		return q->sink_rc == -EFBIG
			       ? dcr_err_set(e, DCR_EFORMAT, "cannot %s '%s': the answer is larger than %u bytes",
					     m, q->what, MAX_SMALL_BODY)
			       : dcr_err_sys(e, q->sink_rc, "cannot %s '%s': cannot store what arrived",
					     m, q->what);
	if (q->read_rc)
		return dcr_err_sys(e, q->read_rc, "cannot %s '%s': cannot read the upload", m, q->what);
	return 0;
}

/* A status outside 2xx: 1 when it is worth another attempt (5xx, 408,
 * 429, S3's transient codes), 2 when it is to be signed again at once
 * (the server's clock learnt), else the error it means. cause receives the
 * server's reason, with the kind's why (net_hooks) after it. */
static int net_status_error(struct dcr_store *s, struct net_req *q, char *cause, size_t csz,
			    struct dcr_err *e)
{
	const char *m = q->method, *region = net_of(s)->region;
	char *code = NULL;
	net_http_cause(q, cause, csz, &code);
	int r;
	if (q->status >= 400 && q->status < 500 && net_of(s)->k->why) {
		/* the kind's own knowledge of the failure, after the cause */
		size_t l = strlen(cause);
		net_of(s)->k->why(s, q, code, cause + l, csz - l);
	}
	/* a signed request refused for its time (S3's RequestTimeTooSkewed;
	 * a HEAD's answer has no body to say so): once, sign it again at
	 * once with the server's clock, from the answer's Date */
	if (q->status == 403 && net_of(s)->k->sign && q->date && !q->resigned &&
	    (code ? !strcmp(code, "RequestTimeTooSkewed") : !q->resp.len)) {
		long d = (long)(q->date - time(NULL));
		long old = __atomic_load_n(&net_of(s)->skew, __ATOMIC_RELAXED);
		if (d - old > 60 || old - d > 60) {
			__atomic_store_n(&net_of(s)->skew, d, __ATOMIC_RELAXED);
			q->resigned = 1;
			free(code);
			return 2;
		}
	}
	if (q->status >= 500 || q->status == 408 || q->status == 429 ||
	    (code && (!strcmp(code, "RequestTimeout") || !strcmp(code, "SlowDown") ||
		      !strcmp(code, "ConditionalRequestConflict") ||
		      !strcmp(code, "OperationAborted"))))
		r = 1;
	else if (q->status == 404 && !q->has_body && !(code && !strcmp(code, "NoSuchBucket")))
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
	else if (q->status >= 300 && q->status < 400 && q->location[0]) {
		char *to = dcr_url_redact(q->location);
		r = dcr_err_set(e, DCR_EREMOTE,
				"cannot %s '%s': %s (the server redirects to '%s'; dcr follows redirects only "
				"when it downloads from an http(s) store)",
				m, q->what, cause, to ? to : "?");
		free(to);
	} else if (q->bucket_region[0] && region &&
		   strcmp(q->bucket_region, region))
		/* S3 names the bucket's region where a request signed for
		 * another fails (400 AuthorizationHeaderMalformed, 301
		 * PermanentRedirect) */
		r = dcr_err_set(e, DCR_EREMOTE,
				"cannot %s '%s': %s (the bucket is in region '%s', not '%s': set "
				"AWS_REGION=%s, or region in the AWS profile)",
				m, q->what, cause, q->bucket_region, region,
				q->bucket_region);
	else
		r = dcr_err_set(e, DCR_EREMOTE, "cannot %s '%s': %s", m, q->what, cause);
	free(code);
	return r;
}

int net_perform(struct dcr_store *s, struct net_req *q, struct dcr_err *e)
{
	char cause[700] = "", errbuf[CURL_ERROR_SIZE];
	char *url = NULL;
	const char *m = q->method;
	int attempts = 0, r = -EIO;
	url = dcr_asprintf("%s%s%s%s", net_of(s)->base, q->path, q->query ? "?" : "",
			   q->query ? q->query : "");
	CURL *c = handle_get(s);
	if (!url || !c) {
		free(url);
		if (c)
			cu.easy_cleanup(c);
		return dcr_err_sys(e, ENOMEM, "cannot %s '%s'", m, q->what);
	}
	int again = 0; /* signed again at once (net_status_error: 2) */
	for (;; attempts++) {
		if (attempts && !again) {
			if (attempts > (q->no_retry ? 0 : s->o.retries)) {
				r = dcr_err_set(e, -EIO, "cannot %s '%s': %s (gave up after %d attempt%s)",
						m, q->what, cause, attempts, attempts == 1 ? "" : "s");
				break;
			}
			net_backoff(s, attempts - 1);
		}
		if (attempts || again)
			cu.easy_reset(c);
		again = 0;
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
		net_setup(s, q, c, url, hl, errbuf);
		CURLcode cc = cu.easy_perform(c);
		cu.slist_free_all(hl);
		if (q->sink_rc == NET_SINK_ENOUGH) { /* every byte asked for came */
			q->sink_rc = 0;
			cc = CURLE_OK;
		}
		long st = 0;
		cu.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
		if (st)
			q->status = st;
		if ((r = net_callback_error(q, e)))
			break;
		if (cc != CURLE_OK) {
			snprintf(cause, sizeof(cause), "%s", errbuf[0] ? errbuf : cu.easy_strerror(cc));
			if (curl_retryable(cc))
				continue;
			const char *why = cc == CURLE_TOO_MANY_REDIRECTS ? " (a redirect loop?)"
					  : cc == CURLE_UNSUPPORTED_PROTOCOL
						  ? " (a redirect to it? dcr follows redirects to http and https only,"
						    " https only from an https store)"
						  : "";
			r = dcr_err_set(e, -EIO, "cannot %s '%s': %s%s", m, q->what, cause, why);
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
		if ((r = net_status_error(s, q, cause, sizeof(cause), e)) == 2) {
			again = 1; /* not a failed attempt */
			attempts--;
			continue;
		}
		if (r != 1)
			break;
	}
	handle_put(s, c);
	free(url);
	return r;
}

void net_req_free(struct net_req *q)
{
	free(q->path);
	free(q->tok);
	dcr_buf_free(&q->resp);
}

/* ---- objects ------------------------------------------------------- */

int net_obj_req(struct dcr_store *s, const char *name, struct net_req *q,
		char **what, struct dcr_err *e)
{
	memset(q, 0, sizeof(*q));
	q->body_fd = -1;
	*what = NULL;
	if (net_of(s)->k->locate(s, name, &q->path, what)) {
		free(q->path);
		free(*what);
		q->path = *what = NULL;
		return dcr_err_sys(e, ENOMEM, "cannot reach '%s'", name);
	}
	q->what = *what;
	return 0;
}

/* ---- open/close ------------------------------------------------------ */

int net_open(struct dcr_store *s, size_t size, const struct net_hooks *k,
	     struct dcr_err *e)
{
	struct net *n = dcr_calloc(1, size);
	if (!n)
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", s->url);
	n->k = k;
	pthread_mutex_init(&n->curl_mu, NULL);
	pthread_mutex_init(&n->cas_mu, NULL);
	s->impl = n;
	struct dcr_err le;
	int r = curl_ready(&le);
	return r ? dcr_err_set(e, r, "cannot open store '%s': %s", s->url, le.msg) : 0;
}

/* ---- one small request outside a store ------------------------------- */

struct small {
	struct dcr_buf *out;
	size_t max;
	int big;
};

static size_t small_data(char *p, size_t sz, size_t nm, void *arg)
{
	struct small *sm = arg;
	size_t n = sz * nm;
	if (sm->out->len + n > sm->max || dcr_buf_add(sm->out, p, n)) {
		sm->big = 1;
		return 0;
	}
	return n;
}

int net_read_token_file(const char *var, const char *file, size_t max, char **out,
			struct dcr_err *e)
{
	uint8_t *b = NULL;
	size_t n = 0;
	struct dcr_err le;
	*out = NULL;
	if (dcr_read_file(file, max, &b, &n, &le))
		return dcr_err_set(e, le.code ? le.code : -EIO, "%s: %s", var, le.msg);
	while (n && (b[n - 1] == '\n' || b[n - 1] == '\r' || b[n - 1] == ' ' || b[n - 1] == '\t'))
		b[--n] = '\0';
	*out = (char *)b;
	return 0;
}

void net_wipe_free(char *s)
{
	if (s)
		OPENSSL_cleanse(s, strlen(s));
	free(s);
}

int net_fetch_small(const char *method, const char *url, const char *const *headers, size_t nh,
		    const char *body, long timeout_ms, size_t max, struct dcr_buf *out,
		    long *status, struct dcr_err *e)
{
	*status = 0;
	out->len = 0;
	int r = curl_ready(e);
	if (r)
		return r;
	CURL *c = cu.easy_init();
	struct curl_slist *hl = NULL;
	r = c ? 0 : -ENOMEM;
	for (size_t i = 0; i < nh && !r; i++) {
		struct curl_slist *n = cu.slist_append(hl, headers[i]);
		if (n)
			hl = n;
		else
			r = -ENOMEM;
	}
	if (r) {
		cu.slist_free_all(hl);
		if (c)
			cu.easy_cleanup(c);
		return dcr_err_sys(e, ENOMEM, "request");
	}
	char errbuf[CURL_ERROR_SIZE] = "";
	struct small sm = {.out = out, .max = max};
	cu.easy_setopt(c, CURLOPT_URL, url);
	cu.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	cu.easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	cu.easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	cu.easy_setopt(c, CURLOPT_WRITEFUNCTION, small_data);
	cu.easy_setopt(c, CURLOPT_WRITEDATA, &sm);
	cu.easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	cu.easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
	cu.easy_setopt(c, CURLOPT_NOPROXY, "*"); /* link-local and loopback peers */
	cu.easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	cu.easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
	cu.easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
#if LIBCURL_VERSION_NUM >= 0x075500
	cu.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	cu.easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	if (!strcmp(method, "PUT") || !strcmp(method, "POST")) {
		cu.easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
		cu.easy_setopt(c, CURLOPT_POSTFIELDS, body ? body : "");
		cu.easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)(body ? strlen(body) : 0));
	} else if (strcmp(method, "GET")) {
		cu.easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	}
	CURLcode cc = cu.easy_perform(c);
	if (cc == CURLE_OK)
		cu.easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	else if (sm.big)
		r = dcr_err_set(e, -EFBIG, "the answer is longer than %zu bytes", max);
	else {
		/* connected, then no answer in time: -ETIMEDOUT */
		double ct = 0;
		if (cc == CURLE_OPERATION_TIMEDOUT)
			cu.easy_getinfo(c, CURLINFO_CONNECT_TIME, &ct);
		r = dcr_err_set(e, ct > 0 ? -ETIMEDOUT : -EIO, "%s",
				errbuf[0] ? errbuf : cu.easy_strerror(cc));
	}
	cu.slist_free_all(hl);
	cu.easy_cleanup(c);
	return r;
}

int net_set_base(struct dcr_store *s, char *base)
{
	struct net *n = net_of(s);
	if (n->base != base)
		free(n->base);
	free(n->shown);
	n->base = base;
	n->shown = base ? dcr_url_redact(base) : NULL;
	return n->base && n->shown ? 0 : -ENOMEM;
}

void net_close(struct dcr_store *s)
{
	struct net *n = net_of(s);
	if (!n)
		return;
	for (size_t i = 0; i < n->nidle; i++)
		cu.easy_cleanup(n->idle[i]);
	free(n->idle);
	free(n->base);
	free(n->shown);
	net_wipe_free(n->bearer);
	pthread_mutex_destroy(&n->curl_mu);
	pthread_mutex_destroy(&n->cas_mu);
	free(n);
	s->impl = NULL;
}

/* ---- uploads --------------------------------------------------------- */

/* One PUT (or POST) of a body in memory or in a file region. */
int net_put_once(struct dcr_store *s, const char *name, const char *query,
		 const uint8_t *buf, int fd, uint64_t off, uint64_t len,
		 int if_absent, const char *what_suffix, char *etag_out,
		 size_t etag_cap, struct dcr_err *e)
{
	struct net_req q;
	char *what = NULL, sha[65];
	int r = net_obj_req(s, name, &q, &what, e);
	if (r)
		return r;
	if (what_suffix) {
		char *w = dcr_asprintf("%s%s", what, what_suffix);
		if (!w) {
			net_req_free(&q);
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
	if (net_of(s)->k->sign) {
		/* a signature covers the body's hash: a file is read twice
		 * (the second time from the page cache), never held whole */
		if (buf)
			net_sha256_hex(buf, (size_t)len, sha);
		else if ((r = file_sha256_hex(fd, off, len, sha)))
			r = dcr_err_sys(e, r, "cannot read the file to upload as '%s'", q.what);
		q.body_sha = sha;
	}
	if (!r)
		r = net_perform(s, &q, e);
	if (!r && etag_out) {
		if (!q.etag[0])
			r = dcr_err_set(e, DCR_EREMOTE, "cannot PUT '%s': the server sent no ETag", q.what);
		else
			snprintf(etag_out, etag_cap, "%s", q.etag);
	}
	net_req_free(&q);
	free(what);
	return r;
}

/* Check once per store that the server honours "If-None-Match: *". */
static int cas_check(struct dcr_store *s, struct dcr_err *e)
{
	struct net *n = net_of(s);
	pthread_mutex_lock(&n->cas_mu);
	int r = 0;
	if (n->cas_state == 0) {
		uint8_t rnd[8];
		char hex[17], name[64];
		RAND_bytes(rnd, sizeof(rnd));
		dcr_hex(rnd, sizeof(rnd), hex);
		snprintf(name, sizeof(name), DCR_CAS_PROBE "%s", hex);
		static const uint8_t body[] = "dcr probe: does this server honour If-None-Match?\n";
		r = net_put_once(s, name, NULL, body, -1, 0, sizeof(body) - 1, 0, NULL, NULL, 0, e);
		if (!r) {
			struct dcr_err e2;
			int c = net_put_once(s, name, NULL, body, -1, 0, sizeof(body) - 1, 1, NULL, NULL, 0, &e2);
			if (c == DCR_ECONFLICT)
				n->cas_state = 1;
			else if (c == 0)
				n->cas_state = -1;
			else {
				r = c;
				if (e)
					*e = e2;
			}
			struct dcr_err ign;
			net_delete(s, name, &ign);
		}
	}
	pthread_mutex_unlock(&n->cas_mu);
	return r;
}

/* The whole object from buf, or len bytes of fd from its start. */
static int upload(struct dcr_store *s, const char *name, const uint8_t *buf,
		  int fd, uint64_t len, struct dcr_err *e)
{
	if (net_of(s)->k->upload)
		return net_of(s)->k->upload(s, name, buf, fd, len, e);
	return net_put_once(s, name, NULL, buf, fd, 0, len, 0, NULL, NULL, 0, e);
}

int net_put(struct dcr_store *s, const char *name, const void *buf,
	    size_t len, struct dcr_err *e)
{
	return upload(s, name, buf, -1, len, e);
}

int net_put_file(struct dcr_store *s, const char *name, const char *path,
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
	r = upload(s, name, NULL, fd, (uint64_t)st.st_size, e);
	close(fd);
	return r;
}

int net_put_if_absent(struct dcr_store *s, const char *name, const void *buf,
		      size_t len, struct dcr_err *e)
{
	int r = cas_check(s, e);
	if (r)
		return r;
	if (net_of(s)->cas_state < 0) {
		char *path = NULL, *w = NULL;
		net_of(s)->k->locate(s, name, &path, &w);
		r = dcr_err_set(e, DCR_EREMOTE,
				"cannot create '%s' only if absent: the server at '%s' ignores "
				"If-None-Match (a conditional PUT overwrote a probe object), so "
				"compare-and-set is not safe there", w ? w : name, net_of(s)->shown);
		free(path);
		free(w);
		return r;
	}
	return net_put_once(s, name, NULL, buf, -1, 0, len, 1, NULL, NULL, 0, e);
}

/* ---- downloads ------------------------------------------------------- */

/* fresh: a cache between (a relay) is asked to check its copy again
 * before it answers (Cache-Control: no-cache, RFC 9111 5.2.1.4) */
static int get_stream(struct dcr_store *s, const char *name, int ranged,
		      uint64_t off, uint64_t len, uint64_t max, int fresh, sink_fn sink, void *arg,
		      uint64_t *got, uint64_t *total, struct dcr_err *e)
{
	struct net_req q;
	char *what = NULL;
	int r = net_obj_req(s, name, &q, &what, e);
	if (r)
		return r;
	if (fresh)
		q.xh[q.nxh++] = (struct dcr_sigv4_header){"Cache-Control", "no-cache"};
	q.method = "GET";
	q.sink = sink;
	q.sink_arg = arg;
	q.ranged = ranged;
	q.r_start = off;
	q.r_len = len;
	q.max_body = max;
	r = net_perform(s, &q, e);
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
	net_req_free(&q);
	free(what);
	return r;
}

/* The size a server announces is a hint, not bytes that arrived: a memory
 * sink sets aside at most this much ahead of them (a 100-byte answer
 * claiming 3 GB costs 1 MiB), then grows with the bytes that come. */
#define NET_RESERVE_AHEAD (1u << 20)

static int sink_mem(void *arg, uint64_t off, const uint8_t *p, size_t n, uint64_t total)
{
	struct dcr_buf *b = arg;
	(void)off;
	if (!b->len && total) {
		size_t ahead = total < NET_RESERVE_AHEAD ? (size_t)total + 1 : NET_RESERVE_AHEAD;
		if (dcr_buf_reserve(b, ahead))
			return -ENOMEM;
		dcr_prefault(b->p, ahead);
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

/* Into b, at most max bytes */
static int get_mem(struct dcr_store *s, const char *name, struct dcr_buf *b, size_t tail,
		   const struct dcr_hasher *h, uint64_t max, int fresh, struct dcr_err *e)
{
	b->len = 0;
	if (!h)
		return get_stream(s, name, 0, 0, 0, max, fresh, sink_mem, b, NULL, NULL, e);
	struct sink_hash sh = {.b = b, .h = h, .tail = tail};
	int r = get_stream(s, name, 0, 0, 0, max, fresh, sink_mem_hash, &sh, NULL, NULL, e);
	if (!r && b->len > tail)
		feed_hasher(h, b->p, &sh.fed, b->len - tail, 1);
	return r;
}

int net_get(struct dcr_store *s, const char *name, struct dcr_buf *b,
	    size_t tail, const struct dcr_hasher *h, struct dcr_err *e)
{
	return get_mem(s, name, b, tail, h, DCR_STORE_GET_MAX, 0, e);
}

/* into the heap buffer b may bring, grown as needed: a recycled buffer
 * costs no page faults */
int net_get_blob(struct dcr_store *s, const char *name, struct dcr_blob *b,
		 size_t tail, const struct dcr_hasher *h, struct dcr_err *e)
{
	if (b->map)
		dcr_blob_free(b);
	struct dcr_buf buf = {b->p, 0, b->cap};
	int r = get_mem(s, name, &buf, tail, h, b->max ? b->max : DCR_PAYLOAD_MAX_FILE, b->fresh,
			e);
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
	/* bytes arrive in order (a resumed transfer goes on where it
	 * stopped), so everything below off + n is here: hash it in steps */
	feed_hasher(sh->h, sh->buf, &sh->fed, (size_t)off + n, 0);
	return 0;
}

int net_get_range(struct dcr_store *s, const char *name, uint64_t off,
		  size_t len, uint8_t *buf, const struct dcr_hasher *h, int fresh,
		  struct dcr_err *e)
{
	if (!len)
		return 0;
	if (!h)
		return get_stream(s, name, 1, off, len, 0, fresh, sink_range, buf, NULL, NULL, e);
	struct sink_range_hash sh = {.buf = buf, .h = h};
	int r = get_stream(s, name, 1, off, len, 0, fresh, sink_range_hash, &sh, NULL, NULL, e);
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

/* At most the largest object a pack may hold (a payload): a server that
 * never stops sending does not fill the disk */
int net_get_to_fd(struct dcr_store *s, const char *name, int fd,
		  uint64_t *size, struct dcr_err *e)
{
	uint64_t got = 0;
	int r = get_stream(s, name, 0, 0, 0, DCR_PAYLOAD_MAX_FILE, 0, sink_fd, &fd, &got, NULL, e);
	if (!r && size)
		*size = got;
	return r;
}

int net_stat(struct dcr_store *s, const char *name, uint64_t *size,
	     struct dcr_err *e)
{
	struct net_req q;
	char *what = NULL;
	int r = net_obj_req(s, name, &q, &what, e);
	if (r)
		return r;
	q.method = "HEAD";
	r = net_perform(s, &q, e);
	if (!r && !q.have_clen)
		r = dcr_err_set(e, DCR_EREMOTE, "cannot HEAD '%s': the answer has no Content-Length",
				q.what);
	if (!r)
		*size = q.clen;
	net_req_free(&q);
	free(what);
	return r;
}

int net_delete(struct dcr_store *s, const char *name, struct dcr_err *e)
{
	struct net_req q;
	char *what = NULL;
	int r = net_obj_req(s, name, &q, &what, e);
	if (r)
		return r;
	q.method = "DELETE";
	r = net_perform(s, &q, e);
	net_req_free(&q);
	free(what);
	return r;
}

/* ---- listing --------------------------------------------------------- */

int net_is_probe(const char *name)
{
	const char *b = strrchr(name, '/');
	b = b ? b + 1 : name;
	return !strncmp(b, DCR_CAS_PROBE, strlen(DCR_CAS_PROBE));
}

