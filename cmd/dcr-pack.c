/* dcr-pack - turn a delta stream into a pack: payloads and a manifest. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "pack-list.h"
#include "dcr.h"

static const char usage[] =
	"usage: dcr-pack [options] [DELTA|-]\n"
	"       dcr-pack --producer R/N [--attempt HEX] [options] [DELTA|-]\n"
	"       dcr-pack --list [--porcelain] [-z] PACK|DELTA|-\n"
	"       dcr-pack --squash [--base CKPT] [--delta] [-o OUT] DELTA1 DELTA2...\n"
	"\n"
	"Group a delta stream (DELTA, or standard input) into self-checking payloads\n"
	"of about --payload-size raw bytes each, then a manifest, written last.\n"
	"The pack goes to standard output as a tar stream, or with -o DIR into a\n"
	"directory (each file written atomically).\n"
	"\n"
	"  -o, --output DIR|-      where the pack goes (default: '-', a tar stream)\n"
	"  -s, --payload-size SIZE raw bytes per payload: 64M by default (K, M, G)\n"
	"      --linger MS         reading a stream (a pipe): close a payload of 1M or\n"
	"                          more MS milliseconds after its first item came, so\n"
	"                          that a slow diff's items go out within about MS\n"
	"                          (default 100; 0: by size alone, as from a file)\n"
	"      --digest ALG        payload checksums: blake3 (default) or sha256, which\n"
	"                          receivers built before BLAKE3 payloads need\n"
	"      --producer R/N      be producer R of the N training ranks that make one\n"
	"                          pack: payloads named by producer, then this rank's\n"
	"                          summary in place of the manifest (dcr-push\n"
	"                          --finalize joins the N summaries)\n"
	"      --attempt HEX       with --producer: the pack's attempt id (32 hex\n"
	"                          digits, the same on every producer; default: from\n"
	"                          the base and N)\n"
	"      --version V         name the version the pack reaches in its manifest\n"
	"      --policy NAME       with --version: the policy it is a version of\n"
	"      --sign KEY.sec      sign the manifest (needs --version): a detached\n"
	"                          signature, manifest.dcrm.sig, in signify's format\n"
	"  -l, --list              list the contents of PACK (a directory or a tar file)\n"
	"                          or of a DELTA file or stream\n"
	"      --squash            compose the chain of delta files DELTA1 (v1->v2),\n"
	"                          DELTA2 (v2->v3), ... into one delta v1->vk and pack it\n"
	"      --base CKPT         with --squash: CKPT is the chain's base (DELTA1's), so\n"
	"                          items coded against the receiver's bits (dcr-diff's\n"
	"                          default codecs) compose too\n"
	"      --delta             with --squash: write the composed delta stream, not a pack\n"
	"      --porcelain         with --list: stable tab-separated records\n"
	"  -z                      with --list --porcelain: end records with NUL\n"
	"      --progress          show progress on stderr\n"
	"      --no-progress       do not show progress\n"
	"  -q, --quiet             print nothing but errors\n"
	"  -h, --help              show this help\n"
	"\n"
	"Exit status: 0 success, 128 error, 129 usage error.\n";

/* --squash: compose the chain of delta files. With --delta, write the
 * composed delta to output and return -1; else return a descriptor of it
 * (an unlinked temporary file, rewound) for packing. */
static int squash_chain(const char *const *deltas, int n, const char *base, const char *output,
			int delta_out)
{
	struct dcr_err e = {0};
	struct dcr_squash_stats sst = {0};
	struct dcr_atomic a = {.fd = -1};
	const char *what = "squashed delta";
	int fd;
	for (int i = 0; i < n; i++)
		cmd_refuse_tty_path(deltas[i], "a delta to squash");
	if (delta_out) {
		fd = cmd_output_begin(output, &a, &what);
	} else if (dcr_tmpfile("squash", &fd, &e)) {
		cmd_die_err(&e, EXIT_FATAL);
	}
	struct dcr_sink sink = {dcr_sink_fd_write, &fd};
	int r = base ? dcr_squash_base(deltas, (size_t)n, base, NULL, sink, what, &sst, &e)
		     : dcr_squash(deltas, (size_t)n, NULL, sink, what, &sst, &e);
	if ((r = cmd_output_end(&a, r, &e)))
		cmd_die_err(&e, cmd_exit_code(r));
	if (!cmd_quiet && cmd_progress_on)
		fprintf(stderr, "dcr-pack: squashed %d deltas (%llu bytes) into %llu items, %llu changes, %llu bytes\n",
			n, (unsigned long long)sst.bytes_in, (unsigned long long)sst.items,
			(unsigned long long)sst.changes, (unsigned long long)sst.bytes_out);
	if (delta_out)
		return -1;
	if (lseek(fd, 0, SEEK_SET))
		cmd_die("cannot rewind the squashed delta: %s", strerror(errno));
	return fd;
}

