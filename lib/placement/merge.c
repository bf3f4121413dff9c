/* merge.c - the merge of the ranks' partial deltas into one canonical
 * delta (see merge.h and dcr(7)). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file.h"
#include "core/state.h"
#include "core/summary.h"
#include "core/util.h"
#include "placement/lchg.h"
#include "placement/merge.h"

/* ---- merging partial deltas ---- */

struct min {
	const char *path;
	int fd;
	struct dcr_delta_reader rd;
	int inited;
	struct dcr_delta_rec rec; /* the next record, not yet consumed */
	int at_end;               /* rec is past END */
	uint32_t ntensors;        /* TENSOR records seen */
	uint64_t nitems, nchanges; /* ITEM records read, their changes */
	struct dcr_delta_tensor cur;
	int have_parts;           /* a PARTS record for cur came */
	int have_canon;           /* CANON: the layout's whole tensor set */
	uint32_t ncanon;
	dcr_digest canon;
};

static int min_advance(struct min *m, struct dcr_err *e)
{
	for (;;) {
		int q = dcr_delta_next(&m->rd, &m->rec, e);
		if (q < 0)
			return q;
		if (q == 0 || m->rec.type == DCR_REC_END) {
			m->at_end = 1;
			return dcr_delta_check_end(&m->rd, m->ntensors, m->nitems, m->nchanges, e);
		}
		if (m->rec.type == DCR_REC_PARTS)
			return 0;
		if (m->rec.type == DCR_REC_CANON) {
			if (m->have_canon)
				return dcr_err_set(e, DCR_EFORMAT, "%s: two CANON records", m->path);
			m->have_canon = 1;
			int r = dcr_delta_parse_canon(&m->rec, &m->ncanon, &m->canon, e);
			if (r)
				return r;
			continue;
		}
		if (m->rec.type >= DCR_REC_ANCILLARY)
			continue;
		if (m->rec.type == DCR_REC_TENSOR || m->rec.type == DCR_REC_ITEM)
			return 0;
		if (m->rec.type == DCR_REC_DONE)
			continue; /* a full input's digests: the output names its own */
		return dcr_err_set(e, DCR_EFORMAT, "%s: a layout merge takes only TENSOR and ITEM records (found type %u)",
				   m->path, m->rec.type);
	}
}

struct digests {
	char **name;
	dcr_digest *d;
	uint8_t *used;
	size_t n;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_digests(const char *path, struct digests *g, struct dcr_err *e)
{
	uint8_t *buf;
	size_t len;
	int r = dcr_read_file(path, (size_t)1 << 30, &buf, &len, e);
	if (r)
		return r;
	size_t cap = 0, lineno = 0;
	char **lines = NULL;
	for (char *s = (char *)buf, *nl; s < (char *)buf + len; s = nl + 1) {
		nl = strchr(s, '\n');
		if (!nl)
			nl = (char *)buf + len;
		*nl = 0;
		lineno++;
		if (!*s)
			continue;
		if (g->n == cap) {
			cap = cap ? cap * 2 : 256;
			char **nv = realloc(lines, cap * sizeof(*nv));
			if (!nv) {
				free(lines);
				free(buf);
				return dcr_err_sys(e, ENOMEM, "%s", path);
			}
			lines = nv;
		}
		if (strlen(s) < 66 || s[64] != '\t') {
			free(lines);
			free(buf);
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s:%zu: want 'HEX<TAB>NAME' (dcr-verify --tensors)", path,
					   lineno);
		}
		lines[g->n++] = s;
	}
	g->name = dcr_calloc(g->n + 1, sizeof(char *));
	g->d = dcr_calloc(g->n + 1, sizeof(dcr_digest));
	g->used = dcr_calloc(g->n + 1, 1);
	if (!g->name || !g->d || !g->used) {
		free(lines);
		free(buf);
		return dcr_err_sys(e, ENOMEM, "%s", path);
	}
	/* sort by name (the lines start with the digest) */
	char **byname = dcr_calloc(g->n + 1, sizeof(char *));
	if (!byname) {
		free(lines);
		free(buf);
		return dcr_err_sys(e, ENOMEM, "%s", path);
	}
	for (size_t i = 0; i < g->n; i++)
		byname[i] = lines[i] + 65;
	qsort(byname, g->n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < g->n; i++) {
		char *s = byname[i] - 65;
		s[64] = 0;
		g->name[i] = dcr_strdup(byname[i]);
		if (!g->name[i] || dcr_digest_parse_hex(s, &g->d[i]) ||
		    (i && !strcmp(byname[i - 1], byname[i]))) {
			r = g->name[i] ? dcr_err_set(e, DCR_EFORMAT, "%s: bad or repeated entry for '%s'",
						     path, byname[i])
				       : dcr_err_sys(e, ENOMEM, "%s", path);
			break;
		}
	}
	free(byname);
	free(lines);
	free(buf);
	return r;
}

