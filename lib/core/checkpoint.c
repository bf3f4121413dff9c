/* checkpoint.c - a checkpoint: a directory of safetensors files (with or
 * without model.safetensors.index.json), or one .safetensors file. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "core/checkpoint.h"
#include "core/file.h"
#include "core/util.h"

#define INDEX_NAME "model.safetensors.index.json"
#define INDEX_MAX (256u << 20)

void dcr_ckpt_close(struct dcr_ckpt *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nfiles; i++) {
		dcr_st_close(c->files[i]);
		free(c->file_names[i]);
	}
	free(c->files);
	free(c->file_names);
	free(c->tensors);
	free(c->path);
	free(c);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_tensor(const void *a, const void *b)
{
	const struct dcr_ckpt_tensor *x = a, *y = b;
	return strcmp(x->info->name, y->info->name);
}

int dcr_safe_file_name(const char *s)
{
	size_t n = strlen(s);
	if (!n || n > 255 || !strcmp(s, ".") || !strcmp(s, ".."))
		return 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p == '/' || *p < 0x20 || *p == 0x7f)
			return 0;
	return 1;
}

static int has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

/* File names from the index's weight_map (distinct, sorted). */
static int read_index(const char *dir, char ***names, size_t *n, json_t **wm_out,
		      struct dcr_err *e)
{
	char *path = dcr_path_join(dir, INDEX_NAME);
	uint8_t *buf = NULL;
	size_t len;
	int r = path ? dcr_read_file(path, INDEX_MAX, &buf, &len, e) : -ENOMEM;
	if (r) {
		free(path);
		return r;
	}
	json_error_t jerr;
	json_t *root = json_loadb((char *)buf, len, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (!root) {
		r = dcr_err_set(e, DCR_EFORMAT, "%s: not valid JSON: %s (line %d)", path,
				jerr.text, jerr.line);
		free(path);
		return r;
	}
	json_t *wm = json_object_get(root, "weight_map");
	if (!json_is_object(wm)) {
		r = dcr_err_set(e, DCR_EFORMAT, "%s: no 'weight_map' object", path);
		goto out;
	}
	size_t cap = json_object_size(wm);
	char **v = dcr_calloc(cap, sizeof(char *));
	size_t k = 0;
	if (!v) {
		r = dcr_err_sys(e, ENOMEM, "%s", path);
		goto out;
	}
	const char *key;
	json_t *val;
	json_object_foreach(wm, key, val) {
		if (!json_is_string(val) || !dcr_safe_file_name(json_string_value(val))) {
			r = dcr_err_set(e, DCR_EFORMAT,
					"%s: tensor '%s' maps to an unsafe or non-string file name",
					path, key);
			break;
		}
		v[k++] = (char *)json_string_value(val);
	}
	if (!r) {
		qsort(v, k, sizeof(char *), cmp_str);
		size_t m = 0;
		for (size_t i = 0; i < k; i++)
			if (!m || strcmp(v[m - 1], v[i]))
				v[m++] = v[i];
		for (size_t i = 0; i < m; i++)
			if (!(v[i] = dcr_strdup(v[i])))
				r = dcr_err_sys(e, ENOMEM, "%s", path);
		*names = v;
		*n = m;
		json_incref(wm);
		*wm_out = wm;
	} else {
		free(v);
	}
out:
	json_decref(root);
	free(path);
	return r;
}

static int list_dir(const char *dir, char ***names, size_t *n, struct dcr_err *e)
{
	DIR *d = opendir(dir);
	if (!d)
		return dcr_err_sys(e, errno, "cannot open directory '%s'", dir);
	char **v = NULL;
	size_t k = 0, cap = 0;
	struct dirent *de;
	int r = 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || !has_suffix(de->d_name, ".safetensors"))
			continue;
		if (k == cap) {
			cap = cap ? 2 * cap : 16;
			char **nv = realloc(v, cap * sizeof(char *));
			if (!nv) {
				r = dcr_err_sys(e, ENOMEM, "%s", dir);
				break;
			}
			v = nv;
		}
		if (!(v[k++] = dcr_strdup(de->d_name))) {
			r = dcr_err_sys(e, ENOMEM, "%s", dir);
			break;
		}
	}
	closedir(d);
	if (r) {
		for (size_t i = 0; i < k; i++)
			free(v[i]);
		free(v);
		return r;
	}
	if (k)
		qsort(v, k, sizeof(char *), cmp_str);
	*names = v;
	*n = k;
	return 0;
}

