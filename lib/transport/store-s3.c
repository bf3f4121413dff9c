/* store-s3.c - the S3 store: path-style or virtual-hosted requests to an
 * endpoint, each attempt signed with SigV4 (sigv4.c), multipart uploads
 * above opts.multipart_threshold with parts in parallel, ListObjectsV2.
 * Requests, retries and the operations it shares with HTTP are net.c's. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/file.h"
#include "core/util.h"
#include "transport/awsconf.h"
#include "transport/awscred.h"
#include "transport/net.h"
#include "transport/sigv4.h"
#include "transport/store-s3.h"

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define MAX_PARTS 10000

struct s3 {
	struct net net;  /* net.base: the endpoint's origin */
	char *epath;     /* the endpoint's own path ("" or "/x"), then "/bucket" */
	char *hostport;  /* Host header value */
	char *bucket, *prefix; /* prefix without trailing '/' ("" if none) */
	char *akid, *secret, *token, *region;
	/* keys that expire (awscred.h): where they came from, when they
	 * expire (0: never), when they were last asked for; cred_mu guards
	 * the keys while a request is signed or they are replaced */
	enum dcr_aws_source src;
	char *process;
	time_t expires, asked;
	/* why the last refresh failed ("": it did not) */
	char refresh_err[sizeof(((struct dcr_err *)0)->msg)];
	pthread_mutex_t cred_mu;
	int have_mu;
};

static struct s3 *s3_of(struct dcr_store *s) { return s->impl; }

/* The full key of an object with the store prefix. */
static char *s3_key(struct dcr_store *s, const char *name)
{
	const char *pfx = s3_of(s)->prefix;
	return pfx[0] ? dcr_asprintf("%s/%s", pfx, name) : dcr_strdup(name);
}

static int s3_locate(struct dcr_store *s, const char *name, char **path, char **what)
{
	char *key = s3_key(s, name);
	char *enc = key ? dcr_uri_encode(key, strlen(key), 1) : NULL;
	*path = *what = NULL;
	if (enc) {
		*path = dcr_asprintf("%s/%s", s3_of(s)->epath, enc);
		*what = dcr_asprintf("s3://%s/%s", s3_of(s)->bucket, key);
	}
	free(key);
	free(enc);
	return *path && *what ? 0 : -ENOMEM;
}

/* Keys c (taken) in place of s3's (wiped and freed). */
static void s3_keys_take(struct s3 *s3, struct dcr_aws_creds *c)
{
	struct dcr_aws_creds old = {s3->akid, s3->secret, s3->token, 0};
	dcr_aws_creds_free(&old);
	s3->akid = c->akid;
	s3->secret = c->secret;
	s3->token = c->token;
	s3->expires = c->expires;
	memset(c, 0, sizeof(*c));
}

/* Keys from a source that expire: asked for again DCR_AWS_REFRESH_S
 * before they do, at most once per DCR_AWS_RETRY_S; where the source
 * fails, the old keys stay and why is kept (s3_why adds it to the
 * server's ExpiredToken). Under cred_mu. */
static void s3_refresh(struct s3 *s3, time_t now)
{
	if (s3->src == DCR_AWS_NONE || !s3->expires || now + DCR_AWS_REFRESH_S < s3->expires ||
	    now < s3->asked + DCR_AWS_RETRY_S)
		return;
	s3->asked = now;
	struct dcr_aws_creds c;
	struct dcr_err e;
	if (!dcr_aws_creds_fetch(s3->src, s3->process, s3->region, &c, &e)) {
		s3_keys_take(s3, &c);
		s3->refresh_err[0] = '\0';
	} else {
		snprintf(s3->refresh_err, sizeof(s3->refresh_err), "%s", e.msg);
	}
}

