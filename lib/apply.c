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
#include "pack.h"
#include "receiver.h"

struct ptensor {
	struct dcr_delta_tensor t;
	int has_done;
	int touched;
	int verified; /* new bytes hashed to the target digest before the commit */
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
	dcr_digest *alt; /* alternative bases (BASES record, or the manifest) */
	int any_base;    /* a dense copy: fits a receiver in any state */
	size_t nalt;
	uint64_t nxor;   /* XOR items: none allowed from an alternative base */
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
	free(p->alt);
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
	p->any_base = (rd->flags & DCR_DELTA_DENSE) != 0;
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
static int check_bases(const struct plan *p, const struct dcr_ckpt *c, const char *dir,
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
	return explain_base(p, c, dir, cur, e);
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

/* Where the journal's items come from: each call yields one item, already
 * resolved to an OVERWRITE and encoded (1), or the end (0). */
struct item_src {
	int (*next)(void *ctx, struct plan *p, struct dcr_item *it, struct dcr_err *e);
	void *ctx;
};

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

static int write_journal(struct ctx *x, struct plan *p, struct item_src src, struct dcr_err *e)
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
		dcr_scatter(f->map + ct->file_off + it.start * unit, unit, ch.pos, ch.val, ch.n, 0);
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
	uint8_t *sel = dcr_calloc(p.n, 1);
	if (!sel) {
		r = dcr_err_sys(e, ENOMEM, "journal");
		goto out;
	}
	for (size_t i = 0; i < p.n; i++) {
		int rebuilt = 0;
		for (size_t k = 0; k < p.nrenames; k++)
			rebuilt |= !strcmp(p.renames[k], p.t[i].t.file);
		sel[i] = p.t[i].touched || rebuilt;
		if (!sel[i])
			dg[i] = p.t[i].t.digest; /* checked against the base before the commit */
	}
	dcr_ckpt_digests_sel(c, dg, sel, 0); /* c's order is the plan's (checked above) */
	for (size_t i = 0; i < p.n; i++) {
		if (!sel[i])
			continue;
		if (memcmp(dg[i].b, p.t[i].t.digest.b, 32)) {
			r = dcr_err_set(e, DCR_EDIGEST,
					"receiver '%s': tensor '%s' does not match its target digest after apply",
					x->rc->dir, p.t[i].t.name);
			free(sel);
			goto out;
		}
		if (res)
			res->tensors_checked++;
	}
	free(sel);
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
		res->base = p.base; /* the state the journal was made against */
		memcpy(res->attempt, p.attempt, 16);
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

/* Everything after the base check: the plan's tensors are matched with the
 * receiver's, files to rebuild are staged, the journal is written from the
 * items of src and committed, and replayed. */
static int commit_plan(struct ctx *x, struct plan *p, struct dcr_ckpt *c, const dcr_digest *cur,
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
			return explain_base(p, c, rc->dir, cur, e);
		/* an untouched tensor must already hold its target bits */
		if (!pt->touched && memcmp(cur_dg[pt->cur - c->tensors].b, pt->t.digest.b, 32))
			return dcr_err_set(e, DCR_EDIGEST,
					   "delta claims tensor '%s' is unchanged but gives another digest",
					   pt->t.name);
	}
	for (size_t i = 0; i < p->nremoved; i++)
		if (!dcr_ckpt_find(c, p->removed[i]))
			return explain_base(p, c, rc->dir, cur, e);

	clear_stage(rc);
	for (size_t i = 0; i < p->n; i++) {
		const char *f = p->t[i].t.file;
		int seen = 0;
		for (size_t k = 0; k < p->nrenames; k++)
			seen |= !strcmp(p->renames[k], f);
		if (!seen && file_changes(p, c, f)) {
			if (push_str(&p->renames, &p->nrenames, dcr_strdup(f)))
				return dcr_err_sys(e, ENOMEM, "apply");
			if ((r = build_stage_file(x, p, c, f, e)))
				return r;
		}
	}
	for (size_t i = 0; i < c->nfiles; i++) {
		int kept = 0;
		for (size_t k = 0; k < p->n && !kept; k++)
			kept = !strcmp(p->t[k].t.file, c->file_names[i]);
		if (!kept && push_str(&p->unlinks, &p->nunlinks, dcr_strdup(c->file_names[i])))
			return dcr_err_sys(e, ENOMEM, "apply");
	}
	size_t target_files = 0;
	for (size_t i = 0; i < p->n; i++) {
		int first = 1;
		for (size_t k = 0; k < i && first; k++)
			first = strcmp(p->t[k].t.file, p->t[i].t.file) != 0;
		target_files += first;
	}
	if ((p->nrenames || p->nunlinks) && (c->has_index || target_files > 1)) {
		if ((r = build_stage_index(x, p, e)))
			return r;
		if (push_str(&p->renames, &p->nrenames, dcr_strdup("model.safetensors.index.json")))
			return dcr_err_sys(e, ENOMEM, "apply");
	}
	if ((r = write_journal(x, p, src, e)))
		return r;
	return replay(x, res, e);
}

/* Open the receiver's checkpoint and its current state. */
static int current_state(struct dcr_receiver *rc, struct dcr_ckpt **c, dcr_digest *cur,
			 dcr_digest **cur_dg, struct dcr_err *e)
{
	int r = dcr_ckpt_open(rc->dir, c, e);
	if (!r)
		r = dcr_receiver_state(rc, *c, 1, cur, cur_dg, NULL, e);
	return r;
}

/* What every apply does first: clear the result, and finish an interrupted
 * apply (its journal) before looking at anything new. */
static int apply_begin(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
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
	if ((r = apply_begin(rc, o, res, e)))
		goto out;

	/* 1. stage and check the whole delta */
	unlink(inc);
	di.fd = open(inc, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (di.fd < 0) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", inc);
		goto out;
	}
	if ((r = read_plan(src, head, head_len, di.fd, 0, o && o->what ? o->what : "delta", &p,
			   e)))
		goto out;

	/* 2. the receiver must be at the base */
	dcr_digest cur;
	if ((r = current_state(rc, &c, &cur, &cur_dg, e)))
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
	if ((r = check_bases(&p, c, rc->dir, &cur, o ? o->head : NULL, 0, e)))
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
	r = commit_plan(&x, &p, c, &cur, cur_dg, (struct item_src){delta_items_next, &di}, res, e);
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
	plan_free(&p);
	return r;
}

/* ---- applying a pack ----
 * Payloads are checked and resolved to overwrites as they arrive (against
 * the untouched base bits) into .dcr/spool; when the stream ends with a
 * manifest that accounts for every payload, the spool becomes the journal
 * and is committed and replayed as for a delta. */

struct spool {
	int fd;
	struct dcr_buf rec, enc;
	struct dcr_changes ch;
	/* reading back */
	struct dcr_buf buf;
	size_t off;
	uint64_t nitems, nchanges;
	int xor_seen; /* XOR items left out (receiver not at the base) */
};

static int spool_item(struct spool *s, const char *name, const struct dcr_item *it,
		      struct dcr_err *e)
{
	struct dcr_buf *b = &s->rec;
	b->len = 0;
	size_t nl = strlen(name);
	if (dcr_buf_add_varint(b, nl) || dcr_buf_add(b, name, nl) ||
	    dcr_buf_add_varint(b, it->flags) || dcr_buf_add_u8(b, it->enc) ||
	    dcr_buf_add_u8(b, it->codec) || dcr_buf_add_varint(b, it->start) ||
	    dcr_buf_add_varint(b, it->len) || dcr_buf_add_varint(b, it->n) ||
	    dcr_buf_add_varint(b, it->data_len) || dcr_buf_add(b, it->data, it->data_len))
		return dcr_err_sys(e, ENOMEM, "spool");
	int r = dcr_write_full(s->fd, b->p, b->len);
	if (r)
		return dcr_err_sys(e, r, "cannot write the spool");
	s->nitems++;
	s->nchanges += it->n;
	return 0;
}

/* Next spooled item: its tensor's name (borrowed) and the item. */
static int spool_read(struct spool *s, const char **name, struct dcr_item *it, char *namebuf,
		      struct dcr_err *e)
{
	if (s->off >= s->buf.len)
		return 0;
	struct dcr_rd rd;
	dcr_rd_init(&rd, s->buf.p + s->off, s->buf.len - s->off);
	uint64_t nl = dcr_rd_varint(&rd);
	const uint8_t *nm = nl < 65536 ? dcr_rd_bytes(&rd, nl) : NULL;
	memset(it, 0, sizeof(*it));
	it->flags = (uint32_t)dcr_rd_varint(&rd);
	it->enc = dcr_rd_u8(&rd);
	it->codec = dcr_rd_u8(&rd);
	it->start = dcr_rd_varint(&rd);
	it->len = dcr_rd_varint(&rd);
	it->n = dcr_rd_varint(&rd);
	uint64_t dl = dcr_rd_varint(&rd);
	it->data = rd.bad ? NULL : dcr_rd_bytes(&rd, dl);
	if (!nm || !it->data)
		return dcr_err_set(e, DCR_EFORMAT, "spool is corrupt");
	it->data_len = (size_t)dl;
	memcpy(namebuf, nm, nl);
	namebuf[nl] = '\0';
	*name = namebuf;
	s->off = (size_t)(rd.p - s->buf.p);
	return 1;
}

static struct ptensor *plan_find(struct plan *p, const char *name)
{
	size_t lo = 0, hi = p->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int k = strcmp(p->t[mid].t.name, name);
		if (!k)
			return &p->t[mid];
		if (k < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int spool_next(void *ctx, struct plan *p, struct dcr_item *it, struct dcr_err *e)
{
	struct spool *s = ctx;
	char namebuf[65536];
	const char *name;
	int r = spool_read(s, &name, it, namebuf, e);
	if (r != 1)
		return r;
	struct ptensor *pt = plan_find(p, name);
	if (!pt)
		return dcr_err_set(e, DCR_EFORMAT, "pack: item for '%s', which the manifest lacks", name);
	it->tensor = (uint32_t)(pt - p->t);
	return 1;
}

/* Resolve one payload's items into the spool. */
static int spool_payload(struct spool *s, const struct dcr_payload *pl, const char *what,
			 const struct dcr_ckpt *c, int allow_xor, struct dcr_err *e)
{
	struct dcr_delta_tensor *lt = NULL;
	size_t nlt = 0, cap = 0;
	struct dcr_rd rd;
	int r = 0;
	dcr_rd_init(&rd, pl->raw, pl->raw_len);
	while (!r && dcr_rd_left(&rd)) {
		struct dcr_delta_rec rec;
		rec.type = dcr_rd_le32(&rd);
		rec.flags = dcr_rd_le32(&rd);
		rec.len = dcr_rd_le64(&rd);
		rec.body = rd.bad || rec.len > dcr_rd_left(&rd) ? NULL : dcr_rd_bytes(&rd, rec.len);
		if (!rec.body || rec.flags) {
			r = dcr_err_set(e, DCR_EFORMAT, "%s: malformed record", what);
			break;
		}
		if (rec.type == DCR_REC_TENSOR) {
			if (nlt == cap) {
				cap = cap ? 2 * cap : 16;
				struct dcr_delta_tensor *v = realloc(lt, cap * sizeof(*v));
				if (!v) {
					r = dcr_err_sys(e, ENOMEM, "%s", what);
					break;
				}
				lt = v;
			}
			if (!(r = dcr_delta_parse_tensor(&rec, &lt[nlt], e)))
				nlt++;
		} else if (rec.type == DCR_REC_ITEM) {
			struct dcr_item it;
			if ((r = dcr_delta_parse_item(&rec, &it, e)))
				break;
			if (it.tensor >= nlt) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s: item for undeclared tensor", what);
				break;
			}
			const struct dcr_delta_tensor *t = &lt[it.tensor];
			unsigned unit = dcr_dtype_unit(t->dtype);
			uint64_t units = t->nelem * dcr_dtype_bits(t->dtype) / 8 / unit;
			if (it.start > units || it.len > units - it.start) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s: item for '%s' runs past its end",
						what, t->name);
				break;
			}
			if (it.enc == DCR_ENC_XOR && !allow_xor) {
				s->xor_seen = 1;
				continue;
			}
			if (it.enc == DCR_ENC_XOR) {
				const struct dcr_ckpt_tensor *ct = dcr_ckpt_find(c, t->name);
				if ((t->flags & DCR_TENSOR_NEW) || !ct || ct->info->dtype != t->dtype ||
				    ct->info->ndim != t->ndim ||
				    memcmp(ct->info->shape, t->shape, t->ndim * sizeof(uint64_t))) {
					r = dcr_err_set(e, DCR_EFORMAT,
							"%s: XOR item for '%s', which the receiver does not hold as in the base",
							what, t->name);
					break;
				}
				if ((r = dcr_item_resolve(&it, unit, ct->data + it.start * unit, &s->ch, e)))
					break;
				s->enc.len = 0;
				it.enc = DCR_ENC_OVERWRITE;
				if ((r = dcr_item_encode(&s->ch, unit, it.len, it.flags & DCR_ITEM_DENSE,
							 &it.codec, &s->enc, e)))
					break;
				it.data = s->enc.p;
				it.data_len = s->enc.len;
			} else {
				/* check it decodes now, so a bad payload is refused early */
				if ((r = dcr_item_decode(&it, unit, &s->ch, e)))
					break;
			}
			r = spool_item(s, t->name, &it, e);
		} else if (rec.type == DCR_REC_REMOVE) {
			/* the manifest lists removals */
		} else if (rec.type < DCR_REC_ANCILLARY) {
			r = dcr_err_set(e, DCR_EFORMAT, "%s: unexpected record type %u", what, rec.type);
		}
	}
	if (!r && rd.bad)
		r = dcr_err_set(e, DCR_EFORMAT, "%s: truncated record", what);
	for (size_t i = 0; i < nlt; i++)
		dcr_delta_tensor_clear(&lt[i]);
	free(lt);
	return r;
}

