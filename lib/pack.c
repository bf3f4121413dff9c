/* pack.c - payloads, manifests, the packer, and pack I/O (directory, tar). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <zstd.h>

#include "pack.h"

#define PAYLOAD_FILE_MAX (2ull << 30)

/* ---- payloads ---- */

char *dcr_payload_name(uint32_t index)
{
	return dcr_asprintf("payload-%06u.dcrp", index);
}

int dcr_payload_name_parse(const char *name, uint32_t *index)
{
	if (strncmp(name, "payload-", 8))
		return 0;
	const char *p = name + 8;
	uint64_t v = 0;
	size_t digits = 0;
	while (*p >= '0' && *p <= '9' && digits < 10) {
		v = v * 10 + (uint64_t)(*p++ - '0');
		digits++;
	}
	if (digits < 6 || strcmp(p, ".dcrp") || v > UINT32_MAX)
		return 0;
	*index = (uint32_t)v;
	return 1;
}

int dcr_payload_build(const dcr_digest *base, const uint8_t attempt[16], uint32_t index,
		      const uint8_t *raw, size_t raw_len, enum dcr_payload_digest_alg alg,
		      struct dcr_buf *out, dcr_digest *digest, struct dcr_buf *pieces,
		      struct dcr_err *e)
{
	size_t bound = ZSTD_compressBound(raw_len);
	out->len = 0;
	if (dcr_buf_reserve(out, DCR_PAYLOAD_HDR_LEN + bound + 32))
		return dcr_err_sys(e, ENOMEM, "payload %u", index);
	uint8_t *h = out->p;
	size_t zl = ZSTD_compress(h + DCR_PAYLOAD_HDR_LEN, bound, raw, raw_len, 1);
	if (ZSTD_isError(zl))
		return dcr_err_set(e, DCR_EFORMAT, "payload %u: zstd: %s", index,
				   ZSTD_getErrorName(zl));
	memcpy(h, DCR_PAYLOAD_MAGIC, 8);
	put_le32(h + 8, DCR_PACK_VERSION);
	put_le32(h + 12, alg == DCR_PDIGEST_SHA256 ? 0 : DCR_PAYLOAD_BLAKE3);
	memcpy(h + 16, base->b, 32);
	memcpy(h + 48, attempt, 16);
	put_le32(h + 64, index);
	put_le32(h + 68, DCR_PAYLOAD_ZSTD);
	put_le64(h + 72, raw_len);
	put_le64(h + 80, zl);
	put_le64(h + 88, 0);
	out->len = DCR_PAYLOAD_HDR_LEN + zl;
	if (pieces && alg == DCR_PDIGEST_BLAKE3) {
		size_t np = dcr_blake3_npieces(out->len, DCR_PIECE_LOG2), at = pieces->len;
		if (dcr_buf_reserve(pieces, np * 32))
			return dcr_err_sys(e, ENOMEM, "payload %u", index);
		dcr_blake3_pieces(out->p, out->len, DCR_PIECE_LOG2,
				  (uint8_t(*)[32])(pieces->p + at), digest);
		pieces->len += np * 32;
	} else {
		dcr_payload_digest(out->p, out->len, digest);
	}
	memcpy(out->p + out->len, digest->b, 32);
	out->len += 32;
	return 0;
}

static int payload_alg(const uint8_t *head, size_t n)
{
	return n >= 16 && get_le32(head + 12) & DCR_PAYLOAD_BLAKE3 ? DCR_PDIGEST_BLAKE3
								   : DCR_PDIGEST_SHA256;
}

void dcr_payload_digest(const uint8_t *buf, size_t len, dcr_digest *out)
{
	if (payload_alg(buf, len) == DCR_PDIGEST_BLAKE3)
		dcr_blake3(buf, len, out);
	else
		dcr_sha256(buf, len, out);
}

void dcr_payload_hash_init(struct dcr_payload_hash *h)
{
	h->nhead = 0;
	h->alg = -1;
	h->bad = 0;
	h->sha = NULL;
}

static void payload_hash_feed(struct dcr_payload_hash *h, const void *p, size_t n)
{
	if (h->alg == DCR_PDIGEST_BLAKE3)
		dcr_blake3_update(&h->b3, p, n);
	else if (h->sha)
		dcr_sha_update(h->sha, p, n);
}

