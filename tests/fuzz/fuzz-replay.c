/* fuzz-replay - run tests/fuzz/fuzz-parsers.c's harness over input files,
 * without libFuzzer: how the inputs fuzzing found (tests/fuzz/regress/)
 * stay fixed in every build, sanitized or not (t0909). The first byte of
 * each file picks the parser, as for the fuzzer. Exit 0 when every file
 * ran; a regression crashes, or trips a sanitizer. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dcr.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
	LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		uint8_t *buf;
		size_t len;
		struct dcr_err e;
		if (dcr_read_file(argv[i], 1u << 24, &buf, &len, &e)) {
			fprintf(stderr, "fuzz-replay: error: %s\n", e.msg);
			return 128;
		}
		LLVMFuzzerTestOneInput(buf, len);
		free(buf);
		printf("ok %s\n", argv[i]);
	}
	return 0;
}
