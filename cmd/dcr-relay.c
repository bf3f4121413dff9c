/* dcr-relay - a node of a relay tree: serves its parents' objects to
 * children as an http:// store, each fetched once and checked; with
 * --apply, also applies a pack to its own receiver. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#include "common.h"
#include "dcr.h"

static const char usage[] =
	"usage: dcr-relay --listen ADDR:PORT [options] PARENT_URL...\n"
	"\n"
	"Serve the objects of PARENT_URL (any store URL: a directory, s3://, http://,\n"
	"or another relay) over HTTP on ADDR:PORT, as an http:// store that dcr-pull\n"
	"reads: each object is fetched from a parent once, however many children ask,\n"
	"and served to them while it arrives. Every payload piece is checked against\n"
	"the pack's manifest before it is passed on; a piece that fails is refetched\n"
	"from the next parent, never served. Parents are tried in order.\n"
	"Runs until SIGINT or SIGTERM.\n"
	"\n"
	"      --listen ADDR:PORT  where to serve (PORT 0: any free port)\n"
	"      --port-file FILE    write the port here once serving\n"
	"      --cache DIR         keep what passed through in DIR, across runs\n"
	"                          (default: a temporary directory)\n"
	"      --cache-size SIZE   bytes of finished objects kept, oldest packs\n"
	"                          dropped first (default 16G; K, M, G, T)\n"
	"  -j, --parallel N        objects fetched from the parents at once (default 4)\n"
	"      --window SIZE       bytes per ranged GET to a parent, rounded down to\n"
	"                          whole 1 MiB pieces, at most 1G (default 1M)\n"
	"      --no-prefetch       fetch payloads only when a child asks, not the\n"
	"                          whole pack once its manifest is asked for\n"
	"      --threads N         server threads (default 4)\n"
	"      --max-connections N connections at once (default 4096)\n"
	"      --max-per-ip N      connections from one address at once (default a\n"
	"                          quarter of --max-connections)\n"
	"      --idle-timeout S    close connections idle this long (default 60)\n"
	"      --timeout S         a parent that sends under 16 KiB/s this long has failed\n"
	"                          (default 30)\n"
	"      --retries N         retries of a failed request to one parent before\n"
	"                          the next is tried (default 2)\n"
	"      --endpoint URL      S3 endpoint (default $DCR_S3_ENDPOINT, else AWS)\n"
	"      --cacert FILE       CA certificates for https\n"
	"      --verify-key PUB    take only manifests signed by PUB (a signify public\n"
	"                          key; repeatable: any of them; default\n"
	"                          $DCR_VERIFY_KEY, paths separated by ':'): a parent\n"
	"                          serving another is passed over, nothing of its\n"
	"                          pack is served; --apply checks them too\n"
	"      --pack NAME         fetch the pack NAME at once, not when asked\n"
	"      --apply CKPT        apply --pack NAME to the receiver CKPT, as\n"
	"                          dcr-pull | dcr-apply would, while serving\n"
	"      --wait SECONDS      how long --pack waits for NAME to appear (default 0)\n"
	"  -q, --quiet             print nothing but errors\n"
	"  -h, --help              show this help\n"
	"\n"
	"Logs one line per object served to stderr. GET /.dcr/status answers what\n"
	"it holds and serves (JSON). Exit status: 0 stopped by a signal, 128 an\n"
	"error (or --apply failed or did not finish), 129 usage error.\n";

static void log_line(void *ctx, const char *line)
{
	(void)ctx;
	if (cmd_quiet && strncmp(line, "error: ", 7))
		return;
	flockfile(stderr); /* the relay's threads log at once: one line, whole */
	fputs("dcr-relay: ", stderr);
	cmd_escape_write(stderr, line); /* object names and parents' words */
	fputc('\n', stderr);
	funlockfile(stderr);
}

/* digits with an optional K, M, G or T (powers of 1024); 0 when malformed */
static uint64_t parse_big_size(const char *s)
{
	char *end;
	errno = 0;
	if (*s < '0' || *s > '9')
		return 0;
	unsigned long long v = strtoull(s, &end, 10);
	unsigned shift = 0;
	switch (*end) {
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	case 'T': case 't': shift = 40; end++; break;
	}
	if (errno || *end || !v || v > (UINT64_MAX >> 2) >> shift)
		return 0;
	return (uint64_t)v << shift;
}

