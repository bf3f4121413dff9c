/* store-http.c - the HTTP(S) store: objects are BASE/NAME on any server
 * that takes PUT, GET, HEAD and DELETE; listing by the GET BASE/?prefix=
 * convention of store.h. Requests, retries and the object operations are
 * net.c's; this file says where an object is, and lists. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "transport/net.h"
#include "transport/sigv4.h"
#include "transport/store-http.h"

static int http_locate(struct dcr_store *s, const char *name, char **path, char **what)
{
	char *enc = dcr_uri_encode(name, strlen(name), 1);
	*path = enc ? dcr_asprintf("/%s", enc) : NULL;
	*what = dcr_asprintf("%s/%s", net_of(s)->shown, name);
	free(enc);
	return *path && *what ? 0 : -ENOMEM;
}

/* The token of $DCR_HTTP_TOKEN_FILE (read once, white space at its end
 * dropped), else $DCR_HTTP_TOKEN, as the Authorization of every request:
 * "Bearer TOKEN". libcurl sends it to no other host a download is
 * redirected to. */
static int http_bearer(struct dcr_store *s, struct dcr_err *e)
{
	const char *file = getenv("DCR_HTTP_TOKEN_FILE"), *v = getenv("DCR_HTTP_TOKEN");
	char *b = NULL;
	if (file && *file) {
		struct dcr_err le;
		if (net_read_token_file("DCR_HTTP_TOKEN_FILE", file, 16384, &b, &le))
			return dcr_err_set(e, le.code, "cannot open store '%s': %s", s->url, le.msg);
		v = b;
	} else if (!v || !*v) {
		return 0;
	}
	int ok = *v != '\0';
	for (const char *p = v; *p && ok; p++)
		ok = (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f;
	int r = 0;
	if (!ok)
		r = dcr_err_set(e, -EINVAL,
				"cannot open store '%s': the bearer token (%s) is empty or holds white space "
				"or bytes that are not printable ASCII",
				s->url, file && *file ? "DCR_HTTP_TOKEN_FILE" : "DCR_HTTP_TOKEN");
	else if (!(net_of(s)->bearer = dcr_asprintf("Bearer %s", v)))
		r = dcr_err_sys(e, ENOMEM, "cannot open store '%s'", s->url);
	net_wipe_free(b);
	return r;
}

static const struct net_hooks http_hooks = {
	.locate = http_locate,
	.follow_redirects = 1,
};

static int http_open(struct dcr_store *s, const char *url, struct dcr_err *e)
{
	int r = net_open(s, sizeof(struct net), &http_hooks, e);
	if (r)
		return r;
	size_t n = strlen(url);
	while (n && url[n - 1] == '/')
		n--;
	const char *h = strstr(url, "://") + 3;
	if (!*h || *h == '/')
		return dcr_err_set(e, -EINVAL, "cannot open store '%s': no host", s->url);
	if (strchr(url, '?') || strchr(url, '#'))
		return dcr_err_set(e, -EINVAL,
				   "cannot open store '%s': a query or fragment is not allowed",
				   s->url);
	if (net_set_base(s, strndup(url, n)))
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", s->url);
	/* a bearer token, unless the URL carries a user and password */
	const char *at = strchr(h, '@'), *end = h + strcspn(h, "/");
	if (!(at && at < end) && (r = http_bearer(s, e)))
		return r;
	return 0;
}

static int http_list(struct dcr_store *s, const char *prefix, struct dcr_names *l,
		     struct dcr_err *e)
{
	struct net_req q;
	memset(&q, 0, sizeof(q));
	q.body_fd = -1;
	char *ep = dcr_uri_encode(prefix, strlen(prefix), 0);
	char *query = ep ? dcr_asprintf("prefix=%s", ep) : NULL;
	char *what = dcr_asprintf("%s/%s", net_of(s)->shown, prefix);
	q.path = dcr_strdup("/");
	int r = 0;
	if (!query || !what || !q.path) {
		r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", prefix);
		goto out;
	}
	q.method = "GET";
	q.what = what;
	q.query = query;
	q.keep_body = 1;
	r = net_perform(s, &q, e);
	if (r) {
		if (r == DCR_ENOTFOUND || r == DCR_EREMOTE)
			r = dcr_err_set(e, DCR_EREMOTE,
					"cannot list '%s': the server does not list (GET %s/?prefix=... answered %ld); "
					"the convention is in dcr-push(1), STORES",
					what, net_of(s)->shown, q.status);
		goto out;
	}
	const char *p = (const char *)q.resp.p, *end = p + q.resp.len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (n && p[n - 1] == '\r')
			n--;
		const char *name = p;
		p = nl ? nl + 1 : end;
		/* names outside the prefix are not ours to check or keep */
		if (!n || n < strlen(prefix) || strncmp(name, prefix, strlen(prefix)))
			continue;
		if (memchr(name, 0, n)) {
			r = dcr_err_set(e, DCR_EFORMAT, "cannot list '%s': it lists a name holding a NUL byte",
					what);
			goto out;
		}
		char *c = strndup(name, n);
		if (c && net_is_probe(c)) {
			free(c);
			continue;
		}
		if ((r = dcr_names_add_listed(l, c, what, DCR_EREMOTE, e)))
			goto out;
	}
out:
	net_req_free(&q);
	free(query);
	free(ep);
	free(what);
	return r;
}


const struct dcr_store_ops store_http_ops = {
	.open = http_open,
	.close = net_close,
	.put = net_put,
	.put_file = net_put_file,
	.put_if_absent = net_put_if_absent,
	.get = net_get,
	.get_blob = net_get_blob,
	.get_range = net_get_range,
	.get_to_fd = net_get_to_fd,
	.stat = net_stat,
	.list = http_list,
	.delete = net_delete,
};
