/* apply.c - apply a delta to a receiver in place, crash-safe.
 *
 * 1. Stage: the whole delta is copied to .dcr/incoming while its framing,
 *    record bodies, trailer checksum and target state id are checked.
 *    Nothing in the receiver has been touched yet.
 * 2. Check: the receiver's state must be the delta's base (or already the
 *    target: then there is nothing to do).
 * 3. Journal: every item becomes an OVERWRITE of new stored bits (XOR masks
 *    are resolved against the current bits here, once). Files whose tensor
 *    set changes are rebuilt under .dcr/stage/. The journal is written to
 *    .dcr/journal.tmp, fsynced and renamed to .dcr/journal: the commit point.
 * 4. Replay: staged files are renamed into place, overwrites are written,
 *    files fsynced, touched tensors re-hashed against their target digests,
 *    the state cache written, the journal removed.
 * A crash before 3 leaves the receiver as it was; a crash after 3 is
 * finished by replaying the journal, which only holds overwrites, so
 * replaying it twice is harmless.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "receiver.h"

struct ptensor {
	struct dcr_delta_tensor t;
	int has_done;
	int touched;
	const struct dcr_ckpt_tensor *cur; /* in the receiver, when present */
};

struct plan {
	struct ptensor *t;
	size_t n, cap;
	char **removed;
	size_t nremoved;
	char **renames, **unlinks;
	size_t nrenames, nunlinks;
	dcr_digest base, target;
	uint8_t attempt[16];
	uint64_t nitems, nchanges;
};

static void plan_free(struct plan *p)
{
	for (size_t i = 0; i < p->n; i++)
		dcr_delta_tensor_clear(&p->t[i].t);
	free(p->t);
	for (size_t i = 0; i < p->nremoved; i++)
		free(p->removed[i]);
	free(p->removed);
	for (size_t i = 0; i < p->nrenames; i++)
		free(p->renames[i]);
	free(p->renames);
	for (size_t i = 0; i < p->nunlinks; i++)
		free(p->unlinks[i]);
	free(p->unlinks);
	memset(p, 0, sizeof(*p));
}

static int push_str(char ***v, size_t *n, char *s)
{
	char **nv = realloc(*v, (*n + 1) * sizeof(char *));
	if (!nv) {
		free(s);
		return -ENOMEM;
	}
	*v = nv;
	nv[(*n)++] = s;
	return 0;
}

struct ctx {
	struct dcr_receiver *rc;
	const struct dcr_apply_opts *o;
	int steps;
};

/* A durable step: the fault-injection hook kills the process at step N. */
static void step(struct ctx *x)
{
	if (x->o && x->o->fault_at && ++x->steps == x->o->fault_at)
		raise(SIGKILL);
}

/* ---- reading a delta into a plan ---- */

struct tee {
	struct dcr_source in;
	int fd; /* copy here, or -1 */
	int err;
};

static int tee_read(void *ctx, void *p, size_t n)
{
	struct tee *t = ctx;
	int r = t->in.read(t->in.ctx, p, n);
	if (!r && t->fd >= 0 && !t->err)
		t->err = dcr_write_full(t->fd, p, n);
	return r;
}

