/* test-prehash.c - tensor digests put together from an apply's items as
 * they are resolved (lib/refit/prehash.c): taken in order, with the bytes
 * between them read from the receiver's tensor, they give the digest of
 * the new bytes, the same as hashing the whole new tensor; items that come
 * out of order, overlap, lack their parts, come after the digest was
 * asked for, or leave too much to read give no digest (the journal's
 * check then hashes the tensor as before), and never a wrong one. */
#include "config.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/state.h"
#include "refit/prehash.h"

struct tensor {
	struct dcr_tensor_info info;
	struct dcr_ckpt_tensor ct;
	uint8_t *old, *now; /* the receiver's bits, and the new ones */
	uint64_t nbytes;
	unsigned unit;
};

static unsigned lcg(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return *seed >> 8;
}

static void tensor_init(struct tensor *t, const char *name, int dtype, unsigned ndim,
			const uint64_t *shape, unsigned seed)
{
	memset(t, 0, sizeof(*t));
	t->info.name = (char *)name;
	t->info.dtype = dtype;
	t->info.ndim = ndim;
	t->info.nelem = 1;
	for (unsigned k = 0; k < ndim; k++) {
		t->info.shape[k] = shape[k];
		t->info.nelem *= shape[k];
	}
	t->unit = dcr_dtype_unit(dtype);
	t->nbytes = t->info.nelem * dcr_dtype_bits(dtype) / 8;
	t->info.end = t->nbytes;
	t->old = malloc(t->nbytes + 1);
	t->now = malloc(t->nbytes + 1);
	cr_assert(t->old && t->now);
	for (uint64_t i = 0; i < t->nbytes; i++)
		t->old[i] = (uint8_t)lcg(&seed);
	memcpy(t->now, t->old, t->nbytes);
	t->ct = (struct dcr_ckpt_tensor){.info = &t->info, .data = t->old, .fd = -1};
}

static void tensor_free(struct tensor *t)
{
	free(t->old);
	free(t->now);
}

/* Item [start, start + len) of t with a few changes, resolved as an
 * apply's thread does: its parts (or NULL when with_parts is 0), and the
 * changes put into t->now. */
static struct dcr_parts *resolve(struct tensor *t, uint64_t start, uint64_t len, unsigned *seed,
				 int with_parts, struct dcr_item *it)
{
	struct dcr_changes ch = {0};
	cr_assert_eq(dcr_changes_reserve(&ch, len + 1), 0);
	for (uint64_t k = 0; k < len; k++)
		if (lcg(seed) % 7 == 0) {
			ch.pos[ch.n] = k;
			ch.val[ch.n++] = lcg(seed) & ((t->unit >= 8 ? 0 : (1ull << (8 * t->unit))) - 1);
		}
	*it = (struct dcr_item){.enc = DCR_ENC_XOR, .start = start, .len = len, .n = ch.n};
	uint8_t *bytes = malloc(len * t->unit + 1);
	memcpy(bytes, t->old + start * t->unit, len * t->unit);
	struct dcr_parts *ps = NULL;
	if (with_parts) {
		ps = ap_prehash_parts(t->info.dtype, t->info.ndim, t->info.shape, it, bytes, &ch);
		cr_assert_not_null(ps, "dtype %d, [%llu, %llu)", t->info.dtype, (unsigned long long)start, (unsigned long long)(start + len));
		/* the bytes hashed are the new ones */
		uint8_t *ref = malloc(len * t->unit + 1);
		memcpy(ref, t->old + start * t->unit, len * t->unit);
		dcr_scatter(ref, t->unit, ch.pos, ch.val, ch.n, 0);
		cr_assert_eq(memcmp(bytes, ref, len * t->unit), 0);
		free(ref);
	}
	dcr_scatter(t->now + start * t->unit, t->unit, ch.pos, ch.val, ch.n, 0);
	free(bytes);
	dcr_changes_free(&ch);
	return ps;
}

static void digest_now(const struct tensor *t, dcr_digest *d)
{
	dcr_digest_tensor_mem(t->info.dtype, t->info.ndim, t->info.shape, t->now, 1, d);
}

