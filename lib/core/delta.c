/* delta.c - write and read delta streams; the PLAIN item codec. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <zstd.h>

#include "core/bytes.h"
#include "core/delta.h"
#include "core/file.h"
#include "core/util.h"

int dcr_attempt_id(const uint8_t *given, uint8_t out[16], struct dcr_err *e)
{
	if (given) {
		memcpy(out, given, 16);
		return 0;
	}
	if (getrandom(out, 16, 0) != 16)
		return dcr_err_sys(e, errno, "cannot draw an attempt id");
	return 0;
}

/* ---- writer ---- */

int dcr_sink_fd_write(void *ctx, const void *p, size_t n)
{
	return dcr_write_full(*(int *)ctx, p, n);
}

/* Small records wait in w->frame and go to the sink together, up to this
 * many bytes in one write (a write per record cost a system call each:
 * about 1,800 for a journal of 520 items, and three per tensor of a
 * checkpoint of 100,000 small ones); a larger record goes as it is. */
#define W_JOIN_MAX (64u << 10)

static int w_flush(struct dcr_delta_writer *w, struct dcr_err *e)
{
	if (!w->frame.len)
		return 0;
	int r = w->sink.write(w->sink.ctx, w->frame.p, w->frame.len);
	w->frame.len = 0;
	return r ? dcr_err_sys(e, r, "cannot write %s", w->what) : 0;
}

/* n bytes at p, after what waits */
static int w_raw(struct dcr_delta_writer *w, const void *p, size_t n, struct dcr_err *e)
{
	int r = w_flush(w, e);
	if (r)
		return r;
	dcr_blake3_update(w->sum, p, n);
	if ((r = w->sink.write(w->sink.ctx, p, n)))
		return dcr_err_sys(e, r, "cannot write %s", w->what);
	w->bytes += n;
	return 0;
}

/* n bytes at p: to wait with the others when small, else as they are */
static int w_put(struct dcr_delta_writer *w, const void *p, size_t n, struct dcr_err *e)
{
	if (n > W_JOIN_MAX)
		return w_raw(w, p, n, e);
	if (dcr_buf_add(&w->frame, p, n))
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	dcr_blake3_update(w->sum, p, n);
	w->bytes += n;
	return w->frame.len >= W_JOIN_MAX ? w_flush(w, e) : 0;
}

static int w_record(struct dcr_delta_writer *w, uint32_t type, struct dcr_err *e)
{
	uint8_t h[DCR_REC_HDR_LEN];
	put_le32(h, type);
	put_le32(h + 4, 0);
	put_le64(h + 8, w->rec.len);
	int r = w_put(w, h, sizeof(h), e);
	if (!r)
		r = w_put(w, w->rec.p, w->rec.len, e);
	w->rec.len = 0;
	return r;
}

int dcr_delta_writer_init(struct dcr_delta_writer *w, struct dcr_sink sink,
			  const dcr_digest *base, const uint8_t attempt[16],
			  const char *what, struct dcr_err *e)
{
	return dcr_delta_writer_init_flags(w, sink, base, attempt, 0, what, e);
}

int dcr_delta_writer_init_flags(struct dcr_delta_writer *w, struct dcr_sink sink,
				const dcr_digest *base, const uint8_t attempt[16],
				uint32_t flags, const char *what, struct dcr_err *e)
{
	memset(w, 0, sizeof(*w));
	w->sink = sink;
	w->what = what ? what : "delta";
	w->sum = malloc(sizeof(*w->sum));
	if (!w->sum)
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	dcr_blake3_init(w->sum);
	uint8_t h[DCR_DELTA_HDR_LEN];
	memcpy(h, DCR_DELTA_MAGIC, 8);
	put_le32(h + 8, DCR_DELTA_VERSION);
	put_le32(h + 12, flags);
	memcpy(h + 16, base->b, 32);
	memcpy(h + 48, attempt, 16);
	return w_raw(w, h, sizeof(h), e);
}

