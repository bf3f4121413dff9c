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
	struct dcr_delta_tensor cur;
};

static int min_advance(struct min *m, struct dcr_err *e)
{
	for (;;) {
		int q = dcr_delta_next(&m->rd, &m->rec, e);
		if (q < 0)
			return q;
		if (q == 0 || m->rec.type == DCR_REC_END) {
			m->at_end = 1;
			return 0;
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
	for (size_t i = 0; i < g->n; i++)
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

int dcr_merge(const struct dcr_merge_opts *o, struct dcr_sink sink, struct dcr_merge_stats *st,
	      struct dcr_err *e)
{
	struct min *in = dcr_calloc(o->ninputs + 1, sizeof(*in));
	struct digests g = {0};
	struct dcr_delta_writer w = {0};
	struct lvec l = {0};
	struct dcr_changes ch = {0};
	struct dcr_buf recs = {0};
	struct dcr_state_entry *ent = NULL;
	size_t nent = 0, capent = 0;
	char *cur_name = NULL;
	int r = 0, partial = !o->target_digests;
	uint64_t chunk = o->chunk_elems ? o->chunk_elems : (1u << 20), dups = 0;
	if (chunk > DCR_ITEM_MAX_ELEMS)
		chunk = DCR_ITEM_MAX_ELEMS;
	if (!in)
		return dcr_err_sys(e, ENOMEM, "merge");
	if (o->target_digests && !o->base_id) {
		r = dcr_err_set(e, -EINVAL, "target digests need the canonical base id");
		goto out;
	}
	if (o->target_digests && (r = load_digests(o->target_digests, &g, e)))
		goto out;
	for (size_t i = 0; i < o->ninputs; i++) {
		in[i].path = o->inputs[i];
		in[i].fd = strcmp(o->inputs[i], "-") ? open(o->inputs[i], O_RDONLY | O_CLOEXEC) : 0;
		if (in[i].fd < 0) {
			r = dcr_err_sys(e, errno, "cannot open '%s'", o->inputs[i]);
			goto out;
		}
		r = dcr_delta_reader_init_flags(&in[i].rd,
						(struct dcr_source){dcr_source_fd_read, &in[i].fd}, NULL,
						0, DCR_DELTA_PARTIAL, in[i].path, e);
		in[i].inited = 1;
		if (r || (r = min_advance(&in[i], e)))
			goto out;
	}
	uint8_t attempt[16];
	dcr_digest zero = {{0}};
	if ((r = dcr_attempt_id(o->attempt, attempt, e)) ||
	    (r = dcr_delta_writer_init_flags(&w, sink, o->base_id ? o->base_id : &zero, attempt,
					     partial ? DCR_DELTA_PARTIAL : 0, o->what, e)))
		goto out;
	for (uint32_t out_idx = 0;; out_idx++) {
		/* the smallest next tensor name over the inputs */
		const char *name = NULL;
		free(cur_name);
		cur_name = NULL;
		for (size_t i = 0; i < o->ninputs; i++) {
			struct min *m = &in[i];
			if (m->at_end)
				continue;
			if (m->rec.type != DCR_REC_TENSOR) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s: an item before its tensor", m->path);
				goto out;
			}
			if (!m->cur.name) {
				if ((r = dcr_delta_parse_tensor(&m->rec, &m->cur, e)))
					goto out;
				if (m->cur.flags & DCR_TENSOR_NEW) {
					r = dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s' is not in the base; a layout merge takes changes only",
							m->path, m->cur.name);
					goto out;
				}
				m->ntensors++;
			}
			if (!name || strcmp(m->cur.name, name) < 0)
				name = m->cur.name;
		}
		if (!name)
			break;
		if (!(cur_name = dcr_strdup(name))) {
			r = dcr_err_sys(e, ENOMEM, "merge");
			goto out;
		}
		name = cur_name;
		struct dcr_delta_tensor *first = NULL;
		size_t first_in = 0;
		l.n = 0;
		for (size_t i = 0; i < o->ninputs; i++) {
			struct min *m = &in[i];
			if (m->at_end || strcmp(m->cur.name, name))
				continue;
			if (!first) {
				first = &m->cur;
				first_in = i;
			} else if (first->dtype != m->cur.dtype || first->ndim != m->cur.ndim ||
				   memcmp(first->shape, m->cur.shape, first->ndim * sizeof(uint64_t)) ||
				   strcmp(first->file, m->cur.file)) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s and %s disagree on tensor '%s' (dtype, shape or file)",
						in[first_in].path, m->path, name);
				goto out;
			}
			unsigned unit = dcr_dtype_unit(m->cur.dtype);
			uint64_t units = m->cur.nelem * dcr_dtype_bits(m->cur.dtype) / 8 / unit;
			/* its items */
			while (!(r = min_advance(m, e)) && !m->at_end && m->rec.type == DCR_REC_ITEM) {
				struct dcr_item it;
				if ((r = dcr_delta_parse_item(&m->rec, &it, e)))
					goto out;
				if (it.tensor != m->ntensors - 1 || it.start > units ||
				    it.len > units - it.start) {
					r = dcr_err_set(e, DCR_EFORMAT, "%s: item out of place for '%s'",
							m->path, name);
					goto out;
				}
				if ((r = dcr_item_decode(&it, unit, &ch, e)))
					goto out;
				for (size_t k = 0; k < ch.n; k++) {
					struct lchg c = {.c = it.start + ch.pos[k], .val = ch.val[k],
							 .key = (uint32_t)i, .enc = it.enc};
					if (lvec_push(&l, &c)) {
						r = dcr_err_sys(e, ENOMEM, "merge");
						goto out;
					}
				}
			}
			if (r)
				goto out;
		}
		/* union, each element once */
		if (l.n > 1)
			qsort(l.v, l.n, sizeof(*l.v), lchg_cmp);
		size_t n = 0;
		for (size_t k = 0; k < l.n; k++) {
			if (n && l.v[n - 1].c == l.v[k].c) {
				if (l.v[n - 1].enc != l.v[k].enc || l.v[n - 1].val != l.v[k].val) {
					r = dcr_err_set(e, DCR_EFORMAT,
							"%s and %s disagree on element %llu of '%s'",
							in[l.v[n - 1].key].path, in[l.v[k].key].path,
							(unsigned long long)l.v[k].c, name);
					goto out;
				}
				dups++;
				continue;
			}
			l.v[n++] = l.v[k];
		}
		uint64_t nitems = 0;
		recs.len = 0;
		if ((r = dcr_delta_write_tensor(&w, first, e)) ||
		    (r = lchg_emit_items(&recs, out_idx, l.v, n, dcr_dtype_unit(first->dtype), chunk,
				    &nitems, e)) ||
		    (r = dcr_delta_write_raw(&w, recs.p, recs.len, nitems, n, e)))
			goto out;
		if (!partial) {
			long k = digests_find(&g, name);
			if (k < 0) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s has no digest for tensor '%s'",
						o->target_digests, name);
				goto out;
			}
			g.used[k] = 1;
			if ((r = dcr_delta_write_done(&w, out_idx, &g.d[k], e)))
				goto out;
			if (nent == capent) {
				capent = capent ? capent * 2 : 256;
				void *ne = realloc(ent, capent * sizeof(*ent));
				if (!ne) {
					r = dcr_err_sys(e, ENOMEM, "merge");
					goto out;
				}
				ent = ne;
			}
			ent[nent].name = g.name[k];
			ent[nent].dtype = first->dtype;
			ent[nent].ndim = first->ndim;
			ent[nent].shape = NULL; /* filled below: first is about to go */
			ent[nent].digest = g.d[k];
			uint64_t *shape = malloc((first->ndim + 1) * sizeof(uint64_t));
			if (!shape) {
				r = dcr_err_sys(e, ENOMEM, "merge");
				goto out;
			}
			memcpy(shape, first->shape, first->ndim * sizeof(uint64_t));
			ent[nent++].shape = shape;
		}
		/* the inputs at this tensor move on */
		for (size_t i = 0; i < o->ninputs; i++)
			if (in[i].cur.name && !strcmp(in[i].cur.name, name))
				dcr_delta_tensor_clear(&in[i].cur);
		if (st) {
			st->changed += n;
			st->items += nitems;
		}
	}
	dcr_digest target = zero;
	if (!partial) {
		for (size_t k = 0; k < g.n; k++)
			if (!g.used[k]) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s names tensor '%s', which no input declares",
						o->target_digests, g.name[k]);
				goto out;
			}
		dcr_state_id(ent, nent, &target);
	}
	if ((r = dcr_delta_write_end(&w, &target, e)))
		goto out;
	if (st) {
		st->target = target;
		st->partial = partial;
		st->tensors = w.ntensors;
		st->duplicates = dups;
		st->bytes_out = w.bytes;
	}
out:
	for (size_t i = 0; i < o->ninputs; i++) {
		if (in[i].inited)
			dcr_delta_reader_release(&in[i].rd);
		dcr_delta_tensor_clear(&in[i].cur);
		if (in[i].fd > 0)
			close(in[i].fd);
	}
	free(in);
	free(cur_name);
	for (size_t k = 0; k < nent; k++)
		free((void *)ent[k].shape);
	free(ent);
	digests_free(&g);
	lvec_free(&l);
	dcr_changes_free(&ch);
	dcr_buf_free(&recs);
	dcr_delta_writer_release(&w);
	return r;
}
