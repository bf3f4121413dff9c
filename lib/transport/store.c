/* store.c - store dispatch by URL, object names, the directory store and
 * the pool of workers that runs transfers in parallel. HTTP and S3 live in
 * store_net.c. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"
#include "core/util.h"
#include "transport/store-net.h"

/* ---- names ---------------------------------------------------------- */

static int check_path(const char *what, const char *name, int allow_partial,
		      struct dcr_err *e)
{
	if (!name)
		return dcr_err_set(e, DCR_EFORMAT, "invalid %s: none given", what);
	size_t n = strlen(name);
	if (n > 1024)
		return dcr_err_set(e, DCR_EFORMAT, "invalid %s '%.64s...': longer than 1024 bytes",
				   what, name);
	if (!allow_partial && !n)
		return dcr_err_set(e, DCR_EFORMAT, "invalid %s: empty", what);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c < 0x20 || c == 0x7f)
			return dcr_err_set(e, DCR_EFORMAT,
					   "invalid %s: control character 0x%02x at byte %zu",
					   what, c, i);
	}
	if (name[0] == '/')
		return dcr_err_set(e, DCR_EFORMAT, "invalid %s '%s': starts with '/'", what, name);
	if (!allow_partial && name[n - 1] == '/')
		return dcr_err_set(e, DCR_EFORMAT, "invalid %s '%s': ends with '/'", what, name);
	/* Components: none empty, ".", or ".." (the last one of a prefix may
	 * be partial, but not "." or ".."). */
	const char *p = name;
	while (*p) {
		const char *end = strchr(p, '/');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if ((len == 0 && end) || (len == 1 && p[0] == '.') ||
		    (len == 2 && p[0] == '.' && p[1] == '.'))
			return dcr_err_set(e, DCR_EFORMAT,
					   "invalid %s '%s': empty, '.' or '..' path component",
					   what, name);
		if (!end)
			break;
		p = end + 1;
	}
	return 0;
}

int dcr_store_check_name(const char *name, struct dcr_err *e)
{
	return check_path("object name", name, 0, e);
}

void dcr_store_names_free(char **names, size_t n)
{
	for (size_t i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
}

/* ---- directory store ------------------------------------------------ */

static char *dir_path(struct dcr_store *s, const char *name, struct dcr_err *e)
{
	char *p = dcr_path_join(s->root, name);
	if (!p)
		dcr_err_sys(e, ENOMEM, "cannot store '%s'", name);
	return p;
}

static int dir_parent(const char *path, struct dcr_err *e)
{
	char *d = dcr_dirname(path);
	if (!d)
		return dcr_err_sys(e, ENOMEM, "cannot create the directory of '%s'", path);
	int r = dcr_mkdir_p(d, e);
	free(d);
	return r;
}

static int copy_fd(int in, int out, const char *src, const char *dst,
		   uint64_t *copied, struct dcr_err *e)
{
	uint64_t total = 0;
	int use_sendfile = 1;
	uint8_t *buf = NULL;
	for (;;) {
		ssize_t n;
		if (use_sendfile) {
			n = sendfile(out, in, NULL, 1 << 30);
			if (n < 0 && (errno == EINVAL || errno == ENOSYS) && total == 0) {
				use_sendfile = 0;
				continue;
			}
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				int err = errno;
				free(buf);
				return dcr_err_sys(e, err, "cannot copy '%s' to '%s'", src, dst);
			}
		} else {
			if (!buf && !(buf = malloc(1 << 20)))
				return dcr_err_sys(e, ENOMEM, "cannot copy '%s'", src);
			n = read(in, buf, 1 << 20);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				int err = errno;
				free(buf);
				return dcr_err_sys(e, err, "cannot read '%s'", src);
			}
			int r = n ? dcr_write_full(out, buf, (size_t)n) : 0;
			if (r) {
				free(buf);
				return dcr_err_sys(e, r, "cannot write '%s'", dst);
			}
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
	}
	free(buf);
	if (copied)
		*copied = total;
	return 0;
}

