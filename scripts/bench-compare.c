/* bench-compare.c - reference measurements for scripts/bench-diff.
 *
 * A benchmark helper, never a test. Three modes:
 *
 *   bench-compare cmp A B [A B ...]
 *	The plain two-buffer compare dcr-diff is measured against: read()
 *	each pair of files in 16 MiB buffers and count differing 16-bit
 *	elements with a simple loop. Prints "bytes=N elements=N differing=N"
 *	(bytes of the second file of each pair, summed). Bytes past the end
 *	of the shorter file count as differing elements.
 *
 *   bench-compare xor A B > OUT
 *	Write A XOR B to stdout (bytes past the end of the shorter file are
 *	copied as they are), for "bench-compare xor A B | zstd -1 -c | wc -c".
 *
 *   bench-compare time [-o REPORT] -- CMD [ARG...]
 *	Run CMD (stdin, stdout and stderr inherited) and write one line to
 *	REPORT (default stderr): "status=S wall_s=W user_s=U sys_s=S
 *	maxrss_kib=M peak_anon_kib=A". maxrss_kib is the kernel's peak
 *	resident set (what /usr/bin/time -f %M prints; it counts pages of
 *	mapped files); peak_anon_kib is RssAnon sampled from /proc every
 *	2 ms. Wall time is CLOCK_MONOTONIC from fork to reap. Exits with
 *	CMD's exit status (128 + signal number when a signal killed it).
 *
 * Exit status: 0 success (time: CMD's), 128 fatal error, 129 usage error.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The compare and XOR loops should vectorize, as a plain compare built by
 * anyone who cares would; GCC does that at -O3, not at the default -O2. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#define BUF (16u << 20)

static const char *prog = "bench-compare";

static void die(const char *fmt, const char *what)
{
	fprintf(stderr, "%s: error: ", prog);
	fprintf(stderr, fmt, what);
	fputc('\n', stderr);
	exit(128);
}

static void usage(FILE *f, int code)
{
	fprintf(f,
		"usage: bench-compare cmp A B [A B ...]\n"
		"       bench-compare xor A B > OUT\n"
		"       bench-compare time [-o REPORT] -- CMD [ARG...]\n"
		"\n"
		"Reference measurements for scripts/bench-diff (a benchmark, not a test).\n");
	exit(code);
}

static int open_in(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		fprintf(stderr, "%s: error: cannot open '%s': %s\n", prog, path, strerror(errno));
		exit(128);
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	return fd;
}

/* Fill buf with up to n bytes; returns the count, short only at end of file. */
static size_t read_full(int fd, void *buf, size_t n, const char *path)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fprintf(stderr, "%s: error: cannot read '%s': %s\n", prog, path, strerror(errno));
			exit(128);
		}
		if (r == 0)
			break;
		got += r;
	}
	return got;
}

static void *xalloc(size_t n)
{
	void *p = aligned_alloc(4096, n);
	if (!p)
		die("%s", "out of memory");
	return p;
}

static int do_cmp(int argc, char **argv)
{
	if (argc < 2 || argc % 2)
		usage(stderr, 129);
	uint16_t *a = xalloc(BUF), *b = xalloc(BUF);
	uint64_t bytes = 0, elems = 0, diff = 0;
	for (int i = 0; i < argc; i += 2) {
		int fa = open_in(argv[i]), fb = open_in(argv[i + 1]);
		for (;;) {
			size_t na = read_full(fa, a, BUF, argv[i]);
			size_t nb = read_full(fb, b, BUF, argv[i + 1]);
			size_t n = na < nb ? na : nb, m = na > nb ? na : nb;
			size_t ne = n / 2;
			uint64_t d = 0;
			for (size_t k = 0; k < ne; k++)
				d += a[k] != b[k];
			if (m > n) /* tail of the longer file, odd byte included */
				d += (m + 1) / 2 - ne;
			else if (n % 2)
				d += ((unsigned char *)a)[n - 1] != ((unsigned char *)b)[n - 1];
			diff += d;
			elems += (m + 1) / 2;
			bytes += nb;
			if (na < BUF && nb < BUF)
				break;
		}
		close(fa);
		close(fb);
	}
	printf("bytes=%llu elements=%llu differing=%llu\n", (unsigned long long)bytes,
	       (unsigned long long)elems, (unsigned long long)diff);
	free(a);
	free(b);
	return 0;
}

