/* names.c - object names: what a store accepts as one, the growing
 * lists of names that listings hand out, and URLs as messages show them. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "transport/names.h"
#include "transport/store.h"

/* ---- names ---------------------------------------------------------- */

static int check_path(const char *what, const char *name, int allow_partial,
		      struct dcr_err *e)
{
	if (!name)
		return dcr_err_set(e, DCR_EFORMAT, "invalid %s: none given", what);
	size_t n = strlen(name);
	if (n > DCR_NAME_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "invalid %s '%.64s...': longer than %d bytes",
				   what, name, DCR_NAME_MAX);
	if (!allow_partial && !n)
		return dcr_err_set(e, DCR_EFORMAT, "invalid %s: empty", what);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c < 0x20 || c == 0x7f)
			return dcr_err_set(e, DCR_EFORMAT,
					   "invalid %s: control character 0x%02x at byte %zu",
					   what, c, i);
	}
	if (name[0] == '/')
		return dcr_err_set(e, DCR_EFORMAT, "invalid %s '%s': starts with '/'", what, name);
	if (!allow_partial && name[n - 1] == '/')
		return dcr_err_set(e, DCR_EFORMAT, "invalid %s '%s': ends with '/'", what, name);
	/* Components: none empty, ".", or ".." (the last one of a prefix may
	 * be partial, but not "." or ".."). */
	const char *p = name;
	while (*p) {
		const char *end = strchr(p, '/');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if ((len == 0 && end) || (len == 1 && p[0] == '.') ||
		    (len == 2 && p[0] == '.' && p[1] == '.'))
			return dcr_err_set(e, DCR_EFORMAT,
					   "invalid %s '%s': empty, '.' or '..' path component",
					   what, name);
		if (!end)
			break;
		p = end + 1;
	}
	return 0;
}

int dcr_store_check_name(const char *name, struct dcr_err *e)
{
	return check_path("object name", name, 0, e);
}

int dcr_store_check_prefix(const char *prefix, struct dcr_err *e)
{
	return check_path("prefix", prefix, 1, e);
}

void dcr_store_names_free(char **names, size_t n)
{
	for (size_t i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
}

/* ---- the name list ------------------------------------------------- */

int dcr_names_add(struct dcr_names *l, char *str)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		char **v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = str;
	return 0;
}

int dcr_names_add_listed(struct dcr_names *l, char *name, const char *what, int code,
			 struct dcr_err *e)
{
	struct dcr_err ne;
	int r = 0;
	if (!name)
		return dcr_err_sys(e, ENOMEM, "cannot list '%s'", what);
	size_t len = strlen(name) + 1;
	if (dcr_store_check_name(name, &ne))
		r = dcr_err_set(e, DCR_EFORMAT, "cannot list '%s': it lists a bad name (%s)", what,
				ne.msg);
	else if (l->n >= DCR_STORE_LIST_MAX)
		r = dcr_err_set(e, code, "cannot list '%s': more than %u names", what,
				DCR_STORE_LIST_MAX);
	else if (len > DCR_STORE_LIST_BYTES - l->bytes)
		r = dcr_err_set(e, code, "cannot list '%s': more than %zu MiB of names", what,
				DCR_STORE_LIST_BYTES >> 20);
	else if (dcr_names_add(l, name))
		r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", what);
	else
		l->bytes += len;
	if (r)
		free(name);
	return r;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void dcr_names_sort(struct dcr_names *l)
{
	if (l->n)
		qsort(l->v, l->n, sizeof(*l->v), cmp_str);
}

char *dcr_url_redact(const char *url)
{
	const char *sch = strstr(url, "://");
	const char *auth = sch ? sch + 3 : NULL;
	size_t alen = auth ? strcspn(auth, "/?#") : 0;
	const char *at = auth ? memrchr(auth, '@', alen) : NULL;
	const char *q = strchr(url, '?');
	struct dcr_buf b = {0};
	int bad = 0;
	if (at) {
		bad |= dcr_buf_add(&b, url, (size_t)(auth - url)) || dcr_buf_add(&b, "***", 3);
		url = at;
	}
	if (q && sch && q >= url) { /* a directory may have a ? in its name */
		bad |= dcr_buf_add(&b, url, (size_t)(q - url)) || dcr_buf_add(&b, "?***", 4);
		url = q + strcspn(q, "#");
	}
	bad |= dcr_buf_add(&b, url, strlen(url) + 1);
	if (bad) {
		dcr_buf_free(&b);
		return NULL;
	}
	return (char *)b.p;
}
