/* dcr-commit - bind a version to a state id: on a receiver, or in a store. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "dcr.h"
#include "common.h"

static const char usage[] =
	"usage: dcr-commit [options] CKPT [--store URL --policy NAME --receiver ID]\n"
	"       dcr-commit --status [--porcelain] CKPT\n"
	"       dcr-commit --log [--porcelain] [-z] CKPT\n"
	"       dcr-commit --store URL --policy NAME --version V --expect N [--timeout S]\n"
	"                  [--state HEX]\n"
	"       dcr-commit --store URL --policy NAME --status [--porcelain]\n"
	"\n"
	"On a receiver: advance CKPT's HEAD to the version and state the last\n"
	"dcr-apply reached, only if CKPT's files hold exactly that state now; with\n"
	"--store, also acknowledge it in the store as receiver ID.\n"
	"On the trainer (no CKPT): wait until N receivers acknowledged version V with\n"
	"its target state, then commit V in the store with compare-and-set (only if\n"
	"V-1 is committed and V is not), and print the state id the next dcr-diff must\n"
	"use as --base-id.\n"
	"\n"
	"      --version V      the version (receiver: default what dcr-apply recorded)\n"
	"      --full           re-hash every tensor instead of trusting the state cache\n"
	"      --store URL      the store (a directory, s3://..., http(s)://...)\n"
	"      --policy NAME    the policy's name in the store\n"
	"      --receiver ID    this receiver's name in acknowledgements\n"
	"      --expect N       acknowledgements needed (trainer)\n"
	"      --timeout S      wait at most S seconds for them (default 0: look once)\n"
	"      --state HEX      the state V must have (default: the target of the\n"
	"                       pack NAME/vV in the store)\n"
	"      --status         show where a receiver (or the store's policy) stands\n"
	"      --log            list a receiver's commits, oldest first\n"
	"      --porcelain      stable tab-separated output\n"
	"  -z                   with --log --porcelain: end records with NUL\n"
	"      --endpoint URL   S3 endpoint (default $DCR_S3_ENDPOINT, else AWS)\n"
	"      --cacert FILE    CA certificates for https\n"
	"  -q, --quiet          print nothing but errors (and the trainer's state id)\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 committed (or already committed); 1 refused: the files do not\n"
	"hold the applied state, the version would not move forward, the store's\n"
	"version was committed by someone else, or too few acknowledgements came;\n"
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
	struct dcr_head h;
	struct dcr_applied a;
	if (dcr_receiver_open(ckpt, 0, &rc, &e) || dcr_head_read(rc, &h, &e) ||
	    dcr_applied_read(rc, &a, &e))
		cmd_die_err(&e, EXIT_FATAL);
	char *jp = dcr_receiver_path(rc, "journal");
	int pending = jp && !access(jp, F_OK);
	free(jp);
	char hs[65] = "-", as[65] = "-";
	if (h.have)
		dcr_digest_hex(&h.state, hs);
	if (a.have)
		dcr_digest_hex(&a.target, as);
	int clean = a.have && h.have && !memcmp(a.target.b, h.state.b, 32);
	if (porcelain) {
		if (h.have)
			printf("head\t%llu\t%s\n", (unsigned long long)h.version, hs);
		else
			printf("head\t-\t-\n");
		if (a.have && a.have_version)
			printf("applied\t%llu\t%s\n", (unsigned long long)a.version, as);
		else
			printf("applied\t-\t%s\n", as);
		printf("pending\t%s\n", pending ? "journal" : clean || !a.have ? "none" : "commit");
	} else {
		if (h.have)
			printf("version %llu, state %s\n", (unsigned long long)h.version, hs);
		else
			printf("no committed version\n");
		if (pending)
			printf("an interrupted apply is pending: run dcr-apply --recover\n");
		else if (a.have && !clean) {
			if (a.have_version)
				printf("applied version %llu, state %s, not committed\n",
				       (unsigned long long)a.version, as);
			else
				printf("applied state %s, not committed (no version known)\n", as);
		}
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

static int check_policy(const char *policy)
{
	struct dcr_err e = {0};
	if (!policy[0] || strchr(policy, '/') || dcr_store_check_name(policy, &e))
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	cmd_init("dcr-commit", argc, argv);
	static const struct option longopts[] = {
		{"version", required_argument, NULL, 'V'},
		{"full", no_argument, NULL, 'F'},
		{"store", required_argument, NULL, 'S'},
		{"policy", required_argument, NULL, 'P'},
		{"receiver", required_argument, NULL, 'r'},
		{"expect", required_argument, NULL, 'x'},
		{"timeout", required_argument, NULL, 't'},
		{"state", required_argument, NULL, 's'},
		{"status", no_argument, NULL, 'T'},
		{"log", no_argument, NULL, 'L'},
		{"porcelain", no_argument, NULL, 'O'},
		{"endpoint", required_argument, NULL, 'E'},
		{"cacert", required_argument, NULL, 'C'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct dcr_commit_opts co = {0};
	struct dcr_store_opts so = {0};
	const char *store = NULL, *policy = NULL, *receiver = NULL;
	long expect = -1;
	double timeout = 0;
	dcr_digest state;
	int have_state = 0, status = 0, log = 0, porcelain = 0, c;
	char eol = '\n';
	while ((c = getopt_long(argc, argv, "zqh", longopts, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'V': {
			const char *s = optarg[0] == 'v' ? optarg + 1 : optarg;
			errno = 0;
			unsigned long long v = strtoull(s, &end, 10);
			if (errno || *end || !*s || *s == '-')
				cmd_usage_error(usage, "--version wants a number, not '%s'", optarg);
			co.have_version = 1;
			co.version = v;
			break;
		}
		case 'F': co.full = 1; break;
		case 'S': store = optarg; break;
		case 'P': policy = optarg; break;
		case 'r': receiver = optarg; break;
		case 'x':
			expect = strtol(optarg, &end, 10);
			if (*end || expect < 0 || expect > 1000000)
				cmd_usage_error(usage, "--expect wants a count, not '%s'", optarg);
			break;
		case 't':
			timeout = strtod(optarg, &end);
			if (*end || timeout < 0)
				cmd_usage_error(usage, "--timeout wants seconds, not '%s'", optarg);
			break;
		case 's':
			if (dcr_digest_parse_hex(optarg, &state))
				cmd_usage_error(usage, "--state wants 64 hex digits, not '%s'", optarg);
			have_state = 1;
			break;
		case 'T': status = 1; break;
		case 'L': log = 1; break;
		case 'O': porcelain = 1; break;
		case 'E': so.endpoint = optarg; break;
		case 'C': so.cacert = optarg; break;
		case 'z': eol = '\0'; break;
		case 'q': cmd_quiet = 1; break;
		case 'h': fputs(usage, stdout); return cmd_finish(EXIT_OK);
		default: fputs(usage, stderr); return EXIT_USAGE;
		}
	}
	co.fault = &cmd_fault;
	int nargs = argc - optind;
	if (nargs > 1)
		cmd_usage_error(usage, "at most one CKPT");
	if ((store != NULL) != (policy != NULL))
		cmd_usage_error(usage, "--store and --policy go together");
	if (policy && check_policy(policy))
		cmd_usage_error(usage, "--policy wants one name component, not '%s'", policy);
	struct dcr_err e = {0};

	if (nargs == 0) {
		/* the store side */
		if (!store)
			cmd_usage_error(usage, "need CKPT, or --store and --policy");
		struct dcr_store *s = open_store(store, &so);
		if (status) {
			struct dcr_head h;
			if (dcr_policy_head(s, policy, &h, &e))
				cmd_die_err(&e, EXIT_FATAL);
			char hs[65];
			if (h.have)
				dcr_digest_hex(&h.state, hs);
			if (porcelain && h.have)
				printf("head\t%llu\t%s\n", (unsigned long long)h.version, hs);
			else if (porcelain)
				printf("head\t-\t-\n");
			else {
				if (h.have)
					printf("policy %s: version %llu, state %s\n", policy,
					       (unsigned long long)h.version, hs);
				else
					printf("policy %s: nothing committed\n", policy);
			}
			dcr_store_close(s);
			return cmd_finish(EXIT_OK);
		}
		if (!co.have_version || expect < 0)
			cmd_usage_error(usage, "the trainer side needs --version and --expect");
		if (receiver || log || co.full)
			cmd_usage_error(usage, "--receiver, --log and --full need CKPT");
		if (!have_state) {
			char *mn = dcr_asprintf("%s/v%llu/%s", policy, (unsigned long long)co.version,
						DCR_MANIFEST_NAME);
			uint8_t *buf;
			size_t len;
			struct dcr_manifest m;
			if (!mn)
				cmd_die("out of memory");
			int r = dcr_store_get(s, mn, &buf, &len, &e);
			if (r == DCR_ENOTFOUND)
				cmd_die("no pack '%s' in '%s' to take the target state from; give --state",
					mn, store);
			if (r || dcr_manifest_parse(buf, len, mn, &m, &e))
				cmd_die_err(&e, EXIT_FATAL);
			state = m.target;
			dcr_manifest_release(&m);
			free(buf);
			free(mn);
		}
		struct dcr_policy_commit_opts po = {.version = co.version, .state = state,
						    .expect = (unsigned)expect, .timeout_s = timeout,
						    .fault = &cmd_fault};
		unsigned seen = 0;
		int r = dcr_policy_commit(s, policy, &po, &seen, &e);
		dcr_store_close(s);
		if (r)
			cmd_die_err(&e, exit_for(r));
		char hex[65];
		dcr_digest_hex(&state, hex);
		printf("%s\n", hex);
		if (!cmd_quiet)
			fprintf(stderr, "dcr-commit: policy %s: committed version %llu (%u acknowledgements)\n",
				policy, (unsigned long long)co.version, seen);
		return cmd_finish(EXIT_OK);
	}

	const char *ckpt = argv[optind];
	if (status && log)
		cmd_usage_error(usage, "--status or --log, not both");
	if (status)
		return receiver_status(ckpt, porcelain);
	if (log)
		return receiver_log(ckpt, porcelain, eol);
	if (expect >= 0 || have_state)
		cmd_usage_error(usage, "--expect and --state are for the trainer side (no CKPT)");
	if (store && !receiver)
		cmd_usage_error(usage, "--store on a receiver needs --receiver ID");
	if (receiver && !store)
		cmd_usage_error(usage, "--receiver needs --store and --policy");
	struct dcr_store *s = store ? open_store(store, &so) : NULL;
	struct dcr_receiver *rc;
	int r = dcr_receiver_open(ckpt, 1, &rc, &e);
	if (r)
		cmd_die_err(&e, cmd_exit_code(r));
	struct dcr_commit_result res;
	r = dcr_commit_local(rc, &co, &res, &e);
	if (r)
		cmd_die_err(&e, exit_for(r));
	if (s) {
		dcr_fault_point(&cmd_fault);
		if ((r = dcr_ack_put(s, policy, res.version, receiver, &res.state, &e)))
			cmd_die_err(&e, EXIT_FATAL);
		dcr_store_close(s);
	}
	dcr_receiver_close(rc);
	if (!cmd_quiet) {
		char hex[65];
		dcr_digest_hex(&res.state, hex);
		fprintf(stderr, "dcr-commit: %s version %llu, state %.12s%s\n",
			res.already ? "already at" : "committed", (unsigned long long)res.version, hex,
			store ? " (acknowledged)" : "");
	}
	return cmd_finish(EXIT_OK);
}
