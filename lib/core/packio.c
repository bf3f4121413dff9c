/* packio.c - where packs live as files: pack directories and tar streams. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "core/file.h"
#include "core/manifest.h"
#include "core/packio.h"
#include "core/payload.h"
#include "core/util.h"

#define PAYLOAD_FILE_MAX (2ull << 30)
#define TAR_STEP ((size_t)DCR_DEFAULT_PAYLOAD_SIZE + (1u << 20))

/* ---- pack outputs ---- */

/* The signature an entry just wrote, and where: a pack's signature comes
 * right before its manifest (dcr_pack, a pull), so the manifest's entry
 * knows whether one in its directory is its own. Per thread; the
 * manifest's entry consumes it, written or not. */
static _Thread_local struct {
	dev_t dev;
	ino_t ino;
	int set;
} sig_just;

static int same_dir(const char *dir, dev_t *dev, ino_t *ino)
{
	struct stat sb;
	if (stat(dir, &sb))
		return 0;
	*dev = sb.st_dev;
	*ino = sb.st_ino;
	return 1;
}

/* Before a pack directory's new manifest is written: the payloads it does
 * not list, left by another pack written to the same directory (a pack
 * made again with another --payload-size, a pull of the next version into
 * the same -o DIR), are removed; a reader would refuse the directory for
 * them ("payload N is not in the manifest"); so is a signature that this
 * pack did not just write (another pack's: a reader holding the key would
 * report it as this manifest's bytes changed, and one without would push
 * it on), and one when the new manifest names no version (a reader
 * refuses such a pack signed, core/trust.h); and temporary files of a
 * process killed while it wrote here (dcr_atomic_is_stale). Only those
 * names; nothing else in the directory is touched. */
static int prune_unlisted(const char *dir, const uint8_t *man, size_t len, struct dcr_err *e)
{
	dev_t dev;
	ino_t ino;
	int ours = sig_just.set && same_dir(dir, &dev, &ino) && dev == sig_just.dev &&
		   ino == sig_just.ino;
	sig_just.set = 0;
	struct dcr_manifest m = {0};
	int r = dcr_manifest_parse(man, len, "the new manifest", &m, e);
	if (r)
		return r;
	DIR *d = opendir(dir);
	if (!d)
		r = errno == ENOENT ? 0 : dcr_err_sys(e, errno, "cannot list '%s'", dir);
	for (struct dirent *de; d && !r && (de = readdir(d));) {
		uint32_t idx;
		if (dcr_atomic_is_stale(de->d_name)) { /* of a pull or pack killed */
			unlinkat(dirfd(d), de->d_name, 0);
			continue;
		}
		if (!dcr_payload_name_parse(de->d_name, &idx) || dcr_manifest_find(&m, idx) >= 0)
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) && errno != ENOENT)
			r = dcr_err_sys(e, errno, "cannot remove '%s/%s', a payload the new manifest does not list",
					dir, de->d_name);
	}
	if (d)
		closedir(d);
	char *sig = !r && !(ours && m.have_version) ? dcr_path_join(dir, DCR_MANIFEST_SIG_NAME) : NULL;
	if (sig && unlink(sig) && errno != ENOENT)
		r = dcr_err_sys(e, errno, "cannot remove '%s', another pack's signature", sig);
	free(sig);
	dcr_manifest_release(&m);
	return r;
}

/* After an entry is written to dir: remember a signature (see sig_just);
 * any other entry forgets one. */
static void note_entry(const char *dir, const char *name)
{
	sig_just.set = !strcmp(name, DCR_MANIFEST_SIG_NAME) &&
		       same_dir(dir, &sig_just.dev, &sig_just.ino);
}

int dcr_pack_dir_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
		       struct dcr_err *e)
{
	const char *dir = ctx;
	int r = dcr_mkdir_p(dir, e);
	if (!r && !strcmp(name, DCR_MANIFEST_NAME))
		r = prune_unlisted(dir, buf, len, e);
	if (r)
		return r;
	char *path = dcr_path_join(dir, name);
	r = path ? dcr_write_file_atomic(path, buf, len, e) : dcr_err_sys(e, ENOMEM, "%s", dir);
	free(path);
	if (!r)
		note_entry(dir, name);
	return r;
}

