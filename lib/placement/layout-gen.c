/* layout-gen.c - layout maps from a Hugging Face config.json (Megatron
 * training shards, vLLM serving parameters), and materialization of a
 * layout's files from a canonical checkpoint. See dcr-layout(1). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/bytes.h"
#include "core/file.h"
#include "core/util.h"
#include "placement/layout-gen.h"

/* ---- model description ------------------------------------------------- */

struct model {
	char model_type[64];
	uint64_t h, H, K, d, I, L, V;
	int tie, dtype, qkv_bias, qk_norm;
	uint64_t E, Imoe, Ish, sparse_step;
	uint8_t *mlp_only; /* L flags */
};

static int cfg_u64(json_t *root, const char *key, uint64_t def, int required,
		   uint64_t *out, struct dcr_err *e)
{
	json_t *v = json_object_get(root, key);
	if (!v || json_is_null(v)) {
		if (required)
			return dcr_err_set(e, DCR_EFORMAT, "config.json: missing \"%s\"", key);
		*out = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > (1LL << 40))
		return dcr_err_set(e, DCR_EFORMAT, "config.json: \"%s\" is not a sane non-negative integer", key);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int parse_config(const char *text, size_t len, struct model *m,
			struct dcr_err *e)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, 0, &je);
	int rc = 0;
	memset(m, 0, sizeof(*m));
	if (!root)
		return dcr_err_set(e, DCR_EFORMAT, "config.json: invalid JSON at line %d: %s",
				   je.line, je.text);
	if (!json_is_object(root)) {
		rc = dcr_err_set(e, DCR_EFORMAT, "config.json: not an object");
		goto out;
	}
	json_t *mt = json_object_get(root, "model_type");
	snprintf(m->model_type, sizeof(m->model_type), "%s",
		 json_is_string(mt) ? json_string_value(mt) : "llama");
	static const char *const known[] = {"llama", "mistral", "qwen2", "qwen3",
					    "qwen2_moe", "qwen3_moe"};
	int ok = 0;
	for (size_t i = 0; i < sizeof(known) / sizeof(*known); i++)
		ok |= !strcmp(m->model_type, known[i]);
	if (!ok) {
		rc = dcr_err_set(e, DCR_EFORMAT,
				 "config.json: model_type '%s' is not supported (llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe)",
				 m->model_type);
		goto out;
	}
	if ((rc = cfg_u64(root, "hidden_size", 0, 1, &m->h, e)) < 0 ||
	    (rc = cfg_u64(root, "num_attention_heads", 0, 1, &m->H, e)) < 0 ||
	    (rc = cfg_u64(root, "num_key_value_heads", m->H, 0, &m->K, e)) < 0 ||
	    (rc = cfg_u64(root, "num_hidden_layers", 0, 1, &m->L, e)) < 0 ||
	    (rc = cfg_u64(root, "vocab_size", 0, 1, &m->V, e)) < 0 ||
	    (rc = cfg_u64(root, "intermediate_size", 0, 1, &m->I, e)) < 0)
		goto out;
	if (!m->H || !m->K || !m->h || !m->V || m->L > 100000) {
		rc = dcr_err_set(e, DCR_EFORMAT, "config.json: zero heads, hidden size or vocabulary, or absurd layer count");
		goto out;
	}
	if ((rc = cfg_u64(root, "head_dim", m->h / m->H, 0, &m->d, e)) < 0)
		goto out;
	int moe = strstr(m->model_type, "_moe") != NULL;
	if (moe) {
		if ((rc = cfg_u64(root, "num_experts", 0, 1, &m->E, e)) < 0 ||
		    (rc = cfg_u64(root, "moe_intermediate_size", 0, 1, &m->Imoe, e)) < 0 ||
		    (rc = cfg_u64(root, "shared_expert_intermediate_size", 0, 0, &m->Ish, e)) < 0 ||
		    (rc = cfg_u64(root, "decoder_sparse_step", 1, 0, &m->sparse_step, e)) < 0)
			goto out;
		if (!m->E || !m->Imoe || !m->sparse_step) {
			rc = dcr_err_set(e, DCR_EFORMAT, "config.json: num_experts, moe_intermediate_size and decoder_sparse_step must be positive");
			goto out;
		}
	}
	if (!m->d) {
		rc = dcr_err_set(e, DCR_EFORMAT, "config.json: head_dim is 0");
		goto out;
	}
	m->mlp_only = calloc(m->L ? m->L : 1, 1);
	if (!m->mlp_only) {
		rc = dcr_err_sys(e, ENOMEM, "config");
		goto out;
	}
	json_t *mo = json_object_get(root, "mlp_only_layers");
	if (mo && json_is_array(mo)) {
		size_t i;
		json_t *v;
		json_array_foreach(mo, i, v) {
			if (!json_is_integer(v)) {
				rc = dcr_err_set(e, DCR_EFORMAT, "config.json: mlp_only_layers must list integers");
				goto out;
			}
			json_int_t l = json_integer_value(v);
			if (l >= 0 && (uint64_t)l < m->L)
				m->mlp_only[l] = 1;
		}
	}
	json_t *tie = json_object_get(root, "tie_word_embeddings");
	m->tie = tie && json_is_true(tie);
	json_t *dt = json_object_get(root, "torch_dtype");
	if (!json_is_string(dt))
		dt = json_object_get(root, "dtype");
	const char *dts = json_is_string(dt) ? json_string_value(dt) : "bfloat16";
	if (!strcmp(dts, "bfloat16"))
		m->dtype = DCR_DT_BF16;
	else if (!strcmp(dts, "float16"))
		m->dtype = DCR_DT_F16;
	else if (!strcmp(dts, "float32"))
		m->dtype = DCR_DT_F32;
	else {
		rc = dcr_err_set(e, DCR_EFORMAT, "config.json: torch_dtype '%s' is not supported", dts);
		goto out;
	}
	json_t *ab = json_object_get(root, "attention_bias");
	m->qkv_bias = !strncmp(m->model_type, "qwen2", 5) || (ab && json_is_true(ab));
	m->qk_norm = !strncmp(m->model_type, "qwen3", 5);
	/* Products used below must not overflow: keep every size below 2^40
	 * (checked by cfg_u64) and the few products below 2^62. */
	uint64_t t;
	if (mul_ovf(m->H + 2 * m->K, m->d, &t) || mul_ovf(t, m->h, &t) ||
	    mul_ovf(m->V + 1024 * 64, m->h, &t) || mul_ovf(m->I, m->h, &t) ||
	    mul_ovf(m->Imoe, m->h, &t) || mul_ovf(t, 2, &t) || t > (1ULL << 62)) {
		rc = dcr_err_set(e, DCR_EFORMAT, "config.json: tensor sizes overflow");
		goto out;
	}
