/* summary.c - producers' summaries, and the manifest they join into (see
 * summary.h and dcr-format-pack(5), PRODUCERS). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blake3.h"
#include "core/bytes.h"
#include "core/summary.h"
#include "core/util.h"

char *dcr_summary_name(uint32_t producer)
{
	return dcr_asprintf("summary-%06u.dcrs", producer);
}

int dcr_summary_name_parse(const char *name, uint32_t *producer)
{
	uint64_t v;
	if (!dcr_numbered_name_parse(name, "summary-", ".dcrs", DCR_PRODUCERS_MAX - 1, &v))
		return 0;
	*producer = (uint32_t)v;
	return 1;
}

void dcr_tensor_set_id(const struct dcr_state_entry *ent, size_t n, dcr_digest *out)
{
	dcr_state_hash_entries("dcr-tensors-v1\n", ent, n, 0, out);
}

/* ---- building ---- */

int dcr_summary_build(const struct dcr_summary *s, struct dcr_buf *out, struct dcr_err *e)
{
	struct dcr_buf tb = {0};
	int r = dcr_buf_add(out, DCR_SUMMARY_MAGIC, 8) ||
		dcr_buf_add_le32(out, DCR_SUMMARY_VERSION) || dcr_buf_add_le32(out, 0) ||
		dcr_buf_add(out, s->base.b, 32) || dcr_buf_add(out, s->attempt, 16) ||
		dcr_buf_add_le32(out, s->producer) || dcr_buf_add_le32(out, s->nproducers) ||
		dcr_buf_add_le32(out, s->ncanon) || dcr_buf_add(out, s->canon.b, 32) ||
		dcr_buf_add_le32(out, s->npayloads);
	for (uint32_t i = 0; i < s->npayloads && !r; i++)
		r = dcr_buf_add_le32(out, s->pindex[i]) || dcr_buf_add_le64(out, s->psize[i]) ||
		    dcr_buf_add(out, s->pdigest[i].b, 32);
	r = r || dcr_buf_add_le32(out, s->piece_log2) ||
	    dcr_buf_add(out, s->pieces, s->npieces * 32) || dcr_buf_add_le32(out, s->ntensors);
	for (uint32_t i = 0; i < s->ntensors && !r; i++) {
		const struct dcr_summary_tensor *st = &s->tensors[i];
		tb.len = 0;
		r = dcr_delta_tensor_body(&tb, &st->t) || dcr_buf_add_varint(out, tb.len) ||
		    dcr_buf_add(out, tb.p, tb.len) || st->parts.n > UINT32_MAX ||
		    dcr_buf_add_le32(out, (uint32_t)st->parts.n);
		for (size_t k = 0; k < st->parts.n && !r; k++)
			r = dcr_blake3_part_encode(&st->parts.v[k], out);
	}
	r = r || dcr_buf_add_le64(out, s->nitems) || dcr_buf_add_le64(out, s->nchanges);
	dcr_buf_free(&tb);
	if (r || dcr_buf_reserve(out, 32))
		return dcr_err_sys(e, ENOMEM, "summary");
	if (out->len + 32 > DCR_SUMMARY_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "summary: %zu bytes, more than a summary may hold",
				   out->len);
	dcr_digest d;
	dcr_blake3(out->p, out->len, &d);
	dcr_buf_add(out, d.b, 32);
	return 0;
}

static int part_cmp(const void *x, const void *y)
{
	const struct dcr_blake3_part *p = *(const struct dcr_blake3_part *const *)x;
	const struct dcr_blake3_part *q = *(const struct dcr_blake3_part *const *)y;
	return p->a < q->a ? -1 : p->a > q->a ? 1 : p->b < q->b ? -1 : p->b > q->b;
}

static int same_part(const struct dcr_blake3_part *p, const struct dcr_blake3_part *q)
{
	return p->a == q->a && p->b == q->b && p->n == q->n && p->head_len == q->head_len &&
	       p->tail_len == q->tail_len && p->nnodes == q->nnodes &&
	       !memcmp(p->bytes, q->bytes, p->head_len + p->tail_len) &&
	       (!p->nnodes || !memcmp(p->node, q->node, p->nnodes * sizeof(*p->node)));
}

