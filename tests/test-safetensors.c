/* test-safetensors.c - lib/safetensors.c: the shared valid/ corpus reads with
 * exactly the tensors its headers declare, the invalid/ corpus and crafted
 * hostile headers are refused with a message, and dcr_st_writer round-trips.
 *
 * The corpus is found through $DCR_SRC/tests/data; without it those
 * tests skip (Criterion has no skip status, so they pass with a note). */
#include "config.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dcr.h"
#include "core/bytes.h"

static char *corpus(const char *sub)
{
	const char *src = getenv("DCR_SRC");
	if (!src)
		return NULL;
	char *p = dcr_asprintf("%s/tests/data/safetensors/%s", src, sub);
	struct stat sb;
	if (p && stat(p, &sb)) {
		free(p);
		return NULL;
	}
	return p;
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	cr_assert(f, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)n + 1);
	cr_assert(b);
	cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

/* What an independent reading of the header says (jansson, read here). */
static void check_against_header(const char *path, const struct dcr_st *st)
{
	size_t len;
	uint8_t *b = slurp(path, &len);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | b[i];
	cr_assert_leq(8 + n, len);
	json_error_t je;
	json_t *h = json_loadb((char *)b + 8, n, 0, &je);
	cr_assert(h, "%s: %s", path, je.text);
	size_t want = json_object_size(h) - (json_object_get(h, "__metadata__") ? 1 : 0);
	cr_assert_eq(st->ntensors, want, "%s: %zu tensors read, header declares %zu", path,
		     st->ntensors, want);
	json_t *meta = json_object_get(h, "__metadata__");
	cr_assert_eq(st->nmeta, meta ? json_object_size(meta) : 0, "%s: metadata count", path);
	for (size_t i = 0; i < st->nmeta; i++) {
		json_t *v = json_object_get(meta, st->meta_keys[i]);
		cr_assert(json_is_string(v));
		cr_assert_str_eq(st->meta_vals[i], json_string_value(v));
	}
	const char *key;
	json_t *v;
	json_object_foreach(h, key, v) {
		if (!strcmp(key, "__metadata__"))
			continue;
		const struct dcr_tensor_info *t = dcr_st_find(st, key);
		cr_assert(t, "%s: tensor '%s' not read", path, key);
		cr_assert_str_eq(dcr_dtype_name(t->dtype),
				 json_string_value(json_object_get(v, "dtype")), "%s: %s dtype", path,
				 key);
		json_t *shape = json_object_get(v, "shape");
		cr_assert_eq(t->ndim, json_array_size(shape), "%s: %s rank", path, key);
		uint64_t nelem = 1;
		for (unsigned k = 0; k < t->ndim; k++) {
			cr_assert_eq(t->shape[k], (uint64_t)json_integer_value(json_array_get(shape, k)));
			nelem *= t->shape[k];
		}
		cr_assert_eq(t->nelem, nelem);
		json_t *off = json_object_get(v, "data_offsets");
		cr_assert_eq(t->begin, (uint64_t)json_integer_value(json_array_get(off, 0)));
		cr_assert_eq(t->end, (uint64_t)json_integer_value(json_array_get(off, 1)));
		cr_assert_eq(st->data_off, 8 + n);
		/* the mapped bytes are the file's bytes */
		cr_assert_eq(memcmp(st->map + st->data_off + t->begin, b + 8 + n + t->begin,
				    t->end - t->begin), 0);
	}
	json_decref(h);
	free(b);
}

/* Tensor and metadata counts read off the headers with python's json. */
static const struct {
	const char *file;
	size_t tensors, meta;
} expect[] = {
	{"fastsafetensors-a.safetensors", 1, 1},
	{"fastsafetensors-b.safetensors", 1, 1},
	{"hf-samples-B.safetensors", 1, 1},
	{"hf-samples-H.safetensors", 1, 1},
	{"hf-samples-I.safetensors", 1, 1},
	{"hf-samples-b.safetensors", 1, 1},
	{"hf-samples-d.safetensors", 1, 1},
	{"hf-samples-e.safetensors", 1, 1},
	{"hf-samples-f.safetensors", 1, 1},
	{"hf-samples-h.safetensors", 1, 1},
	{"hf-samples-i.safetensors", 1, 1},
	{"hf-samples-overall.safetensors", 9, 1},
	{"mlp-f32.safetensors", 4, 2},
	{"mnist-tinygrad-f32.safetensors", 2, 0},
	{"safetensors-cpp-model.safetensors", 2, 0},
	{"swift-safetensors-data.safetensors", 1, 0},
};

