/* sigv4.c - AWS Signature Version 4: canonical request, string to sign,
 * signing key and Authorization header, for the S3 store's requests
 * (store-s3.c).
 * libcurl's CURLOPT_AWS_SIGV4 (7.88) signs the query string as written and
 * omits x-amz-content-sha256, so dcr canonicalizes and signs by itself. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "core/buf.h"
#include "core/digest.h"
#include "core/util.h"
#include "transport/sigv4.h"

static int unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

char *dcr_uri_encode(const char *s, size_t n, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(3 * n + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (unreserved(c) || (keep_slash && c == '/')) {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o = '\0';
	return out;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Percent-decode s[0..n) into out (at most n bytes); returns the
 * decoded length. Malformed escapes are kept literally. */
static size_t uri_decode(const char *s, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '%' && i + 2 < n &&
		    hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
			out[o++] = (char)(hexval(s[i + 1]) << 4 | hexval(s[i + 2]));
			i += 2;
		} else {
			out[o++] = s[i];
		}
	}
	return o;
}

static void hmac(const void *key, size_t klen, const void *msg, size_t mlen,
		 uint8_t out[32])
{
	unsigned int olen = 32;
	HMAC(EVP_sha256(), key, (int)klen, msg, mlen, out, &olen);
}

struct qpair {
	char *k, *v; /* encoded */
};

static int qpair_cmp(const void *a, const void *b)
{
	const struct qpair *x = a, *y = b;
	int c = strcmp(x->k, y->k);
	return c ? c : strcmp(x->v, y->v);
}

/* Canonical query string: pairs decoded, AWS-encoded, sorted by key then
 * value (byte order). Returns malloc'd string or NULL. */
static char *canonical_query(const char *q)
{
	if (!q || !*q)
		return dcr_strdup("");
	size_t np = 1;
	for (const char *p = q; *p; p++)
		np += *p == '&';
	struct qpair *pairs = dcr_calloc(np, sizeof(*pairs));
	char *tmp = malloc(strlen(q) + 1);
	struct dcr_buf b = {0};
	char *res = NULL;
	size_t k = 0;
	if (!pairs || !tmp)
		goto out;
	for (const char *p = q; *p;) {
		const char *end = strchr(p, '&');
		if (!end)
			end = p + strlen(p);
		if (end > p) {
			const char *eq = memchr(p, '=', (size_t)(end - p));
			const char *kend = eq ? eq : end;
			size_t n = uri_decode(p, (size_t)(kend - p), tmp);
			pairs[k].k = dcr_uri_encode(tmp, n, 0);
			n = eq ? uri_decode(eq + 1, (size_t)(end - eq - 1), tmp) : 0;
			pairs[k].v = dcr_uri_encode(tmp, n, 0);
			if (!pairs[k].k || !pairs[k].v) {
				k++;
				goto out;
			}
			k++;
		}
		p = *end ? end + 1 : end;
	}
	qsort(pairs, k, sizeof(*pairs), qpair_cmp);
	for (size_t i = 0; i < k; i++) {
		if ((i && dcr_buf_add(&b, "&", 1)) ||
		    dcr_buf_add(&b, pairs[i].k, strlen(pairs[i].k)) ||
		    dcr_buf_add(&b, "=", 1) ||
		    dcr_buf_add(&b, pairs[i].v, strlen(pairs[i].v)))
			goto out;
	}
	if (dcr_buf_add(&b, "", 1))
		goto out;
	res = (char *)b.p;
	b.p = NULL;
out:
	for (size_t i = 0; pairs && i < k; i++) {
		free(pairs[i].k);
		free(pairs[i].v);
	}
	free(pairs);
	free(tmp);
	dcr_buf_free(&b);
	return res;
}

struct hdr {
	char *name;  /* lowercased */
	char *value; /* trimmed, spaces collapsed */
};

static int hdr_cmp(const void *a, const void *b)
{
	return strcmp(((const struct hdr *)a)->name, ((const struct hdr *)b)->name);
}

static char *clean_value(const char *v)
{
	char *out = malloc(strlen(v) + 1), *o = out;
	if (!out)
		return NULL;
	while (*v == ' ' || *v == '\t')
		v++;
	int space = 0;
	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			space = 1;
			continue;
		}
		if (space && o > out)
			*o++ = ' ';
		space = 0;
		*o++ = *v;
	}
	*o = '\0';
	return out;
}

void dcr_sigv4_out_free(struct dcr_sigv4_out *o)
{
	if (!o)
		return;
	free(o->canonical_request);
	free(o->string_to_sign);
	free(o->authorization);
	o->canonical_request = o->string_to_sign = o->authorization = NULL;
}

