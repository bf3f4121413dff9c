/* test-layout.c - layout maps: validation, exact-cover check, mapping and
 * placement against brute force, generators, residual transforms. */
#include "config.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dcr.h"
#include "core/bytes.h"

static const char *const configs[] = {
	/* GQA, K=2: K < T for T >= 4 (vLLM replicates KV heads) */
	"{\"model_type\": \"llama\", \"hidden_size\": 16, \"num_attention_heads\": 8,"
	" \"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"vocab_size\": 100,"
	" \"intermediate_size\": 24}",
	/* K=8 >= T, qkv bias, head_dim given */
	"{\"model_type\": \"qwen2\", \"hidden_size\": 32, \"num_attention_heads\": 16,"
	" \"num_key_value_heads\": 8, \"head_dim\": 2, \"num_hidden_layers\": 2,"
	" \"vocab_size\": 77, \"intermediate_size\": 40}",
	/* MoE with a dense first layer, q/k norms */
	"{\"model_type\": \"qwen3_moe\", \"hidden_size\": 16, \"num_attention_heads\": 8,"
	" \"num_key_value_heads\": 4, \"head_dim\": 4, \"num_hidden_layers\": 2,"
	" \"vocab_size\": 150, \"intermediate_size\": 32, \"num_experts\": 8,"
	" \"moe_intermediate_size\": 8, \"mlp_only_layers\": [0]}",
	/* MoE with shared experts, tied embeddings, sparse step 2 */
	"{\"model_type\": \"qwen2_moe\", \"hidden_size\": 16, \"num_attention_heads\": 4,"
	" \"num_key_value_heads\": 4, \"num_hidden_layers\": 3, \"vocab_size\": 70,"
	" \"intermediate_size\": 16, \"num_experts\": 4, \"moe_intermediate_size\": 8,"
	" \"shared_expert_intermediate_size\": 16, \"decoder_sparse_step\": 2,"
	" \"tie_word_embeddings\": true}",
};

static struct dcr_layout *gen(const char *cfg, const char *fw, uint32_t tp,
			      uint32_t ep, int64_t rank, struct dcr_err *e)
{
	struct dcr_layout_gen g = {.framework = fw, .tp = tp, .ep = ep, .rank = rank,
				   .stored_dtype = -1};
	struct dcr_layout *L = NULL;
	if (dcr_layout_generate(cfg, strlen(cfg), &g, &L, e) < 0)
		return NULL;
	return L;
}

/* ---- brute force: every stored element through the runs ------------------ */

struct holder {
	uint64_t cflat;
	uint32_t canon, tensor;
	uint64_t sflat;
};

struct collect {
	struct holder *h;
	size_t n, cap;
	const struct dcr_layout_piece *p;
};

static int collect_run(void *arg, uint64_t s, uint64_t c, uint64_t len)
{
	struct collect *k = arg;
	for (uint64_t i = 0; i < len; i++) {
		if (k->n == k->cap) {
			k->cap = k->cap ? 2 * k->cap : 1024;
			k->h = realloc(k->h, k->cap * sizeof(*k->h));
		}
		k->h[k->n++] = (struct holder){c + i, k->p->canon, k->p->tensor, s + i};
	}
	return 0;
}

static int holder_cmp(const void *a, const void *b)
{
	const struct holder *x = a, *y = b;
	if (x->canon != y->canon)
		return x->canon < y->canon ? -1 : 1;
	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	return x->sflat < y->sflat ? -1 : x->sflat > y->sflat;
}

/* Every stored element maps where its run says; placing every canonical
 * index returns exactly the stored elements holding it. */
