/* store-dir.c - the directory store: an object is a file under the root,
 * written to a temp file in its directory, fsync'd and renamed (link(2)
 * for put_if_absent), the directory fsync'd. Reads map or pread the file. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__has_include)
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#endif
#endif

#include "core/digest.h"
#include "core/file.h"
#include "core/ntab.h"
#include "core/util.h"
#include "transport/store-dir.h"

struct dir {
	char *root;
	int beneath; /* the opts' beneath */
};

static struct dir *dir_of(struct dcr_store *s) { return s->impl; }

static int dir_open(struct dcr_store *s, const char *url, struct dcr_err *e)
{
	const char *p = !strncmp(url, "file://", 7) ? url + 7 : url;
	size_t n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		n--;
	if (!*p)
		return dcr_err_set(e, -EINVAL, "cannot open store '%s': empty path", url);
	struct dir *d = dcr_calloc(1, sizeof(*d));
	if (!d || !(d->root = strndup(p, n))) {
		free(d);
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", url);
	}
	d->beneath = s->o.beneath;
	s->impl = d;
	return 0;
}

/* 1 if the file fd has open lies under the directory rfd has open (by
 * their paths in /proc/self/fd), else 0. */
static int fd_inside(int rfd, int fd)
{
	char link[64], want[PATH_MAX], got[PATH_MAX];
	ssize_t wn, gn;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", rfd);
	if ((wn = readlink(link, want, sizeof(want) - 1)) <= 0)
		return 0;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	if ((gn = readlink(link, got, sizeof(got) - 1)) <= 0)
		return 0;
	return wn == 1 || /* the root is "/" */
	       (gn > wn && !memcmp(got, want, (size_t)wn) && got[wn] == '/');
}

/* root/name opened with O_PATH (flags: O_PATH, O_CLOEXEC, and O_DIRECTORY
 * or O_NOFOLLOW if wanted), or -errno; a path that leads out of the root
 * (through a symbolic link) is -EXDEV. openat2(2)'s RESOLVE_BENEATH where
 * the kernel has it (5.6) and lets us call it (a container's seccomp
 * filter may answer EPERM); where it refuses (no such call, or a link
 * that is absolute or climbs out and back in), the file's own path
 * (/proc/self/fd) is checked against the root's. So a link is followed
 * where it lands inside, whichever way it is written; O_PATH opens
 * nothing (no FIFO's or device's open runs), and the caller opens the
 * file for reading only once it is known to be inside and regular
 * (dcr_reopen_regular). For a store opened with beneath. */