/* Consume one record into the plan; items are checked against it. */
static int plan_record(struct plan *p, const struct dcr_delta_rec *rec, struct dcr_err *e)
{
	int r;
	switch (rec->type) {
	case DCR_REC_TENSOR: {
		if (p->n == p->cap) {
			size_t cap = p->cap ? 2 * p->cap : 64;
			struct ptensor *nt = realloc(p->t, cap * sizeof(*nt));
			if (!nt)
				return dcr_err_sys(e, ENOMEM, "delta");
			p->t = nt;
			p->cap = cap;
		}
		struct ptensor *pt = &p->t[p->n];
		memset(pt, 0, sizeof(*pt));
		if ((r = dcr_delta_parse_tensor(rec, &pt->t, e)))
			return r;
		p->n++;
		if (!dcr_safe_file_name(pt->t.file) || strlen(pt->t.file) < 13 ||
		    strcmp(pt->t.file + strlen(pt->t.file) - 12, ".safetensors"))
			return dcr_err_set(e, DCR_EFORMAT, "delta: tensor '%s' names an unsafe file '%s'",
					   pt->t.name, pt->t.file);
		if (p->n > 1 && strcmp(p->t[p->n - 2].t.name, pt->t.name) >= 0)
			return dcr_err_set(e, DCR_EFORMAT,
					   "delta: tensor '%s' is out of order or repeated", pt->t.name);
		return 0;
	}
	case DCR_REC_ITEM: {
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(rec, &it, e)))
			return r;
		if (it.tensor >= p->n)
			return dcr_err_set(e, DCR_EFORMAT, "delta: item for undeclared tensor %u",
					   it.tensor);
		struct ptensor *pt = &p->t[it.tensor];
		uint64_t units = pt->t.nelem * dcr_dtype_bits(pt->t.dtype) / 8 /
				 dcr_dtype_unit(pt->t.dtype);
		if (it.start > units || it.len > units - it.start)
			return dcr_err_set(e, DCR_EFORMAT, "delta: item for '%s' runs past its end",
					   pt->t.name);
		if (it.enc == DCR_ENC_XOR && (pt->t.flags & DCR_TENSOR_NEW))
			return dcr_err_set(e, DCR_EFORMAT,
					   "delta: XOR item for '%s', which is not in the base",
					   pt->t.name);
		if (pt->has_done)
			return dcr_err_set(e, DCR_EFORMAT, "delta: item for '%s' after its digest",
					   pt->t.name);
		pt->touched = 1;
		p->nitems++;
		p->nchanges += it.n;
		return 0;
	}
	case DCR_REC_REMOVE: {
		char *name;
		if ((r = dcr_delta_parse_name(rec, &name, e)))
			return r;
		return push_str(&p->removed, &p->nremoved, name) ? dcr_err_sys(e, ENOMEM, "delta") : 0;
	}
	case DCR_REC_JRENAME:
	case DCR_REC_JUNLINK: {
		char *name;
		if ((r = dcr_delta_parse_name(rec, &name, e)))
			return r;
		if (!dcr_safe_file_name(name)) {
			free(name);
			return dcr_err_set(e, DCR_EFORMAT, "journal: unsafe file name");
		}
		int q = rec->type == DCR_REC_JRENAME ? push_str(&p->renames, &p->nrenames, name)
						     : push_str(&p->unlinks, &p->nunlinks, name);
		return q ? dcr_err_sys(e, ENOMEM, "journal") : 0;
	}
	case DCR_REC_DONE: {
		uint32_t ti;
		dcr_digest d;
		if ((r = dcr_delta_parse_done(rec, &ti, &d, e)))
			return r;
		if (ti >= p->n || p->t[ti].has_done)
			return dcr_err_set(e, DCR_EFORMAT, "delta: bad digest record for tensor %u", ti);
		p->t[ti].has_done = 1;
		p->t[ti].t.have_digest = 1;
		p->t[ti].t.digest = d;
		return 0;
	}
	default:
		return 0; /* END is handled by the reader; ancillary records skipped */
	}
}

static int plan_finish(struct plan *p, struct dcr_delta_reader *rd, struct dcr_err *e)
{
	for (size_t i = 0; i < p->n; i++)
		if (!p->t[i].has_done)
			return dcr_err_set(e, DCR_EFORMAT, "%s: no target digest for tensor '%s'",
					   rd->what, p->t[i].t.name);
	if (rd->end_tensors != p->n || rd->end_items != p->nitems ||
	    rd->end_changes != p->nchanges)
		return dcr_err_set(e, DCR_EFORMAT, "%s: END counts do not match its records", rd->what);
	struct dcr_state_entry *ent = dcr_calloc(p->n, sizeof(*ent));
	if (!ent)
		return dcr_err_sys(e, ENOMEM, "%s", rd->what);
	for (size_t i = 0; i < p->n; i++) {
		ent[i].name = p->t[i].t.name;
		ent[i].dtype = p->t[i].t.dtype;
		ent[i].ndim = p->t[i].t.ndim;
		ent[i].shape = p->t[i].t.shape;
		ent[i].digest = p->t[i].t.digest;
	}
	dcr_digest id;
	dcr_state_id(ent, p->n, &id);
	free(ent);
	if (memcmp(id.b, rd->target.b, 32))
		return dcr_err_set(e, DCR_EDIGEST,
				   "%s: its tensors do not add up to the target state id it names",
				   rd->what);
	p->base = rd->base;
	p->target = rd->target;
	memcpy(p->attempt, rd->attempt, 16);
	return 0;
}

