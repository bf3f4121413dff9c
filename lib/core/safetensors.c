/* safetensors.c - read (map and validate) and write safetensors files.
 *
 * Validation follows the reference implementation (huggingface/safetensors):
 * the header length is at most 100,000,000 and inside the file, the header
 * is UTF-8 JSON starting with '{', every dtype is known, every tensor's byte
 * count is its element count times its dtype size (no overflow, whole bytes),
 * offsets are contiguous from 0 with no hole or overlap, the last offset is
 * the data size, names are unique, and __metadata__ maps strings to strings.
 * The header's JSON is read in place with bounded memory (see below).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <jansson.h> /* the writer builds headers with it */

#include "core/bytes.h"
#include "core/file.h"
#include "core/safetensors.h"
#include "core/util.h"

static void st_free_tables(struct dcr_st *st)
{
	for (size_t i = 0; i < st->ntensors; i++)
		free(st->tensors[i].name);
	free(st->tensors);
	for (size_t i = 0; i < st->nmeta; i++) {
		free(st->meta_keys[i]);
		free(st->meta_vals[i]);
	}
	free(st->meta_keys);
	free(st->meta_vals);
}

void dcr_st_close(struct dcr_st *st)
{
	if (!st)
		return;
	st_free_tables(st);
	if (st->fd >= 0) {
		if (st->map && st->size)
			munmap((void *)st->map, st->size);
		close(st->fd);
	}
	free(st->path);
	free(st);
}

static int cmp_by_begin(const void *a, const void *b)
{
	const struct dcr_tensor_info *x = *(const struct dcr_tensor_info *const *)a;
	const struct dcr_tensor_info *y = *(const struct dcr_tensor_info *const *)b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

/* ---- the header's JSON ----
 * A reader for exactly what a safetensors header may hold, over the mapped
 * bytes: no tree is built, every string is checked and copied only where it
 * is kept (names and metadata), arrays longer than a shape may be are
 * refused as they are read, unknown values are skipped at bounded depth. So
 * memory follows what the header really describes, never the JSON's shape
 * (a 100 MB header of nested arrays costs nothing), and past
 * DCR_ST_MAX_TENSORS tensors a file is refused. */

#define JSON_MAX_DEPTH 64

struct jp {
	const uint8_t *p, *end, *start;
	const char *what;
	struct dcr_err *e;
};

static int jbad(struct jp *j, const char *why)
{
	return dcr_err_set(j->e, DCR_EFORMAT, "%s: header is not valid JSON: %s (at byte %llu)",
			   j->what, why, (unsigned long long)(j->p - j->start));
}

static void jws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int jlit(struct jp *j, char c)
{
	jws(j);
	if (j->p < j->end && *j->p == c) {
		j->p++;
		return 1;
	}
	return 0;
}

static int hex4(const uint8_t *p, unsigned *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++) {
		int c = p[i], d = c >= '0' && c <= '9' ? c - '0'
			       : c >= 'a' && c <= 'f' ? c - 'a' + 10
			       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		*v = *v << 4 | (unsigned)d;
	}
	return 0;
}

/* Length of a valid UTF-8 sequence at p (1-4), or 0 (overlong forms,
 * surrogates and code points above U+10FFFF are invalid, as in Rust). */
static int utf8_len(const uint8_t *p, const uint8_t *end)
{
	uint8_t c = p[0];
	if (c < 0x80)
		return 1;
	int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
	if (!n || end - p < n)
		return 0;
	for (int i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) || (c == 0xf0 && p[1] < 0x90) ||
	    (c == 0xf4 && p[1] > 0x8f))
		return 0;
	return n;
}

static size_t put_utf8(uint8_t *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (uint8_t)(0xc0 | cp >> 6);
		o[1] = (uint8_t)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (uint8_t)(0xe0 | cp >> 12);
		o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (uint8_t)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (uint8_t)(0xf0 | cp >> 18);
	o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (uint8_t)(0x80 | (cp & 0x3f));
	return 4;
}

