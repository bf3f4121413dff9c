/* ntab.h - a table of named entries, found by name (open addressing):
 * what a reader keeps per tensor while a stream of items goes by. An
 * entry is the caller's struct whose first member is its name (char *),
 * which the table never copies or frees. Memory: a pointer per slot, at
 * most four slots per entry. Internal to libdcr (not installed). */
#ifndef DCR_CORE_NTAB_H
#define DCR_CORE_NTAB_H

#include <stddef.h>

struct dcr_ntab {
	void **slot;
	size_t cap, n;
};

/* The entry named name, or NULL. */
void *dcr_ntab_get(const struct dcr_ntab *t, const char *name);
/* Add entry (a struct whose first member is its char *name; no entry of
 * that name in t yet): 0, or -ENOMEM. */
int dcr_ntab_put(struct dcr_ntab *t, void *entry);
/* Every entry given to fn (NULL: none), then the slots freed. */
void dcr_ntab_clear(struct dcr_ntab *t, void (*fn)(void *entry));

#endif