static int add_str(struct dcr_buf *b, const char *s)
{
	size_t n = strlen(s);
	return dcr_buf_add_varint(b, n) || dcr_buf_add(b, s, n);
}

int dcr_delta_tensor_body(struct dcr_buf *b, const struct dcr_delta_tensor *t)
{
	int r = dcr_buf_add_le32(b, t->flags) || add_str(b, t->name) || add_str(b, t->file) ||
		dcr_buf_add_u8(b, (uint8_t)t->dtype) || dcr_buf_add_u8(b, (uint8_t)t->ndim);
	for (unsigned k = 0; k < t->ndim && !r; k++)
		r = dcr_buf_add_le64(b, t->shape[k]);
	return r ? -ENOMEM : 0;
}

/* Room for one more TENSOR or REMOVE record, its body in w->rec
 * (DCR_DELTA_TENSORS_MAX, DCR_DELTA_NAMES_BYTES)? Counts it if so, else
 * drops the body. */
static int w_room(struct dcr_delta_writer *w, struct dcr_err *e)
{
	int r = 0;
	if (w->ntensors + w->nremoved >= DCR_DELTA_TENSORS_MAX)
		r = dcr_err_set(e, DCR_EFORMAT, "%s: more than %u tensors, which no reader takes",
				w->what, DCR_DELTA_TENSORS_MAX);
	else if (dcr_delta_names_take(&w->name_bytes, w->rec.len))
		r = dcr_err_set(e, DCR_EFORMAT,
				"%s: its tensors' names take more than %llu MiB, which no reader takes",
				w->what, (unsigned long long)(DCR_DELTA_NAMES_BYTES >> 20));
	if (r)
		w->rec.len = 0;
	return r;
}

int dcr_delta_write_tensor(struct dcr_delta_writer *w, const struct dcr_delta_tensor *t,
			   struct dcr_err *e)
{
	if (dcr_delta_tensor_body(&w->rec, t)) {
		w->rec.len = 0;
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	}
	int r = w_room(w, e);
	if (r)
		return r;
	w->ntensors++;
	return w_record(w, DCR_REC_TENSOR, e);
}

static int item_body(struct dcr_buf *b, const struct dcr_item *it)
{
	return dcr_buf_add_varint(b, it->tensor) || dcr_buf_add_varint(b, it->flags) ||
	       dcr_buf_add_u8(b, it->enc) || dcr_buf_add_u8(b, it->codec) ||
	       dcr_buf_add_varint(b, it->start) || dcr_buf_add_varint(b, it->len) ||
	       dcr_buf_add_varint(b, it->n) || dcr_buf_add(b, it->data, it->data_len)
		       ? -ENOMEM
		       : 0;
}

int dcr_delta_write_item(struct dcr_delta_writer *w, const struct dcr_item *it,
			 struct dcr_err *e)
{
	if (item_body(&w->rec, it))
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	w->nitems++;
	w->nchanges += it->n;
	return w_record(w, DCR_REC_ITEM, e);
}

int dcr_delta_item_record(struct dcr_buf *b, const struct dcr_item *it)
{
	size_t at = b->len;
	if (dcr_buf_add_le32(b, DCR_REC_ITEM) || dcr_buf_add_le32(b, 0) || dcr_buf_add_le64(b, 0) ||
	    item_body(b, it))
		return -ENOMEM;
	put_le64(b->p + at + 8, b->len - at - DCR_REC_HDR_LEN);
	return 0;
}

int dcr_delta_write_raw(struct dcr_delta_writer *w, const uint8_t *p, size_t len,
			uint64_t nitems, uint64_t nchanges, struct dcr_err *e)
{
	w->nitems += nitems;
	w->nchanges += nchanges;
	return len ? w_put(w, p, len, e) : 0;
}

int dcr_delta_write_name(struct dcr_delta_writer *w, uint32_t type, const char *name,
			 struct dcr_err *e)
{
	if (add_str(&w->rec, name))
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	return w_record(w, type, e);
}

