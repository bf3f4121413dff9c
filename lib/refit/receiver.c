/* receiver.c - the receiver's .dcr/ directory: lock, state cache, log. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/bytes.h"
#include "core/file.h"
#include "core/state.h"
#include "core/util.h"
#include "refit/receiver.h"

#define STATE_MAX (64u << 20)

char *dcr_receiver_path(const struct dcr_receiver *rc, const char *name)
{
	return dcr_path_join(rc->sdir, name);
}

int dcr_receiver_open(const char *dir, int lock, struct dcr_receiver **out, struct dcr_err *e)
{
	struct stat sb;
	if (stat(dir, &sb))
		return dcr_err_sys(e, errno, "cannot open receiver '%s'", dir);
	if (!S_ISDIR(sb.st_mode))
		return dcr_err_set(e, DCR_EFORMAT, "receiver '%s' is not a directory", dir);
	struct dcr_receiver *rc = dcr_calloc(1, sizeof(*rc));
	if (!rc)
		return dcr_err_sys(e, ENOMEM, "%s", dir);
	rc->lock_fd = -1;
	rc->dir = dcr_strdup(dir);
	rc->sdir = dcr_path_join(dir, ".dcr");
	int r = 0;
	if (!rc->dir || !rc->sdir) {
		r = dcr_err_sys(e, ENOMEM, "%s", dir);
		goto fail;
	}
	if (lock == DCR_RECEIVER_SHARED && lstat(rc->sdir, &sb) && errno == ENOENT) {
		*out = rc; /* never applied to: nothing to wait for */
		return 0;
	}
	if (lock == DCR_RECEIVER_LOCK && mkdir(rc->sdir, 0777) && errno != EEXIST) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", rc->sdir);
		goto fail;
	}
	/* receiver state never goes through a link: a .dcr that is one would
	 * send the journal, the lock and the log elsewhere */
	if (!lstat(rc->sdir, &sb) && !S_ISDIR(sb.st_mode)) {
		r = dcr_err_set(e, DCR_EFORMAT, "'%s' is %s, not the receiver's state directory: remove it",
				rc->sdir, S_ISLNK(sb.st_mode) ? "a symbolic link" : "not a directory");
		goto fail;
	}
	if (lock) {
		char *lp = dcr_receiver_path(rc, "lock");
		rc->lock_fd = lp ? open(lp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644) : -1;
		if (rc->lock_fd < 0 && lp && lock == DCR_RECEIVER_SHARED && errno != ELOOP)
			rc->lock_fd = open(lp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC); /* a reader
										  without write access */
		free(lp);
		if (rc->lock_fd < 0 && lock == DCR_RECEIVER_SHARED &&
		    (errno == ENOENT || errno == EACCES || errno == EROFS)) {
			*out = rc; /* no lock to share, and none an apply could take */
			return 0;
		}
		if (rc->lock_fd < 0) {
			r = errno == ELOOP ? dcr_err_set(e, DCR_EFORMAT,
							 "'%s/lock' is a symbolic link: remove it",
							 rc->sdir)
					   : dcr_err_sys(e, errno, "cannot open the lock in '%s'",
							 rc->sdir);
			goto fail;
		}
		if (flock(rc->lock_fd, (lock == DCR_RECEIVER_SHARED ? LOCK_SH : LOCK_EX) | LOCK_NB)) {
			r = errno == EWOULDBLOCK
				    ? dcr_err_set(e, DCR_ELOCKED,
						  "receiver '%s' is busy: another dcr process holds its lock",
						  dir)
				    : dcr_err_sys(e, errno, "cannot lock '%s'", dir);
			goto fail;
		}
	}
	*out = rc;
	return 0;
fail:
	dcr_receiver_close(rc);
	return r;
}

void dcr_receiver_close(struct dcr_receiver *rc)
{
	if (!rc)
		return;
	if (rc->lock_fd >= 0)
		close(rc->lock_fd);
	free(rc->dir);
	free(rc->sdir);
	free(rc);
}

void dcr_receiver_log(struct dcr_receiver *rc, const char *fmt, ...)
{
	char *lp = dcr_receiver_path(rc, "log");
	int fd = lp ? open(lp, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644) : -1;
	free(lp);
	if (fd < 0)
		return; /* best effort: a planted link is not followed */
	char line[1400];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%SZ ", &tm);
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	if (k < 0)
		k = 0;
	n += (size_t)k < sizeof(line) - n - 1 ? (size_t)k : sizeof(line) - n - 2;
	line[n++] = '\n';
	if (dcr_write_full(fd, line, n) == 0)
		fsync(fd);
	close(fd);
}

void dcr_receiver_drop_state(struct dcr_receiver *rc)
{
	char *sp = dcr_receiver_path(rc, "state");
	if (sp && !unlink(sp))
		dcr_fsync_dir(rc->sdir);
	free(sp);
}

