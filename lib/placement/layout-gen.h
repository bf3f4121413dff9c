/* layout-gen.h - layout maps generated from a Hugging Face config.json
 * (Megatron training ranks, vLLM serving ranks), and rank files
 * materialized from a canonical checkpoint. */
#ifndef DCR_PLACEMENT_LAYOUT_GEN_H
#define DCR_PLACEMENT_LAYOUT_GEN_H

#include "core/checkpoint.h"
#include "placement/layout.h"

struct dcr_layout_gen {
	const char *framework;   /* "megatron" or "vllm" */
	uint32_t tp, ep;         /* ep 0 means 1 */
	int64_t rank;            /* -1: all ranks */
	uint32_t vocab_multiple; /* 0: framework default (megatron 128*tp, vllm 64) */
	int stored_dtype;        /* -1: the config's dtype */
	int zero_centered_gamma; /* megatron: norms stored as gamma - 1 */
};
/* Build a map from a Hugging Face config.json text. */
int dcr_layout_generate(const char *config_json, size_t len,
			const struct dcr_layout_gen *g,
			struct dcr_layout **out, struct dcr_err *e);

/* Write each rank of the map as DIR/rank-R/model.safetensors, tensors in map
 * order, filled from a canonical checkpoint (residual pieces through the
 * inverse transform, padding zero). */
int dcr_layout_materialize(const struct dcr_layout *L, const struct dcr_ckpt *c,
			   const char *dir, struct dcr_err *e);

#endif
