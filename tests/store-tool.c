/* store-tool - drive lib/store from shell tests (tests/t03*.sh). Not
 * installed: dcr-push and dcr-pull are the user-facing commands.
 *
 *   store-tool [options] STORE put NAME FILE          dcr_store_put (file read into memory)
 *   store-tool [options] STORE put-file NAME FILE     dcr_store_put_file (streamed/multipart)
 *   store-tool [options] STORE put-if-absent NAME FILE
 *   store-tool [options] STORE get NAME               to stdout, via dcr_store_get
 *   store-tool [options] STORE get-fd NAME            to stdout, via dcr_store_get_to_fd
 *   store-tool [options] STORE get-range NAME OFF LEN to stdout
 *   store-tool [options] STORE stat NAME              prints the size
 *   store-tool [options] STORE list [PREFIX]          one name per line
 *   store-tool [options] STORE delete NAME
 *   store-tool [options] STORE put-many PREFIX N SIZE N objects PREFIXi in parallel
 *   store-tool [options] STORE get-many PREFIX N SIZE fetch and check them in parallel
 *
 * Options: --endpoint URL --cacert FILE --retries N --parallel N --timeout S
 * --part-size BYTES --multipart-threshold BYTES --backoff-ms MS --list-page N.
 * Exit: 0 done, 2 no such object, 3 conflict, 128 other error (one line on
 * stderr), 129 usage.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcr.h"
#include "core/bytes.h"

static int usage(void)
{
	fputs("usage: store-tool [options] STORE CMD ARGS... (see tests/store-tool.c)\n", stderr);
	return 129;
}

static int fail(const struct dcr_err *e, int rc)
{
	fprintf(stderr, "store-tool: error: %s\n", e->msg);
	return rc == DCR_ENOTFOUND ? 2 : rc == DCR_ECONFLICT ? 3 : 128;
}

static void pattern(uint8_t *p, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

int main(int argc, char **argv)
{
	struct dcr_store_opts o = {0};
	static const struct option lo[] = {
		{"endpoint", required_argument, 0, 'e'}, {"cacert", required_argument, 0, 'c'},
		{"retries", required_argument, 0, 'r'}, {"parallel", required_argument, 0, 'p'},
		{"timeout", required_argument, 0, 't'}, {"part-size", required_argument, 0, 's'},
		{"backoff-ms", required_argument, 0, 'b'}, {"list-page", required_argument, 0, 'l'},
		{"multipart-threshold", required_argument, 0, 'm'},
		{0, 0, 0, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "+", lo, NULL)) != -1) {
		switch (c) {
		case 'e': o.endpoint = optarg; break;
		case 'c': o.cacert = optarg; break;
		case 'r': o.retries = atoi(optarg) ? atoi(optarg) : -1; break; /* 0: none, as the commands */
		case 'p': o.parallel = atoi(optarg); break;
		case 't': o.timeout_s = atoi(optarg); break;
		case 's': o.part_size = strtoull(optarg, NULL, 0); break;
		case 'b': o.backoff_ms = atoi(optarg); break;
		case 'l': o.list_page = atoi(optarg); break;
		case 'm': o.multipart_threshold = strtoull(optarg, NULL, 0); break;
		default: return usage();
		}
	}
	if (argc - optind < 2)
		return usage();
	const char *url = argv[optind], *cmd = argv[optind + 1];
	char **a = argv + optind + 2;
	int na = argc - optind - 2;
	struct dcr_store *s;
	struct dcr_err e = {0};
	int r = dcr_store_open(url, &o, &s, &e);
	if (r)
		return fail(&e, r);
	int rc = 0;
	if ((!strcmp(cmd, "put") || !strcmp(cmd, "put-if-absent")) && na == 2) {
		uint8_t *buf;
		size_t n;
		r = dcr_read_file(a[1], SIZE_MAX - 1, &buf, &n, &e);
		if (!r) {
			r = !strcmp(cmd, "put") ? dcr_store_put(s, a[0], buf, n, &e)
						: dcr_store_put_if_absent(s, a[0], buf, n, &e);
			free(buf);
		}
	} else if (!strcmp(cmd, "put-file") && na == 2) {
		r = dcr_store_put_file(s, a[0], a[1], &e);
	} else if (!strcmp(cmd, "get") && na == 1) {
		uint8_t *buf;
		size_t n;
		r = dcr_store_get(s, a[0], &buf, &n, &e);
		if (!r) {
			if (dcr_write_full(1, buf, n))
				r = dcr_err_sys(&e, errno, "cannot write stdout");
			free(buf);
		}
	} else if (!strcmp(cmd, "get-fd") && na == 1) {
		uint64_t size;
		r = dcr_store_get_to_fd(s, a[0], 1, &size, &e);
	} else if (!strcmp(cmd, "get-range") && na == 3) {
		uint64_t off = strtoull(a[1], NULL, 0);
		size_t len = strtoull(a[2], NULL, 0);
		uint8_t *buf = malloc(len ? len : 1);
		r = buf ? dcr_store_get_range(s, a[0], off, len, buf, &e) : -ENOMEM;
		if (!r && dcr_write_full(1, buf, len))
			r = dcr_err_sys(&e, errno, "cannot write stdout");
		free(buf);
	} else if (!strcmp(cmd, "stat") && na == 1) {
		uint64_t size;
		r = dcr_store_stat(s, a[0], &size, &e);
		if (!r)
			printf("%llu\n", (unsigned long long)size);
	} else if (!strcmp(cmd, "list") && na <= 1) {
		char **names;
		size_t n;
		r = dcr_store_list(s, na ? a[0] : "", &names, &n, &e);
		for (size_t i = 0; !r && i < n; i++)
			printf("%s\n", names[i]);
		if (!r)
			dcr_store_names_free(names, n);
	} else if (!strcmp(cmd, "delete") && na == 1) {
		r = dcr_store_delete(s, a[0], &e);
	} else if ((!strcmp(cmd, "put-many") || !strcmp(cmd, "get-many")) && na == 3) {
		int put = !strcmp(cmd, "put-many");
		size_t n = strtoull(a[1], NULL, 0), size = strtoull(a[2], NULL, 0);
		struct dcr_store_job *j = dcr_calloc(n, sizeof(*j));
		char **names = dcr_calloc(n, sizeof(*names));
		uint8_t **data = dcr_calloc(n, sizeof(*data));
		for (size_t i = 0; j && names && data && i < n; i++) {
			names[i] = dcr_asprintf("%s%06zu", a[0], i);
			data[i] = malloc(size ? size : 1);
			if (!names[i] || !data[i])
				return 128;
			pattern(data[i], size, (unsigned)i);
			j[i].op = put ? DCR_STORE_PUT : DCR_STORE_GET;
			j[i].name = names[i];
			j[i].data = data[i];
			j[i].len = size;
		}
		if (!j || !names || !data)
			return 128;
		r = dcr_store_run(s, j, n, &e);
		for (size_t i = 0; !r && !put && i < n; i++)
			if (j[i].buf_len != size || memcmp(j[i].buf, data[i], size))
				r = dcr_err_set(&e, DCR_EDIGEST, "'%s' came back different", names[i]);
		for (size_t i = 0; i < n; i++) {
			free(j[i].buf);
			free(names[i]);
			free(data[i]);
		}
		free(j);
		free(names);
		free(data);
	} else {
		dcr_store_close(s);
		return usage();
	}
	if (r)
		rc = fail(&e, r);
	dcr_store_close(s);
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "store-tool: error: cannot write stdout: %s\n", strerror(errno));
		return 128;
	}
	return rc;
}
