/* hostile - craft the hostile packs of tests/t09NN-*.sh: few bytes that
 * claim a lot. Each writes a pack tar stream to OUT. Not installed.
 *
 *   hostile index N OUT          one well-formed payload whose index (in its
 *                                header and its entry name) is N; no manifest
 *   hostile bomb OUT             one payload of about 132 KB whose zstd body
 *                                declares and holds 4 GiB of raw records
 *                                (ancillary records of zero bytes, each
 *                                64 MiB); no manifest
 *   hostile dense ELEMS ITEMS OUT [TENSOR]
 *                                a dense copy of one NEW F64 tensor "t" of
 *                                ELEMS zero elements, in ITEMS dense items of
 *                                equal length (the last shorter; ITEMS 0:
 *                                none, the tensor only declared), and its
 *                                manifest (whose
 *                                target digest is wrong: an apply must fail
 *                                at the check, after staging); with TENSOR,
 *                                the items name the payload's tensor
 *                                TENSOR (1 or more: one it never declared)
 *   hostile overlap CKPT OUT [HOW]  a delta stream (not a pack) from CKPT's
 *                                state whose first tensor gets two OVERWRITE
 *                                items that overlap (elements [0, 8) and
 *                                [4, 12), different values where they
 *                                meet), with the digests of applying them in
 *                                the stream's order: the journal's check and
 *                                its replay would put them together in
 *                                different orders if both were taken.
 *                                HOW dense: both items DENSE overwrites
 *                                (PLAIN planes); corrupt-dense: a dense
 *                                [0, 8), then a dense [8, 16) whose zstd
 *                                frame is cut short (no overlap), the
 *                                digests those values would give;
 *                                pastend: one OVERWRITE item of 8
 *                                elements from the tensor's last 4, the
 *                                digest of its first 4 (the other 4 would
 *                                land in the bytes after the tensor);
 *                                undeclared: one OVERWRITE item of one
 *                                element for tensor N (CKPT has N
 *                                tensors: no record declares it); escape: a NEW F32 tensor
 *                                "zzzz.extra" of 4 elements in the file
 *                                "../escape.safetensors" (outside the
 *                                receiver), a dense item and the right
 *                                digests and target; xor-new: the same
 *                                tensor in CKPT's first file, its values
 *                                in an XOR item (a NEW tensor has no base
 *                                bits to XOR); repeat: the first tensor
 *                                declared twice (records 0 and 1), an item
 *                                for each ([0, 8) and [16, 24)) with the
 *                                digest of that item alone, the target
 *                                the state id of those records (as a
 *                                reader that took both would compute it);
 *                                misdigest: one OVERWRITE item of [0, 8),
 *                                the digest (and target) of other values
 *                                there: a well-formed delta that does not
 *                                reach its own target
 *   hostile interleave IN OUT    delta stream IN (TENSOR, ITEM, DONE and END
 *                                records) rewritten with its items in
 *                                another order: the first half's and the
 *                                second half's taken in turn, as a pack of
 *                                producers that each cover part of every
 *                                tensor may send them; a valid delta with
 *                                the same changes and digests, whose items
 *                                leave their tensors' order (a dense copy
 *                                stays one)
 *   hostile tensors N OUT        a delta stream (not a pack) of N TENSOR
 *                                records, in name order, each a NEW BF16
 *                                tensor of one element, and nothing after
 *                                them (a reader that takes them all meets
 *                                the end of the stream)
 *   hostile again ITEMS OUT [spread|period]
 *                                one payload of a few KB: a NEW F64 tensor
 *                                "t" of 2^22 elements (32 MiB) and ITEMS
 *                                dense items over all of it, each holding
 *                                32 MiB of zero bytes, which its zstd
 *                                frame squeezes to almost nothing; no
 *                                manifest (a stream refused at its end);
 *                                with spread, ITEMS such tensors t0, t1,
 *                                ... and one such item over each; with
 *                                period the same, each item's 32 MiB a
 *                                block of 1 MiB of noise over and over,
 *                                compressed by libzstd (long matches, a
 *                                window of 16 MiB)
 *   hostile names N OUT          a pack stream of N NEW F64 tensors of one
 *                                element, each with a dense item, in
 *                                payloads of 2^19 (each within a payload's
 *                                limit, together past 2^20 when N is); no
 *                                manifest
 *   hostile tamper IN OUT        payload file IN with one record more (an
 *                                ancillary one) and its trailer made anew:
 *                                a payload that checks out by itself, and
 *                                no longer matches its manifest's digest
 *   hostile oddsize SIZE OUT     a valid pack: one stored payload of exactly
 *                                SIZE bytes (one ancillary record of zeros)
 *                                and its manifest, with piece CVs; SIZE
 *                                picks where the 32-byte trailer falls
 *                                against 1 MiB pieces and a pull's parts
 *   hostile endcount IN OUT      delta stream IN with its END's item count
 *                                one more, its trailer made anew: every
 *                                record well-formed, the counts a lie
 *
 * zstd frames are written by hand (raw and RLE blocks), so that gigabytes
 * of zeros cost 4 bytes per 128 KiB. Exit 0, or 128 with a message.
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#include "dcr.h"
#include "core/bytes.h"

#define BLOCK (128u << 10)
#define PERIOD ((size_t)1 << 20)

static void die(const char *what, const struct dcr_err *e)
{
	fprintf(stderr, "hostile: error: %s%s%s\n", what, e ? ": " : "", e ? e->msg : "");
	exit(128);
}

/* A malloc'd copy of p[0..n) (exits when memory runs out). */
static uint8_t *copy_of(const void *p, size_t n)
{
	uint8_t *q = malloc(n ? n : 1);
	if (!q)
		die("out of memory", NULL);
	memcpy(q, p, n);
	return q;
}