static void brute(const struct dcr_layout *L)
{
	struct dcr_err e = {0};
	struct collect k = {0};
	uint64_t padding = 0;
	for (size_t t = 0; t < L->ntensors; t++) {
		uint8_t *seen = calloc(L->tensors[t].nelem + 1, 1);
		size_t first = k.n;
		for (size_t q = 0; q < L->tensors[t].npieces; q++) {
			k.p = dcr_layout_tensor_piece(L, (uint32_t)t, q);
			size_t before = k.n;
			dcr_layout_piece_runs(k.p, collect_run, &k);
			cr_assert_eq(k.n - before, k.p->nelem);
		}
		for (size_t i = first; i < k.n; i++) {
			struct holder *h = &k.h[i];
			cr_assert_lt(h->sflat, L->tensors[t].nelem);
			cr_assert_eq(seen[h->sflat], 0, "%s: element %lu twice",
				     L->tensors[t].name, (unsigned long)h->sflat);
			seen[h->sflat] = 1;
			uint32_t cn, pc;
			uint64_t cf;
			int r = dcr_layout_to_canonical(L, (uint32_t)t, h->sflat, &cn, &cf, &pc);
			if (h->canon == DCR_LAYOUT_NONE) {
				cr_assert_eq(r, 0);
				padding++;
			} else {
				cr_assert_eq(r, 1, "%s: %lu", L->tensors[t].name,
					     (unsigned long)h->sflat);
				cr_assert_eq(cn, h->canon);
				cr_assert_eq(cf, h->cflat);
				cr_assert_eq(L->pieces[pc].tensor, t);
			}
		}
		for (uint64_t s = 0; s < L->tensors[t].nelem; s++)
			cr_assert(seen[s], "%s: element %lu uncovered", L->tensors[t].name,
				  (unsigned long)s);
		cr_assert_eq(dcr_layout_to_canonical(L, (uint32_t)t, L->tensors[t].nelem,
						     NULL, NULL, NULL), -ERANGE);
		free(seen);
	}
	qsort(k.h, k.n, sizeof(*k.h), holder_cmp);
	/* holders are sorted by canon; padding (NONE = max) sorts last */
	for (uint32_t c = 0; c < L->ncanon; c++) {
		uint64_t n = L->canon[c].nelem;
		uint64_t *idx = malloc(n * sizeof(*idx));
		for (uint64_t i = 0; i < n; i++)
			idx[i] = i;
		struct dcr_layout_hit *hits;
		size_t nh;
		cr_assert_eq(dcr_layout_place(L, c, idx, n, &hits, &nh, &e), 0, "%s", e.msg);
		size_t lo = 0;
		while (lo < k.n && k.h[lo].canon < c)
			lo++;
		size_t hi = lo;
		while (hi < k.n && k.h[hi].canon == c)
			hi++;
		cr_assert_eq(nh, hi - lo, "%s: %zu hits, %zu holders", L->canon[c].name, nh, hi - lo);
		for (size_t i = 0; i < nh; i++) {
			cr_assert_eq(hits[i].tensor, k.h[lo + i].tensor);
			cr_assert_eq(hits[i].stored, k.h[lo + i].sflat);
			cr_assert_eq(idx[hits[i].pos], k.h[lo + i].cflat);
			cr_assert_eq(L->pieces[hits[i].piece].canon, c);
		}
		free(hits);
		free(idx);
	}
	(void)padding;
	free(k.h);
}

Test(layout, generated_maps_map_and_place_like_brute_force)
{
	static const char *fws[] = {"megatron", "vllm"};
	int ran = 0;
	for (size_t c = 0; c < sizeof(configs) / sizeof(*configs); c++)
		for (int f = 0; f < 2; f++)
			for (uint32_t T = 1; T <= 8; T *= 2)
				for (uint32_t E = 1; E <= 2; E++) {
					struct dcr_err e = {0};
					uint32_t ep = E == 1 ? 1 : f ? T : 2;
					if (E == 2 && c < 2)
						continue;
					struct dcr_layout *L = gen(configs[c], fws[f], T, ep, -1, &e);
					if (!L) {
						cr_assert(strstr(e.msg, "divisib") || strstr(e.msg, "divide"),
							  "%s", e.msg);
						continue;
					}
					struct dcr_layout_report r;
					cr_assert_eq(dcr_layout_check(L, &r, &e), 0, "%s %s", r.problem, e.msg);
					cr_assert_eq(r.canon_uncovered, 0);
					cr_assert_eq(r.stored_elems, r.affine_elems + r.padding_elems);
					brute(L);
					dcr_layout_free(L);
					ran++;
				}
	cr_assert_geq(ran, 30);
}

/* ---- placement of sparse, sorted, duplicated indices --------------------- */