/* A string: *out (malloc'd, NUL-terminated) unless out is NULL. A decoded
 * string is never longer than its JSON form, so that bounds the copy. NUL
 * (\u0000) is refused: names and metadata are C strings. */
static int jstring(struct jp *j, char **out)
{
	jws(j);
	if (j->p >= j->end || *j->p != '"')
		return jbad(j, "a string was expected");
	const uint8_t *s = ++j->p, *q = s;
	while (q < j->end && *q != '"')
		q += *q == '\\' && q + 1 < j->end ? 2 : 1;
	if (q >= j->end)
		return jbad(j, "unterminated string");
	uint8_t *o = out ? malloc((size_t)(q - s) + 1) : NULL;
	size_t n = 0;
	if (out && !o)
		return dcr_err_sys(j->e, ENOMEM, "%s", j->what);
	while (j->p < q) {
		uint8_t c = *j->p;
		uint8_t buf[4];
		size_t k;
		if (c < 0x20) {
			free(o);
			return jbad(j, "control character in a string");
		}
		if (c != '\\') {
			int l = utf8_len(j->p, j->end);
			if (!l) {
				free(o);
				return jbad(j, "invalid UTF-8");
			}
			if (o)
				memcpy(o + n, j->p, (size_t)l);
			n += o ? (size_t)l : 0;
			j->p += l;
			continue;
		}
		c = j->p[1];
		j->p += 2;
		unsigned cp;
		switch (c) {
		case '"': case '\\': case '/': cp = c; break;
		case 'b': cp = '\b'; break;
		case 'f': cp = '\f'; break;
		case 'n': cp = '\n'; break;
		case 'r': cp = '\r'; break;
		case 't': cp = '\t'; break;
		case 'u':
			if (q - j->p < 4 || hex4(j->p, &cp)) {
				free(o);
				return jbad(j, "bad \\u escape");
			}
			j->p += 4;
			if (cp >= 0xd800 && cp <= 0xdbff) {
				unsigned lo;
				if (q - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' ||
				    hex4(j->p + 2, &lo) || lo < 0xdc00 || lo > 0xdfff) {
					free(o);
					return jbad(j, "unpaired surrogate");
				}
				j->p += 6;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else if (cp >= 0xdc00 && cp <= 0xdfff) {
				free(o);
				return jbad(j, "unpaired surrogate");
			}
			break;
		default:
			free(o);
			return jbad(j, "bad escape");
		}
		if (cp == 0) {
			free(o);
			return jbad(j, "\\u0000 in a string");
		}
		k = put_utf8(buf, cp);
		if (o)
			memcpy(o + n, buf, k);
		n += o ? k : 0;
	}
	j->p = q + 1;
	if (o) {
		o[n] = '\0';
		*out = (char *)o;
	}
	return 0;
}

/* A non-negative integer that fits 64 bits: no sign, fraction or exponent
 * (the reference reads usize). 1 when the value is a number but not such
 * an integer, so the caller can say what it expected. */
static int juint(struct jp *j, uint64_t *v)
{
	jws(j);
	const uint8_t *p = j->p;
	if (p < j->end && *p == '-')
		p++;
	if (p >= j->end || *p < '0' || *p > '9')
		return -1;
	uint64_t x = 0;
	int ovf = 0, lead0 = *p == '0';
	const uint8_t *d = p;
	for (; p < j->end && *p >= '0' && *p <= '9'; p++)
		ovf |= mul_ovf(x, 10, &x) || add_ovf(x, (uint64_t)(*p - '0'), &x);
	int frac = p < j->end && (*p == '.' || *p == 'e' || *p == 'E');
	if (lead0 && p - d > 1)
		return -1; /* leading zeros are not JSON */
	while (p < j->end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' ||
			      *p == '+' || *p == '-'))
		p++;
	int neg = *j->p == '-';
	j->p = p;
	if (neg || frac || ovf)
		return 1;
	*v = x;
	return 0;
}