static void digests_free(struct digests *g)
{
	for (size_t i = 0; g->name && i < g->n; i++) /* no names when loading failed early */
		free(g->name[i]);
	free(g->name);
	free(g->d);
	free(g->used);
}

static long digests_find(const struct digests *g, const char *name)
{
	size_t lo = 0, hi = g->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(g->name[mid], name);
		if (!c)
			return (long)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* What the merge's steps share: the options, the inputs, the target
 * digests and the state entries they give, the writer, and the buffers
 * reused from tensor to tensor. */
struct merge {
	const struct dcr_merge_opts *o;
	struct min *in;
	struct digests g;
	struct dcr_delta_writer w;
	struct lvec l;			/* the tensor's changes over all inputs */
	struct dcr_changes ch;		/* one item's changes */
	struct dcr_buf recs;		/* the tensor's item records */
	struct dcr_state_entry *ent;	/* the target's entries (full merge) */
	size_t nent, capent;
	char *cur_name;			/* the tensor being merged */
	int partial;
	int join;			/* target digests joined from the inputs' parts */
	struct dcr_parts parts;		/* the tensor's, over all inputs */
	uint64_t chunk, dups;
};

/* Load the target digests, open every input at its first record, and
 * start the output. */
static int merge_open(struct merge *mg, struct dcr_sink sink, struct dcr_err *e)
{
	const struct dcr_merge_opts *o = mg->o;
	int r;
	if (o->target_digests && !o->base_id)
		return dcr_err_set(e, -EINVAL, "target digests need the canonical base id");
	if (o->target_digests && (r = load_digests(o->target_digests, &mg->g, e)))
		return r;
	for (size_t i = 0; i < o->ninputs; i++) {
		struct min *m = &mg->in[i];
		m->path = o->inputs[i];
		m->fd = strcmp(o->inputs[i], "-") ? open(o->inputs[i], O_RDONLY | O_CLOEXEC) : 0;
		if (m->fd < 0)
			return dcr_err_sys(e, errno, "cannot open '%s'", o->inputs[i]);
		r = dcr_delta_reader_init_flags(&m->rd,
						(struct dcr_source){dcr_source_fd_read, &m->fd}, NULL,
						0, DCR_DELTA_PARTIAL, m->path, e);
		m->inited = 1;
		if (r || (r = min_advance(m, e)))
			return r;
	}
	uint8_t attempt[16];
	dcr_digest zero = {{0}};
	const dcr_digest *base = o->base_id ? o->base_id : &zero;
	/* ranks that named the canonical base (dcr-diff --layout --base-id)
	 * give digest parts that join into the target digests */
	if (!o->target_digests && o->ninputs) {
		mg->join = 1;
		for (size_t i = 0; i < o->ninputs; i++)
			if (!memcmp(mg->in[i].rd.base.b, zero.b, 32) ||
			    memcmp(mg->in[i].rd.base.b, mg->in[0].rd.base.b, 32))
				mg->join = 0;
		if (mg->join) {
			mg->partial = 0;
			base = &mg->in[0].rd.base;
		}
	}
	if ((r = dcr_attempt_id(o->attempt, attempt, e)))
		return r;
	return dcr_delta_writer_init_flags(&mg->w, sink, base, attempt,
					   mg->partial ? DCR_DELTA_PARTIAL : 0, o->what, e);
}

/* The smallest next tensor name over the inputs (a copy in mg->cur_name),
 * each input's TENSOR record parsed on the way; NULL when all are done. */
static int next_tensor(struct merge *mg, const char **pname, struct dcr_err *e)
{
	const char *name = NULL;
	int r;
	free(mg->cur_name);
	mg->cur_name = NULL;
	*pname = NULL;
	for (size_t i = 0; i < mg->o->ninputs; i++) {
		struct min *m = &mg->in[i];
		if (m->at_end)
			continue;
		if (m->rec.type != DCR_REC_TENSOR)
			return dcr_err_set(e, DCR_EFORMAT, "%s: an item before its tensor", m->path);
		if (!m->cur.name) {
			if ((r = dcr_delta_parse_tensor(&m->rec, &m->cur, e)))
				return r;
			if (m->cur.flags & DCR_TENSOR_NEW)
				return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s' is not in the base; a layout merge takes changes only",
						   m->path, m->cur.name);
			m->ntensors++;
		}
		if (!name || strcmp(m->cur.name, name) < 0)
			name = m->cur.name;
	}
	if (!name)
		return 0;
	if (!(mg->cur_name = dcr_strdup(name)))
		return dcr_err_sys(e, ENOMEM, "merge");
	*pname = mg->cur_name;
	return 0;
}