int dcr_pack_dir_stage(void *ctx, const char *name, const uint8_t *buf, size_t len, void **tok,
		       struct dcr_err *e)
{
	const char *dir = ctx;
	struct dcr_atomic *a = dcr_calloc(1, sizeof(*a));
	char *path = a ? dcr_path_join(dir, name) : NULL;
	int r = !path ? dcr_err_sys(e, ENOMEM, "%s", dir) : dcr_mkdir_p(dir, e);
	if (!r && !strcmp(name, DCR_MANIFEST_NAME))
		r = prune_unlisted(dir, buf, len, e);
	if (!r && !(r = dcr_atomic_open(a, path, e))) {
		if ((r = dcr_write_full(a->fd, buf, len)))
			r = dcr_err_sys(e, -r, "cannot write '%s'", a->tmp);
		else
			r = dcr_atomic_sync(a, e);
		if (r)
			dcr_atomic_abort(a);
	}
	free(path);
	if (r) {
		free(a);
		return r;
	}
	*tok = a;
	return 0;
}

int dcr_pack_dir_commit(void *ctx, void *tok, struct dcr_err *e)
{
	(void)ctx;
	int r = dcr_atomic_commit(tok, e);
	free(tok);
	return r;
}

void dcr_pack_dir_drop(void *ctx, void *tok)
{
	(void)ctx;
	dcr_atomic_abort(tok);
	free(tok);
}

/* Rename the staged payloads into place, in order; on an error the rest
 * are dropped. */
static int held_commit(struct dcr_pack_dir_held *h, struct dcr_err *e)
{
	int r = 0;
	for (size_t i = 0; i < h->n; i++) {
		if (!r)
			r = dcr_pack_dir_commit((void *)h->dir, h->tok[i], e);
		else
			dcr_pack_dir_drop((void *)h->dir, h->tok[i]);
	}
	h->n = 0;
	return r;
}

int dcr_pack_dir_held_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
			    struct dcr_err *e)
{
	struct dcr_pack_dir_held *h = ctx;
	uint32_t idx;
	if (!dcr_payload_name_parse(name, &idx)) {
		int r = held_commit(h, e);
		return r ? r : dcr_pack_dir_entry((void *)h->dir, name, buf, len, e);
	}
	if (h->n == h->cap) {
		size_t nc = h->cap ? 2 * h->cap : 64;
		void **v = realloc(h->tok, nc * sizeof(*v));
		if (!v)
			return dcr_err_sys(e, ENOMEM, "%s", h->dir);
		h->tok = v;
		h->cap = nc;
	}
	int r = dcr_pack_dir_stage((void *)h->dir, name, buf, len, &h->tok[h->n], e);
	if (!r)
		h->n++;
	return r;
}

int dcr_pack_dir_held_finish(struct dcr_pack_dir_held *h, int ok, struct dcr_err *e)
{
	int r = 0;
	if (ok)
		r = held_commit(h, e);
	for (size_t i = 0; i < h->n; i++)
		dcr_pack_dir_drop((void *)h->dir, h->tok[i]);
	free(h->tok);
	h->tok = NULL;
	h->n = h->cap = 0;
	return r;
}

struct dcr_tar_out {
	struct archive *a;
	int fd;
	int err;
	char name[64]; /* the entry being written, for messages */
};

static la_ssize_t tar_write_cb(struct archive *a, void *ctx, const void *buf, size_t n)
{
	(void)a;
	struct dcr_tar_out *t = ctx;
	int r = dcr_write_full(t->fd, buf, n);
	if (r) {
		t->err = -r;
		return -1;
	}
	return (la_ssize_t)n;
}

int dcr_tar_out_open(int fd, struct dcr_tar_out **out, struct dcr_err *e)
{
	struct dcr_tar_out *t = dcr_calloc(1, sizeof(*t));
	if (!t)
		return dcr_err_sys(e, ENOMEM, "tar");
	t->fd = fd;
	t->a = archive_write_new();
	if (!t->a || archive_write_set_format_pax_restricted(t->a) != ARCHIVE_OK ||
	    archive_write_add_filter_none(t->a) != ARCHIVE_OK ||
	    archive_write_set_bytes_per_block(t->a, 0) != ARCHIVE_OK ||
	    archive_write_open(t->a, t, NULL, tar_write_cb, NULL) != ARCHIVE_OK) {
		int r = dcr_err_set(e, DCR_EFORMAT, "cannot start a tar stream: %s",
				    t->a ? archive_error_string(t->a) : "out of memory");
		if (t->a)
			archive_write_free(t->a);
		free(t);
		return r;
	}
	*out = t;
	return 0;
}

static int tar_fail(struct dcr_tar_out *t, struct dcr_err *e)
{
	return t->err ? dcr_err_sys(e, t->err, "cannot write the pack stream (entry '%s')", t->name)
		      : dcr_err_set(e, DCR_EFORMAT, "tar: %s", archive_error_string(t->a));
}