/* Skip any value, at most JSON_MAX_DEPTH deep. */
static int jskip(struct jp *j, int depth)
{
	jws(j);
	if (j->p >= j->end)
		return jbad(j, "a value was expected");
	if (depth > JSON_MAX_DEPTH)
		return jbad(j, "nested too deeply");
	uint8_t c = *j->p;
	if (c == '"')
		return jstring(j, NULL);
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		j->p++;
		if (jlit(j, close))
			return 0;
		do {
			int r;
			if (c == '{' && ((r = jstring(j, NULL)) || (!jlit(j, ':') && jbad(j, "':' expected"))))
				return r ? r : DCR_EFORMAT;
			if ((r = jskip(j, depth + 1)))
				return r;
		} while (jlit(j, ','));
		return jlit(j, close) ? 0 : jbad(j, "',' or a closing bracket expected");
	}
	uint64_t v;
	if (juint(j, &v) >= 0)
		return 0;
	static const char *const words[] = {"true", "false", "null"};
	for (int i = 0; i < 3; i++) {
		size_t n = strlen(words[i]);
		if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, words[i], n)) {
			j->p += n;
			return 0;
		}
	}
	return jbad(j, "unexpected character");
}

/* An array of at most max non-negative integers into v; *n its length. */
static int juint_array(struct jp *j, uint64_t *v, size_t max, size_t *n, const char *name,
		       const char *field)
{
	*n = 0;
	if (!jlit(j, '['))
		return dcr_err_set(j->e, DCR_EFORMAT, "%s: tensor '%s': '%s' is not an array",
				   j->what, name, field);
	if (jlit(j, ']'))
		return 0;
	do {
		uint64_t x;
		int r = juint(j, &x);
		if (r)
			return dcr_err_set(j->e, DCR_EFORMAT,
					   "%s: tensor '%s': %s must hold non-negative integers",
					   j->what, name, field);
		if (*n == max)
			return dcr_err_set(j->e, DCR_EFORMAT,
					   "%s: tensor '%s': '%s' has more than %zu entries", j->what,
					   name, field, max);
		v[(*n)++] = x;
	} while (jlit(j, ','));
	return jlit(j, ']') ? 0 : jbad(j, "',' or ']' expected");
}

