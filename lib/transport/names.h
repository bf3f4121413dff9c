/* names.h - object names: what a store accepts as one, and the growing
 * lists of names that listings hand out.
 *
 * A name is rejected when it is empty, longer than 1024 bytes, starts or
 * ends with '/', has an empty, "." or ".." component, or holds a control
 * character (DCR_EFORMAT). */
#ifndef DCR_TRANSPORT_NAMES_H
#define DCR_TRANSPORT_NAMES_H

#include <stddef.h>

#include "core/error.h"

#define DCR_NAME_MAX 1024 /* the longest object name, in bytes */

/* 0 if name is an acceptable object name, else DCR_EFORMAT with a message. */
int dcr_store_check_name(const char *name, struct dcr_err *e);
/* The same for a listing's prefix, whose last component may be partial
 * ("v4" lists v4/..., v42/...) or empty. */
int dcr_store_check_prefix(const char *prefix, struct dcr_err *e);
/* Free a list dcr_store_list handed out. */
void dcr_store_names_free(char **names, size_t n);

/* A growing list of names (each malloc'd). dcr_names_add takes str on
 * success; on failure the caller still owns it. */
struct dcr_names {
	char **v;
	size_t n, cap;
	size_t bytes; /* of the names listed (dcr_names_add_listed), NULs counted */
};
int dcr_names_add(struct dcr_names *l, char *str);
/* Add name, as a store's listing (what, in messages) names it; takes name
 * on every path. A name no store could hold (dcr_store_check_name) and a
 * listing past DCR_STORE_LIST_MAX names or DCR_STORE_LIST_BYTES bytes of
 * them are errors (DCR_EFORMAT, code),
 * as every store's listing is bounded (transport/store.h). */
int dcr_names_add_listed(struct dcr_names *l, char *name, const char *what, int code,
			 struct dcr_err *e);
void dcr_names_sort(struct dcr_names *l); /* by strcmp */

/* A URL as messages may show it (malloc'd, NULL when memory ran out): the
 * userinfo of scheme://user:password@host/... becomes "***@", and in a URL
 * a query "?***", where credentials travel. Every message that names a
 * store, or an object by its URL, is made from this (dcr_store_url is). */
char *dcr_url_redact(const char *url);

#endif