static int dir_put(struct dcr_store *s, const char *name, const void *buf,
		   size_t len, const char *src, int if_absent, struct dcr_err *e)
{
	char *path = dir_path(s, name, e);
	if (!path)
		return -ENOMEM;
	struct dcr_atomic a;
	int r = dir_parent(path, e);
	if (!r)
		r = dcr_atomic_open(&a, path, e);
	if (r) {
		free(path);
		return r;
	}
	if (src) {
		int in = open(src, O_RDONLY | O_CLOEXEC);
		if (in < 0)
			r = dcr_err_sys(e, errno, "cannot open '%s'", src);
		else {
			r = copy_fd(in, a.fd, src, path, NULL, e);
			close(in);
		}
	} else {
		r = dcr_write_full(a.fd, buf, len);
		if (r)
			dcr_err_sys(e, r, "cannot write '%s'", path);
	}
	if (r) {
		dcr_atomic_abort(&a);
	} else if (!if_absent) {
		r = dcr_atomic_commit(&a, e);
	} else {
		/* The temp file is complete and durable before it gets the
		 * final name; link(2) fails if that name exists. */
		if (fsync(a.fd))
			r = dcr_err_sys(e, errno, "cannot fsync '%s'", a.tmp);
		else if (link(a.tmp, path))
			r = errno == EEXIST
				? dcr_err_set(e, DCR_ECONFLICT, "cannot create '%s': it already exists", path)
				: dcr_err_sys(e, errno, "cannot link '%s' to '%s'", a.tmp, path);
		dcr_atomic_abort(&a);
		if (!r)
			r = dcr_fsync_parent(path, e);
	}
	free(path);
	return r;
}

static int dir_open_obj(struct dcr_store *s, const char *name, char **pathp,
			uint64_t *size, struct dcr_err *e)
{
	char *path = dir_path(s, name, e);
	if (!path)
		return -ENOMEM;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0) {
		int r = errno == ENOENT || errno == ENOTDIR
			? dcr_err_set(e, DCR_ENOTFOUND, "cannot open '%s': no such object", path)
			: dcr_err_sys(e, errno, "cannot open '%s'", path);
		free(path);
		return r;
	}
	int r = 0;
	if (fstat(fd, &st))
		r = dcr_err_sys(e, errno, "cannot stat '%s'", path);
	else if (S_ISDIR(st.st_mode))
		r = dcr_err_set(e, DCR_ENOTFOUND, "cannot open '%s': no such object (a directory)", path);
	else if (!S_ISREG(st.st_mode))
		r = dcr_err_set(e, DCR_EFORMAT, "cannot open '%s': not a regular file", path);
	if (r) {
		close(fd);
		free(path);
		return r;
	}
	*size = (uint64_t)st.st_size;
	*pathp = path;
	return fd;
}

static int dir_get(struct dcr_store *s, const char *name, uint8_t **buf,
		   size_t *len, struct dcr_err *e)
{
	char *path;
	uint64_t size;
	int fd = dir_open_obj(s, name, &path, &size, e);
	if (fd < 0)
		return fd;
	int r = 0;
	uint8_t *p = size < SIZE_MAX ? malloc((size_t)size + 1) : NULL;
	if (!p)
		r = dcr_err_sys(e, ENOMEM, "cannot read '%s' (%llu bytes)", path,
				(unsigned long long)size);
	else if ((r = dcr_pread_full(fd, p, (size_t)size, 0)))
		r = dcr_err_sys(e, r == -EPIPE ? EIO : -r, "cannot read '%s'", path);
	close(fd);
	free(path);
	if (r) {
		free(p);
		return r;
	}
	p[size] = 0;
	*buf = p;
	*len = (size_t)size;
	return 0;
}

static int dir_get_range(struct dcr_store *s, const char *name, uint64_t off,
			 size_t len, uint8_t *buf, struct dcr_err *e)
{
	char *path;
	uint64_t size;
	int fd = dir_open_obj(s, name, &path, &size, e);
	if (fd < 0)
		return fd;
	int r = 0;
	if (off > size || len > size - off)
		r = dcr_err_set(e, DCR_EFORMAT,
				"cannot read %zu bytes at %llu of '%s': the object has only %llu bytes",
				len, (unsigned long long)off, path, (unsigned long long)size);
	else if ((r = dcr_pread_full(fd, buf, len, off)))
		r = dcr_err_sys(e, r == -EPIPE ? EIO : -r, "cannot read '%s'", path);
	close(fd);
	free(path);
	return r;
}