static void add(struct dcr_buf *b, const void *p, size_t n)
{
	if (dcr_buf_add(b, p, n))
		die("out of memory", NULL);
}

/* a zstd frame of `total` bytes, built by parts */
static void zframe_start(struct dcr_buf *z, uint64_t total)
{
	uint8_t h[14] = {0x28, 0xb5, 0x2f, 0xfd, 0xc0 /* FCS 8 bytes */, (17 - 10) << 3};
	put_le64(h + 6, total);
	add(z, h, sizeof(h));
}

static void zblock(struct dcr_buf *z, int type, const uint8_t *p, size_t n, int last)
{
	uint32_t bh = (uint32_t)last | (uint32_t)type << 1 | (uint32_t)n << 3;
	uint8_t h[3] = {(uint8_t)bh, (uint8_t)(bh >> 8), (uint8_t)(bh >> 16)};
	add(z, h, 3);
	add(z, p, type == 1 ? 1 : n);
}

static void zraw(struct dcr_buf *z, const uint8_t *p, size_t n, int last)
{
	while (n) {
		size_t k = n < BLOCK ? n : BLOCK;
		zblock(z, 0, p, k, last && k == n);
		p += k;
		n -= k;
	}
}

static void zzeros(struct dcr_buf *z, uint64_t n, int last)
{
	static const uint8_t zero[1];
	while (n) {
		size_t k = n < BLOCK ? (size_t)n : BLOCK;
		zblock(z, 1, zero, k, last && k == n);
		n -= k;
	}
}

static void rec_head(uint8_t h[16], uint32_t type, uint64_t len)
{
	put_le32(h, type);
	put_le32(h + 4, 0);
	put_le64(h + 8, len);
}

/* A payload image of a zstd body z declaring raw bytes. */
static void payload(struct dcr_buf *out, const dcr_digest *base, const uint8_t attempt[16],
		    uint32_t index, const struct dcr_buf *z, uint64_t raw, dcr_digest *dg)
{
	uint8_t h[DCR_PAYLOAD_HDR_LEN] = {0};
	memcpy(h, DCR_PAYLOAD_MAGIC, 8);
	put_le32(h + 8, DCR_PACK_VERSION);
	put_le32(h + 12, DCR_PAYLOAD_BLAKE3);
	memcpy(h + 16, base->b, 32);
	memcpy(h + 48, attempt, 16);
	put_le32(h + 64, index);
	put_le32(h + 68, DCR_PAYLOAD_ZSTD);
	put_le64(h + 72, raw);
	put_le64(h + 80, z->len);
	out->len = 0;
	add(out, h, sizeof(h));
	add(out, z->p, z->len);
	dcr_payload_digest(out->p, out->len, dg);
	add(out, dg->b, 32);
}

struct tar {
	int fd;
	struct dcr_tar_out *t;
};

static void tar_open(struct tar *t, const char *path)
{
	struct dcr_err e;
	t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (t->fd < 0)
		die(path, NULL);
	if (dcr_tar_out_open(t->fd, &t->t, &e))
		die(path, &e);
}

static void tar_entry(struct tar *t, const char *name, const struct dcr_buf *b)
{
	struct dcr_err e;
	if (dcr_tar_out_entry(t->t, name, b->p, b->len, &e))
		die(name, &e);
}

static void tar_close(struct tar *t)
{
	struct dcr_err e;
	if (dcr_tar_out_close(t->t, &e) || close(t->fd))
		die("closing the output", &e);
}

/* A pack tar stream at out: payload 0 (img), then the manifest (man,
 * unless NULL). */
static void write_pack(const char *out, const struct dcr_buf *img, const struct dcr_buf *man)
{
	struct tar tr;
	tar_open(&tr, out);
	tar_entry(&tr, "payload-000000.dcrp", img);
	if (man)
		tar_entry(&tr, DCR_MANIFEST_NAME, man);
	tar_close(&tr);
}

/* a TENSOR record's body, framed */
static void tensor_rec(struct dcr_buf *raw, const struct dcr_delta_tensor *t)
{
	struct dcr_buf b = {0};
	uint8_t h[16];
	if (dcr_delta_tensor_body(&b, t))
		die("out of memory", NULL);
	rec_head(h, DCR_REC_TENSOR, b.len);
	add(raw, h, 16);
	add(raw, b.p, b.len);
	dcr_buf_free(&b);
}

static int cmd_index(uint32_t idx, const char *out)
{
	dcr_digest base = {{0}}, dg;
	uint8_t attempt[16] = {1};
	struct dcr_delta_tensor t = {.name = "t", .file = "model.safetensors",
				     .dtype = DCR_DT_U8, .ndim = 1, .shape = {4}, .nelem = 4};
	struct dcr_buf raw = {0}, z = {0}, img = {0};
	tensor_rec(&raw, &t);
	zframe_start(&z, raw.len);
	zraw(&z, raw.p, raw.len, 1);
	payload(&img, &base, attempt, idx, &z, raw.len, &dg);
	struct tar tr;
	tar_open(&tr, out);
	char *name = dcr_payload_name(idx);
	tar_entry(&tr, name, &img);
	tar_close(&tr);
	return 0;
}

static int cmd_bomb(const char *out)
{
	dcr_digest base = {{0}}, dg;
	uint8_t attempt[16] = {2};
	const uint64_t rec = 64u << 20, nrec = 64; /* 64 x 64 MiB = 4 GiB */
	struct dcr_buf z = {0}, img = {0};
	zframe_start(&z, rec * nrec);
	for (uint64_t i = 0; i < nrec; i++) {
		uint8_t h[16];
		rec_head(h, DCR_REC_ANCILLARY + 0x100, rec - 16);
		zraw(&z, h, 16, 0);
		zzeros(&z, rec - 16, i == nrec - 1);
	}
	payload(&img, &base, attempt, 0, &z, rec * nrec, &dg);
	write_pack(out, &img, NULL);
	fprintf(stderr, "hostile: bomb payload of %zu bytes declaring %llu raw bytes\n", img.len,
		(unsigned long long)(rec * nrec));
	return 0;
}