/* Read a whole delta (or journal) into a plan, copying it to fd if >= 0. */
static int read_plan(struct dcr_source src, const uint8_t *head, size_t head_len, int copy_fd,
		     int journal, const char *what, struct plan *p, struct dcr_err *e)
{
	struct tee t = {.in = src, .fd = copy_fd};
	struct dcr_delta_reader rd;
	if (copy_fd >= 0 && head_len && dcr_write_full(copy_fd, head, head_len))
		return dcr_err_sys(e, errno, "cannot stage %s", what);
	int r = dcr_delta_reader_init_with(&rd, (struct dcr_source){tee_read, &t}, head, head_len,
					   what, e);
	rd.journal = journal;
	struct dcr_delta_rec rec;
	while (!r && (r = dcr_delta_next(&rd, &rec, e)) == 1)
		r = plan_record(p, &rec, e);
	if (!r && t.err)
		r = dcr_err_sys(e, t.err, "cannot stage %s", what);
	if (!r)
		r = plan_finish(p, &rd, e);
	dcr_delta_reader_release(&rd);
	return r;
}

/* ---- checking the receiver against the base ---- */

static int explain_base(const struct plan *p, const struct dcr_ckpt *c, const char *dir,
			const dcr_digest *cur, struct dcr_err *e)
{
	for (size_t i = 0; i < p->n; i++) {
		const struct dcr_delta_tensor *t = &p->t[i].t;
		if (t->flags & DCR_TENSOR_NEW)
			continue;
		const struct dcr_ckpt_tensor *ct = dcr_ckpt_find(c, t->name);
		if (!ct)
			return dcr_err_set(e, DCR_EBASE,
					   "receiver '%s' is missing tensor '%s' (the delta's base has it)",
					   dir, t->name);
		if (ct->info->dtype != t->dtype || ct->info->ndim != t->ndim ||
		    memcmp(ct->info->shape, t->shape, t->ndim * sizeof(uint64_t)))
			return dcr_err_set(e, DCR_EBASE,
					   "receiver '%s': tensor '%s' has another dtype or shape than in the delta's base",
					   dir, t->name);
	}
	char a[65], b[65];
	dcr_digest_hex(cur, a);
	dcr_digest_hex(&p->base, b);
	return dcr_err_set(e, DCR_EBASE,
			   "receiver '%s' is not at the delta's base (receiver %.12s, delta base %.12s)",
			   dir, a, b);
}

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

static int build_stage_file(struct ctx *x, const struct plan *p, const struct dcr_ckpt *c,
			    const char *file, struct dcr_err *e)
{
	size_t cnt = 0;
	for (size_t i = 0; i < p->n; i++)
		cnt += !strcmp(p->t[i].t.file, file);
	struct dcr_tensor_info *ti = dcr_calloc(cnt, sizeof(*ti));
	const struct ptensor **src = dcr_calloc(cnt, sizeof(*src));
	char *path = dcr_asprintf("%s/stage/%s", x->rc->sdir, file);
	struct dcr_st_writer *w = NULL;
	int r = 0;
	if (!ti || !src || !path) {
		r = dcr_err_sys(e, ENOMEM, "stage");
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < p->n; i++) {
		const struct ptensor *pt = &p->t[i];
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
	static const uint8_t zero[65536];
	for (size_t j = 0; j < cnt && !r; j++) {
		uint64_t nb = ti[j].end - ti[j].begin;
		if (src[j]->cur && !(src[j]->t.flags & DCR_TENSOR_NEW)) {
			r = dcr_st_writer_write(w, src[j]->cur->data, nb, e);
		} else {
			for (uint64_t o = 0; o < nb && !r; o += sizeof(zero))
				r = dcr_st_writer_write(w, zero,
							nb - o < sizeof(zero) ? nb - o : sizeof(zero), e);
		}
	}
	if (!r) {
		step(x);
		r = dcr_st_writer_commit(w, e);
	}
out:
	dcr_st_writer_free(w);
	free(ti);
	free(src);
	free(path);
	return r;
}

static int build_stage_index(struct ctx *x, const struct plan *p, struct dcr_err *e)
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
	step(x);
	r = path ? dcr_write_file_atomic(path, b.p, b.len, e) : dcr_err_sys(e, ENOMEM, "index");
	free(path);
	dcr_buf_free(&b);
	return r;
}

