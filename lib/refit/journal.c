/* journal.c - the receiver's redo journal: a delta of OVERWRITE items (and
 * the file renames and removals of rebuilt files), checked against every
 * touched tensor's target digest before it is committed by rename, then
 * replayed into the files; replaying it again after a crash is harmless.
 * See apply.c for the whole protocol. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cuda.h"
#include "core/file.h"
#include "core/state.h"
#include "core/util.h"
#include "refit/journal.h"

/* ---- checking the journal before it is committed ----
 * Every touched tensor's new bytes (its current bytes, or zeros for a new
 * tensor, with the journal's overwrites applied) must hash to the target
 * digest. Nothing has been written to the receiver yet. */

struct jitem {
	uint32_t tensor;
	uint64_t start, len;
	const uint8_t *body;
	size_t body_len;
};

static int cmp_jitem(const void *a, const void *b)
{
	const struct jitem *x = a, *y = b;
	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

static void hash_src(struct dcr_sha *h, const uint8_t *src, uint64_t off, uint64_t n)
{
	static const uint8_t zero[65536];
	if (src) {
		dcr_sha_update(h, src + off, n);
		return;
	}
	while (n) {
		uint64_t k = n < sizeof(zero) ? n : sizeof(zero);
		dcr_sha_update(h, zero, k);
		n -= k;
	}
}

static int verify_journal(struct plan *p, const char *path, struct dcr_err *e)
{
	uint8_t *map = NULL;
	size_t len = 0;
	struct jitem *v = NULL;
	size_t nv = 0, cap = 0;
	struct dcr_changes ch = {0};
	struct dcr_buf tmp = {0};
	struct dcr_sha *h = dcr_sha_new();
	int r = h ? dcr_read_file(path, SIZE_MAX, &map, &len, e) : dcr_err_sys(e, ENOMEM, "journal");
	if (r)
		goto out;
	struct dcr_rd rd;
	dcr_rd_init(&rd, map, len);
	dcr_rd_bytes(&rd, DCR_DELTA_HDR_LEN);
	while (!rd.bad && dcr_rd_left(&rd) > 32) {
		struct dcr_delta_rec rec = {.type = dcr_rd_le32(&rd), .flags = dcr_rd_le32(&rd)};
		rec.len = dcr_rd_le64(&rd);
		rec.body = rd.bad || rec.len > dcr_rd_left(&rd) ? NULL : dcr_rd_bytes(&rd, rec.len);
		if (!rec.body)
			break;
		if (rec.type != DCR_REC_ITEM)
			continue;
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(&rec, &it, e)))
			goto out;
		if (nv == cap) {
			cap = cap ? 2 * cap : 256;
			struct jitem *nvp = realloc(v, cap * sizeof(*v));
			if (!nvp) {
				r = dcr_err_sys(e, ENOMEM, "journal");
				goto out;
			}
			v = nvp;
		}
		v[nv++] = (struct jitem){it.tensor, it.start, it.len, rec.body, rec.len};
	}
	if (rd.bad) {
		r = dcr_err_set(e, DCR_EFORMAT, "journal is malformed");
		goto out;
	}
	if (nv)
		qsort(v, nv, sizeof(*v), cmp_jitem);
	for (size_t i = 0; i < nv;) {
		struct ptensor *pt = &p->t[v[i].tensor];
		unsigned unit = dcr_dtype_unit(pt->t.dtype);
		uint64_t nbytes = pt->t.nelem * dcr_dtype_bits(pt->t.dtype) / 8;
		const uint8_t *src = (pt->t.flags & DCR_TENSOR_NEW) || !pt->cur ? NULL : pt->cur->data;
		uint64_t pos = 0; /* bytes hashed */
		size_t j = i;
		for (; j < nv && v[j].tensor == v[i].tensor; j++) {
			uint64_t s = v[j].start * unit, l = v[j].len * unit;
			if (s < pos) {
				r = dcr_err_set(e, DCR_EFORMAT, "delta has overlapping items for '%s'",
						pt->t.name);
				goto out;
			}
			hash_src(h, src, pos, s - pos);
			struct dcr_delta_rec rec = {.type = DCR_REC_ITEM, .len = v[j].body_len,
						    .body = v[j].body};
			struct dcr_item it;
			if ((r = dcr_delta_parse_item(&rec, &it, e)) ||
			    (r = dcr_item_decode(&it, unit, &ch, e)))
				goto out;
			tmp.len = 0;
			if (dcr_buf_reserve(&tmp, l)) {
				r = dcr_err_sys(e, ENOMEM, "journal");
				goto out;
			}
			if (src)
				memcpy(tmp.p, src + s, l);
			else
				memset(tmp.p, 0, l);
			dcr_scatter(tmp.p, unit, ch.pos, ch.val, ch.n, 0);
			dcr_sha_update(h, tmp.p, l);
			pos = s + l;
		}
		hash_src(h, src, pos, nbytes - pos);
		dcr_digest d;
		dcr_sha_final(h, &d);
		if (memcmp(d.b, pt->t.digest.b, 32)) {
			r = dcr_err_set(e, DCR_EDIGEST,
					"tensor '%s' would not match its target digest: the delta does not fit this receiver's bits (nothing was written)",
					pt->t.name);
			goto out;
		}
		pt->verified = 1;
		i = j;
	}
	/* a new tensor without items (all zero, or empty) */
	for (size_t i = 0; i < p->n; i++) {
		struct ptensor *pt = &p->t[i];
		if (!(pt->t.flags & DCR_TENSOR_NEW) || pt->verified)
			continue;
		hash_src(h, NULL, 0, pt->t.nelem * dcr_dtype_bits(pt->t.dtype) / 8);
		dcr_digest d;
		dcr_sha_final(h, &d);
		if (memcmp(d.b, pt->t.digest.b, 32)) {
			r = dcr_err_set(e, DCR_EDIGEST, "new tensor '%s' has no data but a non-zero digest",
					pt->t.name);
			goto out;
		}
		pt->verified = 1;
	}