/* Into zstd stream cs (NULL: the hand-made frame z; zeros then as RLE
 * blocks, else as raw ones), n bytes: p's, or with p NULL, zeros or, with
 * period, the 1 MiB block period over and over. */
static void zput(ZSTD_CCtx *cs, struct dcr_buf *z, const uint8_t *p, uint64_t n,
		 const uint8_t *period, int last)
{
	if (!cs) {
		if (p)
			zraw(z, p, (size_t)n, last);
		else
			zzeros(z, n, last);
		return;
	}
	while (n || last) {
		size_t k = n < PERIOD ? (size_t)n : PERIOD;
		ZSTD_inBuffer in = {p ? p : period, k, 0};
		int end = last && k == n;
		for (;;) {
			if (dcr_buf_reserve(z, z->len + ZSTD_CStreamOutSize()))
				die("out of memory", NULL);
			ZSTD_outBuffer o = {z->p + z->len, ZSTD_CStreamOutSize(), 0};
			size_t left = ZSTD_compressStream2(cs, &o, &in, end ? ZSTD_e_end : ZSTD_e_continue);
			if (ZSTD_isError(left))
				die(ZSTD_getErrorName(left), NULL);
			z->len += o.pos;
			if (end ? !left : in.pos == in.size)
				break;
		}
		if (p)
			p += k;
		n -= k;
		if (end)
			break;
	}
}

static int cmd_again(uint64_t items, const char *out, int spread, int periodic)
{
	dcr_digest base = {{0}}, dg;
	uint8_t attempt[16] = {5};
	const uint64_t elems = 1u << 22, data = elems * 8;
	struct dcr_buf raw = {0}, body = {0}, z = {0}, img = {0};
	/* the tensor records: "t", or with spread t0, t1, ... one per item */
	for (uint64_t i = 0; i < (spread ? items : 1); i++) {
		char name[32];
		snprintf(name, sizeof(name), spread ? "t%llu" : "t", (unsigned long long)i);
		struct dcr_delta_tensor t = {.name = name, .file = "model.safetensors",
					     .flags = DCR_TENSOR_NEW, .dtype = DCR_DT_F64, .ndim = 1,
					     .shape = {elems}, .nelem = elems};
		tensor_rec(&raw, &t);
	}
	uint64_t total = raw.len;
	ZSTD_CCtx *cs = NULL;
	uint8_t *period = NULL;
	if (periodic) {
		/* a block of 1 MiB of noise, repeated: a window of 16 MiB (as
		 * payloads may have) holds it, zstd's long matches find it */
		cs = ZSTD_createCCtx();
		period = malloc(PERIOD);
		if (!cs || !period)
			die("out of memory", NULL);
		uint64_t x = 88172645463325252ull;
		for (size_t i = 0; i < PERIOD; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			period[i] = (uint8_t)x;
		}
		ZSTD_CCtx_setParameter(cs, ZSTD_c_compressionLevel, 1);
		ZSTD_CCtx_setParameter(cs, ZSTD_c_windowLog, DCR_PAYLOAD_WINDOW_LOG);
		ZSTD_CCtx_setParameter(cs, ZSTD_c_enableLongDistanceMatching, 1);
	}
	for (int pass = 0; pass < 2; pass++) {
		if (pass)
			zput(cs, &z, raw.p, raw.len, NULL, !items);
		for (uint64_t i = 0; i < items; i++) {
			body.len = 0;
			if (dcr_buf_add_varint(&body, spread ? i : 0) ||
			    dcr_buf_add_varint(&body, DCR_ITEM_DENSE) ||
			    dcr_buf_add_u8(&body, DCR_ENC_OVERWRITE) ||
			    dcr_buf_add_u8(&body, DCR_CODEC_PLAIN) || dcr_buf_add_varint(&body, 0) ||
			    dcr_buf_add_varint(&body, elems) || dcr_buf_add_varint(&body, elems) ||
			    dcr_buf_add_varint(&body, data))
				die("out of memory", NULL);
			if (!pass) {
				total += 16 + body.len + data;
				continue;
			}
			uint8_t h[16];
			rec_head(h, DCR_REC_ITEM, body.len + data);
			zput(cs, &z, h, 16, NULL, 0);
			zput(cs, &z, body.p, body.len, NULL, 0);
			zput(cs, &z, NULL, data, period, i == items - 1);
		}
		if (!pass && cs)
			ZSTD_CCtx_setPledgedSrcSize(cs, total);
		else if (!pass)
			zframe_start(&z, total);
	}
	ZSTD_freeCCtx(cs);
	free(period);
	payload(&img, &base, attempt, 0, &z, total, &dg);
	write_pack(out, &img, NULL);
	fprintf(stderr, "hostile: payload of %zu bytes, %llu items of 32 MiB%s over %s\n", img.len,
		(unsigned long long)items, periodic ? " (1 MiB of noise repeated)" : "",
		spread ? "a tensor each" : "one tensor");
	return 0;
}

/* onto raw, a dense OVERWRITE item record (plain codec) of tensor's
 * elements [start, start + n), its values the byte planes in zstd frame
 * planes (body: scratch) */
static void dense_item(struct dcr_buf *raw, struct dcr_buf *body, uint64_t tensor, uint64_t start,
		       uint64_t n, const struct dcr_buf *planes)
{
	body->len = 0;
	if (dcr_buf_add_varint(body, tensor) || dcr_buf_add_varint(body, DCR_ITEM_DENSE) ||
	    dcr_buf_add_u8(body, DCR_ENC_OVERWRITE) || dcr_buf_add_u8(body, DCR_CODEC_PLAIN) ||
	    dcr_buf_add_varint(body, start) || dcr_buf_add_varint(body, n) ||
	    dcr_buf_add_varint(body, n) || dcr_buf_add_varint(body, planes->len))
		die("out of memory", NULL);
	add(body, planes->p, planes->len);
	uint8_t h[16];
	rec_head(h, DCR_REC_ITEM, body->len);
	add(raw, h, 16);
	add(raw, body->p, body->len);
}