static int dir_get_to_fd(struct dcr_store *s, const char *name, int out,
			 uint64_t *size, struct dcr_err *e)
{
	char *path;
	uint64_t sz, copied = 0;
	int fd = dir_open_obj(s, name, &path, &sz, e);
	if (fd < 0)
		return fd;
	int r = copy_fd(fd, out, path, "the output", &copied, e);
	if (!r && copied != sz)
		r = dcr_err_set(e, -EIO, "cannot read '%s': it changed size while read (%llu, then %llu bytes)",
				path, (unsigned long long)sz, (unsigned long long)copied);
	if (!r && size)
		*size = copied;
	close(fd);
	free(path);
	return r;
}

static int dir_stat(struct dcr_store *s, const char *name, uint64_t *size,
		    struct dcr_err *e)
{
	char *path;
	int fd = dir_open_obj(s, name, &path, size, e);
	if (fd < 0)
		return fd;
	close(fd);
	free(path);
	return 0;
}

static int dir_delete(struct dcr_store *s, const char *name, struct dcr_err *e)
{
	char *path = dir_path(s, name, e);
	if (!path)
		return -ENOMEM;
	int r = 0;
	if (unlink(path))
		r = errno == ENOENT || errno == ENOTDIR
			? dcr_err_set(e, DCR_ENOTFOUND, "cannot delete '%s': no such object", path)
			: dcr_err_sys(e, errno, "cannot delete '%s'", path);
	else
		r = dcr_fsync_parent(path, e);
	free(path);
	return r;
}

int dcr_names_add(struct dcr_names *l, char *s)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		char **v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = s;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void dcr_names_sort(struct dcr_names *l)
{
	if (l->n)
		qsort(l->v, l->n, sizeof(*l->v), cmp_str);
}

static int names_add(struct dcr_names *l, const char *s, size_t len)
{
	char *c = strndup(s, len);
	if (!c || dcr_names_add(l, c)) {
		free(c);
		return -ENOMEM;
	}
	return 0;
}

static int is_temp(const char *base)
{
	return base[0] == '.' && strstr(base, ".tmp-");
}

/* Walk dir (root/rel), adding regular files whose relative name starts with
 * prefix. */
static int dir_walk(const char *root, struct dcr_buf *rel, const char *prefix,
		    struct dcr_names *l, struct dcr_err *e)
{
	char *path = rel->len ? dcr_asprintf("%s/%.*s", root, (int)rel->len, (char *)rel->p)
			      : dcr_strdup(root);
	if (!path)
		return dcr_err_sys(e, ENOMEM, "cannot list '%s'", root);
	DIR *d = opendir(path);
	if (!d) {
		int r = errno == ENOENT || errno == ENOTDIR
			? 0 : dcr_err_sys(e, errno, "cannot list '%s'", path);
		free(path);
		return r;
	}
	int r = 0;
	size_t plen = strlen(prefix), keep = rel->len;
	struct dirent *de;
	while (!r && (errno = 0, de = readdir(d))) {
		const char *b = de->d_name;
		if (!strcmp(b, ".") || !strcmp(b, "..") || is_temp(b))
			continue;
		rel->len = keep;
		if ((keep && dcr_buf_add(rel, "/", 1)) || dcr_buf_add(rel, b, strlen(b))) {
			r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", path);
			break;
		}
		size_t cmp = rel->len < plen ? rel->len : plen;
		if (memcmp(rel->p, prefix, cmp))
			continue; /* cannot match below either */
		int type = de->d_type;
		if (type == DT_UNKNOWN || type == DT_LNK) {
			struct stat st;
			char *full = dcr_asprintf("%s/%s", path, b);
			type = full && !stat(full, &st)
				? (S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN)
				: DT_UNKNOWN;
			free(full);
		}
		if (type == DT_DIR)
			r = dir_walk(root, rel, prefix, l, e);
		else if (type == DT_REG && rel->len >= plen &&
			 names_add(l, (char *)rel->p, rel->len))
			r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", path);
	}
	if (!r && errno)
		r = dcr_err_sys(e, errno, "cannot list '%s'", path);
	rel->len = keep;
	closedir(d);
	free(path);
	return r;
}

static int dir_list(struct dcr_store *s, const char *prefix, char ***names,
		    size_t *n, struct dcr_err *e)
{
	struct dcr_names l = {0};
	struct dcr_buf rel = {0};
	/* Start at the deepest directory the prefix names. */
	const char *slash = strrchr(prefix, '/');
	int r = 0;
	if (slash && dcr_buf_add(&rel, prefix, (size_t)(slash - prefix)))
		r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", s->root);
	if (!r)
		r = dir_walk(s->root, &rel, prefix, &l, e);
	dcr_buf_free(&rel);
	if (r) {
		dcr_store_names_free(l.v, l.n);
		return r;
	}
	dcr_names_sort(&l);
	*names = l.v;
	*n = l.n;
	return 0;
}