int dcr_tar_out_begin(void *ctx, const char *name, uint64_t len, struct dcr_err *e)
{
	struct dcr_tar_out *t = ctx;
	struct archive_entry *en = archive_entry_new();
	if (!en)
		return dcr_err_sys(e, ENOMEM, "tar");
	snprintf(t->name, sizeof(t->name), "%s", name);
	archive_entry_set_pathname(en, name);
	archive_entry_set_size(en, (la_int64_t)len);
	archive_entry_set_filetype(en, AE_IFREG);
	archive_entry_set_perm(en, 0644);
	archive_entry_set_mtime(en, time(NULL), 0);
	int r = archive_write_header(t->a, en) != ARCHIVE_OK;
	archive_entry_free(en);
	return r ? tar_fail(t, e) : 0;
}

int dcr_tar_out_data(void *ctx, const uint8_t *buf, size_t len, struct dcr_err *e)
{
	struct dcr_tar_out *t = ctx;
	for (size_t off = 0; off < len;) {
		la_ssize_t w = archive_write_data(t->a, buf + off, len - off);
		if (w <= 0)
			return tar_fail(t, e);
		off += (size_t)w;
	}
	return 0;
}

int dcr_tar_out_end(void *ctx, struct dcr_err *e)
{
	struct dcr_tar_out *t = ctx;
	return archive_write_finish_entry(t->a) != ARCHIVE_OK ? tar_fail(t, e) : 0;
}

int dcr_tar_out_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
		      struct dcr_err *e)
{
	int r = dcr_tar_out_begin(ctx, name, len, e);
	r = r ? r : dcr_tar_out_data(ctx, buf, len, e);
	return r ? r : dcr_tar_out_end(ctx, e);
}

int dcr_tar_out_close(struct dcr_tar_out *t, struct dcr_err *e)
{
	if (!t)
		return 0;
	int r = archive_write_close(t->a) != ARCHIVE_OK
			? (t->err ? dcr_err_sys(e, t->err, "cannot write the pack stream")
				  : dcr_err_set(e, DCR_EFORMAT, "tar: %s", archive_error_string(t->a)))
			: 0;
	archive_write_free(t->a);
	free(t);
	return r;
}

/* ---- pack inputs ---- */

struct dcr_pack_in {
	/* directory */
	char *dir;
	char **names;
	size_t n, next;
	struct dcr_blob cur; /* the current file, mapped */
	/* tar */
	struct archive *a;
	int fd;
	const uint8_t *head;
	size_t head_len, head_off;
	uint8_t rbuf[1 << 16];
	struct dcr_buf data;
	char *name;
};

/* Payloads in index order, then the signature, then the manifest (or a
 * producer's summary): last. */
static int entry_rank(const char *s)
{
	uint32_t p;
	return !strcmp(s, DCR_MANIFEST_NAME) || dcr_summary_name_parse(s, &p)
		       ? 2
		       : !strcmp(s, DCR_MANIFEST_SIG_NAME);
}

static int cmp_entry(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	int rx = entry_rank(x), ry = entry_rank(y);
	if (rx != ry)
		return rx - ry;
	return strcmp(x, y);
}

int dcr_pack_in_open_dir(const char *dir, struct dcr_pack_in **out, struct dcr_err *e)
{
	DIR *d = opendir(dir);
	if (!d)
		return dcr_err_sys(e, errno, "cannot open pack '%s'", dir);
	struct dcr_pack_in *in = dcr_calloc(1, sizeof(*in));
	if (!in) {
		closedir(d);
		return dcr_err_sys(e, ENOMEM, "%s", dir);
	}
	in->fd = -1;
	in->dir = dcr_strdup(dir);
	struct dcr_ent;
	struct dirent *de;
	size_t cap = 0;
	int r = 0;
	while ((de = readdir(d))) {
		uint32_t idx;
		if (!dcr_payload_name_parse(de->d_name, &idx) && !entry_rank(de->d_name))
			continue;
		if (in->n == cap) {
			cap = cap ? 2 * cap : 64;
			char **v = realloc(in->names, cap * sizeof(char *));
			if (!v) {
				r = dcr_err_sys(e, ENOMEM, "%s", dir);
				break;
			}
			in->names = v;
		}
		if (!(in->names[in->n++] = dcr_strdup(de->d_name))) {
			r = dcr_err_sys(e, ENOMEM, "%s", dir);
			break;
		}
	}
	closedir(d);
	if (r) {
		dcr_pack_in_close(in);
		return r;
	}
	if (in->n)
		qsort(in->names, in->n, sizeof(char *), cmp_entry);
	*out = in;
	return 0;
}

