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
	struct dcr_buf pieces; /* BLAKE3 piece CVs of the payloads so far */
	size_t rcap_names;
	uint64_t bytes;
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
	dcr_digest d;
	if (idx >= DCR_PAYLOADS_MAX)
		return dcr_err_set(e, DCR_EFORMAT,
				   "pack: more than %u payloads (readers take no more): use a larger payload size",
				   DCR_PAYLOADS_MAX);
	int r = dcr_payload_build(&k->m.base, k->m.attempt, idx, k->raw.p, k->raw.len,
				  k->o ? k->o->digest : DCR_PDIGEST_BLAKE3, &k->img, &d, &k->pieces, e);
	if (r)
		return r;
	uint64_t *ps = realloc(k->m.psize, ((size_t)idx + 1) * sizeof(uint64_t));
	if (ps)
		k->m.psize = ps;
	dcr_digest *pd = realloc(k->m.pdigest, ((size_t)idx + 1) * sizeof(dcr_digest));
	if (pd)
		k->m.pdigest = pd;
	if (!ps || !pd)
		return dcr_err_sys(e, ENOMEM, "pack");
	k->m.psize[idx] = k->img.len;
	k->m.pdigest[idx] = d;
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

static int pack_record(struct packer *k, const struct dcr_delta_rec *rec, struct dcr_err *e)
{
	int r;
	switch (rec->type) {
	case DCR_REC_TENSOR: {
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
			if (!t || !b || !l || !u)
				return dcr_err_sys(e, ENOMEM, "pack");
			k->tcap = cap;
		}
		uint32_t i = k->m.ntensors;
		if ((r = dcr_delta_parse_tensor(rec, &k->m.tensors[i], e)))
			return r;
		k->m.ntensors++;
		if (i && strcmp(k->m.tensors[i - 1].name, k->m.tensors[i].name) >= 0)
			return dcr_err_set(e, DCR_EFORMAT, "delta: tensor '%s' is out of order",
					   k->m.tensors[i].name);
		memset(&k->tbody[i], 0, sizeof(k->tbody[i]));
		k->local[i] = -1;
		if (dcr_buf_add(&k->tbody[i], rec->body, rec->len))
			return dcr_err_sys(e, ENOMEM, "pack");
		return 0;
	}
	case DCR_REC_ITEM: {
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(rec, &it, e)))
			return r;
		if (it.tensor >= k->m.ntensors)
			return dcr_err_set(e, DCR_EFORMAT, "delta: item for undeclared tensor %u",
					   it.tensor);
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
		return k->raw.len >= cap ? flush_payload(k, e) : 0;
	}
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

int dcr_pack(struct dcr_source src, const char *what, const struct dcr_pack_opts *o,
	     struct dcr_pack_out out, struct dcr_pack_stats *st, struct dcr_err *e)
{
	struct packer k = {.out = out, .o = o};
	struct dcr_delta_reader rd;
	struct dcr_buf man = {0};
	int r = dcr_delta_reader_init_flags(&rd, src, NULL, 0, DCR_DELTA_DENSE, what, e);
	if (!r) {
		k.m.base = rd.base;
		memcpy(k.m.attempt, rd.attempt, 16);
		k.m.dense = (rd.flags & DCR_DELTA_DENSE) != 0;
	}
	struct dcr_delta_rec rec;
	while (!r && (r = dcr_delta_next(&rd, &rec, e)) == 1) {
		r = pack_record(&k, &rec, e);
		if (!r && o && o->progress)
			o->progress(o->progress_ctx, rd.offset, 0);
	}
	if (r)
		goto out;
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
	for (uint32_t i = 0; i < k.m.ntensors; i++)
		dcr_buf_free(&k.tbody[i]);
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