/* ---- open/close and dispatch --------------------------------------- */

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

int dcr_store_open(const char *url, const struct dcr_store_opts *o,
		   struct dcr_store **out, struct dcr_err *e)
{
	*out = NULL;
	if (!url || !*url)
		return dcr_err_set(e, -EINVAL, "no store given");
	struct dcr_store *s = dcr_calloc(1, sizeof(*s));
	if (!s)
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", url);
	if (o)
		s->o = *o;
	s->o.endpoint = s->o.cacert = NULL;
	if (!s->o.retries)
		s->o.retries = 5;
	if (s->o.retries < 0)
		s->o.retries = 0;
	if (s->o.parallel <= 0)
		s->o.parallel = 8;
	if (s->o.parallel > 256)
		s->o.parallel = 256;
	if (s->o.timeout_s <= 0)
		s->o.timeout_s = 30;
	if (!s->o.part_size)
		s->o.part_size = 16u << 20;
	if (!s->o.multipart_threshold)
		s->o.multipart_threshold = 128u << 20;
	if (s->o.backoff_ms <= 0)
		s->o.backoff_ms = 200;
	if (s->o.list_page <= 0 || s->o.list_page > 1000)
		s->o.list_page = 1000;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv_work, NULL);
	pthread_cond_init(&s->cv_done, NULL);
	pthread_mutex_init(&s->curl_mu, NULL);
	pthread_mutex_init(&s->cas_mu, NULL);
	s->url = dcr_strdup(url);
	if ((o && o->endpoint && !(s->o.endpoint = dcr_strdup(o->endpoint))) ||
	    (o && o->cacert && !(s->o.cacert = dcr_strdup(o->cacert))) || !s->url) {
		dcr_store_close(s);
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", url);
	}
	int r;
	if (starts(url, "s3://") || starts(url, "http://") || starts(url, "https://")) {
		r = dcr_net_open(s, url, e);
	} else if (strstr(url, "://") && !starts(url, "file://")) {
		r = dcr_err_set(e, -EINVAL,
				"cannot open store '%s': unknown URL scheme (use a directory, file://, s3://, http:// or https://)",
				url);
	} else {
		const char *p = starts(url, "file://") ? url + 7 : url;
		size_t n = strlen(p);
		while (n > 1 && p[n - 1] == '/')
			n--;
		s->kind = STORE_DIR;
		if (!*p)
			r = dcr_err_set(e, -EINVAL, "cannot open store '%s': empty path", url);
		else if (!(s->root = strndup(p, n)))
			r = dcr_err_sys(e, ENOMEM, "cannot open store '%s'", url);
		else
			r = 0;
	}
	if (r) {
		dcr_store_close(s);
		return r;
	}
	*out = s;
	return 0;
}

void dcr_store_close(struct dcr_store *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_cond_broadcast(&s->cv_work);
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	free(s->threads);
	if (s->kind == STORE_HTTP || s->kind == STORE_S3)
		dcr_net_close(s);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv_work);
	pthread_cond_destroy(&s->cv_done);
	pthread_mutex_destroy(&s->curl_mu);
	pthread_mutex_destroy(&s->cas_mu);
	free((char *)s->o.endpoint);
	free((char *)s->o.cacert);
	free(s->url);
	free(s->root);
	free(s);
}

const char *dcr_store_url(const struct dcr_store *s) { return s->url; }

int dcr_store_is_local(const struct dcr_store *s)
{
	return s->kind == STORE_DIR;
}

int dcr_store_put(struct dcr_store *s, const char *name, const void *buf,
		  size_t len, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	if (s->kind == STORE_DIR)
		return dir_put(s, name, buf, len, NULL, 0, e);
	return dcr_net_put(s, name, buf, len, -1, 0, 0, e);
}

