/* dcr-push - upload a pack to a store, payloads as they arrive, manifest last. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dcr.h"
#include "common.h"

static const char usage[] =
	"usage: dcr-push [options] PACK|- STORE/NAME\n"
	"       dcr-push --gc STORE --policy NAME [--keep N] [--dry-run]\n"
	"\n"
	"Upload a pack (a pack directory, a pack tar file, or a tar stream on standard\n"
	"input) to STORE as NAME/payload-*.dcrp and NAME/manifest.dcrm. Each payload is\n"
	"checked and uploaded while later ones are still arriving; the manifest goes\n"
	"last, once every payload it lists is stored. STORE is a directory, s3://BUCKET[/PREFIX]\n"
	"or http(s)://HOST/PATH.\n"
	"\n"
	"      --gc STORE       remove the packs NAME/vX/ of --policy NAME that no receiver\n"
	"                       needs: X at most every receiver's latest acknowledged\n"
	"                       version and at most the committed version minus --keep\n"
	"      --keep N         with --gc: keep the last N committed versions' packs\n"
	"                       (default 1)\n"
	"      --dry-run        with --gc: only list what would be removed\n"
	"      --endpoint URL   S3 endpoint (default $DCR_S3_ENDPOINT, else AWS)\n"
	"      --cacert FILE    CA certificates for https\n"
	"  -j, --parallel N     uploads in flight (default 4)\n"
	"      --retries N      retries of a failed request (default 5)\n"
	"      --progress       show progress on stderr\n"
	"      --no-progress    do not show progress\n"
	"  -q, --quiet          print nothing but errors\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 pushed, 128 error, 129 usage error.\n";

static void gc_report(void *ctx, uint64_t version, size_t objects)
{
	(void)ctx;
	printf("v%llu\t%zu\n", (unsigned long long)version, objects);
}

int main(int argc, char **argv)
{
	cmd_init("dcr-push", argc, argv);
	static const struct option longopts[] = {
		CMD_STORE_LONGOPTS,
		{"gc", required_argument, NULL, 'G'},
		{"policy", required_argument, NULL, 'P'},
		{"keep", required_argument, NULL, 'K'},
		{"dry-run", no_argument, NULL, 'D'},
		{"progress", no_argument, NULL, 'p'},
		{"no-progress", no_argument, NULL, 'n'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct dcr_store_opts so = {0};
	struct dcr_xfer_opts xo = {0};
	int c, dry = 0;
	const char *gc = NULL, *policy = NULL;
	uint64_t keep = 1;
	while ((c = getopt_long(argc, argv, ":j:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'G': gc = optarg; break;
		case 'P': policy = optarg; break;
		case 'D': dry = 1; break;
		case 'K': keep = cmd_parse_u64(usage, "--keep", optarg, 0, UINT64_MAX); break;
		default:
			if (!cmd_store_option(c, optarg, &so, &xo.parallel, usage))
				cmd_common_option(c, usage);
			break;
		}
	}
	if (gc) {
		if (!policy || argc != optind)
			cmd_usage_error(usage, "--gc STORE needs --policy NAME and nothing else");
		struct dcr_err e = {0};
		if (dcr_policy_check_name(policy, &e))
			cmd_usage_error(usage, "--policy wants one name component, not '%s'", policy);
		struct dcr_store *s;
		uint64_t removed;
		if (dcr_store_open(gc, &so, &s, &e))
			cmd_die_err(&e, EXIT_FATAL);
		int r = dcr_policy_gc(s, policy, keep, dry, gc_report, NULL, &removed, &e);
		dcr_store_close(s);
		if (r)
			cmd_die_err(&e, EXIT_FATAL);
		if (!cmd_quiet)
			fprintf(stderr, "dcr-push: %s %llu versions of '%s'\n",
				dry ? "would remove" : "removed", (unsigned long long)removed, policy);
		return cmd_finish(EXIT_OK);
	}
	if (policy || dry)
		cmd_usage_error(usage, "--policy and --dry-run go with --gc");
	if (argc - optind != 2)
		cmd_usage_error(usage, "need PACK and STORE/NAME");
	const char *pack = argv[optind], *dest = argv[optind + 1];
	struct dcr_err e = {0};
	char *surl, *name;
	if (dcr_split_store_url(dest, &surl, &name, &e))
		cmd_usage_error(usage, "%s", e.msg);
	struct dcr_pack_in *in = cmd_open_pack_input(pack);
	struct dcr_store *s;
	if (dcr_store_open(surl, &so, &s, &e))
		cmd_die_err(&e, EXIT_FATAL);
	xo.progress = cmd_progress_xfer;
	xo.progress_ctx = "push";
	struct dcr_xfer_stats st = {0};
	int r = dcr_push(s, name, in, &xo, &st, &e);
	dcr_pack_in_close(in);
	dcr_store_close(s);
	if (r)
		cmd_die_err(&e, EXIT_FATAL);
	cmd_progress_end();
	if (!cmd_quiet && cmd_progress_on)
		fprintf(stderr, "dcr-push: %u payloads and the manifest, %llu bytes, to %s\n",
			st.payloads, (unsigned long long)st.bytes, dest);
	free(surl);
	free(name);
	return cmd_finish(EXIT_OK);
}