Test(prehash, items_in_order_give_the_digest_of_the_new_bytes)
{
	static const struct {
		int dtype;
		unsigned ndim;
		uint64_t shape[3];
	} shapes[] = {
		{DCR_DT_BF16, 2, {700, 1536}},	/* the bands of rows line up */
		{DCR_DT_BF16, 2, {37, 300}},	/* a narrow last stripe */
		{DCR_DT_F32, 2, {90, 129}},
		{DCR_DT_BF16, 3, {3, 5, 1000}},
		{DCR_DT_F32, 1, {50000}},	/* one stripe */
		{DCR_DT_U8, 2, {41, 1000}},
		{DCR_DT_F64, 2, {13, 700}},
		{DCR_DT_F4, 2, {34, 300}},	/* sub-byte: not striped */
	};
	unsigned seed = 99;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int way = 0; way < 3; way++) {
			struct tensor t;
			tensor_init(&t, "w", shapes[s].dtype, shapes[s].ndim, shapes[s].shape,
				    (unsigned)(s * 3 + way));
			uint64_t units = t.nbytes / t.unit;
			struct ap_prehash *h = ap_prehash_new();
			uint64_t at = 0, n = 0;
			/* way 0: items cover it; 1: random gaps between them,
			 * and before the first and after the last; 2: one item */
			while (at < units) {
				uint64_t gap = way == 1 ? lcg(&seed) % (units / 8 + 1) : 0;
				uint64_t len = way == 2 ? units : 1 + lcg(&seed) % (units / 5 + 1);
				if (at + gap >= units)
					break;
				at += gap;
				if (len > units - at)
					len = units - at;
				struct dcr_item it;
				struct dcr_parts *ps = resolve(&t, at, len, &seed, 1, &it);
				ap_prehash_take(h, "w", &t.ct, &it, ps);
				at += len;
				n++;
			}
			dcr_digest want, got;
			digest_now(&t, &want);
			cr_assert_eq(ap_prehash_get(h, "w", n + 1, &got), 0, "a count it did not see");
			ap_prehash_free(h);
			/* again, asked with the right count */
			h = ap_prehash_new();
			memcpy(t.now, t.old, t.nbytes);
			seed = 1000 + (unsigned)(s * 3 + way);
			unsigned seed2 = seed;
			at = 0;
			n = 0;
			while (at < units) {
				uint64_t gap = way == 1 ? lcg(&seed2) % (units / 8 + 1) : 0;
				uint64_t len = way == 2 ? units : 1 + lcg(&seed2) % (units / 5 + 1);
				if (at + gap >= units)
					break;
				at += gap;
				if (len > units - at)
					len = units - at;
				struct dcr_item it;
				struct dcr_parts *ps = resolve(&t, at, len, &seed2, 1, &it);
				ap_prehash_take(h, "w", &t.ct, &it, ps);
				at += len;
				n++;
			}
			digest_now(&t, &want);
			cr_assert_eq(ap_prehash_get(h, "w", n, &got), 1, "shape %zu, way %d", s, way);
			cr_assert_eq(memcmp(got.b, want.b, 32), 0, "shape %zu, way %d: another digest",
				     s, way);
			ap_prehash_free(h);
			tensor_free(&t);
		}
}

/* Two items of tensor t: [a0, a0 + l0), then [a1, a1 + l1). */
static int two_items(struct tensor *t, uint64_t a0, uint64_t l0, uint64_t a1, uint64_t l1,
		     int parts0, int parts1)
{
	struct ap_prehash *h = ap_prehash_new();
	unsigned seed = 5;
	struct dcr_item it;
	struct dcr_parts *ps = resolve(t, a0, l0, &seed, parts0, &it);
	ap_prehash_take(h, "w", &t->ct, &it, ps);
	ps = resolve(t, a1, l1, &seed, parts1, &it);
	ap_prehash_take(h, "w", &t->ct, &it, ps);
	dcr_digest d;
	int q = ap_prehash_get(h, "w", 2, &d);
	ap_prehash_free(h);
	return q;
}

Test(prehash, items_that_do_not_follow_on_give_no_digest)
{
	struct tensor t;
	uint64_t shape[2] = {300, 1000};
	tensor_init(&t, "w", DCR_DT_BF16, 2, shape, 1);
	cr_assert_eq(two_items(&t, 0, 1000, 1000, 1000, 1, 1), 1, "in order");
	memcpy(t.now, t.old, t.nbytes);
	cr_assert_eq(two_items(&t, 1000, 1000, 0, 1000, 1, 1), 0, "out of order");
	cr_assert_eq(two_items(&t, 0, 1500, 1000, 1000, 1, 1), 0, "overlapping");
	cr_assert_eq(two_items(&t, 0, 1000, 1000, 1000, 0, 1), 0, "the first without parts");
	cr_assert_eq(two_items(&t, 0, 1000, 1000, 1000, 1, 0), 0, "the second without parts");
	tensor_free(&t);
}