out:
	json_decref(root);
	if (rc < 0) {
		free(m->mlp_only);
		m->mlp_only = NULL;
	}
	return rc;
}

static int layer_is_moe(const struct model *m, uint64_t i)
{
	return m->E && !m->mlp_only[i] && (i + 1) % m->sparse_step == 0;
}

/* ---- builder ------------------------------------------------------------- */

struct gb {
	struct dcr_layout *L;
	struct dcr_err *e;
	const struct model *m;
	int sdt;          /* stored dtype */
	int zcg;          /* megatron zero-centered gamma */
	uint32_t rank;
	int ti;
	uint64_t soff;
	uint64_t P;       /* vocabulary rows per rank */
	char name[512];
	char cname[512];
};

static int canon(struct gb *g, const char *name, unsigned ndim, uint64_t a,
		 uint64_t b)
{
	uint64_t shape[2] = {a, b};
	int rc = dcr_layout_add_canon(g->L, name, g->m->dtype, ndim, shape, g->e);
	return rc < 0 ? rc : 0;
}

static int begin(struct gb *g, unsigned ndim, uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t shape[3] = {a, b, c};
	g->ti = dcr_layout_add_tensor(g->L, g->rank, g->name, g->sdt, ndim, shape, g->e);
	g->soff = 0;
	return g->ti < 0 ? g->ti : 0;
}

static int end(struct gb *g)
{
	if (g->soff != g->L->tensors[g->ti].nelem)
		return dcr_err_set(g->e, -EINVAL, "internal: '%s' built with %" PRIu64 " of %" PRIu64 " elements",
				   g->name, g->soff, g->L->tensors[g->ti].nelem);
	return 0;
}

static void kind_of(const struct gb *g, int norm, int *kind, int *xf)
{
	*kind = DCR_PIECE_AFFINE;
	*xf = DCR_XF_NONE;
	if (norm && g->zcg) {
		*kind = DCR_PIECE_RESIDUAL;
		*xf = DCR_XF_ADD1;
	} else if (g->sdt != g->m->dtype) {
		*kind = DCR_PIECE_RESIDUAL;
		*xf = DCR_XF_CAST;
	}
}

/* Contiguous block: len elements of canonical cn from coff. */
static int block(struct gb *g, const char *cn, uint64_t coff, uint64_t len, int norm)
{
	if (!len)
		return 0;
	int kind, xf;
	kind_of(g, norm, &kind, &xf);
	struct dcr_layout_dim d = {len, 1, 1};
	int rc = dcr_layout_add_piece(g->L, (uint32_t)g->ti, kind, xf, cn, g->soff,
				      coff, 1, &d, g->e);
	g->soff += len;
	return rc;
}

