/* pack.c - the packer: a delta stream into payloads and a manifest. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/manifest.h"
#include "core/pack.h"
#include "core/payload.h"
#include "core/sign.h"
#include "core/summary.h"
#include "core/util.h"

/* ---- the packer ---- */

struct packer {
	struct dcr_pack_out out;
	const struct dcr_pack_opts *o;
	struct dcr_manifest m;
	size_t tcap;
	struct dcr_buf *tbody;  /* raw TENSOR bodies, by global index */
	int32_t *local;         /* global -> local index in the open payload, or -1 */
	uint32_t *used;         /* globals mapped in the open payload */
	uint32_t nused;
	struct dcr_buf raw, img;
	double opened;          /* when the open payload got its first item */
	struct dcr_buf pieces; /* BLAKE3 piece CVs of the payloads so far */
	size_t rcap_names;
	uint64_t bytes;
	struct dcr_parts *parts; /* a producer's: per tensor, by global index */
	uint8_t *have_parts;
	int have_canon;          /* the layout's tensor set (a CANON record) */
	uint32_t ncanon;
	dcr_digest canon;
};

static int raw_record(struct dcr_buf *b, uint32_t type, const uint8_t *body, size_t len)
{
	return dcr_buf_add_le32(b, type) || dcr_buf_add_le32(b, 0) || dcr_buf_add_le64(b, len) ||
	       dcr_buf_add(b, body, len);
}

static int flush_payload(struct packer *k, struct dcr_err *e)
{
	if (!k->raw.len)
		return 0;
	uint32_t idx = k->m.npayloads;
	if (k->o && k->o->producers) {
		if (idx >= DCR_PRODUCER_STRIDE)
			return dcr_err_set(e, -EFBIG, "pack: a producer makes at most %u payloads",
					   DCR_PRODUCER_STRIDE);
		idx = dcr_producer_index(k->o->producer, idx);
	}
	dcr_digest d;
	if (idx >= DCR_PAYLOADS_MAX)
		return dcr_err_set(e, DCR_EFORMAT,
				   "pack: more than %u payloads (readers take no more): use a larger payload size",
				   DCR_PAYLOADS_MAX);
	int r = dcr_payload_build(&k->m.base, k->m.attempt, idx, k->raw.p, k->raw.len,
				  k->o ? k->o->digest : DCR_PDIGEST_BLAKE3, &k->img, &d, &k->pieces, e);
	if (r)
		return r;
	uint64_t *ps = realloc(k->m.psize, ((size_t)k->m.npayloads + 1) * sizeof(uint64_t));
	if (ps)
		k->m.psize = ps;
	dcr_digest *pd = realloc(k->m.pdigest, ((size_t)k->m.npayloads + 1) * sizeof(dcr_digest));
	if (pd)
		k->m.pdigest = pd;
	if (!ps || !pd)
		return dcr_err_sys(e, ENOMEM, "pack");
	k->m.psize[k->m.npayloads] = k->img.len;
	k->m.pdigest[k->m.npayloads] = d;
	k->m.npayloads++;
	char *name = dcr_payload_name(idx);
	r = name ? k->out.entry(k->out.ctx, name, k->img.p, k->img.len, e)
		 : dcr_err_sys(e, ENOMEM, "pack");
	free(name);
	k->bytes += k->img.len;
	k->raw.len = 0;
	for (uint32_t i = 0; i < k->nused; i++)
		k->local[k->used[i]] = -1;
	k->nused = 0;
	return r;
}