/* S3's answers to keys it no longer takes. */
static int s3_keys_refused(const struct net_req *q, const char *code)
{
	static const char *const codes[] = {"ExpiredToken", "InvalidToken", "TokenRefreshRequired",
					    "InvalidAccessKeyId", "InvalidClientTokenId"};
	if (!code)
		return q->status == 403 && !q->resp.len; /* a HEAD: no code */
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (!strcmp(code, codes[i]))
			return 1;
	return 0;
}

/* net_hooks.why: a request refused for its keys, when they expired or
 * their renewal failed, says so: the server's ExpiredToken alone does not
 * tell an operator that the metadata service stopped answering. */
static void s3_why(struct dcr_store *s, const struct net_req *q, const char *code, char *out,
		   size_t n)
{
	struct s3 *s3 = s3_of(s);
	if (!n)
		return;
	*out = '\0';
	if (code && !strcmp(code, "RequestTimeTooSkewed")) {
		snprintf(out, n,
			 " (this machine's clock is more than S3's 15 minutes off the server's%s: set it right, with NTP)",
			 q->resigned ? ", and signing again on the server's clock did not help"
			 : q->date   ? ", though the answer's Date is within a minute of the clock dcr signs by"
				     : ", and the answer had no Date to correct it by");
		return;
	}
	if (!s3_keys_refused(q, code))
		return;
	pthread_mutex_lock(&s3->cred_mu);
	char when[32] = "";
	if (s3->expires) {
		struct tm tm;
		gmtime_r(&s3->expires, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	}
	const char *src = dcr_aws_source_name(s3->src);
	int expired = s3->expires && time(NULL) >= s3->expires;
	if (s3->refresh_err[0])
		snprintf(out, n, " (the keys from %s %s %s, and renewing them failed: %s)", src,
			 expired ? "expired at" : "expire at", when, s3->refresh_err);
	else if (expired)
		snprintf(out, n, " (the keys from %s expired at %s)", src, when);
	else if (s3->src == DCR_AWS_NONE && s3->token && code &&
		 (!strcmp(code, "ExpiredToken") || !strcmp(code, "TokenRefreshRequired")))
		snprintf(out, n,
			 " (a session token from the environment or the profile is never renewed "
			 "by dcr: renew it, or name a source dcr renews, such as credential_process)");
	pthread_mutex_unlock(&s3->cred_mu);
}

static int s3_sign(struct dcr_store *s, struct net_req *q, struct dcr_sigv4_header *h,
		   size_t *nh, char **auth)
{
	struct s3 *s3 = s3_of(s);
	/* on the server's clock, where it told us ours is off (net.c) */
	time_t now = time(NULL) + __atomic_load_n(&s3->net.skew, __ATOMIC_RELAXED);
	pthread_mutex_lock(&s3->cred_mu);
	s3_refresh(s3, now);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(q->stamp, sizeof(q->stamp), "%Y%m%dT%H%M%SZ", &tm);
	h[(*nh)++] = (struct dcr_sigv4_header){"Host", s3->hostport};
	h[(*nh)++] = (struct dcr_sigv4_header){"x-amz-content-sha256",
					       q->body_sha ? q->body_sha : EMPTY_SHA256};
	h[(*nh)++] = (struct dcr_sigv4_header){"x-amz-date", q->stamp};
	if (s3->token)
		h[(*nh)++] = (struct dcr_sigv4_header){"x-amz-security-token", s3->token};
	struct dcr_sigv4 sg = {
		.method = q->method, .uri = q->path, .query = q->query,
		.headers = h, .nheaders = *nh,
		.payload_hash = q->body_sha ? q->body_sha : EMPTY_SHA256,
		.amz_date = q->stamp, .region = s3->region, .service = "s3",
		.access_key = s3->akid, .secret_key = s3->secret,
	};
	struct dcr_sigv4_out so;
	int r = dcr_sigv4_sign(&sg, &so);
	if (!r) {
		*auth = dcr_strdup(so.authorization);
		dcr_sigv4_out_free(&so);
	}
	/* the token's header outlives the lock: the request's own copy */
	if (!r && !*auth)
		r = -ENOMEM;
	if (!r && s3->token) {
		free(q->tok);
		q->tok = dcr_strdup(s3->token);
		h[*nh - 1].value = q->tok;
		if (!q->tok)
			r = -ENOMEM;
	}
	pthread_mutex_unlock(&s3->cred_mu);
	if (r) {
		free(*auth);
		*auth = NULL;
	}
	return r ? -ENOMEM : 0;
}

/* ---- multipart uploads ----------------------------------------------- */

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
			r = net_put_once(m->s, m->name, query, data, -1, 0, n, 0, sfx,
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
	struct net_req q;
	char *what = NULL, sha[65];
	int r = net_obj_req(s, name, &q, &what, e);
	if (r)
		return r;
	size_t bl = body ? strlen(body) : 0;
	q.method = "POST";
	q.query = query;
	q.has_body = 1;
	q.body = (const uint8_t *)(body ? body : "");
	q.body_len = bl;
	q.keep_body = 1;
	net_sha256_hex(q.body, bl, sha);
	q.body_sha = sha;
	if (body)
		q.xh[q.nxh++] = (struct dcr_sigv4_header){"Content-Type", "application/xml"};
	r = net_perform(s, &q, e);
	if (!r) {
		*answer = q.resp;
		q.resp = (struct dcr_buf){0};
	}
	net_req_free(&q);
	free(what);
	return r;
}

/* 2. the parts, in parallel: this thread and up to parallel - 1 more */
static int mp_upload_parts(struct mp *m, struct dcr_err *e)
{
	pthread_mutex_init(&m->mu, NULL);
	unsigned par = (unsigned)m->s->o.parallel;
	unsigned nt = par < m->nparts ? par : m->nparts;
	pthread_t *th = dcr_calloc(nt, sizeof(*th));
	unsigned started = 0;
	for (unsigned i = 1; th && i < nt; i++, started++)
		if (pthread_create(&th[started], NULL, mp_worker, m))
			break;
	mp_worker(m);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	pthread_mutex_destroy(&m->mu);
	if (m->rc && e)
		*e = m->err;
	return m->rc;
}

/* 3. complete: the parts' ETags in order, retried while S3 answers 200
 * with InternalError or SlowDown in the body; done when the answer's root
 * element is CompleteMultipartUpload... (S3 names it ...Result, moto
 * 5.2 ...Response) */
static int mp_complete(struct mp *m, const char *what, struct dcr_buf *ans, struct dcr_err *e)
{
	struct dcr_store *s = m->s;
	struct dcr_buf x = {0};
	int r, bad = dcr_buf_add(&x, "<CompleteMultipartUpload>", 25);
	for (unsigned i = 0; !bad && i < m->nparts; i++) {
		char part[400];
		int l = snprintf(part, sizeof(part),
				 "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>",
				 i + 1, m->etags[i]);
		bad = dcr_buf_add(&x, part, (size_t)l);
	}
	if (bad || dcr_buf_add(&x, "</CompleteMultipartUpload>", 27)) { /* with NUL */
		dcr_buf_free(&x);
		return dcr_err_sys(e, ENOMEM, "cannot upload '%s'", what);
	}
	for (int attempt = 0;; attempt++) {
		dcr_buf_free(ans);
		if ((r = s3_post(s, m->name, m->query_id, (char *)x.p, ans, e)))
			break;
		if (net_xml_root_is((char *)ans->p, ans->len, "CompleteMultipartUpload"))
			break;
		char *code = net_xml_text((char *)ans->p, ans->len, "Code", NULL);
		char *msg = net_xml_text((char *)ans->p, ans->len, "Message", NULL);
		int retry = code && (!strcmp(code, "InternalError") || !strcmp(code, "SlowDown")) &&
			    attempt < s->o.retries;
		if (!retry)
			r = dcr_err_set(e, DCR_EREMOTE, "cannot complete the multipart upload of '%s': %s%s%s",
					what, code ? code : "unexpected answer", msg ? ": " : "",
					msg ? msg : "");
		free(code);
		free(msg);
		if (!retry)
			break;
		net_backoff(s, attempt);
	}
	dcr_buf_free(&x);
	return r;
}

/* Best effort after a failure: free the parts; the error already says why. */
static void mp_abort(struct mp *m)
{
	struct net_req q;
	char *w2 = NULL;
	struct dcr_err ign;
	if (m->query_id && !net_obj_req(m->s, m->name, &q, &w2, &ign)) {
		q.method = "DELETE";
		q.query = m->query_id;
		q.no_retry = 1; /* never sleep on the way out */
		net_perform(m->s, &q, &ign);
		net_req_free(&q);
		free(w2);
	}
}

static int s3_multipart(struct dcr_store *s, const char *name, const uint8_t *buf,
			int fd, uint64_t size, struct dcr_err *e)
{
	struct mp m = {.s = s, .name = name, .buf = buf, .fd = fd, .size = size};
	struct dcr_buf ans = {0};
	char *id = NULL, *what = NULL;
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
	what = key ? dcr_asprintf("s3://%s/%s", s3_of(s)->bucket, key) : NULL;
	free(key);
	if (!what)
		return dcr_err_sys(e, ENOMEM, "cannot upload '%s'", name);

	/* 1. initiate */
	r = s3_post(s, name, "uploads=", NULL, &ans, e);
	if (r)
		goto out;
	id = net_xml_text((char *)ans.p, ans.len, "UploadId", NULL);
	if (!id) {
		r = dcr_err_set(e, DCR_EREMOTE,
				"cannot start a multipart upload of '%s': the answer has no UploadId", what);
		goto out;
	}
	char *eid = dcr_uri_encode(id, strlen(id), 0);
	m.query_id = eid ? dcr_asprintf("uploadId=%s", eid) : NULL;
	free(eid);
	m.etags = dcr_calloc(m.nparts, sizeof(*m.etags));
	if (!m.query_id || !m.etags)
		r = dcr_err_sys(e, ENOMEM, "cannot upload '%s'", what);
	/* 2. the parts, 3. complete; or free what was uploaded */
	if (r || (r = mp_upload_parts(&m, e)) || (r = mp_complete(&m, what, &ans, e)))
		mp_abort(&m);
out:
	dcr_buf_free(&ans);
	free(id);
	free(what);
	free(m.query_id);
	free(m.etags);
	return r;
}

static int s3_upload(struct dcr_store *s, const char *name, const uint8_t *buf,
		     int fd, uint64_t len, struct dcr_err *e)
{
	if (len > s->o.multipart_threshold)
		return s3_multipart(s, name, buf, fd, len, e);
	return net_put_once(s, name, NULL, buf, fd, 0, len, 0, NULL, NULL, 0, e);
}

/* ---- open/close ------------------------------------------------------ */

static const struct net_hooks s3_hooks = {
	.locate = s3_locate,
	.sign = s3_sign,
	.upload = s3_upload,
	.why = s3_why,
};

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

/* What a store without keys is told (%s: the profile's name). */
#define S3_NO_KEYS                                                                        \
	"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set, or the AWS profile '%s' " \
	"hold aws_access_key_id and aws_secret_access_key or a credential_process"

static int s3_open(struct dcr_store *s, const char *url, struct dcr_err *e)
{
	int r = net_open(s, sizeof(struct s3), &s3_hooks, e);
	if (r)
		return r;
	struct s3 *s3 = s3_of(s);
	pthread_mutex_init(&s3->cred_mu, NULL);
	s3->have_mu = 1;
	const char *b = url + 5, *slash = strchr(b, '/');
	size_t bl = slash ? (size_t)(slash - b) : strlen(b);
	if (!bl)
		return dcr_err_set(e, -EINVAL, "cannot open store '%s': no bucket", s->url);
	for (size_t i = 0; i < bl; i++) {
		char c = b[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		      c == '_' || (c >= 'A' && c <= 'Z')))
			return dcr_err_set(e, -EINVAL, "cannot open store '%s': invalid bucket name '%.*s'",
					   s->url, (int)bl, b);
	}
	s3->bucket = strndup(b, bl);
	const char *pfx = slash ? slash + 1 : "";
	size_t pl = strlen(pfx);
	while (pl && pfx[pl - 1] == '/')
		pl--;
	s3->prefix = strndup(pfx, pl);
	if (!s3->bucket || !s3->prefix)
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", s->url);
	if (pl && dcr_store_check_name(s3->prefix, NULL))
		return dcr_err_set(e, -EINVAL, "cannot open store '%s': invalid key prefix '%s'",
				   s->url, s3->prefix);
	/* as the AWS CLI: keys from the environment, else from the profile
	 * ($AWS_PROFILE, else default) of ~/.aws/credentials or ~/.aws/config;
	 * the region and endpoint likewise, the environment first */
	struct dcr_aws_profile prof;
	struct dcr_err pe;
	if ((r = dcr_aws_profile_load(&prof, &pe)))
		return dcr_err_set(e, r, "cannot open store '%s': %s", s->url, pe.msg);
	s3->akid = env("AWS_ACCESS_KEY_ID");
	s3->secret = env("AWS_SECRET_ACCESS_KEY");
	s3->token = env("AWS_SESSION_TOKEN");
	/* a web identity (EKS IRSA) comes before the profile's keys */
	int webid = (!s3->akid || !s3->secret) && dcr_aws_web_identity();
	if ((!s3->akid || !s3->secret) && !webid) {
		free(s3->akid);
		free(s3->secret);
		free(s3->token);
		s3->akid = prof.akid;
		s3->secret = prof.secret;
		s3->token = prof.token;
		prof.akid = prof.secret = prof.token = NULL;
	}
	s3->region = env("AWS_REGION");
	if (!s3->region)
		s3->region = env("AWS_DEFAULT_REGION");
	if (!s3->region) {
		s3->region = prof.region;
		prof.region = NULL;
	}
	if (!s3->region)
		s3->region = dcr_strdup("us-east-1");
	s3->net.region = s3->region; /* for messages: a bucket elsewhere */
	char *ep = s->o.endpoint ? dcr_strdup(s->o.endpoint) : env("DCR_S3_ENDPOINT");
	if (!ep)
		ep = env("AWS_ENDPOINT_URL_S3");
	if (!ep)
		ep = env("AWS_ENDPOINT_URL");
	if (!ep) {
		ep = prof.endpoint;
		prof.endpoint = NULL;
	}
	/* the CA certificates, as the AWS CLI: --cacert, else
	 * $AWS_CA_BUNDLE, else the profile's ca_bundle */
	if (!s->o.cacert) {
		s->o.cacert = env("AWS_CA_BUNDLE");
		if (!s->o.cacert) {
			s->o.cacert = prof.ca_bundle;
			prof.ca_bundle = NULL;
		}
	}
	/* then, as the AWS CLI, the profile's credential_process, a
	 * container's endpoint, the instance's metadata service */
	if (!s3->akid || !s3->secret) {
		s3->src = webid ? DCR_AWS_WEB_IDENTITY : dcr_aws_source_pick(prof.process);
		struct dcr_aws_creds c = {0};
		struct dcr_err ce;
		s3->asked = time(NULL); /* when the asking began, as s3_refresh */
		if (!webid && !prof.process && prof.unsupported)
			/* the AWS CLI would assume a role or sign in: not the
			 * instance's keys instead, but the way out */
			r = dcr_err_set(e, -EINVAL,
					"cannot open store '%s': the AWS profile '%s' has %s, which dcr does not "
					"follow: give the profile credential_process = aws configure "
					"export-credentials --profile %s --format process, or export its keys",
					s->url, prof.name, prof.unsupported, prof.name);
		else if (s3->src == DCR_AWS_NONE)
			r = dcr_err_set(e, -EINVAL,
					"cannot open store '%s': " S3_NO_KEYS
					" (the instance metadata service is disabled)",
					s->url, prof.name);
		else if ((r = dcr_aws_creds_fetch(s3->src, prof.process, s3->region, &c, &ce)))
			r = s3->src == DCR_AWS_IMDS
				    ? dcr_err_set(e, r,
						  "cannot open store '%s': " S3_NO_KEYS
						  ", or the instance metadata service answer (%s)",
						  s->url, prof.name, ce.msg)
				    : dcr_err_set(e, r, "cannot open store '%s': %s", s->url, ce.msg);
		if (r) {
			dcr_aws_creds_free(&c);
			dcr_aws_profile_free(&prof);
			free(ep);
			return r;
		}
		s3_keys_take(s3, &c);
		if (s3->src == DCR_AWS_PROCESS) {
			s3->process = prof.process; /* asked again at each refresh */
			prof.process = NULL;
		}
	}
	dcr_aws_profile_free(&prof);
	/* AWS itself wants virtual-hosted requests (BUCKET.s3.REGION...; path
	 * style is refused for new buckets); S3-compatible servers at an
	 * endpoint get path style. DCR_S3_ADDRESSING=path|virtual overrides,
	 * and a bucket name with a dot (no valid TLS name) stays path style. */
	char *addr = env("DCR_S3_ADDRESSING");
	int vhost = addr ? !strcmp(addr, "virtual") : !ep;
	free(addr);
	if (strchr(s3->bucket, '.'))
		vhost = 0;
	if (!ep)
		ep = vhost ? dcr_asprintf("https://%s.s3.%s.amazonaws.com", s3->bucket, s3->region)
			   : dcr_asprintf("https://s3.%s.amazonaws.com", s3->region);
	else if (vhost && strstr(ep, "://")) {
		/* put the bucket first in the endpoint's host, unless it is there */
		char *sep = strstr(ep, "://");
		size_t bl = strlen(s3->bucket);
		if (strncmp(sep + 3, s3->bucket, bl) || sep[3 + bl] != '.') {
			char *v = dcr_asprintf("%.*s://%s.%s", (int)(sep - ep), ep, s3->bucket,
					       sep + 3);
			free(ep);
			ep = v;
		}
	}
	char *epath = NULL;
	r = ep ? split_url(ep, &s3->net.base, &epath) : -ENOMEM;
	free(ep);
	if (!r && (r = net_set_base(s, s3->net.base)))
		s3->net.base = NULL;
	if (!r) {
		s3->epath = vhost ? dcr_strdup(epath) : dcr_asprintf("%s/%s", epath, s3->bucket);
		s3->hostport = dcr_strdup(strstr(s3->net.base, "://") + 3);
		if (!s3->epath || !s3->hostport)
			r = -ENOMEM;
		for (char *p = s3->hostport; p && *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
	}
	free(epath);
	if (r)
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", s->url);
	if (!s3->hostport[0])
		return dcr_err_set(e, -EINVAL, "cannot open store '%s': endpoint has no host", s->url);
	return 0;
}

static void s3_close(struct dcr_store *s)
{
	struct s3 *s3 = s3_of(s);
	if (!s3)
		return;
	free(s3->epath);
	free(s3->hostport);
	free(s3->bucket);
	free(s3->prefix);
	s3_keys_take(s3, &(struct dcr_aws_creds){0}); /* the keys wiped and freed */
	if (s3->have_mu)
		pthread_mutex_destroy(&s3->cred_mu);
	free(s3->process);
	free(s3->region);
	net_close(s);
}

/* ---- listing --------------------------------------------------------- */

int s3_list_page(const char *xml, size_t n, const char *full, size_t strip, const char *what,
		 struct dcr_names *l, int *more, char **token, struct dcr_err *e)
{
	const char *x = xml, *end = xml + n, *after;
	char *k;
	*more = 0;
	*token = NULL;
	while (x < end && (k = net_xml_text(x, (size_t)(end - x), "Key", &after))) {
		x = after;
		if (strlen(k) < strip || strncmp(k, full, strlen(full)) || net_is_probe(k + strip)) {
			free(k);
			continue;
		}
		/* as for any store's listing: names it could not have stored
		 * are an error, not names to act on */
		char *rel = dcr_strdup(k + strip);
		free(k);
		int r = dcr_names_add_listed(l, rel, what, DCR_EREMOTE, e);
		if (r)
			return r;
	}
	char *trunc = net_xml_text(xml, n, "IsTruncated", NULL);
	*more = trunc && !strcmp(trunc, "true");
	free(trunc);
	if (*more)
		*token = net_xml_text(xml, n, "NextContinuationToken", NULL);
	return 0;
}

static int s3_list(struct dcr_store *s, const char *prefix, struct dcr_names *l,
		   struct dcr_err *e)
{
	struct s3 *s3 = s3_of(s);
	char *full = s3->prefix[0] ? dcr_asprintf("%s/%s", s3->prefix, prefix) : dcr_strdup(prefix);
	char *efull = full ? dcr_uri_encode(full, strlen(full), 0) : NULL;
	char *what = full ? dcr_asprintf("s3://%s/%s", s3->bucket, full) : NULL;
	char *token = NULL;
	size_t strip = s3->prefix[0] ? strlen(s3->prefix) + 1 : 0;
	int r = 0;
	if (!efull || !what) {
		r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", prefix);
		goto out;
	}
	int empty = 0; /* truncated pages in a row that named nothing */
	for (int page = 0;; page++) {
		size_t had = l->n;
		char *etok = token ? dcr_uri_encode(token, strlen(token), 0) : NULL;
		char *query = dcr_asprintf("list-type=2&max-keys=%d&prefix=%s%s%s", s->o.list_page,
					   efull, etok ? "&continuation-token=" : "",
					   etok ? etok : "");
		free(etok);
		struct net_req q;
		memset(&q, 0, sizeof(q));
		q.body_fd = -1;
		q.method = "GET";
		q.what = what;
		q.path = dcr_strdup(s3->epath[0] ? s3->epath : "/");
		q.query = query;
		q.keep_body = 1;
		if (!query || !q.path) {
			free(query);
			net_req_free(&q);
			r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", what);
			goto out;
		}
		r = net_perform(s, &q, e);
		free(query);
		if (r) {
			if (r == DCR_ENOTFOUND) { /* no such bucket: not "no object" */
				r = DCR_EREMOTE;
				if (e)
					e->code = r;
			}
			net_req_free(&q);
			goto out;
		}
		int more = 0;
		free(token);
		token = NULL;
		r = s3_list_page((const char *)q.resp.p, q.resp.len, full, strip, what, l, &more,
				 &token, e);
		if (r) {
			net_req_free(&q);
			goto out;
		}
		net_req_free(&q);
		if (!more)
			break;
		empty = l->n == had ? empty + 1 : 0;
		if (empty >= DCR_STORE_LIST_EMPTY) {
			r = dcr_err_set(e, DCR_EREMOTE,
					"cannot list '%s': %d truncated pages in a row named nothing (a listing without end)",
					what, DCR_STORE_LIST_EMPTY);
			goto out;
		}
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

const struct dcr_store_ops store_s3_ops = {
	.open = s3_open,
	.close = s3_close,
	.put = net_put,
	.put_file = net_put_file,
	.put_if_absent = net_put_if_absent,
	.get = net_get,
	.get_blob = net_get_blob,
	.get_range = net_get_range,
	.get_to_fd = net_get_to_fd,
	.stat = net_stat,
	.list = s3_list,
	.delete = net_delete,
};