static int file_stat_line(const struct dcr_receiver *rc, const char *name, char *out, size_t n)
{
	char *p = dcr_path_join(rc->dir, name);
	struct stat sb;
	int r = p ? stat(p, &sb) : -1;
	free(p);
	if (r)
		return -1;
	snprintf(out, n, "%llu %lld.%09ld %llu %s", (unsigned long long)sb.st_size,
		 (long long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec,
		 (unsigned long long)sb.st_ino, name);
	return 0;
}

int dcr_receiver_save_state(struct dcr_receiver *rc, const struct dcr_ckpt *c,
			    const dcr_digest *id, const dcr_digest *dg, struct dcr_err *e)
{
	struct dcr_buf b = {0};
	char hex[65], line[600];
	dcr_digest_hex(id, hex);
	int r = 0;
	char *s = dcr_asprintf("dcr-state 2\nid %s\nfiles %zu\n", hex, c->nfiles);
	r = s ? dcr_buf_add(&b, s, strlen(s)) : -ENOMEM;
	free(s);
	for (size_t i = 0; i < c->nfiles && !r; i++) {
		if (file_stat_line(rc, c->file_names[i], line, sizeof(line))) {
			dcr_buf_free(&b);
			return dcr_err_sys(e, errno, "cannot stat '%s'", c->file_names[i]);
		}
		r = dcr_buf_add(&b, line, strlen(line)) || dcr_buf_add_u8(&b, '\n');
	}
	s = dcr_asprintf("tensors %zu\n", c->ntensors);
	r = r || !s || dcr_buf_add(&b, s, strlen(s));
	free(s);
	for (size_t i = 0; i < c->ntensors && !r; i++) {
		dcr_digest_hex(&dg[i], hex);
		r = dcr_buf_add(&b, hex, 64) || dcr_buf_add_u8(&b, '\n');
	}
	if (r) {
		dcr_buf_free(&b);
		return dcr_err_sys(e, ENOMEM, "state");
	}
	char *sp = dcr_receiver_path(rc, "state");
	r = sp ? dcr_write_file_atomic(sp, b.p, b.len, e) : dcr_err_sys(e, ENOMEM, "state");
	free(sp);
	dcr_buf_free(&b);
	return r;
}

/* Load .dcr/state if it still describes c's files; 0 on success. */
int dcr_receiver_cached_state(struct dcr_receiver *rc, const struct dcr_ckpt *c, dcr_digest *id,
		      dcr_digest *dg)
{
	char *sp = dcr_receiver_path(rc, "state");
	uint8_t *buf = NULL;
	size_t len;
	struct dcr_err ignore;
	int r = sp ? dcr_read_file(sp, STATE_MAX, &buf, &len, &ignore) : -1;
	free(sp);
	if (r)
		return -1;
	char *save, *ln = strtok_r((char *)buf, "\n", &save);
	char line[600];
	size_t nf = 0, nt = 0;
	r = -1;
	if (!ln || strcmp(ln, "dcr-state 2"))
		goto out; /* another dcr's cache (version 1: SHA-256): recomputed */
	ln = strtok_r(NULL, "\n", &save);
	if (!ln || strncmp(ln, "id ", 3) || dcr_digest_parse_hex(ln + 3, id))
		goto out;
	ln = strtok_r(NULL, "\n", &save);
	if (!ln || sscanf(ln, "files %zu", &nf) != 1 || nf != c->nfiles)
		goto out;
	for (size_t i = 0; i < nf; i++) {
		ln = strtok_r(NULL, "\n", &save);
		if (!ln || file_stat_line(rc, c->file_names[i], line, sizeof(line)) ||
		    strcmp(ln, line))
			goto out;
	}
	ln = strtok_r(NULL, "\n", &save);
	if (!ln || sscanf(ln, "tensors %zu", &nt) != 1 || nt != c->ntensors)
		goto out;
	for (size_t i = 0; i < nt; i++) {
		ln = strtok_r(NULL, "\n", &save);
		if (!ln || dcr_digest_parse_hex(ln, &dg[i]))
			goto out;
	}
	dcr_digest check;
	dcr_ckpt_state_from(c, dg, &check);
	r = memcmp(check.b, id->b, 32) ? -1 : 0;
out:
	free(buf);
	return r;
}

int dcr_receiver_state(struct dcr_receiver *rc, const struct dcr_ckpt *c, int refresh,
		       dcr_digest *id, dcr_digest **per_tensor, int *from_cache,
		       struct dcr_err *e)
{
	dcr_digest *dg = dcr_calloc(c->ntensors, sizeof(*dg));
	if (!dg)
		return dcr_err_sys(e, ENOMEM, "%s", rc->dir);
	int cached = !dcr_receiver_cached_state(rc, c, id, dg);
	if (!cached) {
		int r = dcr_ckpt_digests(c, dg, rc->threads);
		if (r) {
			free(dg);
			return dcr_err_sys(e, -r, "cannot hash '%s'", rc->dir);
		}
		dcr_ckpt_state_from(c, dg, id);
		if (refresh)
			dcr_receiver_save_state(rc, c, id, dg, e); /* best effort */
	}
	if (from_cache)
		*from_cache = cached;
	if (per_tensor)
		*per_tensor = dg;
	else
		free(dg);
	return 0;
}