/* Column slice [rows, ncols] from canonical [rows, C] starting at col0. */
static int cols(struct gb *g, const char *cn, uint64_t rows, uint64_t col0,
		uint64_t ncols, uint64_t C)
{
	int kind, xf;
	kind_of(g, 0, &kind, &xf);
	struct dcr_layout_dim d[2] = {{rows, ncols, C}, {ncols, 1, 1}};
	int rc = dcr_layout_add_piece(g->L, (uint32_t)g->ti, kind, xf, cn, g->soff,
				      col0, 2, d, g->e);
	g->soff += rows * ncols;
	return rc;
}

static int pad(struct gb *g, uint64_t len)
{
	if (!len)
		return 0;
	struct dcr_layout_dim d = {len, 1, 0};
	int rc = dcr_layout_add_piece(g->L, (uint32_t)g->ti, DCR_PIECE_PADDING,
				      DCR_XF_NONE, NULL, g->soff, 0, 1, &d, g->e);
	g->soff += len;
	return rc;
}

#define NAME(...) snprintf(g->name, sizeof(g->name), __VA_ARGS__)
#define CN(...) (snprintf(g->cname, sizeof(g->cname), __VA_ARGS__), g->cname)
#define TRY(x) do { int rc_ = (x); if (rc_ < 0) return rc_; } while (0)

/* A replicated tensor: the whole canonical tensor. */
static int full(struct gb *g, const char *cn, unsigned ndim, uint64_t a,
		uint64_t b, int norm)
{
	TRY(begin(g, ndim, a, b, 0));
	TRY(block(g, cn, 0, ndim == 1 ? a : a * b, norm));
	return end(g);
}

/* Vocabulary rows [t*P, (t+1)*P) of a padded [V, h] table. */
static int vocab(struct gb *g, const char *cn, uint64_t P, uint32_t t)
{
	const struct model *m = g->m;
	uint64_t lo = (uint64_t)t * P, real = 0;
	if (lo < m->V)
		real = m->V - lo < P ? m->V - lo : P;
	TRY(begin(g, 2, P, m->h, 0));
	TRY(block(g, cn, lo * m->h, real * m->h, 0));
	TRY(pad(g, (P - real) * m->h));
	return end(g);
}

static int add_canonical(struct gb *g)
{
	const struct model *m = g->m;
	uint64_t h = m->h, qd = m->H * m->d, kd = m->K * m->d;
	TRY(canon(g, "model.embed_tokens.weight", 2, m->V, h));
	for (uint64_t i = 0; i < m->L; i++) {
		TRY(canon(g, CN("model.layers.%" PRIu64 ".input_layernorm.weight", i), 1, h, 0));
		TRY(canon(g, CN("model.layers.%" PRIu64 ".self_attn.q_proj.weight", i), 2, qd, h));
		TRY(canon(g, CN("model.layers.%" PRIu64 ".self_attn.k_proj.weight", i), 2, kd, h));
		TRY(canon(g, CN("model.layers.%" PRIu64 ".self_attn.v_proj.weight", i), 2, kd, h));
		if (m->qkv_bias) {
			TRY(canon(g, CN("model.layers.%" PRIu64 ".self_attn.q_proj.bias", i), 1, qd, 0));
			TRY(canon(g, CN("model.layers.%" PRIu64 ".self_attn.k_proj.bias", i), 1, kd, 0));
			TRY(canon(g, CN("model.layers.%" PRIu64 ".self_attn.v_proj.bias", i), 1, kd, 0));
		}
		if (m->qk_norm) {
			TRY(canon(g, CN("model.layers.%" PRIu64 ".self_attn.q_norm.weight", i), 1, m->d, 0));
			TRY(canon(g, CN("model.layers.%" PRIu64 ".self_attn.k_norm.weight", i), 1, m->d, 0));
		}
		TRY(canon(g, CN("model.layers.%" PRIu64 ".self_attn.o_proj.weight", i), 2, h, qd));
		TRY(canon(g, CN("model.layers.%" PRIu64 ".post_attention_layernorm.weight", i), 1, h, 0));
		if (!layer_is_moe(m, i)) {
			TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.gate_proj.weight", i), 2, m->I, h));
			TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.up_proj.weight", i), 2, m->I, h));
			TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.down_proj.weight", i), 2, h, m->I));
			continue;
		}
		TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.gate.weight", i), 2, m->E, h));
		for (uint64_t x = 0; x < m->E; x++) {
			TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.experts.%" PRIu64 ".gate_proj.weight", i, x), 2, m->Imoe, h));
			TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.experts.%" PRIu64 ".up_proj.weight", i, x), 2, m->Imoe, h));
			TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.experts.%" PRIu64 ".down_proj.weight", i, x), 2, h, m->Imoe));
		}
		if (m->Ish) {
			TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.shared_expert.gate_proj.weight", i), 2, m->Ish, h));
			TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.shared_expert.up_proj.weight", i), 2, m->Ish, h));
			TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.shared_expert.down_proj.weight", i), 2, h, m->Ish));
			TRY(canon(g, CN("model.layers.%" PRIu64 ".mlp.shared_expert_gate.weight", i), 2, 1, h));
		}
	}
	TRY(canon(g, "model.norm.weight", 1, h, 0));
	if (!m->tie)
		TRY(canon(g, "lm_head.weight", 2, m->V, h));
	return 0;
}