Test(layout, place_replicated_kv_heads)
{
	struct dcr_err e = {0};
	/* K=2, T=8: each KV head on 4 ranks. */
	struct dcr_layout *L = gen(configs[0], "vllm", 8, 1, -1, &e);
	cr_assert(L, "%s", e.msg);
	int c = dcr_layout_find_canon(L, "model.layers.1.self_attn.k_proj.weight");
	cr_assert_geq(c, 0);
	/* k_proj is [4, 16]: rows 0-1 head 0, rows 2-3 head 1. */
	uint64_t idx[] = {0, 0, 17, 40, 63};
	struct dcr_layout_hit *h;
	size_t n;
	cr_assert_eq(dcr_layout_place(L, (uint32_t)c, idx, 5, &h, &n, &e), 0);
	cr_assert_eq(n, 5 * 4);
	for (size_t i = 0; i < n; i++) {
		const struct dcr_layout_tensor *t = &L->tensors[h[i].tensor];
		cr_assert_str_eq(t->name, "model.layers.1.self_attn.qkv_proj.weight");
		uint64_t head = idx[h[i].pos] / 32;
		cr_assert_eq(t->rank / 4, head, "rank %u holds head %lu", t->rank,
			     (unsigned long)head);
		/* q: 1 head of 2 rows * 16; k follows at 32 */
		cr_assert_eq(h[i].stored, 32 + idx[h[i].pos] % 32);
		if (i)
			cr_assert(h[i - 1].tensor < h[i].tensor ||
				  (h[i - 1].tensor == h[i].tensor && h[i - 1].stored <= h[i].stored));
	}
	free(h);
	/* A piece whose canonical span starts exactly at the last index. */
	uint64_t one[] = {32};
	cr_assert_eq(dcr_layout_place(L, (uint32_t)c, one, 1, &h, &n, &e), 0);
	cr_assert_eq(n, 4);
	for (size_t i = 0; i < n; i++)
		cr_assert_geq(L->tensors[h[i].tensor].rank, 4);
	free(h);
	uint64_t bad[] = {3, 2};
	cr_assert_lt(dcr_layout_place(L, (uint32_t)c, bad, 2, &h, &n, &e), 0);
	cr_assert_eq(dcr_layout_place(L, (uint32_t)c, idx, 0, &h, &n, &e), 0);
	cr_assert_eq(n, 0);
	free(h);
	dcr_layout_free(L);
}

Test(layout, megatron_qkv_interleaves_query_groups)
{
	struct dcr_err e = {0};
	/* H=8, K=2 (p=4), d=2, h=16; T=2: rank 1 holds group 1 only. */
	struct dcr_layout *L = gen(configs[0], "megatron", 2, 1, 1, &e);
	cr_assert(L, "%s", e.msg);
	cr_assert_not(L->complete);
	int t = dcr_layout_find_tensor(L, 1, "decoder.layers.0.self_attention.linear_qkv.weight");
	cr_assert_geq(t, 0);
	cr_assert_eq(L->tensors[t].shape[0], (4 + 2) * 2);
	uint32_t cn;
	uint64_t cf;
	/* stored row 0 = q row 8 (group 1's first q head) */
	cr_assert_eq(dcr_layout_to_canonical(L, t, 0, &cn, &cf, NULL), 1);
	cr_assert_str_eq(L->canon[cn].name, "model.layers.0.self_attn.q_proj.weight");
	cr_assert_eq(cf, 8 * 16);
	/* stored row 8 = k row 2 (group 1's k) */
	cr_assert_eq(dcr_layout_to_canonical(L, t, 8 * 16 + 3, &cn, &cf, NULL), 1);
	cr_assert_str_eq(L->canon[cn].name, "model.layers.0.self_attn.k_proj.weight");
	cr_assert_eq(cf, 2 * 16 + 3);
	/* stored row 11 = v row 3 */
	cr_assert_eq(dcr_layout_to_canonical(L, t, 11 * 16 + 15, &cn, &cf, NULL), 1);
	cr_assert_str_eq(L->canon[cn].name, "model.layers.0.self_attn.v_proj.weight");
	cr_assert_eq(cf, 3 * 16 + 15);
	/* Vocabulary: 100 rows padded to 256, rank 1 holds rows 128..255: all padding. */
	t = dcr_layout_find_tensor(L, 1, "embedding.word_embeddings.weight");
	cr_assert_eq(L->tensors[t].shape[0], 128);
	cr_assert_eq(dcr_layout_to_canonical(L, t, 0, &cn, &cf, NULL), 0);
	cr_assert_eq(cn, DCR_LAYOUT_NONE);
	dcr_layout_free(L);
}

