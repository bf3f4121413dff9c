/* test-summary.c - producers' summaries (lib/core/summary.c): built and
 * parsed back; hostile bytes refused with bounded memory (every
 * truncation, every flipped byte, counts that claim more than the bytes
 * that are there under a valid trailer); and the join of several
 * producers' summaries into a manifest, whose target digests equal the
 * tensor digests of the whole tensors, with overlaps, gaps, another
 * delta's summary and disagreeing declarations refused; one producer's
 * share of a step told apart from another's (dcr_summary_same_share). */
#include "config.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcr.h"

#define R 40
#define C 300

static uint8_t data[R * C * 2]; /* a BF16 [R, C] tensor */

static void fill(void)
{
	uint32_t x = 12345;
	for (size_t i = 0; i < sizeof(data); i++) {
		x = x * 1103515245u + 12345u;
		data[i] = (uint8_t)(x >> 16);
	}
}

/* producer p of n holds rows [p*R/n, (p+1)*R/n) x columns [c0, c1) */
static void make(struct dcr_summary *s, uint32_t p, uint32_t n, uint64_t r0, uint64_t r1,
		 uint64_t c0, uint64_t c1)
{
	static char name[] = "w", file[] = "model.safetensors";
	memset(s, 0, sizeof(*s));
	memset(s->base.b, 7, 32);
	memset(s->attempt, 9, 16);
	s->producer = p;
	s->nproducers = n;
	s->ntensors = 1;
	s->tensors = calloc(1, sizeof(*s->tensors));
	cr_assert(s->tensors);
	struct dcr_delta_tensor *t = &s->tensors[0].t;
	t->name = strdup(name);
	t->file = strdup(file);
	t->dtype = DCR_DT_BF16;
	t->ndim = 2;
	t->shape[0] = R;
	t->shape[1] = C;
	t->nelem = R * C;
	struct dcr_stripes st;
	dcr_stripes_init(&st, t->dtype, t->ndim, t->shape);
	uint64_t w = c1 - c0;
	uint8_t *local = malloc((r1 - r0) * w * 2 + 1);
	for (uint64_t r = r0; r < r1; r++)
		memcpy(local + (r - r0) * w * 2, data + (r * C + c0) * 2, w * 2);
	struct dcr_err e;
	cr_assert_eq(dcr_stripes_parts(&st, local, r0, r1, c0, c1, &s->tensors[0].parts, &e), 0,
		     "%s", e.msg);
	free(local);
	s->nitems = 3;
	s->nchanges = 5;
	s->ncanon = 1;
	struct dcr_state_entry en = {t->name, t->dtype, t->ndim, t->shape, {{0}}};
	dcr_tensor_set_id(&en, 1, &s->canon);
}

static void build(const struct dcr_summary *s, struct dcr_buf *b)
{
	struct dcr_err e;
	b->len = 0;
	cr_assert_eq(dcr_summary_build(s, b, &e), 0, "%s", e.msg);
}

Test(summary, round_trip_and_every_truncation)
{
	fill();
	struct dcr_summary s, back;
	struct dcr_buf b = {0};
	struct dcr_err e;
	make(&s, 1, 2, 20, 40, 0, C);
	build(&s, &b);
	cr_assert_eq(dcr_summary_parse(b.p, b.len, "s", &back, &e), 0, "%s", e.msg);
	cr_assert_eq(back.producer, 1);
	cr_assert_eq(back.nproducers, 2);
	cr_assert_eq(back.ntensors, 1);
	cr_assert_eq(back.tensors[0].parts.n, s.tensors[0].parts.n);
	cr_assert_str_eq(back.tensors[0].t.name, "w");
	dcr_summary_release(&back);
	for (size_t n = 0; n < b.len; n++)
		cr_assert_neq(dcr_summary_parse(b.p, n, "s", &back, &e), 0, "truncated at %zu", n);
	for (size_t i = 0; i < b.len; i++) {
		b.p[i] ^= 0x10;
		cr_assert_neq(dcr_summary_parse(b.p, b.len, "s", &back, &e), 0, "byte %zu", i);
		b.p[i] ^= 0x10;
	}
	dcr_summary_release(&s);
	dcr_buf_free(&b);
}