/* Megatron fused QKV rows (or bias elements when h == 1) of tensor rank t:
 * whole query groups [t*K/T, (t+1)*K/T), each [q heads (p*d) | k (d) | v (d)]. */
static int megatron_qkv(struct gb *g, uint64_t i, uint32_t T, uint32_t t,
			const char *what, uint64_t h)
{
	const struct model *m = g->m;
	uint64_t p = m->H / m->K, d = m->d, G = m->K / T;
	NAME("decoder.layers.%" PRIu64 ".self_attention.linear_qkv.%s", i, what);
	TRY(begin(g, h == 1 ? 1 : 2, G * (p + 2) * d, h, 0));
	for (uint64_t gi = (uint64_t)t * G; gi < (uint64_t)(t + 1) * G; gi++) {
		TRY(block(g, CN("model.layers.%" PRIu64 ".self_attn.q_proj.%s", i, what), gi * p * d * h, p * d * h, 0));
		TRY(block(g, CN("model.layers.%" PRIu64 ".self_attn.k_proj.%s", i, what), gi * d * h, d * h, 0));
		TRY(block(g, CN("model.layers.%" PRIu64 ".self_attn.v_proj.%s", i, what), gi * d * h, d * h, 0));
	}
	return end(g);
}

/* The [gate rows | up rows] blocks of slice t of n, canonical prefix pre
 * ("model.layers.3.mlp" or "model.layers.3.mlp.experts.7"). */
static int gate_up(struct gb *g, const char *pre, uint64_t I, uint32_t n, uint32_t t)
{
	uint64_t h = g->m->h, It = I / n;
	TRY(block(g, CN("%s.gate_proj.weight", pre), t * It * h, It * h, 0));
	TRY(block(g, CN("%s.up_proj.weight", pre), t * It * h, It * h, 0));
	return 0;
}

/* A column slice [h, I/n] of a [h, I] down projection. */
static int down(struct gb *g, const char *pre, uint64_t I, uint32_t n, uint32_t t)
{
	uint64_t It = I / n;
	return cols(g, CN("%s.down_proj.weight", pre), g->m->h, t * It, It, I);
}

/* A row-parallel pair: the fused gate/up tensor OUT.FC1 ([gate_t; up_t],
 * 2 I/n rows) and the down projection OUT.FC2 (column slice t of n) of the
 * canonical MLP at prefix pre. */
static int mlp_pair(struct gb *g, const char *pre, uint64_t I, uint32_t n, uint32_t t,
		    const char *out, const char *fc1, const char *fc2)
{
	uint64_t h = g->m->h;
	char o[sizeof(g->name)]; /* out may be g->cname, which gate_up reuses */
	if (snprintf(o, sizeof(o), "%s", out) >= (int)sizeof(o) ||
	    snprintf(g->name, sizeof(g->name), "%s.%s", o, fc1) >= (int)sizeof(g->name))
		return dcr_err_set(g->e, -EINVAL, "internal: name '%s.%s' too long", out, fc1);
	TRY(begin(g, 2, 2 * (I / n), h, 0));
	TRY(gate_up(g, pre, I, n, t));
	TRY(end(g));
	if (snprintf(g->name, sizeof(g->name), "%s.%s", o, fc2) >= (int)sizeof(g->name))
		return dcr_err_set(g->e, -EINVAL, "internal: name '%s.%s' too long", o, fc2);
	TRY(begin(g, 2, h, I / n, 0));
	TRY(down(g, pre, I, n, t));
	return end(g);
}