static void progress(void *ctx, uint64_t done, uint64_t total)
{
	(void)total;
	cmd_progress_bytes(ctx, done, done);
}

/* --producer R/N */
static void parse_producer(const char *arg, struct dcr_pack_opts *o)
{
	const char *sl = strchr(arg, '/');
	char rs[32];
	if (!sl || (size_t)(sl - arg) >= sizeof(rs))
		cmd_usage_error(usage, "--producer wants R/N, not '%s'", arg);
	memcpy(rs, arg, (size_t)(sl - arg));
	rs[sl - arg] = 0;
	o->producers = (int)cmd_parse_u64(usage, "--producer N", sl + 1, 1, DCR_PRODUCERS_MAX);
	o->producer = (uint32_t)cmd_parse_u64(usage, "--producer R", rs, 0,
					      (uint64_t)o->producers - 1);
}

/* --attempt HEX (32 hex digits) into attempt, which o then names */
static void parse_attempt(const char *arg, uint8_t attempt[16], struct dcr_pack_opts *o)
{
	char hex[65];
	dcr_digest d;
	if (strlen(arg) != 32)
		cmd_usage_error(usage, "--attempt wants 32 hex digits, not '%s'", arg);
	memcpy(hex, arg, 32);
	memset(hex + 32, '0', 32);
	hex[64] = 0;
	if (dcr_digest_parse_hex(hex, &d))
		cmd_usage_error(usage, "--attempt wants 32 hex digits, not '%s'", arg);
	memcpy(attempt, d.b, 16);
	o->attempt = attempt;
}

/* --sign KEY.sec: the key into sk, which o then signs with; returns the
 * public key's name for the signature's comment (malloc'd, or NULL) */
static char *load_signer(const char *sign, struct dcr_seckey *sk, struct dcr_pack_opts *o)
{
	struct dcr_err ke = {0};
	if (dcr_seckey_load(sign, sk, &ke))
		cmd_die_err(&ke, EXIT_FATAL);
	o->sign = sk;
	/* the comment names the public key beside it, as signify's does */
	const char *b = strrchr(sign, '/');
	b = b ? b + 1 : sign;
	size_t bl = strlen(b);
	char *pub_name = bl > 4 && !strcmp(b + bl - 4, ".sec")
				 ? dcr_asprintf("%.*s.pub", (int)(bl - 4), b)
				 : NULL;
	o->sign_pub = pub_name;
	return pub_name;
}