/* Input i's items for the tensor it is at, decoded onto mg->l with each
 * change keyed by its input; leaves the input at its next TENSOR or end. */
static int read_items(struct merge *mg, size_t i, const char *name, struct dcr_err *e)
{
	struct min *m = &mg->in[i];
	unsigned unit = dcr_dtype_unit(m->cur.dtype);
	uint64_t units = dcr_delta_tensor_units(&m->cur);
	int r;
	while (!(r = min_advance(m, e)) && !m->at_end &&
	       (m->rec.type == DCR_REC_ITEM || m->rec.type == DCR_REC_PARTS)) {
		if (m->rec.type == DCR_REC_PARTS) {
			uint32_t t;
			if ((r = dcr_delta_parse_parts(&m->rec, &t, &mg->parts.v, &mg->parts.n,
						       &mg->parts.cap, e)))
				return r;
			if (t != m->ntensors - 1)
				return dcr_err_set(e, DCR_EFORMAT, "%s: digest parts out of place for '%s'",
						   m->path, name);
			m->have_parts = 1;
			continue;
		}
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(&m->rec, &it, e)))
			return r;
		if (it.tensor != m->ntensors - 1 || it.start > units ||
		    it.len > units - it.start)
			return dcr_err_set(e, DCR_EFORMAT, "%s: item out of place for '%s'",
					   m->path, name);
		if ((r = dcr_item_decode(&it, unit, &mg->ch, e)))
			return r;
		m->nitems++;
		m->nchanges += it.n;
		for (size_t k = 0; k < mg->ch.n; k++) {
			struct lchg c = {.c = it.start + mg->ch.pos[k], .val = mg->ch.val[k],
					 .key = (uint32_t)i, .enc = it.enc};
			if (lvec_push(&mg->l, &c))
				return dcr_err_sys(e, ENOMEM, "merge");
		}
	}
	return r;
}

/* Every input at tensor name: its declaration checked against the first
 * one's (*pfirst), its changes gathered onto mg->l. */
static int gather_tensor(struct merge *mg, const char *name,
			 struct dcr_delta_tensor **pfirst, struct dcr_err *e)
{
	struct dcr_delta_tensor *first = NULL;
	size_t first_in = 0;
	int r;
	mg->l.n = 0;
	for (size_t i = 0; i < mg->parts.n; i++)
		dcr_blake3_part_free(&mg->parts.v[i]);
	mg->parts.n = 0;
	for (size_t i = 0; i < mg->o->ninputs; i++) {
		struct min *m = &mg->in[i];
		m->have_parts = 0;
		if (m->at_end || strcmp(m->cur.name, name))
			continue;
		if (!first) {
			first = &m->cur;
			first_in = i;
		} else if (first->dtype != m->cur.dtype || first->ndim != m->cur.ndim ||
			   memcmp(first->shape, m->cur.shape, first->ndim * sizeof(uint64_t)) ||
			   strcmp(first->file, m->cur.file)) {
			return dcr_err_set(e, DCR_EFORMAT, "%s and %s disagree on tensor '%s' (dtype, shape or file)",
					   mg->in[first_in].path, m->path, name);
		}
		if ((r = read_items(mg, i, name, e)))
			return r;
	}
	*pfirst = first;
	return 0;
}

/* The union of the tensor's changes, each element once (*pn of them, at
 * the front of mg->l, sorted); inputs that disagree on one are an error. */