int dcr_delta_write_remove(struct dcr_delta_writer *w, const char *name, struct dcr_err *e)
{
	if (add_str(&w->rec, name)) {
		w->rec.len = 0;
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	}
	int r = w_room(w, e);
	if (r)
		return r;
	w->nremoved++;
	return w_record(w, DCR_REC_REMOVE, e);
}

int dcr_delta_write_done(struct dcr_delta_writer *w, uint32_t tensor,
			 const dcr_digest *d, struct dcr_err *e)
{
	if (dcr_buf_add_varint(&w->rec, tensor) || dcr_buf_add(&w->rec, d->b, 32))
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	return w_record(w, DCR_REC_DONE, e);
}

int dcr_delta_write_end(struct dcr_delta_writer *w, const dcr_digest *target,
			struct dcr_err *e)
{
	struct dcr_buf *b = &w->rec;
	if (dcr_buf_add(b, target->b, 32) || dcr_buf_add_le64(b, w->ntensors) ||
	    dcr_buf_add_le64(b, w->nitems) || dcr_buf_add_le64(b, w->nchanges))
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	int r = w_record(w, DCR_REC_END, e);
	if (r)
		return r;
	dcr_digest d;
	dcr_blake3_final(w->sum, &d);
	if (dcr_buf_add(&w->frame, d.b, 32))
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	w->bytes += 32;
	return w_flush(w, e);
}

void dcr_delta_writer_release(struct dcr_delta_writer *w)
{
	free(w->sum);
	dcr_buf_free(&w->rec);
	dcr_buf_free(&w->frame);
	w->sum = NULL;
}

/* ---- reader ---- */

int dcr_source_fd_read(void *ctx, void *p, size_t n)
{
	return dcr_read_full(*(int *)ctx, p, n);
}

int dcr_fdbuf_init(struct dcr_fdbuf *b, int fd, size_t cap)
{
	memset(b, 0, sizeof(*b));
	b->fd = fd;
	b->cap = cap ? cap : 1;
	return (b->p = malloc(b->cap)) ? 0 : -ENOMEM;
}

void dcr_fdbuf_release(struct dcr_fdbuf *b)
{
	free(b->p);
	b->p = NULL;
	b->at = b->len = 0;
}

int dcr_fdbuf_rewind(struct dcr_fdbuf *b)
{
	b->at = b->len = 0;
	return lseek(b->fd, 0, SEEK_SET) ? -errno : 0;
}

int dcr_source_fdbuf_read(void *ctx, void *p, size_t n)
{
	struct dcr_fdbuf *b = ctx;
	uint8_t *q = p;
	while (n) {
		if (b->at == b->len) {
			/* a large body goes straight to the caller */
			if (n >= b->cap)
				return dcr_read_full(b->fd, q, n);
			ssize_t k = read(b->fd, b->p, b->cap);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				return -errno;
			if (k == 0)
				return -EPIPE;
			b->at = 0;
			b->len = (size_t)k;
		}
		size_t k = b->len - b->at < n ? b->len - b->at : n;
		memcpy(q, b->p + b->at, k);
		b->at += k;
		q += k;
		n -= k;
	}
	return 0;
}

static int r_raw(struct dcr_delta_reader *r, void *p, size_t n, const char *where,
		 struct dcr_err *e)
{
	int s = r->src.read(r->src.ctx, p, n);
	if (s == -EPIPE)
		return dcr_err_set(e, DCR_EFORMAT, "%s is truncated (in %s at byte %llu)", r->what,
				   where, (unsigned long long)r->offset);
	if (s)
		return dcr_err_sys(e, s, "cannot read %s", r->what);
	dcr_blake3_update(r->sum, p, n);
	r->offset += n;
	return 0;
}