/* One tensor entry: {"dtype": S, "shape": [..], "data_offsets": [a, b], ...}. */
static int parse_tensor(struct jp *j, const char *name, struct dcr_tensor_info *t)
{
	const char *what = j->what;
	struct dcr_err *e = j->e;
	int have_dt = 0, have_shape = 0, have_offs = 0, r;
	uint64_t offs[2];
	size_t noffs = 0, nd = 0;
	if (!jlit(j, '{'))
		return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': entry is not an object", what, name);
	if (!jlit(j, '}')) {
		do {
			char *key = NULL;
			if ((r = jstring(j, &key)))
				return r;
			if (!jlit(j, ':')) {
				free(key);
				return jbad(j, "':' expected");
			}
			int dup = 0;
			if (!strcmp(key, "dtype")) {
				dup = have_dt++;
				char *dt = NULL;
				jws(j);
				if (!dup && (j->p >= j->end || *j->p != '"')) {
					free(key);
					goto need;
				}
				if (!dup && (r = jstring(j, &dt))) {
					free(key);
					return r;
				}
				if (!dup) {
					t->dtype = dcr_dtype_parse(dt);
					if (t->dtype < 0) {
						r = dcr_err_set(e, DCR_EFORMAT,
								"%s: tensor '%s': unknown dtype '%s'", what,
								name, dt);
						free(dt);
						free(key);
						return r;
					}
					free(dt);
				}
			} else if (!strcmp(key, "shape")) {
				dup = have_shape++;
				if (!dup && (r = juint_array(j, t->shape, DCR_MAX_NDIM, &nd, name, "shape"))) {
					if (strstr(e->msg, "more than"))
						dcr_err_set(e, DCR_EFORMAT,
							    "%s: tensor '%s': more than %d dimensions", what,
							    name, DCR_MAX_NDIM);
					free(key);
					return r;
				}
			} else if (!strcmp(key, "data_offsets")) {
				dup = have_offs++;
				if (!dup && (r = juint_array(j, offs, 2, &noffs, name, "data_offsets"))) {
					free(key);
					return dcr_err_set(e, DCR_EFORMAT,
							   "%s: tensor '%s': data_offsets must be two non-negative integers",
							   what, name);
				}
			} else if ((r = jskip(j, 2))) {
				free(key);
				return r;
			}
			free(key);
			if (dup)
				return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': duplicate key", what,
						   name);
		} while (jlit(j, ','));
		if (!jlit(j, '}'))
			return jbad(j, "',' or '}' expected");
	}
	if (!have_dt || !have_shape || !have_offs)
		goto need;
	t->ndim = (unsigned)nd;
	uint64_t nelem = 1;
	for (size_t k = 0; k < nd; k++)
		if (mul_ovf(nelem, t->shape[k], &nelem))
			return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': element count overflows",
					   what, name);
	t->nelem = nelem;
	if (noffs != 2)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: tensor '%s': data_offsets must be two non-negative integers",
				   what, name);
	t->begin = offs[0];
	t->end = offs[1];
	uint64_t nbits;
	if (mul_ovf(nelem, dcr_dtype_bits(t->dtype), &nbits))
		return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': byte count overflows", what, name);
	if (nbits % 8)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: tensor '%s': %s data of %llu elements is not a whole number of bytes",
				   what, name, dcr_dtype_name(t->dtype), (unsigned long long)nelem);
	if (t->end < t->begin || t->end - t->begin != nbits / 8)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: tensor '%s': data_offsets [%llu, %llu] do not hold %llu bytes of %s",
				   what, name, (unsigned long long)t->begin,
				   (unsigned long long)t->end, (unsigned long long)(nbits / 8),
				   dcr_dtype_name(t->dtype));
	return 0;
need:
	return dcr_err_set(e, DCR_EFORMAT,
			   "%s: tensor '%s': needs string 'dtype', array 'shape' and array 'data_offsets'",
			   what, name);
}

/* __metadata__: an object of strings. */
static int parse_meta(struct jp *j, struct dcr_st *st)
{
	size_t cap = 0;
	if (!jlit(j, '{'))
		return dcr_err_set(j->e, DCR_EFORMAT, "%s: __metadata__ is not an object", j->what);
	if (jlit(j, '}'))
		return 0;
	do {
		char *k = NULL, *v = NULL;
		int r = jstring(j, &k);
		if (r)
			return r;
		if (!jlit(j, ':')) {
			free(k);
			return jbad(j, "':' expected");
		}
		jws(j);
		if (j->p >= j->end || *j->p != '"') {
			r = dcr_err_set(j->e, DCR_EFORMAT, "%s: __metadata__ value of '%s' is not a string",
					j->what, k);
			free(k);
			return r;
		}
		if ((r = jstring(j, &v))) {
			free(k);
			return r;
		}
		for (size_t i = 0; i < st->nmeta; i++)
			if (!strcmp(st->meta_keys[i], k)) {
				free(k);
				free(v);
				return dcr_err_set(j->e, DCR_EFORMAT, "%s: duplicate __metadata__ key",
						   j->what);
			}
		if (st->nmeta == cap) {
			cap = cap ? 2 * cap : 16;
			char **nk = realloc(st->meta_keys, cap * sizeof(char *));
			if (nk)
				st->meta_keys = nk;
			char **nv = nk ? realloc(st->meta_vals, cap * sizeof(char *)) : NULL;
			if (nv)
				st->meta_vals = nv;
			if (!nk || !nv) {
				free(k);
				free(v);
				return dcr_err_sys(j->e, ENOMEM, "%s", j->what);
			}
		}
		st->meta_keys[st->nmeta] = k;
		st->meta_vals[st->nmeta++] = v;
	} while (jlit(j, ','));
	return jlit(j, '}') ? 0 : jbad(j, "',' or '}' expected");
}