/* A pack of n new tensors of one element, an item each, named with
 * namelen bytes (at least 9), in payloads that each name 2^19 of them, or
 * fewer where their names would take more than 128 MiB. */
static int cmd_names(uint64_t n, const char *out, size_t namelen)
{
	struct dcr_err e;
	dcr_digest zero = {{0}}, dg;
	uint8_t attempt[16] = {7};
	if (namelen < 9)
		namelen = 9;
	uint64_t per = 1u << 19; /* tensors a payload names */
	if (per * namelen > (128u << 20))
		per = (128u << 20) / namelen;
	char *name = malloc(namelen + 1);
	if (!name)
		die("out of memory", NULL);
	memset(name, 'x', namelen);
	name[namelen] = '\0';
	struct dcr_buf raw = {0}, img = {0}, body = {0}, planes = {0}, pieces = {0};
	/* one element of F64 zeros: a zstd frame of 8 zero bytes */
	zframe_start(&planes, 8);
	zzeros(&planes, 8, 1);
	struct tar tr;
	tar_open(&tr, out);
	for (uint64_t i0 = 0, idx = 0; i0 < n; i0 += per, idx++) {
		raw.len = 0;
		for (uint64_t i = i0; i < n && i < i0 + per; i++) {
			char num[24];
			snprintf(num, sizeof(num), "n%08llu", (unsigned long long)(i % 100000000));
			memcpy(name, num, 9);
			struct dcr_delta_tensor t = {.name = name, .file = "model.safetensors",
						     .flags = DCR_TENSOR_NEW, .dtype = DCR_DT_F64,
						     .ndim = 1, .shape = {1}, .nelem = 1};
			tensor_rec(&raw, &t);
			dense_item(&raw, &body, i - i0, 0, 1, &planes);
		}
		if (dcr_payload_build(&zero, attempt, (uint32_t)idx, raw.p, raw.len,
				      DCR_PDIGEST_BLAKE3, &img, &dg, &pieces, &e))
			die("payload", &e);
		char *pn = dcr_payload_name((uint32_t)idx);
		if (!pn)
			die("out of memory", NULL);
		tar_entry(&tr, pn, &img);
		free(pn);
	}
	tar_close(&tr);
	fprintf(stderr, "hostile: %llu new tensors of one element, an item each, in payloads of %llu\n",
		(unsigned long long)n, (unsigned long long)per);
	free(name);
	return 0;
}

static int cmd_dense(uint64_t elems, uint64_t items, uint64_t tensor, const char *out)
{
	struct dcr_err e;
	dcr_digest zero = {{0}}, dg;
	uint8_t attempt[16];
	if (dcr_attempt_id(NULL, attempt, &e))
		die("attempt", &e);
	struct dcr_delta_tensor t = {.name = "t", .file = "model.safetensors", .flags = DCR_TENSOR_NEW,
				     .dtype = DCR_DT_F64, .ndim = 1, .shape = {elems}, .nelem = elems};
	struct dcr_buf raw = {0}, img = {0}, body = {0}, planes = {0};
	tensor_rec(&raw, &t);
	uint64_t per = items ? (elems + items - 1) / items : elems;
	for (uint64_t s = 0; items && s < elems; s += per) {
		uint64_t n = elems - s < per ? elems - s : per;
		/* the values: one zstd frame of n * 8 zero bytes, byte planes */
		planes.len = 0;
		zframe_start(&planes, n * 8);
		zzeros(&planes, n * 8, 1);
		dense_item(&raw, &body, tensor, s, n, &planes);
	}
	struct dcr_buf pieces = {0};
	if (dcr_payload_build(&zero, attempt, 0, raw.p, raw.len, DCR_PDIGEST_BLAKE3, &img, &dg,
			      &pieces, &e))
		die("payload", &e);
	/* the manifest: a target digest that no zero tensor has */
	struct dcr_manifest m = {0};
	uint64_t psize = img.len;
	memcpy(m.attempt, attempt, 16);
	m.npayloads = 1;
	m.psize = &psize;
	m.pdigest = &dg;
	t.flags = DCR_TENSOR_NEW;
	dcr_sha256("not zeros", 9, &t.digest);
	t.have_digest = 1;
	m.ntensors = 1;
	m.tensors = &t;
	m.nitems = items ? (elems + per - 1) / per : 0;
	m.nchanges = items ? elems : 0;
	m.dense = 1;
	struct dcr_state_entry se = {.name = t.name, .dtype = t.dtype, .ndim = t.ndim,
				     .shape = t.shape, .digest = t.digest};
	dcr_state_id(&se, 1, &m.target);
	struct dcr_buf man = {0};
	if (dcr_manifest_build(&m, &man, &e))
		die("manifest", &e);
	write_pack(out, &img, &man);
	fprintf(stderr, "hostile: dense pack, payload %zu bytes, %llu items of %llu elements\n",
		img.len, (unsigned long long)m.nitems, (unsigned long long)per);
	return 0;
}