/* ---- hand-built maps --------------------------------------------------------- */

static struct dcr_layout *two_by(uint64_t rows, uint64_t cols, struct dcr_err *e)
{
	struct dcr_layout *L = dcr_layout_new();
	uint64_t cs[2] = {rows, cols}, ss[2] = {cols, rows};
	cr_assert_eq(dcr_layout_add_canon(L, "A", DCR_DT_BF16, 2, cs, e), 0);
	cr_assert_eq(dcr_layout_add_tensor(L, 0, "S", DCR_DT_BF16, 2, ss, e), 0);
	return L;
}

Test(layout, transposed_piece_maps_both_ways)
{
	struct dcr_err e = {0};
	struct dcr_layout *L = two_by(4, 3, &e);
	/* stored [3, 4] = canonical [4, 3] transposed */
	struct dcr_layout_dim d[2] = {{3, 4, 1}, {4, 1, 3}};
	cr_assert_eq(dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, DCR_XF_NONE, "A", 0, 0, 2, d, &e), 0, "%s", e.msg);
	cr_assert_eq(dcr_layout_finish(L, &e), 0);
	struct dcr_layout_report r;
	cr_assert_eq(dcr_layout_check(L, &r, &e), 0, "%s", r.problem);
	for (uint64_t s = 0; s < 12; s++) {
		uint64_t cf;
		cr_assert_eq(dcr_layout_to_canonical(L, 0, s, NULL, &cf, NULL), 1);
		cr_assert_eq(cf, (s % 4) * 3 + s / 4);
	}
	brute(L);
	dcr_layout_free(L);
}

static int check_of(struct dcr_layout *L, struct dcr_layout_report *r)
{
	struct dcr_err e = {0};
	cr_assert_eq(dcr_layout_finish(L, &e), 0, "%s", e.msg);
	return dcr_layout_check(L, r, &e);
}

Test(layout, check_finds_gap_overlap_duplicate)
{
	struct dcr_err e = {0};
	struct dcr_layout_report r;
	struct dcr_layout_dim half = {6, 1, 1};

	struct dcr_layout *L = two_by(4, 3, &e);
	dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, 0, 1, &half, &e);
	cr_assert_eq(check_of(L, &r), 1);
	cr_assert(strstr(r.problem, "gap: stored tensor 'S' of rank 0: elements 6..11"), "%s", r.problem);
	dcr_layout_free(L);

	/* A one-element gap between pieces. */
	L = two_by(4, 3, &e);
	struct dcr_layout_dim five = {5, 1, 1};
	dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, 0, 1, &five, &e);
	dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 6, 6, 1, &half, &e);
	cr_assert_eq(check_of(L, &r), 1);
	cr_assert(strstr(r.problem, "gap: stored tensor 'S' of rank 0: elements 5..5 ([1, 1]..[1, 1])"), "%s", r.problem);
	dcr_layout_free(L);

	L = two_by(4, 3, &e);
	struct dcr_layout_dim seven = {7, 1, 1};
	dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, 0, 1, &seven, &e);
	dcr_layout_add_piece(L, 0, DCR_PIECE_PADDING, 0, NULL, 6, 0, 1, &half, &e);
	cr_assert_eq(check_of(L, &r), 1);
	cr_assert(strstr(r.problem, "overlap: stored tensor 'S' of rank 0: element 6 [1, 2]"), "%s", r.problem);
	dcr_layout_free(L);

	L = two_by(4, 3, &e);
	dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, 0, 1, &half, &e);
	dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 6, 3, 1, &half, &e);
	cr_assert_eq(check_of(L, &r), 1);
	cr_assert(strstr(r.problem, "duplicate:"), "%s", r.problem);
	dcr_layout_free(L);

	/* Replicas across stored tensors are fine and counted. */
	L = dcr_layout_new();
	uint64_t sh[1] = {6};
	dcr_layout_add_canon(L, "N", DCR_DT_BF16, 1, sh, &e);
	for (uint32_t rank = 0; rank < 3; rank++) {
		dcr_layout_add_tensor(L, rank, "N", DCR_DT_BF16, 1, sh, &e);
		dcr_layout_add_piece(L, rank, DCR_PIECE_AFFINE, 0, "N", 0, 0, 1, &half, &e);
	}
	dcr_layout_set_info(L, NULL, NULL, 3, 1, 3, 1, &e);
	cr_assert_eq(check_of(L, &r), 0, "%s", r.problem);
	cr_assert_eq(r.canon_replicated, 6);
	cr_assert_eq(r.replica_copies, 12);
	dcr_layout_free(L);
}

