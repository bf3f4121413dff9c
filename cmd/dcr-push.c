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
	"       dcr-push --finalize --producers N [--timeout S] [--sign KEY.sec --version V\n"
	"                [--policy NAME]] STORE/NAME\n"
	"       dcr-push --gc STORE --policy NAME [--keep N] [--max-behind N] [--dry-run]\n"
	"\n"
	"Upload a pack (a pack directory, a pack tar file, or a tar stream on standard\n"
	"input) to STORE as NAME/payload-*.dcrp and NAME/manifest.dcrm. Each payload is\n"
	"checked and uploaded while later ones are still arriving; the manifest goes\n"
	"last, once every payload it lists is stored. STORE is a directory, s3://BUCKET[/PREFIX]\n"
	"or http(s)://HOST/PATH. A producer's pack (dcr-pack --producer) goes up the same\n"
	"way, its summary last in place of the manifest.\n"
	"\n"
	"      --finalize       join the summaries of the N producers of NAME into its\n"
	"                       manifest: every canonical element claimed by exactly one\n"
	"                       producer, each payload in the store as its summary says;\n"
	"                       the manifest is written last (moves kilobytes)\n"
	"      --producers N    with --finalize: how many producers make the pack\n"
	"      --timeout S      with --finalize: wait up to S seconds for the summaries\n"
	"                       (default 0: they must be there)\n"
	"      --sign KEY.sec   with --finalize: sign the manifest (needs --version)\n"
	"      --version V      with --finalize: the version the pack reaches\n"
	"      --policy NAME    with --finalize --version: the policy it is a version of\n"
	"      --gc STORE       remove the packs NAME/vX/ of --policy NAME that no receiver\n"
	"                       needs: X at most every receiver's latest acknowledged\n"
	"                       version and at most the committed version minus --keep;\n"
	"                       and dense copies NAME/vX.dense/ older than the newest\n"
	"                       complete one of a committed version\n"
	"      --keep N         with --gc: keep the last N committed versions' packs\n"
	"                       (default 1)\n"
	"      --max-behind N   with --gc: stop waiting for a receiver more than N versions\n"
	"                       behind once a dense copy newer than its version is in\n"
	"                       the store (it catches up by that copy; default: wait)\n"
	"      --dry-run        with --gc: only list what would be removed\n"
	"      --endpoint URL   S3 endpoint (default $DCR_S3_ENDPOINT, else AWS)\n"
	"      --cacert FILE    CA certificates for https\n"
	"      --force          replace the pack (or dense copy) of a version the store\n"
	"                       has committed (refused without it: lagging receivers\n"
	"                       fetch that pack); with --finalize, write its manifest\n"
	"                       where it is missing\n"
	"  -j, --parallel N     uploads (with --gc: deletions) in flight (default 4)\n"
	"      --retries N      retries of a failed request (default 5)\n"
	"      --progress       show progress on stderr\n"
	"      --no-progress    do not show progress\n"
	"  -q, --quiet          print nothing but errors\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 pushed (or finalized), or the store holds this step already\n"
	"(nothing written); 1 refused: NAME is vV, the store has committed version V\n"
	"(STORE/refs/vV) and the pack is another step, or NAME is vV.dense and the pack\n"
	"is not a dense copy of that version's state; 128 error; 129 usage error.\n";

/* The store did not tell whether version v is committed (its answer to
 * refs/vV was an error): the push goes on, as its listing and deletions
 * do, with a warning. */
static void cannot_tell(const char *surl, uint64_t v, const struct dcr_err *e)
{
	if (!cmd_quiet)
		fprintf(stderr, "dcr-push: warning: cannot tell whether '%s' has committed version %llu (%s); pushing\n",
			cmd_quote(surl), (unsigned long long)v, e->msg);
}

/* What the pack input `in` ends with, read to its end (a stream's manifest
 * or summary is its last entry, and the stream's writer, dcr-pack in a
 * pipe, must be able to finish): nothing goes up. 1: its manifest, parsed
 * into *m; 2: a producer's summary, into *sm; 0: neither; or an error (e). */
