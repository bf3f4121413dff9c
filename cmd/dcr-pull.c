/* dcr-pull - download a pack from a store as a pack stream or directory. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dcr.h"

static const char usage[] =
	"usage: dcr-pull [options] STORE/NAME [STORE2/NAME2...]\n"
	"\n"
	"Download the pack NAME from STORE and write it to standard output as a pack\n"
	"tar stream (for dcr-apply), or with -o DIR into a pack directory. Payloads\n"
	"are fetched in parallel and each is checked against its own checksum and\n"
	"the manifest's digest before it is passed on; the manifest comes last.\n"
	"Several sources of the same pack (relays, then the store behind them) are\n"
	"tried in order: when one fails or serves bad bytes, the pull goes on at the\n"
	"next from where it stopped.\n"
	"\n"
	"  -o, --output DIR|-   where the pack goes (default '-': a tar stream)\n"
	"      --dense          fetch the dense copy of NAME, stored as NAME.dense\n"
	"                       (dcr-diff --dense NEW | dcr-pack | dcr-push - STORE/NAME.dense)\n"
	"                       for a receiver too far behind; it fits any state\n"
	"      --wait SECONDS   start before the manifest exists and follow payloads\n"
	"                       as they appear, for at most SECONDS\n"
	"      --verify-key PUB refuse a pack whose manifest is not signed by PUB (a\n"
	"                       signify public key; repeatable: any of them; default\n"
	"                       $DCR_VERIFY_KEY, paths separated by ':'), before\n"
	"                       anything is passed on\n"
	"      --min-version N  with a key: refuse a signed version below N\n"
	"      --policy NAME    with a key: refuse a signed pack of another policy\n"
	"                       (default $DCR_POLICY)\n"
	"      --endpoint URL   S3 endpoint (default $DCR_S3_ENDPOINT, else AWS)\n"
	"      --cacert FILE    CA certificates for https\n"
	"  -j, --parallel N     downloads in flight (default 4)\n"
	"      --part-size SIZE from a server: bytes per ranged GET, whole 1 MiB\n"
	"                       pieces (default 16M; K, M, G)\n"
	"      --retries N      retries of a failed request (default 5)\n"
	"      --progress       show progress on stderr\n"
	"      --no-progress    do not show progress\n"
	"  -q, --quiet          print nothing but errors\n"
	"  -h, --help           show this help\n"
	"\n"
	"With -o DIR, payloads already in DIR that check out are not fetched again\n"
	"(resume). Exit status: 0 pulled, 128 error, 129 usage error.\n";

/* NAME is vV (or vV.dense) and the store, a policy's directory, has
 * committed V: 1 and the state it committed, which the pack must reach
 * (a pack pushed again after its commit, or a dense copy of another
 * checkpoint pushed under the name, would take the receiver to a state no
 * later delta applies to). 0 when V is not committed there, or the store
 * does not tell (the pull goes on, as pushes do, with a warning unless
 * the store refused to answer). */
static int committed_target(const struct dcr_pull_source *src, size_t n, dcr_digest *want)
{
	const char *name = src[0].name;
	uint64_t v;
	if (dcr_version_parse(name, dcr_dense_stem(name, strlen(name)), &v))
		return 0;
	struct dcr_err e = {0};
	int r = DCR_ENOTFOUND;
	for (size_t i = 0; i < n; i++) {
		memset(&e, 0, sizeof(e));
		if (!(r = dcr_policy_ref(src[i].s, NULL, v, want, &e)))
			return 1;
		if (r == DCR_ENOTFOUND)
			return 0;
	}
	/* a receiver's key that may read packs but not refs (S3 answers 403
	 * for them) would have this said on every pull: quiet */
	if (!cmd_quiet && r != DCR_EREMOTE)
		fprintf(stderr, "dcr-pull: warning: cannot tell whether version %llu is committed (%s); pulling\n",
			(unsigned long long)v, e.msg);
	return 0;
}

int main(int argc, char **argv)
{
	cmd_init("dcr-pull", argc, argv);
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"wait", required_argument, NULL, 'W'},
		{"dense", no_argument, NULL, 'D'},
		{"part-size", required_argument, NULL, 'P'},
		CMD_TRUST_LONGOPT,
		CMD_POLICY_LONGOPT,
		{"min-version", required_argument, NULL, 'M'},
		CMD_STORE_LONGOPTS,
		{"progress", no_argument, NULL, 'p'},
		{"no-progress", no_argument, NULL, 'n'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct dcr_store_opts so = {0};
	struct dcr_xfer_opts xo = {0};
	const char *output = "-";
	uint64_t min_version = 0;
	int c, have_min = 0;
	while ((c = getopt_long(argc, argv, ":o:j:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': output = optarg; break;
		case 'W': xo.wait_s = cmd_parse_seconds(usage, "--wait", optarg); break;
		case 'D': xo.dense = 1; break;
		case 'K': cmd_trust_key(optarg); break;
		case 'Y': cmd_trust_policy(usage, optarg); break;
		case 'M':
			min_version = cmd_parse_version(usage, "--min-version", optarg);
			have_min = 1;
			break;
		case 'P':
			if (!(xo.part_size = cmd_parse_size(optarg)))
				cmd_usage_error(usage, "bad --part-size '%s'", optarg);
			break;
		default:
			if (!cmd_store_option(c, optarg, &so, &xo.parallel, usage))
				cmd_common_option(c, usage);
			break;
		}
	}
	if (argc - optind < 1)
		cmd_usage_error(usage, "need STORE/NAME");
	xo.trust = cmd_trust(min_version);
	if (have_min && !xo.trust)
		cmd_usage_error(usage, "--min-version needs a key (--verify-key or DCR_VERIFY_KEY)");
	struct dcr_err e = {0};
	size_t nsrc = (size_t)(argc - optind);
	struct dcr_pull_source *src = dcr_calloc(nsrc, sizeof(*src));
	if (!src)
		cmd_die("out of memory");
	for (size_t i = 0; i < nsrc; i++) {
		int r = dcr_pull_source_open(argv[optind + (int)i], xo.dense, &so, &src[i], &e);
		if (r == DCR_EFORMAT)
			cmd_usage_error(usage, "%s", e.msg);
		if (r)
			cmd_die_err(&e, EXIT_FATAL);
	}
	dcr_digest want;
	if (committed_target(src, nsrc, &want))
		xo.want_target = &want;
	struct dcr_pack_out out;
	struct dcr_tar_out *tar;
	int to_dir = cmd_pack_output(output, &out, &tar);
	xo.progress = cmd_progress_xfer;
	xo.progress_ctx = "pull";
	struct dcr_xfer_stats st = {0};
	xo.fault = &cmd_fault;
	int r = dcr_pull_from(src, nsrc, out, to_dir ? dcr_pack_dir_have : NULL, (void *)output, &xo, &st,
			      &e);
	r = cmd_pack_output_close(tar, r, &e);
	for (size_t i = 0; i < nsrc; i++)
		dcr_pull_source_close(&src[i]);
	free(src);
	if (r)
		cmd_die_err(&e, EXIT_FATAL);
	cmd_progress_end();
	if (!cmd_quiet && cmd_progress_on)
		fprintf(stderr, "dcr-pull: %u payloads (%d already here), %llu bytes\n", st.payloads,
			st.skipped, (unsigned long long)st.bytes);
	return cmd_finish(EXIT_OK);
}