int main(int argc, char **argv)
{
	cmd_init("dcr-pack", argc, argv);
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"payload-size", required_argument, NULL, 's'},
		{"linger", required_argument, NULL, 'G'},
		{"digest", required_argument, NULL, 'd'},
		{"version", required_argument, NULL, 'V'},
		{"policy", required_argument, NULL, 'Y'},
		{"sign", required_argument, NULL, 'S'},
		{"list", no_argument, NULL, 'l'},
		{"squash", no_argument, NULL, 'Q'},
		{"producer", required_argument, NULL, 'R'},
		{"attempt", required_argument, NULL, 'A'},
		{"delta", no_argument, NULL, 'D'},
		{"base", required_argument, NULL, 'B'},
		{"porcelain", no_argument, NULL, 'P'},
		{"progress", no_argument, NULL, 'p'},
		{"no-progress", no_argument, NULL, 'n'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *output = "-", *sign = NULL, *base = NULL;
	struct dcr_pack_opts o = {0};
	int list = 0, porcelain = 0, squash = 0, delta_out = 0, linger = -1, c;
	char eol = '\n';
	uint8_t attempt[16];
	while ((c = getopt_long(argc, argv, ":o:s:lzqh", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': output = optarg; break;
		case 's':
			if (!(o.payload_size = cmd_parse_size(optarg)))
				cmd_usage_error(usage, "bad --payload-size '%s'", optarg);
			break;
		case 'G':
			linger = (int)cmd_parse_u64(usage, "--linger", optarg, 0, 600000);
			break;
		case 'd':
			if (!strcmp(optarg, "blake3"))
				o.digest = DCR_PDIGEST_BLAKE3;
			else if (!strcmp(optarg, "sha256"))
				o.digest = DCR_PDIGEST_SHA256;
			else
				cmd_usage_error(usage, "unknown --digest '%s' (blake3, sha256)", optarg);
			break;
		case 'R': parse_producer(optarg, &o); break;
		case 'A': parse_attempt(optarg, attempt, &o); break;
		case 'V':
			o.version = cmd_parse_version(usage, "--version", optarg);
			o.have_version = 1;
			break;
		case 'Y': o.policy = optarg; break;
		case 'S': sign = optarg; break;
		case 'l': list = 1; break;
		case 'Q': squash = 1; break;
		case 'D': delta_out = 1; break;
		case 'B': base = optarg; break;
		case 'P': porcelain = 1; break;
		case 'z': eol = '\0'; break;
		default: cmd_common_option(c, usage); break;
		}
	}
	if (delta_out && !squash)
		cmd_usage_error(usage, "--delta goes with --squash");
	if (o.attempt && !o.producers)
		cmd_usage_error(usage, "--attempt goes with --producer");
	if (o.producers && (list || squash))
		cmd_usage_error(usage, "--producer goes with neither --list nor --squash");
	if (o.producers && (sign || o.have_version))
		cmd_usage_error(usage, "--sign and --version name the manifest: with --producer, dcr-push --finalize takes them");
	if (sign && !o.have_version)
		cmd_usage_error(usage, "--sign needs --version: a signature vouches for the version a pack reaches");
	if (o.policy && !o.have_version)
		cmd_usage_error(usage, "--policy goes with --version");
	if ((sign || o.have_version) && (list || delta_out))
		cmd_usage_error(usage, "--sign and --version make a pack; not with --list or --delta");
	if (o.policy)
		cmd_check_policy(usage, o.policy);
	struct dcr_seckey sk;
	char *pub_name = sign ? load_signer(sign, &sk, &o) : NULL;
	if (base && !squash)
		cmd_usage_error(usage, "--base goes with --squash");
	if (squash && list)
		cmd_usage_error(usage, "--squash or --list, not both");
	if (!list && !delta_out)
		cmd_pack_output_check(output);
	if (squash) {
		if (argc - optind < 1)
			cmd_usage_error(usage, "--squash needs the chain's delta files");
		int fd = squash_chain((const char *const *)argv + optind, argc - optind, base, output,
				      delta_out);
		if (fd < 0)
			return cmd_finish(EXIT_OK);
		dup2(fd, 0);
		close(fd);
		optind = argc;
	}
	if (argc - optind > 1)
		cmd_usage_error(usage, "at most one input");
	const char *input = argc - optind == 1 ? argv[optind] : "-";
	if (list)
		return cmd_finish(cmd_pack_list(input, porcelain, eol));

	int in = cmd_open_input(input, "a delta");
	/* payloads close after a linger only in a stream: a delta in a file
	 * (or a squashed chain) always gives the same pack */
	struct stat sb;
	if (squash || (!fstat(in, &sb) && S_ISREG(sb.st_mode)))
		linger = 0;
	o.linger_ms = linger < 0 ? 100 : (unsigned)linger;
	struct dcr_err e = {0};
	struct dcr_pack_out out;
	struct dcr_tar_out *tar;
	/* a directory gets its payloads when the pack has come out whole: a
	 * pack that fails leaves an older pack there as it was */
	struct dcr_pack_dir_held held = {.dir = output};
	int to_dir = cmd_pack_output(output, &out, &tar);
	if (to_dir)
		out = (struct dcr_pack_out){.entry = dcr_pack_dir_held_entry, .ctx = &held};
	o.progress = progress;
	o.progress_ctx = "pack";
	struct dcr_pack_stats st = {0};
	/* read through a buffer: a record's header and body were a read each,
	 * two system calls per tensor (a pipe's read returns what is there, so
	 * a slow stream's records still come as they are written) */
	struct dcr_fdbuf fb;
	if (dcr_fdbuf_init(&fb, in, DCR_FDBUF_SIZE))
		cmd_die("out of memory");
	int r = dcr_pack((struct dcr_source){dcr_source_fdbuf_read, &fb},
			 strcmp(input, "-") ? input : "standard input", &o, out, &st, &e);
	dcr_fdbuf_release(&fb);
	if (to_dir) {
		int f = dcr_pack_dir_held_finish(&held, !r, &e);
		r = r ? r : f;
	}
	if (o.sign)
		explicit_bzero(&sk, sizeof(sk));
	free(pub_name);
	r = cmd_pack_output_close(tar, r, &e);
	if (r)
		cmd_die_err(&e, EXIT_FATAL);
	cmd_progress_end();
	if (!cmd_quiet && cmd_progress_on && o.producers)
		fprintf(stderr, "dcr-pack: producer %u of %d: %u payloads, %llu items, %llu changes, %llu bytes (summary %llu)\n",
			o.producer, o.producers, st.npayloads, (unsigned long long)st.items,
			(unsigned long long)st.changes, (unsigned long long)st.bytes,
			(unsigned long long)st.summary_bytes);
	else if (!cmd_quiet && cmd_progress_on)
		fprintf(stderr, "dcr-pack: %u payloads, %llu items, %llu changes, %llu bytes\n",
			st.npayloads, (unsigned long long)st.items, (unsigned long long)st.changes,
			(unsigned long long)st.bytes);
	return cmd_finish(EXIT_OK);
}