static int input_tail(struct dcr_pack_in *in, struct dcr_manifest *m, struct dcr_summary *sm,
		      struct dcr_err *e)
{
	const char *nm;
	const uint8_t *buf;
	size_t len;
	uint32_t producer;
	int r, k = 0;
	while ((r = dcr_pack_in_next(in, &nm, &buf, &len, e)) == 1) {
		if (k) /* entries past it: the pusher would refuse them */
			continue;
		if (!strcmp(nm, DCR_MANIFEST_NAME))
			k = (r = dcr_manifest_parse(buf, len, DCR_MANIFEST_NAME, m, e)) ? r : 1;
		else if (dcr_summary_name_parse(nm, &producer))
			k = (r = dcr_summary_parse(buf, len, nm, sm, e)) ? r : 2;
		if (k < 0)
			return k;
	}
	if (r && k == 1)
		dcr_manifest_release(m);
	if (r && k == 2)
		dcr_summary_release(sm);
	return r ? r : k;
}

/* Producer sm->producer's summary of NAME in STORE is the same share of
 * the same step as *sm (dcr_summary_same_share). */
static int same_share(struct dcr_store *s, const char *name, const struct dcr_summary *sm)
{
	struct dcr_err e = {0};
	struct dcr_summary there;
	uint8_t *buf = NULL;
	size_t len = 0;
	char *sn = dcr_summary_name(sm->producer);
	char *on = sn ? dcr_asprintf("%s/%s", name, sn) : NULL;
	int same = on && !dcr_store_get(s, on, &buf, &len, &e) &&
		   !dcr_summary_parse(buf, len, on, &there, &e);
	if (same) {
		same = dcr_summary_same_share(sm, &there);
		dcr_summary_release(&there);
	}
	free(buf);
	free(on);
	free(sn);
	return same;
}

/* NAME is vV: refuse (exit 1) when STORE, a policy's directory, has
 * committed V, unless the pack is that version's step again. A pushed
 * pack replaces the one there, payloads first, so a rerun step pushed
 * under a committed version's name destroyed the pack that receivers
 * behind the head fetch to reach that state; but a rerun of the same step
 * (a trainer restarted after its joint commit, a retried pipeline) makes a
 * pack with the same base and target, perhaps cut into other payloads:
 * that one is read to its end, nothing goes up, and the push exits 0, as
 * the joint commit of a committed version with its state does. Where the
 * store does not tell (its answer is an error), a warning, and the push
 * goes on, as its listing and deletions do. 1: nothing to push. in is
 * NULL for a finalize: 2 where the committed version's manifest is there
 * (the finalize must find it the bytes the summaries join to, and writes
 * nothing), else refused. */
static int refuse_committed(struct dcr_store *s, const char *surl, const char *name, uint64_t v,
			    struct dcr_pack_in *in)
{
	struct dcr_err e = {0};
	dcr_digest d;
	int r = dcr_policy_ref(s, NULL, v, &d, &e);
	if (r == DCR_ENOTFOUND)
		return 0;
	if (r && r != DCR_EFORMAT) {
		/* a key that may put but not read refs (S3 answers 403 for a
		 * missing object without s3:ListBucket) */
		cannot_tell(surl, v, &e);
		return 0;
	}
	char st[80] = "its ref damaged", hex[65];
	if (!r) {
		dcr_digest_hex(&d, hex);
		snprintf(st, sizeof(st), "state %.12s", hex);
	}
	if (!r && !in) {
		struct dcr_manifest there;
		if (!dcr_store_manifest_head(s, name, &there, &e) && !memcmp(&there.target, &d, sizeof(d)))
			return 2;
	}
	if (!r && in) {
		struct dcr_manifest mine, there;
		struct dcr_summary sm;
		int k = input_tail(in, &mine, &sm, &e), same = 0;
		if (k < 0)
			cmd_die_err(&e, EXIT_FATAL);
		if (k == 1) {
			same = !dcr_store_manifest_head(s, name, &there, &e) &&
			       !memcmp(&mine.base, &there.base, sizeof(d)) &&
			       !memcmp(&mine.target, &d, sizeof(d)) &&
			       !memcmp(&there.target, &d, sizeof(d)) && mine.dense == there.dense;
			dcr_manifest_release(&mine);
		} else if (k == 2) {
			same = same_share(s, name, &sm);
			dcr_summary_release(&sm);
		}
		if (same) {
			if (!cmd_quiet)
				fprintf(stderr, "dcr-push: '%s' has committed version %llu (state %.12s), and its pack there has this pack's %s: nothing pushed\n",
					cmd_quote(surl), (unsigned long long)v, hex,
					k == 1 ? "base and target" : "producer's share of the step");
			return 1;
		}
	}
	dcr_err_set(&e, DCR_ECONFLICT,
		    "'%s' has committed version %llu (%s): its pack is what receivers behind fetch to reach it; push the step as the next version (dcr-commit --store ... --status shows the head), or replace it with --force",
		    cmd_quote(surl), (unsigned long long)v, st);
	cmd_die_err(&e, EXIT_NEGATIVE);
	return 0;
}

