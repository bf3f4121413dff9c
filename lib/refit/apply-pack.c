/* apply-pack.c - applying a pack: payloads are checked and resolved to
 * overwrites as they arrive, the manifest accounts for them, and the spool
 * becomes the journal (see apply.c and journal.c). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/manifest.h"
#include "core/pset.h"
#include "core/trust.h"
#include "core/util.h"
#include "refit/apply-pack.h"
#include "refit/commit.h"
#include "refit/ipool.h"
#include "refit/journal.h"
#include "refit/plan.h"
#include "refit/prehash.h"
#include "refit/tcount.h"
#include "refit/stage.h"

/* ---- applying a pack ----
 * Payloads are checked and resolved to overwrites as they arrive (against
 * the untouched base bits) into .dcr/spool; when the stream ends with a
 * manifest that accounts for every payload, the spool becomes the journal
 * and is committed and replayed as for a delta. */

struct spool {
	int fd;
	int threads; /* resolving payloads (refit/ipool.h) */
	struct dcr_buf rec;
	/* reading back: the spool mapped (file pages, which the kernel may
	 * drop and read again, not a heap copy as large as the journal) */
	const uint8_t *map;
	size_t len, off;
	uint64_t nitems, nchanges;
	uint64_t written, unchecked; /* bytes spooled; since spool_room looked */
	int xor_seen; /* XOR items left out (receiver not at the base) */
	/* the digests of the tensors, put together as their items are
	 * resolved (refit/prehash.h), for the journal's check */
	struct ap_prehash *pre;
	struct ap_parts_ring ring;
	/* the elements each tensor's spooled items change (refit/tcount.h) */
	struct ap_tcount count;
};

/* The spool leaves its filesystem 2% of it free (at least SPOOL_KEEP_MIN,
 * at most 4 GiB: dcr_fs_room), looked at before a write that makes
 * SPOOL_ROOM_EVERY bytes since the last look: a payload's items may decode
 * to far more than its compressed bytes (a dense item of zeros), and a
 * stream that is refused only at its end (no manifest; no signature where
 * a key is required) must not fill the receiver's disk first. */
#define SPOOL_KEEP_MIN ((uint64_t)64 << 20)
#define SPOOL_ROOM_EVERY ((uint64_t)16 << 20)
#define SPOOL_BATCH ((size_t)1 << 20)

static int spool_room(struct spool *s, uint64_t len, struct dcr_err *e)
{
	uint64_t room, keep;
	s->unchecked = 0;
	if (dcr_fs_room(s->fd, NULL, SPOOL_KEEP_MIN, &room, &keep))
		return 0; /* unknown: the writes will tell */
	if (room >= len && room - len >= keep)
		return 0;
	return dcr_err_sys(e, ENOSPC,
			   "cannot spool the pack: its items decode to more than the receiver's filesystem holds (%llu bytes spooled, %llu left free, %llu kept free; nothing written to the checkpoint)",
			   (unsigned long long)s->written, (unsigned long long)room,
			   (unsigned long long)keep);
}

/* The records gathered in s->rec written to the spool. */
static int spool_flush(struct spool *s, struct dcr_err *e)
{
	struct dcr_buf *b = &s->rec;
	if (!b->len)
		return 0;
	if (s->unchecked + b->len >= SPOOL_ROOM_EVERY) {
		int r = spool_room(s, b->len, e);
		if (r)
			return r;
	}
	int r = dcr_write_full(s->fd, b->p, b->len);
	if (r)
		return dcr_err_sys(e, r, "cannot write the spool");
	s->written += b->len;
	s->unchecked += b->len;
	b->len = 0;
	return 0;
}

/* Item it of tensor name onto the spool, SPOOL_BATCH bytes of records or
 * one larger at a time (a write per record cost a stream of small items
 * 1.5 us each). */
