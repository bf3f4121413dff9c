/* stage.c - executing a plan: files whose tensor set changes are rebuilt
 * under .dcr/stage/, then the journal is written, committed and replayed
 * (see apply.c for the whole protocol). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/file.h"
#include "core/util.h"
#include "refit/journal.h"
#include "refit/stage.h"

/* ---- staging files whose tensor set changes ---- */

/* Tensors of the target that live in `file`, in plan order. */
static int file_changes(const struct plan *p, const struct dcr_ckpt *c, const char *file)
{
	size_t cur_file = (size_t)-1;
	for (size_t i = 0; i < c->nfiles; i++)
		if (!strcmp(c->file_names[i], file))
			cur_file = i;
	if (cur_file == (size_t)-1)
		return 1; /* a new file */
	size_t want = 0;
	for (size_t i = 0; i < p->n; i++) {
		const struct ptensor *pt = &p->t[i];
		if (strcmp(pt->t.file, file))
			continue;
		want++;
		if ((pt->t.flags & DCR_TENSOR_NEW) || !pt->cur || pt->cur->file != cur_file)
			return 1;
	}
	return want != c->files[cur_file]->ntensors;
}

/* The staged file (path) is the stage's own, just made: open it for the
 * journal's check to write the new bytes of the direct tensors into. */
static int keep_stage_fd(struct plan *p, const char *path, int *fd, struct dcr_err *e)
{
	*fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	int *nv = *fd < 0 ? NULL : realloc(p->dfds, (p->ndfds + 1) * sizeof(int));
	if (!nv) {
		int r = *fd < 0 ? dcr_err_sys(e, errno, "cannot open '%s' for writing", path)
				: dcr_err_sys(e, ENOMEM, "stage");
		if (*fd >= 0)
			close(*fd);
		return r;
	}
	p->dfds = nv;
	p->dfds[p->ndfds++] = *fd;
	return 0;
}

/* A rebuilt file replaces the receiver's: give the staged one (fd) the
 * permission bits of the file it replaces, or for a new file those of the
 * receiver's first file, so that a serving process of another user or
 * group reads it as it read the old one (never more widely). The owner
 * keeps read and write: the replay may write into it. Its owner and group
 * too where the applying user may set them (root: both; anyone else: a
 * group of their own; otherwise theirs stay). */
static int keep_mode(const struct dcr_receiver *rc, const struct dcr_ckpt *c, const char *file,
		     int fd, struct dcr_err *e)
{
	struct stat sb;
	int found = 0;
	for (size_t i = 0; i <= c->nfiles && !found; i++) {
		const char *name = i == 0 ? file : c->file_names[i - 1];
		char *path = dcr_path_join(rc->dir, name);
		if (!path)
			return dcr_err_sys(e, ENOMEM, "stage");
		found = !stat(path, &sb) && S_ISREG(sb.st_mode); /* a link: its target's */
		free(path);
	}
	if (!found)
		return 0;
	if (fchmod(fd, (sb.st_mode & 0777) | S_IRUSR | S_IWUSR))
		return dcr_err_sys(e, errno, "cannot set the mode of the staged '%s'", file);
	struct stat me;
	if (!fstat(fd, &me) && (me.st_uid != sb.st_uid || me.st_gid != sb.st_gid) &&
	    fchown(fd, sb.st_uid, sb.st_gid)) {
		/* only root may give a file away: the group alone, if it is ours */
		int refused = fchown(fd, (uid_t)-1, sb.st_gid);
		(void)refused;
	}
	return 0;
}

/* Build the target's file `file` under .dcr/stage/: the tensors no item
 * touches copied from the receiver's, the blocks of the others reserved.
 * The file stays open for the journal's check, which writes the new bytes
 * of its touched and new tensors into it (ptensor.direct): they are
 * written once, before the commit, and neither journaled nor written
 * again by the replay. */