static int megatron_rank(struct gb *g, uint32_t T, uint32_t EP, uint32_t r)
{
	const struct model *m = g->m;
	uint32_t t = r % T, ep = r / T;
	uint64_t h = m->h, qd = m->H * m->d;
	char pre[256];
	g->rank = r;
	NAME("embedding.word_embeddings.weight");
	TRY(vocab(g, "model.embed_tokens.weight", g->P, t));
	for (uint64_t i = 0; i < m->L; i++) {
		NAME("decoder.layers.%" PRIu64 ".self_attention.linear_qkv.layer_norm_weight", i);
		TRY(full(g, CN("model.layers.%" PRIu64 ".input_layernorm.weight", i), 1, h, 0, 1));
		TRY(megatron_qkv(g, i, T, t, "weight", h));
		if (m->qkv_bias)
			TRY(megatron_qkv(g, i, T, t, "bias", 1));
		if (m->qk_norm) {
			NAME("decoder.layers.%" PRIu64 ".self_attention.q_layernorm.weight", i);
			TRY(full(g, CN("model.layers.%" PRIu64 ".self_attn.q_norm.weight", i), 1, m->d, 0, 1));
			NAME("decoder.layers.%" PRIu64 ".self_attention.k_layernorm.weight", i);
			TRY(full(g, CN("model.layers.%" PRIu64 ".self_attn.k_norm.weight", i), 1, m->d, 0, 1));
		}
		NAME("decoder.layers.%" PRIu64 ".self_attention.linear_proj.weight", i);
		TRY(begin(g, 2, h, qd / T, 0));
		TRY(cols(g, CN("model.layers.%" PRIu64 ".self_attn.o_proj.weight", i), h, t * (qd / T), qd / T, qd));
		TRY(end(g));
		if (!layer_is_moe(m, i)) {
			snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".mlp", i);
			NAME("decoder.layers.%" PRIu64 ".mlp.linear_fc1.layer_norm_weight", i);
			TRY(full(g, CN("model.layers.%" PRIu64 ".post_attention_layernorm.weight", i), 1, h, 0, 1));
			TRY(mlp_pair(g, pre, m->I, T, t, CN("decoder.layers.%" PRIu64 ".mlp", i),
				     "linear_fc1.weight", "linear_fc2.weight"));
			continue;
		}
		NAME("decoder.layers.%" PRIu64 ".pre_mlp_layernorm.weight", i);
		TRY(full(g, CN("model.layers.%" PRIu64 ".post_attention_layernorm.weight", i), 1, h, 0, 1));
		NAME("decoder.layers.%" PRIu64 ".mlp.router.weight", i);
		TRY(full(g, CN("model.layers.%" PRIu64 ".mlp.gate.weight", i), 2, m->E, h, 0));
		uint64_t El = m->E / EP;
		for (uint64_t j = 0; j < El; j++) {
			snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".mlp.experts.%" PRIu64,
				 i, ep * El + j);
			TRY(mlp_pair(g, pre, m->Imoe, T, t,
				     CN("decoder.layers.%" PRIu64 ".mlp.experts.local_experts.%" PRIu64, i, j),
				     "linear_fc1.weight", "linear_fc2.weight"));
		}
		if (m->Ish) {
			snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".mlp.shared_expert", i);
			TRY(mlp_pair(g, pre, m->Ish, T, t, CN("decoder.layers.%" PRIu64 ".mlp.shared_experts", i),
				     "linear_fc1.weight", "linear_fc2.weight"));
			NAME("decoder.layers.%" PRIu64 ".mlp.shared_experts.gate_weight", i);
			TRY(full(g, CN("model.layers.%" PRIu64 ".mlp.shared_expert_gate.weight", i), 2, 1, h, 0));
		}
	}
	NAME("decoder.final_layernorm.weight");
	TRY(full(g, "model.norm.weight", 1, h, 0, 1));
	if (!m->tie) {
		NAME("output_layer.weight");
		TRY(vocab(g, "lm_head.weight", g->P, t));
	}
	return 0;
}

/* vLLM QKVParallelLinear rows (or bias elements when h == 1) of rank t:
 * [q heads t*H/T.. (H/T)*d | k of kv shard | v of kv shard], where with
 * T > K each KV head is replicated on T/K consecutive ranks. */
static int vllm_qkv(struct gb *g, uint64_t i, uint32_t T, uint32_t t,
		    const char *what, uint64_t h)
{
	const struct model *m = g->m;
	uint64_t d = m->d, Hl = m->H / T, Kl = m->K >= T ? m->K / T : 1;
	uint64_t ks = m->K >= T ? t : t / (T / m->K);
	NAME("model.layers.%" PRIu64 ".self_attn.qkv_proj.%s", i, what);
	TRY(begin(g, h == 1 ? 1 : 2, (Hl + 2 * Kl) * d, h, 0));
	TRY(block(g, CN("model.layers.%" PRIu64 ".self_attn.q_proj.%s", i, what), t * Hl * d * h, Hl * d * h, 0));
	TRY(block(g, CN("model.layers.%" PRIu64 ".self_attn.k_proj.%s", i, what), ks * Kl * d * h, Kl * d * h, 0));
	TRY(block(g, CN("model.layers.%" PRIu64 ".self_attn.v_proj.%s", i, what), ks * Kl * d * h, Kl * d * h, 0));
	return end(g);
}

