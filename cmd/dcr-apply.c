/* dcr-apply - apply a delta to a receiver checkpoint in place. */
#include "config.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcr.h"
#include "common.h"
#include "layout-cmd.h"

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
	"      --device D       scatter the changes on D: cpu (default) or cuda (the GPU\n"
	"                       kernels; an error where libdcr has no CUDA or there is\n"
	"                       no device, before anything is written)\n"
	"      --verify-key PUB refuse a pack whose manifest is not signed by PUB (a\n"
	"                       signify public key; repeatable: any of them; default\n"
	"                       $DCR_VERIFY_KEY, paths separated by ':'), or whose\n"
	"                       signed version is not above the committed one;\n"
	"                       checked before anything is written\n"
	"      --policy NAME    with a key: refuse a signed pack of another policy\n"
	"                       (default $DCR_POLICY, else the one the receiver's\n"
	"                       first signed pack named, kept in CKPT/.dcr/policy)\n"
	"      --recheck        hash every touched tensor again after the write (by\n"
	"                       default its new bytes are hashed once, before the\n"
	"                       commit; a recovery always hashes after the write)\n"
	"      --threads N      hash with N threads (default: one per core)\n"
	"      --progress       show progress on stderr\n"
	"      --no-progress    do not show progress\n"
	"  -q, --quiet          print nothing but errors\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 applied (or already at the target), 1 the receiver is not at\n"
	"the delta's base (nothing written), 128 any other error (a busy receiver\n"
	"too), 129 usage error.\n"
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
	cmd_sigbus_hint = "rerun dcr-apply once the cause is mended: it finishes an apply "
			  "whose journal was committed, and one that had not committed wrote nothing";
	static const char *const layout_opts[] = {"--layout", NULL};
	if (cmd_layout_wanted(argc, argv, layout_opts))
		return cmd_layout_apply(argc, argv);
	static const struct option longopts[] = {
		{"recover", no_argument, NULL, 'R'},
		{"version", required_argument, NULL, 'V'},
		{"device", required_argument, NULL, 'G'},
		CMD_TRUST_LONGOPT,
		CMD_POLICY_LONGOPT,
		{"recheck", no_argument, NULL, 'C'},
		{"threads", required_argument, NULL, 'N'},
		{"progress", no_argument, NULL, 'p'},
		{"no-progress", no_argument, NULL, 'n'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int recover_only = 0, have_version = 0, device = DCR_DEVICE_CPU, threads = 0, recheck = 0, c;
	uint64_t version = 0;
	while ((c = getopt_long(argc, argv, ":qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'R': recover_only = 1; break;
		case 'C': recheck = 1; break;
		case 'K': cmd_trust_key(optarg); break;
		case 'Y': cmd_trust_policy(usage, optarg); break;
		case 'V':
			version = cmd_parse_version(usage, "--version", optarg);
			have_version = 1;
			break;
		case 'G':
			if ((device = dcr_device_parse(optarg)) < 0)
				cmd_usage_error(usage, "--device wants cpu or cuda, not '%s'", optarg);
			break;
		case 'N': threads = (int)cmd_parse_u64(usage, "--threads", optarg, 1, 64); break;
		default: cmd_common_option(c, usage); break;
		}
	}
	if (argc - optind < 1 || argc - optind > 2)
		cmd_usage_error(usage, "need CKPT and at most one DELTA");
	const char *ckpt = argv[optind];
	const char *input = argc - optind == 2 ? argv[optind + 1] : "-";
	if (!recover_only)
		cmd_refuse_tty_path(input, "a delta");
	struct dcr_apply_opts o = {.progress = progress, .fault = &cmd_fault,
				   .have_version = have_version, .version = version,
				   .device = device, .recheck = recheck,
				   .trust = recover_only ? NULL : cmd_trust(0)};
	struct dcr_err e = {0};
	struct dcr_receiver *rc;
	int r = dcr_receiver_open(ckpt, 1, &rc, &e);
	if (r)
		cmd_die_err(&e, cmd_exit_code(r));
	rc->threads = threads;
	struct dcr_head head;
	if ((r = dcr_head_read(rc, &head, &e)))
		cmd_die_err(&e, cmd_exit_code(r));
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
	struct dcr_apply_result res;
	r = dcr_apply_input(rc, input, 0, &o, &res, &e);
	cmd_progress_end();
	if (r)
		cmd_die_err(&e, cmd_exit_code(r));
	if (!cmd_quiet) {
		char t[65];
		dcr_digest_hex(&res.target, t);
		if (res.recovered)
			fprintf(stderr, "dcr-apply: finished an interrupted apply first\n");
		if (res.already)
			fprintf(stderr, "dcr-apply: '%s' is already at the target %.12s\n", ckpt, t);
		else
			fprintf(stderr,
				"dcr-apply: applied %llu changes in %llu items, %llu tensors verified "
				"(%llu hashed from their items); state %.12s\n",
				(unsigned long long)res.changes, (unsigned long long)res.items,
				(unsigned long long)res.tensors_checked,
				(unsigned long long)res.tensors_prehashed, t);
	}
	dcr_receiver_close(rc);
	return cmd_finish(EXIT_OK);
}
