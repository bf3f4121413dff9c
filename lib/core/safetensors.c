/* safetensors.c - read (map and validate) and write safetensors files.
 *
 * Validation follows the reference implementation (huggingface/safetensors):
 * the header length is at most 100,000,000 and inside the file, the header
 * is UTF-8 JSON starting with '{', every dtype is known, every tensor's byte
 * count is its element count times its dtype size (no overflow, whole bytes),
 * offsets are contiguous from 0 with no hole or overlap, the last offset is
 * the data size, names are unique, and __metadata__ maps strings to strings.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

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

static int get_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* Parse one tensor entry; `what` names the file for messages. */
static int parse_tensor(const char *what, const char *name, json_t *v,
			struct dcr_tensor_info *t, struct dcr_err *e)
{
	if (!json_is_object(v))
		return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': entry is not an object", what, name);
	json_t *dt = json_object_get(v, "dtype");
	json_t *shape = json_object_get(v, "shape");
	json_t *offs = json_object_get(v, "data_offsets");
	if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: tensor '%s': needs string 'dtype', array 'shape' and array 'data_offsets'",
				   what, name);
	t->dtype = dcr_dtype_parse(json_string_value(dt));
	if (t->dtype < 0)
		return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': unknown dtype '%s'", what,
				   name, json_string_value(dt));
	size_t nd = json_array_size(shape);
	if (nd > DCR_MAX_NDIM)
		return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': %zu dimensions (at most %d)",
				   what, name, nd, DCR_MAX_NDIM);
	t->ndim = (unsigned)nd;
	uint64_t nelem = 1;
	for (size_t k = 0; k < nd; k++) {
		if (get_u64(json_array_get(shape, k), &t->shape[k]))
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s: tensor '%s': shape must hold non-negative integers",
					   what, name);
		if (mul_ovf(nelem, t->shape[k], &nelem))
			return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': element count overflows",
					   what, name);
	}
	t->nelem = nelem;
	if (json_array_size(offs) != 2 || get_u64(json_array_get(offs, 0), &t->begin) ||
	    get_u64(json_array_get(offs, 1), &t->end))
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: tensor '%s': data_offsets must be two non-negative integers",
				   what, name);
	uint64_t nbits;
	if (mul_ovf(nelem, dcr_dtype_bits(t->dtype), &nbits))
		return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': byte count overflows", what, name);
	if (nbits % 8)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: tensor '%s': %s data of %llu elements is not a whole number of bytes",
				   what, name, dcr_dtype_name(t->dtype), (unsigned long long)nelem);
	if (t->end < t->begin || t->end - t->begin != nbits / 8)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: tensor '%s': data_offsets [%llu, %llu] do not hold %llu bytes of %s%s",
				   what, name, (unsigned long long)t->begin,
				   (unsigned long long)t->end, (unsigned long long)(nbits / 8),
				   dcr_dtype_name(t->dtype), "");
	return 0;
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

	json_error_t jerr;
	/* jansson checks UTF-8, rejects NUL in strings and duplicate keys. */
	json_t *root = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return dcr_err_set(e, DCR_EFORMAT, "%s: header is not valid JSON: %s (at byte %d)",
				   what, jerr.text, jerr.position);
	int r = 0;
	if (!json_is_object(root)) {
		r = dcr_err_set(e, DCR_EFORMAT, "%s: header is not a JSON object", what);
		goto out;
	}
	size_t count = json_object_size(root);
	st->tensors = dcr_calloc(count, sizeof(*st->tensors));
	if (!st->tensors) {
		r = dcr_err_sys(e, ENOMEM, "%s", what);
		goto out;
	}
	const char *key;
	json_t *val;
	json_object_foreach(root, key, val) {
		if (!strcmp(key, "__metadata__")) {
			if (!json_is_object(val)) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s: __metadata__ is not an object", what);
				goto out;
			}
			size_t m = json_object_size(val);
			st->meta_keys = dcr_calloc(m, sizeof(char *));
			st->meta_vals = dcr_calloc(m, sizeof(char *));
			if (!st->meta_keys || !st->meta_vals) {
				r = dcr_err_sys(e, ENOMEM, "%s", what);
				goto out;
			}
			const char *mk;
			json_t *mv;
			json_object_foreach(val, mk, mv) {
				if (!json_is_string(mv)) {
					r = dcr_err_set(e, DCR_EFORMAT,
							"%s: __metadata__ value of '%s' is not a string",
							what, mk);
					goto out;
				}
				st->meta_keys[st->nmeta] = dcr_strdup(mk);
				st->meta_vals[st->nmeta] = dcr_strdup(json_string_value(mv));
				st->nmeta++;
				if (!st->meta_keys[st->nmeta - 1] || !st->meta_vals[st->nmeta - 1]) {
					r = dcr_err_sys(e, ENOMEM, "%s", what);
					goto out;
				}
			}
			continue;
		}
		struct dcr_tensor_info *t = &st->tensors[st->ntensors];
		r = parse_tensor(what, key, val, t, e);
		if (r)
			goto out;
		t->name = dcr_strdup(key);
		if (!t->name) {
			r = dcr_err_sys(e, ENOMEM, "%s", what);
			goto out;
		}
		st->ntensors++;
	}

	/* Offsets: contiguous from 0, no holes, no overlaps, ending at the data size. */
	struct dcr_tensor_info **ord = dcr_calloc(st->ntensors, sizeof(*ord));
	if (!ord) {
		r = dcr_err_sys(e, ENOMEM, "%s", what);
		goto out;
	}
	for (size_t i = 0; i < st->ntensors; i++)
		ord[i] = &st->tensors[i];
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
out:
	json_decref(root);
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
		r = dcr_err_sys(e, errno, "cannot open '%s'", path);
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

struct dcr_st_writer {
	struct dcr_atomic a;
	uint64_t expect, written;
	int committed;
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
	*out = w;
	return 0;
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
