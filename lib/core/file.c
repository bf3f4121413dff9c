/* file.c - whole reads and writes, directories, atomic files, mappings. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/file.h"
#include "core/util.h"

/* ---- files ---- */

/* Up to n bytes through read, write, pread or pwrite (at off unless off is
 * -1), resumed after short transfers and EINTR: how many (fewer only where
 * a read met the end of the file), or -errno. */
static long io_some(int fd, void *buf, size_t n, int64_t off, int wr)
{
	uint8_t *p = buf;
	size_t done = 0;
	while (done < n) {
		ssize_t r = off < 0 ? (wr ? write(fd, p + done, n - done) : read(fd, p + done, n - done))
				    : (wr ? pwrite(fd, p + done, n - done, (off_t)off)
					  : pread(fd, p + done, n - done, (off_t)off));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0 && !wr)
			break;
		done += (size_t)r;
		if (off >= 0)
			off += r;
	}
	return (long)done;
}

/* All n bytes: 0, -errno, or -EPIPE for a read that meets the end first. */
static int io_full(int fd, void *buf, size_t n, int64_t off, int wr)
{
	long r = io_some(fd, buf, n, off, wr);
	return r < 0 ? (int)r : (size_t)r < n ? -EPIPE : 0;
}

int dcr_read_full(int fd, void *buf, size_t n) { return io_full(fd, buf, n, -1, 0); }

long dcr_read_upto(int fd, void *buf, size_t n) { return io_some(fd, buf, n, -1, 0); }

int dcr_write_full(int fd, const void *buf, size_t n)
{
	return io_full(fd, (void *)buf, n, -1, 1);
}

int dcr_pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	return io_full(fd, buf, n, (int64_t)off, 0);
}

int dcr_pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
{
	return io_full(fd, (void *)buf, n, (int64_t)off, 1);
}

int dcr_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = fsync(fd) ? -errno : 0;
	close(fd);
	return r;
}

int dcr_fsync_parent(const char *path, struct dcr_err *e)
{
	char *d = dcr_dirname(path);
	int f = d ? dcr_fsync_dir(d) : -ENOMEM;
	free(d);
	return f ? dcr_err_sys(e, f, "cannot fsync directory of '%s'", path) : 0;
}

int dcr_mkdir_p(const char *path, struct dcr_err *e)
{
	char *p = dcr_strdup(path);
	if (!p)
		return dcr_err_sys(e, ENOMEM, "mkdir '%s'", path);
	for (char *s = p + 1;; s++) {
		if (*s == '/' || *s == '\0') {
			char c = *s;
			*s = '\0';
			if (mkdir(p, 0777) && errno != EEXIST) {
				int r = dcr_err_sys(e, errno, "cannot create directory '%s'", p);
				free(p);
				return r;
			}
			*s = c;
			if (!c)
				break;
		}
	}
	free(p);
	return 0;
}

char *dcr_path_join(const char *a, const char *b)
{
	size_t la = strlen(a);
	if (la && a[la - 1] == '/')
		return dcr_asprintf("%s%s", a, b);
	return dcr_asprintf("%s/%s", a, b);
}

char *dcr_dirname(const char *path)
{
	const char *s = strrchr(path, '/');
	if (!s)
		return dcr_strdup(".");
	if (s == path)
		return dcr_strdup("/");
	return strndup(path, (size_t)(s - path));
}

/* The names dcr_atomic_remove_all removes. A slot is FREE, BUSY (being
 * filled or emptied by the thread that owns it, or claimed by the remover)
 * or LIVE; every change of state is a compare-and-swap, so the remover,
 * running in a signal handler on any thread, reads only names that no
 * thread is writing, and a thread never reuses a slot the remover holds. */
enum { SLOT_FREE, SLOT_BUSY, SLOT_LIVE };
static struct {
	atomic_int state;
	char path[PATH_MAX];
} tracked[DCR_ATOMIC_TRACKED];

static int track(const char *path)
{
	size_t n = strlen(path);
	if (n >= PATH_MAX)
		return 0;
	for (int i = 0; i < DCR_ATOMIC_TRACKED; i++) {
		int want = SLOT_FREE;
		if (!atomic_compare_exchange_strong(&tracked[i].state, &want, SLOT_BUSY))
			continue;
		memcpy(tracked[i].path, path, n + 1);
		atomic_store(&tracked[i].state, SLOT_LIVE);
		return i + 1;
	}
	return 0;
}

