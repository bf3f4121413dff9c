/* common.h - what every dcr command's main shares: messages, exit codes,
 * progress, output checks. */
#ifndef DCR_CMD_COMMON_H
#define DCR_CMD_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "dcr.h"

/* Exit codes (see each man page's EXIT STATUS). */
enum { EXIT_OK = 0, EXIT_NEGATIVE = 1, EXIT_FATAL = 128, EXIT_USAGE = 129 };

extern const char *cmd_name;
/* Fault points of this run, armed from $DCR_FAULT_AT by cmd_init. */
extern struct dcr_fault cmd_fault;

/* What a SIGBUS (a mapped file that failed under the command, see
 * common.c) adds to its message, or NULL: set by a command that can say
 * what to do next. */
extern const char *cmd_sigbus_hint;

/* Name the command, arm the fault points, and quiet getopt (opterr = 0):
 * its complaints go through cmd_bad_option, as usage errors. */
void cmd_init(const char *name, int argc, char **argv);
/* Messages on stderr are written through cmd_escape_write: whatever their
 * text holds from input (entry and tensor names, a server's reason phrase,
 * an S3 error message), it cannot drive the terminal. */
void cmd_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cmd_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print e's message and exit 128 (or `code`). */
__attribute__((noreturn)) void cmd_die_err(const struct dcr_err *e, int code);
__attribute__((noreturn)) void cmd_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
__attribute__((noreturn)) void cmd_usage_error(const char *usage, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Write s to f with the bytes that could drive a terminal quoted: C0
 * controls (tab, CR, ESC ...), DEL, C1 controls (raw, or U+0080..U+009F in
 * UTF-8) and bytes that are not UTF-8 become \t, \r, \n, \\ and \xNN;
 * printable ASCII and UTF-8 text pass unchanged. */
void cmd_escape_write(FILE *f, const char *s);
/* s as cmd_escape_write would show it, for printf: s itself when it needs
 * nothing, else a copy that stays valid for the next 7 calls. Listings on
 * stdout quote names from input with it (not with -z, whose records are
 * NUL-ended and taken raw). */
const char *cmd_quote(const char *s);

/* Exit code for a library error: 1 for a refused base, else 128 (a busy
 * receiver included, in every command). */
int cmd_exit_code(int r);

/* Progress on stderr: on when stderr is a terminal unless -q/--no-progress. */
extern int cmd_progress_on;
extern int cmd_quiet;
void cmd_progress_bytes(void *what, uint64_t done, uint64_t total);
void cmd_progress_end(void);
/* Take the progress line off the terminal (a newline elsewhere) before a
 * line of output; the next update draws it again. */
void cmd_progress_clear(void);
/* For transfers: bytes and payloads moved so far, and the rate. */
void cmd_progress_xfer(void *what, uint64_t bytes, uint64_t payloads);
/* A progress line of its own words (printf's format), drawn as the others
 * are: after a second of work, then at most five times a second, and
 * always when final. */
void cmd_progress_text(int final, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Binary input from standard input: exit 128 with "refusing to read WHAT
 * from a terminal" when it is one (a forgotten argument would wait). */
void cmd_refuse_tty_input(const char *what);
/* The same for an input named by PATH ("-": standard input) that the
 * library opens itself: a path naming a terminal (/dev/stdin or /dev/tty
 * at a prompt) is refused. */
void cmd_refuse_tty_path(const char *path, const char *what);
/* Open an output file, or stdout for "-" (refusing a terminal). */
int cmd_open_output(const char *path);
/* -o OUTPUT of a command that writes one file: standard output for NULL or
 * "-", else dcr_output_open (a file replaced atomically, or a stream such
 * as a FIFO or /dev/fd/N written in place), refusing a terminal; exits 128
 * on failure. Returns the descriptor; *what names the output in messages.
 * cmd_output_end commits it (r == 0) or drops it, and returns r or the
 * commit's error. */
struct dcr_atomic;
int cmd_output_begin(const char *output, struct dcr_atomic *a, const char **what);
int cmd_output_end(struct dcr_atomic *a, int r, struct dcr_err *e);
/* Binary input: PATH, or standard input for "-" (refusing a terminal,
 * what naming the input it wanted); exits 128 on failure. */
int cmd_open_input(const char *path, const char *what);
/* Packs: open PATH as a pack directory, or a tar stream ("-": standard
 * input); exits 128 on failure. With delta (dcr-pack --list), a file or
 * stream that starts as a delta stream (dcr_delta_sniff) is not opened:
 * NULL is returned, and *delta holds its descriptor and the first bytes
 * read of it. */
struct dcr_pack_in;
struct cmd_delta_input {
	int fd;
	uint8_t head[DCR_DELTA_SNIFF];
	size_t head_len;
};
struct dcr_pack_in *cmd_open_pack_input(const char *path, struct cmd_delta_input *delta);
/* Where a pack goes: "-" a tar stream on standard output (refusing a
 * terminal), a stream (dcr_output_is_stream: a FIFO, /dev/fd/N) a tar
 * stream written there, else a directory; returns 1 for a directory, else
 * 0. cmd_pack_output_close finishes the tar (r: the result so far;
 * returns the final one); where r is an error it removes a directory the
 * command was to create if it is still empty (a full disk at the first
 * payload leaves no new empty directory behind). */
struct dcr_pack_out;
struct dcr_tar_out;
int cmd_pack_output(const char *output, struct dcr_pack_out *out, struct dcr_tar_out **tar);
/* Exits (128, one line) when output would be a pack directory but names
 * something else that exists (a regular file): before any work is done. */
void cmd_pack_output_check(const char *output);
int cmd_pack_output_close(struct dcr_tar_out *tar, int r, struct dcr_err *e);

/* Store options shared by dcr-push and dcr-pull: --endpoint ('E'),
 * --cacert ('C'), -j/--parallel ('j'), --retries ('R'). Returns 1 if c was
 * one of them. */
struct dcr_store_opts;
int cmd_store_option(int c, const char *arg, struct dcr_store_opts *so, int *parallel,
		     const char *usage);
/* The options the pipeline commands share, for the default of their option
 * switch: -p/--progress, -n/--no-progress, -q/--quiet return; -h/--help
 * prints usage and exits 0; anything else is cmd_bad_option. Option
 * strings start with ':' so that getopt tells a missing argument (':')
 * from an unknown option ('?'). */
void cmd_common_option(int c, const char *usage);
/* What getopt_long returned for an option it could not take (c: '?' or
 * ':'): "error: unknown option '--foo'", "error: option '--store' needs an
 * argument", then usage on stderr, exit EXIT_USAGE. */
__attribute__((noreturn)) void cmd_bad_option(int c, const char *usage);
#define CMD_STORE_LONGOPTS \
	{"endpoint", required_argument, NULL, 'E'}, {"cacert", required_argument, NULL, 'C'}, \
	{"parallel", required_argument, NULL, 'j'}, {"retries", required_argument, NULL, 'R'}

/* Trust (dcr(7), TRUST): --verify-key PUB, repeatable, names the public
 * keys a pack must be signed by; without one, DCR_VERIFY_KEY does (one
 * path, or several separated by ':'). cmd_trust_key records an option's
 * path; cmd_trust loads the keys (exiting 128 when one does not load) and
 * returns the trust, or NULL when no key is named. */
void cmd_trust_key(const char *path);
const struct dcr_trust *cmd_trust(uint64_t min_version);
#define CMD_TRUST_LONGOPT {"verify-key", required_argument, NULL, 'K'}
/* --policy NAME (else DCR_POLICY): with a key, the policy a signed pack
 * must name (a usage error without a key, or where NAME is not 1 to
 * DCR_POLICY_MAX printable bytes without a blank or '/'). */
void cmd_trust_policy(const char *usage, const char *name);
/* The usage error of a --policy NAME that is no policy name. */
void cmd_check_policy(const char *usage, const char *name);
#define CMD_POLICY_LONGOPT {"policy", required_argument, NULL, 'Y'}

/* Flush and check stdout; exit 128 on a write error such as ENOSPC. */
int cmd_finish(int code);

/* A size: digits and an optional K, M or G (powers of 1024), 1 to 4 GiB;
 * 0 when malformed. */
uint64_t cmd_parse_size(const char *s);

/* Strict numbers for option opt (its name as typed: "--retries"): decimal
 * digits only, no sign, no space, no suffix, min <= value <= max; anything
 * else is a usage error naming opt. */
uint64_t cmd_parse_u64(const char *usage, const char *opt, const char *arg, uint64_t min,
		       uint64_t max);
/* Seconds: digits with an optional fraction ("0.5", "30"), at most a year. */
double cmd_parse_seconds(const char *usage, const char *opt, const char *arg);
/* A policy version: "42" or "v42". */
uint64_t cmd_parse_version(const char *usage, const char *opt, const char *arg);

#endif