static int cmd_tamper(const char *in, const char *out)
{
	struct dcr_err e;
	uint8_t *buf;
	size_t len;
	struct dcr_payload pl;
	struct dcr_payload_records it;
	struct dcr_delta_rec rec;
	if (dcr_read_file(in, 1u << 30, &buf, &len, &e) || dcr_payload_check(buf, len, in, &pl, &e) ||
	    dcr_payload_records_open(&it, buf, len, &pl, in, &e))
		die(in, &e);
	struct dcr_buf raw = {0}, img = {0};
	int r;
	while ((r = dcr_payload_records_next(&it, &rec, &e)) == 1) {
		uint8_t h[16];
		rec_head(h, rec.type, rec.len);
		add(&raw, h, 16);
		add(&raw, rec.body, (size_t)rec.len);
	}
	if (r)
		die(in, &e);
	uint8_t h[16];
	rec_head(h, DCR_REC_ANCILLARY + 0x200, 5);
	add(&raw, h, 16);
	add(&raw, "evil!", 5);
	dcr_digest dg;
	if (dcr_payload_build(&pl.base, pl.attempt, pl.index, raw.p, raw.len,
			      pl.flags & DCR_PAYLOAD_BLAKE3 ? DCR_PDIGEST_BLAKE3 : DCR_PDIGEST_SHA256,
			      &img, &dg, NULL, &e) ||
	    dcr_write_file_atomic(out, img.p, img.len, &e))
		die(out, &e);
	return 0;
}

/* An item of tensor t over [start, start + len) with the n changes at
 * pos (relative to start) and val, coded PLAIN (enc: DCR_ENC_XOR or
 * DCR_ENC_OVERWRITE, dense: a DENSE item), its data cut short by `cut`
 * bytes, written to w. */
static void put_item(struct dcr_delta_writer *w, uint32_t t, uint8_t enc, unsigned unit,
		     uint64_t start, uint64_t len, size_t n, uint64_t *pos, uint64_t *val,
		     int dense, size_t cut)
{
	struct dcr_changes ch = {.n = n, .cap = n, .pos = pos, .val = val};
	struct dcr_buf data = {0};
	struct dcr_err e = {0};
	struct dcr_item it = {.tensor = t, .enc = enc, .start = start, .len = len, .n = n,
			      .flags = dense ? DCR_ITEM_DENSE : 0};
	if (dcr_item_encode(&ch, unit, len, dense, &it.codec, &data, &e))
		die("encode", &e);
	it.data = data.p;
	it.data_len = data.len - cut;
	if (dcr_delta_write_item(w, &it, &e))
		die("write", &e);
	dcr_buf_free(&data);
}

/* Elements [start, start + 8) of a tensor's bits set to fill, fill + 1,
 * ... (those inside its nelem elements). */
static void fill_bits(uint8_t *bits, unsigned unit, uint64_t nelem, uint64_t start, uint8_t fill)
{
	for (size_t k = 0; k < 8 && start + k < nelem; k++) {
		memset(bits + (start + k) * unit, 0, unit);
		bits[(start + k) * unit] = (uint8_t)(fill + k);
	}
}

/* An OVERWRITE of elements [start, start + 8) of tensor t to fill, fill +
 * 1, ..., set in bits too (fill_bits). */
static void fill_item(struct dcr_delta_writer *w, uint32_t t, unsigned unit, uint64_t nelem,
		      uint64_t start, uint8_t fill, uint8_t *bits, int dense, size_t cut)
{
	uint64_t pos[8], val[8];
	for (size_t k = 0; k < 8; k++) {
		pos[k] = k;
		val[k] = fill + k;
	}
	fill_bits(bits, unit, nelem, start, fill);
	put_item(w, t, DCR_ENC_OVERWRITE, unit, start, 8, 8, pos, val, dense, cut);
}

/* The extra tensor of overlap's escape and xor-new: NEW, F32 [4]. */
#define EXTRA_NAME "zzzz.extra"
static const float extra_vals[4] = {1.5f, -2.0f, 0.25f, 8.0f};