static int union_changes(struct merge *mg, const char *name, size_t *pn, struct dcr_err *e)
{
	struct lvec *l = &mg->l;
	if (l->n > 1)
		qsort(l->v, l->n, sizeof(*l->v), lchg_cmp);
	size_t n = 0;
	for (size_t k = 0; k < l->n; k++) {
		if (n && l->v[n - 1].c == l->v[k].c) {
			if (l->v[n - 1].enc != l->v[k].enc || l->v[n - 1].val != l->v[k].val)
				return dcr_err_set(e, DCR_EFORMAT,
						   "%s and %s disagree on element %llu of '%s'",
						   mg->in[l->v[n - 1].key].path, mg->in[l->v[k].key].path,
						   (unsigned long long)l->v[k].c, name);
			mg->dups++;
			continue;
		}
		l->v[n++] = l->v[k];
	}
	*pn = n;
	return 0;
}

/* A full merge's tensor: its DONE record with the target digest (given,
 * or joined from the inputs' parts), and its entry for the target state
 * id. */
static int record_target(struct merge *mg, uint32_t out_idx, const char *name,
			 const struct dcr_delta_tensor *first, struct dcr_err *e)
{
	struct digests *g = &mg->g;
	int r;
	long k = -1;
	dcr_digest jd;
	const char *ename;
	if (mg->join) {
		struct dcr_stripes s;
		struct dcr_err e2;
		for (size_t i = 0; i < mg->o->ninputs; i++)
			if (mg->in[i].cur.name && !strcmp(mg->in[i].cur.name, name) &&
			    !mg->in[i].have_parts)
				return dcr_err_set(e, DCR_EFORMAT,
						   "%s has no digest parts for tensor '%s' (give --target-digests)",
						   mg->in[i].path, name);
		dcr_stripes_init(&s, first->dtype, first->ndim, first->shape);
		if ((r = dcr_blake3_join(mg->parts.v, mg->parts.n, s.nbytes, &jd, &e2)))
			return dcr_err_set(e, r, "tensor '%s': the ranks' digest parts do not cover it once: %s",
					   name, e2.msg);
		if (!(ename = dcr_strdup(name)))
			return dcr_err_sys(e, ENOMEM, "merge");
	} else {
		k = digests_find(g, name);
		if (k < 0)
			return dcr_err_set(e, DCR_EFORMAT, "%s has no digest for tensor '%s'",
					   mg->o->target_digests, name);
		g->used[k] = 1;
		jd = g->d[k];
		ename = g->name[k];
	}
	if ((r = dcr_delta_write_done(&mg->w, out_idx, &jd, e))) {
		if (mg->join)
			free((void *)ename);
		return r;
	}
	if (mg->nent == mg->capent) {
		mg->capent = mg->capent ? mg->capent * 2 : 256;
		void *ne = realloc(mg->ent, mg->capent * sizeof(*mg->ent));
		if (!ne) {
			if (mg->join)
				free((void *)ename);
			return dcr_err_sys(e, ENOMEM, "merge");
		}
		mg->ent = ne;
	}
	struct dcr_state_entry *en = &mg->ent[mg->nent];
	en->name = ename;
	en->dtype = first->dtype;
	en->ndim = first->ndim;
	en->shape = NULL; /* filled below: first is about to go */
	en->digest = jd;
	mg->nent++;
	uint64_t *shape = malloc((first->ndim + 1) * sizeof(uint64_t));
	if (!shape)
		return dcr_err_sys(e, ENOMEM, "merge");
	memcpy(shape, first->shape, first->ndim * sizeof(uint64_t));
	en->shape = shape;
	return 0;
}

/* Merge tensor name, output tensor out_idx: gather, unite, write its
 * items (and its DONE record), and move the inputs at it on. */
static int merge_tensor(struct merge *mg, uint32_t out_idx, const char *name,
			struct dcr_merge_stats *st, struct dcr_err *e)
{
	struct dcr_delta_tensor *first = NULL;
	size_t n = 0;
	int r;
	if ((r = gather_tensor(mg, name, &first, e)) ||
	    (r = union_changes(mg, name, &n, e)))
		return r;
	uint64_t nitems = 0;
	mg->recs.len = 0;
	if ((r = dcr_delta_write_tensor(&mg->w, first, e)) ||
	    (r = lchg_emit_items(&mg->recs, out_idx, mg->l.v, n, dcr_dtype_unit(first->dtype),
				 mg->chunk, &nitems, e)) ||
	    (r = dcr_delta_write_raw(&mg->w, mg->recs.p, mg->recs.len, nitems, n, e)))
		return r;
	if (!mg->partial && (r = record_target(mg, out_idx, name, first, e)))
		return r;
	/* the inputs at this tensor move on */
	for (size_t i = 0; i < mg->o->ninputs; i++)
		if (mg->in[i].cur.name && !strcmp(mg->in[i].cur.name, name))
			dcr_delta_tensor_clear(&mg->in[i].cur);
	if (st) {
		st->changed += n;
		st->items += nitems;
	}
	return 0;
}

