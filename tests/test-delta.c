/* test-delta.c - lib/delta.c: the delta stream writer and reader round-trip
 * every record; every truncation and every single-byte corruption of a
 * stream is refused (never taken for a whole delta, never a crash); the
 * PLAIN item codec round-trips changes of every unit size, and hostile item
 * data and record bodies give errors, not crashes. */
#include "config.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcr.h"
#include "core/bytes.h"
#include "core/file.h"

/* ---- memory sink and source ---- */

static int buf_write(void *ctx, const void *p, size_t n)
{
	return dcr_buf_add(ctx, p, n) ? -ENOMEM : 0;
}

struct mem {
	const uint8_t *p;
	size_t len, off;
};

static int mem_read(void *ctx, void *p, size_t n)
{
	struct mem *m = ctx;
	if (n > m->len - m->off)
		return -EPIPE;
	memcpy(p, m->p + m->off, n);
	m->off += n;
	return 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint64_t mask(unsigned unit)
{
	return unit == 8 ? ~0ULL : (1ULL << (8 * unit)) - 1;
}

/* ---- a sample stream ---- */

static const char *names[] = {"a.weight", "b.new", "c.\xc3\xa9t\xc3\xa9"};

static void sample(struct dcr_buf *out, dcr_digest *base, dcr_digest *target)
{
	struct dcr_delta_writer w;
	struct dcr_err e = {0};
	uint8_t attempt[16];
	for (int i = 0; i < 16; i++)
		attempt[i] = (uint8_t)(0xa0 + i);
	for (int i = 0; i < 32; i++) {
		base->b[i] = (uint8_t)i;
		target->b[i] = (uint8_t)(255 - i);
	}
	cr_assert_eq(dcr_delta_writer_init(&w, (struct dcr_sink){buf_write, out}, base, attempt,
					   "test", &e), 0, "%s", e.msg);
	cr_assert_eq(dcr_delta_write_remove(&w, "gone.weight", &e), 0);
	struct dcr_delta_tensor t0 = {.name = (char *)names[0], .file = "model-1.safetensors",
				      .dtype = DCR_DT_BF16, .ndim = 2, .shape = {4, 8}};
	struct dcr_delta_tensor t1 = {.name = (char *)names[1], .file = "model-2.safetensors",
				      .flags = DCR_TENSOR_NEW, .dtype = DCR_DT_F32, .ndim = 1,
				      .shape = {5}};
	struct dcr_delta_tensor t2 = {.name = (char *)names[2], .file = "model-2.safetensors",
				      .dtype = DCR_DT_U64, .ndim = 0};
	cr_assert_eq(dcr_delta_write_tensor(&w, &t0, &e), 0);
	/* an XOR item: 3 changes in 32 elements */
	struct dcr_changes ch = {0};
	cr_assert_eq(dcr_changes_reserve(&ch, 8), 0);
	ch.n = 3;
	ch.pos[0] = 0, ch.pos[1] = 7, ch.pos[2] = 31;
	ch.val[0] = 1, ch.val[1] = 0x8000, ch.val[2] = 3;
	struct dcr_buf d = {0};
	struct dcr_item it = {.tensor = 0, .enc = DCR_ENC_XOR, .start = 0, .len = 32, .n = 3};
	cr_assert_eq(dcr_item_encode(&ch, 2, 32, 0, &it.codec, &d, &e), 0, "%s", e.msg);
	it.data = d.p;
	it.data_len = d.len;
	cr_assert_eq(dcr_delta_write_item(&w, &it, &e), 0);
	cr_assert_eq(dcr_delta_write_tensor(&w, &t1, &e), 0);
	/* a dense overwrite of 5 f32 */
	ch.n = 5;
	for (int i = 0; i < 5; i++)
		ch.pos[i] = (uint64_t)i, ch.val[i] = 0x3f800000u + (uint64_t)i;
	d.len = 0;
	struct dcr_item it2 = {.tensor = 1, .enc = DCR_ENC_OVERWRITE, .flags = DCR_ITEM_DENSE,
			       .start = 0, .len = 5, .n = 5};
	cr_assert_eq(dcr_item_encode(&ch, 4, 5, 1, &it2.codec, &d, &e), 0, "%s", e.msg);
	it2.data = d.p;
	it2.data_len = d.len;
	cr_assert_eq(dcr_delta_write_item(&w, &it2, &e), 0);
	cr_assert_eq(dcr_delta_write_tensor(&w, &t2, &e), 0);
	dcr_digest dg;
	for (uint32_t i = 0; i < 3; i++) {
		memset(dg.b, (int)(0x10 + i), 32);
		cr_assert_eq(dcr_delta_write_done(&w, i, &dg, &e), 0);
	}
	cr_assert_eq(dcr_delta_write_end(&w, target, &e), 0);
	cr_assert_eq(w.bytes, out->len);
	dcr_delta_writer_release(&w);
	dcr_buf_free(&d);
	dcr_changes_free(&ch);
}

/* Read a whole stream; 0 when complete and verified, else the error. */
static int read_all(const uint8_t *p, size_t len, int check, struct dcr_err *e)
{
	struct mem m = {p, len, 0};
	struct dcr_delta_reader r;
	int s = dcr_delta_reader_init(&r, (struct dcr_source){mem_read, &m}, "test", e);
	struct dcr_delta_rec rec;
	int n = 0;
	while (!s && (s = dcr_delta_next(&r, &rec, e)) == 1) {
		s = 0;
		n++;
		/* the body parsers must cope with whatever the framing lets through */
		struct dcr_delta_tensor t;
		struct dcr_item it;
		char *name = NULL;
		uint32_t ti;
		dcr_digest d;
		switch (rec.type) {
		case DCR_REC_TENSOR:
			if (!dcr_delta_parse_tensor(&rec, &t, e))
				dcr_delta_tensor_clear(&t);
			break;
		case DCR_REC_ITEM:
			if (!dcr_delta_parse_item(&rec, &it, e)) {
				struct dcr_changes ch = {0};
				dcr_item_decode(&it, 2, &ch, e);
				dcr_changes_free(&ch);
			}
			break;
		case DCR_REC_REMOVE:
			if (!dcr_delta_parse_name(&rec, &name, e))
				free(name);
			break;
		case DCR_REC_DONE:
			dcr_delta_parse_done(&rec, &ti, &d, e);
			break;
		}
		if (r.ended)
			break;
	}
	if (check && !s) {
		cr_assert(r.ended);
		cr_assert_eq(n, 10); /* 9 records and END */
	}
	dcr_delta_reader_release(&r);
	return s;
}

Test(delta, writer_reader_round_trip)
{
	struct dcr_buf out = {0};
	dcr_digest base, target;
	sample(&out, &base, &target);
	cr_assert_eq(memcmp(out.p, DCR_DELTA_MAGIC, 8), 0);
	cr_assert_eq(get_le32(out.p + 8), DCR_DELTA_VERSION);

	struct mem m = {out.p, out.len, 0};
	struct dcr_delta_reader r;
	struct dcr_err e = {0};
	cr_assert_eq(dcr_delta_reader_init(&r, (struct dcr_source){mem_read, &m}, "test", &e), 0,
		     "%s", e.msg);
	cr_assert_eq(memcmp(r.base.b, base.b, 32), 0);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(r.attempt[i], 0xa0 + i);
	struct dcr_delta_rec rec;
	uint32_t want[] = {DCR_REC_REMOVE, DCR_REC_TENSOR, DCR_REC_ITEM, DCR_REC_TENSOR,
			   DCR_REC_ITEM, DCR_REC_TENSOR, DCR_REC_DONE, DCR_REC_DONE, DCR_REC_DONE};
	int k = 0, s, tensors = 0, dones = 0;
	while ((s = dcr_delta_next(&r, &rec, &e)) == 1) {
		if (rec.type == DCR_REC_END)
			continue;
		cr_assert_lt(k, 9);
		cr_assert_eq(rec.type, want[k], "record %d: type %u", k, rec.type);
		k++;
		struct dcr_delta_tensor t;
		struct dcr_item it;
		struct dcr_changes ch = {0};
		char *name;
		switch (rec.type) {
		case DCR_REC_REMOVE:
			cr_assert_eq(dcr_delta_parse_name(&rec, &name, &e), 0);
			cr_assert_str_eq(name, "gone.weight");
			free(name);
			break;
		case DCR_REC_TENSOR:
			cr_assert_eq(dcr_delta_parse_tensor(&rec, &t, &e), 0, "%s", e.msg);
			cr_assert_str_eq(t.name, names[tensors]);
			if (tensors == 0) {
				cr_assert_str_eq(t.file, "model-1.safetensors");
				cr_assert_eq(t.dtype, DCR_DT_BF16);
				cr_assert_eq(t.ndim, 2);
				cr_assert_eq(t.shape[0], 4);
				cr_assert_eq(t.shape[1], 8);
				cr_assert_eq(t.nelem, 32);
				cr_assert_eq(t.flags, 0);
			} else if (tensors == 1) {
				cr_assert_eq(t.flags, DCR_TENSOR_NEW);
				cr_assert_eq(t.dtype, DCR_DT_F32);
				cr_assert_eq(t.nelem, 5);
			} else {
				cr_assert_eq(t.ndim, 0);
				cr_assert_eq(t.nelem, 1);
				cr_assert_eq(t.dtype, DCR_DT_U64);
			}
			tensors++;
			dcr_delta_tensor_clear(&t);
			break;
		case DCR_REC_ITEM:
			cr_assert_eq(dcr_delta_parse_item(&rec, &it, &e), 0, "%s", e.msg);
			if (it.tensor == 0) {
				cr_assert_eq(it.enc, DCR_ENC_XOR);
				cr_assert_eq(it.len, 32);
				cr_assert_eq(it.n, 3);
				cr_assert_eq(dcr_item_decode(&it, 2, &ch, &e), 0, "%s", e.msg);
				cr_assert_eq(ch.n, 3);
				cr_assert_eq(ch.pos[1], 7);
				cr_assert_eq(ch.val[1], 0x8000);
				cr_assert_eq(ch.pos[2], 31);
				cr_assert_eq(ch.val[2], 3);
			} else {
				cr_assert_eq(it.tensor, 1);
				cr_assert_eq(it.enc, DCR_ENC_OVERWRITE);
				cr_assert_eq(it.flags, DCR_ITEM_DENSE);
				cr_assert_eq(dcr_item_decode(&it, 4, &ch, &e), 0, "%s", e.msg);
				cr_assert_eq(ch.n, 5);
				for (int i = 0; i < 5; i++) {
					cr_assert_eq(ch.pos[i], (uint64_t)i);
					cr_assert_eq(ch.val[i], 0x3f800000u + (uint64_t)i);
				}
			}
			dcr_changes_free(&ch);
			break;
		case DCR_REC_DONE: {
			uint32_t ti;
			dcr_digest d;
			cr_assert_eq(dcr_delta_parse_done(&rec, &ti, &d, &e), 0);
			cr_assert_eq(ti, (uint32_t)dones);
			cr_assert_eq(d.b[0], 0x10 + dones);
			dones++;
			break;
		}
		}
	}
	cr_assert_eq(s, 0, "%s", e.msg);
	cr_assert_eq(k, 9);
	cr_assert(r.ended);
	cr_assert_eq(memcmp(r.target.b, target.b, 32), 0);
	cr_assert_eq(r.end_tensors, 3);
	cr_assert_eq(r.end_items, 2);
	cr_assert_eq(r.end_changes, 8);
	cr_assert_eq(r.offset, out.len);
	cr_assert_eq(m.off, out.len);
	/* after END, next keeps answering 0 */
	cr_assert_eq(dcr_delta_next(&r, &rec, &e), 0);
	dcr_delta_reader_release(&r);
	dcr_buf_free(&out);
}

/* dcr_source_fdbuf_read gives the bytes dcr_source_fd_read gives, in
 * reads smaller and larger than its buffer, says -EPIPE where the file
 * ends inside a read, and reads a delta as the plain source does. */
Test(delta, buffered_source_reads_what_the_plain_one_reads)
{
	char path[] = "/tmp/dcr-fdbuf-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	unlink(path);
	enum { N = 100000 };
	uint8_t *data = malloc(N), *got = malloc(N);
	for (size_t i = 0; i < N; i++)
		data[i] = (uint8_t)(i * 7 + i / 251);
	cr_assert_eq(dcr_write_full(fd, data, N), 0);
	static const size_t caps[] = {1, 16, 1000, 4096, 1 << 20};
	for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++) {
		struct dcr_fdbuf b;
		cr_assert_eq(dcr_fdbuf_init(&b, fd, caps[c]), 0);
		cr_assert_eq(dcr_fdbuf_rewind(&b), 0);
		size_t at = 0, step = 0;
		uint64_t s = 3;
		while (at < N) {
			s = s * 6364136223846793005ULL + 1442695040888963407ULL;
			/* 0 to 16 bytes, a record header's worth, or up to 3 buffers */
			step = (s >> 33) % 4 ? (s >> 40) % 17 : (s >> 40) % (3 * caps[c] + 1);
			if (step > N - at)
				step = N - at;
			cr_assert_eq(dcr_source_fdbuf_read(&b, got + at, step), 0, "cap %zu at %zu",
				     caps[c], at);
			at += step;
		}
		cr_assert(!memcmp(got, data, N), "cap %zu: other bytes", caps[c]);
		uint8_t x;
		cr_assert_eq(dcr_source_fdbuf_read(&b, &x, 1), -EPIPE, "cap %zu: past the end", caps[c]);
		/* rewound with bytes read ahead and not consumed */
		cr_assert_eq(dcr_fdbuf_rewind(&b), 0);
		cr_assert_eq(dcr_source_fdbuf_read(&b, got, 1), 0);
		cr_assert_eq(dcr_fdbuf_rewind(&b), 0);
		cr_assert_eq(dcr_source_fdbuf_read(&b, got, 3), 0);
		cr_assert(!memcmp(got, data, 3), "cap %zu: rewound to other bytes", caps[c]);
		/* a read that the end of the file cuts short */
		cr_assert_eq(dcr_fdbuf_rewind(&b), 0);
		cr_assert_eq(dcr_source_fdbuf_read(&b, got, N - 10), 0);
		cr_assert_eq(dcr_source_fdbuf_read(&b, got, 11), -EPIPE, "cap %zu", caps[c]);
		dcr_fdbuf_release(&b);
	}
	/* a delta read through it, record by record */
	struct dcr_buf out = {0};
	dcr_digest base, target;
	sample(&out, &base, &target);
	cr_assert_eq(ftruncate(fd, 0), 0);
	cr_assert_eq(dcr_pwrite_full(fd, out.p, out.len, 0), 0);
	struct dcr_fdbuf b;
	cr_assert_eq(dcr_fdbuf_init(&b, fd, 64), 0);
	cr_assert_eq(dcr_fdbuf_rewind(&b), 0);
	struct mem m = {out.p, out.len, 0};
	struct dcr_delta_reader r1, r2;
	struct dcr_err e = {0};
	cr_assert_eq(dcr_delta_reader_init(&r1, (struct dcr_source){mem_read, &m}, "test", &e), 0);
	cr_assert_eq(dcr_delta_reader_init(&r2, (struct dcr_source){dcr_source_fdbuf_read, &b},
					   "test", &e), 0, "%s", e.msg);
	struct dcr_delta_rec a, c;
	int s1, s2, n = 0;
	do {
		s1 = dcr_delta_next(&r1, &a, &e);
		s2 = dcr_delta_next(&r2, &c, &e);
		cr_assert_eq(s2, s1, "record %d: %s", n, e.msg);
		if (s1 == 1)
			cr_assert(a.type == c.type && a.len == c.len && !memcmp(a.body, c.body, a.len),
				  "record %d differs", n);
		n++;
	} while (s1 == 1);
	cr_assert_eq(s1, 0);
	dcr_delta_reader_release(&r1);
	dcr_delta_reader_release(&r2);
	dcr_fdbuf_release(&b);
	dcr_buf_free(&out);
	close(fd);
	free(data);
	free(got);
}