out:
	dcr_sha_free(h);
	free(map);
	free(v);
	dcr_changes_free(&ch);
	dcr_buf_free(&tmp);
	return r;
}

int ap_write_journal(struct ctx *x, struct plan *p, struct item_src src, struct dcr_err *e)
{
	char *tmp = dcr_receiver_path(x->rc, "journal.tmp");
	char *fin = dcr_receiver_path(x->rc, "journal");
	struct dcr_delta_writer w = {0};
	int fd = -1, r = 0;
	if (!tmp || !fin) {
		r = dcr_err_sys(e, ENOMEM, "journal");
		goto out;
	}
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", tmp);
		goto out;
	}
	if ((r = dcr_delta_writer_init(&w, (struct dcr_sink){dcr_sink_fd_write, &fd}, &p->base,
				       p->attempt, "journal", e)))
		goto out;
	for (size_t i = 0; i < p->n && !r; i++)
		r = dcr_delta_write_tensor(&w, &p->t[i].t, e);
	for (size_t i = 0; i < p->nrenames && !r; i++)
		r = dcr_delta_write_name(&w, DCR_REC_JRENAME, p->renames[i], e);
	for (size_t i = 0; i < p->nunlinks && !r; i++)
		r = dcr_delta_write_name(&w, DCR_REC_JUNLINK, p->unlinks[i], e);
	if (r)
		goto out;
	struct dcr_item it;
	uint64_t done = 0;
	while ((r = src.next(src.ctx, p, &it, e)) == 1) {
		if ((r = dcr_delta_write_item(&w, &it, e)))
			break;
		done++;
		if (x->o && x->o->progress)
			x->o->progress(x->o->progress_ctx, done, p->nitems * 2);
	}
	if (r < 0)
		goto out;
	for (size_t i = 0; i < p->n && !r; i++)
		r = dcr_delta_write_done(&w, (uint32_t)i, &p->t[i].t.digest, e);
	if (!r)
		r = dcr_delta_write_end(&w, &p->target, e);
	if (r)
		goto out;
	if ((r = verify_journal(p, tmp, e)))
		goto out;
	ap_step(x);
	if (fsync(fd)) {
		r = dcr_err_sys(e, errno, "cannot fsync '%s'", tmp);
		goto out;
	}
	close(fd);
	fd = -1;
	/* the cache no longer describes the files once replay starts */
	dcr_receiver_drop_state(x->rc);
	ap_step(x);
	if (rename(tmp, fin)) {
		r = dcr_err_sys(e, errno, "cannot commit the journal '%s'", fin);
		goto out;
	}
	ap_step(x);
	if ((r = dcr_fsync_dir(x->rc->sdir)))
		r = dcr_err_sys(e, r, "cannot fsync '%s'", x->rc->sdir);
out:
	if (fd >= 0)
		close(fd);
	if (r && tmp)
		unlink(tmp);
	dcr_delta_writer_release(&w);
	free(tmp);
	free(fin);
	return r;
}

/* ---- replaying the journal ---- */

struct wfile {
	int fd;
	uint8_t *map;
	uint64_t size;
};

