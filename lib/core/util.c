/* util.c - memory helpers, the machine's size, numbered names. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
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

double dcr_now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int dcr_ncpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

int dcr_numbered_name_parse(const char *name, const char *prefix, const char *ext, uint64_t max,
			    uint64_t *v)
{
	size_t pl = strlen(prefix);
	if (strncmp(name, prefix, pl))
		return 0;
	const char *p = name + pl;
	uint64_t n = 0;
	size_t digits = 0;
	while (*p >= '0' && *p <= '9' && digits < 10) {
		n = n * 10 + (uint64_t)(*p++ - '0');
		digits++;
	}
	if (digits < 6 || strcmp(p, ext) || n > max)
		return 0;
	*v = n;
	return 1;
}