static int cmp_name_ptr(const void *a, const void *b)
{
	const struct dcr_tensor_info *x = *(const struct dcr_tensor_info *const *)a;
	const struct dcr_tensor_info *y = *(const struct dcr_tensor_info *const *)b;
	return strcmp(x->name, y->name);
}

static int parse_header(struct dcr_st *st, const uint8_t *buf, uint64_t size,
			struct dcr_err *e)
{
	const char *what = st->path ? st->path : "safetensors";
	if (size < 8)
		return dcr_err_set(e, DCR_EFORMAT, "%s: header too small (file is %llu bytes)",
				   what, (unsigned long long)size);
	uint64_t n = get_le64(buf);
	if (n > DCR_ST_MAX_HEADER)
		return dcr_err_set(e, DCR_EFORMAT, "%s: header too large (%llu bytes, at most %llu)",
				   what, (unsigned long long)n, (unsigned long long)DCR_ST_MAX_HEADER);
	if (n > size - 8)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: header length %llu runs past the end of the %llu-byte file",
				   what, (unsigned long long)n, (unsigned long long)size);
	if (n < 2 || buf[8] != '{')
		return dcr_err_set(e, DCR_EFORMAT, "%s: header does not start with '{'", what);
	st->data_off = 8 + n;
	uint64_t data_size = size - st->data_off;

	struct jp j = {.p = buf + 8, .end = buf + 8 + n, .start = buf + 8, .what = what, .e = e};
	int r = 0, have_meta = 0;
	size_t cap = 0;
	j.p++;
	if (!jlit(&j, '}')) {
		do {
			char *key = NULL;
			if ((r = jstring(&j, &key)))
				return r;
			if (!jlit(&j, ':')) {
				free(key);
				return jbad(&j, "':' expected");
			}
			if (!strcmp(key, "__metadata__")) {
				free(key);
				if (have_meta++)
					return dcr_err_set(e, DCR_EFORMAT, "%s: duplicate __metadata__", what);
				if ((r = parse_meta(&j, st)))
					return r;
				continue;
			}
			if (st->ntensors == DCR_ST_MAX_TENSORS) {
				free(key);
				return dcr_err_set(e, DCR_EFORMAT, "%s: more than %d tensors in one file",
						   what, DCR_ST_MAX_TENSORS);
			}
			if (st->ntensors == cap) {
				cap = cap ? 2 * cap : 64;
				struct dcr_tensor_info *v = realloc(st->tensors, cap * sizeof(*v));
				if (!v) {
					free(key);
					return dcr_err_sys(e, ENOMEM, "%s", what);
				}
				st->tensors = v;
			}
			struct dcr_tensor_info *t = &st->tensors[st->ntensors];
			memset(t, 0, sizeof(*t));
			t->name = key;
			st->ntensors++;
			if ((r = parse_tensor(&j, key, t)))
				return r;
		} while (jlit(&j, ','));
		if (!jlit(&j, '}'))
			return jbad(&j, "',' or '}' expected");
	}
	jws(&j);
	if (j.p != j.end)
		return jbad(&j, "end of text expected");

	/* Names are unique. */
	struct dcr_tensor_info **ord = dcr_calloc(st->ntensors, sizeof(*ord));
	if (!ord)
		return dcr_err_sys(e, ENOMEM, "%s", what);
	for (size_t i = 0; i < st->ntensors; i++)
		ord[i] = &st->tensors[i];
	qsort(ord, st->ntensors, sizeof(*ord), cmp_name_ptr);
	for (size_t i = 1; i < st->ntensors && !r; i++)
		if (!strcmp(ord[i - 1]->name, ord[i]->name))
			r = dcr_err_set(e, DCR_EFORMAT, "%s: header is not valid JSON: duplicate object key",
					what);
	if (r) {
		free(ord);
		return r;
	}
	/* Offsets: contiguous from 0, no holes, no overlaps, ending at the data size. */
	qsort(ord, st->ntensors, sizeof(*ord), cmp_by_begin);
	uint64_t pos = 0;
	for (size_t i = 0; i < st->ntensors && !r; i++) {
		if (ord[i]->begin != pos)
			r = dcr_err_set(e, DCR_EFORMAT,
					"%s: tensor '%s' starts at data offset %llu, expected %llu (%s)",
					what, ord[i]->name, (unsigned long long)ord[i]->begin,
					(unsigned long long)pos,
					ord[i]->begin > pos ? "hole" : "overlap");
		pos = ord[i]->end;
	}
	free(ord);
	if (!r && pos != data_size)
		r = dcr_err_set(e, DCR_EFORMAT,
				"%s: tensors cover %llu data bytes but the file holds %llu",
				what, (unsigned long long)pos, (unsigned long long)data_size);
	return r;
}

