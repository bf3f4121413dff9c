/* dcr - front end: `dcr X args` runs `dcr-X args`, as git does. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
	"usage: dcr COMMAND [args]\n"
	"\n"
	"Commands (each also runs alone as dcr-COMMAND; see dcr-COMMAND(1)):\n"
	"  diff     compare two checkpoints, write a delta\n"
	"  pack     group delta streams into payloads and a manifest\n"
	"  push     upload a pack to a store\n"
	"  pull     download a pack from a store\n"
	"  apply    apply a delta or pack to a receiver in place\n"
	"  commit   advance a receiver's or a store's version\n"
	"  verify   print a state id, or compare checkpoints exactly\n"
	"  layout   generate and check layout maps\n"
	"  relay    serve a store over HTTP to children, each object fetched once\n"
	"  keygen   make a key pair that signs packs (dcr-pack --sign)\n"
	"\n"
	"'dcr help COMMAND' shows COMMAND's options; see dcr(7) for the concepts.\n"
	"\n"
	"Exit status: the command's; 129 usage error (no such command).\n";

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs(usage, stderr);
		return 129;
	}
	/* `dcr help CMD` is `dcr CMD --help`, as git's is its page */
	char *help_argv[] = {argv[0], argv[argc > 2 ? 2 : 1], "--help", NULL};
	if (!strcmp(argv[1], "help") && argc == 3) {
		argv = help_argv;
	} else if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		fputs(usage, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("dcr %s\n", PACKAGE_VERSION);
		return 0;
	}
	const char *cmd = argv[1];
	if (strchr(cmd, '/') || cmd[0] == '-') {
		fprintf(stderr, "dcr: error: '%s' is not a dcr command\n", cmd);
		return 129;
	}
	char prog[PATH_MAX];
	snprintf(prog, sizeof(prog), "dcr-%s", cmd);
	/* Prefer the directory this front end lives in, then PATH. */
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			char full[PATH_MAX * 2];
			*slash = '\0';
			snprintf(full, sizeof(full), "%s/%s", self, prog);
			if (access(full, X_OK) == 0) {
				argv[1] = prog;
				execv(full, argv + 1);
			}
		}
	}
	argv[1] = prog;
	execvp(prog, argv + 1);
	int err = errno;
	if (err == ENOENT)
		fprintf(stderr, "dcr: error: '%s' is not a dcr command (no %s here or on PATH; 'dcr --help' lists them)\n",
			cmd, prog);
	else
		fprintf(stderr, "dcr: error: cannot run %s: %s\n", prog, strerror(err));
	return err == ENOENT ? 129 : 128;
}
