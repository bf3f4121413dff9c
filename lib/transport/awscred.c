/* awscred.c - see awscred.h. */
#include "config.h"

#include "transport/awscred.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "core/buf.h"
#include "core/util.h"
#include "transport/names.h"
#include "transport/net.h"
#include "transport/sigv4.h"

extern char **environ;

#define AKID_MAX 128
#define SECRET_MAX 256
#define TOKEN_MAX 16384

const char *dcr_aws_source_name(enum dcr_aws_source src)
{
	switch (src) {
	case DCR_AWS_PROCESS: return "credential_process";
	case DCR_AWS_CONTAINER: return "the container credential endpoint";
	case DCR_AWS_IMDS: return "the instance metadata service";
	case DCR_AWS_WEB_IDENTITY: return "STS AssumeRoleWithWebIdentity";
	default: return "no source";
	}
}

/* Free a buffer that held a secret, wiped first. */
static void wipe_buf(struct dcr_buf *b)
{
	if (b->p)
		OPENSSL_cleanse(b->p, b->len);
	dcr_buf_free(b);
}

/* What a server said, for a message: its control bytes as '?'. */
static void printable(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
			*s = '?';
}

void dcr_aws_creds_free(struct dcr_aws_creds *c)
{
	free(c->akid);
	net_wipe_free(c->secret);
	net_wipe_free(c->token);
	memset(c, 0, sizeof(*c));
}

static const char *env_of(const char *k)
{
	const char *v = getenv(k);
	return v && *v ? v : NULL;
}

/* Text that may go into a header: printable ASCII, 1..max bytes. */
static int header_safe(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (!n || n > max)
		return 0;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return 0;
	return 1;
}

static int digits(const char *s, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		*v = *v * 10 + (s[i] - '0');
	}
	return 1;
}

int dcr_aws_time_parse(const char *s, time_t *out)
{
	int Y, M, D, h, m, sec;
	if (strlen(s) < 20 || !digits(s, 4, &Y) || s[4] != '-' || !digits(s + 5, 2, &M) ||
	    s[7] != '-' || !digits(s + 8, 2, &D) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
	    !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &m) || s[16] != ':' ||
	    !digits(s + 17, 2, &sec))
		return -1;
	if (Y < 1970 || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
		return -1;
	const char *p = s + 19;
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return -1;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	long off = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int oh, om;
		if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) || oh > 23 ||
		    om > 59)
			return -1;
		off = (oh * 60L + om) * 60 * (*p == '+' ? 1 : -1);
		p += 6;
	} else {
		return -1;
	}
	if (*p)
		return -1;
	struct tm tm = {.tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D,
			.tm_hour = h, .tm_min = m, .tm_sec = sec};
	time_t t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	*out = t - off;
	return 0;
}

/* The string member k of o, or NULL (absent); *bad when present and not a
 * string. */
static const char *jstr(json_t *o, const char *k, int *bad)
{
	json_t *v = json_object_get(o, k);
	if (!v)
		return NULL;
	if (!json_is_string(v)) {
		*bad = 1;
		return NULL;
	}
	return json_string_value(v);
}