int dcr_sigv4_sign(const struct dcr_sigv4 *in, struct dcr_sigv4_out *out)
{
	int r = -ENOMEM;
	memset(out, 0, sizeof(*out));
	if (!in->amz_date || strlen(in->amz_date) != 16)
		return -EINVAL;
	struct hdr *h = dcr_calloc(in->nheaders, sizeof(*h));
	char *query = canonical_query(in->query);
	struct dcr_buf cr = {0}, sh = {0};
	char date[9];
	memcpy(date, in->amz_date, 8);
	date[8] = '\0';
	if (!h || !query)
		goto out;
	for (size_t i = 0; i < in->nheaders; i++) {
		h[i].name = dcr_strdup(in->headers[i].name);
		h[i].value = clean_value(in->headers[i].value);
		if (!h[i].name || !h[i].value)
			goto out;
		for (char *p = h[i].name; *p; p++)
			*p = (char)tolower((unsigned char)*p);
	}
	qsort(h, in->nheaders, sizeof(*h), hdr_cmp);

	/* Signed headers list; duplicate names are joined with ',' as AWS
	 * does (dcr itself never sends duplicates). */
	if (dcr_buf_add(&cr, in->method, strlen(in->method)) || dcr_buf_add(&cr, "\n", 1) ||
	    dcr_buf_add(&cr, in->uri, strlen(in->uri)) || dcr_buf_add(&cr, "\n", 1) ||
	    dcr_buf_add(&cr, query, strlen(query)) || dcr_buf_add(&cr, "\n", 1))
		goto out;
	for (size_t i = 0; i < in->nheaders; i++) {
		int dup = i && !strcmp(h[i].name, h[i - 1].name);
		if (dup) {
			if (dcr_buf_add(&cr, ",", 1))
				goto out;
		} else {
			if ((i && dcr_buf_add(&cr, "\n", 1)) ||
			    dcr_buf_add(&cr, h[i].name, strlen(h[i].name)) ||
			    dcr_buf_add(&cr, ":", 1))
				goto out;
			if ((sh.len && dcr_buf_add(&sh, ";", 1)) ||
			    dcr_buf_add(&sh, h[i].name, strlen(h[i].name)))
				goto out;
		}
		if (dcr_buf_add(&cr, h[i].value, strlen(h[i].value)))
			goto out;
	}
	if ((in->nheaders && dcr_buf_add(&cr, "\n", 1)) || dcr_buf_add(&cr, "\n", 1) ||
	    dcr_buf_add(&cr, sh.p, sh.len) || dcr_buf_add(&cr, "\n", 1) ||
	    dcr_buf_add(&cr, in->payload_hash, strlen(in->payload_hash)) ||
	    dcr_buf_add(&cr, "", 1) || dcr_buf_add(&sh, "", 1))
		goto out;

	dcr_digest d;
	char crhex[65];
	dcr_sha256(cr.p, cr.len - 1, &d);
	dcr_hex(d.b, 32, crhex);
	out->string_to_sign = dcr_asprintf("AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s",
					   in->amz_date, date, in->region,
					   in->service, crhex);
	char *ksecret = dcr_asprintf("AWS4%s", in->secret_key);
	if (!out->string_to_sign || !ksecret) {
		free(ksecret);
		goto out;
	}
	uint8_t k[32], sig[32];
	hmac(ksecret, strlen(ksecret), date, 8, k);
	OPENSSL_cleanse(ksecret, strlen(ksecret));
	free(ksecret);
	hmac(k, 32, in->region, strlen(in->region), k);
	hmac(k, 32, in->service, strlen(in->service), k);
	hmac(k, 32, "aws4_request", 12, k);
	hmac(k, 32, out->string_to_sign, strlen(out->string_to_sign), sig);
	OPENSSL_cleanse(k, sizeof(k));
	dcr_hex(sig, 32, out->signature);
	out->authorization = dcr_asprintf(
		"AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, Signature=%s",
		in->access_key, date, in->region, in->service, (char *)sh.p,
		out->signature);
	if (!out->authorization)
		goto out;
	out->canonical_request = (char *)cr.p;
	cr.p = NULL;
	r = 0;
out:
	for (size_t i = 0; h && i < in->nheaders; i++) {
		free(h[i].name);
		free(h[i].value);
	}
	free(h);
	free(query);
	dcr_buf_free(&cr);
	dcr_buf_free(&sh);
	if (r)
		dcr_sigv4_out_free(out);
	return r;
}
