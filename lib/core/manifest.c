/* manifest.c - a pack's manifest: its payloads, tensors and state ids. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/blake3.h"
#include "core/bytes.h"
#include "core/manifest.h"
#include "core/state.h"
#include "core/util.h"

/* ---- manifests ---- */

static int add_name(struct dcr_buf *b, const char *s)
{
	size_t n = strlen(s);
	return dcr_buf_add_varint(b, n) || dcr_buf_add(b, s, n);
}

int dcr_manifest_build(const struct dcr_manifest *m, struct dcr_buf *out, struct dcr_err *e)
{
	struct dcr_buf tb = {0};
	int r = dcr_buf_add(out, DCR_MANIFEST_MAGIC, 8) || dcr_buf_add_le32(out, DCR_PACK_VERSION) ||
		dcr_buf_add_le32(out, (m->nalt ? DCR_MANIFEST_BASES : 0) |
					      (m->dense ? DCR_MANIFEST_DENSE : 0) |
					      (m->pieces ? DCR_MANIFEST_PIECES : 0) |
					      (m->have_version ? DCR_MANIFEST_VERSION : 0) |
					      (m->pindex ? DCR_MANIFEST_INDEX : 0)) ||
		dcr_buf_add(out, m->base.b, 32) ||
		dcr_buf_add(out, m->target.b, 32) || dcr_buf_add(out, m->attempt, 16) ||
		dcr_buf_add_le32(out, m->npayloads);
	for (uint32_t i = 0; i < m->npayloads && !r; i++)
		r = dcr_buf_add_le64(out, m->psize[i]) || dcr_buf_add(out, m->pdigest[i].b, 32);
	r = r || dcr_buf_add_le32(out, m->ntensors);
	for (uint32_t i = 0; i < m->ntensors && !r; i++) {
		tb.len = 0;
		r = dcr_delta_tensor_body(&tb, &m->tensors[i]) || dcr_buf_add_varint(out, tb.len) ||
		    dcr_buf_add(out, tb.p, tb.len) || dcr_buf_add(out, m->tensors[i].digest.b, 32);
	}
	r = r || dcr_buf_add_le32(out, m->nremoved);
	for (uint32_t i = 0; i < m->nremoved && !r; i++)
		r = add_name(out, m->removed[i]);
	r = r || dcr_buf_add_le64(out, m->nitems) || dcr_buf_add_le64(out, m->nchanges);
	if (m->nalt) {
		r = r || dcr_buf_add_le32(out, m->nalt);
		for (uint32_t i = 0; i < m->nalt && !r; i++)
			r = dcr_buf_add(out, m->alt[i].b, 32);
	}
	if (m->pieces)
		r = r || dcr_buf_add_le32(out, m->piece_log2) ||
		    dcr_buf_add(out, m->pieces, m->npieces * 32);
	if (m->have_version) {
		const char *pol = m->policy ? m->policy : "";
		if (strlen(pol) > DCR_POLICY_MAX) {
			dcr_buf_free(&tb);
			return dcr_err_set(e, -EINVAL, "manifest: policy name longer than %d bytes",
					   DCR_POLICY_MAX);
		}
		r = r || dcr_buf_add_le64(out, m->version) || add_name(out, pol);
	}
	for (uint32_t i = 0; m->pindex && i < m->npayloads && !r; i++)
		r = dcr_buf_add_le32(out, m->pindex[i]);
	dcr_buf_free(&tb);
	if (r || dcr_buf_reserve(out, 32))
		return dcr_err_sys(e, ENOMEM, "manifest");
	dcr_digest d;
	dcr_sha256(out->p, out->len, &d);
	dcr_buf_add(out, d.b, 32);
	return 0;
}

void dcr_manifest_release(struct dcr_manifest *m)
{
	free(m->psize);
	free(m->pdigest);
	for (uint32_t i = 0; m->tensors && i < m->ntensors; i++)
		dcr_delta_tensor_clear(&m->tensors[i]);
	free(m->tensors);
	for (uint32_t i = 0; m->removed && i < m->nremoved; i++)
		free(m->removed[i]);
	free(m->removed);
	free(m->alt);
	free(m->pieces);
	free(m->piece0);
	free(m->policy);
	free(m->pindex);
	memset(m, 0, sizeof(*m));
}