static int cmd_overlap(const char *dir, const char *out, const char *how)
{
	int pastend = how && !strcmp(how, "pastend");
	int undeclared = how && !strcmp(how, "undeclared");
	int escape = how && !strcmp(how, "escape"), xornew = how && !strcmp(how, "xor-new");
	int extra = escape || xornew, repeat = how && !strcmp(how, "repeat");
	int misdigest = how && !strcmp(how, "misdigest");
	int dense = how && (!strcmp(how, "dense") || !strcmp(how, "corrupt-dense"));
	int corrupt = how && !strcmp(how, "corrupt-dense");
	if (how && strcmp(how, "plain") && !dense && !pastend && !undeclared && !extra && !repeat &&
	    !misdigest)
		die("overlap: HOW is plain, dense, corrupt-dense, pastend, undeclared, escape, xor-new, repeat or misdigest",
		    NULL);
	struct dcr_err e = {0};
	struct dcr_ckpt *c;
	if (dcr_ckpt_open(dir, &c, &e))
		die(dir, &e);
	dcr_digest *dg = calloc(c->ntensors + 3, sizeof(*dg));
	if (!dg)
		die("out of memory", NULL);
	for (size_t i = 0; i < c->ntensors; i++)
		dcr_tensor_digest(&c->tensors[i], &dg[i]);
	dcr_digest base, target;
	dcr_ckpt_state_from(c, dg, &base);
	const struct dcr_tensor_info *ti = c->tensors[0].info;
	unsigned unit = dcr_dtype_unit(ti->dtype);
	size_t nbytes = (size_t)dcr_tensor_bytes(ti);
	if (nbytes < 12 * unit)
		die("the first tensor has fewer than 12 elements", NULL);
	uint8_t *bits = copy_of(c->tensors[0].data, nbytes);
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die(out, NULL);
	struct dcr_delta_writer w = {0};
	uint8_t attempt[16] = {1};
	if (dcr_delta_writer_init(&w, (struct dcr_sink){dcr_sink_fd_write, &fd}, &base, attempt,
				  "overlap", &e))
		die("write", &e);
	/* repeat: the first tensor declared twice, as records 0 and 1 */
	for (size_t i = 0; i < c->ntensors + (size_t)repeat; i++) {
		size_t k = repeat && i ? i - 1 : i;
		const struct dcr_tensor_info *t = c->tensors[k].info;
		struct dcr_delta_tensor dt = {.name = (char *)t->name,
					      .file = (char *)c->file_names[c->tensors[k].file],
					      .dtype = t->dtype, .ndim = t->ndim, .nelem = t->nelem};
		memcpy(dt.shape, t->shape, sizeof(dt.shape));
		if (dcr_delta_write_tensor(&w, &dt, &e))
			die("write", &e);
	}
	struct dcr_tensor_info xi = {.name = EXTRA_NAME, .dtype = DCR_DT_F32, .ndim = 1,
				     .shape = {4}, .nelem = 4, .end = 16};
	if (extra) {
		struct dcr_delta_tensor dt = {.name = EXTRA_NAME,
					      .file = escape ? "../escape.safetensors"
							     : (char *)c->file_names[0],
					      .flags = DCR_TENSOR_NEW, .dtype = DCR_DT_F32, .ndim = 1,
					      .shape = {4}, .nelem = 4};
		if (dcr_delta_write_tensor(&w, &dt, &e))
			die("write", &e);
		struct dcr_ckpt_tensor xt = {.info = &xi, .data = (const uint8_t *)extra_vals,
					     .fd = -1};
		dcr_tensor_digest(&xt, &dg[c->ntensors]);
		/* its values, against zeros: as XOR masks they are the same */
		uint64_t pos[4] = {0, 1, 2, 3}, val[4];
		for (size_t k = 0; k < 4; k++) {
			uint32_t u;
			memcpy(&u, &extra_vals[k], 4);
			val[k] = u;
		}
		put_item(&w, (uint32_t)c->ntensors, xornew ? DCR_ENC_XOR : DCR_ENC_OVERWRITE, 4, 0,
			 4, 4, pos, val, !xornew, 0);
	} else if (undeclared) {
		/* an item for tensor ntensors, which no record declares */
		put_item(&w, (uint32_t)c->ntensors, DCR_ENC_OVERWRITE, unit, 0, 1, 1, (uint64_t[]){0},
			 (uint64_t[]){0x7f}, 0, 0);
	} else if (repeat) {
		/* one item for each record of the first tensor, apart, each
		 * record's digest that of its own item (the target: below) */
		uint8_t *one = copy_of(bits, nbytes);
		fill_item(&w, 0, unit, ti->nelem, 0, 0x10, one, 0, 0);
		struct dcr_ckpt_tensor ot = {.info = ti, .data = one, .fd = -1};
		dcr_tensor_digest(&ot, &dg[c->ntensors]);
		memcpy(one, bits, nbytes);
		fill_item(&w, 1, unit, ti->nelem, 16, 0x40, one, 0, 0);
		dcr_tensor_digest(&ot, &dg[c->ntensors + 1]);
		free(one);
	} else if (misdigest) {
		/* [0, 8) to 0x10.., the digest and target of 0x20.. there */
		uint8_t *other = copy_of(bits, nbytes);
		fill_item(&w, 0, unit, ti->nelem, 0, 0x10, other, 0, 0);
		free(other);
		fill_bits(bits, unit, ti->nelem, 0, 0x20);
	} else if (pastend) {
		/* [nelem - 4, nelem + 4): the digest holds for the 4 inside; the
		 * 4 past the end would land in the bytes after the tensor (the
		 * next one's, which an apply that took it would change without
		 * checking them: only the first tensor is touched) */
		fill_item(&w, 0, unit, ti->nelem, ti->nelem - 4, 0x70, bits, 0, 0);
	} else {
		/* in the stream's order: [0, 8) then [4, 12), which wins at 4..7 */
		fill_item(&w, 0, unit, ti->nelem, 0, 0x10, bits, dense, 0);
		if (corrupt) /* its zstd frame cut short */
			fill_item(&w, 0, unit, ti->nelem, 8, 0x40, bits, 1, 1);
		else
			fill_item(&w, 0, unit, ti->nelem, 4, 0x40, bits, dense, 0);
	}
	struct dcr_ckpt_tensor nt = {.info = ti, .data = bits, .fd = -1};
	if (!extra)
		dcr_tensor_digest(&nt, &dg[0]);
	if (repeat) {
		if (dcr_delta_write_done(&w, 0, &dg[c->ntensors], &e) ||
		    dcr_delta_write_done(&w, 1, &dg[c->ntensors + 1], &e))
			die("write", &e);
		for (size_t i = 1; i < c->ntensors; i++)
			if (dcr_delta_write_done(&w, (uint32_t)(i + 1), &dg[i], &e))
				die("write", &e);
	}
	for (size_t i = 0; i < c->ntensors + (size_t)extra && !repeat; i++)
		if (dcr_delta_write_done(&w, (uint32_t)i, &dg[i], &e))
			die("write", &e);
	if (extra) {
		/* the target: every tensor of CKPT and the extra one, by name */
		struct dcr_state_entry *ent = calloc(c->ntensors + 1, sizeof(*ent));
		if (!ent)
			die("out of memory", NULL);
		for (size_t i = 0; i < c->ntensors; i++) {
			const struct dcr_tensor_info *t = c->tensors[i].info;
			ent[i] = (struct dcr_state_entry){t->name, t->dtype, t->ndim, t->shape, dg[i]};
		}
		ent[c->ntensors] = (struct dcr_state_entry){EXTRA_NAME, DCR_DT_F32, 1, xi.shape,
							    dg[c->ntensors]};
		dcr_state_id(ent, c->ntensors + 1, &target);
		free(ent);
	} else if (repeat) {
		/* the target a reader that took both records would compute:
		 * both, in their order, then the rest */
		struct dcr_state_entry *ent = calloc(c->ntensors + 1, sizeof(*ent));
		if (!ent)
			die("out of memory", NULL);
		for (size_t i = 0; i <= c->ntensors; i++) {
			const struct dcr_tensor_info *t = c->tensors[i ? i - 1 : 0].info;
			ent[i] = (struct dcr_state_entry){t->name, t->dtype, t->ndim, t->shape,
							  i < 2 ? dg[c->ntensors + i] : dg[i - 1]};
		}
		dcr_state_id(ent, c->ntensors + 1, &target);
		free(ent);
	} else {
		dcr_ckpt_state_from(c, dg, &target);
	}
	if (dcr_delta_write_end(&w, &target, &e))
		die("write", &e);
	dcr_delta_writer_release(&w);
	close(fd);
	free(bits);
	free(dg);
	dcr_ckpt_close(c);
	return 0;
}

