/* error.c - filling a struct dcr_err. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

int dcr_err_set(struct dcr_err *e, int code, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
		e->code = code;
	}
	return code;
}

int dcr_err_version(struct dcr_err *e, const char *what, const char *kind, unsigned got,
		    unsigned have)
{
	if (got > have)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s is a version %u %s, made by a newer dcr (this one reads version %u): upgrade dcr here",
				   what, got, kind, have);
	return dcr_err_set(e, DCR_EFORMAT, "%s has unsupported %s version %u (this dcr reads version %u)",
			   what, kind, got, have);
}

int dcr_err_sys(struct dcr_err *e, int errnum, const char *fmt, ...)
{
	if (errnum < 0)
		errnum = -errnum;
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < sizeof(e->msg))
			snprintf(e->msg + n, sizeof(e->msg) - n, ": %s",
				 strerror(errnum));
		e->code = -errnum;
	}
	return -errnum;
}