/* one producer's share of a step, made again: the same share however
 * its attempt, payloads and parts' order differ; another base, another
 * producer, another block of the tensor, or one element's bits not */
Test(summary, same_share)
{
	fill();
	struct dcr_summary a, b;
	make(&a, 1, 2, 20, 40, 0, C);
	make(&b, 1, 2, 20, 40, 0, C);
	cr_assert(dcr_summary_same_share(&a, &b));
	memset(b.attempt, 3, 16);
	b.nitems = 9; /* its changes cut into other items */
	b.npayloads = 1;
	uint32_t idx = dcr_producer_index(1, 0);
	uint64_t size = 123;
	dcr_digest pd = {{1}};
	b.pindex = &idx;
	b.psize = &size;
	b.pdigest = &pd;
	struct dcr_parts *ps = &b.tensors[0].parts;
	cr_assert(ps->n >= 2, "want several parts, got %zu", ps->n);
	struct dcr_blake3_part t = ps->v[0];
	ps->v[0] = ps->v[ps->n - 1];
	ps->v[ps->n - 1] = t;
	cr_assert(dcr_summary_same_share(&a, &b), "attempt, payloads and order of parts");
	b.pindex = NULL;
	b.psize = NULL;
	b.pdigest = NULL;
	b.npayloads = 0;
	b.base.b[0] ^= 1;
	cr_assert(!dcr_summary_same_share(&a, &b), "another base");
	b.base.b[0] ^= 1;
	b.producer = 0;
	cr_assert(!dcr_summary_same_share(&a, &b), "another producer");
	b.producer = 1;
	dcr_summary_release(&b);
	make(&b, 1, 2, 20, 39, 0, C);
	cr_assert(!dcr_summary_same_share(&a, &b), "another block");
	dcr_summary_release(&b);
	data[(25 * C + 7) * 2] ^= 1;
	make(&b, 1, 2, 20, 40, 0, C);
	cr_assert(!dcr_summary_same_share(&a, &b), "one element's bits");
	data[(25 * C + 7) * 2] ^= 1;
	dcr_summary_release(&b);
	make(&b, 1, 2, 20, 40, 0, C);
	b.nchanges++;
	cr_assert(!dcr_summary_same_share(&a, &b), "another count of changes");
	dcr_summary_release(&b);
	dcr_summary_release(&a);
}

/* a summary's bytes with counts patched at off, then a fresh trailer */
static int parse_patched(const struct dcr_buf *b, size_t off, uint32_t v)
{
	uint8_t *c = malloc(b->len);
	memcpy(c, b->p, b->len);
	c[off] = (uint8_t)v;
	c[off + 1] = (uint8_t)(v >> 8);
	c[off + 2] = (uint8_t)(v >> 16);
	c[off + 3] = (uint8_t)(v >> 24);
	dcr_digest d;
	dcr_blake3(c, b->len - 32, &d);
	memcpy(c + b->len - 32, d.b, 32);
	struct dcr_summary s;
	struct dcr_err e;
	int r = dcr_summary_parse(c, b->len, "s", &s, &e);
	if (!r)
		dcr_summary_release(&s);
	free(c);
	return r;
}

Test(summary, hostile_counts_refused)
{
	fill();
	struct dcr_summary s;
	struct dcr_buf b = {0};
	make(&s, 0, 1, 0, R, 0, C);
	build(&s, &b);
	size_t hdr = DCR_SUMMARY_HDR_LEN;
	/* npayloads, then (no payloads) piece_log2, then ntensors */
	cr_assert_eq(parse_patched(&b, hdr, 0xffffffffu), DCR_EFORMAT);
	cr_assert_eq(parse_patched(&b, hdr, 1), DCR_EFORMAT);
	cr_assert_eq(parse_patched(&b, hdr + 4, 31), DCR_EFORMAT);
	cr_assert_eq(parse_patched(&b, hdr + 8, 0xffffffffu), DCR_EFORMAT);
	cr_assert_eq(parse_patched(&b, hdr + 8, 2), DCR_EFORMAT);
	/* producer past nproducers, nproducers past the limit */
	cr_assert_eq(parse_patched(&b, 64, 1), DCR_EFORMAT);
	cr_assert_eq(parse_patched(&b, 68, DCR_PRODUCERS_MAX + 1), DCR_EFORMAT);
	/* flags and version */
	cr_assert_eq(parse_patched(&b, 12, 1), DCR_EFORMAT);
	cr_assert_eq(parse_patched(&b, 8, 2), DCR_EFORMAT);
	dcr_summary_release(&s);
	dcr_buf_free(&b);
}

