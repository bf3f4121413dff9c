/* common.c - shared command plumbing. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

const char *cmd_name = "dcr";
int cmd_progress_on;
int cmd_quiet;

void cmd_init(const char *name, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cmd_name = name;
	cmd_progress_on = isatty(2);
}

static void vmsg(const char *kind, const char *fmt, va_list ap)
{
	cmd_progress_end();
	fprintf(stderr, "%s: %s: ", cmd_name, kind);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
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

static int progress_shown;
static struct timespec progress_t0, progress_last;

static double secs(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

void cmd_progress_bytes(void *what, uint64_t done, uint64_t total)
{
	if (!cmd_progress_on || cmd_quiet)
		return;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!progress_shown) {
		progress_t0 = now;
		progress_last.tv_sec = 0;
	}
	if (progress_shown && done < total && secs(&progress_last, &now) < 0.2)
		return;
	progress_last = now;
	double el = secs(&progress_t0, &now);
	double rate = el > 0 ? (double)done / el / 1048576.0 : 0;
	fprintf(stderr, "\r%s: %s %llu/%llu MiB (%.0f%%), %.0f MiB/s   ", cmd_name,
		what ? (const char *)what : "", (unsigned long long)(done >> 20),
		(unsigned long long)(total >> 20), total ? 100.0 * (double)done / (double)total : 100.0,
		rate);
	progress_shown = 1;
}

void cmd_progress_end(void)
{
	if (progress_shown) {
		fputc('\n', stderr);
		progress_shown = 0;
	}
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
