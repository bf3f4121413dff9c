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

#include "core/manifest.h"
#include "core/util.h"
#include "refit/apply-pack.h"
#include "refit/commit.h"
#include "refit/journal.h"
#include "refit/plan.h"
#include "refit/stage.h"

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
				if ((t->flags & DCR_TENSOR_NEW) ||
				    !dcr_ckpt_tensor_is(ct, t->dtype, t->ndim, t->shape)) {
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

static int apply_pack(struct dcr_receiver *rc, struct dcr_pack_in *in,
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
	if ((r = ap_begin(rc, o, res, e)))
		goto out;
	if ((r = ap_current_state(rc, &c, &cur, &cur_dg, e)))
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
		ap_step(&x); /* between payloads: nothing durable yet */
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
	if ((r = ap_check_bases(&p, c, rc->dir, &cur, o ? o->head : NULL, s.xor_seen, e)))
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
	r = ap_commit_plan(&x, &p, c, &cur, cur_dg, (struct item_src){spool_next, &s}, res, e);
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
	ap_plan_free(&p);
	return r;
}

int dcr_apply_pack(struct dcr_receiver *rc, struct dcr_pack_in *in,
		   const struct dcr_apply_opts *o, struct dcr_apply_result *res,
		   struct dcr_err *e)
{
	struct dcr_apply_result tmp;
	if (!res)
		res = &tmp;
	int r = apply_pack(rc, in, o, res, e);
	if (!r)
		r = dcr_applied_record(rc, res, o && o->have_version, o ? o->version : 0,
				       o ? o->fault : NULL, e);
	return r;
}
