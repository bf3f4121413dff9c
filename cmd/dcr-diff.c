/* dcr-diff - compare two checkpoints on stored bits, write a delta. */
#include "config.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "layout-cmd.h"
#include "dcr.h"

static const char usage[] =
	"usage: dcr-diff [options] BASE NEW\n"
	"       dcr-diff [options] --dense NEW\n"
	"\n"
	"Compare two checkpoints (directories of .safetensors files, or single files)\n"
	"on stored bits and write a delta stream that turns BASE into NEW.\n"
	"\n"
	"  -o, --output FILE    write the delta to FILE (atomically) instead of stdout\n"
	"      --base-id HEX    trust HEX as BASE's state id instead of hashing BASE\n"
	"      --overwrite      only OVERWRITE items (a retry of a failed attempt)\n"
	"      --dense          a dense copy of NEW: every tensor whole, fits a receiver\n"
	"                       in any state (catch-up for one too far behind)\n"
	"      --also-base CKPT with --overwrite: the delta also applies to a receiver\n"
	"                       holding CKPT (an earlier attempt's target); repeatable\n"
	"      --chunk N        elements per item (default 1048576)\n"
	"      --threads N      compare with N threads (default: one per core)\n"
	"      --device D       compare on D: cpu (default) or cuda (the GPU kernels;\n"
	"                       an error where libdcr has no CUDA or there is no device)\n"
	"      --codec C        item codec: auto (default: classed or delta where they\n"
	"                       pay), plain (xor-zstd: decodable without the\n"
	"                       receiver's bits), delta or classed\n"
	"      --no-cache       do not leave NEW's digests in NEW/.dcr/state\n"
	"                       (the next diff, whose base is NEW, then need not hash it)\n"
	"      --stats          print a summary to stderr\n"
	"      --porcelain      with --stats, print it as key=value lines on stderr\n"
	"      --progress       show progress on stderr\n"
	"      --no-progress    do not show progress\n"
	"  -q, --quiet          no progress, no summary\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 done, 128 error, 129 usage error.\n"
	"\n"
	"Layouts: dcr-diff --layout MAP --rank R BASE NEW (a training rank's shards),\n"
	"dcr-diff --merge DELTA... (the ranks' deltas); 'dcr-diff --layout -h' tells more.\n";

/* --stats: the summary on stderr, as key=value lines with --porcelain. */
static void print_stats(const struct dcr_diff_stats *st, int porcelain)
{
	char b[65], t[65];
	dcr_digest_hex(&st->base, b);
	dcr_digest_hex(&st->target, t);
	double share = st->dense_bytes ? 100.0 * (double)st->bytes_out / (double)st->dense_bytes : 0;
	if (porcelain)
		fprintf(stderr,
			"base=%s\ntarget=%s\ntensors=%llu\nitems=%llu\nchanged=%llu\ndelta_bytes=%llu\ndense_bytes=%llu\n",
			b, t, (unsigned long long)st->tensors, (unsigned long long)st->items,
			(unsigned long long)st->changed, (unsigned long long)st->bytes_out,
			(unsigned long long)st->dense_bytes);
	else
		fprintf(stderr,
			"dcr-diff: %llu tensors, %llu changed values in %llu items; delta %llu bytes = %.3f%% of %llu dense bytes\n"
			"dcr-diff: base %s\ndcr-diff: target %s\n",
			(unsigned long long)st->tensors, (unsigned long long)st->changed,
			(unsigned long long)st->items, (unsigned long long)st->bytes_out, share,
			(unsigned long long)st->dense_bytes, b, t);
}