/* a record body kept for later */
struct body {
	uint8_t *p;
	size_t n;
};

static struct body keep(const struct dcr_delta_rec *rec)
{
	struct body b = {malloc(rec->len + 1), (size_t)rec->len};
	if (!b.p)
		die("out of memory", NULL);
	memcpy(b.p, rec->body, rec->len);
	return b;
}

static int cmd_interleave(const char *in, const char *out)
{
	struct dcr_err e = {0};
	int fi = open(in, O_RDONLY), fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fi < 0 || fo < 0)
		die(fi < 0 ? in : out, NULL);
	struct dcr_delta_reader rd;
	struct dcr_delta_writer w = {0};
	struct dcr_delta_rec rec;
	/* a dense copy stays one (its header flag) */
	if (dcr_delta_reader_init_flags(&rd, (struct dcr_source){dcr_source_fd_read, &fi}, NULL, 0,
					DCR_DELTA_DENSE, in, &e) ||
	    dcr_delta_writer_init_flags(&w, (struct dcr_sink){dcr_sink_fd_write, &fo}, &rd.base,
					rd.attempt, rd.flags & DCR_DELTA_DENSE, "interleave", &e))
		die(in, &e);
	struct body *items = NULL, *done = NULL;
	size_t ni = 0, nd = 0;
	int r;
	while ((r = dcr_delta_next(&rd, &rec, &e)) == 1) {
		if (rec.type == DCR_REC_TENSOR) {
			struct dcr_delta_tensor t;
			if (dcr_delta_parse_tensor(&rec, &t, &e) || dcr_delta_write_tensor(&w, &t, &e))
				die(in, &e);
			dcr_delta_tensor_clear(&t);
		} else if (rec.type == DCR_REC_ITEM || rec.type == DCR_REC_DONE) {
			struct body **v = rec.type == DCR_REC_ITEM ? &items : &done;
			size_t *n = rec.type == DCR_REC_ITEM ? &ni : &nd;
			struct body *nv = realloc(*v, (*n + 1) * sizeof(*nv));
			if (!nv)
				die("out of memory", NULL);
			*v = nv;
			(*v)[(*n)++] = keep(&rec);
		} else if (rec.type != DCR_REC_END) {
			die("a record other than TENSOR, ITEM, DONE and END", NULL);
		}
	}
	if (r)
		die(in, &e);
	size_t half = (ni + 1) / 2;
	for (size_t k = 0; k < half; k++)
		for (size_t j = k; j < ni; j += half) {
			struct dcr_delta_rec ir = {DCR_REC_ITEM, 0, items[j].n, items[j].p};
			struct dcr_item it;
			if (dcr_delta_parse_item(&ir, &it, &e) || dcr_delta_write_item(&w, &it, &e))
				die(in, &e);
		}
	for (size_t k = 0; k < nd; k++) {
		struct dcr_delta_rec dr = {DCR_REC_DONE, 0, done[k].n, done[k].p};
		uint32_t t;
		dcr_digest d;
		if (dcr_delta_parse_done(&dr, &t, &d, &e) || dcr_delta_write_done(&w, t, &d, &e))
			die(in, &e);
	}
	if (dcr_delta_write_end(&w, &rd.target, &e))
		die(out, &e);
	dcr_delta_writer_release(&w);
	dcr_delta_reader_release(&rd);
	for (size_t k = 0; k < ni; k++)
		free(items[k].p);
	for (size_t k = 0; k < nd; k++)
		free(done[k].p);
	free(items);
	free(done);
	close(fi);
	close(fo);
	return 0;
}

/* A delta stream of n TENSOR records and no END; names of namelen bytes
 * (at least 13: "t" and the record's number). */
static int cmd_tensors(uint64_t n, const char *out, size_t namelen)
{
	int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fo < 0)
		die(out, NULL);
	struct dcr_buf b = {0}, body = {0};
	uint8_t h[DCR_DELTA_HDR_LEN] = {0};
	memcpy(h, DCR_DELTA_MAGIC, 8);
	put_le32(h + 8, DCR_DELTA_VERSION);
	add(&b, h, sizeof(h));
	if (namelen < 13)
		namelen = 13;
	char *name = malloc(namelen + 1);
	if (!name)
		die("out of memory", NULL);
	memset(name, 'x', namelen);
	name[namelen] = '\0';
	struct dcr_delta_tensor t = {.name = name, .file = "model.safetensors",
				     .flags = DCR_TENSOR_NEW, .dtype = DCR_DT_BF16, .ndim = 1,
				     .shape = {1}};
	for (uint64_t i = 0; i < n; i++) {
		char num[24];
		snprintf(num, sizeof(num), "t%012llu", (unsigned long long)(i % 1000000000000ULL));
		memcpy(name, num, 13);
		body.len = 0;
		if (dcr_delta_tensor_body(&body, &t))
			die("out of memory", NULL);
		uint8_t rh[DCR_REC_HDR_LEN] = {0};
		put_le32(rh, DCR_REC_TENSOR);
		put_le64(rh + 8, body.len);
		add(&b, rh, sizeof(rh));
		add(&b, body.p, body.len);
		if (b.len >= (1u << 20) || i + 1 == n) {
			if (dcr_write_full(fo, b.p, b.len))
				die(out, NULL);
			b.len = 0;
		}
	}
	dcr_buf_free(&b);
	dcr_buf_free(&body);
	free(name);
	return close(fo) ? 128 : 0;
}

