/* pset.c - the payloads of a pack that have arrived (see pset.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/pset.h"

/* The first entry whose index is not below idx. */
static size_t lower(const struct pset *s, uint32_t idx)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->v[mid].idx < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const struct pset_ent *pset_find(const struct pset *s, uint32_t idx)
{
	size_t i = lower(s, idx);
	return i < s->n && s->v[i].idx == idx ? &s->v[i] : NULL;
}

int pset_add(struct pset *s, uint32_t idx, uint64_t size, const dcr_digest *d)
{
	/* payloads come in order: the common case appends */
	size_t i = s->n && s->v[s->n - 1].idx < idx ? s->n : lower(s, idx);
	if (i < s->n && s->v[i].idx == idx)
		return s->v[i].size == size && !memcmp(s->v[i].digest.b, d->b, 32) ? 0 : -EEXIST;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		struct pset_ent *v = cap < SIZE_MAX / sizeof(*v) ? realloc(s->v, cap * sizeof(*v))
								  : NULL;
		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	memmove(s->v + i + 1, s->v + i, (s->n - i) * sizeof(*s->v));
	s->v[i] = (struct pset_ent){.idx = idx, .size = size, .digest = *d};
	s->n++;
	return 1;
}

int pset_is_range(const struct pset *s, uint32_t n)
{
	/* sorted and distinct: n entries below n are exactly 0..n-1 */
	return s->n == n && (!n || s->v[n - 1].idx == n - 1);
}

void pset_free(struct pset *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}