Test(delta, every_truncation_is_refused)
{
	struct dcr_buf out = {0};
	dcr_digest base, target;
	sample(&out, &base, &target);
	struct dcr_err e = {0};
	cr_assert_eq(read_all(out.p, out.len, 1, &e), 0, "intact: %s", e.msg);
	for (size_t cut = 0; cut < out.len; cut++) {
		e.msg[0] = 0;
		int s = read_all(out.p, cut, 0, &e);
		cr_assert_lt(s, 0, "a delta cut at %zu of %zu bytes was accepted", cut, out.len);
		cr_assert_gt(strlen(e.msg), 0);
	}
	dcr_buf_free(&out);
}

Test(delta, every_byte_flip_is_refused)
{
	struct dcr_buf out = {0};
	dcr_digest base, target;
	sample(&out, &base, &target);
	struct dcr_err e = {0};
	uint8_t *b = malloc(out.len);
	for (size_t i = 0; i < out.len; i++) {
		for (int bit = 0; bit < 8; bit += 7) {
			memcpy(b, out.p, out.len);
			b[i] ^= (uint8_t)(1u << bit);
			e.msg[0] = 0;
			int s = read_all(b, out.len, 0, &e);
			cr_assert_lt(s, 0, "bit %d of byte %zu flipped: accepted", bit, i);
			cr_assert_gt(strlen(e.msg), 0);
		}
	}
	/* random garbage of every small length */
	for (size_t n = 0; n < 300; n++) {
		for (size_t i = 0; i < n && i < out.len; i++)
			b[i] = (uint8_t)next();
		if (n >= 8 && (n & 1))
			memcpy(b, DCR_DELTA_MAGIC, 8);
		cr_assert_lt(read_all(b, n < out.len ? n : out.len, 0, &e), 0);
	}
	free(b);
	dcr_buf_free(&out);
}