int dcr_delta_sniff(int fd, uint8_t *head, size_t *got, const char *what, struct dcr_err *e)
{
	long n = dcr_read_upto(fd, head, DCR_DELTA_SNIFF);
	if (n < 0)
		return dcr_err_sys(e, (int)-n, "cannot read %s", what);
	*got = (size_t)n;
	return *got == DCR_DELTA_SNIFF && !memcmp(head, DCR_DELTA_MAGIC, 5);
}

int dcr_delta_reader_init_with(struct dcr_delta_reader *r, struct dcr_source src,
			       const uint8_t *head, size_t head_len, const char *what,
			       struct dcr_err *e)
{
	return dcr_delta_reader_init_flags(r, src, head, head_len, 0, what, e);
}

/* The header of r (head[0..head_len) of it already read), checked. */
static int reader_header(struct dcr_delta_reader *r, const uint8_t *head, size_t head_len,
			 uint32_t accept, struct dcr_err *e)
{
	uint8_t h[DCR_DELTA_HDR_LEN];
	if (head_len > sizeof(h))
		return dcr_err_set(e, DCR_EFORMAT, "%s: bad header", r->what);
	if (head_len) /* head may be NULL when nothing was sniffed */
		memcpy(h, head, head_len);
	dcr_blake3_update(r->sum, h, head_len);
	r->offset = head_len;
	int s = r_raw(r, h + head_len, sizeof(h) - head_len, "header", e);
	if (s)
		return s;
	if (memcmp(h, DCR_DELTA_MAGIC, 8))
		return dcr_err_set(e, DCR_EFORMAT, "%s is not a dcr delta (bad magic)", r->what);
	r->version = get_le32(h + 8);
	r->flags = get_le32(h + 12);
	if (r->version == 1)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s is a version 1 delta, made by an older dcr (SHA-256 tensor digests): make it again with this dcr-diff",
				   r->what);
	if (r->version != DCR_DELTA_VERSION)
		return dcr_err_version(e, r->what, "delta", r->version, DCR_DELTA_VERSION);
	if (r->flags & ~(uint32_t)(DCR_DELTA_PARTIAL | DCR_DELTA_DENSE))
		return dcr_err_set(e, DCR_EFORMAT, "%s uses unknown flags 0x%x", r->what, r->flags);
	if ((r->flags & DCR_DELTA_DENSE) && !(accept & DCR_DELTA_DENSE))
		return dcr_err_set(e, DCR_EFORMAT, "%s is a dense copy, which this command does not take",
				   r->what);
	if ((r->flags & DCR_DELTA_PARTIAL) && !(accept & DCR_DELTA_PARTIAL))
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s is a partial delta (layout changes without target digests): merge it with 'dcr-diff --merge --target-digests', or place it with 'dcr-apply --layout'",
				   r->what);
	memcpy(r->base.b, h + 16, 32);
	memcpy(r->attempt, h + 48, 16);
	return 0;
}

int dcr_delta_reader_init_flags(struct dcr_delta_reader *r, struct dcr_source src,
				const uint8_t *head, size_t head_len, uint32_t accept,
				const char *what, struct dcr_err *e)
{
	memset(r, 0, sizeof(*r));
	r->src = src;
	r->what = what ? what : "delta";
	r->sum = malloc(sizeof(*r->sum));
	if (!r->sum)
		return dcr_err_sys(e, ENOMEM, "%s", r->what);
	dcr_blake3_init(r->sum);
	int s = reader_header(r, head, head_len, accept, e);
	if (s)
		dcr_delta_reader_release(r); /* a reader that failed holds nothing */
	return s;
}

int dcr_delta_reader_init(struct dcr_delta_reader *r, struct dcr_source src,
			  const char *what, struct dcr_err *e)
{
	return dcr_delta_reader_init_with(r, src, NULL, 0, what, e);
}

