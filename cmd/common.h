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

void cmd_init(const char *name, int argc, char **argv);
void cmd_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cmd_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print e's message and exit 128 (or `code`). */
__attribute__((noreturn)) void cmd_die_err(const struct dcr_err *e, int code);
__attribute__((noreturn)) void cmd_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
__attribute__((noreturn)) void cmd_usage_error(const char *usage, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Exit code for a library error: 1 for a refused base, else 128. */
int cmd_exit_code(int r);

/* Progress on stderr: on when stderr is a terminal unless -q/--no-progress. */
extern int cmd_progress_on;
extern int cmd_quiet;
void cmd_progress_bytes(void *what, uint64_t done, uint64_t total);
void cmd_progress_end(void);

/* Open an output file, or stdout for "-" (refusing a terminal). */
int cmd_open_output(const char *path);
/* Flush and check stdout; exit 128 on a write error such as ENOSPC. */
int cmd_finish(int code);

#endif