Test(delta, oversized_record_and_unknown_types)
{
	struct dcr_buf out = {0};
	dcr_digest base, target;
	sample(&out, &base, &target);
	size_t rec0 = DCR_DELTA_HDR_LEN;
	struct dcr_err e = {0};
	uint8_t *b = malloc(out.len);
	/* length 2^63: refused before any allocation */
	memcpy(b, out.p, out.len);
	put_le64(b + rec0 + 8, 1ULL << 63);
	cr_assert_lt(read_all(b, out.len, 0, &e), 0);
	/* unknown must-understand record type */
	memcpy(b, out.p, out.len);
	put_le32(b + rec0, 0x77);
	cr_assert_lt(read_all(b, out.len, 0, &e), 0);
	/* unknown version, unknown header flags */
	memcpy(b, out.p, out.len);
	put_le32(b + 8, 99);
	cr_assert_lt(read_all(b, out.len, 0, &e), 0);
	cr_assert(strstr(e.msg, "version"), "%s", e.msg);
	memcpy(b, out.p, out.len);
	put_le32(b + 12, 0x80);
	cr_assert_lt(read_all(b, out.len, 0, &e), 0);
	free(b);
	dcr_buf_free(&out);
}

/* ---- the PLAIN item codec ---- */

/* A dense item as an OVERWRITE, decoded straight to bytes: the stored
 * bytes of the values, every cut refused, an item of another kind
 * refused. */
