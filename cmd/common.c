/* common.c - shared command plumbing. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include "common.h"
#include "dcr.h"

const char *cmd_name = "dcr";
int cmd_progress_on;
int cmd_quiet;
struct dcr_fault cmd_fault;
static int cmd_argc;
static char **cmd_argv;

/* A pack directory this command is to create (-o DIR, absent at the
 * start): removed again if the command fails or is interrupted while it is
 * still empty (a pull's payloads, kept for its retry, keep it). */
static const char *made_dir;

/* An interrupted command (^C, a job scheduler's SIGTERM, a closed
 * terminal) removes its temporary files, then dies of the signal as it
 * would have (a caller sees the same status). */
static void on_fatal_signal(int sig)
{
	dcr_atomic_remove_all();
	if (made_dir)
		rmdir(made_dir);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void remove_temporaries_on_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old, sa = {.sa_handler = on_fatal_signal};
		sigemptyset(&sa.sa_mask);
		/* one ignored by whoever started us (nohup, a background job
		 * of a script) stays ignored */
		if (!sigaction(sigs[i], NULL, &old) && old.sa_handler != SIG_IGN)
			sigaction(sigs[i], &sa, NULL);
	}
}

const char *cmd_sigbus_hint;

static void write_str(const char *s)
{
	size_t n = strlen(s);
	while (n) {
		ssize_t w = write(2, s, n);
		if (w <= 0)
			break;
		s += w;
		n -= (size_t)w;
	}
}

/* A file read or written through a mapping that ends under the reader
 * (another process truncated it: a trainer saving its next checkpoint
 * over the one dcr-diff reads, with O_TRUNC), or whose page the kernel
 * cannot read (an I/O error) or allocate (a full copy-on-write or thin
 * filesystem), raises SIGBUS in the thread that touched it. Said as an
 * error, temporaries removed, exit 128, not "Bus error". */
static void on_sigbus(int sig)
{
	(void)sig;
	dcr_atomic_remove_all();
	write_str(cmd_name);
	write_str(": error: a file mapped for reading or writing failed under it "
		  "(cut short by another process, an I/O error, or no room on a "
		  "filesystem that allocates on write); stopped");
	if (cmd_sigbus_hint) {
		write_str("; ");
		write_str(cmd_sigbus_hint);
	}
	write_str("\n");
	_exit(EXIT_FATAL);
}

void cmd_init(const char *name, int argc, char **argv)
{
	remove_temporaries_on_signals();
	struct sigaction sa = {.sa_handler = on_sigbus, .sa_flags = SA_RESETHAND};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
	/* Descriptors up to the hard limit, not the soft one (often 1024):
	 * a checkpoint's files are each held open while it is read (a model
	 * of thousands of shards), and a relay holds one per connection.
	 * dcr waits with poll, never select, so descriptors past 1024 are
	 * safe. */
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	cmd_argc = argc;
	cmd_argv = argv;
	opterr = 0;
	cmd_name = name;
	cmd_progress_on = isatty(2);
	dcr_fault_from_env(&cmd_fault);
	/* The library's workers take and free buffers of hundreds of KiB to
	 * tens of MiB (an item's decoded changes, a band read for hashing)
	 * thousands of times a refit. glibc maps those above its threshold
	 * afresh, and its threads' arenas give freed pages back to the
	 * kernel, so each reuse faulted every page in again: 42,000 faults,
	 * a fifth of dcr-apply's CPU on a 1 GB 3% step. Kept in the heap up
	 * to 64 MiB free: 7,300 faults, 2.2 -> 1.8 CPU s; a step that
	 * changes every value of 384 MB applied in 3.5-4.4 s against 8.8,
	 * its peak anonymous memory 227 -> 226-233 MiB (a pack's 147 -> 202;
	 * tests/t0206 bounds both at 260). 32 MiB is glibc's largest map
	 * threshold; trimming at 16 or 32 MiB lost most of the gain, at 128
	 * MiB it grew the peak to 257. A process that links libdcr chooses
	 * for itself. */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

/* The length of the UTF-8 sequence at p that is a printable character
 * (not a C1 control, not an overlong form or a surrogate), or 0. */
static size_t utf8_ok(const unsigned char *p)
{
	unsigned c = p[0];
	size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
	if (!n || c > 0xf4)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if (n == 2 && c == 0xc2 && p[1] < 0xa0)
		return 0; /* U+0080..U+009F: C1 controls (CSI is U+009B) */
	if (n == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0)))
		return 0;
	if (n == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90)))
		return 0;
	return n;
}