int64_t dcr_manifest_find(const struct dcr_manifest *m, uint32_t idx)
{
	if (!m->pindex)
		return idx < m->npayloads ? (int64_t)idx : -1;
	uint32_t lo = 0, hi = m->npayloads;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (m->pindex[mid] < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < m->npayloads && m->pindex[lo] == idx ? (int64_t)lo : -1;
}

void dcr_piece_check_init(struct dcr_piece_check *c, const struct dcr_manifest *m, uint32_t i,
			  uint64_t pos)
{
	memset(c, 0, sizeof(*c));
	c->m = m;
	c->i = i;
	c->pos = pos;
	c->end = m->psize[i] - 32;
}

long dcr_piece_check_feed(struct dcr_piece_check *c, const uint8_t **p, size_t *n, int *ok)
{
	const struct dcr_manifest *m = c->m;
	if (!*n || c->pos >= c->end)
		return -1;
	uint64_t k = c->pos >> m->piece_log2, stop = (k + 1) << m->piece_log2;
	if (stop > c->end)
		stop = c->end;
	if (!c->open) {
		dcr_blake3_init_at(&c->h, c->pos / 1024);
		c->open = 1;
	}
	size_t take = stop - c->pos < *n ? (size_t)(stop - c->pos) : *n;
	dcr_blake3_update(&c->h, *p, take);
	*p += take;
	*n -= take;
	c->pos += take;
	if (c->pos < stop)
		return -1;
	uint8_t cv[32];
	dcr_blake3_final_piece(&c->h, m->piece0[c->i + 1] - m->piece0[c->i], cv);
	c->open = 0;
	*ok = !DCR_CHECKSUM_DIFFERS(cv, m->pieces[m->piece0[c->i] + k]);
	return (long)k;
}

/* The pieces section: log2, then every payload's piece CVs, which must
 * add up to the payload's digest. */
static int parse_pieces(struct dcr_rd *rd, const char *what, struct dcr_manifest *m,
			struct dcr_err *e)
{
	uint32_t lg = dcr_rd_le32(rd);
	if (rd->bad || lg < 10 || lg > 30)
		return dcr_err_set(e, DCR_EFORMAT, "%s: bad piece size 2^%u", what, lg);
	m->piece_log2 = lg;
	if (!(m->piece0 = dcr_calloc(m->npayloads + 1, sizeof(size_t))))
		return -ENOMEM;
	size_t total = 0;
	for (uint32_t i = 0; i < m->npayloads; i++) {
		if (m->psize[i] < DCR_PAYLOAD_HDR_LEN + 32 || m->psize[i] > DCR_PAYLOAD_MAX_FILE)
			return dcr_err_set(e, DCR_EFORMAT, "%s: payload %u is %llu bytes", what, i,
					   (unsigned long long)m->psize[i]);
		m->piece0[i] = total;
		total += dcr_manifest_npieces(m, i);
		if (total > dcr_rd_left(rd) / 32)
			return dcr_err_set(e, DCR_EFORMAT, "%s: the piece table is cut short", what);
	}
	m->piece0[m->npayloads] = total;
	if (!(m->pieces = dcr_calloc(total ? total : 1, 32)))
		return -ENOMEM;
	if (total)
		memcpy(m->pieces, dcr_rd_bytes(rd, total * 32), total * 32);
	m->npieces = total;
	for (uint32_t i = 0; i < m->npayloads; i++) {
		dcr_digest root;
		dcr_blake3_root_of_pieces((const uint8_t(*)[32])m->pieces + m->piece0[i],
					  m->piece0[i + 1] - m->piece0[i], &root);
		if (DCR_CHECKSUM_DIFFERS(root.b, m->pdigest[i].b))
			return dcr_err_set(e, DCR_EDIGEST,
					   "%s is corrupt: the pieces of payload %u do not add up to its digest",
					   what, i);
	}
	return 0;
}

/* The manifest's tensor table: TENSOR record bodies, each with its target
 * digest, in name order; 0, -ENOMEM, or 1 when it is malformed. */
static int read_tensors(struct dcr_rd *rd, struct dcr_manifest *m, uint64_t *names,
			struct dcr_err *e)
{
	uint32_t nt = dcr_rd_le32(rd);
	if (rd->bad || nt > dcr_rd_left(rd) / 40 || nt > DCR_DELTA_TENSORS_MAX)
		return 1;
	m->tensors = dcr_calloc(nt, sizeof(*m->tensors));
	if (!m->tensors)
		return -ENOMEM;
	for (uint32_t i = 0; i < nt; i++) {
		uint64_t bl = dcr_rd_varint(rd);
		/* their bodies within a delta's bound (each is kept) */
		if (rd->bad || dcr_delta_names_take(names, bl))
			return 1;
		const uint8_t *body = dcr_rd_bytes(rd, bl);
		const uint8_t *dg = dcr_rd_bytes(rd, 32);
		if (!body || !dg)
			return 1;
		struct dcr_delta_rec rec = {.type = DCR_REC_TENSOR, .len = bl, .body = body};
		if (dcr_delta_parse_tensor(&rec, &m->tensors[i], e))
			return 1;
		m->ntensors = i + 1;
		memcpy(m->tensors[i].digest.b, dg, 32);
		m->tensors[i].have_digest = 1;
		if (i && strcmp(m->tensors[i - 1].name, m->tensors[i].name) >= 0)
			return 1;
	}
	return 0;
}

/* Whether the tensor table adds up to the target state id the manifest
 * names: 1 or 0, or -ENOMEM. */
static int tensors_add_up(const struct dcr_manifest *m)
{
	dcr_digest d;
	struct dcr_state_entry *ent = dcr_calloc(m->ntensors, sizeof(*ent));
	if (!ent)
		return -ENOMEM;
	for (uint32_t i = 0; i < m->ntensors; i++) {
		ent[i].name = m->tensors[i].name;
		ent[i].dtype = m->tensors[i].dtype;
		ent[i].ndim = m->tensors[i].ndim;
		ent[i].shape = m->tensors[i].shape;
		ent[i].digest = m->tensors[i].digest;
	}
	dcr_state_id(ent, m->ntensors, &d);
	free(ent);
	return !memcmp(d.b, m->target.b, 32);
}

/* The parts of a manifest after its tensor table, each 0, 1 when
 * malformed, or -ENOMEM; what they fill is freed with the manifest. */

/* The removed tensors' names. */
static int read_removed(struct dcr_rd *rd, struct dcr_manifest *m, uint64_t *names)
{
	uint32_t nr = dcr_rd_le32(rd);
	if (rd->bad || nr > dcr_rd_left(rd) || nr + (uint64_t)m->ntensors > DCR_DELTA_TENSORS_MAX)
		return 1;
	if (!(m->removed = dcr_calloc(nr, sizeof(char *))))
		return -ENOMEM;
	for (uint32_t i = 0; i < nr; i++) {
		uint64_t n = dcr_rd_varint(rd);
		const uint8_t *s = rd->bad || n > 65535 || dcr_delta_names_take(names, n + 1)
					   ? NULL
					   : dcr_rd_bytes(rd, n);
		if (!s || memchr(s, 0, n))
			return 1;
		m->removed[i] = strndup((const char *)s, n);
		m->nremoved = i + 1;
		if (!m->removed[i])
			return -ENOMEM;
	}
	return 0;
}

/* DCR_MANIFEST_BASES: the alternative bases of an overwrite-only retry. */
static int read_alt(struct dcr_rd *rd, struct dcr_manifest *m)
{
	uint32_t na = dcr_rd_le32(rd);
	if (rd->bad || !na || na > 4096 || dcr_rd_left(rd) < (size_t)na * 32)
		return 1;
	if (!(m->alt = dcr_calloc(na, sizeof(dcr_digest))))
		return -ENOMEM;
	for (uint32_t i = 0; i < na; i++)
		memcpy(m->alt[i].b, dcr_rd_bytes(rd, 32), 32);
	m->nalt = na;
	return 0;
}

int dcr_policy_name_ok(const char *s, size_t n)
{
	if (!n || n > DCR_POLICY_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e || s[i] == '/')
			return 0;
	return 1;
}

/* DCR_MANIFEST_VERSION: the version the pack reaches and its policy
 * (empty, or a policy name). */
static int read_version(struct dcr_rd *rd, struct dcr_manifest *m)
{
	m->version = dcr_rd_le64(rd);
	uint64_t n = dcr_rd_varint(rd);
	const uint8_t *s = rd->bad || n > DCR_POLICY_MAX ? NULL : dcr_rd_bytes(rd, n);
	if (!s || (n && !dcr_policy_name_ok((const char *)s, (size_t)n)))
		return 1;
	if (!(m->policy = strndup((const char *)s, n)))
		return -ENOMEM;
	m->have_version = 1;
	return 0;
}

/* DCR_MANIFEST_INDEX: each payload's index, strictly increasing. */
static int read_index(struct dcr_rd *rd, struct dcr_manifest *m)
{
	if (rd->bad || m->npayloads > dcr_rd_left(rd) / 4)
		return 1;
	if (!(m->pindex = dcr_calloc(m->npayloads ? m->npayloads : 1, sizeof(uint32_t))))
		return -ENOMEM;
	for (uint32_t i = 0; i < m->npayloads; i++) {
		m->pindex[i] = dcr_rd_le32(rd);
		if (i && m->pindex[i] <= m->pindex[i - 1])
			return 1; /* no payload twice */
	}
	return 0;
}

/* The head's fields, magic and length checked: version, flags, base,
 * target, attempt (DCR_MANIFEST_HEAD_LEN bytes). */
static int parse_head(const uint8_t *buf, const char *what, struct dcr_manifest *m,
		      struct dcr_err *e)
{
	uint32_t version = get_le32(buf + 8), flags = get_le32(buf + 12);
	if (version == 1)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s is a version 1 manifest, packed by an older dcr (SHA-256 tensor digests): make the delta again with this dcr-diff and dcr-pack",
				   what);
	if (version != DCR_PACK_VERSION)
		return dcr_err_version(e, what, "manifest", version, DCR_PACK_VERSION);
	if (flags & ~(uint32_t)(DCR_MANIFEST_BASES | DCR_MANIFEST_DENSE | DCR_MANIFEST_PIECES |
				DCR_MANIFEST_VERSION | DCR_MANIFEST_INDEX))
		return dcr_err_set(e, DCR_EFORMAT, "%s: unknown manifest flags 0x%x", what, flags);
	m->dense = (flags & DCR_MANIFEST_DENSE) != 0;
	memcpy(m->base.b, buf + 16, 32);
	memcpy(m->target.b, buf + 48, 32);
	memcpy(m->attempt, buf + 80, 16);
	return 0;
}