static void untrack(struct dcr_atomic *a)
{
	int want = SLOT_LIVE, i = a->slot - 1;
	/* a slot the remover claimed stays BUSY: the process is dying */
	if (i >= 0 && i < DCR_ATOMIC_TRACKED &&
	    atomic_compare_exchange_strong(&tracked[i].state, &want, SLOT_BUSY))
		atomic_store(&tracked[i].state, SLOT_FREE);
	a->slot = 0;
}

void dcr_atomic_remove_all(void)
{
	int saved = errno;
	for (int i = 0; i < DCR_ATOMIC_TRACKED; i++) {
		int want = SLOT_LIVE;
		if (atomic_compare_exchange_strong(&tracked[i].state, &want, SLOT_BUSY))
			unlink(tracked[i].path);
	}
	errno = saved;
}

int dcr_atomic_is_stale(const char *name)
{
	const char *t = name[0] == '.' ? strstr(name, ".tmp-") : NULL;
	for (const char *n; t && (n = strstr(t + 5, ".tmp-"));)
		t = n;
	if (!t || t == name)
		return 0;
	const char *s = t + 5;
	long pid = 0;
	int digits = 0, dash = 0;
	for (; *s; s++) {
		if (*s == '-' && !dash && digits) {
			dash = 1;
			digits = 0;
		} else if (*s >= '0' && *s <= '9' && digits < 9) {
			if (!dash)
				pid = pid * 10 + (*s - '0');
			digits++;
		} else {
			return 0;
		}
	}
	if (!dash || !digits || pid <= 0 || pid == (long)getpid())
		return 0;
	return kill((pid_t)pid, 0) && errno == ESRCH;
}

/* dcr_atomic_open; with make_dir, the directory (and its parents) made
 * right before each try, and tried again when it is gone before the
 * temporary file is in it (see dcr_atomic_open_mkdir). */
static int atomic_open(struct dcr_atomic *a, const char *final, int make_dir, struct dcr_err *e)
{
	a->fd = -1;
	a->direct = 0;
	a->tmp = NULL;
	a->slot = 0;
	a->final = dcr_strdup(final);
	char *dir = dcr_dirname(final);
	const char *base = strrchr(final, '/');
	base = base ? base + 1 : final;
	for (int tries = 0, gone = 0; a->final && dir && tries < 100; tries++) {
		a->tmp = dcr_asprintf("%s/.%s.tmp-%ld-%d", dir, base, (long)getpid(),
				      tries);
		if (!a->tmp)
			break;
		/* named before it exists: a signal between the two must not
		 * leave it (a name with our pid is nobody else's) */
		a->slot = track(a->tmp);
		int r = make_dir ? dcr_mkdir_p(dir, e) : 0;
		/* nothing between the directory's making and the file's
		 * creation but these calls: the window in which an rmdir(2)
		 * of the empty directory makes the open fail */
		a->fd = r ? -1 : open(a->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (a->fd >= 0) {
			free(dir);
			return 0;
		}
		int err = r ? -r : errno;
		untrack(a);
		free(a->tmp);
		a->tmp = NULL;
		if (make_dir && !r && err == ENOENT && ++gone < DCR_ATOMIC_DIR_TRIES) {
			tries--; /* the same name again */
			continue;
		}
		if (r) {
			free(dir);
			free(a->final);
			a->final = NULL;
			return r;
		}
		if (err != EEXIST) {
			free(dir);
			free(a->final);
			a->final = NULL;
			return dcr_err_sys(e, err, "cannot create a temporary file for '%s'", final);
		}
	}
	free(dir);
	free(a->final);
	a->final = NULL;
	return dcr_err_sys(e, ENOMEM, "cannot create a temporary file for '%s'", final);
}

int dcr_atomic_open(struct dcr_atomic *a, const char *final, struct dcr_err *e)
{
	return atomic_open(a, final, 0, e);
}

int dcr_atomic_open_mkdir(struct dcr_atomic *a, const char *final, struct dcr_err *e)
{
	return atomic_open(a, final, 1, e);
}

/* The descriptor a name like /dev/fd/N stands for, or -1. */
static int fd_name(const char *path)
{
	if (!strcmp(path, "/dev/stdout"))
		return 1;
	if (!strcmp(path, "/dev/stderr"))
		return 2;
	const char *s = NULL;
	if (!strncmp(path, "/dev/fd/", 8))
		s = path + 8;
	else if (!strncmp(path, "/proc/self/fd/", 14))
		s = path + 14;
	if (!s || *s < '0' || *s > '9' || strlen(s) > 9)
		return -1;
	int n = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		n = n * 10 + (*s - '0');
	}
	return n;
}