static void dense_bytes(const struct dcr_item *xor_it, unsigned unit, const struct dcr_changes *ch,
			const uint8_t *data, size_t len)
{
	struct dcr_err e = {0};
	struct dcr_buf tmp = {0};
	size_t nb = (size_t)xor_it->len * unit;
	uint8_t *got = malloc(nb + 1), *want = malloc(nb + 1);
	for (size_t i = 0; i < ch->n; i++)
		store_unit(want + i * unit, unit, ch->val[i]);
	struct dcr_item it = *xor_it;
	cr_assert_eq(dcr_item_decode_dense(&it, unit, got, &tmp, &e), DCR_EFORMAT, "an XOR item taken");
	it.enc = DCR_ENC_OVERWRITE;
	cr_assert(dcr_item_is_dense_overwrite(&it));
	cr_assert_eq(dcr_item_decode_dense(&it, unit, got, &tmp, &e), 0, "unit %u: %s", unit, e.msg);
	cr_assert_eq(memcmp(got, want, nb), 0, "unit %u: dense bytes differ", unit);
	for (size_t cut = 0; cut < len; cut++) {
		struct dcr_item t = it;
		uint8_t *c = malloc(cut + 1);
		memcpy(c, data, cut);
		t.data = c;
		t.data_len = cut;
		cr_assert_lt(dcr_item_decode_dense(&t, unit, got, &tmp, &e), 0, "cut at %zu accepted", cut);
		free(c);
	}
	struct dcr_item t = it;
	t.flags = 0;
	cr_assert(!dcr_item_is_dense_overwrite(&t));
	cr_assert_lt(dcr_item_decode_dense(&t, unit, got, &tmp, &e), 0, "a sparse item taken");
	if (it.len) {
		t = it;
		t.len = t.n = it.len - 1;
		cr_assert_lt(dcr_item_decode_dense(&t, unit, got, &tmp, &e), 0, "len-1 accepted");
	}
	free(got);
	free(want);
	dcr_buf_free(&tmp);
}