/* NAME is vV.dense and STORE, a policy's directory, has committed V: 1
 * and *want, the state the dense copy must hold (its manifest does not
 * go up otherwise). A complete dense copy of that state already there is
 * not pushed over: its payloads would be overwritten first, by a pack
 * that may turn out to be of another state. The pack is read to its end
 * instead: a dense copy of that state is nothing to push (2, exit 0),
 * any other pack is refused (exit 1). */
static int dense_target(struct dcr_store *s, const char *surl, uint64_t v, dcr_digest *want,
			struct dcr_pack_in *in)
{
	struct dcr_err e = {0};
	int r = dcr_policy_ref(s, NULL, v, want, &e);
	if (r == DCR_ENOTFOUND)
		return 0;
	if (r) {
		cannot_tell(surl, v, &e);
		return 0;
	}
	char why[sizeof(e.msg)];
	if (!dcr_policy_dense_holds(s, NULL, v, want, why, sizeof(why)))
		return 1;
	char hex[65], other[80] = "is not a dense copy";
	struct dcr_manifest m;
	dcr_digest_hex(want, hex);
	struct dcr_summary sm;
	if ((r = input_tail(in, &m, &sm, &e)) < 0)
		cmd_die_err(&e, EXIT_FATAL);
	if (r == 2)
		dcr_summary_release(&sm);
	int same = r == 1 && m.dense && !memcmp(&m.target, want, sizeof(*want));
	if (r == 1 && m.dense) {
		char t[65];
		dcr_digest_hex(&m.target, t);
		snprintf(other, sizeof(other), "reaches state %.12s", t);
	}
	if (r == 1)
		dcr_manifest_release(&m);
	if (same) {
		if (!cmd_quiet)
			fprintf(stderr, "dcr-push: '%s' holds a dense copy of committed version %llu (state %.12s) already: nothing pushed\n",
				cmd_quote(surl), (unsigned long long)v, hex);
		return 2;
	}
	dcr_err_set(&e, DCR_ECONFLICT,
		    "'%s' holds a dense copy of committed version %llu (state %.12s) already, and this pack %s: nothing pushed (--force replaces the copy)",
		    cmd_quote(surl), (unsigned long long)v, hex, other);
	cmd_die_err(&e, EXIT_NEGATIVE);
	return 0;
}

static void fin_progress(void *ctx, uint32_t have, uint32_t n)
{
	(void)ctx;
	if (cmd_progress_on && !cmd_quiet)
		fprintf(stderr, "dcr-push: %u of %u summaries in\n", have, n);
}