int dcr_st_parse(const uint8_t *buf, uint64_t size, struct dcr_st **out,
		 struct dcr_err *e)
{
	struct dcr_st *st = dcr_calloc(1, sizeof(*st));
	if (!st)
		return dcr_err_sys(e, ENOMEM, "safetensors");
	st->fd = -1;
	int r = parse_header(st, buf, size, e);
	if (r) {
		dcr_st_close(st);
		return r;
	}
	st->map = buf;
	st->size = size;
	*out = st;
	return 0;
}

int dcr_st_open(const char *path, struct dcr_st **out, struct dcr_err *e)
{
	struct dcr_st *st = dcr_calloc(1, sizeof(*st));
	if (!st)
		return dcr_err_sys(e, ENOMEM, "%s", path);
	st->path = dcr_strdup(path);
	st->fd = open(path, O_RDONLY | O_CLOEXEC);
	int r = 0;
	if (st->fd < 0) {
		/* each file of a checkpoint is held open while it is read */
		r = errno == EMFILE
			? dcr_err_sys(e, errno, "cannot open '%s' (a checkpoint's files are each held open while it is read: raise the limit, ulimit -n)", path)
			: dcr_err_sys(e, errno, "cannot open '%s'", path);
		goto fail;
	}
	struct stat sb;
	if (fstat(st->fd, &sb)) {
		r = dcr_err_sys(e, errno, "cannot stat '%s'", path);
		goto fail;
	}
	if (!S_ISREG(sb.st_mode)) {
		r = dcr_err_set(e, DCR_EFORMAT, "'%s' is not a regular file", path);
		goto fail;
	}
	st->size = (uint64_t)sb.st_size;
	st->mtime_s = (int64_t)sb.st_mtim.tv_sec;
	st->mtime_ns = (int64_t)sb.st_mtim.tv_nsec;
	if (st->size) {
		void *m = mmap(NULL, st->size, PROT_READ, MAP_SHARED, st->fd, 0);
		if (m == MAP_FAILED) {
			r = dcr_err_sys(e, errno, "cannot map '%s'", path);
			goto fail;
		}
		st->map = m;
	}
	r = parse_header(st, st->map, st->size, e);
	if (r)
		goto fail;
	*out = st;
	return 0;
fail:
	dcr_st_close(st);
	return r;
}

const struct dcr_tensor_info *dcr_st_find(const struct dcr_st *st, const char *name)
{
	for (size_t i = 0; i < st->ntensors; i++)
		if (!strcmp(st->tensors[i].name, name))
			return &st->tensors[i];
	return NULL;
}

uint64_t dcr_tensor_bytes(const struct dcr_tensor_info *t)
{
	return t->end - t->begin;
}