static void round_trip(unsigned unit, uint64_t len, size_t n, int dense)
{
	struct dcr_changes ch = {0}, got = {0};
	struct dcr_err e = {0};
	cr_assert_eq(dcr_changes_reserve(&ch, n + 1), 0);
	/* n distinct sorted positions in [0, len) */
	size_t k = 0;
	for (uint64_t p = 0; p < len && k < n; p++)
		if (dense || (len - p) <= n - k || next() % (len / (n ? n : 1) + 1) == 0)
			ch.pos[k++] = p;
	ch.n = k;
	for (size_t i = 0; i < k; i++) {
		uint64_t v = next() & mask(unit);
		if (i % 5 == 0)
			v = mask(unit); /* every bit */
		if (i % 7 == 1)
			v = 1ULL << (8 * unit - 1); /* the top bit alone */
		ch.val[i] = v;
	}
	struct dcr_buf d = {0};
	struct dcr_item it = {.enc = DCR_ENC_XOR, .start = 0, .len = len, .n = k,
			      .flags = dense ? DCR_ITEM_DENSE : 0};
	cr_assert_eq(dcr_item_encode(&ch, unit, len, dense, &it.codec, &d, &e), 0, "%s", e.msg);
	cr_assert_eq(it.codec, DCR_CODEC_PLAIN);
	it.data = d.p;
	it.data_len = d.len;
	cr_assert_eq(dcr_item_decode(&it, unit, &got, &e), 0, "unit %u len %llu n %zu: %s", unit,
		     (unsigned long long)len, k, e.msg);
	cr_assert_eq(got.n, k);
	for (size_t i = 0; i < k; i++) {
		cr_assert_eq(got.pos[i], ch.pos[i], "unit %u: position %zu", unit, i);
		cr_assert_eq(got.val[i], ch.val[i], "unit %u: value %zu", unit, i);
	}
	/* every truncation and a flipped byte of the data: an error or (for a
	 * flip zstd cannot see) other values, never a crash or a read past */
	for (size_t cut = 0; cut < d.len; cut++) {
		uint8_t *c = malloc(cut + 1);
		memcpy(c, d.p, cut);
		struct dcr_item t = it;
		t.data = c;
		t.data_len = cut;
		cr_assert_lt(dcr_item_decode(&t, unit, &got, &e), 0, "cut at %zu accepted", cut);
		free(c);
	}
	/* trailing bytes are refused */
	uint8_t *c = malloc(d.len + 1);
	memcpy(c, d.p, d.len);
	c[d.len] = 0;
	struct dcr_item t = it;
	t.data = c;
	t.data_len = d.len + 1;
	cr_assert_lt(dcr_item_decode(&t, unit, &got, &e), 0, "trailing byte accepted");
	/* a claimed count that disagrees with the data */
	t = it;
	if (k) {
		t.n = k - 1;
		if (dense)
			t.len = k - 1;
		cr_assert_lt(dcr_item_decode(&t, unit, &got, &e), 0, "n-1 accepted");
	}
	t = it;
	t.n = k + 1;
	if (t.n <= t.len) {
		if (dense)
			t.len = k + 1;
		cr_assert_lt(dcr_item_decode(&t, unit, &got, &e), 0, "n+1 accepted");
	}
	if (dense)
		dense_bytes(&it, unit, &ch, d.p, d.len);
	/* the other unit sizes cannot read it as the same changes */
	for (unsigned u = 1; u <= 8; u *= 2) {
		if (u == unit || !k)
			continue;
		int r = dcr_item_decode(&it, u, &got, &e);
		cr_assert_lt(r, 0, "unit %u data read as unit %u", unit, u);
	}
	free(c);
	dcr_buf_free(&d);
	dcr_changes_free(&ch);
	dcr_changes_free(&got);
}

