/* layout-cmd.c - the layout modes of dcr-diff (--layout, --merge) and
 * dcr-apply (--layout): see dcr-diff(1), dcr-apply(1) and dcr(7). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "layout-cmd.h"
#include "dcr.h"

int cmd_layout_wanted(int argc, char **argv, const char *const *opts)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		for (size_t k = 0; opts[k]; k++) {
			size_t n = strlen(opts[k]);
			if (!strncmp(argv[i], opts[k], n) && (!argv[i][n] || argv[i][n] == '='))
				return 1;
		}
	return 0;
}

/* -h or --help anywhere before "--", even where getopt would take it as the
 * argument of --layout ("dcr-diff --layout -h"). */
static int wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return 1;
	return 0;
}

static uint32_t parse_rank(const char *usage, const char *s)
{
	return (uint32_t)cmd_parse_u64(usage, "--rank", s, 0, UINT32_MAX - 1);
}

static const char diff_usage[] =
	"usage: dcr-diff --layout MAP --rank R [--base-id HEX] [options] BASE NEW\n"
	"   or: dcr-diff --merge [--target-digests FILE --base-id HEX] [options] DELTA...\n"
	"\n"
	"With --layout, BASE and NEW are training rank R's shards (safetensors in the\n"
	"layout MAP describes; MAP must list every rank): write a partial delta in\n"
	"canonical coordinates, each replicated element sent by its lowest holder,\n"
	"with the digest parts of those elements (dcr-pack --producer).\n"
	"With --merge, combine the ranks' partial deltas into one canonical delta,\n"
	"partial again unless the canonical target's digests make it a full delta.\n"
	"\n"
	"  -o, --output FILE        write the delta to FILE (atomically), not stdout\n"
	"      --layout MAP         the layout map (dcr-layout generate --all)\n"
	"      --rank R             the training rank BASE and NEW belong to\n"
	"      --file NAME          the canonical file named in TENSOR records\n"
	"                           (default model.safetensors)\n"
	"      --merge              merge partial deltas (files, '-' for stdin)\n"
	"      --target-digests F   'HEX<TAB>NAME' lines of the canonical target, as\n"
	"                           'dcr-verify --tensors NEW' prints them\n"
	"      --base-id HEX        the canonical base's state id (with --layout: named\n"
	"                           in the partial delta; with --merge: with\n"
	"                           --target-digests)\n"
	"      --chunk N            canonical elements an item may span (default 1048576)\n"
	"      --stats              print a summary to stderr\n"
	"  -q, --quiet              no summary\n"
	"  -h, --help               show this help\n"
	"\n"
	"Exit status: 0 done, 128 error, 129 usage error.\n";