/* ---- writing the journal ---- */

static int write_journal(struct ctx *x, struct plan *p,
			 int incoming_fd, const dcr_digest *cur_dg, struct dcr_err *e)
{
	char *tmp = dcr_receiver_path(x->rc, "journal.tmp");
	char *fin = dcr_receiver_path(x->rc, "journal");
	struct dcr_delta_writer w = {0};
	struct dcr_delta_reader rd = {0};
	struct dcr_changes ch = {0};
	struct dcr_buf enc = {0};
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

	/* second pass over the staged delta: resolve every item to overwrites */
	if (lseek(incoming_fd, 0, SEEK_SET)) {
		r = dcr_err_sys(e, errno, "cannot rewind the staged delta");
		goto out;
	}
	if ((r = dcr_delta_reader_init(&rd, (struct dcr_source){dcr_source_fd_read, &incoming_fd},
				       "staged delta", e)))
		goto out;
	struct dcr_delta_rec rec;
	uint64_t done = 0;
	while ((r = dcr_delta_next(&rd, &rec, e)) == 1) {
		if (rec.type != DCR_REC_ITEM)
			continue;
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(&rec, &it, e)))
			break;
		struct ptensor *pt = &p->t[it.tensor];
		unsigned unit = dcr_dtype_unit(pt->t.dtype);
		if ((r = dcr_item_decode(&it, unit, &ch, e)))
			break;
		if (it.enc == DCR_ENC_XOR) {
			const uint8_t *base = pt->cur->data + it.start * unit;
			for (size_t k = 0; k < ch.n; k++)
				ch.val[k] ^= load_unit(base + ch.pos[k] * unit, unit);
		}
		enc.len = 0;
		struct dcr_item o = it;
		o.enc = DCR_ENC_OVERWRITE;
		if ((r = dcr_item_encode(&ch, unit, it.len, it.flags & DCR_ITEM_DENSE, &o.codec, &enc,
					 e)))
			break;
		o.data = enc.p;
		o.data_len = enc.len;
		if ((r = dcr_delta_write_item(&w, &o, e)))
			break;
		done++;
		if (x->o && x->o->progress)
			x->o->progress(x->o->progress_ctx, done, p->nitems * 2);
	}
	if (r < 0)
		goto out;
	r = 0;
	for (size_t i = 0; i < p->n && !r; i++)
		r = dcr_delta_write_done(&w, (uint32_t)i, &p->t[i].t.digest, e);
	if (!r)
		r = dcr_delta_write_end(&w, &p->target, e);
	if (r)
		goto out;
	(void)cur_dg;
	step(x);
	if (fsync(fd)) {
		r = dcr_err_sys(e, errno, "cannot fsync '%s'", tmp);
		goto out;
	}
	close(fd);
	fd = -1;
	/* the cache no longer describes the files once replay starts */
	dcr_receiver_drop_state(x->rc);
	step(x);
	if (rename(tmp, fin)) {
		r = dcr_err_sys(e, errno, "cannot commit the journal '%s'", fin);
		goto out;
	}
	step(x);
	if ((r = dcr_fsync_dir(x->rc->sdir)))
		r = dcr_err_sys(e, r, "cannot fsync '%s'", x->rc->sdir);
out:
	if (fd >= 0)
		close(fd);
	if (r && tmp)
		unlink(tmp);
	dcr_delta_writer_release(&w);
	dcr_delta_reader_release(&rd);
	dcr_changes_free(&ch);
	dcr_buf_free(&enc);
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

