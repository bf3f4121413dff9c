/* payload.c - payloads: a compressed, self-checking group of delta records. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "core/blake3.h"
#include "core/bytes.h"
#include "core/delta.h"
#include "core/payload.h"
#include "core/util.h"

/* ---- payloads ---- */

char *dcr_payload_name(uint32_t index)
{
	return dcr_asprintf("payload-%06u.dcrp", index);
}

int dcr_payload_name_parse(const char *name, uint32_t *index)
{
	uint64_t v;
	if (!dcr_numbered_name_parse(name, "payload-", ".dcrp", UINT32_MAX, &v))
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
	if (p->version == 1)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s is a version 1 payload, packed by an older dcr (SHA-256 tensor digests): make the delta again with this dcr-diff and dcr-pack",
				   what);
	if (p->version != DCR_PACK_VERSION)
		return dcr_err_version(e, what, "payload", p->version, DCR_PACK_VERSION);
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

void dcr_payload_release(struct dcr_payload *p)
{
	(void)p;
}

/* ---- records, a window at a time ---- */

int dcr_payload_records_open(struct dcr_payload_records *it, const uint8_t *buf, size_t len,
			     const struct dcr_payload *p, const char *what, struct dcr_err *e)
{
	memset(it, 0, sizeof(*it));
	it->what = what;
	if (len < DCR_PAYLOAD_HDR_LEN + 32 || p->body_len != len - DCR_PAYLOAD_HDR_LEN - 32)
		return dcr_err_set(e, DCR_EFORMAT, "%s is not a checked payload", what);
	it->body = buf + DCR_PAYLOAD_HDR_LEN;
	it->body_len = (size_t)p->body_len;
	it->raw_len = p->raw_len;
	it->codec = p->codec;
	if (p->codec == DCR_PAYLOAD_STORED)
		return 0;
	ZSTD_DStream *zs = ZSTD_createDStream();
	it->win_cap = ZSTD_DStreamOutSize();
	it->win = malloc(it->win_cap);
	it->zs = zs;
	if (!zs || !it->win) {
		dcr_payload_records_close(it);
		return dcr_err_sys(e, ENOMEM, "%s", what);
	}
	/* a frame asking for a larger window is refused, not honoured */
	ZSTD_DCtx_setParameter(zs, ZSTD_d_windowLogMax, DCR_PAYLOAD_WINDOW_LOG);
	return 0;
}

void dcr_payload_records_close(struct dcr_payload_records *it)
{
	ZSTD_freeDStream(it->zs);
	it->zs = NULL;
	free(it->win);
	it->win = NULL;
	dcr_buf_free(&it->rec);
}

static int rec_bad(struct dcr_payload_records *it, const char *why, struct dcr_err *e)
{
	return dcr_err_set(e, DCR_EFORMAT, "%s: %s", it->what, why);
}

/* Up to n raw bytes into dst (*got of them), decompressing a window more
 * when the last is used up; *got == 0 only at the end of the body. */
static int rec_pull(struct dcr_payload_records *it, uint8_t *dst, size_t n, size_t *got,
		    struct dcr_err *e)
{
	*got = 0;
	if (it->codec == DCR_PAYLOAD_STORED) {
		size_t k = it->body_len - it->in_pos < n ? it->body_len - it->in_pos : n;
		memcpy(dst, it->body + it->in_pos, k);
		it->in_pos += k;
		it->raw_done += k;
		*got = k;
		return 0;
	}
	while (it->win_pos == it->win_len && !it->frame_done) {
		ZSTD_inBuffer in = {it->body, it->body_len, it->in_pos};
		ZSTD_outBuffer out = {it->win, it->win_cap, 0};
		size_t z = ZSTD_decompressStream(it->zs, &out, &in);
		if (ZSTD_isError(z))
			return dcr_err_set(e, DCR_EFORMAT, "%s: body does not decompress: %s", it->what,
					   ZSTD_getErrorName(z));
		it->in_pos = in.pos;
		it->win_pos = 0;
		it->win_len = out.pos;
		it->raw_done += out.pos;
		if (it->raw_done > it->raw_len)
			return rec_bad(it, "body decompresses to more than its stated size", e);
		if (!z)
			it->frame_done = 1; /* the frame is complete */
		else if (!out.pos && in.pos == in.size)
			return rec_bad(it, "body is a cut-short zstd frame", e);
	}
	size_t k = it->win_len - it->win_pos < n ? it->win_len - it->win_pos : n;
	memcpy(dst, it->win + it->win_pos, k);
	it->win_pos += k;
	*got = k;
	return 0;
}