/* Append the quoted form of s to b (or only count it, b NULL); the bytes
 * it takes. */
static size_t escape(char *b, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t o = 0;
	while (*p) {
		size_t n = *p >= 0x20 && *p < 0x7f ? 1 : *p >= 0x80 ? utf8_ok(p) : 0;
		if (n && *p != '\\') {
			if (b)
				memcpy(b + o, p, n);
			o += n;
			p += n;
			continue;
		}
		char t[5];
		int k = *p == '\\' ? snprintf(t, sizeof(t), "\\\\")
		      : *p == '\t' ? snprintf(t, sizeof(t), "\\t")
		      : *p == '\n' ? snprintf(t, sizeof(t), "\\n")
		      : *p == '\r' ? snprintf(t, sizeof(t), "\\r")
				    : snprintf(t, sizeof(t), "\\x%02x", *p);
		if (b)
			memcpy(b + o, t, (size_t)k);
		o += (size_t)k;
		p++;
	}
	return o;
}

void cmd_escape_write(FILE *f, const char *s)
{
	size_t n = escape(NULL, s);
	char *b = malloc(n + 1);
	if (!b) {
		fputs("(a message, not shown: out of memory)", f);
		return;
	}
	escape(b, s);
	fwrite(b, 1, n, f);
	free(b);
}

const char *cmd_quote(const char *s)
{
	static char *ring[8];
	static unsigned next;
	size_t n = escape(NULL, s);
	if (n == strlen(s) && !strchr(s, '\\'))
		return s;
	char *b = malloc(n + 1);
	if (!b)
		return "(not shown: out of memory)";
	escape(b, s);
	b[n] = '\0';
	free(ring[next % 8]);
	ring[next++ % 8] = b;
	return b;
}

static void vmsg(const char *kind, const char *fmt, va_list ap)
{
	cmd_progress_end();
	char *text = NULL;
	if (vasprintf(&text, fmt, ap) < 0)
		text = NULL;
	flockfile(stderr); /* one line, whole, among threads' (stderr is unbuffered) */
	fprintf(stderr, "%s: %s: ", cmd_name, kind);
	if (text)
		cmd_escape_write(stderr, text);
	else
		fputs(fmt, stderr);
	fputc('\n', stderr);
	funlockfile(stderr);
	free(text);
}

void cmd_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg("error", fmt, ap);
	va_end(ap);
}

void cmd_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg("warning", fmt, ap);
	va_end(ap);
}

void cmd_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg("error", fmt, ap);
	va_end(ap);
	exit(EXIT_FATAL);
}

void cmd_die_err(const struct dcr_err *e, int code)
{
	cmd_error("%s", e->msg);
	exit(code ? code : EXIT_FATAL);
}