int dcr_delta_count_names(const struct dcr_delta_rec *rec, struct dcr_delta_names *c,
			  const char *what, struct dcr_err *e)
{
	if (rec->type != DCR_REC_TENSOR && rec->type != DCR_REC_REMOVE)
		return 0;
	if (++c->n > DCR_DELTA_TENSORS_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "%s names more than %u tensors", what,
				   DCR_DELTA_TENSORS_MAX);
	if (dcr_delta_names_take(&c->bytes, rec->len))
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: its tensors' names take more than %llu MiB", what,
				   (unsigned long long)(DCR_DELTA_NAMES_BYTES >> 20));
	return 0;
}

int dcr_delta_next(struct dcr_delta_reader *r, struct dcr_delta_rec *rec, struct dcr_err *e)
{
	if (r->ended)
		return 0;
	uint8_t h[DCR_REC_HDR_LEN];
	int s = r_raw(r, h, sizeof(h), "a record header", e);
	if (s)
		return s;
	rec->type = get_le32(h);
	rec->flags = get_le32(h + 4);
	rec->len = get_le64(h + 8);
	if (rec->len > DCR_REC_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "%s: record of %llu bytes at byte %llu is too large",
				   r->what, (unsigned long long)rec->len,
				   (unsigned long long)(r->offset - DCR_REC_HDR_LEN));
	if (rec->flags)
		return dcr_err_set(e, DCR_EFORMAT, "%s: record with unknown flags 0x%x", r->what,
				   rec->flags);
	/* the body, its buffer grown with the bytes that arrive (at most
	 * doubling), not reserved by what the length says */
	r->body.len = 0;
	do {
		size_t step = (size_t)rec->len - r->body.len;
		size_t most = r->body.len > (1u << 20) ? r->body.len : (1u << 20);
		if (step > most)
			step = most;
		if (dcr_buf_reserve(&r->body, step + 1))
			return dcr_err_sys(e, ENOMEM, "%s", r->what);
		if ((s = r_raw(r, r->body.p + r->body.len, step, "a record", e)))
			return s;
		r->body.len += step;
	} while (r->body.len < rec->len);
	rec->body = r->body.p;
	if (rec->type == DCR_REC_END) {
		struct dcr_rd rd;
		dcr_rd_init(&rd, rec->body, rec->len);
		const uint8_t *t = dcr_rd_bytes(&rd, 32);
		r->end_tensors = dcr_rd_le64(&rd);
		r->end_items = dcr_rd_le64(&rd);
		r->end_changes = dcr_rd_le64(&rd);
		if (rd.bad || dcr_rd_left(&rd))
			return dcr_err_set(e, DCR_EFORMAT, "%s: bad END record", r->what);
		memcpy(r->target.b, t, 32);
		dcr_digest want, got;
		dcr_blake3_final(r->sum, &want);
		int q = r->src.read(r->src.ctx, got.b, 32);
		if (q == -EPIPE)
			return dcr_err_set(e, DCR_EFORMAT, "%s is truncated (in the trailer)", r->what);
		if (q)
			return dcr_err_sys(e, q, "cannot read %s", r->what);
		if (DCR_CHECKSUM_DIFFERS(want.b, got.b))
			return dcr_err_set(e, DCR_EDIGEST, "%s is corrupt: trailer checksum mismatch",
					   r->what);
		r->offset += 32;
		r->ended = 1;
	} else if ((rec->type == DCR_REC_JRENAME || rec->type == DCR_REC_JUNLINK) && r->journal) {
		/* fine */
	} else if ((s = dcr_delta_count_names(rec, &r->names, r->what, e))) {
		return s;
	} else if (rec->type < DCR_REC_TENSOR ||
		   (rec->type > DCR_REC_END && rec->type < DCR_REC_ANCILLARY)) {
		return dcr_err_set(e, DCR_EFORMAT, "%s: unknown record type %u", r->what, rec->type);
	}
	return 1;
}

void dcr_delta_reader_release(struct dcr_delta_reader *r)
{
	free(r->sum);
	dcr_buf_free(&r->body);
	r->sum = NULL;
}

/* ---- record bodies ---- */