/* ---- writing ---- */

int dcr_st_layout(struct dcr_tensor_info *t, size_t n, struct dcr_err *e)
{
	uint64_t pos = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t nelem = 1, nbits;
		for (unsigned k = 0; k < t[i].ndim; k++)
			if (mul_ovf(nelem, t[i].shape[k], &nelem))
				return dcr_err_set(e, DCR_EFORMAT, "tensor '%s': element count overflows",
						   t[i].name);
		if (mul_ovf(nelem, dcr_dtype_bits(t[i].dtype), &nbits) || nbits % 8)
			return dcr_err_set(e, DCR_EFORMAT,
					   "tensor '%s': size is not a whole number of bytes", t[i].name);
		t[i].nelem = nelem;
		t[i].begin = pos;
		if (add_ovf(pos, nbits / 8, &pos))
			return dcr_err_set(e, DCR_EFORMAT, "tensor '%s': offset overflows", t[i].name);
		t[i].end = pos;
	}
	return 0;
}

/* How dcr_st_writer_zeros gives a new tensor its zeros, asked of the file
 * system once a file */
enum st_zeros { ST_ZEROS_UNASKED, ST_ZEROS_RESERVE, ST_ZEROS_WRITE };

struct dcr_st_writer {
	struct dcr_atomic a;
	uint64_t expect, written;
	uint64_t data_off; /* 8 + the padded header */
	int committed;
	enum st_zeros zeros;
};

int dcr_st_writer_new(const char *path, const struct dcr_tensor_info *t,
		      size_t n, const char *const *meta_kv, size_t nmeta,
		      struct dcr_st_writer **out, struct dcr_err *e)
{
	json_t *root = json_object();
	int r = 0;
	if (!root)
		return dcr_err_sys(e, ENOMEM, "%s", path);
	if (nmeta) {
		json_t *m = json_object();
		for (size_t i = 0; m && i < nmeta; i++)
			json_object_set_new(m, meta_kv[2 * i], json_string(meta_kv[2 * i + 1]));
		json_object_set_new(root, "__metadata__", m);
	}
	uint64_t pos = 0;
	for (size_t i = 0; i < n; i++) {
		if (t[i].begin != pos || t[i].end < t[i].begin) {
			json_decref(root);
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s: tensor '%s' is not laid out contiguously", path,
					   t[i].name);
		}
		pos = t[i].end;
		json_t *o = json_object(), *shape = json_array(), *offs = json_array();
		for (unsigned k = 0; k < t[i].ndim; k++)
			json_array_append_new(shape, json_integer((json_int_t)t[i].shape[k]));
		json_array_append_new(offs, json_integer((json_int_t)t[i].begin));
		json_array_append_new(offs, json_integer((json_int_t)t[i].end));
		json_object_set_new(o, "dtype", json_string(dcr_dtype_name(t[i].dtype)));
		json_object_set_new(o, "shape", shape);
		json_object_set_new(o, "data_offsets", offs);
		if (json_object_get(root, t[i].name)) {
			json_decref(o);
			json_decref(root);
			return dcr_err_set(e, DCR_EFORMAT, "%s: duplicate tensor '%s'", path, t[i].name);
		}
		json_object_set_new(root, t[i].name, o);
	}
	char *hdr = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!hdr)
		return dcr_err_sys(e, ENOMEM, "%s", path);
	size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
	struct dcr_st_writer *w = dcr_calloc(1, sizeof(*w));
	if (!w) {
		free(hdr);
		return dcr_err_sys(e, ENOMEM, "%s", path);
	}
	r = dcr_atomic_open(&w->a, path, e);
	if (r) {
		free(hdr);
		free(w);
		return r;
	}
	uint8_t len8[8];
	put_le64(len8, padded);
	char *pad = malloc(padded);
	if (!pad)
		r = -ENOMEM;
	else {
		memcpy(pad, hdr, hl);
		memset(pad + hl, ' ', padded - hl);
		r = dcr_write_full(w->a.fd, len8, 8);
		if (!r)
			r = dcr_write_full(w->a.fd, pad, padded);
	}
	free(pad);
	free(hdr);
	if (r) {
		dcr_atomic_abort(&w->a);
		free(w);
		return dcr_err_sys(e, r, "cannot write '%s'", path);
	}
	w->expect = pos;
	w->data_off = 8 + padded;
	*out = w;
	return 0;
}