/* Exactly n raw bytes into dst; 1 if the body ended before the first. */
static int rec_read(struct dcr_payload_records *it, uint8_t *dst, size_t n, int at_start,
		    struct dcr_err *e)
{
	size_t have = 0;
	while (have < n) {
		size_t got;
		int r = rec_pull(it, dst + have, n - have, &got, e);
		if (r)
			return r;
		if (!got)
			return !have && at_start ? 1 : rec_bad(it, "truncated record", e);
		have += got;
	}
	return 0;
}

int dcr_payload_records_next(struct dcr_payload_records *it, struct dcr_delta_rec *rec,
			     struct dcr_err *e)
{
	uint8_t h[DCR_REC_HDR_LEN];
	int r = rec_read(it, h, sizeof(h), 1, e);
	if (r < 0)
		return r;
	if (r) { /* the end: all of the body, and exactly the raw size */
		if (it->raw_done != it->raw_len || it->in_pos != it->body_len ||
		    (it->codec != DCR_PAYLOAD_STORED && !it->frame_done))
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s: body does not decompress to its stated size", it->what);
		return 0;
	}
	rec->type = get_le32(h);
	rec->flags = get_le32(h + 4);
	rec->len = get_le64(h + 8);
	if (rec->flags)
		return rec_bad(it, "malformed record", e);
	if ((r = dcr_delta_count_names(rec, &it->names, it->what, e)))
		return r;
	if (rec->len > DCR_REC_MAX || rec->len > it->raw_len - it->raw_done +
						 (it->win_len - it->win_pos))
		return rec_bad(it, "malformed record (longer than the bytes left)", e);
	/* the body, its buffer grown with the bytes that arrive */
	struct dcr_buf *b = &it->rec;
	b->len = 0;
	while (b->len < rec->len) {
		size_t step = (size_t)rec->len - b->len, most = b->len > (1u << 20) ? b->len : (1u << 20);
		if (step > most)
			step = most;
		if (dcr_buf_reserve(b, step + 1))
			return dcr_err_sys(e, ENOMEM, "%s", it->what);
		if ((r = rec_read(it, b->p + b->len, step, 0, e)))
			return r;
		b->len += step;
	}
	static const uint8_t none[1];
	rec->body = b->p ? b->p : none;
	return 1;
}

int dcr_payload_summary(const uint8_t *buf, size_t len, const struct dcr_payload *p,
			const char *what, struct dcr_payload_summary *s, struct dcr_err *e)
{
	struct dcr_payload_records it;
	struct dcr_delta_rec rec;
	memset(s, 0, sizeof(*s));
	int r = dcr_payload_records_open(&it, buf, len, p, what, e);
	while (!r && (r = dcr_payload_records_next(&it, &rec, e)) == 1) {
		r = 0;
		if (rec.type == DCR_REC_ITEM) {
			struct dcr_item item;
			if ((r = dcr_delta_parse_item(&rec, &item, e)))
				break;
			s->items++;
			s->changes += item.n;
		}
		s->tensors += rec.type == DCR_REC_TENSOR;
		s->removed += rec.type == DCR_REC_REMOVE;
	}
	dcr_payload_records_close(&it);
	return r < 0 ? r : 0;
}