static int spool_item(struct spool *s, const char *name, const struct dcr_item *it,
		      struct dcr_err *e)
{
	struct dcr_buf *b = &s->rec;
	size_t nl = strlen(name);
	if (dcr_buf_add_varint(b, nl) || dcr_buf_add(b, name, nl) ||
	    dcr_buf_add_varint(b, it->flags) || dcr_buf_add_u8(b, it->enc) ||
	    dcr_buf_add_u8(b, it->codec) || dcr_buf_add_varint(b, it->start) ||
	    dcr_buf_add_varint(b, it->len) || dcr_buf_add_varint(b, it->n) ||
	    dcr_buf_add_varint(b, it->data_len) || dcr_buf_add(b, it->data, it->data_len))
		return dcr_err_sys(e, ENOMEM, "spool");
	s->nitems++;
	s->nchanges += it->n;
	return b->len >= SPOOL_BATCH ? spool_flush(s, e) : 0;
}

/* Next spooled item: its tensor's name (borrowed) and the item. */
static int spool_read(struct spool *s, const char **name, struct dcr_item *it, char *namebuf,
		      struct dcr_err *e)
{
	if (s->off >= s->len)
		return 0;
	struct dcr_rd rd;
	dcr_rd_init(&rd, s->map + s->off, s->len - s->off);
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
	s->off = (size_t)(rd.p - s->map);
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

/* One payload item made ready for the spool (ctx: the payload's tensor
 * table, which does not change while items are in the pool): an XOR item
 * resolved against the base bits (arg: a cell of the parts ring with the
 * base tensor), encoded as an OVERWRITE, and its new bytes hashed into
 * the cell when they were read; an OVERWRITE decoded (so that a bad
 * payload is refused early) and kept. */
static int spool_work(void *ctx, const struct dcr_item *it, void *arg, struct dcr_changes *ch,
		      struct dcr_buf *scratch, struct dcr_buf *enc, struct dcr_item *out,
		      struct dcr_err *e)
{
	const struct dcr_delta_tensor *lt = ((const struct dcr_tensor_table *)ctx)->v;
	unsigned unit = dcr_dtype_unit(lt[it->tensor].dtype);
	const uint8_t *base;
	int r;
	/* a DENSE overwrite goes in as it came: the journal's check decodes
	 * it, and refuses one that does not decode, before the commit (here
	 * it was decoded to 16 bytes an element and thrown away) */
	if (dcr_item_is_dense_overwrite(it))
		return 0;
	if (it->enc != DCR_ENC_XOR)
		return dcr_item_decode(it, unit, ch, e);
	struct ap_parts_cell *cell = arg;
	if ((r = dcr_item_base(cell->base, it, unit, scratch, &base, e)) ||
	    (r = dcr_item_to_overwrite(it, unit, base, ch, enc, out, e)))
		return r;
	const struct dcr_delta_tensor *t = &lt[it->tensor];
	if (base == scratch->p)
		cell->parts = ap_prehash_parts(t->dtype, t->ndim, t->shape, it, scratch->p, ch);
	return 0;
}

/* The next item the pool made ready, into the spool (1), or 0: none left. */
static int spool_take(struct spool *s, struct ap_ipool *ip, const struct dcr_delta_tensor *lt,
		      struct dcr_err *e)
{
	struct dcr_item it;
	struct ap_parts_cell *cell = ap_ring_take(&s->ring);
	int r = ap_ipool_get(ip, &it, NULL, e);
	if (r != 1)
		return r;
	if (cell) {
		ap_prehash_take(s->pre, lt[it.tensor].name, cell->base, &it, cell->parts);
		cell->parts = NULL;
	}
	return (r = spool_item(s, lt[it.tensor].name, &it, e)) ? r : 1;
}

/* An item of a payload, checked against its tensor and the receiver's
 * base and given to the pool (the XOR ones with the base's tensor). */
static int spool_give(struct spool *s, struct ap_ipool *ip, const struct dcr_tensor_table *lt,
		      const struct dcr_delta_rec *rec, const char *what, const struct dcr_ckpt *c,
		      int allow_xor, struct dcr_err *e)
{
	struct dcr_item it;
	const struct dcr_delta_tensor *t;
	int r = dcr_tensor_table_item(lt, rec, what, &it, &t, e);
	if (r)
		return r;
	uint64_t units = dcr_delta_tensor_units(t);
	if ((r = dcr_item_check_range(&it, units, what, t->name, e)))
		return r;
	if (it.enc == DCR_ENC_XOR && !allow_xor) {
		s->xor_seen = 1;
		return 0;
	}
	if ((r = ap_tcount_item(&s->count, t, &it, what, e)))
		return r;
	const struct dcr_ckpt_tensor *base = NULL;
	if (it.enc == DCR_ENC_XOR) {
		const struct dcr_ckpt_tensor *ct = dcr_ckpt_find(c, t->name);
		if ((t->flags & DCR_TENSOR_NEW) || !dcr_ckpt_tensor_is(ct, t->dtype, t->ndim, t->shape))
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s: XOR item for '%s', which the receiver does not hold as in the base",
					   what, t->name);
		base = ct;
	}
	while (!ap_ipool_room(ip))
		if ((r = spool_take(s, ip, lt->v, e)) < 0)
			return r;
	return ap_ipool_put(ip, &it, ap_ring_give(&s->ring, base)) ? dcr_err_sys(e, ENOMEM, "%s", what)
								    : 0;
}

