/* ntab.c - a table of named entries (see ntab.h). */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/ntab.h"
#include "core/util.h"

static const char *name_of(const void *entry)
{
	return *(char *const *)entry;
}

/* FNV-1a */
static size_t name_hash(const char *s)
{
	uint64_t x = 1469598103934665603ull;
	for (; *s; s++)
		x = (x ^ (uint8_t)*s) * 1099511628211ull;
	return (size_t)x;
}

/* The slot of name: where its entry is, or the empty one it would take
 * (t->cap a power of two, never full). */
static void **slot_of(const struct dcr_ntab *t, const char *name)
{
	for (size_t i = name_hash(name) & (t->cap - 1);; i = (i + 1) & (t->cap - 1))
		if (!t->slot[i] || !strcmp(name_of(t->slot[i]), name))
			return &t->slot[i];
}

void *dcr_ntab_get(const struct dcr_ntab *t, const char *name)
{
	return t->cap ? *slot_of(t, name) : NULL;
}

int dcr_ntab_put(struct dcr_ntab *t, void *entry)
{
	if ((t->n + 1) * 2 > t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 64;
		struct dcr_ntab nt = {dcr_calloc(cap, sizeof(void *)), cap, t->n};
		if (!nt.slot)
			return -ENOMEM;
		for (size_t i = 0; i < t->cap; i++)
			if (t->slot[i])
				*slot_of(&nt, name_of(t->slot[i])) = t->slot[i];
		free(t->slot);
		*t = nt;
	}
	*slot_of(t, name_of(entry)) = entry;
	t->n++;
	return 0;
}

void dcr_ntab_clear(struct dcr_ntab *t, void (*fn)(void *entry))
{
	for (size_t i = 0; fn && i < t->cap; i++)
		if (t->slot[i])
			fn(t->slot[i]);
	free(t->slot);
	*t = (struct dcr_ntab){0};
}
