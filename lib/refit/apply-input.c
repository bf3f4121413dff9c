/* apply-input.c - applying whatever an input names (see apply-input.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/delta.h"
#include "core/file.h"
#include "core/packio.h"
#include "refit/apply-input.h"
#include "refit/apply-pack.h"
#include "refit/version.h"

int dcr_apply_input(struct dcr_receiver *rc, const char *input, int fd,
		    const struct dcr_apply_opts *o, struct dcr_apply_result *res,
		    struct dcr_err *e)
{
	struct dcr_apply_opts oo = o ? *o : (struct dcr_apply_opts){0};
	int named = input && strcmp(input, "-");
	if (named && !oo.have_version && !dcr_version_from_name(input, &oo.version))
		oo.have_version = 1;
	if (!oo.what)
		oo.what = named ? input : "standard input";
	struct dcr_pack_in *in = NULL;
	struct stat sb;
	int r, own = 0;
	if (named && !stat(input, &sb) && S_ISDIR(sb.st_mode)) {
		if ((r = dcr_pack_in_open_dir(input, &in, e)))
			return r;
		r = dcr_apply_pack(rc, in, &oo, res, e);
		dcr_pack_in_close(in);
		return r;
	}
	if (named) {
		fd = open(input, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return dcr_err_sys(e, errno, "cannot open '%s'", input);
		own = 1;
	}
	/* sniff: a delta starts with its magic, anything else must be a tar pack */
	uint8_t head[DCR_DELTA_SNIFF];
	size_t got;
	int delta = dcr_delta_sniff(fd, head, &got, oo.what, e);
	if (delta < 0) {
		r = delta;
		goto out;
	}
	if (got == 0) {
		r = dcr_err_set(e, DCR_EFORMAT, "%s is empty: no delta or pack to apply", oo.what);
		goto out;
	}
	if (delta) {
		/* read through a buffer: the apply reads the input to its end */
		struct dcr_fdbuf in;
		r = dcr_fdbuf_init(&in, fd, DCR_FDBUF_SIZE)
			    ? dcr_err_sys(e, ENOMEM, "apply")
			    : dcr_apply(rc, (struct dcr_source){dcr_source_fdbuf_read, &in}, head, got,
					&oo, res, e);
		dcr_fdbuf_release(&in);
	} else if (!(r = dcr_pack_in_open_tar(fd, head, got, &in, e))) {
		r = dcr_apply_pack(rc, in, &oo, res, e);
		dcr_pack_in_close(in);
	} else {
		char why[sizeof e->msg];
		memcpy(why, e->msg, sizeof why);
		r = dcr_err_set(e, DCR_EFORMAT, "%s is not a delta, and %s", oo.what, why);
	}
out:
	if (own)
		close(fd);
	return r;
}