/* The algorithm is known once the 16 bytes up to the flags are in. */
void dcr_payload_hash_update(void *arg, const void *p, size_t n)
{
	struct dcr_payload_hash *h = arg;
	if (h->alg < 0) {
		size_t k = n < 16 - h->nhead ? n : 16 - h->nhead;
		memcpy(h->head + h->nhead, p, k);
		h->nhead += k;
		if (h->nhead < 16)
			return;
		h->alg = payload_alg(h->head, 16);
		if (h->alg == DCR_PDIGEST_BLAKE3)
			dcr_blake3_init(&h->b3);
		else if (!(h->sha = dcr_sha_new()))
			h->bad = 1;
		if (h->nhead > k) { /* the head came in pieces */
			payload_hash_feed(h, h->head, 16);
			p = (const uint8_t *)p + k;
			n -= k;
		}
	}
	payload_hash_feed(h, p, n);
}

int dcr_payload_hash_final(struct dcr_payload_hash *h, dcr_digest *out)
{
	if (h->alg < 0) { /* under 16 bytes: not a payload; any digest will do */
		dcr_sha256(h->head, h->nhead, out);
		return 0;
	}
	if (h->alg == DCR_PDIGEST_BLAKE3)
		dcr_blake3_final(&h->b3, out);
	else if (h->sha)
		dcr_sha_final(h->sha, out);
	dcr_sha_free(h->sha);
	h->sha = NULL;
	return h->bad ? -1 : 0;
}

int dcr_payload_check(const uint8_t *buf, size_t len, const char *what,
		      struct dcr_payload *p, struct dcr_err *e)
{
	return dcr_payload_check_digest(buf, len, what, NULL, p, e);
}

/* magic, version, flags, fields and body_len of a payload of len bytes */
static int check_fields(const uint8_t *buf, size_t avail, uint64_t len, const char *what,
			struct dcr_payload *p, struct dcr_err *e)
{
	memset(p, 0, sizeof(*p));
	if (len < DCR_PAYLOAD_HDR_LEN + 32 || avail < DCR_PAYLOAD_HDR_LEN ||
	    memcmp(buf, DCR_PAYLOAD_MAGIC, 8))
		return dcr_err_set(e, DCR_EFORMAT, "%s is not a dcr payload", what);
	p->version = get_le32(buf + 8);
	p->flags = get_le32(buf + 12);
	if (p->version != DCR_PACK_VERSION)
		return dcr_err_set(e, DCR_EFORMAT, "%s: unsupported payload version %u", what,
				   p->version);
	if (p->flags & ~DCR_PAYLOAD_BLAKE3)
		return dcr_err_set(e, DCR_EFORMAT, "%s: unknown payload flags 0x%x", what,
				   p->flags & ~DCR_PAYLOAD_BLAKE3);
	memcpy(p->base.b, buf + 16, 32);
	memcpy(p->attempt, buf + 48, 16);
	p->index = get_le32(buf + 64);
	p->codec = get_le32(buf + 68);
	p->raw_len = get_le64(buf + 72);
	p->body_len = get_le64(buf + 80);
	if (get_le64(buf + 88))
		return dcr_err_set(e, DCR_EFORMAT, "%s: reserved header field is not zero", what);
	if (p->body_len != len - DCR_PAYLOAD_HDR_LEN - 32)
		return dcr_err_set(e, DCR_EFORMAT, "%s: body is %llu bytes, the header says %llu%s",
				   what, (unsigned long long)(len - DCR_PAYLOAD_HDR_LEN - 32),
				   (unsigned long long)p->body_len,
				   len - DCR_PAYLOAD_HDR_LEN - 32 < p->body_len ? " (truncated)" : "");
	return 0;
}