Test(layout, validation_rejects_hostile_pieces)
{
	struct dcr_err e = {0};
	struct dcr_layout *L = two_by(4, 3, &e);
	struct dcr_layout_dim alias[2] = {{2, 3, 6}, {4, 1, 1}}; /* stored rows overlap */
	cr_assert_eq(dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, 0, 2, alias, &e), DCR_EFORMAT);
	cr_assert(strstr(e.msg, "not injective"), "%s", e.msg);
	struct dcr_layout_dim calias[2] = {{3, 4, 2}, {4, 1, 1}}; /* canonical rows overlap */
	cr_assert_eq(dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, 0, 2, calias, &e), DCR_EFORMAT);
	struct dcr_layout_dim big[2] = {{1ULL << 40, 1ULL << 40, 1}, {1ULL << 40, 1, 1}};
	cr_assert_eq(dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, 0, 2, big, &e), DCR_EFORMAT);
	struct dcr_layout_dim wrap = {2, UINT64_MAX / 2 + 1, 1};
	cr_assert_eq(dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, 0, 1, &wrap, &e), DCR_EFORMAT);
	struct dcr_layout_dim all = {12, 1, 1};
	cr_assert_eq(dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", UINT64_MAX - 3, 0, 1, &all, &e), DCR_EFORMAT);
	cr_assert_eq(dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, UINT64_MAX - 3, 1, &all, &e), DCR_EFORMAT);
	struct dcr_layout_dim zero = {0, 1, 1};
	cr_assert_eq(dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, 0, 1, &zero, &e), DCR_EFORMAT);
	cr_assert_eq(dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, DCR_XF_CAST, "A", 0, 0, 1, &all, &e), DCR_EFORMAT);
	cr_assert_eq(dcr_layout_add_piece(L, 0, 7, 0, "A", 0, 0, 1, &all, &e), DCR_EFORMAT);
	uint64_t huge[3] = {1ULL << 32, 1ULL << 32, 2};
	cr_assert_eq(dcr_layout_add_canon(L, "H", DCR_DT_BF16, 3, huge, &e), DCR_EFORMAT);
	cr_assert_eq(dcr_layout_add_canon(L, "A", DCR_DT_BF16, 0, huge, &e), DCR_EFORMAT);
	cr_assert_eq(dcr_layout_add_canon(L, "F", DCR_DT_F4, 0, huge, &e), DCR_EFORMAT);
	/* An affine piece across dtypes is not pure re-indexing. */
	uint64_t s12[1] = {12};
	cr_assert_eq(dcr_layout_add_tensor(L, 0, "F", DCR_DT_F32, 1, s12, &e), 1);
	cr_assert_eq(dcr_layout_add_piece(L, 1, DCR_PIECE_AFFINE, 0, "A", 0, 0, 1, &all, &e), DCR_EFORMAT);
	cr_assert_eq(dcr_layout_add_piece(L, 1, DCR_PIECE_RESIDUAL, DCR_XF_CAST, "A", 0, 0, 1, &all, &e), 0, "%s", e.msg);
	/* Same (rank, name) twice. */
	cr_assert_eq(dcr_layout_add_tensor(L, 0, "S", DCR_DT_BF16, 1, s12, &e), 2);
	cr_assert_eq(dcr_layout_finish(L, &e), DCR_EFORMAT);
	cr_assert(strstr(e.msg, "listed twice"), "%s", e.msg);
	dcr_layout_free(L);
}