static int replay(struct ctx *x, struct dcr_apply_result *res, struct dcr_err *e)
{
	char *jp = dcr_receiver_path(x->rc, "journal");
	struct plan p = {0};
	struct dcr_ckpt *c = NULL;
	struct wfile *wf = NULL;
	struct dcr_changes ch = {0};
	struct dcr_delta_reader rd = {0};
	dcr_digest *dg = NULL;
	int fd = -1, r;
	if (!jp)
		return dcr_err_sys(e, ENOMEM, "journal");
	fd = open(jp, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = dcr_err_sys(e, errno, "cannot open '%s'", jp);
		goto out;
	}
	if ((r = read_plan((struct dcr_source){dcr_source_fd_read, &fd}, NULL, 0, -1, 1,
			   "journal", &p, e)))
		goto out;

	/* 1. staged files into place */
	for (size_t i = 0; i < p.nrenames; i++) {
		char *from = dcr_asprintf("%s/stage/%s", x->rc->sdir, p.renames[i]);
		char *to = dcr_path_join(x->rc->dir, p.renames[i]);
		if (!from || !to)
			r = dcr_err_sys(e, ENOMEM, "journal");
		else if (access(from, F_OK) == 0) {
			step(x);
			if (rename(from, to))
				r = dcr_err_sys(e, errno, "cannot rename '%s' to '%s'", from, to);
		}
		free(from);
		free(to);
		if (r)
			goto out;
	}
	for (size_t i = 0; i < p.nunlinks; i++) {
		char *f = dcr_path_join(x->rc->dir, p.unlinks[i]);
		if (f && unlink(f) && errno != ENOENT)
			r = dcr_err_sys(e, errno, "cannot remove '%s'", f);
		free(f);
		if (r)
			goto out;
	}
	if (p.nrenames || p.nunlinks) {
		step(x);
		if ((r = dcr_fsync_dir(x->rc->dir))) {
			r = dcr_err_sys(e, r, "cannot fsync '%s'", x->rc->dir);
			goto out;
		}
	}

	/* 2. overwrites */
	if ((r = dcr_ckpt_open(x->rc->dir, &c, e)))
		goto out;
	if (c->ntensors != p.n) {
		r = dcr_err_set(e, DCR_EFORMAT, "receiver '%s' holds %zu tensors, the journal %zu",
				x->rc->dir, c->ntensors, p.n);
		goto out;
	}
	for (size_t i = 0; i < p.n; i++) {
		const struct dcr_ckpt_tensor *ct = &c->tensors[i];
		const struct dcr_delta_tensor *t = &p.t[i].t;
		if (strcmp(ct->info->name, t->name) || ct->info->dtype != t->dtype ||
		    ct->info->ndim != t->ndim ||
		    memcmp(ct->info->shape, t->shape, t->ndim * sizeof(uint64_t)) ||
		    strcmp(c->file_names[ct->file], t->file)) {
			r = dcr_err_set(e, DCR_EFORMAT,
					"receiver '%s': tensor '%s' does not have the layout the journal expects",
					x->rc->dir, t->name);
			goto out;
		}
		p.t[i].cur = ct;
	}
	wf = dcr_calloc(c->nfiles, sizeof(*wf));
	if (!wf) {
		r = dcr_err_sys(e, ENOMEM, "journal");
		goto out;
	}
	for (size_t i = 0; i < c->nfiles; i++)
		wf[i].fd = -1;
	if (lseek(fd, 0, SEEK_SET)) {
		r = dcr_err_sys(e, errno, "cannot rewind the journal");
		goto out;
	}
	if ((r = dcr_delta_reader_init(&rd, (struct dcr_source){dcr_source_fd_read, &fd},
				       "journal", e)))
		goto out;
	rd.journal = 1;
	struct dcr_delta_rec rec;
	uint64_t nitems = 0;
	while ((r = dcr_delta_next(&rd, &rec, e)) == 1) {
		if (rec.type != DCR_REC_ITEM)
			continue;
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(&rec, &it, e)))
			break;
		if (it.enc != DCR_ENC_OVERWRITE) {
			r = dcr_err_set(e, DCR_EFORMAT, "journal holds a non-overwrite item");
			break;
		}
		const struct dcr_ckpt_tensor *ct = p.t[it.tensor].cur;
		unsigned unit = dcr_dtype_unit(ct->info->dtype);
		if ((r = dcr_item_decode(&it, unit, &ch, e)))
			break;
		struct wfile *f = &wf[ct->file];
		if (f->fd < 0) {
			char *path = dcr_path_join(x->rc->dir, c->file_names[ct->file]);
			f->fd = path ? open(path, O_RDWR | O_CLOEXEC) : -1;
			f->size = c->files[ct->file]->size;
			if (f->fd >= 0) {
				void *m = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
				f->map = m == MAP_FAILED ? NULL : m;
			}
			if (f->fd < 0 || !f->map)
				r = dcr_err_sys(e, errno, "cannot open '%s' for writing", path);
			free(path);
			if (r)
				break;
		}
		uint8_t *dst = f->map + ct->file_off + it.start * unit;
		for (size_t k = 0; k < ch.n; k++)
			store_unit(dst + ch.pos[k] * unit, unit, ch.val[k]);
		p.t[it.tensor].touched = 1;
		nitems++;
		if (x->o && x->o->progress)
			x->o->progress(x->o->progress_ctx, p.nitems + nitems, p.nitems * 2);
	}
	if (r < 0)
		goto out;
	r = 0;
	for (size_t i = 0; i < c->nfiles; i++) {
		if (wf[i].fd < 0)
			continue;
		step(x);
		if (msync(wf[i].map, wf[i].size, MS_SYNC) || fsync(wf[i].fd)) {
			r = dcr_err_sys(e, errno, "cannot sync '%s'", c->file_names[i]);
			goto out;
		}
	}

	/* 3. check touched tensors and those in rebuilt files */
	dg = dcr_calloc(p.n, sizeof(*dg));
	if (!dg) {
		r = dcr_err_sys(e, ENOMEM, "journal");
		goto out;
	}
	for (size_t i = 0; i < p.n; i++) {
		int rebuilt = 0;
		for (size_t k = 0; k < p.nrenames; k++)
			rebuilt |= !strcmp(p.renames[k], p.t[i].t.file);
		if (p.t[i].touched || rebuilt) {
			dcr_tensor_digest(p.t[i].cur, &dg[i]);
			if (memcmp(dg[i].b, p.t[i].t.digest.b, 32)) {
				r = dcr_err_set(e, DCR_EDIGEST,
						"receiver '%s': tensor '%s' does not match its target digest after apply",
						x->rc->dir, p.t[i].t.name);
				goto out;
			}
			if (res)
				res->tensors_checked++;
		} else {
			dg[i] = p.t[i].t.digest; /* checked against the base before the commit */
		}
	}
	/* 4. done: cache the new state, drop the journal and the staging area */
	step(x);
	if ((r = dcr_receiver_save_state(x->rc, c, &p.target, dg, e)))
		goto out;
	step(x);
	if (unlink(jp)) {
		r = dcr_err_sys(e, errno, "cannot remove '%s'", jp);
		goto out;
	}
	dcr_fsync_dir(x->rc->sdir);
	char hex[65];
	dcr_digest_hex(&p.target, hex);
	dcr_receiver_log(x->rc, "applied %llu items, state %s", (unsigned long long)p.nitems, hex);
	if (res) {
		res->base = p.base;
		res->target = p.target;
		res->items = p.nitems;
		res->changes = p.nchanges;
	}