int dcr_ckpt_open(const char *path, struct dcr_ckpt **out, struct dcr_err *e)
{
	struct stat sb;
	if (stat(path, &sb))
		return dcr_err_sys(e, errno, "cannot open checkpoint '%s'", path);
	struct dcr_ckpt *c = dcr_calloc(1, sizeof(*c));
	if (!c)
		return dcr_err_sys(e, ENOMEM, "%s", path);
	c->path = dcr_strdup(path);
	c->is_dir = S_ISDIR(sb.st_mode);
	json_t *wm = NULL;
	int r = 0;
	if (c->is_dir) {
		char *ip = dcr_path_join(path, INDEX_NAME);
		struct stat ib;
		c->has_index = ip && !stat(ip, &ib);
		free(ip);
		r = c->has_index ? read_index(path, &c->file_names, &c->nfiles, &wm, e)
				 : list_dir(path, &c->file_names, &c->nfiles, e);
		if (r)
			goto fail;
	} else {
		const char *b = strrchr(path, '/');
		c->file_names = dcr_calloc(1, sizeof(char *));
		if (!c->file_names || !(c->file_names[0] = dcr_strdup(b ? b + 1 : path))) {
			r = dcr_err_sys(e, ENOMEM, "%s", path);
			goto fail;
		}
		c->nfiles = 1;
	}
	c->files = dcr_calloc(c->nfiles, sizeof(*c->files));
	if (!c->files) {
		r = dcr_err_sys(e, ENOMEM, "%s", path);
		goto fail;
	}
	size_t total = 0;
	for (size_t i = 0; i < c->nfiles; i++) {
		char *fp = c->is_dir ? dcr_path_join(path, c->file_names[i]) : dcr_strdup(path);
		r = fp ? dcr_st_open(fp, &c->files[i], e) : dcr_err_sys(e, ENOMEM, "%s", path);
		free(fp);
		if (r)
			goto fail;
		total += c->files[i]->ntensors;
	}
	c->tensors = dcr_calloc(total, sizeof(*c->tensors));
	if (!c->tensors) {
		r = dcr_err_sys(e, ENOMEM, "%s", path);
		goto fail;
	}
	for (size_t i = 0; i < c->nfiles; i++) {
		struct dcr_st *st = c->files[i];
		for (size_t j = 0; j < st->ntensors; j++) {
			struct dcr_ckpt_tensor *t = &c->tensors[c->ntensors++];
			t->info = &st->tensors[j];
			t->file = i;
			t->file_off = st->data_off + t->info->begin;
			t->data = st->map + t->file_off;
			t->fd = st->fd;
			if (wm) {
				json_t *f = json_object_get(wm, t->info->name);
				if (!f || strcmp(json_string_value(f), c->file_names[i])) {
					r = dcr_err_set(e, DCR_EFORMAT,
							"%s: tensor '%s' is in '%s' but the index %s",
							path, t->info->name, c->file_names[i],
							f ? "names another file" : "does not list it");
					goto fail;
				}
			}
		}
	}
	if (wm && json_object_size(wm) != c->ntensors) {
		r = dcr_err_set(e, DCR_EFORMAT,
				"%s: the index lists %zu tensors but the files hold %zu", path,
				json_object_size(wm), c->ntensors);
		goto fail;
	}
	if (c->ntensors)
		qsort(c->tensors, c->ntensors, sizeof(*c->tensors), cmp_tensor);
	for (size_t i = 1; i < c->ntensors; i++)
		if (!strcmp(c->tensors[i - 1].info->name, c->tensors[i].info->name)) {
			r = dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s' appears in '%s' and '%s'",
					path, c->tensors[i].info->name,
					c->file_names[c->tensors[i - 1].file],
					c->file_names[c->tensors[i].file]);
			goto fail;
		}
	json_decref(wm);
	*out = c;
	return 0;
fail:
	json_decref(wm);
	dcr_ckpt_close(c);
	return r;
}

int dcr_ckpt_unchanged(const struct dcr_ckpt *c, struct dcr_err *e)
{
	for (size_t i = 0; c && i < c->nfiles; i++) {
		const struct dcr_st *st = c->files[i];
		struct stat sb;
		if (!st || st->fd < 0)
			continue;
		if (fstat(st->fd, &sb))
			return dcr_err_sys(e, errno, "cannot stat '%s'", st->path);
		if ((uint64_t)sb.st_size != st->size || (int64_t)sb.st_mtim.tv_sec != st->mtime_s ||
		    (int64_t)sb.st_mtim.tv_nsec != st->mtime_ns)
			return dcr_err_set(e, DCR_EFORMAT,
					   "'%s' changed while it was read (%s; a save still writing it?): what was read may be neither its old bytes nor its new ones; run again once it is complete",
					   st->path,
					   (uint64_t)sb.st_size != st->size ? "its size changed"
									    : "it was written");
	}
	return 0;
}

const struct dcr_ckpt_tensor *dcr_ckpt_find(const struct dcr_ckpt *c, const char *name)
{
	size_t lo = 0, hi = c->ntensors;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int k = strcmp(c->tensors[mid].info->name, name);
		if (!k)
			return &c->tensors[mid];
		if (k < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int dcr_ckpt_tensor_is(const struct dcr_ckpt_tensor *ct, int dtype, unsigned ndim,
		       const uint64_t *shape)
{
	return ct && ct->info->dtype == dtype && ct->info->ndim == ndim &&
	       !memcmp(ct->info->shape, shape, ndim * sizeof(uint64_t));
}

/* ---- hashing every tensor, on all cores ---- */

int dcr_ckpt_tensor_read(const struct dcr_ckpt_tensor *ct, uint64_t off, size_t n,
			 struct dcr_buf *buf, const uint8_t **out, struct dcr_err *e)
{
	if (ct->fd < 0) {
		*out = ct->data + off;
		return 0;
	}
	buf->len = 0;
	if (dcr_buf_reserve(buf, n ? n : 1))
		return dcr_err_sys(e, ENOMEM, "%s", ct->info->name);
	int r = dcr_pread_full(ct->fd, buf->p, n, ct->file_off + off);
	if (r == -EPIPE)
		return dcr_err_set(e, DCR_EFORMAT, "tensor '%s' ends before its header says (file shrank?)",
				   ct->info->name);
	if (r)
		return dcr_err_sys(e, -r, "cannot read tensor '%s'", ct->info->name);
	buf->len = n;
	*out = buf->p;
	return 0;
}
