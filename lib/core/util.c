/* util.c - memory helpers and the machine's size. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"

void *dcr_calloc(size_t n, size_t size) { return calloc(n ? n : 1, size ? size : 1); }

char *dcr_strdup(const char *s) { return s ? strdup(s) : NULL; }

char *dcr_asprintf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

int dcr_ncpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}