int dcr_store_put_if_absent(struct dcr_store *s, const char *name,
			    const void *buf, size_t len, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	r = s->kind == STORE_DIR ? dir_put(s, name, buf, len, NULL, 1, e)
				 : dcr_net_put(s, name, buf, len, -1, 0, 1, e);
	if (r == DCR_ECONFLICT) {
		/* A create whose answer was lost (and retried, by us or by
		 * libcurl on a dead reused connection) finds its own bytes:
		 * exactly these bytes there means the create is done. */
		uint8_t *got = NULL;
		size_t glen = 0;
		struct dcr_err ge;
		if (!dcr_store_get(s, name, &got, &glen, &ge) && glen == len &&
		    (!len || !memcmp(got, buf, len)))
			r = 0;
		free(got);
	}
	return r;
}

int dcr_store_put_file(struct dcr_store *s, const char *name, const char *path,
		       struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	if (s->kind == STORE_DIR)
		return dir_put(s, name, NULL, 0, path, 0, e);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return dcr_err_sys(e, errno, "cannot open '%s'", path);
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		r = dcr_err_sys(e, errno ? errno : EINVAL, "cannot upload '%s': not a regular file", path);
		close(fd);
		return r;
	}
	r = dcr_net_put(s, name, NULL, 0, fd, (uint64_t)st.st_size, 0, e);
	close(fd);
	return r;
}

int dcr_store_get(struct dcr_store *s, const char *name, uint8_t **buf,
		  size_t *len, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	if (s->kind == STORE_DIR)
		return dir_get(s, name, buf, len, e);
	return dcr_net_get(s, name, buf, len, e);
}

int dcr_store_get_blob(struct dcr_store *s, const char *name, struct dcr_blob *b,
		       struct dcr_err *e)
{
	return dcr_store_get_blob_hashed(s, name, b, 0, NULL, e);
}

int dcr_store_get_blob_hashed(struct dcr_store *s, const char *name, struct dcr_blob *b,
			      size_t tail, const struct dcr_hasher *h, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r) {
		dcr_blob_free(b);
		return r;
	}
	if (s->kind != STORE_DIR) {
		/* into the heap buffer b may bring, grown as needed: a
		 * recycled buffer costs no page faults */
		if (b->map)
			dcr_blob_free(b);
		struct dcr_buf buf = {b->p, 0, b->cap};
		r = dcr_net_get_buf(s, name, &buf, tail, h, e);
		b->p = buf.p;
		b->len = buf.len;
		b->cap = buf.cap;
		return r;
	}
	dcr_blob_free(b);
	/* objects are replaced by rename, never rewritten in place, so a
	 * mapping stays what it was when opened */
	char *path;
	uint64_t size;
	int fd = dir_open_obj(s, name, &path, &size, e);
	if (fd < 0)
		return fd;
	r = dcr_blob_map_fd(b, fd, path, SIZE_MAX, e);
	close(fd);
	free(path);
	if (!r && h)
		h->update(h->ctx, b->p, b->len > tail ? b->len - tail : 0);
	return r;
}

int dcr_store_get_range(struct dcr_store *s, const char *name, uint64_t off,
			size_t len, uint8_t *buf, struct dcr_err *e)
{
	return dcr_store_get_range_hashed(s, name, off, len, buf, NULL, e);
}

int dcr_store_get_range_hashed(struct dcr_store *s, const char *name, uint64_t off,
			       size_t len, uint8_t *buf, const struct dcr_hasher *h,
			       struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	if (s->kind == STORE_DIR) {
		r = dir_get_range(s, name, off, len, buf, e);
		if (!r && h)
			h->update(h->ctx, buf, len);
		return r;
	}
	if (!len)
		return 0;
	return dcr_net_get_range(s, name, off, len, buf, h, e);
}

int dcr_store_get_to_fd(struct dcr_store *s, const char *name, int fd,
			uint64_t *size, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	if (s->kind == STORE_DIR)
		return dir_get_to_fd(s, name, fd, size, e);
	return dcr_net_get_to_fd(s, name, fd, size, e);
}

int dcr_store_stat(struct dcr_store *s, const char *name, uint64_t *size,
		   struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	if (s->kind == STORE_DIR)
		return dir_stat(s, name, size, e);
	return dcr_net_stat(s, name, size, e);
}

int dcr_store_list(struct dcr_store *s, const char *prefix, char ***names,
		   size_t *n, struct dcr_err *e)
{
	*names = NULL;
	*n = 0;
	if (!prefix)
		prefix = "";
	int r = check_path("prefix", prefix, 1, e);
	if (r)
		return r;
	if (s->kind == STORE_DIR)
		return dir_list(s, prefix, names, n, e);
	return dcr_net_list(s, prefix, names, n, e);
}

