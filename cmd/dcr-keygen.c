/* dcr-keygen - make an Ed25519 key pair for signing packs, in signify's
 * formats. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "dcr.h"
#include "common.h"

static const char usage[] =
	"usage: dcr-keygen -p KEY.pub -s KEY.sec\n"
	"\n"
	"Make an Ed25519 key pair for signing packs (dcr-pack --sign KEY.sec) and\n"
	"checking them (--verify-key KEY.pub), in OpenBSD signify's file formats:\n"
	"signify-openbsd -V -p KEY.pub -m manifest.dcrm checks a dcr pack, and keys\n"
	"made by signify -G -n work with dcr. The secret key is not encrypted; it is\n"
	"created mode 0600 and an existing file is never overwritten.\n"
	"\n"
	"  -p, --public FILE    where the public key goes\n"
	"  -s, --secret FILE    where the secret key goes\n"
	"  -q, --quiet          print nothing but errors\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 made, 128 error (a file exists, cannot write), 129 usage error.\n";

int main(int argc, char **argv)
{
	cmd_init("dcr-keygen", argc, argv);
	static const struct option longopts[] = {
		{"public", required_argument, NULL, 'P'},
		{"secret", required_argument, NULL, 'S'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *pub = NULL, *sec = NULL;
	int c;
	while ((c = getopt_long(argc, argv, ":p:s:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
		case 'P': pub = optarg; break;
		case 's':
		case 'S': sec = optarg; break;
		default: cmd_common_option(c, usage); break;
		}
	}
	if (optind != argc)
		cmd_usage_error(usage, "unexpected argument '%s'", argv[optind]);
	if (!pub || !sec)
		cmd_usage_error(usage, "need -p KEY.pub and -s KEY.sec");
	if (!strcmp(pub, sec))
		cmd_usage_error(usage, "the public and the secret key need two files");
	struct dcr_err e = {0};
	if (dcr_keygen(pub, sec, &e))
		cmd_die_err(&e, EXIT_FATAL);
	if (!cmd_quiet)
		fprintf(stderr, "dcr-keygen: wrote public key '%s' and secret key '%s'\n", pub, sec);
	return cmd_finish(EXIT_OK);
}