enum { OUT_FILE, OUT_STREAM, OUT_DIR };

/* What an output a user named is; *n: the descriptor it names, or -1. */
static int output_kind(const char *path, int *n)
{
	struct stat sb;
	if ((*n = fd_name(path)) >= 0)
		return OUT_STREAM;
	if (stat(path, &sb) || S_ISREG(sb.st_mode))
		return OUT_FILE;
	return S_ISDIR(sb.st_mode) ? OUT_DIR : OUT_STREAM;
}

int dcr_output_is_stream(const char *path)
{
	int n;
	return output_kind(path, &n) == OUT_STREAM;
}

int dcr_output_open(struct dcr_atomic *a, const char *final, struct dcr_err *e)
{
	int n, kind = output_kind(final, &n);
	/* refused before the work, not by the rename after it */
	if (kind == OUT_DIR) {
		*a = (struct dcr_atomic){.fd = -1};
		return dcr_err_sys(e, EISDIR, "cannot write '%s'", final);
	}
	if (kind == OUT_FILE)
		return dcr_atomic_open(a, final, e);
	*a = (struct dcr_atomic){.fd = -1, .direct = 1};
	if (n >= 0) {
		a->fd = fcntl(n, F_DUPFD_CLOEXEC, 3);
		if (a->fd < 0)
			return dcr_err_sys(e, errno, "cannot write '%s'%s", final,
					   errno == EBADF ? " (no such open descriptor)" : "");
	} else if ((a->fd = open(final, O_WRONLY | O_CLOEXEC)) < 0) {
		return dcr_err_sys(e, errno, "cannot open '%s'", final);
	}
	if (!(a->final = dcr_strdup(final))) {
		close(a->fd);
		a->fd = -1;
		return dcr_err_sys(e, ENOMEM, "cannot open '%s'", final);
	}
	return 0;
}

/* Finish a stream of dcr_output_open: fsync where it is a file, close. */
static int direct_close(struct dcr_atomic *a, int keep, struct dcr_err *e)
{
	int r = 0;
	struct stat sb;
	if (keep && !fstat(a->fd, &sb) && S_ISREG(sb.st_mode) && fsync(a->fd))
		r = dcr_err_sys(e, errno, "cannot fsync '%s'", a->final);
	if (close(a->fd) && keep && !r && errno != EINTR)
		r = dcr_err_sys(e, errno, "cannot close '%s'", a->final);
	free(a->final);
	*a = (struct dcr_atomic){.fd = -1};
	return r;
}

int dcr_atomic_sync(struct dcr_atomic *a, struct dcr_err *e)
{
	if (a->fd < 0)
		return 0;
	int r = 0;
	if (fsync(a->fd))
		r = dcr_err_sys(e, errno, "cannot fsync '%s'", a->tmp);
	if (close(a->fd) && !r)
		r = dcr_err_sys(e, errno, "cannot close '%s'", a->tmp);
	a->fd = -1;
	return r;
}

int dcr_atomic_commit(struct dcr_atomic *a, struct dcr_err *e)
{
	if (a->direct)
		return direct_close(a, 1, e);
	int r = dcr_atomic_sync(a, e);
	if (!r && rename(a->tmp, a->final))
		r = dcr_err_sys(e, errno, "cannot rename '%s' to '%s'", a->tmp, a->final);
	if (!r)
		r = dcr_fsync_parent(a->final, e);
	if (r)
		unlink(a->tmp);
	untrack(a);
	free(a->tmp);
	free(a->final);
	a->tmp = a->final = NULL;
	return r;
}

void dcr_atomic_abort(struct dcr_atomic *a)
{
	if (a->direct) {
		direct_close(a, 0, NULL);
		return;
	}
	if (a->fd >= 0)
		close(a->fd);
	if (a->tmp)
		unlink(a->tmp);
	untrack(a);
	free(a->tmp);
	free(a->final);
	a->tmp = a->final = NULL;
	a->fd = -1;
}

