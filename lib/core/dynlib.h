/* dynlib.h - a shared library loaded at its first use, with dlopen, not at
 * every process's start: libcurl (the HTTP and S3 stores) and
 * libmicrohttpd (the relay) pull in some thirty more libraries (TLS,
 * Kerberos, LDAP, IDN, ...), which every dcr command mapped and relocated
 * before main, used or not: 41 -> 23 ms of CPU a start here. Internal to
 * libdcr. */
#ifndef DCR_CORE_DYNLIB_H
#define DCR_CORE_DYNLIB_H

#include <stddef.h>

#include "core/error.h"

/* a function of the library: its name, and where its address goes (the
 * address of a function pointer, as void *) */
struct dcr_dynsym {
	const char *name;
	void *fn;
};

/* Load the first of sonames (NULL-terminated) that loads and resolve every
 * symbol of syms[0..n); `what` names the feature in messages ("for the
 * HTTP and S3 stores"). The library stays loaded. Not thread-safe: callers run
 * it once (pthread_once). */
int dcr_dynlib_load(const char *what, const char *const *sonames, const struct dcr_dynsym *syms,
		    size_t n, struct dcr_err *e);

#endif