/* raw_len, codec and the zstd frame's stated size, from avail bytes */
static int check_body(const uint8_t *buf, size_t avail, const char *what,
		      const struct dcr_payload *p, struct dcr_err *e)
{
	if (p->raw_len > DCR_PAYLOAD_MAX_RAW)
		return dcr_err_set(e, DCR_EFORMAT, "%s: %llu raw bytes is too large", what,
				   (unsigned long long)p->raw_len);
	const uint8_t *body = buf + DCR_PAYLOAD_HDR_LEN;
	size_t have = avail - DCR_PAYLOAD_HDR_LEN < p->body_len ? avail - DCR_PAYLOAD_HDR_LEN
								 : (size_t)p->body_len;
	if (p->codec == DCR_PAYLOAD_STORED) {
		if (p->raw_len != p->body_len)
			goto bad;
	} else if (p->codec == DCR_PAYLOAD_ZSTD) {
		/* a frame header is at most 18 bytes (ZSTD_FRAMEHEADERSIZE_MAX) */
		int whole = have == p->body_len || have >= 18;
		if (whole && ZSTD_getFrameContentSize(body, have) != p->raw_len)
			goto bad;
	} else {
		return dcr_err_set(e, DCR_EFORMAT, "%s: unknown payload codec %u", what, p->codec);
	}
	return 0;
bad:
	return dcr_err_set(e, DCR_EFORMAT, "%s: body does not decompress to its stated size", what);
}

int dcr_payload_check_digest(const uint8_t *buf, size_t len, const char *what,
			     const dcr_digest *sum, struct dcr_payload *p, struct dcr_err *e)
{
	int r = check_fields(buf, len, len, what, p, e);
	if (r)
		return r;
	if (sum)
		p->digest = *sum;
	else
		dcr_payload_digest(buf, len - 32, &p->digest);
	if (DCR_CHECKSUM_DIFFERS(p->digest.b, buf + len - 32))
		return dcr_err_set(e, DCR_EDIGEST, "%s is corrupt: checksum mismatch", what);
	return check_body(buf, len, what, p, e);
}

int dcr_payload_check_head(const uint8_t *buf, size_t avail, uint64_t len, const char *what,
			   struct dcr_payload *p, struct dcr_err *e)
{
	int r = check_fields(buf, avail, len, what, p, e);
	return r ? r : check_body(buf, avail, what, p, e);
}

int dcr_payload_open(const uint8_t *buf, size_t len, const char *what,
		     struct dcr_payload *p, struct dcr_err *e)
{
	int r = dcr_payload_check(buf, len, what, p, e);
	if (r)
		return r;
	const uint8_t *body = buf + DCR_PAYLOAD_HDR_LEN;
	p->raw = malloc(p->raw_len + 1);
	if (!p->raw)
		return dcr_err_sys(e, ENOMEM, "%s", what);
	if (p->codec == DCR_PAYLOAD_STORED) {
		memcpy(p->raw, body, p->raw_len);
	} else {
		size_t got = ZSTD_decompress(p->raw, p->raw_len, body, p->body_len);
		if (ZSTD_isError(got) || got != p->raw_len)
			goto bad;
	}
	return 0;
bad:
	dcr_payload_release(p);
	return dcr_err_set(e, DCR_EFORMAT, "%s: body does not decompress to its stated size", what);
}

void dcr_payload_release(struct dcr_payload *p)
{
	free(p->raw);
	p->raw = NULL;
}

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
					      (m->pieces ? DCR_MANIFEST_PIECES : 0)) ||
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
	memset(m, 0, sizeof(*m));
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