static int vllm_rank(struct gb *g, uint32_t T, uint32_t EP, uint32_t t)
{
	const struct model *m = g->m;
	uint64_t h = m->h, qd = m->H * m->d;
	char pre[256];
	g->rank = t;
	NAME("model.embed_tokens.weight");
	TRY(vocab(g, "model.embed_tokens.weight", g->P, t));
	for (uint64_t i = 0; i < m->L; i++) {
		NAME("model.layers.%" PRIu64 ".input_layernorm.weight", i);
		TRY(full(g, g->name, 1, h, 0, 1));
		TRY(vllm_qkv(g, i, T, t, "weight", h));
		if (m->qkv_bias)
			TRY(vllm_qkv(g, i, T, t, "bias", 1));
		if (m->qk_norm) {
			NAME("model.layers.%" PRIu64 ".self_attn.q_norm.weight", i);
			TRY(full(g, g->name, 1, m->d, 0, 1));
			NAME("model.layers.%" PRIu64 ".self_attn.k_norm.weight", i);
			TRY(full(g, g->name, 1, m->d, 0, 1));
		}
		NAME("model.layers.%" PRIu64 ".self_attn.o_proj.weight", i);
		TRY(begin(g, 2, h, qd / T, 0));
		TRY(cols(g, g->name, h, t * (qd / T), qd / T, qd));
		TRY(end(g));
		NAME("model.layers.%" PRIu64 ".post_attention_layernorm.weight", i);
		TRY(full(g, g->name, 1, h, 0, 1));
		if (!layer_is_moe(m, i)) {
			snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".mlp", i);
			TRY(mlp_pair(g, pre, m->I, T, t, pre, "gate_up_proj.weight", "down_proj.weight"));
			continue;
		}
		NAME("model.layers.%" PRIu64 ".mlp.gate.weight", i);
		TRY(full(g, g->name, 2, m->E, h, 0));
		/* FusedMoE: with expert parallelism (EP == T) each rank holds
		 * E/T whole experts; without, all experts split T ways. */
		uint64_t El = EP > 1 ? m->E / EP : m->E, e0 = EP > 1 ? t * El : 0;
		uint32_t n = EP > 1 ? 1 : T, st = EP > 1 ? 0 : t;
		uint64_t It = m->Imoe / n;
		NAME("model.layers.%" PRIu64 ".mlp.experts.w13_weight", i);
		TRY(begin(g, 3, El, 2 * It, h));
		for (uint64_t j = 0; j < El; j++) {
			snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".mlp.experts.%" PRIu64, i, e0 + j);
			TRY(gate_up(g, pre, m->Imoe, n, st));
		}
		TRY(end(g));
		NAME("model.layers.%" PRIu64 ".mlp.experts.w2_weight", i);
		TRY(begin(g, 3, El, h, It));
		for (uint64_t j = 0; j < El; j++) {
			snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".mlp.experts.%" PRIu64, i, e0 + j);
			TRY(down(g, pre, m->Imoe, n, st));
		}
		TRY(end(g));
		if (m->Ish) {
			snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".mlp.shared_expert", i);
			TRY(mlp_pair(g, pre, m->Ish, T, t, pre, "gate_up_proj.weight", "down_proj.weight"));
			NAME("model.layers.%" PRIu64 ".mlp.shared_expert_gate.weight", i);
			TRY(full(g, g->name, 2, 1, h, 0));
		}
	}
	NAME("model.norm.weight");
	TRY(full(g, g->name, 1, h, 0, 1));
	if (!m->tie) {
		NAME("lm_head.weight");
		TRY(vocab(g, g->name, g->P, t));
	}
	return 0;
}

static int divides(uint64_t a, uint64_t b, const char *what, struct dcr_err *e)
{
	if (a && b % a == 0)
		return 0;
	return dcr_err_set(e, -EINVAL, "%s (%" PRIu64 ") is not divisible by %" PRIu64,
			   what, b, a);
}

