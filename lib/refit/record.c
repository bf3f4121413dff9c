/* record.c - the small text records of the commit protocol ("dcr-head 2",
 * "dcr-applied 2", "dcr-ack 1", "dcr-ref 1"): key-value lines, written
 * atomically. See record.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/file.h"
#include "core/util.h"
#include "refit/record.h"

#define SMALL_MAX (1u << 20)

int kv_attempt(const char *s, uint8_t a[16])
{
	if (strlen(s) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		a[i] = (uint8_t)v;
	}
	return 0;
}

int kv_write(const char *path, const char *text, struct dcr_fault *st, struct dcr_err *e)
{
	char *tmp = dcr_asprintf("%s.tmp", path);
	char *dir = dcr_dirname(path);
	int fd = -1, r = 0;
	if (!tmp || !dir) {
		r = dcr_err_sys(e, ENOMEM, "%s", path);
		goto out;
	}
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", tmp);
		goto out;
	}
	dcr_fault_point(st);
	if ((r = dcr_write_full(fd, text, strlen(text)))) {
		r = dcr_err_sys(e, r, "cannot write '%s'", tmp);
		goto out;
	}
	dcr_fault_point(st);
	if (fsync(fd)) {
		r = dcr_err_sys(e, errno, "cannot fsync '%s'", tmp);
		goto out;
	}
	close(fd);
	fd = -1;
	dcr_fault_point(st);
	if (rename(tmp, path)) {
		r = dcr_err_sys(e, errno, "cannot rename '%s' to '%s'", tmp, path);
		goto out;
	}
	dcr_fault_point(st);
	if ((r = dcr_fsync_dir(dir)))
		r = dcr_err_sys(e, r, "cannot fsync '%s'", dir);
out:
	if (fd >= 0)
		close(fd);
	if (r && tmp)
		unlink(tmp);
	free(tmp);
	free(dir);
	return r;
}

int kv_read_any(const char *path, char **buf, size_t *len, struct dcr_err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		return dcr_err_sys(e, errno, "cannot open '%s'", path);
	}
	close(fd);
	return dcr_read_file(path, SMALL_MAX, (uint8_t **)buf, len, e);
}

int kv_is(const char *buf, size_t len, const char *magic)
{
	size_t ml = strlen(magic);
	return len >= ml + 1 && !memcmp(buf, magic, ml) && buf[ml] == '\n' && !memchr(buf, 0, len);
}

/* Read a small key-value file: "magic\nkey value\n...". Missing file: 1. */
int kv_read(const char *path, const char *magic, char **buf, struct dcr_err *e)
{
	size_t len;
	int r = kv_read_any(path, buf, &len, e);
	if (r)
		return r;
	if (!kv_is(*buf, len, magic)) {
		free(*buf);
		*buf = NULL;
		return dcr_err_set(e, DCR_EFORMAT, "'%s' is not a %s file", path, magic);
	}
	return 0;
}

/* Value of "key " in a kv buffer, copied into out (at most n-1 chars). */
int kv_get(const char *buf, const char *key, char *out, size_t n)
{
	size_t kl = strlen(key);
	for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (!strncmp(p, key, kl) && p[kl] == ' ') {
			const char *v = p + kl + 1, *end = strchr(v, '\n');
			size_t l = end ? (size_t)(end - v) : strlen(v);
			if (l >= n)
				return -1;
			memcpy(out, v, l);
			out[l] = '\0';
			return 0;
		}
	}
	return -1;
}

int kv_u64(const char *buf, const char *key, uint64_t *v)
{
	char s[32], *end;
	if (kv_get(buf, key, s, sizeof(s)) || !s[0] || s[0] == '-')
		return -1;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*v = x;
	return 0;
}

int kv_digest(const char *buf, const char *key, dcr_digest *d)
{
	char s[80];
	return kv_get(buf, key, s, sizeof(s)) || dcr_digest_parse_hex(s, d) ? -1 : 0;
}