int dcr_manifest_parse(const uint8_t *buf, size_t len, const char *what, struct dcr_manifest *m,
		       struct dcr_err *e)
{
	memset(m, 0, sizeof(*m));
	if (len < 8 + 8 + 32 + 32 + 16 + 32 || memcmp(buf, DCR_MANIFEST_MAGIC, 8))
		return dcr_err_set(e, DCR_EFORMAT, "%s is not a dcr manifest", what);
	dcr_digest d;
	dcr_sha256(buf, len - 32, &d);
	if (DCR_CHECKSUM_DIFFERS(d.b, buf + len - 32))
		return dcr_err_set(e, DCR_EDIGEST, "%s is corrupt: checksum mismatch", what);
	struct dcr_rd rd;
	dcr_rd_init(&rd, buf + 8, len - 8 - 32);
	uint32_t version = dcr_rd_le32(&rd), flags = dcr_rd_le32(&rd);
	if (version != DCR_PACK_VERSION)
		return dcr_err_set(e, DCR_EFORMAT, "%s: unsupported manifest version %u", what, version);
	if (flags & ~(uint32_t)(DCR_MANIFEST_BASES | DCR_MANIFEST_DENSE | DCR_MANIFEST_PIECES))
		return dcr_err_set(e, DCR_EFORMAT, "%s: unknown manifest flags 0x%x", what, flags);
	m->dense = (flags & DCR_MANIFEST_DENSE) != 0;
	memcpy(m->base.b, dcr_rd_bytes(&rd, 32), 32);
	memcpy(m->target.b, dcr_rd_bytes(&rd, 32), 32);
	memcpy(m->attempt, dcr_rd_bytes(&rd, 16), 16);
	m->npayloads = dcr_rd_le32(&rd);
	if (rd.bad || m->npayloads > dcr_rd_left(&rd) / 40)
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
		memcpy(m->pdigest[i].b, p, 32);
	}
	uint32_t nt = dcr_rd_le32(&rd);
	if (rd.bad || nt > dcr_rd_left(&rd) / 40)
		goto bad;
	m->tensors = dcr_calloc(nt, sizeof(*m->tensors));
	if (!m->tensors)
		goto oom;
	for (uint32_t i = 0; i < nt; i++) {
		uint64_t bl = dcr_rd_varint(&rd);
		const uint8_t *body = rd.bad ? NULL : dcr_rd_bytes(&rd, bl);
		const uint8_t *dg = dcr_rd_bytes(&rd, 32);
		if (!body || !dg)
			goto bad;
		struct dcr_delta_rec rec = {.type = DCR_REC_TENSOR, .len = bl, .body = body};
		if (dcr_delta_parse_tensor(&rec, &m->tensors[i], e))
			goto bad;
		m->ntensors = i + 1;
		memcpy(m->tensors[i].digest.b, dg, 32);
		m->tensors[i].have_digest = 1;
		if (i && strcmp(m->tensors[i - 1].name, m->tensors[i].name) >= 0)
			goto bad;
	}
	uint32_t nr = dcr_rd_le32(&rd);
	if (rd.bad || nr > dcr_rd_left(&rd))
		goto bad;
	m->removed = dcr_calloc(nr, sizeof(char *));
	if (!m->removed)
		goto oom;
	for (uint32_t i = 0; i < nr; i++) {
		uint64_t n = dcr_rd_varint(&rd);
		const uint8_t *s = rd.bad || n > 65535 ? NULL : dcr_rd_bytes(&rd, n);
		if (!s || memchr(s, 0, n))
			goto bad;
		m->removed[i] = strndup((const char *)s, n);
		m->nremoved = i + 1;
		if (!m->removed[i])
			goto oom;
	}
	m->nitems = dcr_rd_le64(&rd);
	m->nchanges = dcr_rd_le64(&rd);
	if (flags & DCR_MANIFEST_BASES) {
		uint32_t na = dcr_rd_le32(&rd);
		if (rd.bad || !na || na > 4096 || dcr_rd_left(&rd) < (size_t)na * 32)
			goto bad;
		if (!(m->alt = dcr_calloc(na, sizeof(dcr_digest))))
			goto oom;
		for (uint32_t i = 0; i < na; i++)
			memcpy(m->alt[i].b, dcr_rd_bytes(&rd, 32), 32);
		m->nalt = na;
	}
	if (flags & DCR_MANIFEST_PIECES) {
		int r = parse_pieces(&rd, what, m, e);
		if (r == -ENOMEM)
			goto oom;
		if (r) {
			dcr_manifest_release(m);
			return r;
		}
	}
	if (rd.bad || dcr_rd_left(&rd))
		goto bad;
	/* the tensor table must add up to the target state id */
	struct dcr_state_entry *ent = dcr_calloc(m->ntensors, sizeof(*ent));
	if (!ent)
		goto oom;
	for (uint32_t i = 0; i < m->ntensors; i++) {
		ent[i].name = m->tensors[i].name;
		ent[i].dtype = m->tensors[i].dtype;
		ent[i].ndim = m->tensors[i].ndim;
		ent[i].shape = m->tensors[i].shape;
		ent[i].digest = m->tensors[i].digest;
	}
	dcr_state_id(ent, m->ntensors, &d);
	free(ent);
	if (memcmp(d.b, m->target.b, 32)) {
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
	int r = dcr_payload_build(&k->m.base, k->m.attempt, idx, k->raw.p, k->raw.len,
				  k->o ? k->o->digest : DCR_PDIGEST_BLAKE3, &k->img, &d, &k->pieces, e);
	if (r)
		return r;
	uint64_t *ps = realloc(k->m.psize, (idx + 1) * sizeof(uint64_t));
	if (ps)
		k->m.psize = ps;
	dcr_digest *pd = realloc(k->m.pdigest, (idx + 1) * sizeof(dcr_digest));
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

/* ---- pack outputs ---- */

int dcr_pack_dir_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
		       struct dcr_err *e)
{
	const char *dir = ctx;
	int r = dcr_mkdir_p(dir, e);
	if (r)
		return r;
	char *path = dcr_path_join(dir, name);
	r = path ? dcr_write_file_atomic(path, buf, len, e) : dcr_err_sys(e, ENOMEM, "%s", dir);
	free(path);
	return r;
}