static int gen(const struct model *m, const struct dcr_layout_gen *o,
	       struct dcr_layout *L, struct dcr_err *e)
{
	int megatron = o->framework && !strcmp(o->framework, "megatron");
	if (!o->framework || (!megatron && strcmp(o->framework, "vllm")))
		return dcr_err_set(e, -EINVAL, "unknown framework '%s' (megatron or vllm)",
				   o->framework ? o->framework : "");
	uint32_t T = o->tp, EP = o->ep ? o->ep : 1;
	if (T < 1 || T > 4096 || EP > 4096)
		return dcr_err_set(e, -EINVAL, "tensor parallel size must be 1..4096 and expert parallel size at most 4096");
	if (EP > 1 && !m->E)
		return dcr_err_set(e, -EINVAL, "expert parallelism needs a MoE model (config has no num_experts)");
	TRY(divides(m->K, m->H, "num_attention_heads", e));
	TRY(divides(T, m->H, "num_attention_heads", e));
	if (megatron) {
		if (m->K % T)
			return dcr_err_set(e, -EINVAL,
					   "megatron needs num_key_value_heads (%" PRIu64 ") divisible by the tensor parallel size %u: query groups are not split or replicated across ranks",
					   m->K, T);
	} else if (m->K % T && T % m->K) {
		return dcr_err_set(e, -EINVAL,
				   "vllm needs num_key_value_heads (%" PRIu64 ") and the tensor parallel size %u to divide one another",
				   m->K, T);
	}
	TRY(divides(T, m->I, "intermediate_size", e));
	if (m->E) {
		TRY(divides(EP, m->E, "num_experts", e));
		if (megatron || EP == 1)
			TRY(divides(T, m->Imoe, "moe_intermediate_size", e));
		if (!megatron && EP > 1 && EP != T)
			return dcr_err_set(e, -EINVAL, "vllm expert parallelism spans the tensor parallel ranks: --ep must be 1 or equal --tp");
		if (m->Ish)
			TRY(divides(T, m->Ish, "shared_expert_intermediate_size", e));
	}
	uint64_t mult = o->vocab_multiple ? o->vocab_multiple : megatron ? 128 : 64;
	if (megatron)
		mult *= T; /* make-vocab-size-divisible-by times tensor parallel size */
	if (mult > (1ULL << 32))
		return dcr_err_set(e, -EINVAL, "vocabulary multiple too large");
	uint64_t Vp = (m->V + mult - 1) / mult * mult;
	TRY(divides(T, Vp, "padded vocabulary size", e));
	uint32_t world = megatron ? T * EP : T;
	if (o->rank >= (int64_t)world)
		return dcr_err_set(e, -EINVAL, "rank %" PRId64 " is outside the %u ranks", o->rank, world);
	int sdt = o->stored_dtype >= 0 ? o->stored_dtype : m->dtype;
	if (sdt != m->dtype && !dcr_xform_supported(DCR_XF_CAST, sdt, m->dtype))
		return dcr_err_set(e, -EINVAL, "stored dtype %s cannot be converted to %s",
				   dcr_dtype_name(sdt), dcr_dtype_name(m->dtype));
	if (o->zero_centered_gamma && !megatron)
		return dcr_err_set(e, -EINVAL, "zero-centered gamma is a megatron training layout option");
	if (o->zero_centered_gamma && !dcr_xform_supported(DCR_XF_ADD1, sdt, m->dtype))
		return dcr_err_set(e, -EINVAL, "zero-centered gamma needs float dtypes");
	TRY(dcr_layout_set_info(L, o->framework, m->model_type, T, EP, world,
				o->rank < 0, e));
	struct gb g = {.L = L, .e = e, .m = m, .sdt = sdt,
		       .zcg = o->zero_centered_gamma, .P = Vp / T};
	TRY(add_canonical(&g));
	for (uint32_t r = 0; r < world; r++) {
		if (o->rank >= 0 && r != (uint64_t)o->rank)
			continue;
		TRY(megatron ? megatron_rank(&g, T, EP, r) : vllm_rank(&g, T, EP, r));
	}
	return dcr_layout_finish(L, e);
}

int dcr_layout_generate(const char *config_json, size_t len,
			const struct dcr_layout_gen *o, struct dcr_layout **out,
			struct dcr_err *e)
{
	struct model m;
	*out = NULL;
	int rc = parse_config(config_json, len, &m, e);
	if (rc < 0)
		return rc;
	struct dcr_layout *L = dcr_layout_new();
	if (!L) {
		free(m.mlp_only);
		return dcr_err_sys(e, ENOMEM, "layout map");
	}
	rc = gen(&m, o, L, e);
	free(m.mlp_only);
	if (rc < 0) {
		dcr_layout_free(L);
		return rc;
	}
	*out = L;
	return 0;
}

/* ---- materialization ------------------------------------------------------ */

struct fill {
	uint8_t *buf;
	const uint8_t *src;
	unsigned su, cu;
	int xf, sdt, cdt;
};

static int fill_run(void *arg, uint64_t s, uint64_t c, uint64_t len)
{
	struct fill *f = arg;
	if (f->xf == DCR_XF_NONE) {
		memcpy(f->buf + s * f->su, f->src + c * f->cu, len * f->su);
		return 0;
	}
	for (uint64_t k = 0; k < len; k++) {
		uint64_t v = load_unit(f->src + (c + k) * f->cu, f->cu);
		store_unit(f->buf + (s + k) * f->su, f->su,
			   dcr_xform_inverse(f->xf, f->sdt, f->cdt, v));
	}
	return 0;
}