/* What the replay's steps share: the journal (its plan and its reader),
 * the receiver's checkpoint, the files being written, the digests. */
struct replay {
	struct ctx *x;
	int fd;			/* the journal */
	struct plan p;
	struct dcr_ckpt *c;
	struct wfile *wf;	/* per file of c, opened when first written */
	struct dcr_changes ch;
	struct dcr_delta_reader rd;
	dcr_digest *dg;		/* per tensor, after the overwrites */
	struct dcr_cuda_ctx *gpu; /* --device cuda: overwrites scattered there */
};

/* 1. staged files into place, removed files gone, the directory synced */
static int rp_move_files(struct replay *rp, struct dcr_err *e)
{
	struct ctx *x = rp->x;
	const struct plan *p = &rp->p;
	int r = 0;
	for (size_t i = 0; i < p->nrenames; i++) {
		char *from = dcr_asprintf("%s/stage/%s", x->rc->sdir, p->renames[i]);
		char *to = dcr_path_join(x->rc->dir, p->renames[i]);
		if (!from || !to)
			r = dcr_err_sys(e, ENOMEM, "journal");
		else if (access(from, F_OK) == 0) {
			ap_step(x);
			if (rename(from, to))
				r = dcr_err_sys(e, errno, "cannot rename '%s' to '%s'", from, to);
		}
		free(from);
		free(to);
		if (r)
			return r;
	}
	for (size_t i = 0; i < p->nunlinks; i++) {
		char *f = dcr_path_join(x->rc->dir, p->unlinks[i]);
		if (f && unlink(f) && errno != ENOENT)
			r = dcr_err_sys(e, errno, "cannot remove '%s'", f);
		free(f);
		if (r)
			return r;
	}
	if (p->nrenames || p->nunlinks) {
		ap_step(x);
		if ((r = dcr_fsync_dir(x->rc->dir)))
			return dcr_err_sys(e, r, "cannot fsync '%s'", x->rc->dir);
	}
	return 0;
}

/* The receiver's checkpoint, opened; each of its tensors must be the
 * journal's, in the same order, with the same dtype, shape and file. */
static int rp_open_ckpt(struct replay *rp, struct dcr_err *e)
{
	struct ctx *x = rp->x;
	struct plan *p = &rp->p;
	int r;
	if ((r = dcr_ckpt_open(x->rc->dir, &rp->c, e)))
		return r;
	const struct dcr_ckpt *c = rp->c;
	if (c->ntensors != p->n)
		return dcr_err_set(e, DCR_EFORMAT, "receiver '%s' holds %zu tensors, the journal %zu",
				   x->rc->dir, c->ntensors, p->n);
	for (size_t i = 0; i < p->n; i++) {
		const struct dcr_ckpt_tensor *ct = &c->tensors[i];
		const struct dcr_delta_tensor *t = &p->t[i].t;
		if (strcmp(ct->info->name, t->name) ||
		    !dcr_ckpt_tensor_is(ct, t->dtype, t->ndim, t->shape) ||
		    strcmp(c->file_names[ct->file], t->file))
			return dcr_err_set(e, DCR_EFORMAT,
					   "receiver '%s': tensor '%s' does not have the layout the journal expects",
					   x->rc->dir, t->name);
		p->t[i].cur = ct;
	}
	return 0;
}

/* The file of tensor ct opened and mapped for writing, once. */
static int rp_open_file(struct replay *rp, const struct dcr_ckpt_tensor *ct,
			struct wfile **pf, struct dcr_err *e)
{
	const struct dcr_ckpt *c = rp->c;
	struct wfile *f = &rp->wf[ct->file];
	int r = 0;
	*pf = f;
	if (f->fd >= 0)
		return 0;
	char *path = dcr_path_join(rp->x->rc->dir, c->file_names[ct->file]);
	f->fd = path ? open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC) : -1;
	f->size = c->files[ct->file]->size;
	/* the last line of defence (links are rebuilt before, stage.c): never
	 * write in place through a symbolic link or into a file other names
	 * share, which may be outside the receiver */
	struct stat sb;
	if ((f->fd < 0 && errno == ELOOP) ||
	    (f->fd >= 0 && !fstat(f->fd, &sb) && (!S_ISREG(sb.st_mode) || sb.st_nlink != 1))) {
		r = dcr_err_set(e, DCR_EFORMAT,
				"refusing to write through '%s': it is %s (a file outside the receiver would change); replace it with a copy, then rerun",
				path, f->fd < 0 ? "a symbolic link" : !S_ISREG(sb.st_mode) ? "not a regular file"
										 : "a hard link with other names");
		if (f->fd >= 0)
			close(f->fd);
		f->fd = -1;
		free(path);
		return r;
	}
	if (f->fd >= 0) {
		void *m = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
		f->map = m == MAP_FAILED ? NULL : m;
	}
	if (f->fd < 0 || !f->map)
		r = dcr_err_sys(e, errno, "cannot open '%s' for writing", path);
	free(path);
	return r;
}