static char *rd_str(struct dcr_rd *rd)
{
	uint64_t n = dcr_rd_varint(rd);
	if (rd->bad || n > 65535)
		return rd->bad = 1, NULL;
	const uint8_t *p = dcr_rd_bytes(rd, n);
	if (!p || memchr(p, 0, n))
		return rd->bad = 1, NULL;
	return strndup((const char *)p, n);
}

void dcr_delta_tensor_clear(struct dcr_delta_tensor *t)
{
	free(t->name);
	free(t->file);
	memset(t, 0, sizeof(*t));
}

int dcr_tensor_table_add(struct dcr_tensor_table *tt, const struct dcr_delta_rec *rec,
			 const char *what, struct dcr_err *e)
{
	if (tt->n == tt->cap) {
		size_t cap = tt->cap ? 2 * tt->cap : 16;
		struct dcr_delta_tensor *v = realloc(tt->v, cap * sizeof(*v));
		if (!v)
			return dcr_err_sys(e, ENOMEM, "%s", what);
		tt->v = v;
		tt->cap = cap;
	}
	int r = dcr_delta_parse_tensor(rec, &tt->v[tt->n], e);
	if (!r)
		tt->n++;
	return r;
}

int dcr_tensor_table_item(const struct dcr_tensor_table *tt, const struct dcr_delta_rec *rec,
			  const char *what, struct dcr_item *it, const struct dcr_delta_tensor **t,
			  struct dcr_err *e)
{
	int r = dcr_delta_parse_item(rec, it, e);
	if (r)
		return r;
	if (it->tensor >= tt->n)
		return dcr_err_set(e, DCR_EFORMAT, "%s: item for undeclared tensor", what);
	*t = &tt->v[it->tensor];
	return 0;
}

uint64_t dcr_delta_tensor_units(const struct dcr_delta_tensor *t)
{
	return t->nelem * dcr_dtype_bits(t->dtype) / 8 / dcr_dtype_unit(t->dtype);
}

void dcr_tensor_table_clear(struct dcr_tensor_table *tt)
{
	for (size_t i = 0; i < tt->n; i++)
		dcr_delta_tensor_clear(&tt->v[i]);
	free(tt->v);
	memset(tt, 0, sizeof(*tt));
}

int dcr_delta_parse_tensor(const struct dcr_delta_rec *rec, struct dcr_delta_tensor *t,
			   struct dcr_err *e)
{
	struct dcr_rd rd;
	memset(t, 0, sizeof(*t));
	dcr_rd_init(&rd, rec->body, rec->len);
	t->flags = dcr_rd_le32(&rd);
	t->name = rd_str(&rd);
	t->file = rd_str(&rd);
	t->dtype = dcr_rd_u8(&rd);
	t->ndim = dcr_rd_u8(&rd);
	if (rd.bad || t->dtype >= DCR_DT_COUNT || t->ndim > DCR_MAX_NDIM ||
	    (t->flags & ~(uint32_t)DCR_TENSOR_NEW))
		goto bad;
	t->nelem = 1;
	for (unsigned k = 0; k < t->ndim; k++) {
		t->shape[k] = dcr_rd_le64(&rd);
		if (mul_ovf(t->nelem, t->shape[k], &t->nelem))
			goto bad;
	}
	uint64_t bits;
	if (rd.bad || dcr_rd_left(&rd) || mul_ovf(t->nelem, dcr_dtype_bits(t->dtype), &bits) ||
	    bits % 8)
		goto bad;
	return 0;
bad:
	dcr_delta_tensor_clear(t);
	return dcr_err_set(e, DCR_EFORMAT, "delta: malformed TENSOR record");
}