static int rank_cmp(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b; /* (rank, index) pairs */
	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int write_rank(const struct dcr_layout *L, const struct dcr_ckpt *c,
		      const char *dir, const uint32_t *ord, size_t n,
		      struct dcr_err *e)
{
	uint32_t rank = L->tensors[ord[0]].rank;
	char *rdir = dcr_asprintf("%s/rank-%u", dir, rank);
	char *path = rdir ? dcr_asprintf("%s/model.safetensors", rdir) : NULL;
	struct dcr_tensor_info *ti = calloc(n ? n : 1, sizeof(*ti));
	struct dcr_st_writer *w = NULL;
	uint8_t *buf = NULL;
	int rc = 0;
	if (!rdir || !path || !ti) {
		rc = dcr_err_sys(e, ENOMEM, "materialize");
		goto out;
	}
	/* Check the canonical checkpoint against the map first. */
	for (size_t k = 0; k < n; k++) {
		const struct dcr_layout_tensor *t = &L->tensors[ord[k]];
		for (size_t q = 0; q < t->npieces; q++) {
			const struct dcr_layout_piece *p = &L->pieces[t->first_piece + q];
			if (p->canon == DCR_LAYOUT_NONE)
				continue;
			const struct dcr_layout_canon *cn = &L->canon[p->canon];
			const struct dcr_ckpt_tensor *ct = dcr_ckpt_find(c, cn->name);
			if (!ct) {
				rc = dcr_err_set(e, DCR_ENOTFOUND, "canonical checkpoint has no tensor '%s'", cn->name);
				goto out;
			}
			if (!dcr_ckpt_tensor_is(ct, cn->dtype, cn->ndim, cn->shape)) {
				rc = dcr_err_set(e, DCR_EFORMAT,
						 "canonical tensor '%s' does not match the map's dtype and shape",
						 cn->name);
				goto out;
			}
		}
		ti[k].name = t->name;
		ti[k].dtype = t->dtype;
		ti[k].ndim = t->ndim;
		memcpy(ti[k].shape, t->shape, sizeof(t->shape));
		ti[k].nelem = t->nelem;
	}
	if ((rc = dcr_mkdir_p(rdir, e)) < 0 || (rc = dcr_st_layout(ti, n, e)) < 0 ||
	    (rc = dcr_st_writer_new(path, ti, n, NULL, 0, &w, e)) < 0)
		goto out;
	for (size_t k = 0; k < n; k++) {
		const struct dcr_layout_tensor *t = &L->tensors[ord[k]];
		unsigned su = dcr_dtype_unit(t->dtype);
		size_t bytes = (size_t)(t->nelem * su);
		free(buf);
		if (!(buf = calloc(bytes ? bytes : 1, 1))) {
			rc = dcr_err_sys(e, ENOMEM, "materialize '%s'", t->name);
			goto out;
		}
		for (size_t q = 0; q < t->npieces; q++) {
			const struct dcr_layout_piece *p = &L->pieces[t->first_piece + q];
			if (p->kind == DCR_PIECE_PADDING)
				continue;
			const struct dcr_layout_canon *cn = &L->canon[p->canon];
			const struct dcr_ckpt_tensor *ct = dcr_ckpt_find(c, cn->name);
			struct fill f = {buf, ct->data, su, dcr_dtype_unit(cn->dtype),
					 p->xform, t->dtype, cn->dtype};
			dcr_layout_piece_runs(p, fill_run, &f);
		}
		if ((rc = dcr_st_writer_write(w, buf, bytes, e)) < 0)
			goto out;
	}
	rc = dcr_st_writer_commit(w, e);
out:
	dcr_st_writer_free(w);
	free(buf);
	free(ti);
	free(path);
	free(rdir);
	return rc;
}

int dcr_layout_materialize(const struct dcr_layout *L, const struct dcr_ckpt *c,
			   const char *dir, struct dcr_err *e)
{
	if (!L->finished)
		return dcr_err_set(e, -EINVAL, "layout map not finished");
	uint32_t *pairs = malloc((L->ntensors ? L->ntensors : 1) * 2 * sizeof(uint32_t));
	uint32_t *ord = malloc((L->ntensors ? L->ntensors : 1) * sizeof(uint32_t));
	int rc = 0;
	if (!pairs || !ord) {
		rc = dcr_err_sys(e, ENOMEM, "materialize");
		goto out;
	}
	for (size_t i = 0; i < L->ntensors; i++) {
		pairs[2 * i] = L->tensors[i].rank;
		pairs[2 * i + 1] = (uint32_t)i;
	}
	qsort(pairs, L->ntensors, 2 * sizeof(uint32_t), rank_cmp);
	if ((rc = dcr_mkdir_p(dir, e)) < 0)
		goto out;
	for (size_t i = 0; i < L->ntensors;) {
		size_t j = i, n = 0;
		while (j < L->ntensors && pairs[2 * j] == pairs[2 * i])
			ord[n++] = pairs[2 * j++ + 1];
		if ((rc = write_rank(L, c, dir, ord, n, e)) < 0)
			goto out;
		i = j;
	}
out:
	free(pairs);
	free(ord);
	return rc;
}
