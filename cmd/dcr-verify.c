/* dcr-verify - print a checkpoint's state id, or prove it equals another. */
#include "config.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dcr.h"
#include "common.h"

static const char usage[] =
	"usage: dcr-verify [options] CKPT\n"
	"       dcr-verify [options] CKPT --against DENSE\n"
	"\n"
	"Without --against, print CKPT's state id (and with --tensors, every tensor's\n"
	"digest). With --against, compare CKPT with the checkpoint DENSE tensor by\n"
	"tensor on stored bits and report every tensor that differs.\n"
	"\n"
	"      --against DENSE  the checkpoint CKPT must equal\n"
	"      --tensor NAME    check only this tensor\n"
	"      --tensors        list per-tensor digests (without --against)\n"
	"      --threads N      hash with N threads (default: one per core)\n"
	"      --porcelain      one stable, tab-separated line per tensor\n"
	"  -z                   end porcelain lines with NUL\n"
	"      --progress       show progress on stderr (default: at a terminal, after 1 s)\n"
	"      --no-progress    do not show progress\n"
	"  -q, --quiet          print nothing; only the exit status tells\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 identical, 1 differences found, 128 error, 129 usage error.\n";

static const char *vname[] = {"ok", "differ", "layout", "missing", "extra"};

struct out {
	int porcelain, quiet;
	char eol;
	const struct dcr_ckpt *want; /* for progress: the bytes compared */
	uint64_t done, total;
};

static void report(void *ctx, const struct dcr_verify_item *it)
{
	struct out *o = ctx;
	const struct dcr_ckpt_tensor *w = dcr_ckpt_find(o->want, it->name);
	if (w && it->v != DCR_V_MISSING) {
		o->done += dcr_tensor_bytes(w->info);
		cmd_progress_bytes("compared", o->done, o->total);
	}
	if (o->quiet || (!o->porcelain && it->v == DCR_V_OK))
		return;
	cmd_progress_clear();
	/* a name from the checkpoint, quoted but with -z */
	const char *name = o->eol ? cmd_quote(it->name) : it->name;
	if (o->porcelain) {
		printf("%s\t%s", vname[it->v], name);
		if (it->v == DCR_V_DIFFER)
			printf("\t%llu\t%llu\t0x%llx\t0x%llx", (unsigned long long)it->ndiff,
			       (unsigned long long)it->first, (unsigned long long)it->have,
			       (unsigned long long)it->want);
		putchar(o->eol);
		return;
	}
	switch (it->v) {
	case DCR_V_OK: break;
	case DCR_V_DIFFER:
		printf("differ: '%s': %llu elements differ, first at element %llu (have 0x%llx, want 0x%llx)\n",
		       name, (unsigned long long)it->ndiff, (unsigned long long)it->first,
		       (unsigned long long)it->have, (unsigned long long)it->want);
		break;
	case DCR_V_LAYOUT: printf("layout: '%s': dtype or shape differs\n", name); break;
	case DCR_V_MISSING: printf("missing: '%s'\n", name); break;
	case DCR_V_EXTRA: printf("extra: '%s' is not in the reference\n", name); break;
	}
}

/* Hash one tensor (one) or every one into dg; with progress on, in
 * batches of at least 1 GiB (and 1% of the checkpoint), each on every
 * thread, the bytes done shown after each. */
static void hash_tensors(const struct dcr_ckpt *c, const struct dcr_ckpt_tensor *one,
			 int threads, dcr_digest *dg)
{
	uint8_t *sel = NULL;
	if (one) {
		if (!(sel = dcr_calloc(c->ntensors + 1, 1)))
			cmd_die("out of memory");
		sel[one - c->tensors] = 1;
	}
	int r = dcr_ckpt_digests_progress(c, dg, sel, threads,
					  cmd_progress_on ? cmd_progress_bytes : NULL, "hashed");
	if (r)
		cmd_die("cannot hash '%s': %s", c->path, strerror(-r));
	free(sel);
	cmd_progress_end();
}