void cmd_usage_error(const char *usage, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg("error", fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s", usage);
	exit(EXIT_USAGE);
}

int cmd_exit_code(int r)
{
	return r == DCR_EBASE ? EXIT_NEGATIVE : EXIT_FATAL;
}

/* A phase's progress: started (its start time set), drawn (a line drawn
 * since; its time in progress_last), shown (a line stands on stderr now:
 * cmd_progress_clear takes it off and the phase goes on). */
static int progress_started, progress_drawn, progress_shown, progress_forced;
static struct timespec progress_t0, progress_last, progress_now;

static double secs(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

/* Whether to draw a line now (progress_now), the last one (final) always
 * once drawing began: lines at most five a second, and without
 * --progress none in a phase's first second, so that quick work at a
 * terminal leaves no line behind. */
static int progress_due(int final)
{
	if (!cmd_progress_on || cmd_quiet)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &progress_now);
	if (!progress_started) {
		progress_started = 1;
		progress_t0 = progress_now;
	}
	if (!progress_drawn)
		return progress_forced || secs(&progress_t0, &progress_now) >= 1.0;
	return final || secs(&progress_last, &progress_now) >= 0.2;
}

static void progress_drew(void)
{
	progress_drawn = progress_shown = 1;
	progress_last = progress_now;
}

void cmd_progress_bytes(void *what, uint64_t done, uint64_t total)
{
	if (!progress_due(done >= total))
		return;
	double el = secs(&progress_t0, &progress_now);
	double rate = el > 0 ? (double)done / el / 1048576.0 : 0;
	fprintf(stderr, "\r%s: %s %llu/%llu MiB (%.0f%%), %.0f MiB/s   ", cmd_name,
		what ? (const char *)what : "", (unsigned long long)(done >> 20),
		(unsigned long long)(total >> 20), total ? 100.0 * (double)done / (double)total : 100.0,
		rate);
	progress_drew();
}

void cmd_progress_xfer(void *what, uint64_t bytes, uint64_t payloads)
{
	/* every payload's line once drawing began: the last stands at the end */
	if (!progress_due(1))
		return;
	double el = secs(&progress_t0, &progress_now);
	fprintf(stderr, "\r%s: %s %llu MiB, %llu payloads, %.0f MiB/s   ", cmd_name,
		what ? (const char *)what : "", (unsigned long long)(bytes >> 20),
		(unsigned long long)payloads, el > 0 ? (double)bytes / el / 1048576.0 : 0.0);
	progress_drew();
}

void cmd_progress_text(int final, const char *fmt, ...)
{
	if (!progress_due(final))
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "\r%s: ", cmd_name);
	vfprintf(stderr, fmt, ap);
	fputs("   ", stderr);
	va_end(ap);
	progress_drew();
}

void cmd_progress_end(void)
{
	if (progress_shown)
		fputc('\n', stderr);
	progress_started = progress_drawn = progress_shown = 0;
}

void cmd_progress_clear(void)
{
	if (progress_shown)
		fputs(isatty(2) ? "\r\033[K" : "\n", stderr);
	progress_shown = 0;
}

/* Exit when fd, opened from path (NULL: standard input), is a terminal. */
static void refuse_tty_fd(int fd, const char *path, const char *what)
{
	if (!isatty(fd))
		return;
	if (path)
		cmd_die("refusing to read %s from a terminal ('%s'; name a file, or pipe one in)",
			what, path);
	cmd_die("refusing to read %s from a terminal (name a file, or pipe one in)", what);
}

void cmd_refuse_tty_input(const char *what)
{
	refuse_tty_fd(0, NULL, what);
}

int cmd_open_output(const char *path)
{
	if (!path || !strcmp(path, "-")) {
		if (isatty(1))
			cmd_die("refusing to write binary data to a terminal (use -o FILE or a pipe)");
		return 1;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		cmd_die("cannot open '%s': %s", path, strerror(errno));
	return fd;
}

int cmd_output_begin(const char *output, struct dcr_atomic *a, const char **what)
{
	*a = (struct dcr_atomic){.fd = -1};
	if (!output || !strcmp(output, "-")) {
		*what = "standard output";
		return cmd_open_output("-");
	}
	struct dcr_err e = {0};
	if (dcr_output_open(a, output, &e))
		cmd_die_err(&e, EXIT_FATAL);
	if (a->direct && isatty(a->fd))
		cmd_die("refusing to write binary data to a terminal ('%s')", output);
	*what = output;
	return a->fd;
}

int cmd_output_end(struct dcr_atomic *a, int r, struct dcr_err *e)
{
	if (!a->final)
		return r;
	if (r) {
		dcr_atomic_abort(a);
		return r;
	}
	return dcr_atomic_commit(a, e);
}

int cmd_finish(int code)
{
	cmd_progress_end();
	if (fflush(stdout) || ferror(stdout) || fclose(stdout)) {
		if (errno != EPIPE)
			cmd_error("cannot write to standard output: %s", strerror(errno));
		return EXIT_FATAL;
	}
	return code;
}

void cmd_refuse_tty_path(const char *path, const char *what)
{
	struct stat sb;
	if (!strcmp(path, "-")) {
		cmd_refuse_tty_input(what);
		return;
	}
	/* only a character device can be a terminal: a FIFO is not opened
	 * here, where a reader come and gone could cost its writer a SIGPIPE */
	if (stat(path, &sb) || !S_ISCHR(sb.st_mode))
		return;
	int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0) {
		refuse_tty_fd(fd, path, what);
		close(fd);
	}
}