Test(safetensors, valid_corpus_reads_with_declared_tensors)
{
	char *dir = corpus("valid");
	if (!dir) {
		cr_skip_test("no test corpus (DCR_SRC unset or tests/data missing)");
	}
	DIR *d = opendir(dir);
	cr_assert(d);
	struct dirent *de;
	int files = 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char *p = dcr_asprintf("%s/%s", dir, de->d_name);
		struct dcr_st *st = NULL;
		struct dcr_err e = {0};
		int r = dcr_st_open(p, &st, &e);
		cr_assert_eq(r, 0, "%s refused: %s", de->d_name, e.msg);
		check_against_header(p, st);
		for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++)
			if (!strcmp(expect[i].file, de->d_name)) {
				cr_assert_eq(st->ntensors, expect[i].tensors, "%s", de->d_name);
				cr_assert_eq(st->nmeta, expect[i].meta, "%s", de->d_name);
			}
		/* the in-memory parser agrees with the file reader */
		size_t len;
		uint8_t *b = slurp(p, &len);
		struct dcr_st *m = NULL;
		cr_assert_eq(dcr_st_parse(b, len, &m, &e), 0, "%s: %s", de->d_name, e.msg);
		cr_assert_eq(m->ntensors, st->ntensors);
		dcr_st_close(m);
		free(b);
		dcr_st_close(st);
		free(p);
		files++;
	}
	closedir(d);
	free(dir);
	cr_assert_geq(files, (int)(sizeof(expect) / sizeof(expect[0])), "only %d valid files", files);
}

Test(safetensors, invalid_corpus_is_refused_with_a_message)
{
	char *dir = corpus("invalid");
	if (!dir) {
		cr_skip_test("no test corpus (DCR_SRC unset or tests/data missing)");
	}
	DIR *d = opendir(dir);
	cr_assert(d);
	struct dirent *de;
	int files = 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char *p = dcr_asprintf("%s/%s", dir, de->d_name);
		struct dcr_st *st = NULL;
		struct dcr_err e = {0};
		int r = dcr_st_open(p, &st, &e);
		cr_assert_lt(r, 0, "%s was accepted", de->d_name);
		cr_assert_null(st);
		cr_assert_gt(strlen(e.msg), 10, "%s: no message", de->d_name);
		cr_assert_null(strchr(e.msg, '\n'), "message is more than one line");
		free(p);
		files++;
	}
	closedir(d);
	free(dir);
	cr_assert_gt(files, 0);
}

/* Build an image: 8-byte length, header text, data_len zero bytes. */
static uint8_t *image(const char *hdr, uint64_t hlen_field, size_t data_len, size_t *len)
{
	size_t h = strlen(hdr);
	*len = 8 + h + data_len;
	uint8_t *b = calloc(1, *len + 1);
	put_le64(b, hlen_field);
	memcpy(b + 8, hdr, h);
	return b;
}

static void refused(const char *hdr, size_t data_len, const char *why)
{
	size_t len;
	uint8_t *b = image(hdr, strlen(hdr), data_len, &len);
	struct dcr_st *st = NULL;
	struct dcr_err e = {0};
	int r = dcr_st_parse(b, len, &st, &e);
	cr_expect_lt(r, 0, "accepted (%s): %s", why, hdr);
	cr_expect_null(st);
	cr_expect_gt(strlen(e.msg), 0, "no message (%s)", why);
	if (!r)
		dcr_st_close(st);
	free(b);
}

static void accepted(const char *hdr, size_t data_len, size_t ntensors)
{
	size_t len;
	uint8_t *b = image(hdr, strlen(hdr), data_len, &len);
	struct dcr_st *st = NULL;
	struct dcr_err e = {0};
	int r = dcr_st_parse(b, len, &st, &e);
	cr_assert_eq(r, 0, "refused: %s: %s", hdr, e.msg);
	cr_assert_eq(st->ntensors, ntensors);
	dcr_st_close(st);
	free(b);
}

#define T1 "\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}"