int main(int argc, char **argv)
{
	cmd_init("dcr-verify", argc, argv);
	static const struct option longopts[] = {
		{"against", required_argument, NULL, 'a'},
		{"tensor", required_argument, NULL, 't'},
		{"tensors", no_argument, NULL, 'T'},
		{"threads", required_argument, NULL, 'N'},
		{"porcelain", no_argument, NULL, 'P'},
		{"progress", no_argument, NULL, 'p'},
		{"no-progress", no_argument, NULL, 'n'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *against = NULL, *only = NULL;
	int tensors = 0, threads = 0, c;
	struct out o = {.eol = '\n'};
	while ((c = getopt_long(argc, argv, ":zqh", longopts, NULL)) != -1) {
		switch (c) {
		case 'a': against = optarg; break;
		case 't': only = optarg; break;
		case 'T': tensors = 1; break;
		case 'N': threads = (int)cmd_parse_u64(usage, "--threads", optarg, 1, 64); break;
		case 'P': o.porcelain = 1; break;
		case 'z': o.eol = '\0'; break;
		case 'q': o.quiet = 1; cmd_common_option(c, usage); break;
		default: cmd_common_option(c, usage); break;
		}
	}
	if (argc - optind != 1)
		cmd_usage_error(usage, "need exactly one CKPT");
	struct dcr_err e = {0};
	struct dcr_ckpt *have = NULL, *want = NULL;
	/* a receiver is read under its shared lock: no apply runs meanwhile,
	 * and one that was cut short must be finished first; either way the
	 * state printed is one the receiver was really in */
	struct stat sb;
	struct dcr_receiver *rc = NULL;
	if (!stat(argv[optind], &sb) && S_ISDIR(sb.st_mode)) {
		struct dcr_commit_status cs;
		int r = dcr_receiver_open(argv[optind], DCR_RECEIVER_SHARED, &rc, &e);
		if (r)
			cmd_die_err(&e, cmd_exit_code(r));
		if (rc->lock_fd >= 0 && dcr_commit_status(rc, &cs, &e))
			cmd_die_err(&e, EXIT_FATAL);
		if (rc->lock_fd >= 0 && cs.journal)
			cmd_die("receiver '%s' is midway through an interrupted apply: run 'dcr-apply --recover %s' first",
				argv[optind], argv[optind]);
	}
	if (dcr_ckpt_open(argv[optind], &have, &e))
		cmd_die_err(&e, EXIT_FATAL);
	if (!against) {
		dcr_digest id, *dg = dcr_calloc(have->ntensors + 1, sizeof(dcr_digest));
		if (!dg)
			cmd_die("out of memory");
		const struct dcr_ckpt_tensor *one = only ? dcr_ckpt_find(have, only) : NULL;
		if (only && !one)
			cmd_die("no tensor '%s' in '%s'", only, argv[optind]);
		hash_tensors(have, one, threads, dg);
		if (dcr_ckpt_unchanged(have, &e))
			cmd_die_err(&e, EXIT_FATAL);
		char hex[65];
		if (tensors || only) {
			for (size_t i = 0; i < have->ntensors; i++) {
				if (one && &have->tensors[i] != one)
					continue;
				dcr_digest_hex(&dg[i], hex);
				if (!o.quiet)
					printf("%s\t%s%c", hex,
					       o.eol ? cmd_quote(have->tensors[i].info->name)
						     : have->tensors[i].info->name,
					       o.eol);
			}
		} else if (!o.quiet) {
			dcr_ckpt_state_from(have, dg, &id);
			dcr_digest_hex(&id, hex);
			printf("%s%c", hex, o.eol);
		}
		free(dg);
		dcr_ckpt_close(have);
		dcr_receiver_close(rc);
		return cmd_finish(EXIT_OK);
	}
	if (dcr_ckpt_open(against, &want, &e))
		cmd_die_err(&e, EXIT_FATAL);
	if (only && !dcr_ckpt_find(have, only) && !dcr_ckpt_find(want, only))
		cmd_die("no tensor '%s' in '%s' or '%s'", only, argv[optind], against);
	o.want = want;
	for (size_t i = 0; i < want->ntensors; i++)
		if (!only || !strcmp(only, want->tensors[i].info->name))
			o.total += dcr_tensor_bytes(want->tensors[i].info);
	cmd_progress_bytes("compared", 0, o.total);
	int bad = dcr_verify_against(have, want, only, report, &o, &e);
	cmd_progress_end();
	if (bad < 0)
		cmd_die_err(&e, EXIT_FATAL);
	if (!o.quiet && !o.porcelain)
	{
		if (bad)
			printf("%d tensor(s) differ\n", bad);
		else
			printf("identical: %zu tensors\n", only ? (size_t)1 : want->ntensors);
	}
	dcr_ckpt_close(have);
	dcr_ckpt_close(want);
	dcr_receiver_close(rc);
	return cmd_finish(bad ? EXIT_NEGATIVE : EXIT_OK);
}