/* A TENSOR record: its body kept, to go into each payload that has its items. */
static int pack_tensor(struct packer *k, const struct dcr_delta_rec *rec, struct dcr_err *e)
{
	int r;
	if (k->m.ntensors == k->tcap) {
		size_t cap = k->tcap ? 2 * k->tcap : 256;
		struct dcr_delta_tensor *t = realloc(k->m.tensors, cap * sizeof(*t));
		if (t)
			k->m.tensors = t;
		struct dcr_buf *b = realloc(k->tbody, cap * sizeof(*b));
		if (b)
			k->tbody = b;
		int32_t *l = realloc(k->local, cap * sizeof(*l));
		if (l)
			k->local = l;
		uint32_t *u = realloc(k->used, cap * sizeof(*u));
		if (u)
			k->used = u;
		struct dcr_parts *pp = realloc(k->parts, cap * sizeof(*pp));
		if (pp)
			k->parts = pp;
		uint8_t *hp = realloc(k->have_parts, cap);
		if (hp)
			k->have_parts = hp;
		if (!t || !b || !l || !u || !pp || !hp)
			return dcr_err_sys(e, ENOMEM, "pack");
		k->tcap = cap;
	}
	uint32_t i = k->m.ntensors;
	if ((r = dcr_delta_parse_tensor(rec, &k->m.tensors[i], e)))
		return r;
	/* counted, and so freed at the end, only with all of its slots set */
	memset(&k->tbody[i], 0, sizeof(k->tbody[i]));
	memset(&k->parts[i], 0, sizeof(k->parts[i]));
	k->have_parts[i] = 0;
	k->local[i] = -1;
	k->m.ntensors++;
	if (i && strcmp(k->m.tensors[i - 1].name, k->m.tensors[i].name) >= 0)
		return dcr_err_set(e, DCR_EFORMAT, "delta: tensor '%s' is out of order or repeated",
				   k->m.tensors[i].name);
	if (dcr_buf_add(&k->tbody[i], rec->body, rec->len))
		return dcr_err_sys(e, ENOMEM, "pack");
	return 0;
}

#define LINGER_PAYLOADS 1000

/* An ITEM record into the current payload (its tensor's record first, once
 * per payload), flushed at the payload size. */
static int pack_item(struct packer *k, const struct dcr_delta_rec *rec, struct dcr_err *e)
{
	int r;
	struct dcr_item it;
	if ((r = dcr_delta_parse_item(rec, &it, e)))
		return r;
	if (it.tensor >= k->m.ntensors)
		return dcr_err_set(e, DCR_EFORMAT, "delta: item for undeclared tensor %u",
				   it.tensor);
	if (!k->raw.len && k->o && k->o->linger_ms)
		k->opened = dcr_now_s();
	if (k->local[it.tensor] < 0) {
		if (raw_record(&k->raw, DCR_REC_TENSOR, k->tbody[it.tensor].p,
			       k->tbody[it.tensor].len))
			return dcr_err_sys(e, ENOMEM, "pack");
		k->local[it.tensor] = (int32_t)k->nused;
		k->used[k->nused++] = it.tensor;
	}
	/* the same item, its tensor renumbered for this payload */
	struct dcr_rd rd;
	dcr_rd_init(&rd, rec->body, rec->len);
	dcr_rd_varint(&rd);
	struct dcr_buf body = {0};
	if (dcr_buf_add_varint(&body, (uint64_t)k->local[it.tensor]) ||
	    dcr_buf_add(&body, rd.p, dcr_rd_left(&rd)) ||
	    raw_record(&k->raw, DCR_REC_ITEM, body.p, body.len)) {
		dcr_buf_free(&body);
		return dcr_err_sys(e, ENOMEM, "pack");
	}
	dcr_buf_free(&body);
	k->m.nitems++;
	k->m.nchanges += it.n;
	uint64_t cap = k->o && k->o->payload_size ? k->o->payload_size
						   : DCR_DEFAULT_PAYLOAD_SIZE;
	if (k->raw.len >= cap)
		return flush_payload(k, e);
	/* lingered long enough (a stream's slow producer): out it goes; a
	 * pack's first LINGER_PAYLOADS only, so that a producer, which may
	 * make DCR_PRODUCER_STRIDE, gets there by size */
	unsigned lg = k->o ? k->o->linger_ms : 0;
	return lg && k->m.npayloads < LINGER_PAYLOADS && k->raw.len >= DCR_LINGER_MIN_RAW &&
			       dcr_now_s() - k->opened >= lg * 1e-3
		       ? flush_payload(k, e)
		       : 0;
}