static int build_stage_file(struct ctx *x, struct plan *p, const struct dcr_ckpt *c,
			    const char *file, struct dcr_err *e)
{
	size_t cnt = 0;
	for (size_t i = 0; i < p->n; i++)
		cnt += !strcmp(p->t[i].t.file, file);
	struct dcr_tensor_info *ti = dcr_calloc(cnt, sizeof(*ti));
	struct ptensor **src = dcr_calloc(cnt, sizeof(*src));
	char *path = dcr_asprintf("%s/stage/%s", x->rc->sdir, file);
	struct dcr_st_writer *w = NULL;
	int r = 0;
	if (!ti || !src || !path) {
		r = dcr_err_sys(e, ENOMEM, "stage");
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < p->n; i++) {
		struct ptensor *pt = &p->t[i];
		if (strcmp(pt->t.file, file))
			continue;
		ti[k].name = pt->t.name;
		ti[k].dtype = pt->t.dtype;
		ti[k].ndim = pt->t.ndim;
		memcpy(ti[k].shape, pt->t.shape, sizeof(ti[k].shape));
		src[k++] = pt;
	}
	/* keep the file's metadata */
	const char **meta = NULL;
	size_t nmeta = 0;
	for (size_t i = 0; i < c->nfiles; i++)
		if (!strcmp(c->file_names[i], file)) {
			nmeta = c->files[i]->nmeta;
			meta = dcr_calloc(2 * nmeta, sizeof(char *));
			for (size_t j = 0; meta && j < nmeta; j++) {
				meta[2 * j] = c->files[i]->meta_keys[j];
				meta[2 * j + 1] = c->files[i]->meta_vals[j];
			}
			if (!meta)
				nmeta = 0;
		}
	if (!(r = dcr_st_layout(ti, cnt, e)))
		r = dcr_st_writer_new(path, ti, cnt, meta, nmeta, &w, e);
	free(meta);
	for (size_t j = 0; j < cnt && !r; j++) {
		uint64_t nb = ti[j].end - ti[j].begin;
		/* a touched or new tensor's blocks are reserved, not written:
		 * its new bytes come next */
		src[j]->direct = src[j]->touched || !src[j]->cur || (src[j]->t.flags & DCR_TENSOR_NEW);
		if (!src[j]->direct)
			r = dcr_st_writer_write(w, src[j]->cur->data, nb, e);
		else
			r = dcr_st_writer_zeros(w, nb, e);
	}
	if (!r) {
		ap_step(x);
		r = dcr_st_writer_commit(w, e);
	}
	int fd;
	if (r || (r = keep_stage_fd(p, path, &fd, e)) || (r = keep_mode(x->rc, c, file, fd, e)))
		goto out;
	uint64_t data = dcr_st_writer_data_off(w);
	for (size_t j = 0; j < cnt; j++)
		if (src[j]->direct) {
			src[j]->dfd = fd;
			src[j]->doff = data + ti[j].begin;
		}
out:
	for (size_t j = 0; r && j < cnt; j++)
		if (src[j])
			src[j]->direct = 0;
	dcr_st_writer_free(w);
	free(ti);
	free(src);
	free(path);
	return r;
}

static int build_stage_index(struct ctx *x, const struct plan *p, const struct dcr_ckpt *c,
			     struct dcr_err *e)
{
	struct dcr_buf b = {0};
	uint64_t total = 0;
	for (size_t i = 0; i < p->n; i++)
		total += p->t[i].t.nelem * dcr_dtype_bits(p->t[i].t.dtype) / 8;
	char *s = dcr_asprintf("{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {",
			       (unsigned long long)total);
	int r = !s || dcr_buf_add(&b, s, strlen(s));
	free(s);
	for (size_t i = 0; i < p->n && !r; i++) {
		r = dcr_buf_add(&b, i ? ",\n    \"" : "\n    \"", i ? 7 : 6);
		for (const char *q = p->t[i].t.name; *q && !r; q++) {
			char esc[8];
			unsigned char ch = (unsigned char)*q;
			if (ch == '"' || ch == '\\')
				r = dcr_buf_add_u8(&b, '\\') || dcr_buf_add_u8(&b, ch);
			else if (ch < 0x20) {
				snprintf(esc, sizeof(esc), "\\u%04x", ch);
				r = dcr_buf_add(&b, esc, 6);
			} else
				r = dcr_buf_add_u8(&b, ch);
		}
		s = dcr_asprintf("\": \"%s\"", p->t[i].t.file);
		r = r || !s || dcr_buf_add(&b, s, strlen(s));
		free(s);
	}
	r = r || dcr_buf_add(&b, "\n  }\n}\n", 7);
	if (r) {
		dcr_buf_free(&b);
		return dcr_err_sys(e, ENOMEM, "index");
	}
	char *path = dcr_asprintf("%s/stage/model.safetensors.index.json", x->rc->sdir);
	ap_step(x);
	/* written atomically, with its mode as the data files' (keep_mode)
	 * before the one sync of its commit */
	struct dcr_atomic a;
	if (!path)
		r = dcr_err_sys(e, ENOMEM, "index");
	else if (!(r = dcr_atomic_open(&a, path, e))) {
		int w = dcr_write_full(a.fd, b.p, b.len);
		if (w)
			r = dcr_err_sys(e, w, "cannot write '%s'", path);
		else
			r = keep_mode(x->rc, c, "model.safetensors.index.json", a.fd, e);
		if (r)
			dcr_atomic_abort(&a);
		else
			r = dcr_atomic_commit(&a, e);
	}
	free(path);
	dcr_buf_free(&b);
	return r;
}