/* The parts of x and y, each sorted by range, pairwise the same. */
static int same_parts(const struct dcr_parts *x, const struct dcr_parts *y)
{
	if (x->n != y->n)
		return 0;
	if (!x->n)
		return 1;
	const struct dcr_blake3_part **sx = malloc(x->n * sizeof(*sx));
	const struct dcr_blake3_part **sy = malloc(y->n * sizeof(*sy));
	int same = sx && sy;
	for (size_t i = 0; same && i < x->n; i++) {
		sx[i] = &x->v[i];
		sy[i] = &y->v[i];
	}
	if (same) {
		qsort(sx, x->n, sizeof(*sx), part_cmp);
		qsort(sy, y->n, sizeof(*sy), part_cmp);
	}
	for (size_t i = 0; same && i < x->n; i++)
		same = same_part(sx[i], sy[i]);
	free(sx);
	free(sy);
	return same;
}

int dcr_summary_same_share(const struct dcr_summary *a, const struct dcr_summary *b)
{
	if (memcmp(&a->base, &b->base, sizeof(a->base)) || a->producer != b->producer ||
	    a->nproducers != b->nproducers || a->ncanon != b->ncanon ||
	    memcmp(&a->canon, &b->canon, sizeof(a->canon)) || a->ntensors != b->ntensors ||
	    a->nchanges != b->nchanges)
		return 0;
	for (uint32_t i = 0; i < a->ntensors; i++) {
		const struct dcr_delta_tensor *p = &a->tensors[i].t, *q = &b->tensors[i].t;
		if (strcmp(p->name, q->name) || !p->file != !q->file ||
		    (p->file && strcmp(p->file, q->file)) || p->dtype != q->dtype || p->ndim != q->ndim ||
		    p->nelem != q->nelem || p->flags != q->flags ||
		    memcmp(p->shape, q->shape, p->ndim * sizeof(p->shape[0])) ||
		    p->have_digest != q->have_digest ||
		    (p->have_digest && memcmp(&p->digest, &q->digest, sizeof(p->digest))) ||
		    !same_parts(&a->tensors[i].parts, &b->tensors[i].parts))
			return 0;
	}
	return 1;
}

void dcr_summary_release(struct dcr_summary *s)
{
	free(s->pindex);
	free(s->psize);
	free(s->pdigest);
	free(s->pieces);
	for (uint32_t i = 0; s->tensors && i < s->ntensors; i++) {
		dcr_delta_tensor_clear(&s->tensors[i].t);
		dcr_parts_free(&s->tensors[i].parts);
	}
	free(s->tensors);
	memset(s, 0, sizeof(*s));
}

/* ---- parsing (hostile input) ---- */

static int parse_tensors(struct dcr_rd *rd, struct dcr_summary *s, const char *what,
			 struct dcr_err *e)
{
	uint32_t nt = dcr_rd_le32(rd);
	/* an entry is at least a body length, a body of a name and a dtype,
	 * and a part count */
	if (rd->bad || nt > dcr_rd_left(rd) / 8 || nt > DCR_DELTA_TENSORS_MAX)
		return 1;
	if (!(s->tensors = dcr_calloc(nt ? nt : 1, sizeof(*s->tensors))))
		return -ENOMEM;
	uint64_t names = 0; /* the bodies' bytes, within a delta's bound */
	for (uint32_t i = 0; i < nt; i++) {
		struct dcr_summary_tensor *st = &s->tensors[i];
		uint64_t bl = dcr_rd_varint(rd);
		if (rd->bad || dcr_delta_names_take(&names, bl))
			return 1;
		const uint8_t *body = bl > dcr_rd_left(rd) ? NULL : dcr_rd_bytes(rd, bl);
		if (!body)
			return 1;
		struct dcr_delta_rec rec = {.type = DCR_REC_TENSOR, .len = bl, .body = body};
		if (dcr_delta_parse_tensor(&rec, &st->t, e))
			return 1;
		s->ntensors = i + 1;
		if (i && strcmp(s->tensors[i - 1].t.name, st->t.name) >= 0)
			return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s' is out of order", what,
					   st->t.name);
		struct dcr_stripes ss;
		dcr_stripes_init(&ss, st->t.dtype, st->t.ndim, st->t.shape);
		uint32_t np = dcr_rd_le32(rd);
		if (rd->bad || np > dcr_rd_left(rd) / 24)
			return 1;
		if (np && !(st->parts.v = dcr_calloc(np, sizeof(*st->parts.v))))
			return -ENOMEM;
		st->parts.cap = np;
		for (uint32_t k = 0; k < np; k++) {
			size_t used;
			struct dcr_blake3_part *p = &st->parts.v[k];
			struct dcr_err e2;
			if (dcr_blake3_part_decode(rd->p, dcr_rd_left(rd), &used, p, &e2))
				return dcr_err_set(e, DCR_EFORMAT, "%s: tensor '%s': %s", what,
						   st->t.name, e2.msg);
			st->parts.n = k + 1;
			dcr_rd_bytes(rd, used);
			if (p->n != ss.nbytes)
				return dcr_err_set(e, DCR_EFORMAT,
						   "%s: tensor '%s': a digest part of a %llu-byte stream, not %llu",
						   what, st->t.name, (unsigned long long)p->n,
						   (unsigned long long)ss.nbytes);
		}
	}
	return 0;
}