/* Resolve one payload's items into the spool, on every core, in order. */
static int spool_payload(struct spool *s, const uint8_t *buf, size_t len,
			 const struct dcr_payload *pl, const char *what, const struct dcr_ckpt *c,
			 int allow_xor, struct dcr_err *e)
{
	struct dcr_tensor_table lt = {0};
	struct dcr_payload_records rd;
	struct dcr_delta_rec rec;
	struct ap_ipool *ip = ap_ipool_new(s->threads, spool_work, &lt);
	if (!ip)
		return dcr_err_sys(e, ENOMEM, "%s", what);
	int r = dcr_payload_records_open(&rd, buf, len, pl, what, e);
	while (!r && (r = dcr_payload_records_next(&rd, &rec, e)) == 1) {
		r = 0;
		if (rec.type == DCR_REC_TENSOR) {
			/* when the table is full it moves as it grows: the
			 * pool's items (which read their tensors' entries in
			 * it) are done first; else the new entry goes past
			 * those they read (a stream of a tensor per item
			 * waited here for every tensor: 25 us each) */
			while (lt.n == lt.cap && (r = spool_take(s, ip, lt.v, e)) == 1)
				;
			if (!r)
				r = dcr_tensor_table_add(&lt, &rec, what, e);
		} else if (rec.type == DCR_REC_ITEM) {
			r = spool_give(s, ip, &lt, &rec, what, c, allow_xor, e);
		} else if (rec.type == DCR_REC_REMOVE) {
			/* the manifest lists removals */
		} else if (rec.type < DCR_REC_ANCILLARY) {
			r = dcr_err_set(e, DCR_EFORMAT, "%s: unexpected record type %u", what, rec.type);
		}
	}
	while (r == 0 && (r = spool_take(s, ip, lt.v, e)) == 1)
		r = 0;
	ap_ipool_free(ip);
	s->ring.taken = s->ring.given; /* the items the pool dropped, after an error */
	dcr_payload_records_close(&rd);
	dcr_tensor_table_clear(&lt);
	return r < 0 ? r : 0;
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

/* What applying a pack's steps share: the receiver's current state, the
 * spool, the manifest and the plan made from it, the base and attempt the
 * payloads name, and which payloads arrived with which digests. */
struct apack {
	struct ctx x;
	struct plan p;
	struct dcr_ckpt *c;
	dcr_digest cur, *cur_dg, base;
	uint8_t attempt[16];
	struct spool s;
	struct dcr_manifest m;
	int have_manifest, have_base, mismatch;
	struct pset seen;	/* the payloads that arrived, with their digests */
	uint8_t *sig;		/* the manifest's signature, when the pack has one */
	size_t sig_len;
	int have_version;	/* the version the pack reaches */
	uint64_t version;
	int pin_policy;		/* once applied, record m's policy as followed */
};

/* An opened payload: its index and delta checked, then spooled unless it
 * is a duplicate; 1 when spooled, 0 for a duplicate. */
static int ak_take(struct apack *ak, const char *name, uint32_t idx, const uint8_t *buf,
		   size_t len, const struct dcr_payload *pl, struct dcr_err *e)
{
	int r;
	if (pl->index != idx)
		return dcr_err_set(e, DCR_EFORMAT, "%s holds payload %u", name, pl->index);
	if (!ak->have_base) {
		ak->base = pl->base;
		memcpy(ak->attempt, pl->attempt, 16);
		ak->have_base = 1;
		ak->mismatch = memcmp(ak->cur.b, ak->base.b, 32) != 0;
	} else if (memcmp(ak->base.b, pl->base.b, 32) || memcmp(ak->attempt, pl->attempt, 16)) {
		return dcr_err_set(e, DCR_EFORMAT, "%s belongs to another delta", name);
	}
	if (idx >= DCR_PAYLOADS_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "%s: payload index %u is too large (at most %u)",
				   name, idx, DCR_PAYLOADS_MAX - 1);
	r = pset_add(&ak->seen, idx, len, &pl->digest);
	if (r == -EEXIST)
		return dcr_err_set(e, DCR_EFORMAT, "%s arrived twice with different contents", name);
	if (r < 0)
		return dcr_err_sys(e, -r, "apply");
	if (!r)
		return 0; /* a duplicate: already spooled */
	/* from another state than the base, XOR items cannot be resolved:
	 * they are left out and the delta is refused at the manifest,
	 * unless the receiver is at an alternative base (overwrites only) */
	if ((r = spool_payload(&ak->s, buf, len, pl, name, ak->c, !ak->mismatch, e)))
		return r;
	return 1;
}

/* The manifest on trust, as soon as it is in (nothing is committed yet):
 * signed by a key o->trust names, at a version above the one the receiver
 * committed; and the version it names is the one recorded. */
static int ak_trust(struct apack *ak, const uint8_t *man, size_t len, struct dcr_err *e)
{
	const struct dcr_apply_opts *o = ak->x.o;
	const struct dcr_trust *t = o ? o->trust : NULL;
	const struct dcr_manifest *m = &ak->m;
	int r = dcr_trust_check(t, man, len, m, ak->sig, ak->sig_len, DCR_MANIFEST_NAME, e);
	if (r)
		return r;
	if (t && t->nkeys) {
		struct dcr_head h;
		if ((r = dcr_head_read(ak->x.rc, &h, e)))
			return r;
		if (h.have && m->version <= h.version)
			return dcr_err_set(e, DCR_ETRUST,
					   "%s: signed version %llu is not above version %llu, which the receiver has committed (a replay or a rollback)",
					   DCR_MANIFEST_NAME, (unsigned long long)m->version,
					   (unsigned long long)h.version);
		/* the policy it follows: from its first signed pack that names
		 * one, unless --policy says (then recorded as said) */
		char pol[DCR_POLICY_MAX + 1];
		if ((r = dcr_policy_read(ak->x.rc, pol, sizeof(pol), e)))
			return r;
		if (!t->policy && pol[0] &&
		    (r = dcr_trust_policy(m, pol, "recorded in .dcr/policy from its first signed pack",
					  DCR_MANIFEST_NAME, e)))
			return r;
		ak->pin_policy = m->policy && m->policy[0] && strcmp(pol, m->policy);
	}
	if (m->have_version) {
		if (ak->have_version && ak->version != m->version)
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s reaches version %llu, not the %llu asked for (by --version or the pack's name)",
					   DCR_MANIFEST_NAME, (unsigned long long)m->version,
					   (unsigned long long)ak->version);
		ak->have_version = 1;
		ak->version = m->version;
	}
	return 0;
}

/* The pack stream: payloads spooled as they arrive, then the manifest,
 * which must come last (its signature, if any, before it). */
static int ak_receive(struct apack *ak, struct dcr_pack_in *in, struct dcr_err *e)
{
	const struct dcr_apply_opts *o = ak->x.o;
	const char *name;
	const uint8_t *buf;
	size_t len;
	uint64_t got = 0;
	int r;
	while ((r = dcr_pack_in_next(in, &name, &buf, &len, e)) == 1) {
		uint32_t idx;
		if (ak->have_manifest)
			return dcr_err_set(e, DCR_EFORMAT, "pack: entry '%s' after the manifest", name);
		if (!strcmp(name, DCR_MANIFEST_NAME)) {
			if ((r = dcr_manifest_parse(buf, len, name, &ak->m, e)))
				return r;
			ak->have_manifest = 1;
			if ((r = ak_trust(ak, buf, len, e)))
				return r;
			continue;
		}
		if (!strcmp(name, DCR_MANIFEST_SIG_NAME)) {
			if (ak->sig)
				return dcr_err_set(e, DCR_EFORMAT, "pack: two '%s' entries", name);
			if (len > DCR_SIG_MAX)
				return dcr_err_set(e, DCR_EFORMAT, "pack: '%s' is %zu bytes, not a signature",
						   name, len);
			if (!(ak->sig = malloc(len ? len : 1)))
				return dcr_err_sys(e, ENOMEM, "apply");
			memcpy(ak->sig, buf, len);
			ak->sig_len = len;
			continue;
		}
		if (!dcr_payload_name_parse(name, &idx))
			return dcr_err_set(e, DCR_EFORMAT, "pack: unexpected entry '%s'", name);
		struct dcr_payload pl;
		if ((r = dcr_payload_check(buf, len, name, &pl, e)))
			return r;
		r = ak_take(ak, name, idx, buf, len, &pl, e);
		if (r < 0)
			return r;
		if (!r)
			continue;
		ap_step(&ak->x); /* between payloads: nothing durable yet */
		got += len;
		if (o && o->progress)
			o->progress(o->progress_ctx, got >> 20, 0);
	}
	if (r < 0)
		return r;
	if (!ak->have_manifest)
		return dcr_err_set(e, DCR_EFORMAT, "pack stream ended without a manifest%s",
				   ak->have_base ? " (payloads were checked; nothing was written)" : "");
	return 0;
}

/* The manifest against the payloads and the receiver: the same delta, a
 * base the receiver may take it from, every payload there with its digest
 * and none more; makes the plan. */
static int ak_check(struct apack *ak, struct dcr_err *e)
{
	const struct dcr_apply_opts *o = ak->x.o;
	const struct dcr_manifest *m = &ak->m;
	int r;
	if (ak->have_base &&
	    (memcmp(ak->base.b, m->base.b, 32) || memcmp(ak->attempt, m->attempt, 16)))
		return dcr_err_set(e, DCR_EFORMAT, "pack: the manifest belongs to another delta than its payloads");
	if ((r = plan_from_manifest(&ak->p, m, e)) ||
	    (r = ap_check_bases(&ak->p, ak->c, ak->x.rc->dir, &ak->cur, o ? o->head : NULL,
				ak->s.xor_seen, e)))
		return r;
	for (uint32_t i = 0; i < m->npayloads; i++) {
		uint32_t idx = dcr_manifest_index(m, i);
		const struct pset_ent *pe = pset_find(&ak->seen, idx);
		char *pn = dcr_payload_name(idx);
		if (!pe)
			r = dcr_err_set(e, DCR_EFORMAT, "pack is missing %s; nothing was written",
					pn ? pn : "a payload");
		else if (memcmp(pe->digest.b, m->pdigest[i].b, 32))
			r = dcr_err_set(e, DCR_EDIGEST, "%s does not match the manifest's digest",
					pn ? pn : "a payload");
		free(pn);
		if (r)
			return r;
	}
	/* every manifest payload is there, and no payload arrived twice: no
	 * more may have arrived */
	for (size_t k = 0; ak->seen.n != m->npayloads && k < ak->seen.n; k++)
		if (dcr_manifest_find(m, ak->seen.v[k].idx) < 0)
			return dcr_err_set(e, DCR_EFORMAT, "pack: payload %u is not in the manifest",
					   ak->seen.v[k].idx);
	return 0;
}

/* Read the spool back: mark touched tensors, check items against the
 * manifest (their tensors, their ranges, their number). */
static int ak_read_spool(struct apack *ak, struct dcr_err *e)
{
	struct spool *s = &ak->s;
	int r = spool_flush(s, e);
	if (r)
		return r;
	off_t sl = lseek(s->fd, 0, SEEK_END);
	if (sl < 0)
		return dcr_err_sys(e, errno, "cannot read the spool");
	if (sl > 0) {
		void *m = mmap(NULL, (size_t)sl, PROT_READ, MAP_SHARED, s->fd, 0);
		if (m == MAP_FAILED)
			return dcr_err_sys(e, errno, "cannot map the spool");
		s->map = m;
		s->len = (size_t)sl;
		(void)madvise(m, (size_t)sl, MADV_SEQUENTIAL);
	}
	char namebuf[65536];
	const char *nm;
	struct dcr_item it;
	while ((r = spool_read(s, &nm, &it, namebuf, e)) == 1) {
		struct ptensor *pt = plan_find(&ak->p, nm);
		if (!pt)
			return dcr_err_set(e, DCR_EFORMAT, "pack: item for '%s', which the manifest lacks",
					   nm);
		uint64_t units = dcr_delta_tensor_units(&pt->t);
		if ((r = dcr_item_check_range(&it, units, "pack", nm, e)))
			return r;
		pt->touched = 1;
	}
	if (r < 0)
		return r;
	s->off = 0;
	if (s->nitems != ak->m.nitems || s->nchanges != ak->m.nchanges)
		return dcr_err_set(e, DCR_EFORMAT,
				   "pack: payloads hold %llu items, the manifest says %llu",
				   (unsigned long long)s->nitems, (unsigned long long)ak->m.nitems);
	return 0;
}

static int apply_pack(struct dcr_receiver *rc, struct dcr_pack_in *in,
		   const struct dcr_apply_opts *o, struct dcr_apply_result *res,
		   int *have_version, uint64_t *version, struct dcr_err *e)
{
	struct apack ak = {.x = {.rc = rc, .o = o}, .s = {.fd = -1, .threads = rc->threads},
			   .have_version = *have_version, .version = *version};
	char *sp = dcr_receiver_path(rc, "spool");
	int r;
	if (!sp)
		return dcr_err_sys(e, ENOMEM, "apply");
	if ((r = ap_begin(rc, o, res, e)))
		goto out;
	if ((r = ap_current_state(rc, &ak.c, &ak.cur, &ak.cur_dg, e)))
		goto out;
	if (!(ak.s.pre = ap_prehash_new())) {
		r = dcr_err_sys(e, ENOMEM, "apply");
		goto out;
	}
	unlink(sp);
	ak.s.fd = open(sp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (ak.s.fd < 0) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", sp);
		goto out;
	}
	if ((r = ak_receive(&ak, in, e)))
		goto out;
	*have_version = ak.have_version;
	*version = ak.version;
	if (res) {
		res->base = ak.m.base;
		res->target = ak.m.target;
		memcpy(res->attempt, ak.m.attempt, 16);
	}
	if (!memcmp(ak.cur.b, ak.m.target.b, 32)) {
		if (res)
			res->already = 1;
		r = 0;
		goto out;
	}
	if ((r = ak_check(&ak, e)) || (r = ak_read_spool(&ak, e)))
		goto out;
	ak.p.pre = ak.s.pre;
	r = ap_commit_plan(&ak.x, &ak.p, ak.c, &ak.cur, ak.cur_dg,
			   (struct item_src){spool_next, &ak.s}, res, e);
out:
	if (!r && ak.pin_policy)
		r = dcr_policy_write(rc, ak.m.policy, e);
	ak.p.pre = NULL;
	ap_ring_release(&ak.s.ring);
	ap_prehash_free(ak.s.pre);
	ap_tcount_free(&ak.s.count);
	if (ak.s.fd >= 0)
		close(ak.s.fd);
	unlink(sp);
	free(sp);
	dcr_buf_free(&ak.s.rec);
	if (ak.s.map)
		munmap((void *)ak.s.map, ak.s.len);
	pset_free(&ak.seen);
	free(ak.sig);
	free(ak.cur_dg);
	dcr_manifest_release(&ak.m);
	dcr_ckpt_close(ak.c);
	ap_plan_free(&ak.p);
	return r;
}

int dcr_apply_pack(struct dcr_receiver *rc, struct dcr_pack_in *in,
		   const struct dcr_apply_opts *o, struct dcr_apply_result *res,
		   struct dcr_err *e)
{
	struct dcr_apply_result tmp;
	if (!res)
		res = &tmp;
	int have_version = o && o->have_version;
	uint64_t version = o ? o->version : 0;
	int r = apply_pack(rc, in, o, res, &have_version, &version, e);
	if (!r)
		r = dcr_applied_record(rc, res, have_version, version, o ? o->fault : NULL, e);
	return r;
}