static void join_expect(struct dcr_summary *v, uint32_t n, int want, const char *msg)
{
	const char *names[4] = {"p0", "p1", "p2", "p3"};
	struct dcr_manifest m;
	struct dcr_err e = {0};
	int r = dcr_summaries_join(v, names, n, &m, &e);
	cr_assert_eq(r, want, "%s", e.msg);
	if (!r) {
		dcr_digest d;
		uint64_t shape[2] = {R, C};
		dcr_digest_tensor_mem(DCR_DT_BF16, 2, shape, data, 1, &d);
		cr_assert_eq(m.ntensors, 1);
		cr_assert_eq(memcmp(m.tensors[0].digest.b, d.b, 32), 0, "joined digest");
		cr_assert_eq(m.nitems, 3 * n);
		struct dcr_buf b = {0};
		struct dcr_manifest back;
		cr_assert_eq(dcr_manifest_build(&m, &b, &e), 0, "%s", e.msg);
		cr_assert_eq(dcr_manifest_parse(b.p, b.len, "m", &back, &e), 0, "%s", e.msg);
		dcr_manifest_release(&back);
		dcr_buf_free(&b);
		dcr_manifest_release(&m);
	} else if (msg) {
		cr_assert(strstr(e.msg, msg), "'%s' not in '%s'", msg, e.msg);
	}
}

Test(summary, join_rows_columns_and_refusals)
{
	fill();
	struct dcr_summary v[4];
	/* row slices */
	make(&v[0], 0, 2, 0, 17, 0, C);
	make(&v[1], 1, 2, 17, R, 0, C);
	join_expect(v, 2, 0, NULL);
	dcr_summary_release(&v[1]);
	/* a gap */
	make(&v[1], 1, 2, 18, R, 0, C);
	join_expect(v, 2, DCR_EFORMAT, "no producer holds row 17, column 0");
	dcr_summary_release(&v[1]);
	/* an overlap */
	make(&v[1], 1, 2, 16, R, 0, C);
	join_expect(v, 2, DCR_EFORMAT, "p0 and p1 both claim row 16");
	dcr_summary_release(&v[0]);
	dcr_summary_release(&v[1]);
	/* column slices, one cutting a segment, and rows of the rest */
	make(&v[0], 0, 4, 0, R, 0, 128);
	make(&v[1], 1, 4, 0, R, 128, 200);
	make(&v[2], 2, 4, 0, 20, 200, C);
	make(&v[3], 3, 4, 20, R, 200, C);
	join_expect(v, 4, 0, NULL);
	/* another delta's summary */
	v[2].base.b[0] ^= 1;
	join_expect(v, 4, DCR_EFORMAT, "belongs to another delta");
	v[2].base.b[0] ^= 1;
	/* declared differently */
	v[3].tensors[0].t.dtype = DCR_DT_F16;
	join_expect(v, 4, DCR_EFORMAT, "declare tensor 'w' differently");
	v[3].tensors[0].t.dtype = DCR_DT_BF16;
	/* a layout of more tensors than the summaries declare */
	for (int i = 0; i < 4; i++)
		v[i].ncanon = 2;
	join_expect(v, 4, DCR_EFORMAT, "declare 1 of the pack's 2 tensors: a producer is missing");
	for (int i = 0; i < 4; i++)
		v[i].ncanon = 1;
	/* a producer in the wrong place */
	v[3].producer = 2;
	join_expect(v, 4, DCR_EFORMAT, "is producer 2 of 4, not 3 of 4");
	for (int i = 0; i < 4; i++)
		dcr_summary_release(&v[i]);
}