/* A PARTS record: the tensor's digest parts, for a producer's summary. */
static int pack_parts(struct packer *k, const struct dcr_delta_rec *rec, struct dcr_err *e)
{
	int r;
	uint32_t ti;
	if (!k->o || !k->o->producers)
		return 0; /* ancillary: a whole pack's manifest has the digests */
	struct dcr_parts tmp = {0};
	if ((r = dcr_delta_parse_parts(rec, &ti, &tmp.v, &tmp.n, &tmp.cap, e))) {
		dcr_parts_free(&tmp);
		return r;
	}
	if (ti + 1 != k->m.ntensors || k->have_parts[ti]) {
		dcr_parts_free(&tmp);
		return dcr_err_set(e, DCR_EFORMAT, "delta: digest parts out of place for tensor %u",
				   ti);
	}
	k->parts[ti] = tmp;
	k->have_parts[ti] = 1;
	return 0;
}

static int pack_record(struct packer *k, const struct dcr_delta_rec *rec, struct dcr_err *e)
{
	int r;
	switch (rec->type) {
	case DCR_REC_TENSOR:
		return pack_tensor(k, rec, e);
	case DCR_REC_ITEM:
		return pack_item(k, rec, e);
	case DCR_REC_REMOVE: {
		char *name;
		if ((r = dcr_delta_parse_name(rec, &name, e)))
			return r;
		char **v = realloc(k->m.removed, (k->m.nremoved + 1) * sizeof(char *));
		if (!v) {
			free(name);
			return dcr_err_sys(e, ENOMEM, "pack");
		}
		k->m.removed = v;
		v[k->m.nremoved++] = name;
		return 0;
	}
	case DCR_REC_DONE: {
		uint32_t ti;
		dcr_digest d;
		if ((r = dcr_delta_parse_done(rec, &ti, &d, e)))
			return r;
		if (ti >= k->m.ntensors || k->m.tensors[ti].have_digest)
			return dcr_err_set(e, DCR_EFORMAT, "delta: bad digest record for tensor %u", ti);
		k->m.tensors[ti].digest = d;
		k->m.tensors[ti].have_digest = 1;
		return 0;
	}
	case DCR_REC_PARTS:
		return pack_parts(k, rec, e);
	case DCR_REC_CANON:
		if (k->have_canon)
			return dcr_err_set(e, DCR_EFORMAT, "delta: two CANON records");
		k->have_canon = 1;
		return dcr_delta_parse_canon(rec, &k->ncanon, &k->canon, e);
	case DCR_REC_BASES: {
		dcr_digest *v;
		size_t n;
		if ((r = dcr_delta_parse_bases(rec, &v, &n, e)))
			return r;
		free(k->m.alt);
		k->m.alt = v;
		k->m.nalt = (uint32_t)n;
		return 0;
	}
	default:
		return 0;
	}
}