int cmd_layout_diff(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"layout", required_argument, NULL, 'L'},
		{"rank", required_argument, NULL, 'r'},
		{"file", required_argument, NULL, 'F'},
		{"merge", no_argument, NULL, 'M'},
		{"target-digests", required_argument, NULL, 'D'},
		{"base-id", required_argument, NULL, 'B'},
		{"chunk", required_argument, NULL, 'C'},
		{"stats", no_argument, NULL, 'S'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *output = NULL, *map = NULL, *digests = NULL, *file = NULL;
	int merge = 0, have_rank = 0, have_base = 0, stats = 0, c;
	uint32_t rank = 0;
	uint64_t chunk = 0;
	dcr_digest base_id;
	if (wants_help(argc, argv)) {
		fputs(diff_usage, stdout);
		return cmd_finish(EXIT_OK);
	}
	while ((c = getopt_long(argc, argv, ":o:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': output = optarg; break;
		case 'L': map = optarg; break;
		case 'r': rank = parse_rank(diff_usage, optarg); have_rank = 1; break;
		case 'F': file = optarg; break;
		case 'M': merge = 1; break;
		case 'D': digests = optarg; break;
		case 'B':
			if (dcr_digest_parse_hex(optarg, &base_id))
				cmd_usage_error(diff_usage, "--base-id wants 64 hex digits, not '%s'", optarg);
			have_base = 1;
			break;
		case 'C': chunk = cmd_parse_u64(diff_usage, "--chunk", optarg, 1, DCR_ITEM_MAX_ELEMS); break;
		case 'S': stats = 1; break;
		case 'q': cmd_quiet = 1; break;
		default: cmd_common_option(c, diff_usage); break;
		}
	}
	if (merge && map)
		cmd_usage_error(diff_usage, "--merge and --layout do not go together");
	if (merge && (have_rank || file))
		cmd_usage_error(diff_usage, "--rank and --file go with --layout");
	if (!merge && digests)
		cmd_usage_error(diff_usage, "--target-digests goes with --merge");
	if (digests && !have_base)
		cmd_usage_error(diff_usage, "--target-digests needs --base-id (dcr-verify BASE)");
	if (!merge && !have_rank)
		cmd_usage_error(diff_usage, "--layout needs --rank");
	if (merge && argc - optind < 1)
		cmd_usage_error(diff_usage, "--merge needs at least one DELTA");
	if (!merge && argc - optind != 2)
		cmd_usage_error(diff_usage, "need BASE and NEW");

	struct dcr_err e = {0};
	struct dcr_atomic a;
	const char *what;
	int fd = cmd_output_begin(output, &a, &what);
	struct dcr_sink sink = {dcr_sink_fd_write, &fd};
	int r;
	if (merge) {
		struct dcr_merge_opts mo = {.inputs = (const char *const *)argv + optind,
					    .ninputs = (size_t)(argc - optind),
					    .target_digests = digests,
					    .base_id = have_base ? &base_id : NULL,
					    .chunk_elems = chunk, .what = what};
		struct dcr_merge_stats ms = {0};
		r = dcr_merge(&mo, sink, &ms, &e);
		if (!r && stats && !cmd_quiet) {
			char t[65];
			dcr_digest_hex(&ms.target, t);
			fprintf(stderr,
				"dcr-diff: merged %d deltas: %llu tensors, %llu changed values in %llu items, %llu duplicates; %llu bytes; %s\n",
				argc - optind, (unsigned long long)ms.tensors,
				(unsigned long long)ms.changed, (unsigned long long)ms.items,
				(unsigned long long)ms.duplicates, (unsigned long long)ms.bytes_out,
				ms.partial ? "partial (no target digests)" : t);
		}
	} else {
		struct dcr_layout *L = NULL;
		if (dcr_layout_load(map, &L, &e))
			cmd_die_err(&e, EXIT_FATAL);
		struct dcr_rankdiff_opts ro = {.map = L, .rank = rank, .base = argv[optind],
					       .target = argv[optind + 1], .chunk_elems = chunk,
					       .file = file, .what = what,
					       .base_id = have_base ? &base_id : NULL};
		struct dcr_rankdiff_stats rs = {0};
		r = dcr_rankdiff(&ro, sink, &rs, &e);
		dcr_layout_free(L);
		if (!r && stats && !cmd_quiet)
			fprintf(stderr,
				"dcr-diff: rank %u: %llu stored tensors (%llu replicas only, skipped), %llu bytes; %llu stored values changed (%llu padding, %llu replicas of lower ranks, %llu residual unchanged after conversion); %llu canonical changes in %llu items over %llu tensors, %llu digest parts; delta %llu bytes\n",
				(unsigned)rank, (unsigned long long)rs.stored_tensors,
				(unsigned long long)rs.skipped_tensors,
				(unsigned long long)rs.stored_bytes,
				(unsigned long long)rs.stored_changed,
				(unsigned long long)rs.padding_changed,
				(unsigned long long)rs.replica_changed,
				(unsigned long long)rs.residual_same, (unsigned long long)rs.changed,
				(unsigned long long)rs.items, (unsigned long long)rs.tensors,
				(unsigned long long)rs.parts, (unsigned long long)rs.bytes_out);
	}
	if ((r = cmd_output_end(&a, r, &e)))
		cmd_die_err(&e, EXIT_FATAL);
	return cmd_finish(EXIT_OK);
}

static const char apply_usage[] =
	"usage: dcr-apply --layout MAP --rank R [options] DIR [DELTA]\n"
	"   or: dcr-apply --layout MAP --replica [options] DIR [DELTA]\n"
	"\n"
	"Place a canonical delta (partial or full) from DELTA or standard input into\n"
	"DIR, the files of serving rank R of the layout MAP: XOR where the placement\n"
	"is pure re-indexing, overwrite where a residual transform converts the\n"
	"value. Crash-safe like dcr-apply; state in DIR/.dcr/. With --replica, DIR\n"
	"holds every rank of MAP as DIR/rank-R (as dcr-layout materialize writes\n"
	"them), and items coded against the receiver's bits (dcr-diff's default\n"
	"codecs) are decoded with the old bits read through the map; one rank alone\n"
	"takes only those whose range it holds entirely.\n"
	"\n"
	"      --layout MAP     the serving layout map (dcr-layout generate)\n"
	"      --rank R         the serving rank DIR holds\n"
	"      --replica        DIR/rank-0, DIR/rank-1, ... hold every rank of MAP\n"
	"  -q, --quiet          print nothing but errors\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 placed (or placed before), 1 the receiver holds another\n"
	"canonical state than the delta's base, 128 any other error (a busy\n"
	"receiver too), 129 usage error.\n";

/* --replica: every rank of L, DIR/rank-R. */
static int apply_replica(struct dcr_layout *L, const char *dir, const char *input, int fd)
{
	struct dcr_err e = {0};
	uint32_t n = 0;
	for (size_t t = 0; t < L->ntensors; t++)
		if (L->tensors[t].rank + 1 > n)
			n = L->tensors[t].rank + 1;
	struct dcr_receiver **rcs = calloc(n ? n : 1, sizeof(*rcs));
	struct dcr_place_result *res = calloc(n ? n : 1, sizeof(*res));
	if (!rcs || !res)
		cmd_die("out of memory");
	for (uint32_t k = 0; k < n; k++) {
		char *rd = dcr_asprintf("%s/rank-%u", dir, (unsigned)k);
		if (!rd)
			cmd_die("out of memory");
		int r = dcr_receiver_open(rd, 1, &rcs[k], &e);
		free(rd);
		if (r)
			cmd_die_err(&e, cmd_exit_code(r));
	}
	struct dcr_apply_opts o = {.what = strcmp(input, "-") ? input : "standard input",
				   .fault = &cmd_fault};
	int r = dcr_place_replica(rcs, n, L, (struct dcr_source){dcr_source_fd_read, &fd}, NULL, 0,
				  &o, res, &e);
	dcr_layout_free(L);
	if (r)
		cmd_die_err(&e, cmd_exit_code(r));
	for (uint32_t k = 0; k < n && !cmd_quiet; k++) {
		char t[65];
		dcr_digest_hex(&res[k].apply.target, t);
		if (res[k].already)
			fprintf(stderr, "dcr-apply: '%s/rank-%u' already holds this delta (state %.12s)\n",
				dir, (unsigned)k, t);
		else
			fprintf(stderr,
				"dcr-apply: rank %u: %llu canonical changes placed as %llu stored changes; state %.12s\n",
				(unsigned)k, (unsigned long long)res[k].canon_changes,
				(unsigned long long)res[k].stored_changes, t);
	}
	for (uint32_t k = 0; k < n; k++)
		dcr_receiver_close(rcs[k]);
	free(rcs);
	free(res);
	return cmd_finish(EXIT_OK);
}

int cmd_layout_apply(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"layout", required_argument, NULL, 'L'},
		{"rank", required_argument, NULL, 'r'},
		{"replica", no_argument, NULL, 'R'},
		{"quiet", no_argument, NULL, 'q'},
		{"no-progress", no_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *map = NULL;
	int have_rank = 0, replica = 0, c;
	uint32_t rank = 0;
	if (wants_help(argc, argv)) {
		fputs(apply_usage, stdout);
		return cmd_finish(EXIT_OK);
	}
	while ((c = getopt_long(argc, argv, ":qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'L': map = optarg; break;
		case 'r': rank = parse_rank(apply_usage, optarg); have_rank = 1; break;
		case 'R': replica = 1; break;
		default: cmd_common_option(c, apply_usage); break;
		}
	}
	if (!map || have_rank == replica)
		cmd_usage_error(apply_usage, "--layout needs --rank or --replica");
	if (argc - optind < 1 || argc - optind > 2)
		cmd_usage_error(apply_usage, "need DIR and at most one DELTA");
	const char *dir = argv[optind];
	const char *input = argc - optind == 2 ? argv[optind + 1] : "-";
	cmd_refuse_tty_path(input, "a delta");
	if (cmd_trust(0))
		cmd_die("a verify key is set (DCR_VERIFY_KEY), and --layout places a delta stream, which carries no signature");
	struct dcr_err e = {0};
	struct dcr_layout *L = NULL;
	if (dcr_layout_load(map, &L, &e))
		cmd_die_err(&e, EXIT_FATAL);
	int fd = 0;
	if (strcmp(input, "-") && (fd = open(input, O_RDONLY | O_CLOEXEC)) < 0)
		cmd_die("cannot open '%s': %s", input, strerror(errno));
	if (replica)
		return apply_replica(L, dir, input, fd);
	struct dcr_receiver *rc;
	int r = dcr_receiver_open(dir, 1, &rc, &e);
	if (r)
		cmd_die_err(&e, cmd_exit_code(r));
	struct dcr_apply_opts o = {.what = strcmp(input, "-") ? input : "standard input",
				   .fault = &cmd_fault};
	struct dcr_place_result res;
	r = dcr_place(rc, L, rank, (struct dcr_source){dcr_source_fd_read, &fd}, NULL, 0, &o,
			  &res, &e);
	dcr_layout_free(L);
	if (r)
		cmd_die_err(&e, cmd_exit_code(r));
	if (!cmd_quiet) {
		char t[65];
		dcr_digest_hex(&res.apply.target, t);
		if (res.apply.recovered)
			fprintf(stderr, "dcr-apply: finished an interrupted apply first\n");
		if (res.already)
			fprintf(stderr, "dcr-apply: '%s' already holds this delta (state %.12s)\n", dir, t);
		else
			fprintf(stderr,
				"dcr-apply: rank %u: %llu canonical changes placed as %llu stored changes; state %.12s\n",
				(unsigned)rank, (unsigned long long)res.canon_changes,
				(unsigned long long)res.stored_changes, t);
	}
	dcr_receiver_close(rc);
	return cmd_finish(EXIT_OK);
}