/* 2. overwrites: the journal read again, each item scattered into its
 * file's mapping, then every written file synced */
static int rp_overwrite(struct replay *rp, struct dcr_err *e)
{
	struct ctx *x = rp->x;
	struct plan *p = &rp->p;
	const struct dcr_ckpt *c = rp->c;
	int r;
	rp->wf = dcr_calloc(c->nfiles, sizeof(*rp->wf));
	if (!rp->wf)
		return dcr_err_sys(e, ENOMEM, "journal");
	for (size_t i = 0; i < c->nfiles; i++)
		rp->wf[i].fd = -1;
	if (lseek(rp->fd, 0, SEEK_SET))
		return dcr_err_sys(e, errno, "cannot rewind the journal");
	if ((r = dcr_delta_reader_init(&rp->rd, (struct dcr_source){dcr_source_fd_read, &rp->fd},
				       "journal", e)))
		return r;
	rp->rd.journal = 1;
	struct dcr_delta_rec rec;
	uint64_t nitems = 0;
	while ((r = dcr_delta_next(&rp->rd, &rec, e)) == 1) {
		if (rec.type != DCR_REC_ITEM)
			continue;
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(&rec, &it, e)))
			break;
		if (it.enc != DCR_ENC_OVERWRITE) {
			r = dcr_err_set(e, DCR_EFORMAT, "journal holds a non-overwrite item");
			break;
		}
		const struct dcr_ckpt_tensor *ct = p->t[it.tensor].cur;
		unsigned unit = dcr_dtype_unit(ct->info->dtype);
		if ((r = dcr_item_decode(&it, unit, &rp->ch, e)))
			break;
		struct wfile *f;
		if ((r = rp_open_file(rp, ct, &f, e)))
			break;
		uint8_t *dst = f->map + ct->file_off + it.start * unit;
		if (x->o && x->o->device == DCR_DEVICE_CUDA) {
			/* the same overwrites, scattered on the device */
			if ((!rp->gpu && (r = dcr_cuda_ctx_new(&rp->gpu, e))) ||
			    (r = dcr_cuda_scatter_host(rp->gpu, dst, (size_t)(it.len * unit), unit,
						       rp->ch.pos, rp->ch.val, rp->ch.n, 0, e)))
				break;
		} else {
			dcr_scatter(dst, unit, rp->ch.pos, rp->ch.val, rp->ch.n, 0);
		}
		p->t[it.tensor].touched = 1;
		nitems++;
		if (x->o && x->o->progress)
			x->o->progress(x->o->progress_ctx, p->nitems + nitems, p->nitems * 2);
	}
	if (r < 0)
		return r;
	for (size_t i = 0; i < c->nfiles; i++) {
		if (rp->wf[i].fd < 0)
			continue;
		ap_step(x);
		if (msync(rp->wf[i].map, rp->wf[i].size, MS_SYNC) || fsync(rp->wf[i].fd))
			return dcr_err_sys(e, errno, "cannot sync '%s'", c->file_names[i]);
	}
	return 0;
}

/* 3. check touched tensors and those in rebuilt files (rp->dg: every
 * tensor's digest, the others' taken from the journal) */
static int rp_check(struct replay *rp, struct dcr_apply_result *res, struct dcr_err *e)
{
	const struct plan *p = &rp->p;
	int r = 0;
	rp->dg = dcr_calloc(p->n, sizeof(*rp->dg));
	if (!rp->dg)
		return dcr_err_sys(e, ENOMEM, "journal");
	dcr_digest *dg = rp->dg;
	uint8_t *sel = dcr_calloc(p->n, 1);
	if (!sel)
		return dcr_err_sys(e, ENOMEM, "journal");
	for (size_t i = 0; i < p->n; i++) {
		int rebuilt = 0;
		for (size_t k = 0; k < p->nrenames; k++)
			rebuilt |= !strcmp(p->renames[k], p->t[i].t.file);
		sel[i] = p->t[i].touched || rebuilt;
		if (!sel[i])
			dg[i] = p->t[i].t.digest; /* checked against the base before the commit */
	}
	dcr_ckpt_digests_sel(rp->c, dg, sel, 0); /* c's order is the plan's (checked above) */
	for (size_t i = 0; i < p->n; i++) {
		if (!sel[i])
			continue;
		if (memcmp(dg[i].b, p->t[i].t.digest.b, 32)) {
			r = dcr_err_set(e, DCR_EDIGEST,
					"receiver '%s': tensor '%s' does not match its target digest after apply",
					rp->x->rc->dir, p->t[i].t.name);
			break;
		}
		if (res)
			res->tensors_checked++;
	}
	free(sel);
	return r;
}