int dcr_pack_dir_stage(void *ctx, const char *name, const uint8_t *buf, size_t len, void **tok,
		       struct dcr_err *e)
{
	const char *dir = ctx;
	struct dcr_atomic *a = dcr_calloc(1, sizeof(*a));
	char *path = a ? dcr_path_join(dir, name) : NULL;
	int r = !path ? dcr_err_sys(e, ENOMEM, "%s", dir) : dcr_mkdir_p(dir, e);
	if (!r && !(r = dcr_atomic_open(a, path, e))) {
		if ((r = dcr_write_full(a->fd, buf, len)))
			r = dcr_err_sys(e, -r, "cannot write '%s'", a->tmp);
		else
			r = dcr_atomic_sync(a, e);
		if (r)
			dcr_atomic_abort(a);
	}
	free(path);
	if (r) {
		free(a);
		return r;
	}
	*tok = a;
	return 0;
}

int dcr_pack_dir_commit(void *ctx, void *tok, struct dcr_err *e)
{
	(void)ctx;
	int r = dcr_atomic_commit(tok, e);
	free(tok);
	return r;
}

void dcr_pack_dir_drop(void *ctx, void *tok)
{
	(void)ctx;
	dcr_atomic_abort(tok);
	free(tok);
}

struct dcr_tar_out {
	struct archive *a;
	int fd;
	int err;
	char name[64]; /* the entry being written, for messages */
};

static la_ssize_t tar_write_cb(struct archive *a, void *ctx, const void *buf, size_t n)
{
	(void)a;
	struct dcr_tar_out *t = ctx;
	int r = dcr_write_full(t->fd, buf, n);
	if (r) {
		t->err = -r;
		return -1;
	}
	return (la_ssize_t)n;
}

int dcr_tar_out_open(int fd, struct dcr_tar_out **out, struct dcr_err *e)
{
	struct dcr_tar_out *t = dcr_calloc(1, sizeof(*t));
	if (!t)
		return dcr_err_sys(e, ENOMEM, "tar");
	t->fd = fd;
	t->a = archive_write_new();
	if (!t->a || archive_write_set_format_pax_restricted(t->a) != ARCHIVE_OK ||
	    archive_write_add_filter_none(t->a) != ARCHIVE_OK ||
	    archive_write_set_bytes_per_block(t->a, 0) != ARCHIVE_OK ||
	    archive_write_open(t->a, t, NULL, tar_write_cb, NULL) != ARCHIVE_OK) {
		int r = dcr_err_set(e, DCR_EFORMAT, "cannot start a tar stream: %s",
				    t->a ? archive_error_string(t->a) : "out of memory");
		if (t->a)
			archive_write_free(t->a);
		free(t);
		return r;
	}
	*out = t;
	return 0;
}

static int tar_fail(struct dcr_tar_out *t, struct dcr_err *e)
{
	return t->err ? dcr_err_sys(e, t->err, "cannot write the pack stream (entry '%s')", t->name)
		      : dcr_err_set(e, DCR_EFORMAT, "tar: %s", archive_error_string(t->a));
}

int dcr_tar_out_begin(void *ctx, const char *name, uint64_t len, struct dcr_err *e)
{
	struct dcr_tar_out *t = ctx;
	struct archive_entry *en = archive_entry_new();
	if (!en)
		return dcr_err_sys(e, ENOMEM, "tar");
	snprintf(t->name, sizeof(t->name), "%s", name);
	archive_entry_set_pathname(en, name);
	archive_entry_set_size(en, (la_int64_t)len);
	archive_entry_set_filetype(en, AE_IFREG);
	archive_entry_set_perm(en, 0644);
	archive_entry_set_mtime(en, time(NULL), 0);
	int r = archive_write_header(t->a, en) != ARCHIVE_OK;
	archive_entry_free(en);
	return r ? tar_fail(t, e) : 0;
}