static int write_whole(const char *path, const void *buf, size_t n, int user,
		       struct dcr_err *e)
{
	struct dcr_atomic a;
	int r = user ? dcr_output_open(&a, path, e) : dcr_atomic_open(&a, path, e);
	if (r)
		return r;
	r = dcr_write_full(a.fd, buf, n);
	if (r) {
		dcr_atomic_abort(&a);
		return dcr_err_sys(e, r, "cannot write '%s'", path);
	}
	return dcr_atomic_commit(&a, e);
}

int dcr_write_file_atomic(const char *path, const void *buf, size_t n,
			  struct dcr_err *e)
{
	return write_whole(path, buf, n, 0, e);
}

int dcr_write_output(const char *path, const void *buf, size_t n, struct dcr_err *e)
{
	return write_whole(path, buf, n, 1, e);
}

int dcr_read_file(const char *path, size_t max, uint8_t **out, size_t *len,
		  struct dcr_err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dcr_err_sys(e, errno, "cannot open '%s'", path);
	int r = dcr_read_fd(fd, path, max, out, len, e);
	close(fd);
	return r;
}

int dcr_tmpfile(const char *what, int *fd, struct dcr_err *e)
{
	const char *td = getenv("TMPDIR");
	char *tmpl = dcr_asprintf("%s/dcr-%s.XXXXXX", td && *td ? td : "/tmp", what);
	if (!tmpl)
		return dcr_err_sys(e, ENOMEM, "%s", what);
	*fd = mkostemp(tmpl, O_CLOEXEC);
	int r = *fd < 0 ? dcr_err_sys(e, errno, "cannot create a temporary file '%s'", tmpl) : 0;
	if (!r)
		unlink(tmpl);
	free(tmpl);
	return r;
}

int dcr_spool_fd(int fd, const char *what, int *out, uint64_t *len, struct dcr_err *e)
{
	enum { STEP = 1 << 20 };
	uint8_t *buf = malloc(STEP);
	int t = -1, r = buf ? dcr_tmpfile("spool", &t, e) : dcr_err_sys(e, ENOMEM, "%s", what);
	*len = 0;
	while (!r) {
		ssize_t k = read(fd, buf, STEP);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			r = k < 0 ? dcr_err_sys(e, errno, "cannot read '%s'", what) : 0;
			break;
		}
		if ((r = dcr_write_full(t, buf, (size_t)k)))
			r = dcr_err_sys(e, -r, "cannot keep '%s' in a temporary file (it is read twice)",
					what);
		*len += (uint64_t)k;
	}
	if (!r && lseek(t, 0, SEEK_SET))
		r = dcr_err_sys(e, errno, "cannot rewind the copy of '%s'", what);
	free(buf);
	if (r && t >= 0)
		close(t);
	*out = r ? -1 : t;
	return r;
}

int dcr_read_fd(int fd, const char *what, size_t max, uint8_t **out, size_t *len,
		struct dcr_err *e)
{
	/* room for one byte past max (to tell "too large") and the NUL */
	size_t limit = max < SIZE_MAX - 1 ? max + 2 : SIZE_MAX;
	size_t cap = 64 << 10, n = 0;
	struct stat st;
	/* a regular file's size sizes the buffer; the bytes that arrive count */
	if (!fstat(fd, &st) && S_ISREG(st.st_mode)) {
		if ((uint64_t)st.st_size > max)
			return dcr_err_set(e, DCR_EFORMAT, "'%s' is too large (%lld bytes, at most %zu)",
					   what, (long long)st.st_size, max);
		cap = (size_t)st.st_size + 2;
	}
	if (cap > limit)
		cap = limit;
	uint8_t *p = malloc(cap);
	if (!p)
		return dcr_err_sys(e, ENOMEM, "cannot read '%s'", what);
	for (;;) {
		if (n + 1 == cap) {
			size_t nc = cap < limit / 2 ? cap * 2 : limit;
			uint8_t *np = nc > cap ? realloc(p, nc) : NULL;
			if (!np) {
				free(p);
				return nc > cap ? dcr_err_sys(e, ENOMEM, "cannot read '%s'", what)
						: dcr_err_set(e, DCR_EFORMAT, "'%s' is too large (at most %zu bytes)",
							      what, max);
			}
			p = np;
			cap = nc;
		}
		ssize_t k = read(fd, p + n, cap - 1 - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int err = errno;
			free(p);
			return dcr_err_sys(e, err, "cannot read '%s'", what);
		}
		if (k == 0)
			break;
		n += (size_t)k;
		if (n > max) {
			free(p);
			return dcr_err_set(e, DCR_EFORMAT, "'%s' is too large (more than %zu bytes)",
					   what, max);
		}
	}
	p[n] = '\0';
	*out = p;
	*len = n;
	return 0;
}