int dcr_aws_creds_parse(const char *txt, size_t n, enum dcr_aws_source src, const char *what,
			struct dcr_aws_creds *c, struct dcr_err *e)
{
	memset(c, 0, sizeof(*c));
	json_error_t je;
	json_t *o = json_loadb(txt, n, JSON_REJECT_DUPLICATES, &je);
	if (!o || !json_is_object(o)) {
		json_decref(o);
		return dcr_err_set(e, DCR_EFORMAT, "%s answered no JSON object%s%s", what,
				   o ? "" : ": ", o ? "" : je.text);
	}
	int bad = 0, r = 0;
	if (src == DCR_AWS_PROCESS) {
		json_t *v = json_object_get(o, "Version");
		if (!json_is_integer(v) || json_integer_value(v) != 1) {
			json_decref(o);
			return dcr_err_set(e, DCR_EFORMAT, "%s answered without \"Version\": 1", what);
		}
	}
	const char *code = jstr(o, "Code", &bad);
	if (code && strcmp(code, "Success")) {
		const char *msg = jstr(o, "Message", &bad);
		char shown[200];
		snprintf(shown, sizeof(shown), "%s%s%s", code, msg ? ": " : "", msg ? msg : "");
		printable(shown);
		json_decref(o);
		return dcr_err_set(e, DCR_EFORMAT, "%s answered %s", what, shown);
	}
	const char *akid = jstr(o, "AccessKeyId", &bad);
	const char *secret = jstr(o, "SecretAccessKey", &bad);
	const char *token = jstr(o, src == DCR_AWS_PROCESS ? "SessionToken" : "Token", &bad);
	const char *exp = jstr(o, "Expiration", &bad);
	if (bad || !akid || !secret)
		r = dcr_err_set(e, DCR_EFORMAT, "%s answered without %s", what,
				bad ? "string values" : "AccessKeyId and SecretAccessKey");
	else if (!header_safe(akid, AKID_MAX) || !header_safe(secret, SECRET_MAX) ||
		 (token && !header_safe(token, TOKEN_MAX)))
		r = dcr_err_set(e, DCR_EFORMAT,
				"%s answered keys that are empty, too long or not printable ASCII",
				what);
	else if (exp && dcr_aws_time_parse(exp, &c->expires))
		r = dcr_err_set(e, DCR_EFORMAT, "%s answered an Expiration that is no ISO 8601 time",
				what);
	else if (!exp && src != DCR_AWS_PROCESS && token)
		r = dcr_err_set(e, DCR_EFORMAT, "%s answered temporary keys without an Expiration",
				what);
	if (!r) {
		c->akid = dcr_strdup(akid);
		c->secret = dcr_strdup(secret);
		c->token = token ? dcr_strdup(token) : NULL;
		if (!c->akid || !c->secret || (token && !c->token))
			r = dcr_err_sys(e, ENOMEM, "%s", what);
	}
	json_decref(o);
	if (r)
		dcr_aws_creds_free(c);
	return r;
}

/* ---- credential_process ----------------------------------------------- */

/* Run cmd with /bin/sh -c (as the AWS CLI on Linux does: quoting as a
 * shell reads it), stdin from /dev/null (a pack may be arriving on ours),
 * stderr ours; its stdout, at most DCR_AWS_ANSWER_MAX bytes, into out. */