void dcr_producers_attempt(const dcr_digest *base, uint32_t n, uint8_t attempt[16])
{
	struct dcr_blake3 h;
	uint8_t le[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
	dcr_digest d;
	dcr_blake3_init(&h);
	dcr_blake3_update(&h, "dcr-producers\n", 14);
	dcr_blake3_update(&h, base->b, 32);
	dcr_blake3_update(&h, le, 4);
	dcr_blake3_final(&h, &d);
	memcpy(attempt, d.b, 16);
}

/* A producer's end: the last payload, then its summary (its payloads, its
 * tensors with their digest parts) in place of a manifest. */
static int producer_finish(struct packer *k, const char *what, struct dcr_pack_stats *st,
			   struct dcr_err *e)
{
	const struct dcr_pack_opts *o = k->o;
	struct dcr_summary s = {.base = k->m.base, .producer = o->producer,
				.nproducers = (uint32_t)o->producers};
	struct dcr_buf out = {0};
	char *name = NULL;
	int r;
	if (k->m.nremoved)
		return dcr_err_set(e, DCR_EFORMAT, "%s removes tensors: producers send changes only",
				   what);
	if (!k->have_canon)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s does not name its layout's tensors (a producer's delta comes from dcr-diff --layout)",
				   what);
	s.ncanon = k->ncanon;
	s.canon = k->canon;
	for (uint32_t i = 0; i < k->m.ntensors; i++)
		if (!k->have_parts[i])
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s: no digest parts for tensor '%s' (a producer's delta comes from dcr-diff --layout)",
					   what, k->m.tensors[i].name);
	if ((r = flush_payload(k, e)))
		return r;
	memcpy(s.attempt, k->m.attempt, 16);
	s.npayloads = k->m.npayloads;
	s.psize = k->m.psize;
	s.pdigest = k->m.pdigest;
	s.pindex = dcr_calloc(s.npayloads + 1, sizeof(*s.pindex));
	s.tensors = dcr_calloc(k->m.ntensors + 1, sizeof(*s.tensors));
	if (!s.pindex || !s.tensors) {
		r = dcr_err_sys(e, ENOMEM, "pack");
		goto out;
	}
	for (uint32_t i = 0; i < s.npayloads; i++)
		s.pindex[i] = dcr_producer_index(o->producer, i);
	if (k->pieces.len) {
		s.piece_log2 = DCR_PIECE_LOG2;
		s.pieces = (uint8_t(*)[32])k->pieces.p;
		s.npieces = k->pieces.len / 32;
	}
	s.ntensors = k->m.ntensors;
	for (uint32_t i = 0; i < s.ntensors; i++) {
		s.tensors[i].t = k->m.tensors[i];
		s.tensors[i].parts = k->parts[i];
	}
	s.nitems = k->m.nitems;
	s.nchanges = k->m.nchanges;
	if ((r = dcr_summary_build(&s, &out, e)))
		goto out;
	/* it must parse back */
	struct dcr_summary check;
	if ((r = dcr_summary_parse(out.p, out.len, what, &check, e)))
		goto out;
	dcr_summary_release(&check);
	if (!(name = dcr_summary_name(o->producer))) {
		r = dcr_err_sys(e, ENOMEM, "pack");
		goto out;
	}
	r = k->out.entry(k->out.ctx, name, out.p, out.len, e);
	k->bytes += out.len;
	if (st) {
		st->npayloads = k->m.npayloads;
		st->bytes = k->bytes;
		st->summary_bytes = out.len;
		st->items = k->m.nitems;
		st->changes = k->m.nchanges;
		st->base = k->m.base;
	}
out:
	free(s.pindex);
	free(s.tensors);
	free(name);
	dcr_buf_free(&out);
	return r;
}