static int finalize(int argc, char **argv, const struct dcr_store_opts *so,
		    struct dcr_finalize_opts *fo, const char *sign, int force)
{
	if (argc - optind != 1)
		cmd_usage_error(usage, "--finalize needs STORE/NAME and nothing else");
	struct dcr_err e = {0};
	char *surl, *name;
	if (dcr_split_store_url(argv[optind], &surl, &name, &e))
		cmd_usage_error(usage, "%s", e.msg);
	struct dcr_seckey sk;
	char *pub_name = NULL;
	if (sign) {
		if (dcr_seckey_load(sign, &sk, &e))
			cmd_die_err(&e, EXIT_FATAL);
		fo->sign = &sk;
		/* the comment names the public key beside it, as signify's does */
		const char *b = strrchr(sign, '/');
		b = b ? b + 1 : sign;
		size_t bl = strlen(b);
		pub_name = bl > 4 && !strcmp(b + bl - 4, ".sec")
				   ? dcr_asprintf("%.*s.pub", (int)(bl - 4), b)
				   : NULL;
		fo->sign_pub = pub_name;
	}
	struct dcr_store *s;
	if (dcr_store_open(surl, so, &s, &e))
		cmd_die_err(&e, EXIT_FATAL);
	/* a committed version's manifest stays as it is: refused unless it
	 * is there, and then the summaries must join to it (a finalize run
	 * again: nothing written, exit 0) */
	uint64_t ver;
	int committed = !force && !dcr_version_parse(name, strlen(name), &ver) &&
			refuse_committed(s, surl, name, ver, NULL) == 2;
	fo->fault = &cmd_fault;
	fo->progress = fin_progress;
	struct dcr_finalize_stats st = {0};
	int r = dcr_finalize(s, name, fo, &st, &e);
	dcr_store_close(s);
	if (r == DCR_ECONFLICT && committed) {
		char why[sizeof(e.msg)];
		memcpy(why, e.msg, sizeof(why));
		dcr_err_set(&e, r,
			    "%s: '%s' has committed version %llu, and the summaries there join to another manifest (push the step as the next version)",
			    why, cmd_quote(surl), (unsigned long long)ver);
		cmd_die_err(&e, EXIT_NEGATIVE);
	}
	if (r)
		cmd_die_err(&e, EXIT_FATAL);
	if (!cmd_quiet && committed)
		fprintf(stderr, "dcr-push: '%s' has committed version %llu, and its manifest is the one the summaries join to: nothing written\n",
			cmd_quote(surl), (unsigned long long)ver);
	else if (!cmd_quiet) {
		char t[65];
		dcr_digest_hex(&st.target, t);
		fprintf(stderr,
			"dcr-push: finalized %s: %u producers, %u payloads (%llu bytes, not moved), %u tensors; read %llu bytes of summaries and %llu of payload trailers, wrote %llu; waited %.1f s; target %s\n",
			argv[optind], fo->producers, st.payloads, (unsigned long long)st.delta_bytes,
			st.tensors, (unsigned long long)st.summary_bytes,
			(unsigned long long)st.check_bytes, (unsigned long long)st.written_bytes,
			st.wait_s, t);
	}
	free(pub_name);
	free(surl);
	free(name);
	return cmd_finish(EXIT_OK);
}

static void gc_report(void *ctx, const char *pack, size_t objects)
{
	(void)ctx;
	printf("%s\t%zu\n", pack, objects);
}

static void gc_behind(void *ctx, const char *receiver, uint64_t version, int let_go)
{
	const struct dcr_gc_opts *o = ctx;
	if (let_go)
		cmd_warn("receiver '%s' is at v%llu, more than %llu versions behind: not waited for; it catches up by the newest dense copy (dcr-pull --dense)",
			 cmd_quote(receiver), (unsigned long long)version,
			 (unsigned long long)o->max_behind);
	else
		cmd_warn("receiver '%s' is at v%llu, more than %llu versions behind, and still waited for: no dense copy newer than v%llu is in the store (push one: dcr-diff --dense NEW | dcr-pack | dcr-push - STORE/NAME/vV.dense)",
			 cmd_quote(receiver), (unsigned long long)version,
			 (unsigned long long)o->max_behind, (unsigned long long)version);
}

static void gc_bad_dense(void *ctx, uint64_t version, const char *why)
{
	(void)ctx;
	cmd_warn("the dense copy v%llu.dense is not relied on: %s; no receiver is let go by it, nor an older dense copy removed for it; push a dense copy of version %llu's checkpoint in its place (dcr-diff --dense CKPT | dcr-pack | dcr-push - STORE/NAME/v%llu.dense)",
		 (unsigned long long)version, why, (unsigned long long)version,
		 (unsigned long long)version);
}

