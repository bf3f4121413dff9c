/* fault.c - fault points for the crash suites (see fault.h). */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>

#include "core/fault.h"

void dcr_fault_from_env(struct dcr_fault *f)
{
	const char *s = getenv("DCR_FAULT_AT");
	char *end;
	f->at = 0;
	f->n = 0;
	if (!s || !*s || *s == '-')
		return;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (!errno && !*end)
		f->at = v;
}

void dcr_fault_point(struct dcr_fault *f)
{
	if (f && f->at && ++f->n == f->at)
		raise(SIGKILL);
}