Test(safetensors, hostile_headers_are_refused)
{
	refused("{" T1 ",\"u\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6, "overlap");
	refused("{" T1 ",\"u\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}", 10, "hole");
	refused("{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8, "not from 0");
	refused("{" T1 "}", 3, "short data");
	refused("{" T1 "}", 5, "data past the last offset");
	refused("{\"t\":{\"dtype\":\"X9\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "unknown dtype");
	refused("{" T1 "," T1 "}", 4, "duplicate name");
	refused("{\"__metadata__\":{\"a\":1}," T1 "}", 4, "non-string metadata");
	refused("{\"__metadata__\":{\"a\":null}," T1 "}", 4, "null metadata");
	refused("{\"__metadata__\":\"x\"," T1 "}", 4, "metadata not an object");
	refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "byte count");
	refused("{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,0]}}",
		0, "element count overflow");
	refused("{\"t\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952,2],\"data_offsets\":[0,0]}}",
		0, "byte count overflow");
	refused("{\"t\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}",
		0, "bit count overflow");
	refused("{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[18446744073709551615,3]}}", 4,
		"offset at 2^64-1");
	refused("{\"t\":{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,4]}}", 4, "negative dim");
	refused("{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4,4]}}", 4, "3 offsets");
	refused("{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0]}}", 4, "1 offset");
	refused("{\"t\":{\"dtype\":\"U8\",\"shape\":4,\"data_offsets\":[0,4]}}", 4, "shape not array");
	refused("{\"t\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "half byte");
	refused("{\"t\":{\"dtype\":\"F6_E3M2\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "F6 part byte");
	refused("{\"t\xff\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "invalid UTF-8");
	refused("{\"t\xc0\x80\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
		"overlong UTF-8");
	refused("[" T1 "]", 4, "not an object");
	refused(" {" T1 "}", 4, "leading space");
	refused("{" T1, 4, "unterminated JSON");
	refused("{" T1 "}x", 4, "trailing garbage");
	refused("{\"t\":3}", 0, "entry not an object");
	refused("", 0, "empty header");
	refused("{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
		"\"data_offsets\":[0,1]}}", 1, "17 dimensions");
	/* and the accepted neighbours of those cases */
	accepted("{" T1 "}", 4, 1);
	accepted("{" T1 "}   ", 4, 1); /* trailing spaces pad the header */
	accepted("{}", 0, 0);
	accepted("{\"__metadata__\":{\"a\":\"b\"}}", 0, 0);
	accepted("{\"t\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,2]}}", 2, 1);
	accepted("{\"t\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[0,3]}}", 3, 1);
	accepted("{\"t\":{\"dtype\":\"BF16\",\"shape\":[0,7],\"data_offsets\":[0,0]}}", 0, 1);
	accepted("{\"t\":{\"dtype\":\"C64\",\"shape\":[],\"data_offsets\":[0,8]}}", 8, 1);
	accepted("{\"u\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}," T1 "}", 6, 2);
}

Test(safetensors, header_length_field_is_checked)
{
	size_t len;
	struct dcr_st *st = NULL;
	struct dcr_err e = {0};
	const char *hdr = "{" T1 "}";
	uint64_t bad[] = {0, 1, strlen(hdr) + 5, 1000, 100000001ULL, UINT64_MAX, UINT64_MAX - 7};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint8_t *b = image(hdr, bad[i], 4, &len);
		e.msg[0] = 0;
		cr_expect_lt(dcr_st_parse(b, len, &st, &e), 0, "length %llu accepted",
			     (unsigned long long)bad[i]);
		cr_expect_gt(strlen(e.msg), 0);
		free(b);
	}
	for (size_t n = 0; n < 8; n++) { /* shorter than the length field */
		uint8_t b[8] = {2, 0, 0, 0, 0, 0, 0, 0};
		cr_expect_lt(dcr_st_parse(b, n, &st, &e), 0);
	}
	/* 100,000,000 is allowed by the limit (here it runs past the end) and
	 * 100,000,001 is refused as too large even in a file that big */
	size_t big = 8 + 100000001ULL + 16;
	uint8_t *b = calloc(1, big);
	cr_assert(b);
	put_le64(b, 100000001ULL);
	b[8] = '{';
	cr_expect_lt(dcr_st_parse(b, big, &st, &e), 0);
	cr_expect(strstr(e.msg, "too large"), "message: %s", e.msg);
	free(b);
}

Test(safetensors, writer_round_trip)
{
	char dir[] = "/tmp/test-safetensors.XXXXXX";
	cr_assert(mkdtemp(dir));
	char *path = dcr_asprintf("%s/out.safetensors", dir);
	struct dcr_tensor_info t[5] = {
		{.name = "b.bf16", .dtype = DCR_DT_BF16, .ndim = 2, .shape = {3, 5}},
		{.name = "a.empty", .dtype = DCR_DT_F32, .ndim = 2, .shape = {0, 9}},
		{.name = "c.f4", .dtype = DCR_DT_F4, .ndim = 1, .shape = {6}},
		{.name = "d.scalar", .dtype = DCR_DT_F64, .ndim = 0},
		{.name = "e.\"quoted\\name\"", .dtype = DCR_DT_F6_E3M2, .ndim = 1, .shape = {8}},
	};
	struct dcr_err e = {0};
	cr_assert_eq(dcr_st_layout(t, 5, &e), 0, "%s", e.msg);
	cr_assert_eq(t[0].end - t[0].begin, 30);
	cr_assert_eq(t[1].end - t[1].begin, 0);
	cr_assert_eq(t[2].end - t[2].begin, 3);
	cr_assert_eq(t[3].end - t[3].begin, 8);
	cr_assert_eq(t[4].end - t[4].begin, 6);
	uint64_t total = t[4].end;
	uint8_t *data = malloc(total);
	for (uint64_t i = 0; i < total; i++)
		data[i] = (uint8_t)(i * 37 + 11);
	const char *meta[] = {"format", "pt", "note", "ünïcode"};
	struct dcr_st_writer *w = NULL;
	cr_assert_eq(dcr_st_writer_new(path, t, 5, meta, 2, &w, &e), 0, "%s", e.msg);
	/* nothing under the final name before the commit */
	cr_assert_neq(access(path, F_OK), 0);
	cr_assert_eq(dcr_st_writer_write(w, data, 7, &e), 0);
	cr_assert_eq(dcr_st_writer_write(w, data + 7, total - 7, &e), 0);
	cr_assert_lt(dcr_st_writer_write(w, data, 1, &e), 0, "more data than declared accepted");
	cr_assert_eq(dcr_st_writer_commit(w, &e), 0, "%s", e.msg);
	dcr_st_writer_free(w);

	struct dcr_st *st = NULL;
	cr_assert_eq(dcr_st_open(path, &st, &e), 0, "%s", e.msg);
	cr_assert_eq(st->ntensors, 5);
	cr_assert_eq((st->data_off - 8) % 8, 0, "header not padded to 8 bytes");
	for (int i = 0; i < 5; i++) {
		const struct dcr_tensor_info *r = dcr_st_find(st, t[i].name);
		cr_assert(r, "%s missing", t[i].name);
		cr_assert_eq(r->dtype, t[i].dtype);
		cr_assert_eq(r->ndim, t[i].ndim);
		for (unsigned k = 0; k < r->ndim; k++)
			cr_assert_eq(r->shape[k], t[i].shape[k]);
		cr_assert_eq(r->end - r->begin, t[i].end - t[i].begin);
		cr_assert_eq(memcmp(st->map + st->data_off + r->begin, data + t[i].begin,
				    r->end - r->begin), 0, "%s bytes differ", t[i].name);
	}
	cr_assert_eq(st->nmeta, 2);
	for (size_t i = 0; i < 2; i++) {
		int k = !strcmp(st->meta_keys[i], "note") ? 1 : 0;
		cr_assert_str_eq(st->meta_keys[i], meta[2 * k]);
		cr_assert_str_eq(st->meta_vals[i], meta[2 * k + 1]);
	}
	dcr_st_close(st);

	/* a short write is refused at commit, and the old file stays */
	cr_assert_eq(dcr_st_writer_new(path, t, 5, NULL, 0, &w, &e), 0);
	cr_assert_eq(dcr_st_writer_write(w, data, total - 1, &e), 0);
	cr_assert_lt(dcr_st_writer_commit(w, &e), 0, "short file committed");
	dcr_st_writer_free(w);
	cr_assert_eq(dcr_st_open(path, &st, &e), 0, "%s", e.msg);
	cr_assert_eq(st->nmeta, 2, "the old file was replaced");
	dcr_st_close(st);
	/* an abandoned writer leaves the old file and no temp file */
	cr_assert_eq(dcr_st_writer_new(path, t, 5, NULL, 0, &w, &e), 0);
	dcr_st_writer_free(w);
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	cr_assert_eq(n, 1, "temp files left behind");
	/* duplicate names and non-contiguous layouts are refused */
	struct dcr_tensor_info dup[2] = {t[0], t[0]};
	cr_assert_eq(dcr_st_layout(dup, 2, &e), 0);
	cr_assert_lt(dcr_st_writer_new(path, dup, 2, NULL, 0, &w, &e), 0);
	struct dcr_tensor_info gap[2] = {t[0], t[3]};
	cr_assert_lt(dcr_st_writer_new(path, gap, 2, NULL, 0, &w, &e), 0);

	unlink(path);
	rmdir(dir);
	free(path);
	free(data);
}