int main(int argc, char **argv)
{
	cmd_init("dcr-push", argc, argv);
	static const struct option longopts[] = {
		CMD_STORE_LONGOPTS,
		{"gc", required_argument, NULL, 'G'},
		{"policy", required_argument, NULL, 'P'},
		{"keep", required_argument, NULL, 'K'},
		{"max-behind", required_argument, NULL, 'M'},
		{"dry-run", no_argument, NULL, 'D'},
		{"finalize", no_argument, NULL, 'F'},
		{"producers", required_argument, NULL, 'N'},
		{"timeout", required_argument, NULL, 'T'},
		{"sign", required_argument, NULL, 'S'},
		{"version", required_argument, NULL, 'V'},
		{"force", no_argument, NULL, 'f'},
		{"progress", no_argument, NULL, 'p'},
		{"no-progress", no_argument, NULL, 'n'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct dcr_store_opts so = {0};
	struct dcr_xfer_opts xo = {0};
	int c, dry = 0, fin = 0, have_timeout = 0, force = 0;
	const char *gc = NULL, *policy = NULL, *sign = NULL;
	struct dcr_finalize_opts fo = {0};
	uint64_t keep = 1, max_behind = UINT64_MAX;
	int gc_only = 0; /* an option that goes with --gc alone was given */
	while ((c = getopt_long(argc, argv, ":j:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'G': gc = optarg; break;
		case 'P': policy = optarg; break;
		case 'D': dry = 1; break;
		case 'K':
			keep = cmd_parse_u64(usage, "--keep", optarg, 0, UINT64_MAX);
			gc_only = 1;
			break;
		case 'M':
			max_behind = cmd_parse_u64(usage, "--max-behind", optarg, 0, UINT64_MAX - 1);
			gc_only = 1;
			break;
		case 'F': fin = 1; break;
		case 'f': force = 1; break;
		case 'N':
			fo.producers = (uint32_t)cmd_parse_u64(usage, "--producers", optarg, 1,
							       DCR_PRODUCERS_MAX);
			break;
		case 'T':
			fo.timeout_s = (double)cmd_parse_u64(usage, "--timeout", optarg, 0, 1u << 30);
			have_timeout = 1;
			break;
		case 'S': sign = optarg; break;
		case 'V':
			fo.version = cmd_parse_version(usage, "--version", optarg);
			fo.have_version = 1;
			break;
		default:
			if (!cmd_store_option(c, optarg, &so, &xo.parallel, usage))
				cmd_common_option(c, usage);
			break;
		}
	}
	if (force && gc)
		cmd_usage_error(usage, "--force goes with a push or --finalize, not --gc");
	if (!fin && (fo.producers || have_timeout || sign || fo.have_version))
		cmd_usage_error(usage, "--producers, --timeout, --sign and --version go with --finalize");
	if (fin) {
		if (gc || dry)
			cmd_usage_error(usage, "--finalize goes with neither --gc nor --dry-run");
		if (!fo.producers)
			cmd_usage_error(usage, "--finalize needs --producers N");
		if (sign && !fo.have_version)
			cmd_usage_error(usage, "--sign needs --version: a signature vouches for the version a pack reaches");
		if (policy && !fo.have_version)
			cmd_usage_error(usage, "--policy goes with --version");
		if (policy && (!*policy || strlen(policy) > DCR_POLICY_MAX || strchr(policy, '/')))
			cmd_usage_error(usage, "--policy wants a name of 1 to %d printable bytes without '/', not '%s'",
					DCR_POLICY_MAX, policy);
		for (const char *p = policy; p && *p; p++)
			if (*p < 0x21 || *p > 0x7e)
				cmd_usage_error(usage, "--policy wants printable bytes, not '%s'", policy);
		fo.policy = policy;
		return finalize(argc, argv, &so, &fo, sign, force);
	}
	if (gc) {
		if (!policy || argc != optind)
			cmd_usage_error(usage, "--gc STORE needs --policy NAME and nothing else");
		struct dcr_err e = {0};
		if (dcr_policy_check_name(policy, &e))
			cmd_usage_error(usage, "--policy wants one name component, not '%s'", policy);
		struct dcr_store *s;
		struct dcr_gc_opts go = {.keep = keep, .max_behind = max_behind, .dry_run = dry,
					 .parallel = (unsigned)xo.parallel, .removed = gc_report,
					 .behind = gc_behind, .bad_dense = gc_bad_dense};
		struct dcr_gc_result res;
		go.ctx = &go;
		if (dcr_store_open(gc, &so, &s, &e))
			cmd_die_err(&e, EXIT_FATAL);
		int r = dcr_policy_gc(s, policy, &go, &res, &e);
		dcr_store_close(s);
		if (r) {
			dcr_gc_result_release(&res);
			cmd_die_err(&e, EXIT_FATAL);
		}
		if (!cmd_quiet) {
			fprintf(stderr,
				"dcr-push: %s the packs of %llu version%s and %llu dense cop%s of '%s'",
				dry ? "would remove" : "removed", (unsigned long long)res.versions,
				res.versions == 1 ? "" : "s", (unsigned long long)res.dense,
				res.dense == 1 ? "y" : "ies", policy);
			if (!res.have_head)
				fprintf(stderr, " (no version is committed)");
			else if (res.held_by)
				fprintf(stderr, "; packs after v%llu stay for receiver '%s'",
					(unsigned long long)res.held_at, cmd_quote(res.held_by));
			fputc('\n', stderr);
		}
		dcr_gc_result_release(&res);
		return cmd_finish(EXIT_OK);
	}
	if (gc_only)
		cmd_usage_error(usage, "--keep and --max-behind go with --gc");
	if (policy || dry)
		cmd_usage_error(usage, "--policy and --dry-run go with --gc");
	if (argc - optind != 2)
		cmd_usage_error(usage, "need PACK and STORE/NAME");
	const char *pack = argv[optind], *dest = argv[optind + 1];
	struct dcr_err e = {0};
	char *surl, *name;
	if (dcr_split_store_url(dest, &surl, &name, &e))
		cmd_usage_error(usage, "%s", e.msg);
	struct dcr_pack_in *in = cmd_open_pack_input(pack, NULL);
	struct dcr_store *s;
	if (dcr_store_open(surl, &so, &s, &e))
		cmd_die_err(&e, EXIT_FATAL);
	xo.progress = cmd_progress_xfer;
	xo.progress_ctx = "push";
	struct dcr_xfer_stats st = {0};
	uint64_t ver;
	size_t nl = strlen(name), stem = dcr_dense_stem(name, nl);
	dcr_digest want;
	int r = 0, done = 0; /* done: the store holds this pack's step already */
	if (!force && !dcr_version_parse(name, nl, &ver))
		done = refuse_committed(s, surl, name, ver, in);
	else if (!force && stem < nl) {
		xo.dense = 1; /* NAME.dense is where receivers look for a dense copy */
		if (!dcr_version_parse(name, stem, &ver) &&
		    (r = dense_target(s, surl, ver, &want, in)) == 1)
			xo.want_target = &want;
		done = r == 2;
		r = 0;
	}
	if (!done)
		r = dcr_push(s, name, in, &xo, &st, &e);
	dcr_pack_in_close(in);
	dcr_store_close(s);
	if (r == DCR_ECONFLICT && xo.want_target) { /* a dense copy of another state */
		char why[sizeof(e.msg)];
		memcpy(why, e.msg, sizeof(why));
		dcr_err_set(&e, r,
			    "%s: not a dense copy of committed version %llu's state (refs/v%llu); push the dense copy of that version's checkpoint",
			    why, (unsigned long long)ver, (unsigned long long)ver);
		cmd_die_err(&e, EXIT_NEGATIVE);
	}
	if (r)
		cmd_die_err(&e, EXIT_FATAL);
	cmd_progress_end();
	if (!cmd_quiet && cmd_progress_on && !done)
		fprintf(stderr, "dcr-push: %u payloads and the manifest (or summary), %llu bytes, to %s\n",
			st.payloads, (unsigned long long)st.bytes, dest);
	free(surl);
	free(name);
	return cmd_finish(EXIT_OK);
}