int dcr_store_delete(struct dcr_store *s, const char *name, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	if (s->kind == STORE_DIR)
		return dir_delete(s, name, e);
	return dcr_net_delete(s, name, e);
}

/* ---- job pool -------------------------------------------------------- */

enum { JOB_QUEUED = 1, JOB_RUNNING, JOB_DONE };

static void run_job(struct dcr_store *s, struct dcr_store_job *j)
{
	struct dcr_err *e = &j->err;
	e->code = 0;
	e->msg[0] = '\0';
	switch (j->op) {
	case DCR_STORE_PUT:
		j->rc = dcr_store_put(s, j->name, j->data, j->len, e);
		break;
	case DCR_STORE_PUT_FILE:
		j->rc = dcr_store_put_file(s, j->name, j->path, e);
		break;
	case DCR_STORE_PUT_IF_ABSENT:
		j->rc = dcr_store_put_if_absent(s, j->name, j->data, j->len, e);
		break;
	case DCR_STORE_GET:
		j->rc = dcr_store_get(s, j->name, &j->buf, &j->buf_len, e);
		break;
	case DCR_STORE_GET_RANGE:
		j->rc = dcr_store_get_range(s, j->name, j->off, j->len, j->dst, e);
		break;
	case DCR_STORE_GET_TO_FD:
		j->rc = dcr_store_get_to_fd(s, j->name, j->fd, &j->size, e);
		break;
	case DCR_STORE_STAT:
		j->rc = dcr_store_stat(s, j->name, &j->size, e);
		break;
	case DCR_STORE_DELETE:
		j->rc = dcr_store_delete(s, j->name, e);
		break;
	default:
		j->rc = dcr_err_set(e, -EINVAL, "unknown store job type %d", j->op);
	}
}

static void *worker(void *arg)
{
	struct dcr_store *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&s->cv_work, &s->mu);
		if (!s->head)
			break; /* stopping, queue drained */
		struct dcr_store_job *j = s->head;
		s->head = j->next_;
		if (!s->head)
			s->tail = NULL;
		j->state_ = JOB_RUNNING;
		pthread_mutex_unlock(&s->mu);
		run_job(s, j);
		pthread_mutex_lock(&s->mu);
		j->state_ = JOB_DONE;
		pthread_cond_broadcast(&s->cv_done);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int dcr_store_submit(struct dcr_store *s, struct dcr_store_job *j,
		     struct dcr_err *e)
{
	pthread_mutex_lock(&s->mu);
	if (!s->threads) {
		s->threads = dcr_calloc((size_t)s->o.parallel, sizeof(*s->threads));
		if (!s->threads) {
			pthread_mutex_unlock(&s->mu);
			return dcr_err_sys(e, ENOMEM, "cannot start transfer threads");
		}
		for (int i = 0; i < s->o.parallel; i++) {
			int r = pthread_create(&s->threads[s->nthreads], NULL, worker, s);
			if (r) {
				if (!s->nthreads) {
					free(s->threads);
					s->threads = NULL;
					pthread_mutex_unlock(&s->mu);
					return dcr_err_sys(e, r, "cannot start transfer threads");
				}
				break; /* run with fewer */
			}
			s->nthreads++;
		}
	}
	j->next_ = NULL;
	j->state_ = JOB_QUEUED;
	j->rc = 0;
	if (s->tail)
		s->tail->next_ = j;
	else
		s->head = j;
	s->tail = j;
	pthread_cond_signal(&s->cv_work);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int dcr_store_wait(struct dcr_store *s, struct dcr_store_job *j)
{
	pthread_mutex_lock(&s->mu);
	while (j->state_ == JOB_QUEUED || j->state_ == JOB_RUNNING)
		pthread_cond_wait(&s->cv_done, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return j->rc;
}

int dcr_store_run(struct dcr_store *s, struct dcr_store_job *jobs, size_t n,
		  struct dcr_err *e)
{
	size_t queued = 0;
	int r = 0;
	for (; queued < n; queued++)
		if ((r = dcr_store_submit(s, &jobs[queued], e)))
			break;
	int first = 0;
	for (size_t i = 0; i < queued; i++) {
		int jr = dcr_store_wait(s, &jobs[i]);
		if (jr && !first) {
			first = jr;
			if (e)
				*e = jobs[i].err;
		}
	}
	return r ? r : first;
}