Test(layout, fragmented_map_is_refused_not_exhausted)
{
	struct dcr_err e = {0};
	struct dcr_layout *L = dcr_layout_new();
	uint64_t sh[1] = {1ULL << 28}, ch[1] = {1ULL << 27};
	dcr_layout_add_canon(L, "A", DCR_DT_BF16, 1, ch, &e);
	dcr_layout_add_tensor(L, 0, "S", DCR_DT_BF16, 1, sh, &e);
	struct dcr_layout_dim d = {1ULL << 27, 2, 1};
	cr_assert_eq(dcr_layout_add_piece(L, 0, DCR_PIECE_AFFINE, 0, "A", 0, 0, 1, &d, &e), 0, "%s", e.msg);
	cr_assert_eq(dcr_layout_finish(L, &e), 0);
	struct dcr_layout_report r;
	cr_assert_eq(dcr_layout_check(L, &r, &e), -E2BIG);
	cr_assert(strstr(e.msg, "too fragmented"), "%s", e.msg);
	/* Lookups still work by arithmetic. */
	uint64_t cf;
	cr_assert_eq(dcr_layout_to_canonical(L, 0, 2 * 12345, NULL, &cf, NULL), 1);
	cr_assert_eq(cf, 12345);
	cr_assert_eq(dcr_layout_to_canonical(L, 0, 2 * 12345 + 1, NULL, &cf, NULL), DCR_ENOTFOUND);
	dcr_layout_free(L);
}

/* ---- JSON --------------------------------------------------------------------- */

Test(layout, dump_parse_roundtrip)
{
	struct dcr_err e = {0};
	struct dcr_layout *L = gen(configs[2], "vllm", 2, 1, -1, &e), *M;
	cr_assert(L, "%s", e.msg);
	char *a, *b;
	cr_assert_eq(dcr_layout_dump(L, &a, &e), 0);
	cr_assert_eq(dcr_layout_parse(a, strlen(a), &M, &e), 0, "%s", e.msg);
	cr_assert_eq(dcr_layout_dump(M, &b, &e), 0);
	cr_assert_str_eq(a, b);
	cr_assert_eq(M->complete, 1);
	cr_assert_str_eq(M->framework, "vllm");
	cr_assert_eq(M->npieces, L->npieces);
	free(a);
	free(b);
	dcr_layout_free(L);
	dcr_layout_free(M);
}

Test(layout, parse_rejects_bad_maps)
{
	static const char *bad[] = {
		"[]",
		"{\"canonical\": [], \"stored\": []}",
		"{\"dcr_layout\": 2, \"canonical\": [], \"stored\": []}",
		"{\"dcr_layout\": 1, \"canonical\": {}, \"stored\": []}",
		"{\"dcr_layout\": 1, \"dcr_layout\": 1, \"canonical\": [], \"stored\": []}",
		"{\"dcr_layout\": 1, \"canonical\": [{\"name\": \"A\", \"dtype\": \"BF16\", \"shape\": [-1]}], \"stored\": []}",
		"{\"dcr_layout\": 1, \"canonical\": [{\"name\": \"A\", \"dtype\": \"Q7\", \"shape\": [1]}], \"stored\": []}",
		"{\"dcr_layout\": 1, \"canonical\": [{\"name\": \"A\", \"dtype\": \"BF16\", \"shape\": [1.5]}], \"stored\": []}",
		"{\"dcr_layout\": 1, \"canonical\": [{\"name\": \"A\", \"dtype\": \"BF16\", \"shape\": [2]}],"
		" \"stored\": [{\"name\": \"S\", \"dtype\": \"BF16\", \"shape\": [2], \"pieces\": [{\"kind\": \"affine\", \"canon\": \"A\", \"dims\": [[2, 1]]}]}]}",
		"{\"dcr_layout\": 1, \"canonical\": [{\"name\": \"A\", \"dtype\": \"BF16\", \"shape\": [2]}],"
		" \"stored\": [{\"name\": \"S\", \"dtype\": \"BF16\", \"shape\": [2], \"pieces\": [{\"kind\": \"affine\", \"transform\": \"cast\", \"canon\": \"A\", \"dims\": [[2, 1, 1]]}]}]}",
		"{\"dcr_layout\": 1, \"canonical\": [], \"stored\": [{\"name\": \"S\", \"rank\": -1, \"dtype\": \"BF16\", \"shape\": [2], \"pieces\": []}]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		struct dcr_err e = {0};
		struct dcr_layout *L = (void *)1;
		cr_assert_eq(dcr_layout_parse(bad[i], strlen(bad[i]), &L, &e), DCR_EFORMAT, "case %zu", i);
		cr_assert_null(L);
		cr_assert_neq(e.msg[0], 0);
		cr_assert_null(strchr(e.msg, '\n'));
	}
}

/* ---- residual transforms ---------------------------------------------------------- */