static int plan_from_manifest(struct plan *p, const struct dcr_manifest *m, struct dcr_err *e)
{
	p->t = dcr_calloc(m->ntensors, sizeof(*p->t));
	p->removed = dcr_calloc(m->nremoved, sizeof(char *));
	if (!p->t || !p->removed)
		return dcr_err_sys(e, ENOMEM, "manifest");
	p->cap = m->ntensors;
	for (uint32_t i = 0; i < m->ntensors; i++) {
		p->t[i].t = m->tensors[i];
		p->t[i].t.name = dcr_strdup(m->tensors[i].name);
		p->t[i].t.file = dcr_strdup(m->tensors[i].file);
		p->t[i].has_done = 1;
		p->n++;
		if (!p->t[i].t.name || !p->t[i].t.file)
			return dcr_err_sys(e, ENOMEM, "manifest");
		const char *f = p->t[i].t.file;
		if (!dcr_safe_file_name(f) || strlen(f) < 13 ||
		    strcmp(f + strlen(f) - 12, ".safetensors"))
			return dcr_err_set(e, DCR_EFORMAT, "manifest: tensor '%s' names an unsafe file",
					   p->t[i].t.name);
	}
	for (uint32_t i = 0; i < m->nremoved; i++) {
		if (!(p->removed[i] = dcr_strdup(m->removed[i])))
			return dcr_err_sys(e, ENOMEM, "manifest");
		p->nremoved++;
	}
	p->base = m->base;
	p->target = m->target;
	memcpy(p->attempt, m->attempt, 16);
	p->nitems = m->nitems;
	p->nchanges = m->nchanges;
	p->any_base = m->dense;
	if (m->nalt) {
		if (!(p->alt = dcr_calloc(m->nalt, sizeof(dcr_digest))))
			return dcr_err_sys(e, ENOMEM, "manifest");
		memcpy(p->alt, m->alt, m->nalt * sizeof(dcr_digest));
		p->nalt = m->nalt;
	}
	return 0;
}