static int discard(void *ctx, const void *p, size_t n)
{
	(void)p;
	*(uint64_t *)ctx += n;
	return 0;
}

/* A writer makes no delta a reader refuses: TENSOR and REMOVE bodies past
 * DCR_DELTA_NAMES_BYTES are refused, the refused record not written. */
Test(delta, writer_refuses_names_past_their_bytes)
{
	struct dcr_delta_writer w;
	struct dcr_err e = {0};
	dcr_digest base = {{0}};
	uint8_t attempt[16] = {0};
	uint64_t out = 0;
	cr_assert_eq(dcr_delta_writer_init(&w, (struct dcr_sink){discard, &out}, &base, attempt,
					   "test", &e), 0);
	static char name[60001];
	memset(name, 'x', 60000);
	struct dcr_delta_tensor t = {.name = name, .file = "m.safetensors",
				     .dtype = DCR_DT_BF16, .ndim = 1, .shape = {1}};
	int r = 0;
	uint32_t i = 0;
	for (; i < 10000 && !r; i++) {
		name[i % 60000] = 'y'; /* names differ; their order is the caller's */
		r = i % 2 ? dcr_delta_write_remove(&w, name, &e) : dcr_delta_write_tensor(&w, &t, &e);
	}
	cr_assert_eq(r, DCR_EFORMAT);
	cr_assert(strstr(e.msg, "more than 256 MiB"), "%s", e.msg);
	cr_assert_leq(w.name_bytes, DCR_DELTA_NAMES_BYTES);
	cr_assert_gt(w.name_bytes + 60000, DCR_DELTA_NAMES_BYTES);
	cr_assert_eq(w.ntensors + w.nremoved, i - 1);
	cr_assert_eq(w.rec.len, 0);
	dcr_delta_writer_release(&w);
}

