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

#include "apply-int.h"

void ap_plan_free(struct plan *p)
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
	free(p->alt);
	memset(p, 0, sizeof(*p));
}

int ap_push_str(char ***v, size_t *n, char *s)
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

void ap_step(struct ctx *x)
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
		p->nxor += it.enc == DCR_ENC_XOR;
		return 0;
	}
	case DCR_REC_BASES: {
		if (p->alt)
			return dcr_err_set(e, DCR_EFORMAT, "delta: more than one BASES record");
		return dcr_delta_parse_bases(rec, &p->alt, &p->nalt, e);
	}
	case DCR_REC_REMOVE: {
		char *name;
		if ((r = dcr_delta_parse_name(rec, &name, e)))
			return r;
		return ap_push_str(&p->removed, &p->nremoved, name) ? dcr_err_sys(e, ENOMEM, "delta") : 0;
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
		int q = rec->type == DCR_REC_JRENAME ? ap_push_str(&p->renames, &p->nrenames, name)
						     : ap_push_str(&p->unlinks, &p->nunlinks, name);
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
	p->any_base = (rd->flags & DCR_DELTA_DENSE) != 0;
	memcpy(p->attempt, rd->attempt, 16);
	return 0;
}

/* Read a whole delta (or journal) into a plan, copying it to fd if >= 0. */
int ap_read_plan(struct dcr_source src, const uint8_t *head, size_t head_len, int copy_fd,
		 int journal, const char *what, struct plan *p, struct dcr_err *e)
{
	struct tee t = {.in = src, .fd = copy_fd};
	struct dcr_delta_reader rd;
	if (copy_fd >= 0 && head_len && dcr_write_full(copy_fd, head, head_len))
		return dcr_err_sys(e, errno, "cannot stage %s", what);
	int r = dcr_delta_reader_init_flags(&rd, (struct dcr_source){tee_read, &t}, head, head_len,
					    DCR_DELTA_DENSE, what, e);
	rd.journal = journal;
	struct dcr_delta_rec rec;
	while (!r && (r = dcr_delta_next(&rd, &rec, e)) == 1)
		r = plan_record(p, &rec, e);
	if (!r && t.err)
		r = dcr_err_sys(e, t.err, "cannot stage %s", what);
	if (!r && !journal) {
		uint8_t extra;
		int q = src.read(src.ctx, &extra, 1);
		if (q == 0)
			r = dcr_err_set(e, DCR_EFORMAT, "%s has bytes after its trailer", what);
		else if (q != -EPIPE)
			r = dcr_err_sys(e, q, "cannot read %s", what);
	}
	if (!r)
		r = plan_finish(p, &rd, e);
	dcr_delta_reader_release(&rd);
	return r;
}

/* ---- checking the receiver against the base ---- */

int ap_explain_base(const struct plan *p, const struct dcr_ckpt *c, const char *dir,
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
		if (!dcr_ckpt_tensor_is(ct, t->dtype, t->ndim, t->shape))
			return dcr_err_set(e, DCR_EBASE,
					   "receiver '%s': tensor '%s' has another dtype or shape than in the delta's base",
					   dir, t->name);
	}
	for (size_t i = 0; i < p->nremoved; i++)
		if (!dcr_ckpt_find(c, p->removed[i]))
			return dcr_err_set(e, DCR_EBASE,
					   "receiver '%s' is missing tensor '%s' (the delta's base has it)",
					   dir, p->removed[i]);
	char a[65], b[65];
	dcr_digest_hex(cur, a);
	dcr_digest_hex(&p->base, b);
	return dcr_err_set(e, DCR_EBASE,
			   "receiver '%s' is not at the delta's base (receiver %.12s, delta base %.12s): apply the versions in between in order, a squashed delta, or a dense copy (dcr-pull --dense)",
			   dir, a, b);
}

/* May a receiver in state cur (committed state head, or NULL) take this
 * plan? The base, or an alternative base when every item is an overwrite
 * (which holds target bits, so the result is exact from any of them). */
int ap_check_bases(const struct plan *p, const struct dcr_ckpt *c, const char *dir,
		   const dcr_digest *cur, const dcr_digest *head, int xor_seen,
		   struct dcr_err *e)
{
	if (p->any_base) {
		/* a dense copy holds every tensor whole, and only overwrites */
		if (p->nxor || xor_seen)
			return dcr_err_set(e, DCR_EFORMAT, "a dense copy that holds XOR items; refused");
		return 0;
	}
	int head_ok = !head || !memcmp(head->b, p->base.b, 32);
	for (size_t i = 0; i < p->nalt && !head_ok; i++)
		head_ok = !memcmp(head->b, p->alt[i].b, 32);
	if (!head_ok) {
		char h[65], b[65];
		dcr_digest_hex(head, h);
		dcr_digest_hex(&p->base, b);
		return dcr_err_set(e, DCR_EBASE,
				   "receiver '%s': the delta's base %.12s is not its committed state %.12s (run dcr-commit first, or apply the missing versions in order, a squashed delta, or a dense copy: dcr-pull --dense)",
				   dir, b, h);
	}
	if (!memcmp(cur->b, p->base.b, 32))
		return 0;
	for (size_t i = 0; i < p->nalt; i++)
		if (!memcmp(cur->b, p->alt[i].b, 32)) {
			if (p->nxor || xor_seen)
				return dcr_err_set(e, DCR_EFORMAT,
						   "delta names alternative bases but holds XOR items; refused");
			return 0;
		}
	return ap_explain_base(p, c, dir, cur, e);
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
		ap_step(x);
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
	ap_step(x);
	r = path ? dcr_write_file_atomic(path, b.p, b.len, e) : dcr_err_sys(e, ENOMEM, "index");
	free(path);
	dcr_buf_free(&b);
	return r;
}