int dcr_delta_parse_item(const struct dcr_delta_rec *rec, struct dcr_item *it,
			 struct dcr_err *e)
{
	struct dcr_rd rd;
	dcr_rd_init(&rd, rec->body, rec->len);
	uint64_t tensor = dcr_rd_varint(&rd), flags = dcr_rd_varint(&rd);
	it->enc = dcr_rd_u8(&rd);
	it->codec = dcr_rd_u8(&rd);
	it->start = dcr_rd_varint(&rd);
	it->len = dcr_rd_varint(&rd);
	it->n = dcr_rd_varint(&rd);
	if (!rd.bad && it->len > DCR_ITEM_MAX_ELEMS)
		return dcr_err_set(e, DCR_EFORMAT,
				   "delta: an ITEM of %llu units is larger than the %u a reader takes",
				   (unsigned long long)it->len, DCR_ITEM_MAX_ELEMS);
	if (rd.bad || tensor > UINT32_MAX || (flags & ~(uint64_t)DCR_ITEM_DENSE) ||
	    (it->enc != DCR_ENC_XOR && it->enc != DCR_ENC_OVERWRITE) || it->n > it->len ||
	    it->start + it->len < it->start)
		return dcr_err_set(e, DCR_EFORMAT, "delta: malformed ITEM record");
	it->tensor = (uint32_t)tensor;
	it->flags = (uint32_t)flags;
	it->data = rd.p;
	it->data_len = dcr_rd_left(&rd);
	return 0;
}

int dcr_delta_check_end(const struct dcr_delta_reader *r, uint64_t tensors, uint64_t items,
			uint64_t changes, struct dcr_err *e)
{
	if (r->end_tensors != tensors || r->end_items != items || r->end_changes != changes)
		return dcr_err_set(e, DCR_EFORMAT,
				   "%s: END counts do not match its records (END: %llu tensors, %llu items, %llu changes; the records: %llu, %llu, %llu)",
				   r->what, (unsigned long long)r->end_tensors,
				   (unsigned long long)r->end_items, (unsigned long long)r->end_changes,
				   (unsigned long long)tensors, (unsigned long long)items,
				   (unsigned long long)changes);
	return 0;
}

int dcr_delta_item_at(int fd, uint64_t off, uint64_t len, struct dcr_buf *body,
		      struct dcr_item *it, const char *what, struct dcr_err *e)
{
	if (len > SIZE_MAX - 1 || dcr_buf_reserve(body, (size_t)len + 1))
		return dcr_err_sys(e, ENOMEM, "cannot read back %s", what);
	body->len = 0;
	int r = dcr_pread_full(fd, body->p, (size_t)len, off);
	if (r)
		return dcr_err_sys(e, r == -EPIPE ? EIO : -r, "cannot read back %s", what);
	struct dcr_delta_rec rec = {.type = DCR_REC_ITEM, .len = len, .body = body->p};
	return dcr_delta_parse_item(&rec, it, e);
}

int dcr_delta_parse_name(const struct dcr_delta_rec *rec, char **name, struct dcr_err *e)
{
	struct dcr_rd rd;
	dcr_rd_init(&rd, rec->body, rec->len);
	*name = rd_str(&rd);
	if (rd.bad || dcr_rd_left(&rd) || !*name) {
		free(*name);
		*name = NULL;
		return dcr_err_set(e, DCR_EFORMAT, "delta: malformed record %u", rec->type);
	}
	return 0;
}

int dcr_delta_parse_done(const struct dcr_delta_rec *rec, uint32_t *tensor, dcr_digest *d,
			 struct dcr_err *e)
{
	struct dcr_rd rd;
	dcr_rd_init(&rd, rec->body, rec->len);
	uint64_t t = dcr_rd_varint(&rd);
	const uint8_t *p = dcr_rd_bytes(&rd, 32);
	if (rd.bad || dcr_rd_left(&rd) || t > UINT32_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "delta: malformed DONE record");
	*tensor = (uint32_t)t;
	memcpy(d->b, p, 32);
	return 0;
}

int dcr_delta_write_canon(struct dcr_delta_writer *w, uint32_t n, const dcr_digest *id,
			  struct dcr_err *e)
{
	if (dcr_buf_add_le32(&w->rec, n) || dcr_buf_add(&w->rec, id->b, 32))
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	return w_record(w, DCR_REC_CANON, e);
}