static int open_beneath(const struct dir *d, const char *name, int flags)
{
	int rfd = open(d->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0)
		return -errno;
	int fd = -1, err = ENOSYS;
#if defined(SYS_openat2) && defined(RESOLVE_BENEATH)
	/* (DCR_TEST_NO_OPENAT2 takes the other way, for the tests) */
	const char *no = getenv("DCR_TEST_NO_OPENAT2");
	if (!no || !*no) {
		struct open_how how = {.flags = (uint64_t)flags,
				       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
		fd = (int)syscall(SYS_openat2, rfd, name, &how, sizeof(how));
		err = fd < 0 ? errno : 0;
	}
#endif
	if (fd < 0 && (err == ENOSYS || err == EPERM || err == EXDEV || err == ELOOP)) {
		int pfd = openat(rfd, name, O_PATH | O_CLOEXEC | (flags & (O_DIRECTORY | O_NOFOLLOW)));
		err = pfd < 0 ? errno : 0;
		if (pfd >= 0 && !fd_inside(rfd, pfd)) {
			err = EXDEV;
			close(pfd);
		} else {
			fd = pfd;
		}
	}
	close(rfd);
	return fd >= 0 ? fd : -(err == ELOOP ? EXDEV : err);
}

static void dir_close(struct dcr_store *s)
{
	struct dir *d = dir_of(s);
	if (d)
		free(d->root);
	free(d);
}

int store_dir_missing(const struct dcr_store *s)
{
	struct stat st;
	const struct dir *d = s->impl;
	return stat(d->root, &st) ? errno == ENOENT || errno == ENOTDIR : !S_ISDIR(st.st_mode);
}

static char *dir_path(struct dcr_store *s, const char *name, struct dcr_err *e)
{
	char *p = dcr_path_join(dir_of(s)->root, name);
	if (!p)
		dcr_err_sys(e, ENOMEM, "cannot store '%s'", name);
	return p;
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

/* buf[0..len), or the file src, as name; with if_absent, only if name is
 * not there (DCR_ECONFLICT). */
static int dir_write(struct dcr_store *s, const char *name, const void *buf,
		     size_t len, const char *src, int if_absent, struct dcr_err *e)
{
	char *path = dir_path(s, name, e);
	if (!path)
		return -ENOMEM;
	struct dcr_atomic a;
	/* a delete that emptied the directory removes it (dir_delete): one
	 * may do so between its making and the temporary file's; it is made
	 * again (once the file is there, the directory is not empty) */
	int r = dcr_atomic_open_mkdir(&a, path, e);
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

static int dir_put(struct dcr_store *s, const char *name, const void *buf,
		   size_t len, struct dcr_err *e)
{
	return dir_write(s, name, buf, len, NULL, 0, e);
}

static int dir_put_file(struct dcr_store *s, const char *name, const char *path,
			struct dcr_err *e)
{
	return dir_write(s, name, NULL, 0, path, 0, e);
}

static int dir_put_if_absent(struct dcr_store *s, const char *name,
			     const void *buf, size_t len, struct dcr_err *e)
{
	return dir_write(s, name, buf, len, NULL, 1, e);
}

static int dir_open_obj(struct dcr_store *s, const char *name, char **pathp,
			uint64_t *size, struct dcr_err *e)
{
	char *path = dir_path(s, name, e);
	if (!path)
		return -ENOMEM;
	/* first with O_PATH, which opens nothing: a FIFO put in the store
	 * must be refused below, not wait for (or wake) a writer in open(2),
	 * and a device must not see an open at all */
	const int flags = O_PATH | O_CLOEXEC;
	int fd = dir_of(s)->beneath ? open_beneath(dir_of(s), name, flags) : open(path, flags);
	if (fd < 0 && !dir_of(s)->beneath)
		fd = -errno;
	struct stat st;
	if (fd < 0) {
		int r = fd == -ENOENT || fd == -ENOTDIR
			? dcr_err_set(e, DCR_ENOTFOUND, "cannot open '%s': no such object", path)
			: fd == -EXDEV
			? dcr_err_set(e, DCR_ENOTFOUND,
				      "cannot open '%s': no such object in the store (a symbolic link leads out of it)",
				      path)
			: dcr_err_sys(e, -fd, "cannot open '%s'", path);
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
	int pfd = fd;
	if (!r && (fd = dcr_reopen_regular(pfd, path, O_RDONLY | O_CLOEXEC)) < 0)
		r = fd == -EINVAL ? dcr_err_set(e, DCR_EFORMAT, "cannot open '%s': not a regular file", path)
				  : dcr_err_sys(e, -fd, "cannot open '%s'", path);
	close(pfd);
	if (r) {
		free(path);
		return r;
	}
	*size = (uint64_t)st.st_size;
	*pathp = path;
	return fd;
}

/* Into b, with room for a NUL after it (dcr_store_get adds one). */
static int dir_get(struct dcr_store *s, const char *name, struct dcr_buf *b,
		   size_t tail, const struct dcr_hasher *h, struct dcr_err *e)
{
	char *path;
	uint64_t size;
	b->len = 0;
	int fd = dir_open_obj(s, name, &path, &size, e);
	if (fd < 0)
		return fd;
	int r = 0;
	if (size > DCR_STORE_GET_MAX) { /* (which also keeps size + 1 in a size_t) */
		r = dcr_err_set(e, DCR_EFORMAT, "'%s' holds %llu bytes, more than %llu, the most it may",
				path, (unsigned long long)size, (unsigned long long)DCR_STORE_GET_MAX);
	} else if (b->cap < (size_t)size + 1) {
		uint8_t *p = realloc(b->p, (size_t)size + 1); /* exactly: no doubling */
		if (p) {
			b->p = p;
			b->cap = (size_t)size + 1;
		} else {
			r = dcr_err_sys(e, ENOMEM, "cannot read '%s' (%llu bytes)", path,
					(unsigned long long)size);
		}
	}
	if (!r && (r = dcr_pread_full(fd, b->p, (size_t)size, 0)))
		r = dcr_err_sys(e, r == -EPIPE ? EIO : -r, "cannot read '%s'", path);
	close(fd);
	free(path);
	if (r)
		return r;
	b->len = (size_t)size;
	if (h)
		h->update(h->ctx, b->p, b->len > tail ? b->len - tail : 0);
	return 0;
}

/* A read-only mapping, no copy: objects are replaced by rename, never
 * rewritten in place, so a mapping stays what it was when opened. */
static int dir_get_blob(struct dcr_store *s, const char *name, struct dcr_blob *b,
			size_t tail, const struct dcr_hasher *h, struct dcr_err *e)
{
	dcr_blob_free(b);
	char *path;
	uint64_t size;
	int fd = dir_open_obj(s, name, &path, &size, e);
	if (fd < 0)
		return fd;
	int r = dcr_blob_map_fd(b, fd, path, SIZE_MAX, e);
	close(fd);
	free(path);
	if (!r && h)
		h->update(h->ctx, b->p, b->len > tail ? b->len - tail : 0);
	return r;
}

static int dir_get_range(struct dcr_store *s, const char *name, uint64_t off,
			 size_t len, uint8_t *buf, const struct dcr_hasher *h, int fresh,
			 struct dcr_err *e)
{
	(void)fresh;
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
	if (!r && h)
		h->update(h->ctx, buf, len);
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
	else if ((r = dcr_fsync_parent(path, e)) == -ENOENT)
		r = 0; /* another delete removed the emptied directory: gone too */
	/* the directories it leaves empty go too (a store that a GC keeps
	 * small would else gather an empty directory per version, which
	 * every listing of the policy walks), up to the root: rmdir(2)
	 * removes only an empty one, and a writer makes its directory again
	 * (dir_write) */
	size_t root = strlen(dir_of(s)->root);
	char *slash;
	while (!r && (slash = strrchr(path, '/')) && (size_t)(slash - path) > root) {
		*slash = '\0';
		if (rmdir(path))
			break;
		(void)dcr_fsync_parent(path, NULL);
	}
	free(path);
	return r;
}

static int is_temp(const char *base)
{
	return base[0] == '.' && strstr(base, ".tmp-");
}

/* A listing's walk: the directories it has read, by device and inode. A
 * directory reached through a symbolic link is read only if no name led
 * to it before (one under its own name always is), so a loop of links, or
 * links that fan out, in a store somebody else can write cannot make a
 * listing endless: each link is followed at most once per directory it
 * leads to. */
struct walk {
	const struct dir *d;
	const char *root, *prefix;
	struct dcr_names *l;
	struct dcr_ntab seen;
};

struct seen_dir {
	char *name; /* = key (ntab's entries start with their name) */
	char key[48];
};

/* 1 if d was read before in this walk, 0 if not (now recorded), <0. */
static int walk_seen(struct walk *w, DIR *d)
{
	struct stat st;
	char key[sizeof(((struct seen_dir *)0)->key)];
	if (fstat(dirfd(d), &st))
		return -errno;
	snprintf(key, sizeof(key), "%llx:%llx", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	if (dcr_ntab_get(&w->seen, key))
		return 1;
	struct seen_dir *sd = malloc(sizeof(*sd));
	if (!sd)
		return -ENOMEM;
	memcpy(sd->key, key, sizeof(key));
	sd->name = sd->key;
	if (dcr_ntab_put(&w->seen, sd)) {
		free(sd);
		return -ENOMEM;
	}
	return 0;
}

/* With beneath, 1 if rel (relative to the root) lies under the root, 0 if
 * it does not or is gone, <0 an error; without, 1. */
static int walk_beneath(const struct walk *w, const struct dcr_buf *rel, int flags)
{
	if (!w->d->beneath || !rel->len)
		return 1;
	char *name = strndup((const char *)rel->p, rel->len);
	int fd = name ? open_beneath(w->d, name, flags | O_PATH | O_CLOEXEC) : -ENOMEM;
	free(name);
	if (fd >= 0)
		close(fd);
	return fd >= 0 ? 1 : fd == -EXDEV || fd == -ENOENT || fd == -ENOTDIR ? 0 : fd;
}

/* Add rel, a regular file's name, to the listing (as every store's
 * listing is bounded, transport/names.h). */
static int walk_add(struct walk *w, const struct dcr_buf *rel, struct dcr_err *e)
{
	return dcr_names_add_listed(w->l, strndup((const char *)rel->p, rel->len), w->root,
				    DCR_EFORMAT, e);
}

/* Walk dir (root/rel), adding regular files whose relative name starts with
 * prefix; link: rel may lead through a symbolic link (its last component is
 * one, or it is where the walk starts), so it is read only if it lies
 * beneath the root (with beneath) and was not read before. */
static int dir_walk(struct walk *w, struct dcr_buf *rel, int link, struct dcr_err *e)
{
	const char *root = w->root, *prefix = w->prefix;
	int in = link ? walk_beneath(w, rel, O_DIRECTORY) : 1;
	if (in <= 0)
		return in ? dcr_err_sys(e, -in, "cannot list '%s'", root) : 0;
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
	int r = walk_seen(w, d);
	if (r < 0 || (r > 0 && link)) {
		r = r > 0 ? 0 : dcr_err_sys(e, -r, "cannot list '%s'", path);
		closedir(d);
		free(path);
		return r;
	}
	r = 0;
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
		int type = de->d_type, islink = type == DT_LNK;
		if (type == DT_UNKNOWN || type == DT_LNK) {
			struct stat st;
			char *full = dcr_asprintf("%s/%s", path, b);
			if (full && type == DT_UNKNOWN && !lstat(full, &st))
				islink = S_ISLNK(st.st_mode);
			type = full && !stat(full, &st)
				? (S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN)
				: DT_UNKNOWN;
			free(full);
		}
		if (type == DT_DIR) {
			/* nothing beneath could be an object's name: as a
			 * server's listing of such a name is, an error (this
			 * also bounds the walk's depth) */
			if (rel->len >= DCR_NAME_MAX)
				r = dcr_err_set(e, DCR_EFORMAT,
						"cannot list '%s': the store holds a directory '%.64s...' longer than any object's name",
						root, (char *)rel->p);
			else
				r = dir_walk(w, rel, islink, e);
		} else if (type == DT_REG && rel->len >= plen) {
			int in = islink ? walk_beneath(w, rel, 0) : 1;
			if (in < 0)
				r = dcr_err_sys(e, -in, "cannot list '%s'", path);
			else if (in)
				r = walk_add(w, rel, e);
		}
	}
	if (!r && errno)
		r = dcr_err_sys(e, errno, "cannot list '%s'", path);
	rel->len = keep;
	closedir(d);
	free(path);
	return r;
}

static int dir_list(struct dcr_store *s, const char *prefix, struct dcr_names *l,
		    struct dcr_err *e)
{
	struct dcr_buf rel = {0};
	struct walk w = {.d = dir_of(s), .root = dir_of(s)->root, .prefix = prefix, .l = l};
	/* Start at the deepest directory the prefix names. */
	const char *slash = strrchr(prefix, '/');
	int r = 0;
	if (slash && dcr_buf_add(&rel, prefix, (size_t)(slash - prefix)))
		r = dcr_err_sys(e, ENOMEM, "cannot list '%s'", w.root);
	if (!r)
		r = dir_walk(&w, &rel, 1, e); /* (nothing read before it) */
	dcr_buf_free(&rel);
	dcr_ntab_clear(&w.seen, free);
	return r;
}

const struct dcr_store_ops store_dir_ops = {
	.local = 1,
	.open = dir_open,
	.close = dir_close,
	.put = dir_put,
	.put_file = dir_put_file,
	.put_if_absent = dir_put_if_absent,
	.get = dir_get,
	.get_blob = dir_get_blob,
	.get_range = dir_get_range,
	.get_to_fd = dir_get_to_fd,
	.stat = dir_stat,
	.list = dir_list,
	.delete = dir_delete,
};

