/* dcr-commit - bind a version to a state id: on a receiver, or in a store. */
#include "config.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "dcr.h"
#include "common.h"

static const char usage[] =
	"usage: dcr-commit [options] CKPT [--store URL --policy NAME --receiver ID]\n"
	"       dcr-commit --status [--porcelain] CKPT\n"
	"       dcr-commit --log [--porcelain] [-z] CKPT\n"
	"       dcr-commit --store URL --policy NAME --version V --expect N [--timeout S]\n"
	"                  [--state HEX] [--max-failed N]\n"
	"       dcr-commit --store URL --policy NAME --status [--porcelain]\n"
	"       dcr-commit --store URL --policy NAME --receiver ID --version V --failed TEXT\n"
	"\n"
	"On a receiver: advance CKPT's HEAD to the version and state the last\n"
	"dcr-apply reached, only if CKPT's files hold exactly that state now; with\n"
	"--store, also acknowledge it in the store as receiver ID.\n"
	"On the trainer (no CKPT): wait until N receivers acknowledged version V with\n"
	"its target state, then commit V in the store with compare-and-set (only if\n"
	"V-1 is committed and V is not), and print the state id the next dcr-diff must\n"
	"use as --base-id; a receiver's failure report (--failed) ends the wait at once.\n"
	"\n"
	"      --version V      the version (receiver: default what dcr-apply recorded,\n"
	"                       else HEAD + 1)\n"
	"      --full           re-hash every tensor instead of trusting the state cache\n"
	"      --threads N      hash with N threads (default: one per core)\n"
	"      --store URL      the store (a directory, s3://..., http(s)://...)\n"
	"      --policy NAME    the policy's name in the store\n"
	"      --receiver ID    this receiver's name in acknowledgements\n"
	"      --expect N       acknowledgements needed (trainer)\n"
	"      --timeout S      wait at most S seconds for them (default 0: look once)\n"
	"      --max-failed N   trainer: go on waiting while at most N receivers reported\n"
	"                       failing V (default 0)\n"
	"      --failed TEXT    a receiver that gave up on version V tells the trainer\n"
	"                       why (in place of its acknowledgement)\n"
	"      --state HEX      the state V must have (default: the target of the\n"
	"                       pack NAME/vV in the store)\n"
	"      --status         show where a receiver (or the store's policy: its head,\n"
	"                       receivers, packs and dense copies) stands\n"
	"      --log            list a receiver's commits, oldest first\n"
	"      --porcelain      stable tab-separated output\n"
	"  -z                   with --log --porcelain: end records with NUL\n"
	"      --endpoint URL   S3 endpoint (default $DCR_S3_ENDPOINT, else AWS)\n"
	"      --cacert FILE    CA certificates for https\n"
	"      --progress       show progress on stderr (default at a terminal, after a\n"
	"                       second): the trainer's acknowledgements as they come,\n"
	"                       a receiver's bytes hashed with --full\n"
	"      --no-progress    do not show progress\n"
	"  -q, --quiet          print nothing but errors (and the trainer's state id)\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 committed (or already committed with this state); 1 refused:\n"
	"the files do not hold the applied state, the version would not move forward,\n"
	"the store's version was committed with another state, too few\n"
	"acknowledgements came, or a receiver reported failing the version;\n"
	"128 any other error; 129 usage error.\n";

static int exit_for(int r)
{
	return r == DCR_EBASE || r == DCR_ECONFLICT || r == DCR_ENOTFOUND ? EXIT_NEGATIVE
									  : EXIT_FATAL;
}