int dcr_pack(struct dcr_source src, const char *what, const struct dcr_pack_opts *o,
	     struct dcr_pack_out out, struct dcr_pack_stats *st, struct dcr_err *e)
{
	struct packer k = {.out = out, .o = o};
	struct dcr_delta_reader rd;
	struct dcr_buf man = {0};
	int prod = o && o->producers;
	int r = dcr_delta_reader_init_flags(&rd, src, NULL, 0,
					    prod ? DCR_DELTA_PARTIAL : DCR_DELTA_DENSE, what, e);
	if (!r) {
		k.m.base = rd.base;
		memcpy(k.m.attempt, rd.attempt, 16);
		k.m.dense = (rd.flags & DCR_DELTA_DENSE) != 0;
	}
	if (!r && prod) {
		static const dcr_digest zero;
		if (o->producers > DCR_PRODUCERS_MAX || o->producer >= (uint32_t)o->producers)
			r = dcr_err_set(e, -EINVAL, "producer %u of %d: want R/N with R < N <= %d",
					o->producer, o->producers, DCR_PRODUCERS_MAX);
		else if (!memcmp(rd.base.b, zero.b, 32))
			r = dcr_err_set(e, DCR_EFORMAT,
					"%s names no base: a producer's delta must name the canonical base (dcr-diff --layout --base-id)",
					what);
		else if (o->attempt)
			memcpy(k.m.attempt, o->attempt, 16);
		else
			dcr_producers_attempt(&rd.base, (uint32_t)o->producers, k.m.attempt);
	}
	struct dcr_delta_rec rec;
	while (!r && (r = dcr_delta_next(&rd, &rec, e)) == 1) {
		r = pack_record(&k, &rec, e);
		if (!r && o && o->progress)
			o->progress(o->progress_ctx, rd.offset, 0);
	}
	if (!r)
		r = dcr_delta_check_end(&rd, k.m.ntensors, k.m.nitems, k.m.nchanges, e);
	if (r)
		goto out;
	if (prod) {
		r = producer_finish(&k, what, st, e);
		goto out;
	}
	for (uint32_t i = 0; i < k.m.ntensors; i++)
		if (!k.m.tensors[i].have_digest) {
			r = dcr_err_set(e, DCR_EFORMAT, "%s: no digest for tensor '%s'", what,
					k.m.tensors[i].name);
			goto out;
		}
	k.m.target = rd.target;
	if (o && o->sign && !o->have_version) {
		r = dcr_err_set(e, -EINVAL, "a signed pack must name the version it reaches");
		goto out;
	}
	if (o && o->have_version) {
		k.m.have_version = 1;
		k.m.version = o->version;
		if (o->policy && !(k.m.policy = strdup(o->policy))) {
			r = dcr_err_sys(e, ENOMEM, "%s", what);
			goto out;
		}
	}
	if (!(r = flush_payload(&k, e)) && k.pieces.len) {
		/* SHA-256 payloads have no pieces: a manifest lists them for all or none */
		k.m.pieces = (uint8_t(*)[32])k.pieces.p;
		k.m.npieces = k.pieces.len / 32;
		k.m.piece_log2 = DCR_PIECE_LOG2;
		k.pieces = (struct dcr_buf){0};
	}
	if (r || (r = dcr_manifest_build(&k.m, &man, e)))
		goto out;
	/* the manifest must parse back, tensor table and target id included */
	struct dcr_manifest check;
	if ((r = dcr_manifest_parse(man.p, man.len, what, &check, e)))
		goto out;
	dcr_manifest_release(&check);
	if (o && o->sign) {
		char *sig;
		size_t sl;
		if ((r = dcr_sign(o->sign, man.p, man.len, o->sign_pub, &sig, &sl, e)))
			goto out;
		r = out.entry(out.ctx, DCR_MANIFEST_SIG_NAME, (const uint8_t *)sig, sl, e);
		k.bytes += sl;
		free(sig);
		if (r)
			goto out;
	}
	r = out.entry(out.ctx, DCR_MANIFEST_NAME, man.p, man.len, e);
	k.bytes += man.len;
	if (st) {
		st->npayloads = k.m.npayloads;
		st->bytes = k.bytes;
		st->items = k.m.nitems;
		st->changes = k.m.nchanges;
		st->base = k.m.base;
		st->target = k.m.target;
	}
out:
	dcr_delta_reader_release(&rd);
	for (uint32_t i = 0; i < k.m.ntensors; i++) {
		dcr_buf_free(&k.tbody[i]);
		if (k.have_parts[i])
			dcr_parts_free(&k.parts[i]);
	}
	free(k.parts);
	free(k.have_parts);
	free(k.tbody);
	free(k.local);
	free(k.used);
	dcr_buf_free(&k.raw);
	dcr_buf_free(&k.img);
	dcr_buf_free(&k.pieces);
	dcr_buf_free(&man);
	dcr_manifest_release(&k.m);
	return r;
}