static int parse_summary(const uint8_t *buf, size_t len, const char *what,
			 struct dcr_summary *s, struct dcr_err *e)
{
	if (len < DCR_SUMMARY_HDR_LEN + 4 + 4 + 16 + 32 || memcmp(buf, DCR_SUMMARY_MAGIC, 8))
		return dcr_err_set(e, DCR_EFORMAT, "%s is not a dcr producer summary", what);
	if (len > DCR_SUMMARY_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "%s: %zu bytes, more than a summary may hold",
				   what, len);
	if (get_le32(buf + 8) > DCR_SUMMARY_VERSION)
		return dcr_err_version(e, what, "summary", get_le32(buf + 8), DCR_SUMMARY_VERSION);
	dcr_digest d;
	dcr_blake3(buf, len - 32, &d);
	if (DCR_CHECKSUM_DIFFERS(d.b, buf + len - 32))
		return dcr_err_set(e, DCR_EDIGEST, "%s is corrupt: checksum mismatch", what);
	struct dcr_rd rd;
	dcr_rd_init(&rd, buf + 8, len - 8 - 32);
	uint32_t version = dcr_rd_le32(&rd), flags = dcr_rd_le32(&rd);
	if (version != DCR_SUMMARY_VERSION)
		return dcr_err_version(e, what, "summary", version, DCR_SUMMARY_VERSION);
	if (flags)
		return dcr_err_set(e, DCR_EFORMAT, "%s: unknown summary flags 0x%x", what, flags);
	memcpy(s->base.b, dcr_rd_bytes(&rd, 32), 32);
	memcpy(s->attempt, dcr_rd_bytes(&rd, 16), 16);
	s->producer = dcr_rd_le32(&rd);
	s->nproducers = dcr_rd_le32(&rd);
	if (!s->nproducers || s->nproducers > DCR_PRODUCERS_MAX || s->producer >= s->nproducers)
		return dcr_err_set(e, DCR_EFORMAT, "%s: producer %u of %u", what, s->producer,
				   s->nproducers);
	s->ncanon = dcr_rd_le32(&rd);
	memcpy(s->canon.b, dcr_rd_bytes(&rd, 32), 32);
	int r;
	s->npayloads = dcr_rd_le32(&rd);
	if (rd.bad || s->npayloads > dcr_rd_left(&rd) / 44 || s->npayloads > DCR_PRODUCER_STRIDE)
		goto bad;
	s->pindex = dcr_calloc(s->npayloads + 1, sizeof(*s->pindex));
	s->psize = dcr_calloc(s->npayloads + 1, sizeof(*s->psize));
	s->pdigest = dcr_calloc(s->npayloads + 1, sizeof(*s->pdigest));
	if (!s->pindex || !s->psize || !s->pdigest)
		goto oom;
	size_t total = 0;
	for (uint32_t i = 0; i < s->npayloads; i++) {
		s->pindex[i] = dcr_rd_le32(&rd);
		s->psize[i] = dcr_rd_le64(&rd);
		memcpy(s->pdigest[i].b, dcr_rd_bytes(&rd, 32), 32);
		if (s->pindex[i] != dcr_producer_index(s->producer, i))
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s: payload %u of producer %u has index %u, not %u", what, i,
					   s->producer, s->pindex[i],
					   dcr_producer_index(s->producer, i));
		if (s->psize[i] < DCR_PAYLOAD_HDR_LEN + 32 || s->psize[i] > DCR_PAYLOAD_MAX_FILE)
			return dcr_err_set(e, DCR_EFORMAT, "%s: payload %u is %llu bytes", what,
					   s->pindex[i], (unsigned long long)s->psize[i]);
	}
	s->piece_log2 = dcr_rd_le32(&rd);
	if (rd.bad || (s->piece_log2 && (s->piece_log2 < 10 || s->piece_log2 > 30)))
		goto bad;
	for (uint32_t i = 0; s->piece_log2 && i < s->npayloads; i++) {
		total += dcr_blake3_npieces(s->psize[i] - 32, s->piece_log2);
		if (total > dcr_rd_left(&rd) / 32)
			goto bad;
	}
	if (!(s->pieces = dcr_calloc(total ? total : 1, 32)))
		goto oom;
	if (total)
		memcpy(s->pieces, dcr_rd_bytes(&rd, total * 32), total * 32);
	s->npieces = total;
	for (uint32_t i = 0, at = 0; s->piece_log2 && i < s->npayloads; i++) {
		size_t k = dcr_blake3_npieces(s->psize[i] - 32, s->piece_log2);
		dcr_digest root;
		dcr_blake3_root_of_pieces((const uint8_t(*)[32])s->pieces + at, k, &root);
		at += k;
		if (DCR_CHECKSUM_DIFFERS(root.b, s->pdigest[i].b))
			return dcr_err_set(e, DCR_EDIGEST,
					   "%s is corrupt: the pieces of payload %u do not add up to its digest",
					   what, s->pindex[i]);
	}
	if ((r = parse_tensors(&rd, s, what, e)) == -ENOMEM)
		goto oom;
	if (r < 0)
		return r;
	if (r)
		goto bad;
	s->nitems = dcr_rd_le64(&rd);
	s->nchanges = dcr_rd_le64(&rd);
	if (rd.bad || dcr_rd_left(&rd))
		goto bad;
	return 0;