static long parse_count(const char *s, long lo, long hi)
{
	char *end;
	errno = 0;
	if (*s < '0' || *s > '9')
		return -1;
	long v = strtol(s, &end, 10);
	return errno || *end || v < lo || v > hi ? -1 : v;
}

/* --pack and --apply: the pack streams from the relay's table into a
 * pipe, the receiver applies from the other end. */
struct job {
	pthread_t main; /* told (SIGUSR1) when the job ends */
	struct dcr_relay *r;
	const char *pack, *ckpt;
	double wait_s;
	int fd; /* the pipe's write end, or -1: fetch only */
	int rc;
	struct dcr_err e;
	struct dcr_xfer_stats st;
};

static int null_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
		      struct dcr_err *e)
{
	(void)ctx, (void)name, (void)buf, (void)len, (void)e;
	return 0;
}

static void *pull_thread(void *arg)
{
	struct job *j = arg;
	struct dcr_tar_out *tar = NULL;
	struct dcr_pack_out out = {.entry = null_entry};
	if (j->fd >= 0) {
		if ((j->rc = dcr_tar_out_open(j->fd, &tar, &j->e)))
			goto out;
		out = (struct dcr_pack_out){.entry = dcr_tar_out_entry, .ctx = tar,
					    .begin = dcr_tar_out_begin, .data = dcr_tar_out_data,
					    .end = dcr_tar_out_end};
	}
	j->rc = dcr_relay_pull(j->r, j->pack, out, j->wait_s, &j->st, &j->e);
	if (tar) {
		if (j->rc)
			dcr_tar_out_close(tar, NULL);
		else
			j->rc = dcr_tar_out_close(tar, &j->e);
	}
out:
	if (j->fd >= 0)
		close(j->fd);
	else
		pthread_kill(j->main, SIGUSR1);
	return NULL;
}

struct apply {
	pthread_t main;
	struct dcr_receiver *rc;
	const char *ckpt, *pack;
	int fd;
	int r;
	struct dcr_err e;
	struct dcr_apply_result res;
};

static void *apply_thread(void *arg)
{
	struct apply *a = arg;
	struct dcr_apply_opts o = {.fault = &cmd_fault, .trust = cmd_trust(0)};
	struct dcr_head head;
	if ((a->r = dcr_head_read(a->rc, &head, &a->e)))
		goto out;
	if (head.have)
		o.head = &head.state;
	uint64_t v;
	if (!dcr_version_from_name(a->pack, &v)) {
		o.have_version = 1;
		o.version = v;
	}
	a->r = dcr_apply_input(a->rc, NULL, a->fd, &o, &a->res, &a->e);
out:
	close(a->fd);
	pthread_kill(a->main, SIGUSR1);
	return NULL;
}

static void report(const struct job *j, const struct apply *a, int *code)
{
	if (a->r || j->rc) {
		/* the receiver's refusal says most; else why the stream broke */
		cmd_error("cannot apply '%s' to '%s': %s", a->pack, a->ckpt,
			  a->r && (!j->rc || a->r == DCR_EBASE) ? a->e.msg : j->e.msg);
		*code = a->r == DCR_EBASE ? EXIT_NEGATIVE : EXIT_FATAL;
		return;
	}
	if (cmd_quiet)
		return;
	char t[65];
	dcr_digest_hex(&a->res.target, t);
	if (a->res.already)
		fprintf(stderr, "dcr-relay: '%s' is already at the target %.12s\n", a->ckpt, t);
	else
		fprintf(stderr,
			"dcr-relay: applied '%s' to '%s': %llu changes in %llu items, %llu tensors verified; state %.12s\n",
			a->pack, a->ckpt, (unsigned long long)a->res.changes,
			(unsigned long long)a->res.items, (unsigned long long)a->res.tensors_checked, t);
}

/* What the options name besides the relay's and the store's own. */
struct args {
	const char *port_file, *pack, *ckpt;
	double wait_s;
};