out:
	if (wf)
		for (size_t i = 0; c && i < c->nfiles; i++) {
			if (wf[i].map)
				munmap(wf[i].map, wf[i].size);
			if (wf[i].fd >= 0)
				close(wf[i].fd);
		}
	free(wf);
	free(dg);
	dcr_delta_reader_release(&rd);
	dcr_changes_free(&ch);
	dcr_ckpt_close(c);
	plan_free(&p);
	if (fd >= 0)
		close(fd);
	free(jp);
	return r;
}

int dcr_apply_recover(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
		      struct dcr_err *e)
{
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
	int r = replay(&x, NULL, e);
	if (r)
		return r;
	dcr_receiver_log(rc, "recovered an interrupted apply");
	return 1;
}

static void clear_stage(struct dcr_receiver *rc)
{
	char *sd = dcr_receiver_path(rc, "stage");
	if (!sd)
		return;
	mkdir(sd, 0777);
	free(sd);
}

int dcr_apply(struct dcr_receiver *rc, struct dcr_source src, const uint8_t *head,
	      size_t head_len, const struct dcr_apply_opts *o, struct dcr_apply_result *res,
	      struct dcr_err *e)
{
	struct ctx x = {.rc = rc, .o = o};
	struct plan p = {0};
	struct dcr_ckpt *c = NULL;
	dcr_digest *cur_dg = NULL;
	char *inc = dcr_receiver_path(rc, "incoming");
	int fd = -1, r;
	if (res)
		memset(res, 0, sizeof(*res));
	if (!inc)
		return dcr_err_sys(e, ENOMEM, "apply");

