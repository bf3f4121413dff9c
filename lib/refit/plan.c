/* plan.c - the plan of an apply: a delta read and checked whole into the
 * target's tensors and the files it removes, and the receiver checked
 * against the delta's base (see apply.c for the whole protocol). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"
#include "core/state.h"
#include "core/util.h"
#include "refit/plan.h"

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
	for (size_t i = 0; i < p->ndfds; i++)
		close(p->dfds[i]);
	free(p->dfds);
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
	dcr_fault_point(x->o ? x->o->fault : NULL);
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
		uint64_t units = dcr_delta_tensor_units(&pt->t);
		if ((r = dcr_item_check_range(&it, units, "delta", pt->t.name, e)))
			return r;
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
	int r = dcr_delta_check_end(rd, p->n, p->nitems, p->nchanges, e);
	if (r)
		return r;
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
	if (r && journal && rd.version == 1)
		r = dcr_err_set(e, DCR_EFORMAT,
				"%s was written by an older dcr (version 1 tensor digests): finish the interrupted apply with that dcr-apply --recover first",
				what);
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

/* Open the receiver's checkpoint and its current state. */
int ap_current_state(struct dcr_receiver *rc, struct dcr_ckpt **c, dcr_digest *cur,
		     dcr_digest **cur_dg, struct dcr_err *e)
{
	int r = dcr_ckpt_open(rc->dir, c, e);
	if (!r)
		r = dcr_receiver_state(rc, *c, 1, cur, cur_dg, NULL, e);
	return r;
}