/* The END record, with the target state id of a full merge (every target
 * digest used), and the totals. */
static int merge_finish(struct merge *mg, struct dcr_merge_stats *st, struct dcr_err *e)
{
	dcr_digest target = {{0}};
	int r;
	if (!mg->partial) {
		for (size_t k = 0; k < mg->g.n && !mg->join; k++)
			if (!mg->g.used[k])
				return dcr_err_set(e, DCR_EFORMAT, "%s names tensor '%s', which no input declares",
						   mg->o->target_digests, mg->g.name[k]);
		for (size_t i = 0; i < mg->o->ninputs && mg->join; i++) {
			const struct min *m = &mg->in[i], *m0 = &mg->in[0];
			dcr_digest set;
			if (!m->have_canon)
				return dcr_err_set(e, DCR_EFORMAT, "%s does not name its layout's tensors (give --target-digests)",
						   m->path);
			if (m->ncanon != m0->ncanon || memcmp(m->canon.b, m0->canon.b, 32))
				return dcr_err_set(e, DCR_EFORMAT, "%s and %s come from other layouts",
						   m0->path, m->path);
			dcr_tensor_set_id(mg->ent, mg->nent, &set);
			if (mg->nent != m0->ncanon || memcmp(set.b, m0->canon.b, 32))
				return dcr_err_set(e, DCR_EFORMAT,
						   "the inputs declare %zu of the layout's %u tensors: a rank's delta is missing",
						   mg->nent, m0->ncanon);
		}
		dcr_state_id(mg->ent, mg->nent, &target);
	}
	if ((r = dcr_delta_write_end(&mg->w, &target, e)))
		return r;
	if (st) {
		st->target = target;
		st->partial = mg->partial;
		st->tensors = mg->w.ntensors;
		st->duplicates = mg->dups;
		st->bytes_out = mg->w.bytes;
	}
	return 0;
}

int dcr_merge(const struct dcr_merge_opts *o, struct dcr_sink sink, struct dcr_merge_stats *st,
	      struct dcr_err *e)
{
	struct merge mg = {.o = o, .partial = !o->target_digests};
	int r = 0;
	mg.chunk = o->chunk_elems ? o->chunk_elems : (1u << 20);
	if (mg.chunk > DCR_ITEM_MAX_ELEMS)
		mg.chunk = DCR_ITEM_MAX_ELEMS;
	mg.in = dcr_calloc(o->ninputs + 1, sizeof(*mg.in));
	if (!mg.in)
		return dcr_err_sys(e, ENOMEM, "merge");
	if ((r = merge_open(&mg, sink, e)))
		goto out;
	for (uint32_t out_idx = 0;; out_idx++) {
		const char *name;
		if ((r = next_tensor(&mg, &name, e)))
			goto out;
		if (!name)
			break;
		if ((r = merge_tensor(&mg, out_idx, name, st, e)))
			goto out;
	}
	r = merge_finish(&mg, st, e);
out:
	for (size_t i = 0; i < o->ninputs; i++) {
		if (mg.in[i].inited)
			dcr_delta_reader_release(&mg.in[i].rd);
		dcr_delta_tensor_clear(&mg.in[i].cur);
		if (mg.in[i].fd > 0)
			close(mg.in[i].fd);
	}
	free(mg.in);
	free(mg.cur_name);
	for (size_t k = 0; k < mg.nent; k++) {
		free((void *)mg.ent[k].shape);
		if (mg.join)
			free((void *)mg.ent[k].name);
	}
	dcr_parts_free(&mg.parts);
	free(mg.ent);
	digests_free(&mg.g);
	lvec_free(&mg.l);
	dcr_changes_free(&mg.ch);
	dcr_buf_free(&mg.recs);
	dcr_delta_writer_release(&mg.w);
	return r;
}