int dcr_delta_parse_canon(const struct dcr_delta_rec *rec, uint32_t *n, dcr_digest *id,
			  struct dcr_err *e)
{
	if (rec->len != 36)
		return dcr_err_set(e, DCR_EFORMAT, "delta: malformed CANON record");
	*n = get_le32(rec->body);
	memcpy(id->b, rec->body + 4, 32);
	return 0;
}

int dcr_delta_write_parts(struct dcr_delta_writer *w, uint32_t tensor,
			  const struct dcr_blake3_part *v, size_t n, struct dcr_err *e)
{
	int r = dcr_buf_add_varint(&w->rec, tensor) || dcr_buf_add_varint(&w->rec, n);
	for (size_t i = 0; i < n && !r; i++)
		r = dcr_blake3_part_encode(&v[i], &w->rec);
	if (r)
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	return w_record(w, DCR_REC_PARTS, e);
}

int dcr_delta_parse_parts(const struct dcr_delta_rec *rec, uint32_t *tensor,
			  struct dcr_blake3_part **v, size_t *n, size_t *cap, struct dcr_err *e)
{
	struct dcr_rd rd;
	dcr_rd_init(&rd, rec->body, rec->len);
	uint64_t t = dcr_rd_varint(&rd), k = dcr_rd_varint(&rd);
	/* a part is at least 24 bytes: k is bounded by the body */
	if (rd.bad || t > UINT32_MAX || k > dcr_rd_left(&rd) / 24)
		return dcr_err_set(e, DCR_EFORMAT, "delta: malformed PARTS record");
	*tensor = (uint32_t)t;
	if (*n + k > *cap) {
		size_t nc = *n + (size_t)k;
		struct dcr_blake3_part *nv = realloc(*v, (nc ? nc : 1) * sizeof(*nv));
		if (!nv)
			return dcr_err_sys(e, ENOMEM, "delta");
		*v = nv;
		*cap = nc;
	}
	for (uint64_t i = 0; i < k; i++) {
		size_t used;
		struct dcr_err e2;
		if (dcr_blake3_part_decode(rd.p, dcr_rd_left(&rd), &used, &(*v)[*n], &e2))
			return dcr_err_set(e, DCR_EFORMAT, "delta: PARTS record: %s", e2.msg);
		(*n)++;
		dcr_rd_bytes(&rd, used);
	}
	if (dcr_rd_left(&rd))
		return dcr_err_set(e, DCR_EFORMAT, "delta: malformed PARTS record");
	return 0;
}

int dcr_delta_write_bases(struct dcr_delta_writer *w, const dcr_digest *v, size_t n,
			  struct dcr_err *e)
{
	if (dcr_buf_add_varint(&w->rec, n))
		return dcr_err_sys(e, ENOMEM, "%s", w->what);
	for (size_t i = 0; i < n; i++)
		if (dcr_buf_add(&w->rec, v[i].b, 32))
			return dcr_err_sys(e, ENOMEM, "%s", w->what);
	return w_record(w, DCR_REC_BASES, e);
}

int dcr_delta_parse_bases(const struct dcr_delta_rec *rec, dcr_digest **v, size_t *n,
			  struct dcr_err *e)
{
	struct dcr_rd rd;
	dcr_rd_init(&rd, rec->body, rec->len);
	uint64_t k = dcr_rd_varint(&rd);
	if (rd.bad || k > 4096 || dcr_rd_left(&rd) != k * 32)
		return dcr_err_set(e, DCR_EFORMAT, "delta: malformed BASES record");
	*v = dcr_calloc(k ? k : 1, sizeof(dcr_digest));
	if (!*v)
		return dcr_err_sys(e, ENOMEM, "delta");
	for (uint64_t i = 0; i < k; i++)
		memcpy((*v)[i].b, dcr_rd_bytes(&rd, 32), 32);
	*n = (size_t)k;
	return 0;
}