int cmd_open_input(const char *path, const char *what)
{
	if (!strcmp(path, "-")) {
		cmd_refuse_tty_input(what);
		return 0;
	}
	int fd = open(path, O_RDONLY | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		cmd_die("cannot open '%s': %s", path, strerror(errno));
	refuse_tty_fd(fd, path, what);
	return fd;
}

struct dcr_pack_in *cmd_open_pack_input(const char *path, struct cmd_delta_input *delta)
{
	struct dcr_err e = {0};
	struct dcr_pack_in *in = NULL;
	struct stat sb;
	if (strcmp(path, "-") && !stat(path, &sb) && S_ISDIR(sb.st_mode)) {
		if (dcr_pack_in_open_dir(path, &in, &e))
			cmd_die_err(&e, EXIT_FATAL);
		return in;
	}
	int fd = cmd_open_input(path, delta ? "a pack or delta" : "a pack");
	/* the first bytes, read to tell a delta from a tar stream, are handed
	 * to the tar reader, which keeps pointing at them */
	static struct cmd_delta_input own;
	struct cmd_delta_input *h = delta ? delta : &own;
	const char *what = strcmp(path, "-") ? path : "standard input";
	size_t got = 0;
	int d = dcr_delta_sniff(fd, h->head, &got, what, &e);
	if (d < 0)
		cmd_die_err(&e, EXIT_FATAL);
	if (!got)
		cmd_die("%s is empty: no %s", what, delta ? "pack or delta to list" : "pack");
	h->fd = fd;
	h->head_len = got;
	if (d && delta)
		return NULL;
	if (d)
		cmd_die("%s is a delta, not a pack: make it a pack first (dcr-pack DELTA | dcr-push - STORE/NAME)",
			what);
	if (dcr_pack_in_open_tar(fd, h->head, got, &in, &e))
		cmd_die("%s is %s%s", what, delta ? "not a delta, and " : "", e.msg);
	return in;
}

void cmd_pack_output_check(const char *output)
{
	struct stat sb;
	if (strcmp(output, "-") && !dcr_output_is_stream(output) && !stat(output, &sb) &&
	    !S_ISDIR(sb.st_mode))
		cmd_die("'%s' exists and is not a directory: -o names a pack directory, or '-', a FIFO or /dev/stdout for a tar stream",
			output);
}

int cmd_pack_output(const char *output, struct dcr_pack_out *out, struct dcr_tar_out **tar)
{
	*tar = NULL;
	cmd_pack_output_check(output);
	if (strcmp(output, "-") && !dcr_output_is_stream(output)) {
		struct stat sb;
		if (lstat(output, &sb) && errno == ENOENT)
			made_dir = output;
		*out = (struct dcr_pack_out){.entry = dcr_pack_dir_entry,
					     .ctx = (void *)output,
					     .stage = dcr_pack_dir_stage,
					     .commit = dcr_pack_dir_commit,
					     .drop = dcr_pack_dir_drop};
		return 1;
	}
	struct dcr_atomic a;
	const char *what;
	/* standard output or a stream, which ends with the process */
	int fd = cmd_output_begin(output, &a, &what);
	free(a.final);
	struct dcr_err e = {0};
	if (dcr_tar_out_open(fd, tar, &e))
		cmd_die_err(&e, EXIT_FATAL);
	*out = (struct dcr_pack_out){.entry = dcr_tar_out_entry,
				     .ctx = *tar,
				     .begin = dcr_tar_out_begin,
				     .data = dcr_tar_out_data,
				     .end = dcr_tar_out_end};
	return 0;
}

int cmd_pack_output_close(struct dcr_tar_out *tar, int r, struct dcr_err *e)
{
	if (!tar) {
		if (r && made_dir)
			rmdir(made_dir);
		made_dir = NULL;
		return r;
	}
	if (r) {
		dcr_tar_out_close(tar, NULL);
		return r;
	}
	return dcr_tar_out_close(tar, e);
}

void cmd_common_option(int c, const char *usage)
{
	switch (c) {
	case 'p': cmd_progress_on = progress_forced = 1; return;
	case 'n': cmd_progress_on = 0; return;
	case 'q': cmd_quiet = 1; return;
	case 'h': fputs(usage, stdout); exit(cmd_finish(EXIT_OK));
	default: cmd_bad_option(c, usage);
	}
}

void cmd_bad_option(int c, const char *usage)
{
	/* getopt leaves optind past the word it complained about, except in
	 * the middle of a cluster of short options ("-xq"), where optopt
	 * names the letter */
	const char *w = optind > 0 && optind <= cmd_argc ? cmd_argv[optind - 1] : NULL;
	int is_long = w && !strncmp(w, "--", 2) && w[2] &&
		      (c == ':' || !optopt || strchr(w, '='));
	int n = 0;
	if (is_long)
		n = (int)strcspn(w, "=");
	if (c == ':') {
		if (is_long)
			cmd_usage_error(usage, "option '%.*s' needs an argument", n, w);
		cmd_usage_error(usage, "option '-%c' needs an argument", optopt);
	}
	if (is_long && optopt)
		cmd_usage_error(usage, "option '%.*s' takes no argument", n, w);
	if (is_long)
		cmd_usage_error(usage, "unknown option '%.*s'", n, w);
	if (optopt > ' ' && optopt < 127)
		cmd_usage_error(usage, "unknown option '-%c'", optopt);
	cmd_usage_error(usage, "unknown option '%s'", w ? w : "?");
}

int cmd_store_option(int c, const char *arg, struct dcr_store_opts *so, int *parallel,
		     const char *usage)
{
	switch (c) {
	case 'E': so->endpoint = arg; return 1;
	case 'C': so->cacert = arg; return 1;
	case 'j':
		*parallel = (int)cmd_parse_u64(usage, "--parallel", arg, 1, 256);
		so->parallel = *parallel;
		return 1;
	case 'R':
		so->retries = (int)cmd_parse_u64(usage, "--retries", arg, 0, 100);
		if (!so->retries)
			so->retries = -1; /* 0: no retries */
		return 1;
	default:
		return 0;
	}
}

static const char **trust_paths;
static size_t trust_npaths;

void cmd_trust_key(const char *path)
{
	const char **v = realloc(trust_paths, (trust_npaths + 1) * sizeof(*v));
	if (!v)
		cmd_die("out of memory");
	trust_paths = v;
	v[trust_npaths++] = path;
}

static const char *trust_policy;

void cmd_check_policy(const char *usage, const char *name)
{
	if (!dcr_policy_name_ok(name, strlen(name)))
		cmd_usage_error(usage, "--policy wants a name of 1 to %d printable bytes without a blank or '/', not '%s'",
				DCR_POLICY_MAX, name);
}

void cmd_trust_policy(const char *usage, const char *name)
{
	cmd_check_policy(usage, name);
	trust_policy = name;
}

const struct dcr_trust *cmd_trust(uint64_t min_version)
{
	static struct dcr_trust t;
	static struct dcr_pubkey *keys;
	static char *env; /* the paths DCR_VERIFY_KEY names point into it */
	static int loaded;
	if (loaded) /* once: later calls (other threads) get the same */
		return t.nkeys ? &t : NULL;
	loaded = 1;
	int from_env = 0;
	if (!trust_npaths) {
		const char *v = getenv("DCR_VERIFY_KEY");
		from_env = v && *v;
		if (from_env) {
			if (!(env = dcr_strdup(v)))
				cmd_die("out of memory");
			char *save = NULL;
			for (char *p = strtok_r(env, ":", &save); p; p = strtok_r(NULL, ":", &save))
				cmd_trust_key(p);
		}
	}
	if (!trust_npaths) {
		if (trust_policy)
			cmd_die("--policy needs a key to check it against (--verify-key or DCR_VERIFY_KEY)");
		return NULL;
	}
	if (!trust_policy) {
		const char *v = getenv("DCR_POLICY");
		if (v && *v && !dcr_policy_name_ok(v, strlen(v)))
			cmd_die("DCR_POLICY is not a policy name (1 to %d printable bytes without a blank or '/'): '%s'",
				DCR_POLICY_MAX, v);
		trust_policy = v && *v ? v : NULL;
	}
	if (!(keys = dcr_calloc(trust_npaths, sizeof(*keys))))
		cmd_die("out of memory");
	for (size_t i = 0; i < trust_npaths; i++) {
		struct dcr_err e = {0};
		if (dcr_pubkey_load(trust_paths[i], &keys[i], &e))
			cmd_die("%s%s", e.msg, from_env ? " (a key DCR_VERIFY_KEY names)" : "");
	}
	t = (struct dcr_trust){.keys = keys, .nkeys = trust_npaths, .min_version = min_version,
			       .policy = trust_policy};
	return &t;
}

uint64_t cmd_parse_size(const char *s)
{
	char *end;
	if (*s < '0' || *s > '9')
		return 0;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mul = 1;
	if (*end == 'K' || *end == 'k')
		mul = 1 << 10, end++;
	else if (*end == 'M' || *end == 'm')
		mul = 1 << 20, end++;
	else if (*end == 'G' || *end == 'g')
		mul = 1 << 30, end++;
	if (errno || *end || !v || v > (4ull << 30) / mul)
		return 0;
	return v * mul;
}

/* The digits of s: 0 and *v, or -1 when s is empty, has anything but
 * digits, or overflows. */
static int parse_digits(const char *s, uint64_t *v)
{
	uint64_t x = 0;
	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		uint64_t d = (uint64_t)(*s - '0');
		if (x > (UINT64_MAX - d) / 10)
			return -1;
		x = x * 10 + d;
	}
	*v = x;
	return 0;
}

