// Model catalog of the simulator: the shapes of well-known models (from their published HF
// config.json), or any config.json / GGUF loom can read. Only shapes matter to the simulator;
// no weight is loaded.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/config.h"

namespace loom::sim {

// What a ModelConfig (the engine's dense GQA transformer) does not say about a simulated model.
// Only the simulator prices these; the engine runs neither.
//
// Multi-head latent attention (DeepSeek-V2/V3/R1, "MLA"): queries through a low-rank q_lora_rank
// bottleneck; keys and values are one latent of kv_lora_rank values plus qk_rope_dim RoPE values
// per token and layer, shared by every query head (the Helix paper, 3.1: "effectively resulting in
// a single KV head shared across all 128 query heads"; ModelConfig carries it as n_kv_heads = 1).
// Decode runs the absorbed form (W_UK folded into the query, W_UV applied to the latent output):
// attention over the cached latent, scores over kv_lora_rank + qk_rope_dim values, outputs of
// kv_lora_rank values per head.
struct MlaShape {
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_dim = 0;
  int qk_rope_dim = 0;
  int v_head_dim = 0;
  int cached_per_token() const { return kv_lora_rank + qk_rope_dim; }  // per layer
};
// Mixture of experts (DeepSeek-V3/R1): after the first `first_dense` layers (dense SwiGLU FFN of
// ModelConfig::ffn_dim), every layer's FFN is `n_shared` shared experts plus `n_active` of
// `n_routed` routed experts per token, each a SwiGLU FFN of width expert_ffn, chosen by a
// [d_model, n_routed] router.
struct MoeShape {
  int n_routed = 0;
  int n_shared = 0;
  int n_active = 0;
  int expert_ffn = 0;
  int first_dense = 0;
};
struct ModelArch {
  std::optional<MlaShape> mla;
  std::optional<MoeShape> moe;
  bool plain() const { return !mla && !moe; }
  std::string summary() const;  // "" for a plain model; e.g. "MLA 512+64, MoE 256+1 (8 active) after 3 dense"
};

struct CatalogModel {
  std::string name;  // catalog key, lower case: "llama-3-70b"
  std::string hf_id;  // where the shapes come from
  ModelConfig config;
  ModelArch arch = {};  // MLA / MoE (empty: the dense GQA transformer of `config`)
};

const std::vector<CatalogModel>& model_catalog();

// A model by catalog name (case-insensitive, aliases like "llama-70b", "llama-3.3-70b"), or a
// path: a directory or file named config.json (HF) or a GGUF file. Throws loom::Error listing the
// known names when nothing matches.
ModelConfig find_model(const std::string& name_or_path);

// The MLA / MoE description of a catalog model (by the names find_model accepts); empty for a
// plain model or a path.
ModelArch find_model_arch(const std::string& name_or_path);

// Parameters of `c` with `arch` (ModelConfig::param_count for a plain model): the MLA projections
// instead of Wq/Wk/Wv, the routed and shared experts and routers instead of the dense FFN.
int64_t arch_param_count(const ModelConfig& c, const ModelArch& arch);

// Reads the shape keys of an HF config.json (llama / mistral / qwen2 / qwen3 families).
ModelConfig model_config_from_hf_json(const std::string& path);

// Parameter bytes at `bytes_per_param` for the matrices and 2 bytes for norms (ModelConfig
// counts both as parameters; norms are negligible).
double model_weight_bytes(const ModelConfig& c, double bytes_per_param);

}  // namespace loom::sim