bad:
	return dcr_err_set(e, DCR_EFORMAT, "%s is malformed", what);
oom:
	return dcr_err_sys(e, ENOMEM, "%s", what);
}

int dcr_summary_parse(const uint8_t *buf, size_t len, const char *what, struct dcr_summary *s,
		      struct dcr_err *e)
{
	memset(s, 0, sizeof(*s));
	int r = parse_summary(buf, len, what, s, e);
	if (r)
		dcr_summary_release(s);
	return r;
}

/* ---- joining ---- */

struct tref {
	const struct dcr_summary_tensor *t;
	uint32_t producer;
};

static int cmp_tref(const void *x, const void *y)
{
	const struct tref *a = x, *b = y;
	int c = strcmp(a->t->t.name, b->t->t.name);
	return c ? c : (a->producer > b->producer) - (a->producer < b->producer);
}

struct pref {
	const struct dcr_blake3_part *p;
	uint32_t producer;
};

static int cmp_pref(const void *x, const void *y)
{
	const struct pref *a = x, *b = y;
	return (a->p->a > b->p->a) - (a->p->a < b->p->a);
}

static int same_tensor(const struct dcr_delta_tensor *a, const struct dcr_delta_tensor *b)
{
	return !strcmp(a->file, b->file) && a->flags == b->flags && a->dtype == b->dtype &&
	       a->ndim == b->ndim && !memcmp(a->shape, b->shape, a->ndim * sizeof(uint64_t));
}

/* Where stream byte off of a tensor lies, for messages. */
static void where(const struct dcr_delta_tensor *t, uint64_t off, char *buf, size_t len)
{
	struct dcr_stripes s;
	uint64_t run;
	dcr_stripes_init(&s, t->dtype, t->ndim, t->shape);
	uint64_t at = dcr_stripes_map(&s, off, &run);
	if (!s.esize)
		snprintf(buf, len, "byte %llu", (unsigned long long)at);
	else if (t->ndim >= 2)
		snprintf(buf, len, "row %llu, column %llu", (unsigned long long)(at / s.pitch),
			 (unsigned long long)(at % s.pitch / s.esize));
	else
		snprintf(buf, len, "element %llu", (unsigned long long)(at / s.esize));
}

/* One tensor's parts from every producer that holds it: each stream byte
 * claimed once, then joined. */