int main(int argc, char **argv)
{
	cmd_init("dcr-diff", argc, argv);
	static const char *const layout_opts[] = {"--layout", "--merge", NULL};
	if (cmd_layout_wanted(argc, argv, layout_opts))
		return cmd_layout_diff(argc, argv);
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"base-id", required_argument, NULL, 'B'},
		{"overwrite", no_argument, NULL, 'W'},
		{"also-base", required_argument, NULL, 'A'},
		{"dense", no_argument, NULL, 'D'},
		{"chunk", required_argument, NULL, 'C'},
		{"stats", no_argument, NULL, 'S'},
		{"no-cache", no_argument, NULL, 'N'},
		{"codec", required_argument, NULL, 'K'},
		{"threads", required_argument, NULL, 'T'},
		{"device", required_argument, NULL, 'G'},
		{"porcelain", no_argument, NULL, 'P'},
		{"progress", no_argument, NULL, 'p'},
		{"no-progress", no_argument, NULL, 'n'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *output = NULL;
	struct dcr_diff_opts o = {0};
	dcr_digest base_id;
	int stats = 0, porcelain = 0, overwrite = 0, c;
	const char **also = dcr_calloc((size_t)argc + 1, sizeof(char *));
	size_t nalso = 0;
	while ((c = getopt_long(argc, argv, ":o:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': output = optarg; break;
		case 'B':
			if (dcr_digest_parse_hex(optarg, &base_id))
				cmd_usage_error(usage, "--base-id wants 64 hex digits, not '%s'", optarg);
			o.base_id = &base_id;
			break;
		case 'C': o.chunk_elems = cmd_parse_u64(usage, "--chunk", optarg, 1, DCR_ITEM_MAX_ELEMS); break;
		case 'W': overwrite = 1; break;
		case 'A': also[nalso++] = optarg; break;
		case 'D': o.dense = 1; break;
		case 'S': stats = 1; break;
		case 'N': o.no_cache = 1; break;
		case 'K':
			if (!strcmp(optarg, "auto"))
				o.codec = DCR_CODEC_AUTO;
			else if (!strcmp(optarg, "plain") || !strcmp(optarg, "xor-zstd"))
				o.codec = DCR_CODEC_PLAIN;
			else if (!strcmp(optarg, "delta"))
				o.codec = DCR_CODEC_DELTA;
			else if (!strcmp(optarg, "classed"))
				o.codec = DCR_CODEC_CLASSED;
			else
				cmd_usage_error(usage, "--codec wants auto, plain, delta or classed, not '%s'",
						optarg);
			break;
		case 'T': o.threads = (int)cmd_parse_u64(usage, "--threads", optarg, 1, 64); break;
		case 'P': porcelain = 1; break;
		case 'G':
			if ((o.device = dcr_device_parse(optarg)) < 0)
				cmd_usage_error(usage, "--device wants cpu or cuda, not '%s'", optarg);
			break;
		default: cmd_common_option(c, usage); break;
		}
	}
	if (o.dense) {
		if (argc - optind != 1)
			cmd_usage_error(usage, "--dense takes only NEW");
		if (o.base_id || nalso || overwrite)
			cmd_usage_error(usage, "--dense goes with neither --base-id, --overwrite nor --also-base");
		o.base = NULL;
		o.target = argv[optind];
	} else {
		if (argc - optind != 2)
			cmd_usage_error(usage, "need BASE and NEW");
		o.base = argv[optind];
		o.target = argv[optind + 1];
	}
	o.progress = cmd_progress_bytes;
	o.progress_ctx = "diff";

	struct dcr_err e = {0};
	struct dcr_atomic a;
	int fd = cmd_output_begin(output, &a, &o.what);
	if (nalso && !overwrite)
		cmd_usage_error(usage, "--also-base needs --overwrite");
	if (overwrite && o.device != DCR_DEVICE_CPU)
		cmd_usage_error(usage, "--overwrite goes with no --device but cpu");
	struct dcr_diff_stats st = {0};
	int r;
	if (overwrite) {
		struct dcr_retry_opts ro = {.base = o.base, .target = o.target, .also = also,
					    .nalso = nalso, .base_id = o.base_id,
					    .chunk_elems = o.chunk_elems, .what = o.what};
		struct dcr_retry_stats rs = {0};
		r = dcr_diff_retry(&ro, (struct dcr_sink){dcr_sink_fd_write, &fd}, &rs, &e);
		st.base = rs.base;
		st.target = rs.target;
		st.changed = rs.changed;
		st.items = rs.items;
		st.bytes_out = rs.bytes_out;
	} else {
		r = dcr_diff(&o, (struct dcr_sink){dcr_sink_fd_write, &fd}, &st, &e);
	}
	free(also);
	r = cmd_output_end(&a, r, &e);
	cmd_progress_end();
	if (r)
		cmd_die_err(&e, EXIT_FATAL);
	if (stats && !cmd_quiet)
		print_stats(&st, porcelain);
	return cmd_finish(EXIT_OK);
}