uint64_t dcr_st_writer_data_off(const struct dcr_st_writer *w)
{
	return w->data_off;
}

int dcr_st_writer_write(struct dcr_st_writer *w, const void *buf, size_t len,
			struct dcr_err *e)
{
	if (len > w->expect - w->written)
		return dcr_err_set(e, DCR_EFORMAT, "'%s': more tensor data than the header declares",
				   w->a.final);
	int r = dcr_write_full(w->a.fd, buf, len);
	if (r)
		return dcr_err_sys(e, r, "cannot write '%s'", w->a.final);
	w->written += len;
	return 0;
}

int dcr_st_writer_zeros(struct dcr_st_writer *w, uint64_t len, struct dcr_err *e)
{
	if (len > w->expect - w->written)
		return dcr_err_set(e, DCR_EFORMAT, "'%s': more tensor data than the header declares",
				   w->a.final);
	off_t at = lseek(w->a.fd, 0, SEEK_CUR);
	int r = at < 0 ? errno : 0;
	if (!r && len) {
		/* the blocks are the file's from now on and read as zeros; a
		 * file system without fallocate has them written by glibc, one
		 * byte a block, or says EOPNOTSUPP: then they are written here */
		if (w->zeros == ST_ZEROS_UNASKED) {
			/* tmpfs: writing into its fallocated pages costs 2-5x
			 * writing fresh ones (1 GiB: 0.6-1.8 s against 0.3
			 * here), more than the zeros it saves; on ext4 the
			 * zeros cost 0.8-2.6 s a GiB and the fallocate nothing */
			struct statfs fs;
			int tmpfs = !fstatfs(w->a.fd, &fs) && fs.f_type == TMPFS_MAGIC;
			w->zeros = tmpfs ? ST_ZEROS_WRITE : ST_ZEROS_RESERVE;
		}
		r = w->zeros == ST_ZEROS_WRITE ? EOPNOTSUPP
					       : posix_fallocate(w->a.fd, at, (off_t)len);
		if (r == EOPNOTSUPP || r == ENOSYS || r == EINVAL) {
			w->zeros = ST_ZEROS_WRITE; /* and for the file's next tensors */
			static const uint8_t zero[65536];
			r = 0;
			for (uint64_t o = 0; o < len && !r; o += sizeof(zero))
				r = -dcr_write_full(w->a.fd, zero,
						    len - o < sizeof(zero) ? (size_t)(len - o) : sizeof(zero));
			if (!r)
				at = -1; /* written: the offset moved */
		}
		if (!r && at >= 0 && lseek(w->a.fd, at + (off_t)len, SEEK_SET) < 0)
			r = errno;
	}
	if (r)
		return dcr_err_sys(e, r, "cannot write '%s'", w->a.final);
	w->written += len;
	return 0;
}

int dcr_st_writer_commit(struct dcr_st_writer *w, struct dcr_err *e)
{
	if (w->written != w->expect)
		return dcr_err_set(e, DCR_EFORMAT, "'%s': %llu of %llu data bytes written",
				   w->a.final, (unsigned long long)w->written,
				   (unsigned long long)w->expect);
	int r = dcr_atomic_commit(&w->a, e);
	w->committed = 1;
	return r;
}

void dcr_st_writer_free(struct dcr_st_writer *w)
{
	if (!w)
		return;
	if (!w->committed)
		dcr_atomic_abort(&w->a);
	free(w);
}