/* Items of a staged delta: XOR masks resolved against the current bits. */
struct delta_items {
	struct dcr_delta_reader rd;
	int fd;
	struct dcr_changes ch;
	struct dcr_buf enc;
};

static int delta_items_next(void *ctx, struct plan *p, struct dcr_item *o, struct dcr_err *e)
{
	struct delta_items *d = ctx;
	struct dcr_delta_rec rec;
	int r;
	while ((r = dcr_delta_next(&d->rd, &rec, e)) == 1) {
		if (rec.type != DCR_REC_ITEM)
			continue;
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(&rec, &it, e)))
			return r;
		struct ptensor *pt = &p->t[it.tensor];
		unsigned unit = dcr_dtype_unit(pt->t.dtype);
		const uint8_t *base = it.enc == DCR_ENC_XOR ? pt->cur->data + it.start * unit : NULL;
		if ((r = dcr_item_resolve(&it, unit, base, &d->ch, e)))
			return r;
		d->enc.len = 0;
		*o = it;
		o->enc = DCR_ENC_OVERWRITE;
		if ((r = dcr_item_encode(&d->ch, unit, it.len, it.flags & DCR_ITEM_DENSE, &o->codec,
					 &d->enc, e)))
			return r;
		o->data = d->enc.p;
		o->data_len = d->enc.len;
		return 1;
	}
	return r;
}

static void clear_stage(struct dcr_receiver *rc)
{
	char *sd = dcr_receiver_path(rc, "stage");
	if (!sd)
		return;
	mkdir(sd, 0777);
	free(sd);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
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

	clear_stage(rc);
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
	r = 0;
	for (size_t i = 0; i < target_files && !r; i++)
		if (file_changes(p, c, files[i])) {
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
		if ((r = build_stage_index(x, p, e)))
			return r;
		if (ap_push_str(&p->renames, &p->nrenames, dcr_strdup("model.safetensors.index.json")))
			return dcr_err_sys(e, ENOMEM, "apply");
	}
	if ((r = ap_write_journal(x, p, src, e)))
		return r;
	return ap_replay(x, res, e);
}

/* Open the receiver's checkpoint and its current state. */
int ap_current_state(struct dcr_receiver *rc, struct dcr_ckpt **c, dcr_digest *cur,
		     dcr_digest **cur_dg, struct dcr_err *e)
{
	int r = dcr_ckpt_open(rc->dir, c, e);
	if (!r)
		r = dcr_receiver_state(rc, *c, 1, cur, cur_dg, NULL, e);
	return r;
}

/* What every apply does first: clear the result, and finish an interrupted
 * apply (its journal) before looking at anything new. */
int ap_begin(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
	     struct dcr_apply_result *res, struct dcr_err *e)
{
	if (res)
		memset(res, 0, sizeof(*res));
	int r = dcr_apply_recover(rc, o, e);
	if (r < 0)
		return r;
	if (res)
		res->recovered = r;
	return 0;
}

int dcr_apply(struct dcr_receiver *rc, struct dcr_source src, const uint8_t *head,
	      size_t head_len, const struct dcr_apply_opts *o, struct dcr_apply_result *res,
	      struct dcr_err *e)
{
	struct ctx x = {.rc = rc, .o = o};
	struct plan p = {0};
	struct dcr_ckpt *c = NULL;
	dcr_digest *cur_dg = NULL;
	struct delta_items di = {.fd = -1};
	char *inc = dcr_receiver_path(rc, "incoming");
	int r;
	if (!inc)
		return dcr_err_sys(e, ENOMEM, "apply");
	if ((r = ap_begin(rc, o, res, e)))
		goto out;

	/* 1. stage and check the whole delta */
	unlink(inc);
	di.fd = open(inc, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (di.fd < 0) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", inc);
		goto out;
	}
	if ((r = ap_read_plan(src, head, head_len, di.fd, 0, o && o->what ? o->what : "delta", &p,
			   e)))
		goto out;

	/* 2. the receiver must be at the base */
	dcr_digest cur;
	if ((r = ap_current_state(rc, &c, &cur, &cur_dg, e)))
		goto out;
	if (res) {
		res->base = p.base;
		res->target = p.target;
		memcpy(res->attempt, p.attempt, 16);
	}
	if (!memcmp(cur.b, p.target.b, 32)) {
		if (res)
			res->already = 1;
		goto out;
	}
	if ((r = ap_check_bases(&p, c, rc->dir, &cur, o ? o->head : NULL, 0, e)))
		goto out;
	if (res)
		res->base = cur;

	/* 3. journal from the staged delta, commit, replay */
	if (lseek(di.fd, 0, SEEK_SET)) {
		r = dcr_err_sys(e, errno, "cannot rewind the staged delta");
		goto out;
	}
	if ((r = dcr_delta_reader_init_flags(&di.rd, (struct dcr_source){dcr_source_fd_read, &di.fd},
					     NULL, 0, DCR_DELTA_DENSE, "staged delta", e)))
		goto out;
	r = ap_commit_plan(&x, &p, c, &cur, cur_dg, (struct item_src){delta_items_next, &di}, res, e);
out:
	dcr_delta_reader_release(&di.rd);
	dcr_changes_free(&di.ch);
	dcr_buf_free(&di.enc);
	if (di.fd >= 0)
		close(di.fd);
	unlink(inc);
	free(inc);
	free(cur_dg);
	dcr_ckpt_close(c);
	ap_plan_free(&p);
	return r;
}