Test(delta, plain_codec_round_trip)
{
	unsigned units[] = {1, 2, 4, 8};
	for (int u = 0; u < 4; u++) {
		round_trip(units[u], 1, 1, 0);
		round_trip(units[u], 1000, 0, 0);
		round_trip(units[u], 1000, 1, 0);
		round_trip(units[u], 1000, 37, 0);
		round_trip(units[u], 1000, 1000, 0);
		round_trip(units[u], 300, 300, 1);
		round_trip(units[u], 1u << 20, 50, 0); /* gaps over several varint bytes */
	}
	/* last element of a maximal range */
	struct dcr_changes ch = {0}, got = {0};
	struct dcr_err e = {0};
	dcr_changes_reserve(&ch, 2);
	ch.n = 2;
	ch.pos[0] = 0, ch.pos[1] = DCR_ITEM_MAX_ELEMS - 1;
	ch.val[0] = 1, ch.val[1] = ~0ULL;
	struct dcr_buf d = {0};
	struct dcr_item it = {.enc = DCR_ENC_XOR, .len = DCR_ITEM_MAX_ELEMS, .n = 2};
	cr_assert_eq(dcr_item_encode(&ch, 8, it.len, 0, &it.codec, &d, &e), 0);
	it.data = d.p;
	it.data_len = d.len;
	cr_assert_eq(dcr_item_decode(&it, 8, &got, &e), 0, "%s", e.msg);
	cr_assert_eq(got.pos[1], DCR_ITEM_MAX_ELEMS - 1);
	cr_assert_eq(got.val[1], ~0ULL);
	/* the same data claiming a shorter range puts a position past it */
	it.len = DCR_ITEM_MAX_ELEMS - 1;
	cr_assert_lt(dcr_item_decode(&it, 8, &got, &e), 0);
	/* and a range beyond the limit is refused */
	it.len = (uint64_t)DCR_ITEM_MAX_ELEMS + 1;
	cr_assert_lt(dcr_item_decode(&it, 8, &got, &e), 0);
	dcr_buf_free(&d);
	dcr_changes_free(&ch);
	dcr_changes_free(&got);
}

Test(delta, hostile_item_data_gives_errors)
{
	struct dcr_changes got = {0};
	struct dcr_err e = {0};
	uint8_t buf[512];
	for (int round = 0; round < 20000; round++) {
		size_t n = next() % sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)next();
		if (round & 1 && n > 8) { /* a plausible zstd frame magic after a length */
			buf[0] = (uint8_t)(n / 3);
			buf[1] = 0x28, buf[2] = 0xb5, buf[3] = 0x2f, buf[4] = 0xfd;
		}
		struct dcr_item it = {.enc = DCR_ENC_XOR, .codec = DCR_CODEC_PLAIN,
				      .len = 1 + next() % 100000, .data = buf, .data_len = n};
		it.n = next() % (it.len + 1);
		if (round % 3 == 0) {
			it.flags = DCR_ITEM_DENSE;
			it.n = it.len = 1 + next() % 64;
		}
		unsigned unit = 1u << (next() % 4);
		int r = dcr_item_decode(&it, unit, &got, &e);
		if (r == 0) { /* if it decodes, what it gives must be in range */
			cr_assert_eq(got.n, it.n);
			for (size_t i = 0; i < got.n; i++) {
				cr_assert_lt(got.pos[i], it.len);
				cr_assert(i == 0 || got.pos[i] > got.pos[i - 1]);
				cr_assert_eq(got.val[i] & ~mask(unit), 0);
			}
		}
	}
	/* unknown codec, n > len, huge counts */
	struct dcr_item it = {.enc = DCR_ENC_XOR, .codec = 99, .len = 10, .n = 1, .data = buf,
			      .data_len = 4};
	cr_assert_lt(dcr_item_decode(&it, 2, &got, &e), 0);
	it.codec = DCR_CODEC_PLAIN;
	it.n = 11;
	cr_assert_lt(dcr_item_decode(&it, 2, &got, &e), 0);
	it.n = it.len = UINT64_MAX;
	cr_assert_lt(dcr_item_decode(&it, 2, &got, &e), 0);
	it.flags = DCR_ITEM_DENSE;
	it.len = 10;
	it.n = 9;
	cr_assert_lt(dcr_item_decode(&it, 2, &got, &e), 0);
	dcr_changes_free(&got);
}