Test(layout, xform_round_to_nearest_even)
{
	int F = DCR_DT_F32, B = DCR_DT_BF16, H = DCR_DT_F16;
	cr_assert_eq(dcr_xform_forward(DCR_XF_CAST, F, B, 0x3f808000), 0x3f80); /* tie, even down */
	cr_assert_eq(dcr_xform_forward(DCR_XF_CAST, F, B, 0x3f818000), 0x3f82); /* tie, even up */
	cr_assert_eq(dcr_xform_forward(DCR_XF_CAST, F, B, 0x3f808001), 0x3f81);
	cr_assert_eq(dcr_xform_forward(DCR_XF_CAST, F, B, 0x7f800001), 0x7fc0); /* NaN */
	cr_assert_eq(dcr_xform_forward(DCR_XF_CAST, F, B, 0x80000000), 0x8000); /* -0 */
	cr_assert_eq(dcr_xform_forward(DCR_XF_CAST, F, B, 0x7f7fffff), 0x7f80); /* overflow to inf */
	cr_assert_eq(dcr_xform_forward(DCR_XF_CAST, F, H, 0x3f800000), 0x3c00);
	cr_assert_eq(dcr_xform_forward(DCR_XF_CAST, F, H, 0x33000000), 0x0000); /* 2^-25: tie to 0 */
	cr_assert_eq(dcr_xform_forward(DCR_XF_CAST, F, H, 0x33000001), 0x0001);
	/* Zero-centered gamma: canonical = stored + 1 */
	cr_assert_eq(dcr_xform_forward(DCR_XF_ADD1, B, B, 0x0000), 0x3f80);
	cr_assert_eq(dcr_xform_forward(DCR_XF_ADD1, F, B, 0x3c000000), 0x3f81); /* 1 + 2^-7: one ULP */
	cr_assert_eq(dcr_xform_inverse(DCR_XF_ADD1, F, B, 0x3f80), 0);
	/* bf16 -> f32 widening is exact, so its inverse round-trips */
	for (uint32_t v = 0; v < 0x10000; v += 7) {
		if ((v & 0x7fff) > 0x7f80)
			continue;
		uint64_t w = dcr_xform_inverse(DCR_XF_CAST, F, B, v);
		cr_assert_eq(w, (uint64_t)v << 16);
		cr_assert_eq(dcr_xform_forward(DCR_XF_CAST, F, B, w), v);
	}
	cr_assert(dcr_xform_supported(DCR_XF_CAST, F, B));
	cr_assert_not(dcr_xform_supported(DCR_XF_CAST, DCR_DT_I32, B));
	cr_assert_not(dcr_xform_supported(DCR_XF_NONE, B, B));
	cr_assert_eq(dcr_xform_parse("add1"), DCR_XF_ADD1);
	cr_assert_eq(dcr_xform_parse("none"), -1);
}

Test(layout, fp32_training_shards_are_residual)
{
	struct dcr_err e = {0};
	struct dcr_layout_gen g = {.framework = "megatron", .tp = 2, .ep = 1, .rank = -1,
				   .stored_dtype = DCR_DT_F32, .zero_centered_gamma = 1};
	struct dcr_layout *L;
	cr_assert_eq(dcr_layout_generate(configs[2], strlen(configs[2]), &g, &L, &e), 0, "%s", e.msg);
	struct dcr_layout_report r;
	cr_assert_eq(dcr_layout_check(L, &r, &e), 0, "%s", r.problem);
	cr_assert_eq(r.affine_elems, 0);
	cr_assert_gt(r.residual_elems, 0);
	int nadd1 = 0;
	for (size_t i = 0; i < L->npieces; i++) {
		const struct dcr_layout_piece *p = &L->pieces[i];
		if (p->kind == DCR_PIECE_PADDING)
			continue;
		cr_assert_eq(p->kind, DCR_PIECE_RESIDUAL);
		const char *n = L->tensors[p->tensor].name;
		int norm = strstr(n, "layernorm") || strstr(n, "layer_norm");
		cr_assert_eq(p->xform, norm ? DCR_XF_ADD1 : DCR_XF_CAST, "%s", n);
		nadd1 += norm;
	}
	cr_assert_gt(nadd1, 0);
	brute(L);
	dcr_layout_free(L);
	/* vLLM has no zero-centered storage. */
	g.framework = "vllm";
	cr_assert_lt(dcr_layout_generate(configs[2], strlen(configs[2]), &g, &L, &e), 0);
}