/* 4. done: cache the new state, drop the journal and the staging area */
static int rp_done(struct replay *rp, const char *jp, struct dcr_apply_result *res,
		   struct dcr_err *e)
{
	struct ctx *x = rp->x;
	const struct plan *p = &rp->p;
	int r;
	ap_step(x);
	if ((r = dcr_receiver_save_state(x->rc, rp->c, &p->target, rp->dg, e)))
		return r;
	ap_step(x);
	if (unlink(jp))
		return dcr_err_sys(e, errno, "cannot remove '%s'", jp);
	dcr_fsync_dir(x->rc->sdir);
	char hex[65];
	dcr_digest_hex(&p->target, hex);
	dcr_receiver_log(x->rc, "applied %llu items, state %s", (unsigned long long)p->nitems, hex);
	if (res) {
		res->base = p->base; /* the state the journal was made against */
		memcpy(res->attempt, p->attempt, 16);
		res->target = p->target;
		res->items = p->nitems;
		res->changes = p->nchanges;
	}
	return 0;
}

int ap_replay(struct ctx *x, struct dcr_apply_result *res, struct dcr_err *e)
{
	char *jp = dcr_receiver_path(x->rc, "journal");
	struct replay rp = {.x = x, .fd = -1};
	int r;
	if (!jp)
		return dcr_err_sys(e, ENOMEM, "journal");
	rp.fd = open(jp, O_RDONLY | O_CLOEXEC);
	if (rp.fd < 0) {
		r = dcr_err_sys(e, errno, "cannot open '%s'", jp);
		goto out;
	}
	if ((r = ap_read_plan((struct dcr_source){dcr_source_fd_read, &rp.fd}, NULL, 0, -1, 1,
			      "journal", &rp.p, e)) ||
	    (r = rp_move_files(&rp, e)) ||
	    (r = rp_open_ckpt(&rp, e)) ||
	    (r = rp_overwrite(&rp, e)) ||
	    (r = rp_check(&rp, res, e)))
		goto out;
	r = rp_done(&rp, jp, res, e);
out:
	if (rp.wf)
		for (size_t i = 0; rp.c && i < rp.c->nfiles; i++) {
			if (rp.wf[i].map)
				munmap(rp.wf[i].map, rp.wf[i].size);
			if (rp.wf[i].fd >= 0)
				close(rp.wf[i].fd);
		}
	free(rp.wf);
	free(rp.dg);
	dcr_delta_reader_release(&rp.rd);
	dcr_changes_free(&rp.ch);
	dcr_cuda_ctx_free(rp.gpu);
	dcr_ckpt_close(rp.c);
	ap_plan_free(&rp.p);
	if (rp.fd >= 0)
		close(rp.fd);
	free(jp);
	return r;
}

int ap_recover(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
		      struct dcr_err *e)
{
	/* a device that is not there is said before anything is touched */
	if (o && o->device == DCR_DEVICE_CUDA) {
		int r = dcr_cuda_probe(e);
		if (r)
			return r;
	}
	char *jp = dcr_receiver_path(rc, "journal");
	int have = jp && access(jp, F_OK) == 0;
	free(jp);
	char *tmp = dcr_receiver_path(rc, "journal.tmp");
	if (tmp)
		unlink(tmp); /* an uncommitted journal: nothing was written */
	free(tmp);
	if (!have)
		return 0;
	struct ctx x = {.rc = rc, .o = o};
	int r = ap_replay(&x, NULL, e);
	if (r)
		return r;
	dcr_receiver_log(rc, "recovered an interrupted apply");
	return 1;
}

/* What every apply does first: clear the result, and finish an interrupted
 * apply (its journal) before looking at anything new. */
int ap_begin(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
	     struct dcr_apply_result *res, struct dcr_err *e)
{
	if (res)
		memset(res, 0, sizeof(*res));
	int r = ap_recover(rc, o, e);
	if (r < 0)
		return r;
	if (res)
		res->recovered = r;
	return 0;
}