	r = dcr_apply_recover(rc, o, e);
	if (r < 0)
		goto out;
	if (res)
		res->recovered = r;

	/* 1. stage and check the whole delta */
	unlink(inc);
	fd = open(inc, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", inc);
		goto out;
	}
	if ((r = read_plan(src, head, head_len, fd, 0, o && o->what ? o->what : "delta", &p, e)))
		goto out;

	/* 2. the receiver must be at the base */
	if ((r = dcr_ckpt_open(rc->dir, &c, e)))
		goto out;
	dcr_digest cur;
	if ((r = dcr_receiver_state(rc, c, 1, &cur, &cur_dg, NULL, e)))
		goto out;
	if (res) {
		res->base = p.base;
		res->target = p.target;
	}
	if (!memcmp(cur.b, p.target.b, 32)) {
		if (res)
			res->already = 1;
		r = 0;
		goto out;
	}
	if (memcmp(cur.b, p.base.b, 32)) {
		r = explain_base(&p, c, rc->dir, &cur, e);
		goto out;
	}
	for (size_t i = 0; i < p.n; i++) {
		struct ptensor *pt = &p.t[i];
		pt->cur = dcr_ckpt_find(c, pt->t.name);
		if (pt->t.flags & DCR_TENSOR_NEW)
			continue;
		if (!pt->cur || pt->cur->info->dtype != pt->t.dtype ||
		    memcmp(pt->cur->info->shape, pt->t.shape, pt->t.ndim * sizeof(uint64_t))) {
			r = explain_base(&p, c, rc->dir, &cur, e);
			goto out;
		}
		/* an untouched tensor must already hold its target bits */
		if (!pt->touched &&
		    memcmp(cur_dg[pt->cur - c->tensors].b, pt->t.digest.b, 32)) {
			r = dcr_err_set(e, DCR_EDIGEST,
					"delta claims tensor '%s' is unchanged but gives another digest",
					pt->t.name);
			goto out;
		}
	}
	for (size_t i = 0; i < p.nremoved; i++)
		if (!dcr_ckpt_find(c, p.removed[i])) {
			r = explain_base(&p, c, rc->dir, &cur, e);
			goto out;
		}

	/* 3. plan file rebuilds, stage them, write the journal */
	clear_stage(rc);
	for (size_t i = 0; i < p.n; i++) {
		const char *f = p.t[i].t.file;
		int seen = 0;
		for (size_t k = 0; k < p.nrenames; k++)
			seen |= !strcmp(p.renames[k], f);
		if (!seen && file_changes(&p, c, f)) {
			if (push_str(&p.renames, &p.nrenames, dcr_strdup(f))) {
				r = dcr_err_sys(e, ENOMEM, "apply");
				goto out;
			}
			if ((r = build_stage_file(&x, &p, c, f, e)))
				goto out;
		}
	}
	for (size_t i = 0; i < c->nfiles; i++) {
		int kept = 0;
		for (size_t k = 0; k < p.n && !kept; k++)
			kept = !strcmp(p.t[k].t.file, c->file_names[i]);
		if (!kept && push_str(&p.unlinks, &p.nunlinks, dcr_strdup(c->file_names[i]))) {
			r = dcr_err_sys(e, ENOMEM, "apply");
			goto out;
		}
	}
	size_t target_files = 0;
	for (size_t i = 0; i < p.n; i++) {
		int first = 1;
		for (size_t k = 0; k < i && first; k++)
			first = strcmp(p.t[k].t.file, p.t[i].t.file) != 0;
		target_files += first;
	}
	if ((p.nrenames || p.nunlinks) && (c->has_index || target_files > 1)) {
		if ((r = build_stage_index(&x, &p, e)))
			goto out;
		if (push_str(&p.renames, &p.nrenames, dcr_strdup("model.safetensors.index.json"))) {
			r = dcr_err_sys(e, ENOMEM, "apply");
			goto out;
		}
	}
	if ((r = write_journal(&x, &p, fd, cur_dg, e)))
		goto out;
	dcr_ckpt_close(c);
	c = NULL;

	/* 4. replay */
	r = replay(&x, res, e);
out:
	if (fd >= 0)
		close(fd);
	unlink(inc);
	free(inc);
	free(cur_dg);
	dcr_ckpt_close(c);
	plan_free(&p);
	return r;
}