/* Tensor i of one BF16 element in model.safetensors, named with 60,000
 * bytes that sort by i. */
static void long_named(struct dcr_delta_tensor *t, uint32_t i)
{
	t->name = malloc(60001);
	cr_assert(t->name);
	memset(t->name, 'x', 60000);
	t->name[60000] = '\0';
	char num[16];
	snprintf(num, sizeof(num), "%08u", i);
	memcpy(t->name, num, 8);
	t->file = strdup("model.safetensors");
	t->dtype = DCR_DT_BF16;
	t->ndim = 1;
	t->shape[0] = 1;
	t->nelem = 1;
}

/* A manifest of n tensors named with 60,000 bytes each: built, with its
 * target the state its tensors add up to, and parsed. */
static int parse_long_names(uint32_t n, struct dcr_err *e)
{
	struct dcr_manifest m = {0}, back;
	struct dcr_state_entry *ent = calloc(n, sizeof(*ent));
	m.tensors = calloc(n, sizeof(*m.tensors));
	cr_assert(ent && m.tensors);
	m.ntensors = n;
	for (uint32_t i = 0; i < n; i++) {
		struct dcr_delta_tensor *t = &m.tensors[i];
		long_named(t, i);
		t->digest.b[0] = (uint8_t)i;
		t->have_digest = 1;
		ent[i] = (struct dcr_state_entry){.name = t->name, .dtype = t->dtype, .ndim = 1,
						  .shape = t->shape, .digest = t->digest};
	}
	dcr_state_id(ent, n, &m.target);
	free(ent);
	struct dcr_buf b = {0};
	cr_assert_eq(dcr_manifest_build(&m, &b, e), 0, "%s", e->msg);
	int r = dcr_manifest_parse(b.p, b.len, "m", &back, e);
	if (!r)
		dcr_manifest_release(&back);
	dcr_buf_free(&b);
	dcr_manifest_release(&m);
	return r;
}

/* A manifest's tensor names are bounded by their bytes as a delta's are
 * (DCR_DELTA_NAMES_BYTES): each is kept, and may be 65,535 bytes long. */
Test(manifest, tensor_names_bytes_bounded)
{
	struct dcr_err e = {0};
	cr_assert_eq(parse_long_names(4400, &e), 0, "%s", e.msg); /* 264 MB */
	cr_assert_eq(parse_long_names(4500, &e), DCR_EFORMAT);	 /* 270 MB */
}

/* The same bound on a producer's summary: n tensors named with 60,000
 * bytes each, no parts of them here. */
static int parse_summary_long_names(uint32_t n, struct dcr_err *e)
{
	struct dcr_summary s, back;
	memset(&s, 0, sizeof(s));
	s.nproducers = 1;
	s.ntensors = n;
	s.tensors = calloc(n, sizeof(*s.tensors));
	struct dcr_state_entry *ent = calloc(n, sizeof(*ent));
	cr_assert(s.tensors && ent);
	for (uint32_t i = 0; i < n; i++) {
		struct dcr_delta_tensor *t = &s.tensors[i].t;
		long_named(t, i);
		ent[i] = (struct dcr_state_entry){.name = t->name, .dtype = t->dtype, .ndim = 1,
						  .shape = t->shape};
	}
	s.ncanon = n;
	dcr_tensor_set_id(ent, n, &s.canon);
	free(ent);
	struct dcr_buf b = {0};
	cr_assert_eq(dcr_summary_build(&s, &b, e), 0, "%s", e->msg);
	int r = dcr_summary_parse(b.p, b.len, "s", &back, e);
	if (!r)
		dcr_summary_release(&back);
	dcr_buf_free(&b);
	dcr_summary_release(&s);
	return r;
}

Test(summary, tensor_names_bytes_bounded)
{
	struct dcr_err e = {0};
	cr_assert_eq(parse_summary_long_names(4400, &e), 0, "%s", e.msg); /* 264 MB */
	cr_assert_eq(parse_summary_long_names(4500, &e), DCR_EFORMAT);	   /* 270 MB */
}
