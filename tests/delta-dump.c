/* delta-dump - print every change of a delta (partial deltas too), one line
 * each: NAME<TAB>INDEX<TAB>xor|set<TAB>VALUE-HEX. For tests that compare two
 * deltas element for element (sort the output first). Items must decode
 * without the receiver's bits (PLAIN). */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcr.h"
#include "core/bytes.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: delta-dump DELTA\n");
		return 129;
	}
	int fd = strcmp(argv[1], "-") ? open(argv[1], O_RDONLY) : 0;
	if (fd < 0) {
		perror(argv[1]);
		return 128;
	}
	struct dcr_err e = {0};
	struct dcr_delta_reader rd;
	struct dcr_delta_rec rec;
	struct dcr_changes ch = {0};
	char **names = NULL;
	int *dtypes = NULL;
	size_t n = 0;
	int r = dcr_delta_reader_init_flags(&rd, (struct dcr_source){dcr_source_fd_read, &fd}, NULL,
					    0, DCR_DELTA_PARTIAL, argv[1], &e);
	while (r == 0 && (r = dcr_delta_next(&rd, &rec, &e)) == 1) {
		r = 0;
		if (rec.type == DCR_REC_TENSOR) {
			struct dcr_delta_tensor t;
			if ((r = dcr_delta_parse_tensor(&rec, &t, &e)))
				break;
			names = realloc(names, (n + 1) * sizeof(*names));
			dtypes = realloc(dtypes, (n + 1) * sizeof(*dtypes));
			names[n] = strdup(t.name);
			dtypes[n++] = t.dtype;
			dcr_delta_tensor_clear(&t);
		} else if (rec.type == DCR_REC_ITEM) {
			struct dcr_item it;
			if ((r = dcr_delta_parse_item(&rec, &it, &e)))
				break;
			if (it.tensor >= n) {
				dcr_err_set(&e, DCR_EFORMAT, "item for undeclared tensor");
				r = -1;
				break;
			}
			if ((r = dcr_item_decode(&it, dcr_dtype_unit(dtypes[it.tensor]), &ch, &e)))
				break;
			for (size_t k = 0; k < ch.n; k++)
				printf("%s\t%llu\t%s\t%llx\n", names[it.tensor],
				       (unsigned long long)(it.start + ch.pos[k]),
				       it.enc == DCR_ENC_XOR ? "xor" : "set", (unsigned long long)ch.val[k]);
		}
	}
	if (r < 0) {
		fprintf(stderr, "delta-dump: error: %s\n", e.msg);
		return 128;
	}
	dcr_delta_reader_release(&rd);
	dcr_changes_free(&ch);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(dtypes);
	return fflush(stdout) || ferror(stdout) ? 128 : 0;
}