int dcr_tar_out_data(void *ctx, const uint8_t *buf, size_t len, struct dcr_err *e)
{
	struct dcr_tar_out *t = ctx;
	for (size_t off = 0; off < len;) {
		la_ssize_t w = archive_write_data(t->a, buf + off, len - off);
		if (w <= 0)
			return tar_fail(t, e);
		off += (size_t)w;
	}
	return 0;
}

int dcr_tar_out_end(void *ctx, struct dcr_err *e)
{
	struct dcr_tar_out *t = ctx;
	return archive_write_finish_entry(t->a) != ARCHIVE_OK ? tar_fail(t, e) : 0;
}

int dcr_tar_out_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
		      struct dcr_err *e)
{
	int r = dcr_tar_out_begin(ctx, name, len, e);
	r = r ? r : dcr_tar_out_data(ctx, buf, len, e);
	return r ? r : dcr_tar_out_end(ctx, e);
}

int dcr_tar_out_close(struct dcr_tar_out *t, struct dcr_err *e)
{
	if (!t)
		return 0;
	int r = archive_write_close(t->a) != ARCHIVE_OK
			? (t->err ? dcr_err_sys(e, t->err, "cannot write the pack stream")
				  : dcr_err_set(e, DCR_EFORMAT, "tar: %s", archive_error_string(t->a)))
			: 0;
	archive_write_free(t->a);
	free(t);
	return r;
}

/* ---- pack inputs ---- */

struct dcr_pack_in {
	/* directory */
	char *dir;
	char **names;
	size_t n, next;
	struct dcr_blob cur; /* the current file, mapped */
	/* tar */
	struct archive *a;
	int fd;
	const uint8_t *head;
	size_t head_len, head_off;
	uint8_t rbuf[1 << 16];
	struct dcr_buf data;
	char *name;
};

static int cmp_entry(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	int mx = !strcmp(x, DCR_MANIFEST_NAME), my = !strcmp(y, DCR_MANIFEST_NAME);
	if (mx != my)
		return mx - my; /* manifest last */
	return strcmp(x, y);
}

int dcr_pack_in_open_dir(const char *dir, struct dcr_pack_in **out, struct dcr_err *e)
{
	DIR *d = opendir(dir);
	if (!d)
		return dcr_err_sys(e, errno, "cannot open pack '%s'", dir);
	struct dcr_pack_in *in = dcr_calloc(1, sizeof(*in));
	if (!in) {
		closedir(d);
		return dcr_err_sys(e, ENOMEM, "%s", dir);
	}
	in->fd = -1;
	in->dir = dcr_strdup(dir);
	struct dcr_ent;
	struct dirent *de;
	size_t cap = 0;
	int r = 0;
	while ((de = readdir(d))) {
		uint32_t idx;
		if (!dcr_payload_name_parse(de->d_name, &idx) && strcmp(de->d_name, DCR_MANIFEST_NAME))
			continue;
		if (in->n == cap) {
			cap = cap ? 2 * cap : 64;
			char **v = realloc(in->names, cap * sizeof(char *));
			if (!v) {
				r = dcr_err_sys(e, ENOMEM, "%s", dir);
				break;
			}
			in->names = v;
		}
		if (!(in->names[in->n++] = dcr_strdup(de->d_name))) {
			r = dcr_err_sys(e, ENOMEM, "%s", dir);
			break;
		}
	}
	closedir(d);
	if (r) {
		dcr_pack_in_close(in);
		return r;
	}
	if (in->n)
		qsort(in->names, in->n, sizeof(char *), cmp_entry);
	*out = in;
	return 0;
}