void dcr_prefault(void *p, size_t n)
{
	const uintptr_t pg = 4096;
	if (n < ((size_t)4 << 20))
		return;
	uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1);
	uintptr_t z = ((uintptr_t)p + n) & ~(pg - 1);
	if (z <= a)
		return;
#ifdef MADV_HUGEPAGE
	(void)madvise((void *)a, z - a, MADV_HUGEPAGE);
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; EINVAL before */
#endif
	(void)madvise((void *)a, z - a, MADV_POPULATE_WRITE);
}

int dcr_fs_room(int fd, const char *path, uint64_t keep_min, uint64_t *room, uint64_t *keep)
{
	const uint64_t keep_max = (uint64_t)4 << 30;
	struct statvfs vs;
	uint64_t size;
	if ((fd >= 0 ? fstatvfs(fd, &vs) : statvfs(path, &vs)) ||
	    mul_ovf(vs.f_bavail, vs.f_frsize, room) || mul_ovf(vs.f_blocks, vs.f_frsize, &size))
		return -1;
	if (keep) {
		*keep = size / 50 < keep_min ? keep_min : size / 50;
		if (*keep > keep_max)
			*keep = keep_max;
	}
	return 0;
}

int dcr_reopen_regular(int pfd, const char *path, int flags)
{
	struct stat st, again;
	if (fstat(pfd, &st))
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", pfd);
	int fd = open(link, flags & ~O_NOFOLLOW);
	if (fd >= 0 || errno != ENOENT || !path)
		return fd >= 0 ? fd : -errno;
	/* no /proc: the path again, which must still be that file */
	if ((fd = open(path, flags | O_NONBLOCK)) < 0)
		return -errno;
	if (fstat(fd, &again) || again.st_dev != st.st_dev || again.st_ino != st.st_ino) {
		close(fd);
		return -EAGAIN;
	}
	return fd;
}

int dcr_open_regular(const char *path, int flags)
{
	int pfd = open(path, O_PATH | O_CLOEXEC | (flags & O_NOFOLLOW));
	if (pfd < 0)
		return -errno;
	int fd = dcr_reopen_regular(pfd, path, flags);
	close(pfd);
	return fd;
}

int dcr_blob_map_fd(struct dcr_blob *b, int fd, const char *path, size_t max,
		    struct dcr_err *e)
{
	struct stat st;
	memset(b, 0, sizeof(*b));
	if (fstat(fd, &st))
		return dcr_err_sys(e, errno, "cannot stat '%s'", path);
	if (!S_ISREG(st.st_mode))
		return dcr_err_set(e, DCR_EFORMAT, "'%s' is not a regular file", path);
	if ((uint64_t)st.st_size > max)
		return dcr_err_set(e, DCR_EFORMAT, "'%s' is too large (%lld bytes, at most %zu)",
				   path, (long long)st.st_size, max);
	if (st.st_size == 0) {
		b->p = calloc(1, 1);
		return b->p ? 0 : dcr_err_sys(e, ENOMEM, "cannot read '%s'", path);
	}
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
	if (m == MAP_FAILED)
		return dcr_err_sys(e, errno, "cannot map '%s'", path);
	b->p = m;
	b->len = (size_t)st.st_size;
	b->map = m;
	b->map_len = b->len;
	return 0;
}

int dcr_blob_map(struct dcr_blob *b, const char *path, size_t max, struct dcr_err *e)
{
	memset(b, 0, sizeof(*b));
	/* a FIFO or a device is refused, never opened (not waited on) */
	int fd = dcr_open_regular(path, O_RDONLY | O_CLOEXEC);
	if (fd == -EINVAL)
		return dcr_err_set(e, DCR_EFORMAT, "'%s' is not a regular file", path);
	if (fd < 0)
		return dcr_err_sys(e, -fd, "cannot open '%s'", path);
	int r = dcr_blob_map_fd(b, fd, path, max, e);
	close(fd);
	return r;
}

void dcr_blob_free(struct dcr_blob *b)
{
	if (b->map)
		munmap(b->map, b->map_len);
	else
		free(b->p);
	memset(b, 0, sizeof(*b));
}