static int run_process(const char *cmd, struct dcr_buf *out, struct dcr_err *e)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC))
		return dcr_err_sys(e, errno, "cannot run credential_process");
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	char *argv[] = {"sh", "-c", (char *)cmd, NULL};
	pid_t pid;
	int r = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (r) {
		close(p[0]);
		return dcr_err_sys(e, r, "cannot run credential_process");
	}
	int big = 0, rerr = 0;
	out->len = 0;
	for (;;) {
		uint8_t b[4096];
		ssize_t n = read(p[0], b, sizeof(b));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rerr = errno;
			break;
		}
		if (!n)
			break;
		if (out->len + (size_t)n > DCR_AWS_ANSWER_MAX) {
			big = 1;
			kill(pid, SIGTERM);
			break;
		}
		if (dcr_buf_add(out, b, (size_t)n)) {
			rerr = ENOMEM;
			kill(pid, SIGTERM);
			break;
		}
	}
	close(p[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (big)
		return dcr_err_set(e, -EFBIG, "credential_process wrote more than %u bytes",
				   DCR_AWS_ANSWER_MAX);
	if (rerr)
		return dcr_err_sys(e, rerr, "cannot read what credential_process wrote");
	if (WIFSIGNALED(st))
		return dcr_err_set(e, -EIO, "credential_process was killed by signal %d",
				   WTERMSIG(st));
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		return dcr_err_set(e, -EIO, "credential_process exited with status %d",
				   WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return 0;
}

/* ---- endpoints --------------------------------------------------------- */

/* Whether url may carry a container's credentials: https anywhere; http
 * only to a loopback address or to the ECS and EKS agents. */
static int container_url_ok(const char *url)
{
	if (!strncasecmp(url, "https://", 8))
		return 1;
	if (strncasecmp(url, "http://", 7))
		return 0;
	const char *h = url + 7, *end;
	char host[64];
	if (*h == '[') {
		end = strchr(h, ']');
		if (!end)
			return 0;
		end++;
	} else {
		end = h + strcspn(h, ":/?#");
	}
	if (strchr(h, '@') && strchr(h, '@') < end)
		return 0; /* user@host */
	size_t n = (size_t)(end - h);
	if (!n || n >= sizeof(host))
		return 0;
	memcpy(host, h, n);
	host[n] = '\0';
	if (!strcasecmp(host, "localhost") || !strcmp(host, "[::1]") ||
	    !strcmp(host, "169.254.170.2") || !strcmp(host, "169.254.170.23") ||
	    !strcasecmp(host, "[fd00:ec2::23]"))
		return 1;
	/* 127.0.0.0/8, dotted */
	unsigned a, b, c, d;
	char tail;
	return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 &&
	       c < 256 && d < 256;
}

/* The value of an Authorization header for the container endpoint, or
 * NULL with *err set (0 when there is none). */
static char *container_auth(struct dcr_err *e, int *err)
{
	*err = 0;
	const char *file = env_of("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	char *tok = NULL;
	if (file) {
		if ((*err = net_read_token_file("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", file,
						TOKEN_MAX, &tok, e)))
			return NULL;
	} else if (env_of("AWS_CONTAINER_AUTHORIZATION_TOKEN")) {
		tok = dcr_strdup(env_of("AWS_CONTAINER_AUTHORIZATION_TOKEN"));
	} else {
		return NULL;
	}
	if (!tok || !header_safe(tok, TOKEN_MAX)) {
		*err = tok ? dcr_err_set(e, DCR_EFORMAT,
					 "the container authorization token is empty or not printable ASCII")
			   : dcr_err_sys(e, ENOMEM, "credentials");
		net_wipe_free(tok);
		return NULL;
	}
	char *h = dcr_asprintf("Authorization: %s", tok);
	net_wipe_free(tok);
	if (!h)
		*err = dcr_err_sys(e, ENOMEM, "credentials");
	return h;
}

/* method url with the headers (and body, or NULL), within timeout_ms;
 * the answer's body in out when the status is 200, else an error (what:
 * what was asked, for the message) with the server's cause (net.c's: an
 * XML error's Code and Message, else the body's first line). *status gets
 * the status (0 when no answer came). */
static int ask(const char *method, const char *url, const char *const *h, size_t nh,
	       const char *body, long timeout_ms, const char *what, struct dcr_buf *out,
	       long *status, struct dcr_err *e)
{
	struct dcr_err le;
	char *shown = dcr_url_redact(url);
	int r = net_fetch_small(method, url, h, nh, body, timeout_ms, DCR_AWS_ANSWER_MAX, out,
				status, &le);
	if (r) {
		r = dcr_err_set(e, r, "%s: no answer from %s: %s", what, shown ? shown : "?",
				le.msg);
	} else if (*status != 200) {
		struct net_req q;
		memset(&q, 0, sizeof(q));
		q.status = *status;
		q.resp = *out; /* read only */
		char cause[300];
		net_http_cause(&q, cause, sizeof(cause), NULL);
		printable(cause);
		r = dcr_err_set(e,
				*status == 404			       ? DCR_ENOTFOUND
				: *status == 401 || *status == 403 ? -EACCES
								   : DCR_EREMOTE,
				"%s: %s answered HTTP %s", what, shown ? shown : "?", cause);
	}
	free(shown);
	return r;
}

static int from_container(struct dcr_aws_creds *c, struct dcr_err *e)
{
	const char *rel = env_of("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = env_of("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	const char *what = "the container credential endpoint";
	char *url = rel ? dcr_asprintf("http://169.254.170.2%s%s", rel[0] == '/' ? "" : "/", rel)
			: dcr_strdup(full ? full : "");
	if (!url)
		return dcr_err_sys(e, ENOMEM, "credentials");
	if (!rel && !container_url_ok(url)) {
		free(url);
		return dcr_err_set(e, -EINVAL,
				   "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http to a "
				   "loopback address or 169.254.170.2 or 169.254.170.23");
	}
	int err;
	char *auth = container_auth(e, &err);
	if (err) {
		free(url);
		return err;
	}
	const char *h[1] = {auth};
	struct dcr_buf b = {0};
	long st = 0;
	int r = ask("GET", url, h, auth ? 1 : 0, NULL, DCR_AWS_TIMEOUT_MS, what, &b, &st, e);
	if (!r)
		r = dcr_aws_creds_parse((const char *)b.p, b.len, DCR_AWS_CONTAINER, what, c, e);
	net_wipe_free(auth);
	wipe_buf(&b);
	free(url);
	return r;
}

/* IMDSv2: a session token first; where the service answers that PUT with
 * 403, 404 or 405 (only v1 there, or a proxy that refuses PUT), or takes
 * it and never answers (a hop limit of 1 and a container's extra hop: the
 * answer dies on the way), v1, as the AWS SDKs do. */
static int from_imds(struct dcr_aws_creds *c, struct dcr_err *e)
{
	const char *ep = env_of("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	const char *what = "the instance metadata service";
	char *base = dcr_strdup(ep ? ep : "http://169.254.169.254");
	if (!base)
		return dcr_err_sys(e, ENOMEM, "credentials");
	for (size_t n = strlen(base); n && base[n - 1] == '/'; n--)
		base[n - 1] = '\0';
	struct dcr_buf b = {0};
	char *url = dcr_asprintf("%s/latest/api/token", base), *tokh = NULL, *role = NULL;
	long st = 0;
	const char *ttl[1] = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"};
	int r = url ? ask("PUT", url, ttl, 1, NULL, DCR_AWS_TIMEOUT_MS, what, &b, &st, e) : -ENOMEM;
	if (r && st && st != 403 && st != 404 && st != 405)
		goto out;
	if (!r) {
		b.len -= b.len && b.p[b.len - 1] == '\n';
		char *t = strndup((const char *)b.p, b.len);
		if (!t || !header_safe(t, TOKEN_MAX)) {
			r = t ? dcr_err_set(e, DCR_EFORMAT, "%s answered a session token that is not printable ASCII",
					    what)
			      : -ENOMEM;
			free(t);
			goto out;
		}
		tokh = dcr_asprintf("X-aws-ec2-metadata-token: %s", t);
		net_wipe_free(t);
		if (!tokh) {
			r = -ENOMEM;
			goto out;
		}
	} else if (!st && r != -ETIMEDOUT) {
		goto out; /* no answer at all: not an instance */
	}
	const char *h[1] = {tokh};
	free(url);
	url = dcr_asprintf("%s/latest/meta-data/iam/security-credentials/", base);
	r = url ? ask("GET", url, h, tokh ? 1 : 0, NULL, DCR_AWS_TIMEOUT_MS, what, &b, &st, e) : -ENOMEM;
	if (r == DCR_ENOTFOUND)
		r = dcr_err_set(e, DCR_ENOTFOUND, "%s: the instance has no IAM role", what);
	if (r)
		goto out;
	size_t n = 0;
	while (n < b.len && b.p[n] != '\n' && b.p[n] != '\r')
		n++;
	role = strndup((const char *)b.p, n);
	if (!role) {
		r = -ENOMEM;
		goto out;
	}
	int ok = n > 0 && n <= 128;
	for (size_t i = 0; i < n && ok; i++)
		ok = (role[i] >= 'a' && role[i] <= 'z') || (role[i] >= 'A' && role[i] <= 'Z') ||
		     (role[i] >= '0' && role[i] <= '9') || (role[i] && strchr("+=,.@_-", role[i]));
	if (!ok) {
		r = dcr_err_set(e, DCR_EFORMAT, "%s answered a role name that is not one", what);
		goto out;
	}
	free(url);
	url = dcr_asprintf("%s/latest/meta-data/iam/security-credentials/%s", base, role);
	r = url ? ask("GET", url, h, tokh ? 1 : 0, NULL, DCR_AWS_TIMEOUT_MS, what, &b, &st, e) : -ENOMEM;
	if (!r)
		r = dcr_aws_creds_parse((const char *)b.p, b.len, DCR_AWS_IMDS, what, c, e);
out:
	if (r == -ENOMEM)
		r = dcr_err_sys(e, ENOMEM, "credentials");
	net_wipe_free(tokh);
	wipe_buf(&b);
	free(role);
	free(url);
	free(base);
	return r;
}

/* ---- web identity (EKS IRSA) ------------------------------------------ */

int dcr_aws_web_identity(void)
{
	return env_of("AWS_WEB_IDENTITY_TOKEN_FILE") && env_of("AWS_ROLE_ARN");
}

int dcr_aws_sts_parse(const char *xml, size_t n, const char *what, struct dcr_aws_creds *c,
		      struct dcr_err *e)
{
	memset(c, 0, sizeof(*c));
	const char *after = NULL;
	char *cred = net_xml_text(xml, n, "Credentials", &after);
	if (!cred)
		return dcr_err_set(e, DCR_EFORMAT, "%s answered no Credentials", what);
	size_t cn = strlen(cred);
	char *akid = net_xml_text(cred, cn, "AccessKeyId", NULL);
	char *secret = net_xml_text(cred, cn, "SecretAccessKey", NULL);
	char *token = net_xml_text(cred, cn, "SessionToken", NULL);
	char *exp = net_xml_text(cred, cn, "Expiration", NULL);
	int r = 0;
	if (!akid || !secret || !token || !exp)
		r = dcr_err_set(e, DCR_EFORMAT,
				"%s answered Credentials without AccessKeyId, SecretAccessKey, "
				"SessionToken and Expiration",
				what);
	else if (!header_safe(akid, AKID_MAX) || !header_safe(secret, SECRET_MAX) ||
		 !header_safe(token, TOKEN_MAX))
		r = dcr_err_set(e, DCR_EFORMAT,
				"%s answered keys that are empty, too long or not printable ASCII",
				what);
	else if (dcr_aws_time_parse(exp, &c->expires))
		r = dcr_err_set(e, DCR_EFORMAT, "%s answered an Expiration that is no ISO 8601 time",
				what);
	if (!r) {
		c->akid = akid;
		c->secret = secret;
		c->token = token;
		akid = secret = token = NULL;
	}
	free(akid);
	net_wipe_free(secret);
	net_wipe_free(token);
	free(exp);
	OPENSSL_cleanse(cred, cn);
	free(cred);
	if (r)
		c->expires = 0;
	return r;
}

/* A form value, %-encoded (the unreserved characters as they are). */
static int form_add(struct dcr_buf *b, const char *k, const char *v)
{
	char *enc = dcr_uri_encode(v, strlen(v), 0);
	int r = !enc || dcr_buf_add(b, b->len ? "&" : "", b->len ? 1 : 0) ||
		dcr_buf_add(b, k, strlen(k)) || dcr_buf_add(b, "=", 1) ||
		dcr_buf_add(b, enc, strlen(enc));
	net_wipe_free(enc);
	return r ? -ENOMEM : 0;
}

static int from_web_identity(const char *region, struct dcr_aws_creds *c, struct dcr_err *e)
{
	const char *what = "STS AssumeRoleWithWebIdentity";
	const char *file = env_of("AWS_WEB_IDENTITY_TOKEN_FILE");
	const char *arn = env_of("AWS_ROLE_ARN");
	const char *sess = env_of("AWS_ROLE_SESSION_NAME");
	const char *ep = env_of("AWS_ENDPOINT_URL_STS");
	char *tok = NULL;
	int r = net_read_token_file("AWS_WEB_IDENTITY_TOKEN_FILE", file, TOKEN_MAX, &tok, e);
	if (r)
		return r;
	char pidname[32];
	snprintf(pidname, sizeof(pidname), "dcr-%ld", (long)getpid());
	char *url = ep ? dcr_strdup(ep)
		       : dcr_asprintf("https://sts.%s.amazonaws.com%s", region,
				      !strncmp(region, "cn-", 3) ? ".cn" : "");
	struct dcr_buf form = {0}, b = {0};
	if (!url)
		r = -ENOMEM;
	else if (!*tok)
		r = dcr_err_set(e, DCR_EFORMAT, "AWS_WEB_IDENTITY_TOKEN_FILE '%s' is empty", file);
	if (!r && (form_add(&form, "Action", "AssumeRoleWithWebIdentity") ||
		   form_add(&form, "Version", "2011-06-15") || form_add(&form, "RoleArn", arn) ||
		   form_add(&form, "RoleSessionName", sess ? sess : pidname) ||
		   form_add(&form, "WebIdentityToken", tok) ||
		   dcr_buf_add(&form, "", 1)))
		r = -ENOMEM;
	if (!r) {
		const char *h[2] = {"Content-Type: application/x-www-form-urlencoded",
				    "Accept: application/xml"};
		long st = 0;
		r = ask("POST", url, h, 2, (const char *)form.p, DCR_AWS_TIMEOUT_MS * 5, what, &b,
			&st, e);
		if (!r)
			r = dcr_aws_sts_parse((const char *)b.p, b.len, what, c, e);
	}
	if (r == -ENOMEM)
		r = dcr_err_sys(e, ENOMEM, "credentials");
	wipe_buf(&form);
	wipe_buf(&b);
	net_wipe_free(tok);
	free(url);
	return r;
}

enum dcr_aws_source dcr_aws_source_pick(const char *process)
{
	if (process && *process)
		return DCR_AWS_PROCESS;
	if (env_of("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") ||
	    env_of("AWS_CONTAINER_CREDENTIALS_FULL_URI"))
		return DCR_AWS_CONTAINER;
	const char *off = env_of("AWS_EC2_METADATA_DISABLED");
	if (off && !strcasecmp(off, "true"))
		return DCR_AWS_NONE;
	return DCR_AWS_IMDS;
}

int dcr_aws_creds_fetch(enum dcr_aws_source src, const char *process, const char *region,
			struct dcr_aws_creds *c, struct dcr_err *e)
{
	memset(c, 0, sizeof(*c));
	switch (src) {
	case DCR_AWS_PROCESS: {
		struct dcr_buf b = {0};
		int r = run_process(process, &b, e);
		if (!r)
			r = dcr_aws_creds_parse((const char *)b.p, b.len, src, "credential_process",
						c, e);
		wipe_buf(&b);
		return r;
	}
	case DCR_AWS_CONTAINER: return from_container(c, e);
	case DCR_AWS_IMDS: return from_imds(c, e);
	case DCR_AWS_WEB_IDENTITY: return from_web_identity(region ? region : "us-east-1", c, e);
	default: return dcr_err_set(e, DCR_ENOTFOUND, "no AWS credential source");
	}
}