static la_ssize_t tar_read_cb(struct archive *a, void *ctx, const void **buf)
{
	(void)a;
	struct dcr_pack_in *in = ctx;
	if (in->head_off < in->head_len) {
		*buf = in->head + in->head_off;
		size_t n = in->head_len - in->head_off;
		in->head_off = in->head_len;
		return (la_ssize_t)n;
	}
	for (;;) {
		ssize_t n = read(in->fd, in->rbuf, sizeof(in->rbuf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			archive_set_error(a, errno, "read: %s", strerror(errno));
			return -1;
		}
		*buf = in->rbuf;
		return n;
	}
}

int dcr_pack_in_open_tar(int fd, const uint8_t *head, size_t head_len, struct dcr_pack_in **out,
			 struct dcr_err *e)
{
	struct dcr_pack_in *in = dcr_calloc(1, sizeof(*in));
	if (!in)
		return dcr_err_sys(e, ENOMEM, "pack stream");
	in->fd = fd;
	in->head = head;
	in->head_len = head_len;
	in->a = archive_read_new();
	if (!in->a || archive_read_support_format_tar(in->a) != ARCHIVE_OK ||
	    archive_read_support_filter_none(in->a) != ARCHIVE_OK ||
	    archive_read_open(in->a, in, NULL, tar_read_cb, NULL) != ARCHIVE_OK) {
		int r = dcr_err_set(e, DCR_EFORMAT, "input is neither a delta nor a pack stream%s%s",
				    in->a ? ": " : "", in->a ? archive_error_string(in->a) : "");
		dcr_pack_in_close(in);
		return r;
	}
	*out = in;
	return 0;
}

int dcr_pack_in_next(struct dcr_pack_in *in, const char **name, const uint8_t **buf,
		     size_t *len, struct dcr_err *e)
{
	if (!in->a) {
		dcr_blob_free(&in->cur);
		if (in->next >= in->n)
			return 0;
		const char *nm = in->names[in->next++];
		char *path = dcr_path_join(in->dir, nm);
		int r = path ? dcr_blob_map(&in->cur, path, PAYLOAD_FILE_MAX, e)
			     : dcr_err_sys(e, ENOMEM, "pack");
		free(path);
		if (r)
			return r;
		*name = nm;
		*buf = in->cur.p;
		*len = in->cur.len;
		return 1;
	}
	struct archive_entry *en;
	int s = archive_read_next_header(in->a, &en);
	if (s == ARCHIVE_EOF)
		return 0;
	if (s != ARCHIVE_OK)
		return dcr_err_set(e, DCR_EFORMAT, "pack stream: %s", archive_error_string(in->a));
	const char *nm = archive_entry_pathname(en);
	la_int64_t size = archive_entry_size(en);
	if (!nm || archive_entry_filetype(en) != AE_IFREG || size < 0 ||
	    (uint64_t)size > PAYLOAD_FILE_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "pack stream: bad entry '%s'", nm ? nm : "?");
	free(in->name);
	in->name = dcr_strdup(nm);
	in->data.len = 0;
	if (!in->name || dcr_buf_reserve(&in->data, (size_t)size + 1))
		return dcr_err_sys(e, ENOMEM, "pack stream");
	dcr_prefault(in->data.p, (size_t)size);
	while (in->data.len < (size_t)size) {
		la_ssize_t n = archive_read_data(in->a, in->data.p + in->data.len,
						 (size_t)size - in->data.len);
		if (n < 0)
			return dcr_err_set(e, DCR_EFORMAT, "pack stream: entry '%s': %s", in->name,
					   archive_error_string(in->a));
		if (n == 0)
			return dcr_err_set(e, DCR_EFORMAT, "pack stream is truncated in entry '%s'",
					   in->name);
		in->data.len += (size_t)n;
	}
	*name = in->name;
	*buf = in->data.p;
	*len = in->data.len;
	return 1;
}

void dcr_pack_in_take(struct dcr_pack_in *in, struct dcr_blob *b)
{
	if (!in->a) {
		*b = in->cur;
		memset(&in->cur, 0, sizeof(in->cur));
		return;
	}
	memset(b, 0, sizeof(*b));
	b->p = in->data.p;
	b->len = in->data.len;
	b->cap = in->data.cap;
	memset(&in->data, 0, sizeof(in->data));
}

void dcr_pack_in_close(struct dcr_pack_in *in)
{
	if (!in)
		return;
	if (in->a)
		archive_read_free(in->a);
	for (size_t i = 0; i < in->n; i++)
		free(in->names[i]);
	free(in->names);
	free(in->dir);
	dcr_blob_free(&in->cur);
	free(in->name);
	dcr_buf_free(&in->data);
	free(in);
}
