/* dynlib.c - shared libraries loaded at their first use (see dynlib.h). */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include "core/dynlib.h"

int dcr_dynlib_load(const char *what, const char *const *sonames, const struct dcr_dynsym *syms,
		    size_t n, struct dcr_err *e)
{
	void *h = NULL;
	const char *why = "no library name given", *got = sonames[0];
	for (size_t i = 0; sonames[i] && !h; i++) {
		/* RTLD_LOCAL: its symbols stay out of the process's namespace */
		if (!(h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL)))
			why = dlerror();
		else
			got = sonames[i];
	}
	if (!h)
		return dcr_err_set(e, -ELIBACC, "cannot load %s %s: %s", sonames[0], what,
				   why ? why : "?");
	for (size_t i = 0; i < n; i++) {
		dlerror();
		void *p = dlsym(h, syms[i].name);
		if (!p) {
			const char *err = dlerror();
			/* the handle stays open: a symbol found before may be in use */
			return dcr_err_set(e, -ELIBACC, "%s lacks %s, needed %s: %s", got,
					   syms[i].name, what, err ? err : "not found");
		}
		memcpy(syms[i].fn, &p, sizeof(p));
	}
	return 0;
}