static int cmd_oddsize(uint64_t size, const char *out)
{
	struct dcr_err e;
	dcr_digest base = {{0}}, dg;
	uint8_t attempt[16] = {6};
	if (size < DCR_PAYLOAD_HDR_LEN + 16 + 32 || size > (1u << 30))
		die("oddsize: SIZE out of range", NULL);
	uint64_t body = size - DCR_PAYLOAD_HDR_LEN - 32;
	uint8_t h[DCR_PAYLOAD_HDR_LEN] = {0}, rh[16];
	memcpy(h, DCR_PAYLOAD_MAGIC, 8);
	put_le32(h + 8, DCR_PACK_VERSION);
	put_le32(h + 12, DCR_PAYLOAD_BLAKE3);
	memcpy(h + 16, base.b, 32);
	memcpy(h + 48, attempt, 16);
	put_le32(h + 64, 0);
	put_le32(h + 68, DCR_PAYLOAD_STORED);
	put_le64(h + 72, body);
	put_le64(h + 80, body);
	struct dcr_buf img = {0};
	add(&img, h, sizeof(h));
	rec_head(rh, DCR_REC_ANCILLARY + 0x100, body - 16);
	add(&img, rh, 16);
	if (dcr_buf_reserve(&img, body + 32))
		die("out of memory", NULL);
	memset(img.p + img.len, 0, body - 16);
	img.len += body - 16;
	size_t np = dcr_blake3_npieces(img.len, DCR_PIECE_LOG2);
	uint8_t(*cv)[32] = calloc(np, 32);
	if (!cv)
		die("out of memory", NULL);
	dcr_blake3_pieces(img.p, img.len, DCR_PIECE_LOG2, cv, &dg);
	add(&img, dg.b, 32);
	struct dcr_manifest m = {0};
	uint64_t psize = img.len;
	memcpy(m.attempt, attempt, 16);
	m.npayloads = 1;
	m.psize = &psize;
	m.pdigest = &dg;
	m.piece_log2 = DCR_PIECE_LOG2;
	m.pieces = cv;
	m.npieces = np;
	dcr_state_id(NULL, 0, &m.target);
	struct dcr_buf man = {0};
	if (dcr_manifest_build(&m, &man, &e))
		die("manifest", &e);
	write_pack(out, &img, &man);
	free(cv);
	dcr_buf_free(&img);
	dcr_buf_free(&man);
	return 0;
}

static int cmd_endcount(const char *in, const char *out)
{
	struct dcr_err e = {0};
	uint8_t *buf;
	size_t len;
	if (dcr_read_file(in, 1u << 30, &buf, &len, &e))
		die(in, &e);
	/* ... END record header[16] target[32] tensors items changes trailer[32] */
	if (len < 64 + 16 + 56 + 32 || get_le32(buf + len - 32 - 56 - 16) != DCR_REC_END)
		die("endcount: IN does not end in END and a trailer", NULL);
	uint8_t *items = buf + len - 32 - 16;
	put_le64(items, get_le64(items) + 1);
	dcr_digest d;
	dcr_blake3(buf, len - 32, &d);
	memcpy(buf + len - 32, d.b, 32);
	if (dcr_write_file_atomic(out, buf, len, &e))
		die(out, &e);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
#ifdef __SANITIZE_ADDRESS__
	/* a generator that writes one file and exits: what it does not free
	 * is not a leak worth a report (the programs it feeds are checked) */
	__lsan_disable();
#endif
	if (argc == 4 && !strcmp(argv[1], "tamper"))
		return cmd_tamper(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "index"))
		return cmd_index((uint32_t)strtoul(argv[2], NULL, 10), argv[3]);
	if (argc == 3 && !strcmp(argv[1], "bomb"))
		return cmd_bomb(argv[2]);
	if ((argc == 4 || (argc == 5 && (!strcmp(argv[4], "spread") || !strcmp(argv[4], "period")))) &&
	    !strcmp(argv[1], "again"))
		return cmd_again(strtoull(argv[2], NULL, 10), argv[3], argc == 5,
				 argc == 5 && !strcmp(argv[4], "period"));
	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "dense"))
		return cmd_dense(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10),
				 argc == 6 ? strtoull(argv[5], NULL, 10) : 0, argv[4]);
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "overlap"))
		return cmd_overlap(argv[2], argv[3], argc == 5 ? argv[4] : NULL);
	if (argc == 4 && !strcmp(argv[1], "interleave"))
		return cmd_interleave(argv[2], argv[3]);
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "names"))
		return cmd_names(strtoull(argv[2], NULL, 10), argv[3],
				 argc == 5 ? (size_t)strtoull(argv[4], NULL, 10) : 9);
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "tensors"))
		return cmd_tensors(strtoull(argv[2], NULL, 10), argv[3],
				   argc == 5 ? (size_t)strtoull(argv[4], NULL, 10) : 13);
	if (argc == 4 && !strcmp(argv[1], "endcount"))
		return cmd_endcount(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "oddsize"))
		return cmd_oddsize(strtoull(argv[2], NULL, 10), argv[3]);
	fputs("usage: hostile index N OUT | bomb OUT | again ITEMS OUT [spread|period] | dense ELEMS ITEMS OUT [TENSOR] | tamper IN OUT\n"
	      "       hostile overlap CKPT OUT [plain|dense|corrupt-dense|pastend|undeclared|escape|xor-new|repeat|misdigest]\n"
	      "       hostile interleave IN OUT | tensors N OUT [NAMELEN] | names N OUT [NAMELEN] | oddsize SIZE OUT | endcount IN OUT\n",
	      stderr);
	return 129;
}