static la_ssize_t tar_read_cb(struct archive *a, void *ctx, const void **buf)
{
	(void)a;
	struct dcr_pack_in *in = ctx;
	if (in->head_off < in->head_len) {
		*buf = in->head + in->head_off;
		size_t n = in->head_len - in->head_off;
		in->head_off = in->head_len;
		return (la_ssize_t)n;
	}
	for (;;) {
		ssize_t n = read(in->fd, in->rbuf, sizeof(in->rbuf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			archive_set_error(a, errno, "read: %s", strerror(errno));
			return -1;
		}
		*buf = in->rbuf;
		return n;
	}
}

int dcr_pack_in_open_tar(int fd, const uint8_t *head, size_t head_len, struct dcr_pack_in **out,
			 struct dcr_err *e)
{
	struct dcr_pack_in *in = dcr_calloc(1, sizeof(*in));
	if (!in)
		return dcr_err_sys(e, ENOMEM, "pack stream");
	in->fd = fd;
	in->head = head;
	in->head_len = head_len;
	in->a = archive_read_new();
	if (!in->a || archive_read_support_format_tar(in->a) != ARCHIVE_OK ||
	    archive_read_support_filter_none(in->a) != ARCHIVE_OK ||
	    archive_read_open(in->a, in, NULL, tar_read_cb, NULL) != ARCHIVE_OK) {
		int r = dcr_err_set(e, DCR_EFORMAT, "not a pack stream (a tar of payloads and a manifest)%s%s",
				    in->a ? ": " : "", in->a ? archive_error_string(in->a) : "");
		dcr_pack_in_close(in);
		return r;
	}
	*out = in;
	return 0;
}

int dcr_pack_in_next(struct dcr_pack_in *in, const char **name, const uint8_t **buf,
		     size_t *len, struct dcr_err *e)
{
	if (!in->a) {
		dcr_blob_free(&in->cur);
		if (in->next >= in->n)
			return 0;
		const char *nm = in->names[in->next++];
		char *path = dcr_path_join(in->dir, nm);
		int r = path ? dcr_blob_map(&in->cur, path, PAYLOAD_FILE_MAX, e)
			     : dcr_err_sys(e, ENOMEM, "pack");
		free(path);
		if (r)
			return r;
		*name = nm;
		*buf = in->cur.p;
		*len = in->cur.len;
		return 1;
	}
	struct archive_entry *en;
	int s = archive_read_next_header(in->a, &en);
	if (s == ARCHIVE_EOF)
		return 0;
	if (s != ARCHIVE_OK)
		return dcr_err_set(e, DCR_EFORMAT, "pack stream: %s", archive_error_string(in->a));
	const char *nm = archive_entry_pathname(en);
	la_int64_t size = archive_entry_size(en);
	const char *why = !nm ? "it has no name"
			  : archive_entry_hardlink(en) ? "a hard link, not a file"
			  : archive_entry_filetype(en) == AE_IFLNK ? "a symbolic link, not a file"
			  : archive_entry_filetype(en) == AE_IFDIR ? "a directory, not a file"
			  : archive_entry_filetype(en) != AE_IFREG ? "not a regular file"
			  : size < 0 || (uint64_t)size > PAYLOAD_FILE_MAX ? "larger than any pack file may be"
									 : NULL;
	if (why)
		return dcr_err_set(e, DCR_EFORMAT, "pack stream: bad entry '%s': %s", nm ? nm : "?", why);
	free(in->name);
	in->name = dcr_strdup(nm);
	in->data.len = 0;
	if (!in->name)
		return dcr_err_sys(e, ENOMEM, "pack stream");
	/* the buffer grows with the bytes that really arrive: a header may
	 * declare any size up to the limit, but only TAR_STEP is reserved on
	 * its word (every payload of the default size fits in one step) */
	while (in->data.len < (size_t)size) {
		if (in->data.len == in->data.cap) {
			size_t want = (size_t)size - in->data.len;
			size_t step = in->data.cap > TAR_STEP ? in->data.cap : TAR_STEP;
			size_t grow = want < step ? want : step;
			if (dcr_buf_reserve(&in->data, grow + 1))
				return dcr_err_sys(e, ENOMEM, "pack stream");
			dcr_prefault(in->data.p + in->data.len, grow);
		}
		size_t room = in->data.cap - in->data.len;
		size_t want = (size_t)size - in->data.len;
		la_ssize_t n = archive_read_data(in->a, in->data.p + in->data.len,
						 want < room ? want : room);
		if (n < 0)
			return dcr_err_set(e, DCR_EFORMAT, "pack stream: entry '%s': %s", in->name,
					   archive_error_string(in->a));
		if (n == 0)
			return dcr_err_set(e, DCR_EFORMAT, "pack stream is truncated in entry '%s'",
					   in->name);
		in->data.len += (size_t)n;
	}
	*name = in->name;
	*buf = in->data.p;
	*len = in->data.len;
	return 1;
}

void dcr_pack_in_take(struct dcr_pack_in *in, struct dcr_blob *b)
{
	if (!in->a) {
		*b = in->cur;
		memset(&in->cur, 0, sizeof(in->cur));
		return;
	}
	memset(b, 0, sizeof(*b));
	b->p = in->data.p;
	b->len = in->data.len;
	b->cap = in->data.cap;
	memset(&in->data, 0, sizeof(in->data));
}

void dcr_pack_in_close(struct dcr_pack_in *in)
{
	if (!in)
		return;
	if (in->a)
		archive_read_free(in->a);
	for (size_t i = 0; i < in->n; i++)
		free(in->names[i]);
	free(in->names);
	free(in->dir);
	dcr_blob_free(&in->cur);
	free(in->name);
	dcr_buf_free(&in->data);
	free(in);
}

int dcr_pack_walk(struct dcr_pack_in *in, int (*fn)(void *ctx, const struct dcr_pack_entry *en),
		  void *ctx, struct dcr_err *e)
{
	const char *name;
	const uint8_t *buf;
	size_t len;
	int r, n = 0;
	while ((r = dcr_pack_in_next(in, &name, &buf, &len, e)) == 1) {
		struct dcr_pack_entry en = {.name = name, .len = len, .bytes = buf};
		struct dcr_manifest m;
		struct dcr_payload pl;
		struct dcr_payload_summary sum;
		struct dcr_summary ps;
		uint32_t idx;
		n++;
		if (!strcmp(name, DCR_MANIFEST_NAME)) {
			en.kind = DCR_ENTRY_MANIFEST;
			if (!(en.rc = dcr_manifest_parse(buf, len, name, &m, &en.err)))
				en.manifest = &m;
		} else if (!strcmp(name, DCR_MANIFEST_SIG_NAME)) {
			en.kind = DCR_ENTRY_SIGNATURE;
		} else if (dcr_summary_name_parse(name, &idx)) {
			en.kind = DCR_ENTRY_SUMMARY;
			if (!(en.rc = dcr_summary_parse(buf, len, name, &ps, &en.err))) {
				if (ps.producer != idx) {
					en.rc = dcr_err_set(&en.err, DCR_EFORMAT, "%s is producer %u's",
							    name, ps.producer);
					dcr_summary_release(&ps);
				} else {
					en.producer = &ps;
				}
			}
		} else if (dcr_payload_name_parse(name, &idx)) {
			en.kind = DCR_ENTRY_PAYLOAD;
			if (!(en.rc = dcr_payload_check(buf, len, name, &pl, &en.err))) {
				if (pl.index != idx)
					en.rc = dcr_err_set(&en.err, DCR_EFORMAT, "%s holds payload %u",
							    name, pl.index);
				else if (idx >= DCR_PAYLOADS_MAX)
					en.rc = dcr_err_set(&en.err, DCR_EFORMAT,
							    "%s: payload index %u is too large (at most %u)",
							    name, idx, DCR_PAYLOADS_MAX - 1);
				else if (!(en.rc = dcr_payload_summary(buf, len, &pl, name, &sum,
								       &en.err))) {
					en.payload = &pl;
					en.summary = &sum;
				}
			}
		} else {
			return dcr_err_set(e, DCR_EFORMAT, "pack: unexpected entry '%s'", name);
		}
		int stop = fn(ctx, &en);
		if (en.manifest)
			dcr_manifest_release(&m);
		if (en.producer)
			dcr_summary_release(&ps);
		if (stop)
			break;
	}
	return r < 0 ? r : n;
}

int dcr_pack_dir_have(void *ctx, uint32_t index, dcr_digest *digest)
{
	char *en = dcr_payload_name(index);
	char *path = en ? dcr_path_join(ctx, en) : NULL;
	struct dcr_blob b;
	struct dcr_err e;
	int ok = 0;
	if (path && !dcr_blob_map(&b, path, PAYLOAD_FILE_MAX, &e)) {
		struct dcr_payload pl;
		if (!dcr_payload_check(b.p, b.len, path, &pl, &e)) {
			ok = pl.index == index;
			*digest = pl.digest;
			dcr_payload_release(&pl);
		}
		dcr_blob_free(&b);
	}
	free(path);
	free(en);
	return ok;
}