uint64_t cmd_parse_u64(const char *usage, const char *opt, const char *arg, uint64_t min,
		       uint64_t max)
{
	uint64_t v;
	if (parse_digits(arg, &v))
		cmd_usage_error(usage, "'%s' is not a number for %s", arg, opt);
	if (v < min || v > max)
		cmd_usage_error(usage, "%s wants %llu..%llu, not '%s'", opt, (unsigned long long)min,
				(unsigned long long)max, arg);
	return v;
}

double cmd_parse_seconds(const char *usage, const char *opt, const char *arg)
{
	const char *dot = strchr(arg, '.');
	size_t ni = dot ? (size_t)(dot - arg) : strlen(arg);
	int ok = ni > 0 || (dot && dot[1]);
	for (const char *p = arg; ok && *p; p++)
		ok = (*p >= '0' && *p <= '9') || p == dot;
	if (!ok)
		cmd_usage_error(usage, "'%s' is not a number of seconds for %s", arg, opt);
	double v = strtod(arg, NULL);
	if (v > 365.0 * 86400)
		cmd_usage_error(usage, "%s wants at most a year (31536000 s), not '%s'", opt, arg);
	return v;
}

uint64_t cmd_parse_version(const char *usage, const char *opt, const char *arg)
{
	uint64_t v;
	if (parse_digits(arg[0] == 'v' ? arg + 1 : arg, &v))
		cmd_usage_error(usage, "%s wants a version (42 or v42), not '%s'", opt, arg);
	return v;
}
