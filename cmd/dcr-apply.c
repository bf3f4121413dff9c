/* dcr-apply - apply a delta to a receiver checkpoint in place. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "commit.h"
#include "common.h"
#include "layout-cmd.h"
#include "pack.h"
#include "receiver.h"

static const char usage[] =
	"usage: dcr-apply [options] CKPT [DELTA|PACK]\n"
	"\n"
	"Apply a delta stream or a pack (a pack directory, or a pack tar stream) from\n"
	"DELTA|PACK, or standard input ('-' also means standard input), to the\n"
	"receiver checkpoint directory CKPT in place. State is kept in CKPT/.dcr/.\n"
	"Rerunning after a crash finishes the interrupted apply.\n"
	"\n"
	"      --recover        only finish an interrupted apply, read no delta\n"
	"      --version V      the version the delta reaches, recorded for dcr-commit\n"
	"                       (default: from DELTA|PACK's name when it is vV, vV.tar,\n"
	"                       vV.delta or vV.dcrd)\n"
	"      --progress       show progress on stderr\n"
	"      --no-progress    do not show progress\n"
	"  -q, --quiet          print nothing but errors\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 applied (or already at the target), 1 the receiver is not at\n"
	"the delta's base (nothing written), 128 any other error.\n"
	"\n"
	"Layouts: dcr-apply --layout MAP --rank R DIR [DELTA] places a canonical\n"
	"delta into a serving rank's files; 'dcr-apply --layout -h' tells more.\n";

static void progress(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	cmd_progress_bytes("items", done << 20, total << 20);
}

int main(int argc, char **argv)
{
	cmd_init("dcr-apply", argc, argv);
	static const char *const layout_opts[] = {"--layout", NULL};
	if (cmd_layout_wanted(argc, argv, layout_opts))
		return cmd_layout_apply(argc, argv);
	static const struct option longopts[] = {
		{"recover", no_argument, NULL, 'R'},
		{"version", required_argument, NULL, 'V'},
		{"progress", no_argument, NULL, 'p'},
		{"no-progress", no_argument, NULL, 'n'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int recover_only = 0, have_version = 0, c;
	uint64_t version = 0;
	while ((c = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'R': recover_only = 1; break;
		case 'V': {
			char *end;
			const char *v = optarg[0] == 'v' ? optarg + 1 : optarg;
			errno = 0;
			version = strtoull(v, &end, 10);
			if (errno || *end || !*v || *v == '-')
				cmd_usage_error(usage, "--version wants a number, not '%s'", optarg);
			have_version = 1;
			break;
		}
		default: cmd_common_option(c, usage); break;
		}
	}
	if (argc - optind < 1 || argc - optind > 2)
		cmd_usage_error(usage, "need CKPT and at most one DELTA");
	const char *ckpt = argv[optind];
	const char *input = argc - optind == 2 ? argv[optind + 1] : "-";
	if (!have_version && strcmp(input, "-")) {
		/* a pack or delta named after its version: .../v42, v42.tar, v42.delta */
		const char *b = strrchr(input, '/');
		size_t n = strlen(input);
		while (n > 1 && input[n - 1] == '/')
			n--;
		b = input;
		for (size_t i = 0; i + 1 < n; i++)
			if (input[i] == '/')
				b = input + i + 1;
		size_t bl = (size_t)(input + n - b);
		static const char *const ext[] = {"", ".tar", ".delta", ".dcrd"};
		for (size_t k = 0; k < 4 && !have_version; k++) {
			size_t el = strlen(ext[k]);
			if (bl > el && !strncmp(b + bl - el, ext[k], el) &&
			    !dcr_version_parse(b, bl - el, &version))
				have_version = 1;
		}
	}

	struct dcr_apply_opts o = {.progress = progress, .what = "delta"};
	const char *fault = getenv("DCR_FAULT_AT");
	if (fault)
		o.fault_at = atoi(fault);
	struct dcr_err e = {0};
	struct dcr_receiver *rc;
	int r = dcr_receiver_open(ckpt, 1, &rc, &e);
	if (r)
		cmd_die_err(&e, EXIT_FATAL);
	struct dcr_head head;
	if (dcr_head_read(rc, &head, &e))
		cmd_die_err(&e, EXIT_FATAL);
	if (head.have)
		o.head = &head.state;
	if (recover_only) {
		r = dcr_apply_recover(rc, &o, &e);
		if (r < 0)
			cmd_die_err(&e, EXIT_FATAL);
		if (!cmd_quiet)
			fprintf(stderr, "dcr-apply: %s\n",
				r ? "finished an interrupted apply" : "nothing to recover");
		dcr_receiver_close(rc);
		return cmd_finish(EXIT_OK);
	}
	int fd = 0;
	struct dcr_apply_result res;
	struct dcr_pack_in *in = NULL;
	struct stat sb;
	o.what = strcmp(input, "-") ? input : "standard input";
	if (strcmp(input, "-") && !stat(input, &sb) && S_ISDIR(sb.st_mode)) {
		if (dcr_pack_in_open_dir(input, &in, &e))
			cmd_die_err(&e, EXIT_FATAL);
		r = dcr_apply_pack(rc, in, &o, &res, &e);
	} else {
		if (strcmp(input, "-")) {
			fd = open(input, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				cmd_die("cannot open '%s': %s", input, strerror(errno));
		}
		/* sniff: a delta starts with its magic, anything else must be a tar pack */
		uint8_t head[8];
		size_t got = 0;
		while (got < sizeof(head)) {
			ssize_t n = read(fd, head + got, sizeof(head) - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				cmd_die("cannot read %s: %s", o.what, strerror(errno));
			if (n == 0)
				break;
			got += (size_t)n;
		}
		if (got == 0)
			cmd_die("%s is empty: no delta or pack to apply", o.what);
		if (got == sizeof(head) && !memcmp(head, "\x89" "DCRD", 5)) {
			r = dcr_apply(rc, (struct dcr_source){dcr_source_fd_read, &fd}, head, got, &o,
				      &res, &e);
		} else {
			if (dcr_pack_in_open_tar(fd, head, got, &in, &e))
				cmd_die_err(&e, EXIT_FATAL);
			r = dcr_apply_pack(rc, in, &o, &res, &e);
		}
	}
	dcr_pack_in_close(in);
	cmd_progress_end();
	if (r)
		cmd_die_err(&e, cmd_exit_code(r));
	/* record what was reached, for dcr-commit (the fault hook's steps go on
	 * counting after the apply's: an apply with K steps, then these) */
	struct dcr_applied ap = {.have = 1, .base = res.base, .target = res.target,
				 .have_version = have_version, .version = version};
	memcpy(ap.attempt, res.attempt, 16);
	if (res.already) {
		struct dcr_applied old;
		/* keep the record of the apply that got here, when it is this one */
		if (!dcr_applied_read(rc, &old, &e) && old.have &&
		    !memcmp(old.target.b, res.target.b, 32)) {
			ap.base = old.base;
			if (!have_version && old.have_version) {
				ap.have_version = 1;
				ap.version = old.version;
			}
		}
	}
	if (dcr_applied_write(rc, &ap, 0, &e))
		cmd_die_err(&e, EXIT_FATAL);
	if (!cmd_quiet) {
		char t[65];
		dcr_digest_hex(&res.target, t);
		if (res.recovered)
			fprintf(stderr, "dcr-apply: finished an interrupted apply first\n");
		if (res.already)
			fprintf(stderr, "dcr-apply: '%s' is already at the target %.12s\n", ckpt, t);
		else
			fprintf(stderr,
				"dcr-apply: applied %llu changes in %llu items, %llu tensors verified; state %.12s\n",
				(unsigned long long)res.changes, (unsigned long long)res.items,
				(unsigned long long)res.tensors_checked, t);
	}
	dcr_receiver_close(rc);
	return cmd_finish(EXIT_OK);
}