static int join_tensor(const struct tref *g, size_t ng, const char *const *names,
		       dcr_digest *out, struct dcr_err *e)
{
	const struct dcr_delta_tensor *t = &g[0].t->t;
	size_t np = 0;
	for (size_t i = 0; i < ng; i++)
		np += g[i].t->parts.n;
	struct pref *pv = dcr_calloc(np + 1, sizeof(*pv));
	struct dcr_blake3_part *flat = dcr_calloc(np + 1, sizeof(*flat));
	int r = 0;
	if (!pv || !flat) {
		r = dcr_err_sys(e, ENOMEM, "join");
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < ng; i++)
		for (size_t j = 0; j < g[i].t->parts.n; j++)
			if (g[i].t->parts.v[j].a < g[i].t->parts.v[j].b)
				pv[k++] = (struct pref){&g[i].t->parts.v[j], g[i].producer};
	qsort(pv, k, sizeof(*pv), cmp_pref);
	struct dcr_stripes s;
	dcr_stripes_init(&s, t->dtype, t->ndim, t->shape);
	uint64_t at = 0;
	char loc[96];
	for (size_t i = 0; i <= k; i++) {
		uint64_t a = i < k ? pv[i].p->a : s.nbytes;
		if (a > at) {
			where(t, at, loc, sizeof(loc));
			r = dcr_err_set(e, DCR_EFORMAT,
					"tensor '%s': no producer holds %s (stripe-stream bytes [%llu, %llu) uncovered): a summary is missing or a producer left elements out",
					t->name, loc, (unsigned long long)at, (unsigned long long)a);
			goto out;
		}
		if (i == k)
			break;
		if (a < at) {
			uint32_t other = pv[i - 1].producer;
			where(t, a, loc, sizeof(loc));
			r = dcr_err_set(e, DCR_EFORMAT,
					"tensor '%s': %s and %s both claim %s (stripe-stream bytes [%llu, %llu)): each element must come from one producer",
					t->name, names[other], names[pv[i].producer], loc,
					(unsigned long long)a,
					(unsigned long long)(pv[i].p->b < at ? pv[i].p->b : at));
			goto out;
		}
		at = pv[i].p->b;
		flat[i] = *pv[i].p;
	}
	struct dcr_err e2;
	if ((r = dcr_blake3_join(flat, k, s.nbytes, out, &e2)))
		r = dcr_err_set(e, r, "tensor '%s': %s", t->name, e2.msg);
out:
	free(pv);
	free(flat);
	return r;
}

static int join_payloads(const struct dcr_summary *v, uint32_t n, struct dcr_manifest *m,
			 struct dcr_err *e)
{
	uint64_t np = 0, npieces = 0;
	int pieces = 1;
	for (uint32_t r = 0; r < n; r++) {
		np += v[r].npayloads;
		npieces += v[r].npieces;
		if (v[r].npayloads && v[r].piece_log2 != DCR_PIECE_LOG2)
			pieces = 0; /* a manifest lists pieces for all payloads or none */
	}
	if (np > UINT32_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "too many payloads");
	m->npayloads = (uint32_t)np;
	m->psize = dcr_calloc(np + 1, sizeof(*m->psize));
	m->pdigest = dcr_calloc(np + 1, sizeof(*m->pdigest));
	m->pindex = dcr_calloc(np + 1, sizeof(*m->pindex));
	if (pieces && npieces)
		m->pieces = dcr_calloc(npieces, 32);
	if (!m->psize || !m->pdigest || !m->pindex || (pieces && npieces && !m->pieces))
		return dcr_err_sys(e, ENOMEM, "join");
	size_t at = 0, pat = 0;
	for (uint32_t r = 0; r < n; r++) {
		for (uint32_t i = 0; i < v[r].npayloads; i++, at++) {
			m->psize[at] = v[r].psize[i];
			m->pdigest[at] = v[r].pdigest[i];
			m->pindex[at] = v[r].pindex[i];
		}
		if (pieces && v[r].npayloads) {
			memcpy(m->pieces + pat, v[r].pieces, v[r].npieces * 32);
			pat += v[r].npieces;
		}
	}
	if (pieces && npieces) {
		m->npieces = npieces;
		m->piece_log2 = DCR_PIECE_LOG2;
	}
	return 0;
}

