/* util.h - memory helpers, the machine's size, a clock, numbered names. */
#ifndef DCR_CORE_UTIL_H
#define DCR_CORE_UTIL_H

#include <stddef.h>
#include <stdint.h>

int dcr_ncpu(void); /* online CPUs, 1..64 */

/* Seconds on the monotonic clock (for waits and deadlines). */
double dcr_now_s(void);

/* Memory: abort-free; callers handle NULL. */
void *dcr_calloc(size_t n, size_t size);
char *dcr_strdup(const char *s);
char *dcr_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A numbered file name PREFIX NNNNNN EXT (6 to 10 decimal digits, the
 * number at most max): 1 and the number in *v, else 0. */
int dcr_numbered_name_parse(const char *name, const char *prefix, const char *ext, uint64_t max,
			    uint64_t *v);

#endif
