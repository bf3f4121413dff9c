/* util.h - memory helpers and the machine's size. */
#ifndef DCR_CORE_UTIL_H
#define DCR_CORE_UTIL_H

#include <stddef.h>

int dcr_ncpu(void); /* online CPUs, 1..64 */

/* Memory: abort-free; callers handle NULL. */
void *dcr_calloc(size_t n, size_t size);
char *dcr_strdup(const char *s);
char *dcr_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