int dcr_summaries_join(const struct dcr_summary *v, const char *const *names, uint32_t n,
		       struct dcr_manifest *m, struct dcr_err *e)
{
	memset(m, 0, sizeof(*m));
	if (!n)
		return dcr_err_set(e, -EINVAL, "no producers");
	size_t nt = 0;
	for (uint32_t r = 0; r < n; r++) {
		if (v[r].producer != r || v[r].nproducers != n)
			return dcr_err_set(e, DCR_EFORMAT, "%s is producer %u of %u, not %u of %u",
					   names[r], v[r].producer, v[r].nproducers, r, n);
		if (memcmp(v[r].base.b, v[0].base.b, 32) || memcmp(v[r].attempt, v[0].attempt, 16))
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s belongs to another delta than %s (another base or attempt: a summary of another version)",
					   names[r], names[0]);
		if (v[r].ncanon != v[0].ncanon || memcmp(v[r].canon.b, v[0].canon.b, 32))
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s and %s come from other layouts (their sets of canonical tensors differ)",
					   names[0], names[r]);
		nt += v[r].ntensors;
	}
	struct tref *tv = dcr_calloc(nt + 1, sizeof(*tv));
	struct dcr_state_entry *ent = NULL;
	int rc = 0;
	if (!tv)
		return dcr_err_sys(e, ENOMEM, "join");
	size_t k = 0;
	for (uint32_t r = 0; r < n; r++)
		for (uint32_t i = 0; i < v[r].ntensors; i++)
			tv[k++] = (struct tref){&v[r].tensors[i], r};
	qsort(tv, nt, sizeof(*tv), cmp_tref);
	size_t ndistinct = 0;
	for (size_t i = 0; i < nt; i++)
		ndistinct += !i || strcmp(tv[i - 1].t->t.name, tv[i].t->t.name);
	m->base = v[0].base;
	memcpy(m->attempt, v[0].attempt, 16);
	m->tensors = dcr_calloc(ndistinct + 1, sizeof(*m->tensors));
	ent = dcr_calloc(ndistinct + 1, sizeof(*ent));
	if (!m->tensors || !ent) {
		rc = dcr_err_sys(e, ENOMEM, "join");
		goto out;
	}
	for (size_t i = 0, j; i < nt; i = j) {
		for (j = i + 1; j < nt && !strcmp(tv[j].t->t.name, tv[i].t->t.name); j++)
			if (!same_tensor(&tv[j].t->t, &tv[i].t->t)) {
				rc = dcr_err_set(e, DCR_EFORMAT,
						 "%s and %s declare tensor '%s' differently (file, dtype or shape)",
						 names[tv[i].producer], names[tv[j].producer],
						 tv[i].t->t.name);
				goto out;
			}
		struct dcr_delta_tensor *mt = &m->tensors[m->ntensors];
		*mt = tv[i].t->t;
		mt->name = strdup(tv[i].t->t.name);
		mt->file = strdup(tv[i].t->t.file);
		m->ntensors++;
		if (!mt->name || !mt->file) {
			rc = dcr_err_sys(e, ENOMEM, "join");
			goto out;
		}
		if ((rc = join_tensor(&tv[i], j - i, names, &mt->digest, e)))
			goto out;
		mt->have_digest = 1;
		ent[m->ntensors - 1] = (struct dcr_state_entry){mt->name, mt->dtype, mt->ndim,
								mt->shape, mt->digest};
	}
	/* every tensor of the layout: a producer that alone holds some is not
	 * missing */
	dcr_digest set;
	dcr_tensor_set_id(ent, m->ntensors, &set);
	if (m->ntensors != v[0].ncanon || memcmp(set.b, v[0].canon.b, 32)) {
		rc = dcr_err_set(e, DCR_EFORMAT,
				 "the %u summaries declare %u of the pack's %u tensors: a producer is missing (or --producers is too small)",
				 n, m->ntensors, v[0].ncanon);
		goto out;
	}
	dcr_state_id(ent, m->ntensors, &m->target);
	for (uint32_t r = 0; r < n; r++) {
		m->nitems += v[r].nitems;
		m->nchanges += v[r].nchanges;
	}
	rc = join_payloads(v, n, m, e);
out:
	free(tv);
	free(ent);
	if (rc)
		dcr_manifest_release(m);
	return rc;
}
