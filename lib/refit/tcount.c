/* tcount.c - elements each tensor's items change (see tcount.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "refit/tcount.h"

struct tc {
	char *name;
	uint64_t units, changed; /* the least size declared; the changes */
};

static void tc_free(void *v)
{
	free(((struct tc *)v)->name);
	free(v);
}

int ap_tcount_item(struct ap_tcount *c, const struct dcr_delta_tensor *dt,
		   const struct dcr_item *it, const char *what, struct dcr_err *e)
{
	const char *name = dt->name;
	uint64_t units = dcr_delta_tensor_units(dt);
	uint64_t n = (it->flags & DCR_ITEM_DENSE) ? it->len : it->n;
	struct tc *t = dcr_ntab_get(&c->tab, name);
	if (!t && c->tab.n >= DCR_DELTA_TENSORS_MAX)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: the pack's items name more than %u tensors (a pack names at most that many); nothing written",
				   what, DCR_DELTA_TENSORS_MAX);
	if (!t && dcr_delta_names_take(&c->name_bytes, strlen(name) + 1))
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: the names of the tensors the pack's items change take more than %llu MiB (a pack's take at most that); nothing written",
				   what, (unsigned long long)(DCR_DELTA_NAMES_BYTES >> 20));
	if (!t) {
		if (!(t = dcr_calloc(1, sizeof(*t))) || !(t->name = dcr_strdup(name)) ||
		    dcr_ntab_put(&c->tab, t)) {
			if (t)
				free(t->name);
			free(t);
			return dcr_err_sys(e, ENOMEM, "%s", what);
		}
		t->units = units;
	}
	if (units < t->units)
		t->units = units;
	if (n > t->units || t->changed > t->units - n)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: the pack's items change more elements of '%s' than the %llu it has (an element changes at most once in a step); nothing written",
				   what, name, (unsigned long long)t->units);
	t->changed += n;
	return 0;
}

void ap_tcount_free(struct ap_tcount *c)
{
	dcr_ntab_clear(&c->tab, tc_free);
}