static void write_full(const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t w = write(1, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			die("cannot write to stdout: %s", strerror(errno));
		p += w;
		n -= w;
	}
}

static int do_xor(int argc, char **argv)
{
	if (argc != 2)
		usage(stderr, 129);
	if (isatty(1))
		die("%s", "refusing to write binary data to a terminal");
	uint64_t *a = xalloc(BUF), *b = xalloc(BUF);
	int fa = open_in(argv[0]), fb = open_in(argv[1]);
	for (;;) {
		size_t na = read_full(fa, a, BUF, argv[0]);
		size_t nb = read_full(fb, b, BUF, argv[1]);
		size_t m = na > nb ? na : nb;
		/* Zero the short side's tail so the longer one is copied as is. */
		if (na < m)
			memset((char *)a + na, 0, m - na);
		if (nb < m)
			memset((char *)b + nb, 0, m - nb);
		for (size_t k = 0; k < (m + 7) / 8; k++)
			a[k] ^= b[k];
		write_full(a, m);
		if (na < BUF && nb < BUF)
			break;
	}
	close(fa);
	close(fb);
	free(a);
	free(b);
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long rss_anon_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssAnon: %ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static int do_time(int argc, char **argv)
{
	const char *report = NULL;
	int c;
	optind = 0;
	while ((c = getopt(argc, argv, "+o:h")) != -1) {
		switch (c) {
		case 'o': report = optarg; break;
		case 'h': usage(stdout, 0); break;
		default: usage(stderr, 129);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		usage(stderr, 129);
	FILE *out = stderr;
	if (report && !(out = fopen(report, "w")))
		die("cannot open report: %s", strerror(errno));

	double t0 = now();
	pid_t pid = fork();
	if (pid < 0)
		die("cannot fork: %s", strerror(errno));
	if (pid == 0) {
		execvp(argv[0], argv);
		fprintf(stderr, "%s: error: cannot run '%s': %s\n", prog, argv[0], strerror(errno));
		_exit(127);
	}
	int pidfd = -1;
#ifdef SYS_pidfd_open
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
	long peak_anon = 0;
	int st = 0;
	struct rusage ru;
	for (;;) {
		long kib = rss_anon_kib(pid);
		if (kib > peak_anon)
			peak_anon = kib;
		pid_t r = wait4(pid, &st, WNOHANG, &ru);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			die("wait: %s", strerror(errno));
		if (pidfd >= 0) {
			struct pollfd p = { .fd = pidfd, .events = POLLIN };
			poll(&p, 1, 2); /* wakes at once when the child exits */
		} else {
			struct timespec ts = { 0, 2000000 };
			nanosleep(&ts, NULL);
		}
	}
	double wall = now() - t0;
	if (pidfd >= 0)
		close(pidfd);
	int status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	fprintf(out, "status=%d wall_s=%.6f user_s=%.6f sys_s=%.6f maxrss_kib=%ld peak_anon_kib=%ld\n",
		status, wall, ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6,
		ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6, ru.ru_maxrss, peak_anon);
	if (fflush(out) || ferror(out) || (out != stderr && fclose(out)))
		die("cannot write report: %s", strerror(errno));
	return status;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage(stderr, 129);
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
		usage(stdout, 0);
	int rc;
	if (!strcmp(argv[1], "cmp"))
		rc = do_cmp(argc - 2, argv + 2);
	else if (!strcmp(argv[1], "xor"))
		rc = do_xor(argc - 2, argv + 2);
	else if (!strcmp(argv[1], "time"))
		return do_time(argc - 1, argv + 1);
	else
		usage(stderr, 129);
	if (fflush(stdout) || ferror(stdout) || fclose(stdout))
		die("cannot write to stdout: %s", strerror(errno));
	return rc;
}