static void parse_options(int argc, char **argv, struct dcr_relay_opts *ro,
			  struct dcr_store_opts *so, struct args *a)
{
	static const struct option longopts[] = {
		{"listen", required_argument, NULL, 'L'},
		{"port-file", required_argument, NULL, 'F'},
		{"cache", required_argument, NULL, 'c'},
		{"cache-size", required_argument, NULL, 'S'},
		{"window", required_argument, NULL, 'w'},
		{"no-prefetch", no_argument, NULL, 'N'},
		{"threads", required_argument, NULL, 'T'},
		{"max-connections", required_argument, NULL, 'M'},
		{"max-per-ip", required_argument, NULL, 'i'},
		{"idle-timeout", required_argument, NULL, 'I'},
		{"timeout", required_argument, NULL, 't'},
		{"pack", required_argument, NULL, 'P'},
		{"apply", required_argument, NULL, 'A'},
		{"wait", required_argument, NULL, 'W'},
		CMD_TRUST_LONGOPT,
		CMD_STORE_LONGOPTS,
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	long v;
	int c;
	while ((c = getopt_long(argc, argv, "j:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'L': {
			/* the shape here, a usage error; the address is resolved
			 * when the relay starts */
			const char *col = strrchr(optarg, ':');
			if (!col || parse_count(col + 1, 0, 65535) < 0)
				cmd_usage_error(usage, "--listen wants ADDR:PORT (PORT 0..65535), not '%s'",
						optarg);
			ro->listen = optarg;
			break;
		}
		case 'F': a->port_file = optarg; break;
		case 'c': ro->cache_dir = optarg; break;
		case 'S':
			if (!(ro->cache_size = parse_big_size(optarg)))
				cmd_usage_error(usage, "bad --cache-size '%s'", optarg);
			break;
		case 'w':
			/* rounded down to whole 1 MiB pieces, at least one, as
			 * dcr-pull --part-size is */
			if (!(ro->window = parse_big_size(optarg)) || ro->window > (1ull << 30))
				cmd_usage_error(usage, "bad --window '%s' (at most 1G)", optarg);
			break;
		case 'N': ro->no_prefetch = 1; break;
		case 'T':
			if ((v = parse_count(optarg, 1, 256)) < 0)
				cmd_usage_error(usage, "--threads wants 1..256, not '%s'", optarg);
			ro->threads = (int)v;
			break;
		case 'M':
			if ((v = parse_count(optarg, 1, 1000000)) < 0)
				cmd_usage_error(usage, "--max-connections wants 1..1000000, not '%s'",
						optarg);
			ro->max_connections = (unsigned)v;
			break;
		case 'i':
			if ((v = parse_count(optarg, 1, 1000000)) < 0)
				cmd_usage_error(usage, "--max-per-ip wants 1..1000000, not '%s'", optarg);
			ro->max_per_ip = (unsigned)v;
			break;
		case 'I':
			if ((v = parse_count(optarg, 1, 86400)) < 0)
				cmd_usage_error(usage, "--idle-timeout wants 1..86400 seconds, not '%s'",
						optarg);
			ro->idle_timeout_s = (unsigned)v;
			break;
		case 't':
			if ((v = parse_count(optarg, 1, 86400)) < 0)
				cmd_usage_error(usage, "--timeout wants 1..86400 seconds, not '%s'",
						optarg);
			so->timeout_s = (int)v;
			break;
		case 'K': cmd_trust_key(optarg); break;
		case 'P': a->pack = optarg; break;
		case 'A': a->ckpt = optarg; break;
		case 'W': {
			char *end;
			errno = 0;
			a->wait_s = strtod(optarg, &end);
			if (errno || *end || end == optarg || !(a->wait_s >= 0))
				cmd_usage_error(usage, "--wait wants seconds, not '%s'", optarg);
			break;
		}
		default:
			if (!cmd_store_option(c, optarg, so, &ro->parallel, usage))
				cmd_common_option(c, usage);
			break;
		}
	}
	if (!ro->listen)
		cmd_usage_error(usage, "need --listen ADDR:PORT");
	if (optind >= argc)
		cmd_usage_error(usage, "need a PARENT_URL");
	if (a->ckpt && !a->pack)
		cmd_usage_error(usage, "--apply needs --pack NAME");
	ro->trust = cmd_trust(0);
	ro->parents = (const char *const *)argv + optind;
	ro->nparents = (size_t)(argc - optind);
	ro->store = so;
}

/* The process's setup: signals for main alone (descriptors up to the
 * hard limit come with cmd_init). */
static void setup_process(sigset_t *sigs)
{
	/* Signals go to main's sigwait alone; every thread inherits the mask. */
	sigemptyset(sigs);
	sigaddset(sigs, SIGINT);
	sigaddset(sigs, SIGTERM);
	sigaddset(sigs, SIGHUP);
	sigaddset(sigs, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* Say where the relay serves, and write --port-file. */
static void announce(struct dcr_relay *r, const struct dcr_relay_opts *ro, const struct args *a)
{
	struct dcr_err e = {0};
	if (!cmd_quiet) {
		char *shown = dcr_url_redact(ro->parents[0]);
		fprintf(stderr, "dcr-relay: serving on port %u, parents: %s%s\n", dcr_relay_port(r),
			shown ? shown : "?", ro->nparents > 1 ? " (and failovers)" : "");
		free(shown);
	}
	if (a->port_file) {
		char buf[16];
		int n = snprintf(buf, sizeof(buf), "%u\n", dcr_relay_port(r));
		if (dcr_write_output(a->port_file, buf, (size_t)n, &e)) {
			dcr_relay_stop(r);
			cmd_die_err(&e, EXIT_FATAL);
		}
	}
}

int main(int argc, char **argv)
{
	cmd_init("dcr-relay", argc, argv);
	struct dcr_store_opts so = {.retries = 2};
	struct dcr_relay_opts ro = {.log = log_line};
	struct args args = {0};
	parse_options(argc, argv, &ro, &so, &args);
	const char *pack = args.pack, *ckpt = args.ckpt;
	sigset_t sigs;
	setup_process(&sigs);

	struct dcr_err e = {0};
	struct dcr_receiver *rc = NULL;
	if (ckpt && (dcr_receiver_open(ckpt, 1, &rc, &e)))
		cmd_die_err(&e, EXIT_FATAL);
	struct dcr_relay *r;
	if (dcr_relay_start(&ro, &r, &e))
		cmd_die_err(&e, EXIT_FATAL);
	announce(r, &ro, &args);

	struct job j = {.main = pthread_self(), .r = r, .pack = pack, .wait_s = args.wait_s, .fd = -1};
	struct apply a = {.main = pthread_self(), .rc = rc, .ckpt = ckpt, .pack = pack, .fd = -1};
	pthread_t pt, at;
	int have_pt = 0, have_at = 0;
	if (ckpt) {
		int fds[2];
		if (pipe(fds))
			cmd_die("cannot make a pipe: %s", strerror(errno));
		j.fd = fds[1];
		a.fd = fds[0];
		if (pthread_create(&at, NULL, apply_thread, &a))
			cmd_die("cannot start a thread");
		have_at = 1;
	}
	if (pack) {
		if (pthread_create(&pt, NULL, pull_thread, &j))
			cmd_die("cannot start a thread");
		have_pt = 1;
	}
	int code = EXIT_OK, sig;
	while (!sigwait(&sigs, &sig) && sig == SIGUSR1) {
		/* --pack (and --apply) ended: say how, and keep serving */
		if (!have_pt)
			continue;
		if (have_at) {
			pthread_join(at, NULL);
			/* the receiver's lock goes before the report: readers
			 * (dcr-verify) take it shared once the apply is done */
			dcr_receiver_close(rc);
			rc = NULL;
		}
		pthread_join(pt, NULL);
		have_pt = 0;
		if (have_at)
			report(&j, &a, &code);
		else if (j.rc)
			code = EXIT_FATAL, cmd_error("cannot fetch '%s': %s", pack, j.e.msg);
		else if (!cmd_quiet)
			fprintf(stderr, "dcr-relay: fetched '%s': %u payloads, %llu bytes\n", pack,
				j.st.payloads, (unsigned long long)j.st.bytes);
		have_at = 0;
	}
	dcr_relay_stop(r); /* cancels a --pack still running */
	if (have_pt) {
		pthread_join(pt, NULL);
		if (have_at) {
			pthread_join(at, NULL);
			cmd_error("stopped before '%s' was applied to '%s'", pack, ckpt);
		} else if (j.rc && j.rc != -ECANCELED) {
			cmd_error("cannot fetch '%s': %s", pack, j.e.msg);
		}
		code = EXIT_FATAL;
	}
	if (rc)
		dcr_receiver_close(rc);
	return cmd_finish(code);
}