/* Empty .dcr/stage/: what an earlier apply left there before its journal
 * was committed (a committed one has been replayed by now) is of no use;
 * and remove the temporary files in .dcr/ of processes killed while they
 * wrote one (dcr_atomic_is_stale; a state cache, an ack). */
void ap_clear_stage(struct dcr_receiver *rc)
{
	char *dd = dcr_receiver_path(rc, "");
	DIR *dr = dd ? opendir(dd) : NULL;
	for (struct dirent *de; dr && (de = readdir(dr));)
		if (dcr_atomic_is_stale(de->d_name))
			unlinkat(dirfd(dr), de->d_name, 0);
	if (dr)
		closedir(dr);
	free(dd);
	char *sd = dcr_receiver_path(rc, "stage");
	if (!sd)
		return;
	if (mkdir(sd, 0777) && errno == EEXIST) {
		DIR *d = opendir(sd);
		struct dirent *de;
		while (d && (de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				unlinkat(dirfd(d), de->d_name, 0);
		if (d)
			closedir(d);
	}
	free(sd);
}

/* Is the receiver's file a symbolic link, or a hard link shared with
 * another name? Then it is not the receiver's to write in place (a Hugging
 * Face cache snapshot links into blobs/ shared by every snapshot): it is
 * rebuilt under .dcr/stage/ and renamed over the link, which leaves the
 * shared file as it was. */
static int file_linked(const char *dir, const char *file)
{
	struct stat sb;
	char *p = dcr_path_join(dir, file);
	int r = p && !lstat(p, &sb) && (S_ISLNK(sb.st_mode) || (S_ISREG(sb.st_mode) && sb.st_nlink > 1));
	free(p);
	return r;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Stage the files whose tensor set changes (or that are links), list the
 * files to remove, and stage the index when the file set changes. */
/* The files to rebuild take what their tensors declare, which a few bytes
 * of a pack can make large (new tensors start as zeros): refuse at once
 * when .dcr/stage's file system has not the room, rather than fill it. */
static int stage_room(struct ctx *x, const struct plan *p, const struct dcr_ckpt *c,
		      const char *const *files, size_t nfiles, struct dcr_err *e)
{
	uint64_t need = 0;
	for (size_t i = 0; i < nfiles; i++) {
		if (!file_changes(p, c, files[i]) && !file_linked(x->rc->dir, files[i]))
			continue;
		for (size_t j = 0; j < p->n; j++) {
			const struct dcr_delta_tensor *t = &p->t[j].t;
			uint64_t bits;
			if (strcmp(t->file, files[i]))
				continue;
			/* nelem * bits was checked when the record was parsed */
			if (mul_ovf(t->nelem, dcr_dtype_bits(t->dtype), &bits) ||
			    add_ovf(need, bits / 8, &need))
				return dcr_err_set(e, DCR_EFORMAT, "apply: the target's files are too large");
		}
	}
	char *sd = dcr_receiver_path(x->rc, "stage");
	uint64_t room;
	int ok = sd && !dcr_fs_room(-1, sd, 0, &room, NULL);
	free(sd);
	if (!ok)
		return 0; /* unknown: the writes will tell */
	if (need > room)
		return dcr_err_sys(e, ENOSPC,
				   "cannot rebuild the target's files in '%s' (nothing was written): they need %llu bytes, %llu are free",
				   x->rc->sdir, (unsigned long long)need, (unsigned long long)room);
	return 0;
}

static int stage_files(struct ctx *x, struct plan *p, struct dcr_ckpt *c, struct dcr_err *e)
{
	struct dcr_receiver *rc = x->rc;
	int r;
	/* the target's distinct files, once each (a model may have tens of
	 * thousands of tensors but few files) */
	const char **files = dcr_calloc(p->n, sizeof(char *));
	if (!files)
		return dcr_err_sys(e, ENOMEM, "apply");
	for (size_t i = 0; i < p->n; i++)
		files[i] = p->t[i].t.file;
	if (p->n)
		qsort(files, p->n, sizeof(char *), cmp_name);
	size_t target_files = 0;
	for (size_t i = 0; i < p->n; i++)
		if (!target_files || strcmp(files[target_files - 1], files[i]))
			files[target_files++] = files[i];
	r = stage_room(x, p, c, files, target_files, e);
	for (size_t i = 0; i < target_files && !r; i++)
		if (file_changes(p, c, files[i]) || file_linked(rc->dir, files[i])) {
			if (ap_push_str(&p->renames, &p->nrenames, dcr_strdup(files[i])))
				r = dcr_err_sys(e, ENOMEM, "apply");
			else
				r = build_stage_file(x, p, c, files[i], e);
		}
	for (size_t i = 0; i < c->nfiles && !r; i++) {
		const char *f = c->file_names[i];
		if (!bsearch(&f, files, target_files, sizeof(char *), cmp_name) &&
		    ap_push_str(&p->unlinks, &p->nunlinks, dcr_strdup(f)))
			r = dcr_err_sys(e, ENOMEM, "apply");
	}
	free(files);
	if (r)
		return r;
	if ((p->nrenames || p->nunlinks) && (c->has_index || target_files > 1)) {
		if ((r = build_stage_index(x, p, c, e)))
			return r;
		if (ap_push_str(&p->renames, &p->nrenames, dcr_strdup("model.safetensors.index.json")))
			return dcr_err_sys(e, ENOMEM, "apply");
	}
	return 0;
}

/* Everything after the base check: the plan's tensors are matched with the
 * receiver's, files to rebuild are staged, the journal is written from the
 * items of src and committed, and replayed. */
int ap_commit_plan(struct ctx *x, struct plan *p, struct dcr_ckpt *c, const dcr_digest *cur,
		   const dcr_digest *cur_dg, struct item_src src, struct dcr_apply_result *res,
		   struct dcr_err *e)
{
	struct dcr_receiver *rc = x->rc;
	int r;
	p->base = *cur; /* the journal names the state it was made against */
	for (size_t i = 0; i < p->n; i++) {
		struct ptensor *pt = &p->t[i];
		pt->cur = dcr_ckpt_find(c, pt->t.name);
		if (pt->t.flags & DCR_TENSOR_NEW)
			continue;
		if (!pt->cur || pt->cur->info->dtype != pt->t.dtype ||
		    memcmp(pt->cur->info->shape, pt->t.shape, pt->t.ndim * sizeof(uint64_t)))
			return ap_explain_base(p, c, rc->dir, cur, e);
		/* an untouched tensor must already hold its target bits */
		if (!pt->touched && memcmp(cur_dg[pt->cur - c->tensors].b, pt->t.digest.b, 32))
			return dcr_err_set(e, DCR_EDIGEST,
					   "delta claims tensor '%s' is unchanged but gives another digest",
					   pt->t.name);
	}
	for (size_t i = 0; i < p->nremoved; i++)
		if (!dcr_ckpt_find(c, p->removed[i]))
			return ap_explain_base(p, c, rc->dir, cur, e);

	ap_clear_stage(rc);
	if (!(r = stage_files(x, p, c, e)))
		r = ap_write_journal(x, p, src, e);
	if (r) {
		/* nothing was written; what was staged is of no use unless the
		 * journal made it in before the failure */
		char *jp = dcr_receiver_path(rc, "journal");
		if (jp && access(jp, F_OK))
			ap_clear_stage(rc);
		free(jp);
		return r;
	}
	return ap_replay(x, p, res, e);
}