int dcr_manifest_head(const uint8_t *buf, size_t len, const char *what, struct dcr_manifest *m,
		      struct dcr_err *e)
{
	memset(m, 0, sizeof(*m));
	if (len < DCR_MANIFEST_HEAD_LEN || memcmp(buf, DCR_MANIFEST_MAGIC, 8))
		return dcr_err_set(e, DCR_EFORMAT, "%s is not a dcr manifest", what);
	return parse_head(buf, what, m, e);
}

int dcr_manifest_parse(const uint8_t *buf, size_t len, const char *what, struct dcr_manifest *m,
		       struct dcr_err *e)
{
	memset(m, 0, sizeof(*m));
	if (len < DCR_MANIFEST_HEAD_LEN + 32 || memcmp(buf, DCR_MANIFEST_MAGIC, 8))
		return dcr_err_set(e, DCR_EFORMAT, "%s is not a dcr manifest", what);
	/* a newer dcr's manifest is told as one, whatever its checksum is */
	if (get_le32(buf + 8) > DCR_PACK_VERSION)
		return dcr_err_version(e, what, "manifest", get_le32(buf + 8), DCR_PACK_VERSION);
	dcr_digest d;
	dcr_sha256(buf, len - 32, &d);
	if (DCR_CHECKSUM_DIFFERS(d.b, buf + len - 32))
		return dcr_err_set(e, DCR_EDIGEST, "%s is corrupt: checksum mismatch", what);
	int r = parse_head(buf, what, m, e);
	if (r)
		return r;
	const uint32_t flags = get_le32(buf + 12);
	struct dcr_rd rd;
	dcr_rd_init(&rd, buf + DCR_MANIFEST_HEAD_LEN, len - DCR_MANIFEST_HEAD_LEN - 32);
	m->npayloads = dcr_rd_le32(&rd);
	if (rd.bad || m->npayloads > dcr_rd_left(&rd) / 40 || m->npayloads > DCR_PAYLOADS_MAX)
		goto bad;
	m->psize = dcr_calloc(m->npayloads, sizeof(uint64_t));
	m->pdigest = dcr_calloc(m->npayloads, sizeof(dcr_digest));
	if (!m->psize || !m->pdigest)
		goto oom;
	for (uint32_t i = 0; i < m->npayloads; i++) {
		m->psize[i] = dcr_rd_le64(&rd);
		const uint8_t *p = dcr_rd_bytes(&rd, 32);
		if (!p)
			goto bad;
		/* sizes bound what readers set aside for a payload */
		if (m->psize[i] < DCR_PAYLOAD_HDR_LEN + 32 || m->psize[i] > DCR_PAYLOAD_MAX_FILE) {
			uint64_t sz = m->psize[i];
			dcr_manifest_release(m);
			return dcr_err_set(e, DCR_EFORMAT, "%s: payload %u is %llu bytes", what, i,
					   (unsigned long long)sz);
		}
		memcpy(m->pdigest[i].b, p, 32);
	}
	uint64_t names = 0; /* the bytes of the names kept, as a delta's */
	r = read_tensors(&rd, m, &names, e);
	if (r == -ENOMEM)
		goto oom;
	if (r)
		goto bad;
	if ((r = read_removed(&rd, m, &names)) == -ENOMEM)
		goto oom;
	if (r)
		goto bad;
	m->nitems = dcr_rd_le64(&rd);
	m->nchanges = dcr_rd_le64(&rd);
	if ((flags & DCR_MANIFEST_BASES) && (r = read_alt(&rd, m))) {
		if (r == -ENOMEM)
			goto oom;
		goto bad;
	}
	if (flags & DCR_MANIFEST_PIECES) {
		r = parse_pieces(&rd, what, m, e);
		if (r == -ENOMEM)
			goto oom;
		if (r) {
			dcr_manifest_release(m);
			return r;
		}
	}
	if ((flags & DCR_MANIFEST_VERSION) && (r = read_version(&rd, m))) {
		if (r == -ENOMEM)
			goto oom;
		goto bad;
	}
	if ((flags & DCR_MANIFEST_INDEX) && (r = read_index(&rd, m))) {
		if (r == -ENOMEM)
			goto oom;
		goto bad;
	}
	if (rd.bad || dcr_rd_left(&rd))
		goto bad;
	/* the tensor table must add up to the target state id */
	if ((r = tensors_add_up(m)) < 0)
		goto oom;
	if (!r) {
		dcr_manifest_release(m);
		return dcr_err_set(e, DCR_EDIGEST,
				   "%s: its tensors do not add up to the target state id it names", what);
	}
	return 0;
bad:
	dcr_manifest_release(m);
	return dcr_err_set(e, DCR_EFORMAT, "%s is malformed", what);
oom:
	dcr_manifest_release(m);
	return dcr_err_sys(e, ENOMEM, "%s", what);
}