static int receiver_status(const char *ckpt, int porcelain)
{
	struct dcr_err e = {0};
	struct dcr_receiver *rc;
	struct dcr_commit_status st;
	if (dcr_receiver_open(ckpt, 0, &rc, &e) || dcr_commit_status(rc, &st, &e))
		cmd_die_err(&e, EXIT_FATAL);
	const struct dcr_head *h = &st.head;
	const struct dcr_applied *a = &st.applied;
	char hs[65] = "-", as[65] = "-";
	if (h->have)
		dcr_digest_hex(&h->state, hs);
	if (a->have)
		dcr_digest_hex(&a->target, as);
	if (porcelain) {
		if (h->have)
			printf("head\t%llu\t%s\n", (unsigned long long)h->version, hs);
		else
			printf("head\t-\t-\n");
		if (a->have && a->have_version)
			printf("applied\t%llu\t%s\n", (unsigned long long)a->version, as);
		else
			printf("applied\t-\t%s\n", as);
		printf("pending\t%s\n", st.journal ? "journal" : st.uncommitted ? "commit" : "none");
	} else {
		if (h->have)
			printf("version %llu, state %s\n", (unsigned long long)h->version, hs);
		else
			printf("no committed version\n");
		if (st.journal)
			printf("an interrupted apply is pending: run dcr-apply --recover\n");
		else if (st.uncommitted && a->have_version)
			printf("applied version %llu, state %s, not committed\n",
			       (unsigned long long)a->version, as);
		else if (st.uncommitted)
			printf("applied state %s, not committed (no version known)\n", as);
	}
	dcr_receiver_close(rc);
	return cmd_finish(EXIT_OK);
}

static int receiver_log(const char *ckpt, int porcelain, char eol)
{
	struct dcr_err e = {0};
	struct dcr_receiver *rc;
	struct dcr_commit_entry *v;
	size_t n;
	if (dcr_receiver_open(ckpt, 0, &rc, &e) || dcr_commit_log(rc, &v, &n, &e))
		cmd_die_err(&e, EXIT_FATAL);
	for (size_t i = 0; i < n; i++) {
		char s[65], at[33];
		dcr_digest_hex(&v[i].state, s);
		dcr_hex(v[i].attempt, 16, at);
		if (porcelain) {
			printf("%llu\t%s\t%s\t%lld%c", (unsigned long long)v[i].version, s, at,
			       v[i].time, eol);
		} else {
			printf("version %-6llu state %s attempt %s\n", (unsigned long long)v[i].version,
			       s, at);
		}
	}
	free(v);
	dcr_receiver_close(rc);
	return cmd_finish(EXIT_OK);
}

static struct dcr_store *open_store(const char *url, const struct dcr_store_opts *so)
{
	struct dcr_err e = {0};
	struct dcr_store *s;
	if (dcr_store_open(url, so, &s, &e))
		cmd_die_err(&e, EXIT_FATAL);
	return s;
}

/* What the command line asked for. */
struct args {
	struct dcr_commit_opts co;
	struct dcr_store_opts so;
	const char *store, *policy, *receiver, *ckpt, *failed;
	long long expect; /* -1: not given */
	long long max_failed; /* -1: not given */
	double timeout;
	dcr_digest state;
	int have_state, status, log, porcelain, threads;
	char eol;
};

