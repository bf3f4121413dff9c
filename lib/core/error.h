/* error.h - how libdcr reports failure.
 *
 * The library never prints and never exits. Every fallible function returns
 * 0 (or a count) on success and a negative errno-style code on failure, after
 * filling the caller's struct dcr_err with a one-line message.
 */
#ifndef DCR_CORE_ERROR_H
#define DCR_CORE_ERROR_H

/* Library-specific codes, in addition to negative errno values. */
enum {
	DCR_EFORMAT = -10001,   /* malformed or hostile input */
	DCR_EBASE = -10002,     /* receiver is not at the delta's base */
	DCR_EDIGEST = -10003,   /* digest mismatch */
	DCR_ENOTFOUND = -10004, /* object or tensor does not exist */
	DCR_ECONFLICT = -10005, /* compare-and-set lost */
	DCR_EREMOTE = -10006,   /* remote server refused (4xx) */
	DCR_ELOCKED = -10007,   /* receiver busy */
	DCR_ETRUST = -10008,    /* not signed by a trusted key, or not newer */
};

struct dcr_err {
	int code;
	char msg[1024];
};

int dcr_err_set(struct dcr_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Like dcr_err_set, appending ": strerror(errnum)"; returns -errnum. */
int dcr_err_sys(struct dcr_err *e, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A format's version this dcr does not read: DCR_EFORMAT, saying "made by
 * a newer dcr" (and what to upgrade) when got is past the version this
 * dcr writes (have), so that an operator who upgraded the trainer but not
 * the receivers reads the way out, not a bare number. what names the
 * file, kind the format ("delta", "manifest"). */
int dcr_err_version(struct dcr_err *e, const char *what, const char *kind, unsigned got,
		    unsigned have);

#endif