int dcr_apply_pack(struct dcr_receiver *rc, struct dcr_pack_in *in,
		   const struct dcr_apply_opts *o, struct dcr_apply_result *res,
		   struct dcr_err *e)
{
	struct ctx x = {.rc = rc, .o = o};
	struct plan p = {0};
	struct dcr_ckpt *c = NULL;
	dcr_digest cur, *cur_dg = NULL, base = {{0}};
	uint8_t attempt[16] = {0};
	struct spool s = {.fd = -1};
	struct dcr_manifest m = {0};
	int have_manifest = 0, have_base = 0, mismatch = 0;
	dcr_digest *pdig = NULL;
	uint8_t *pseen = NULL;
	size_t pcap = 0;
	char *sp = dcr_receiver_path(rc, "spool");
	int r;
	if (!sp)
		return dcr_err_sys(e, ENOMEM, "apply");
	if ((r = apply_begin(rc, o, res, e)))
		goto out;
	if ((r = current_state(rc, &c, &cur, &cur_dg, e)))
		goto out;
	unlink(sp);
	s.fd = open(sp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (s.fd < 0) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", sp);
		goto out;
	}

	const char *name;
	const uint8_t *buf;
	size_t len;
	uint64_t got = 0;
	while ((r = dcr_pack_in_next(in, &name, &buf, &len, e)) == 1) {
		uint32_t idx;
		if (have_manifest) {
			r = dcr_err_set(e, DCR_EFORMAT, "pack: entry '%s' after the manifest", name);
			goto out;
		}
		if (!strcmp(name, DCR_MANIFEST_NAME)) {
			if ((r = dcr_manifest_parse(buf, len, name, &m, e)))
				goto out;
			have_manifest = 1;
			continue;
		}
		if (!dcr_payload_name_parse(name, &idx)) {
			r = dcr_err_set(e, DCR_EFORMAT, "pack: unexpected entry '%s'", name);
			goto out;
		}
		struct dcr_payload pl;
		if ((r = dcr_payload_open(buf, len, name, &pl, e)))
			goto out;
		if (pl.index != idx) {
			dcr_payload_release(&pl);
			r = dcr_err_set(e, DCR_EFORMAT, "%s holds payload %u", name, pl.index);
			goto out;
		}
		if (!have_base) {
			base = pl.base;
			memcpy(attempt, pl.attempt, 16);
			have_base = 1;
			mismatch = memcmp(cur.b, base.b, 32) != 0;
		} else if (memcmp(base.b, pl.base.b, 32) || memcmp(attempt, pl.attempt, 16)) {
			dcr_payload_release(&pl);
			r = dcr_err_set(e, DCR_EFORMAT, "%s belongs to another delta", name);
			goto out;
		}
		if (idx >= pcap) {
			size_t ncap = idx + 64;
			if (ncap > (1u << 24)) {
				dcr_payload_release(&pl);
				r = dcr_err_set(e, DCR_EFORMAT, "%s: index too large", name);
				goto out;
			}
			dcr_digest *d = realloc(pdig, ncap * sizeof(*d));
			uint8_t *sn = d ? realloc(pseen, ncap) : NULL;
			if (d)
				pdig = d;
			if (sn)
				pseen = sn;
			if (!d || !sn) {
				dcr_payload_release(&pl);
				r = dcr_err_sys(e, ENOMEM, "apply");
				goto out;
			}
			memset(pseen + pcap, 0, ncap - pcap);
			pcap = ncap;
		}
		if (pseen[idx]) {
			int same = !memcmp(pdig[idx].b, pl.digest.b, 32);
			dcr_payload_release(&pl);
			if (!same) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s arrived twice with different contents",
						name);
				goto out;
			}
			continue; /* a duplicate: already spooled */
		}
		pseen[idx] = 1;
		pdig[idx] = pl.digest;
		/* from another state than the base, XOR items cannot be resolved:
		 * they are left out and the delta is refused at the manifest,
		 * unless the receiver is at an alternative base (overwrites only) */
		r = spool_payload(&s, &pl, name, c, !mismatch, e);
		dcr_payload_release(&pl);
		if (r)
			goto out;
		step(&x); /* between payloads: nothing durable yet */
		got += len;
		if (o && o->progress)
			o->progress(o->progress_ctx, got >> 20, 0);
	}
	if (r < 0)
		goto out;
	if (!have_manifest) {
		r = dcr_err_set(e, DCR_EFORMAT, "pack stream ended without a manifest%s",
				have_base ? " (payloads were checked; nothing was written)" : "");
		goto out;
	}
	if (res) {
		res->base = m.base;
		res->target = m.target;
		memcpy(res->attempt, m.attempt, 16);
	}
	if (!memcmp(cur.b, m.target.b, 32)) {
		if (res)
			res->already = 1;
		r = 0;
		goto out;
	}
	if (have_base && (memcmp(base.b, m.base.b, 32) || memcmp(attempt, m.attempt, 16))) {
		r = dcr_err_set(e, DCR_EFORMAT, "pack: the manifest belongs to another delta than its payloads");
		goto out;
	}
	if ((r = plan_from_manifest(&p, &m, e)))
		goto out;
	if ((r = check_bases(&p, c, rc->dir, &cur, o ? o->head : NULL, s.xor_seen, e)))
		goto out;
	for (uint32_t i = 0; i < m.npayloads; i++) {
		char *pn = dcr_payload_name(i);
		if (i >= pcap || !pseen[i])
			r = dcr_err_set(e, DCR_EFORMAT, "pack is missing %s; nothing was written",
					pn ? pn : "a payload");
		else if (memcmp(pdig[i].b, m.pdigest[i].b, 32))
			r = dcr_err_set(e, DCR_EDIGEST, "%s does not match the manifest's digest",
					pn ? pn : "a payload");
		free(pn);
		if (r)
			goto out;
	}
	for (size_t i = m.npayloads; i < pcap; i++)
		if (pseen[i]) {
			r = dcr_err_set(e, DCR_EFORMAT, "pack: payload %zu is not in the manifest", i);
			goto out;
		}

	/* read the spool back: mark touched tensors, check items against the manifest */
	off_t sl = lseek(s.fd, 0, SEEK_END);
	if (sl < 0 || dcr_buf_reserve(&s.buf, (size_t)sl + 1) ||
	    dcr_pread_full(s.fd, s.buf.p, (size_t)sl, 0)) {
		r = dcr_err_sys(e, errno ? errno : EIO, "cannot read the spool");
		goto out;
	}
	s.buf.len = (size_t)sl;
	{
		char namebuf[65536];
		const char *nm;
		struct dcr_item it;
		while ((r = spool_read(&s, &nm, &it, namebuf, e)) == 1) {
			struct ptensor *pt = plan_find(&p, nm);
			if (!pt) {
				r = dcr_err_set(e, DCR_EFORMAT, "pack: item for '%s', which the manifest lacks",
						nm);
				goto out;
			}
			unsigned unit = dcr_dtype_unit(pt->t.dtype);
			uint64_t units = pt->t.nelem * dcr_dtype_bits(pt->t.dtype) / 8 / unit;
			if (it.start > units || it.len > units - it.start) {
				r = dcr_err_set(e, DCR_EFORMAT, "pack: item for '%s' runs past its end", nm);
				goto out;
			}
			pt->touched = 1;
		}
		if (r < 0)
			goto out;
		s.off = 0;
	}
	if (s.nitems != m.nitems || s.nchanges != m.nchanges) {
		r = dcr_err_set(e, DCR_EFORMAT,
				"pack: payloads hold %llu items, the manifest says %llu",
				(unsigned long long)s.nitems, (unsigned long long)m.nitems);
		goto out;
	}
	r = commit_plan(&x, &p, c, &cur, cur_dg, (struct item_src){spool_next, &s}, res, e);
out:
	if (s.fd >= 0)
		close(s.fd);
	unlink(sp);
	free(sp);
	dcr_buf_free(&s.rec);
	dcr_buf_free(&s.enc);
	dcr_buf_free(&s.buf);
	dcr_changes_free(&s.ch);
	free(pdig);
	free(pseen);
	free(cur_dg);
	dcr_manifest_release(&m);
	dcr_ckpt_close(c);
	plan_free(&p);
	return r;
}