static void parse_args(int argc, char **argv, struct args *a)
{
	static const struct option longopts[] = {
		{"version", required_argument, NULL, 'V'},
		{"full", no_argument, NULL, 'F'},
		{"threads", required_argument, NULL, 'N'},
		{"store", required_argument, NULL, 'S'},
		{"policy", required_argument, NULL, 'P'},
		{"receiver", required_argument, NULL, 'r'},
		{"expect", required_argument, NULL, 'x'},
		{"timeout", required_argument, NULL, 't'},
		{"state", required_argument, NULL, 's'},
		{"max-failed", required_argument, NULL, 'm'},
		{"failed", required_argument, NULL, 'f'},
		{"status", no_argument, NULL, 'T'},
		{"log", no_argument, NULL, 'L'},
		{"porcelain", no_argument, NULL, 'O'},
		{"endpoint", required_argument, NULL, 'E'},
		{"cacert", required_argument, NULL, 'C'},
		{"progress", no_argument, NULL, 'p'},
		{"no-progress", no_argument, NULL, 'n'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;
	*a = (struct args){.expect = -1, .max_failed = -1, .eol = '\n'};
	while ((c = getopt_long(argc, argv, ":zqh", longopts, NULL)) != -1) {
		switch (c) {
		case 'V':
			a->co.version = cmd_parse_version(usage, "--version", optarg);
			a->co.have_version = 1;
			break;
		case 'F': a->co.full = 1; break;
		case 'N': a->threads = (int)cmd_parse_u64(usage, "--threads", optarg, 1, 64); break;
		case 'S': a->store = optarg; break;
		case 'P': a->policy = optarg; break;
		case 'r': a->receiver = optarg; break;
		case 'x': a->expect = (long long)cmd_parse_u64(usage, "--expect", optarg, 0, 1000000); break;
		case 't': a->timeout = cmd_parse_seconds(usage, "--timeout", optarg); break;
		case 's':
			if (dcr_digest_parse_hex(optarg, &a->state))
				cmd_usage_error(usage, "--state wants 64 hex digits, not '%s'", optarg);
			a->have_state = 1;
			break;
		case 'm':
			a->max_failed = (long long)cmd_parse_u64(usage, "--max-failed", optarg, 0, 1000000);
			break;
		case 'f': a->failed = optarg; break;
		case 'T': a->status = 1; break;
		case 'L': a->log = 1; break;
		case 'O': a->porcelain = 1; break;
		case 'E': a->so.endpoint = optarg; break;
		case 'C': a->so.cacert = optarg; break;
		case 'z': a->eol = '\0'; break;
		default: cmd_common_option(c, usage); break;
		}
	}
	a->co.fault = &cmd_fault;
	if (argc - optind > 1)
		cmd_usage_error(usage, "at most one CKPT");
	a->ckpt = argc - optind == 1 ? argv[optind] : NULL;
	if ((a->store != NULL) != (a->policy != NULL))
		cmd_usage_error(usage, "--store and --policy go together");
	struct dcr_err e = {0};
	if (a->policy && dcr_policy_check_name(a->policy, &e))
		cmd_usage_error(usage, "--policy wants one name component, not '%s'", a->policy);
	if (!a->ckpt && !a->store)
		cmd_usage_error(usage, "need CKPT, or --store and --policy");
}

/* Print versions v[0..n) (ascending) as runs: "v2-v5, v7". */
static void print_runs(const uint64_t *v, size_t n)
{
	if (!n)
		fputs("none", stdout);
	for (size_t i = 0; i < n;) {
		size_t k = i;
		while (k + 1 < n && v[k + 1] == v[k] + 1)
			k++;
		printf("%sv%llu", i ? ", " : "", (unsigned long long)v[i]);
		if (k > i)
			printf("-v%llu", (unsigned long long)v[k]);
		i = k + 1;
	}
	putchar('\n');
}

/* Where the policy stands in the store: its committed head, each
 * receiver's latest acknowledgement, the packs and dense copies there. */
static int store_status(const struct args *a)
{
	struct dcr_err e = {0};
	struct dcr_store *s = open_store(a->store, &a->so);
	struct dcr_policy_survey sv;
	if (dcr_policy_survey(s, a->policy, &sv, &e))
		cmd_die_err(&e, EXIT_FATAL);
	const struct dcr_head *h = &sv.head;
	char hs[65];
	if (h->have)
		dcr_digest_hex(&h->state, hs);
	if (a->porcelain) {
		if (h->have)
			printf("head\t%llu\t%s\n", (unsigned long long)h->version, hs);
		else
			printf("head\t-\t-\n");
		for (size_t i = 0; i < sv.nlatest; i++) {
			dcr_digest_hex(&sv.latest[i].state, hs);
			printf("receiver\t%s\t%llu\t%s\n", cmd_quote(sv.latest[i].receiver),
			       (unsigned long long)sv.latest[i].version, hs);
		}
		for (size_t i = 0; i < sv.nfailed; i++)
			printf("failed\t%s\t%llu\t%s\n", cmd_quote(sv.failed[i].receiver),
			       (unsigned long long)sv.failed[i].version, cmd_quote(sv.failed[i].error));
		for (size_t i = 0; i < sv.npacks; i++)
			printf("pack\t%llu\n", (unsigned long long)sv.packs[i]);
		for (size_t i = 0; i < sv.ndense; i++)
			printf("dense\t%llu\n", (unsigned long long)sv.dense[i]);
		for (size_t i = 0; i < sv.nbad_dense; i++)
			printf("bad-dense\t%llu\t%s\n", (unsigned long long)sv.bad_dense[i].version,
			       cmd_quote(sv.bad_dense[i].why));
	} else {
		if (h->have)
			printf("policy %s: version %llu, state %s\n", a->policy,
			       (unsigned long long)h->version, hs);
		else
			printf("policy %s: nothing committed\n", a->policy);
		for (size_t i = 0; i < sv.nlatest; i++) {
			uint64_t v = sv.latest[i].version;
			printf("receiver %s: v%llu", cmd_quote(sv.latest[i].receiver),
			       (unsigned long long)v);
			if (h->have && v < h->version)
				printf(", %llu behind", (unsigned long long)(h->version - v));
			putchar('\n');
		}
		for (size_t i = 0; i < sv.nfailed; i++)
			printf("receiver %s: failed v%llu: %s\n", cmd_quote(sv.failed[i].receiver),
			       (unsigned long long)sv.failed[i].version, cmd_quote(sv.failed[i].error));
		fputs("packs: ", stdout);
		print_runs(sv.packs, sv.npacks);
		fputs("dense copies: ", stdout);
		print_runs(sv.dense, sv.ndense);
		for (size_t i = 0; i < sv.nbad_dense; i++)
			printf("dense copy v%llu: not relied on: %s\n",
			       (unsigned long long)sv.bad_dense[i].version,
			       cmd_quote(sv.bad_dense[i].why));
	}
	dcr_policy_survey_release(&sv);
	dcr_store_close(s);
	return cmd_finish(EXIT_OK);
}

/* The trainer's wait, as it goes: "policy P: v3: 1 of 2 acknowledged, 4 s
 * of 600 s" (seconds waited, of --timeout) */
static void acks_progress(void *ctx, unsigned acks, unsigned expect, unsigned failed,
			  double waited_s)
{
	const struct args *a = ctx;
	char fl[48] = "", tm[64] = "";
	if (failed)
		snprintf(fl, sizeof(fl), ", %u failed", failed);
	if (a->timeout > 0)
		snprintf(tm, sizeof(tm), ", %.0f s of %g s", waited_s, a->timeout);
	cmd_progress_text(acks >= expect, "policy %s: v%llu: %u of %u acknowledged%s%s",
			  cmd_quote(a->policy), (unsigned long long)a->co.version, acks, expect, fl, tm);
}

/* The trainer: wait for the acknowledgements, commit V in the store, print
 * the state id the next diff starts from. */
static int trainer_commit(struct args *a)
{
	struct dcr_err e = {0};
	if (!a->co.have_version || a->expect < 0)
		cmd_usage_error(usage, "the trainer side needs --version and --expect");
	if (a->receiver || a->log || a->co.full || a->threads)
		cmd_usage_error(usage, "--receiver, --log, --full and --threads need CKPT (or --failed)");
	struct dcr_store *s = open_store(a->store, &a->so);
	struct dcr_policy_commit_opts po = {.version = a->co.version,
					    .expect = (unsigned)a->expect,
					    .timeout_s = a->timeout, .fault = &cmd_fault,
					    .progress = acks_progress, .progress_ctx = a,
					    .max_failed = a->max_failed < 0 ? 0 : (unsigned)a->max_failed};
	/* the pack's target and attempt (a receiver's report of another
	 * attempt is stale); with --state the pack need not be there */
	dcr_digest target;
	int r = dcr_policy_pack(s, a->policy, a->co.version, &target, po.attempt, &e);
	if (r && !a->have_state)
		cmd_die_err(&e, EXIT_FATAL);
	po.have_attempt = !r;
	po.state = a->have_state ? a->state : target;
	a->state = po.state;
	unsigned seen = 0;
	r = dcr_policy_commit(s, a->policy, &po, &seen, &e);
	/* V committed already, by this trainer before it was restarted or
	 * by another: with the state asked for, the commit is done (a
	 * retried step exits 0, as a retried push does); with another, it
	 * is refused */
	dcr_digest d;
	struct dcr_err e2 = {0};
	int again = r == DCR_ECONFLICT &&
		    !dcr_policy_ref(s, a->policy, a->co.version, &d, &e2) &&
		    !memcmp(&d, &po.state, sizeof(d));
	dcr_store_close(s);
	cmd_progress_end();
	if (r && !again)
		cmd_die_err(&e, exit_for(r));
	char hex[65];
	dcr_digest_hex(&a->state, hex);
	printf("%s\n", hex);
	if (!cmd_quiet && again)
		fprintf(stderr, "dcr-commit: policy %s: version %llu is committed with this state already: nothing to do\n",
			a->policy, (unsigned long long)a->co.version);
	else if (!cmd_quiet)
		fprintf(stderr, "dcr-commit: policy %s: committed version %llu (%u acknowledgements)\n",
			a->policy, (unsigned long long)a->co.version, seen);
	return cmd_finish(EXIT_OK);
}

/* A receiver: advance HEAD, and with --store acknowledge it. */
static int receiver_commit(struct args *a)
{
	struct dcr_err e = {0};
	if (a->expect >= 0 || a->have_state)
		cmd_usage_error(usage, "--expect and --state are for the trainer side (no CKPT)");
	if (a->store && !a->receiver)
		cmd_usage_error(usage, "--store on a receiver needs --receiver ID");
	if (a->receiver && !a->store)
		cmd_usage_error(usage, "--receiver needs --store and --policy");
	struct dcr_store *s = a->store ? open_store(a->store, &a->so) : NULL;
	struct dcr_receiver *rc;
	int r = dcr_receiver_open(a->ckpt, 1, &rc, &e);
	if (r)
		cmd_die_err(&e, cmd_exit_code(r));
	rc->threads = a->threads;
	if (cmd_progress_on) {
		a->co.progress = cmd_progress_bytes;
		a->co.progress_ctx = "hashed";
	}
	struct dcr_commit_result res;
	r = dcr_commit_receiver(rc, s, a->policy, a->receiver, &a->co, &res, &e);
	cmd_progress_end();
	if (r)
		cmd_die_err(&e, exit_for(r));
	dcr_store_close(s);
	dcr_receiver_close(rc);
	if (!cmd_quiet) {
		char hex[65];
		dcr_digest_hex(&res.state, hex);
		if (res.from_head && !res.already)
			fprintf(stderr, "dcr-commit: no version recorded: committing HEAD + 1 = %llu\n",
				(unsigned long long)res.version);
		fprintf(stderr, "dcr-commit: %s version %llu, state %.12s%s\n",
			res.already ? "already at" : "committed", (unsigned long long)res.version, hex,
			a->store ? " (acknowledged)" : "");
	}
	return cmd_finish(EXIT_OK);
}

/* A receiver that gave up on version V: its failure report, which ends
 * the trainer's wait with the reason. */
static int receiver_failed(const struct args *a)
{
	struct dcr_err e = {0};
	if (!a->store || !a->receiver || !a->co.have_version)
		cmd_usage_error(usage, "--failed needs --store, --policy, --receiver and --version");
	if (a->ckpt || a->expect >= 0 || a->have_state || a->status || a->log || a->max_failed >= 0)
		cmd_usage_error(usage, "--failed goes with --store, --policy, --receiver and --version alone");
	struct dcr_store *s = open_store(a->store, &a->so);
	/* the attempt that failed, where the store has its pack: a trainer
	 * that publishes V again does not take this report for its own */
	dcr_digest target;
	uint8_t attempt[16];
	int known = !dcr_policy_pack(s, a->policy, a->co.version, &target, attempt, NULL);
	int r = dcr_nack_put(s, a->policy, a->co.version, a->receiver, known ? attempt : NULL,
			     a->failed, &e);
	dcr_store_close(s);
	if (r)
		cmd_die_err(&e, EXIT_FATAL);
	if (!cmd_quiet)
		fprintf(stderr, "dcr-commit: reported '%s' failing version %llu to policy %s\n",
			cmd_quote(a->receiver), (unsigned long long)a->co.version, a->policy);
	return cmd_finish(EXIT_OK);
}

int main(int argc, char **argv)
{
	cmd_init("dcr-commit", argc, argv);
	struct args a;
	parse_args(argc, argv, &a);
	if (a.failed)
		return receiver_failed(&a);
	if (a.max_failed >= 0 && (a.ckpt || a.status))
		cmd_usage_error(usage, "--max-failed is for the trainer side");
	if (!a.ckpt)
		return a.status ? store_status(&a) : trainer_commit(&a);
	if (a.status && a.log)
		cmd_usage_error(usage, "--status or --log, not both");
	if (a.status)
		return receiver_status(a.ckpt, a.porcelain);
	if (a.log)
		return receiver_log(a.ckpt, a.porcelain, a.eol);
	return receiver_commit(&a);
}