Test(prehash, an_item_after_the_digest_spoils_it)
{
	struct tensor t;
	uint64_t shape[2] = {64, 1536};
	tensor_init(&t, "w", DCR_DT_BF16, 2, shape, 2);
	struct ap_prehash *h = ap_prehash_new();
	unsigned seed = 8;
	struct dcr_item it;
	ap_prehash_take(h, "w", &t.ct, &it, resolve(&t, 0, 4096, &seed, 1, &it));
	dcr_digest d, want;
	digest_now(&t, &want);
	cr_assert_eq(ap_prehash_get(h, "w", 1, &d), 1);
	cr_assert_eq(memcmp(d.b, want.b, 32), 0);
	ap_prehash_take(h, "w", &t.ct, &it, resolve(&t, 8192, 100, &seed, 1, &it));
	cr_assert_eq(ap_prehash_get(h, "w", 2, &d), 0);
	cr_assert_eq(ap_prehash_get(h, "w", 1, &d), 0);
	cr_assert_eq(ap_prehash_get(h, "other", 1, &d), 0, "a tensor it never saw");
	ap_prehash_free(h);
	tensor_free(&t);
}

/* More tensors at once than it keeps live: the oldest is finished when
 * the next one starts, so its item that comes after spoils it, and the
 * others keep theirs. */
Test(prehash, interleaved_tensors_past_the_live_ones)
{
	enum { N = PREHASH_LIVE + 2 };
	struct tensor t[N];
	char name[N][8];
	uint64_t shape[2] = {100, 512};
	struct ap_prehash *h = ap_prehash_new();
	unsigned seed = 3;
	struct dcr_item it;
	for (int i = 0; i < N; i++) {
		snprintf(name[i], sizeof(name[i]), "t%d", i);
		tensor_init(&t[i], name[i], DCR_DT_BF16, 2, shape, 10 + (unsigned)i);
		ap_prehash_take(h, name[i], &t[i].ct, &it, resolve(&t[i], 0, 10000, &seed, 1, &it));
	}
	/* t0 was finished (its rest read from the receiver) to make room */
	ap_prehash_take(h, name[0], &t[0].ct, &it, resolve(&t[0], 10000, 100, &seed, 1, &it));
	for (int i = 0; i < N; i++) {
		dcr_digest d, want;
		digest_now(&t[i], &want);
		int q = ap_prehash_get(h, name[i], i ? 1 : 2, &d);
		cr_assert_eq(q, i ? 1 : 0, "tensor %d", i);
		cr_assert(!q || !memcmp(d.b, want.b, 32), "tensor %d: another digest", i);
	}
	ap_prehash_free(h);
	for (int i = 0; i < N; i++)
		tensor_free(&t[i]);
}

/* A few changed bytes at the start of a large tensor: the rest is left
 * to the check, which reads on every core. */
Test(prehash, a_large_unchanged_rest_is_left_to_the_check)
{
	struct tensor t;
	uint64_t shape[2] = {4096, 3072}; /* 24 MiB */
	tensor_init(&t, "w", DCR_DT_BF16, 2, shape, 4);
	struct ap_prehash *h = ap_prehash_new();
	unsigned seed = 6;
	struct dcr_item it;
	ap_prehash_take(h, "w", &t.ct, &it, resolve(&t, 0, 3072, &seed, 1, &it));
	dcr_digest d;
	cr_assert_eq(ap_prehash_get(h, "w", 1, &d), 0);
	ap_prehash_free(h);
	/* with most of it changed, the gaps are read here */
	memcpy(t.now, t.old, t.nbytes);
	h = ap_prehash_new();
	ap_prehash_take(h, "w", &t.ct, &it, resolve(&t, 3072, 3072 * 3000, &seed, 1, &it));
	dcr_digest want;
	digest_now(&t, &want);
	cr_assert_eq(ap_prehash_get(h, "w", 1, &d), 1);
	cr_assert_eq(memcmp(d.b, want.b, 32), 0);
	ap_prehash_free(h);
	tensor_free(&t);
}