Test(delta, hostile_record_bodies_give_errors)
{
	uint8_t buf[256];
	struct dcr_err e = {0};
	for (int round = 0; round < 50000; round++) {
		size_t n = next() % sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)next();
		if (round & 1 && n > 6) { /* small plausible lengths */
			buf[0] = buf[1] = buf[2] = buf[3] = 0;
			buf[4] = (uint8_t)(next() % 8);
		}
		struct dcr_delta_rec rec = {.type = DCR_REC_TENSOR, .len = n, .body = buf};
		struct dcr_delta_tensor t;
		if (!dcr_delta_parse_tensor(&rec, &t, &e)) {
			cr_assert(t.name && t.file);
			cr_assert_lt(t.dtype, DCR_DT_COUNT);
			cr_assert_leq(t.ndim, DCR_MAX_NDIM);
			dcr_delta_tensor_clear(&t);
		}
		struct dcr_item it;
		if (!dcr_delta_parse_item(&rec, &it, &e)) {
			cr_assert_leq(it.n, it.len);
			cr_assert_leq(it.data + it.data_len, buf + n);
			cr_assert_geq(it.data, buf);
		}
		char *name = NULL;
		if (!dcr_delta_parse_name(&rec, &name, &e)) {
			cr_assert(name);
			cr_assert_eq(strlen(name) + 1 <= n, 1);
			free(name);
		}
		uint32_t ti;
		dcr_digest d;
		dcr_delta_parse_done(&rec, &ti, &d, &e);
	}
	/* every truncation of a good TENSOR body */
	struct dcr_buf b = {0};
	struct dcr_delta_tensor t0 = {.name = "x", .file = "m.safetensors", .dtype = DCR_DT_BF16,
				      .ndim = 2, .shape = {3, 4}};
	cr_assert_eq(dcr_delta_tensor_body(&b, &t0), 0);
	for (size_t cut = 0; cut < b.len; cut++) {
		struct dcr_delta_rec rec = {.type = DCR_REC_TENSOR, .len = cut, .body = b.p};
		struct dcr_delta_tensor t;
		cr_assert_lt(dcr_delta_parse_tensor(&rec, &t, &e), 0, "cut at %zu accepted", cut);
	}
	struct dcr_delta_rec rec = {.type = DCR_REC_TENSOR, .len = b.len, .body = b.p};
	struct dcr_delta_tensor t;
	cr_assert_eq(dcr_delta_parse_tensor(&rec, &t, &e), 0, "%s", e.msg);
	dcr_delta_tensor_clear(&t);
	dcr_buf_free(&b);
}

/* dcr_scan_changes (the CPU reference of the GPU diff) against a unit-by-
 * unit compare, for every unit size, sparse and dense differences, and
 * lengths that end inside a vector step; pos and val hold exactly one
 * entry per unit (the vector scan writes slots past its last change
 * without a branch: under ASan, never past them). */
Test(delta, scan_changes_finds_every_changed_unit)
{
	enum { N = 4096 + 40 };
	uint8_t *a = malloc(N), *b = malloc(N);
	uint64_t s = 5;
	for (unsigned unit = 1; unit <= 8; unit *= 2)
		for (int density = 0; density < 4; density++)
			for (size_t len = N - 40; len <= N; len += 8) {
				for (size_t i = 0; i < N; i++) {
					s = s * 6364136223846793005ULL + 1442695040888963407ULL;
					a[i] = (uint8_t)(s >> 33);
					int flip = density == 3 || (s >> 20) % (density == 0 ? 997 : density == 1 ? 61 : 5) == 0;
					b[i] = flip ? (uint8_t)(a[i] ^ (1u << ((s >> 40) % 8))) : a[i];
				}
				uint64_t *pos = malloc(len / unit * 8), *val = malloc(len / unit * 8);
				cr_assert(pos && val);
				size_t got = dcr_scan_changes(a, b, len, unit, pos, val);
				size_t k = 0;
				for (size_t u = 0; u < len / unit; u++) {
					uint64_t x = load_unit(a + u * unit, unit), y = load_unit(b + u * unit, unit);
					if (x == y)
						continue;
					cr_assert_lt(k, got, "unit %u: change at %zu missed", unit, u);
					cr_assert_eq(pos[k], u, "unit %u: change %zu at %llu, expected %zu", unit, k,
						     (unsigned long long)pos[k], u);
					cr_assert_eq(val[k], x ^ y, "unit %u: mask of change %zu", unit, k);
					k++;
				}
				cr_assert_eq(k, got, "unit %u: %zu changes found, %zu expected", unit, got, k);
				free(pos);
				free(val);
			}
	free(a);
	free(b);
}
