#include "sim/model_catalog.h"

#include "model/hf_config.h"
#include "model/loader.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace loom::sim {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Shapes copied from each model's published config.json (hidden_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size,
// max_position_embeddings, rope_theta).
ModelConfig shape(const char* arch, int d, int layers, int heads, int kv, int head_dim, int ffn, int vocab,
                  int ctx, float theta, bool qkv_bias = false) {
  ModelConfig c = ModelConfig::from_dims(arch, d, layers, heads, kv, head_dim, ffn, vocab, ctx, theta);
  c.qkv_bias = qkv_bias;
  c.bos_id = 1;
  c.eos_id = 2;
  return c;
}

std::vector<CatalogModel> make_catalog() {
  std::vector<CatalogModel> m;
  m.push_back({"llama-2-7b", "meta-llama/Llama-2-7b-hf",
               shape("llama", 4096, 32, 32, 32, 128, 11008, 32000, 4096, 10000)});
  m.push_back({"llama-2-13b", "meta-llama/Llama-2-13b-hf",
               shape("llama", 5120, 40, 40, 40, 128, 13824, 32000, 4096, 10000)});
  m.push_back({"llama-2-70b", "meta-llama/Llama-2-70b-hf",
               shape("llama", 8192, 80, 64, 8, 128, 28672, 32000, 4096, 10000)});
  m.push_back({"llama-3-8b", "meta-llama/Llama-3.1-8B",
               shape("llama", 4096, 32, 32, 8, 128, 14336, 128256, 131072, 500000)});
  m.push_back({"llama-3-70b", "meta-llama/Llama-3.3-70B-Instruct",
               shape("llama", 8192, 80, 64, 8, 128, 28672, 128256, 131072, 500000)});
  m.push_back({"llama-3-405b", "meta-llama/Llama-3.1-405B",
               shape("llama", 16384, 126, 128, 8, 128, 53248, 128256, 131072, 500000)});
  // elinas/Llama-3-15B-Instruct-zeroed (Seesaw's "15B"): a passthrough self-merge of
  // Llama-3-8B-Instruct; 64 layers of the 8B shape give its 15.0B parameters.
  m.push_back({"llama-3-15b", "elinas/Llama-3-15B-Instruct-zeroed",
               shape("llama", 4096, 64, 32, 8, 128, 14336, 128256, 8192, 500000)});
  m.push_back({"codellama-34b", "codellama/CodeLlama-34b-Instruct-hf",
               shape("llama", 8192, 48, 64, 8, 128, 22016, 32000, 16384, 1000000)});
  m.push_back({"qwen2.5-32b", "Qwen/Qwen2.5-32B-Instruct",
               shape("qwen2", 5120, 64, 40, 8, 128, 27648, 152064, 32768, 1000000, true)});
  m.push_back({"qwen2.5-72b", "Qwen/Qwen2.5-72B-Instruct",
               shape("qwen2", 8192, 80, 64, 8, 128, 29568, 152064, 32768, 1000000, true)});
  // Qwen3-32B: 64 query heads of 128 (q_dim 8192 > hidden 5120).
  m.push_back({"qwen3-32b", "Qwen/Qwen3-32B", shape("qwen2", 5120, 64, 64, 8, 128, 25600, 151936, 40960, 1000000)});
  // DeepSeek-R1 (deepseek-ai/DeepSeek-R1 config.json: hidden_size 7168, num_hidden_layers 61,
  // num_attention_heads 128, q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128,
  // qk_rope_head_dim 64, v_head_dim 128, intermediate_size 18432, moe_intermediate_size 2048,
  // n_routed_experts 256, n_shared_experts 1, num_experts_per_tok 8, first_k_dense_replace 3,
  // vocab_size 129280, max_position_embeddings 163840; the multi-token-prediction layer is not
  // counted). As a ModelConfig: 128 query heads of v_head_dim 128 (W_O is [128*128, 7168]), one
  // KV head (the shared latent) and the dense FFN width; the rest is in `arch`.
  {
    CatalogModel r{"deepseek-r1", "deepseek-ai/DeepSeek-R1",
                   shape("deepseek", 7168, 61, 128, 1, 128, 18432, 129280, 163840, 10000)};
    r.arch.mla = MlaShape{1536, 512, 128, 64, 128};
    r.arch.moe = MoeShape{256, 1, 8, 2048, 3};
    m.push_back(r);
  }
  for (auto& e : m) e.config.validate();
  return m;
}

}  // namespace

const std::vector<CatalogModel>& model_catalog() {
  static const std::vector<CatalogModel> c = make_catalog();
  return c;
}

ModelConfig model_config_from_hf_json(const std::string& path) {
  // The model layer's parser: one reading of config.json for the engine and the simulator.
  return load_hf_config(path).config;
}

ModelConfig find_model(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(name_or_path, ec)) {
    fs::path p(name_or_path);
    if (fs::is_directory(p, ec)) p /= "config.json";
    if (p.filename() == "config.json" || p.extension() == ".json") {
      // A checkpoint folder: its config.json alone (the weights need not be there).
      return model_config_from_hf_json(p.string());
    }
    // Any model file loom can load (GGUF, llama2.c, a .safetensors beside its config.json): the
    // loader maps it and validates it; only the config is used, no weight byte is read.
    return load_model(name_or_path)->config;
  }
  std::string n = lower(name_or_path);
  static const std::pair<const char*, const char*> kAliases[] = {
      {"llama-70b", "llama-3-70b"},         {"llama-3.1-70b", "llama-3-70b"}, {"llama-3.3-70b", "llama-3-70b"},
      {"llama-3.1-8b", "llama-3-8b"},       {"llama-8b", "llama-3-8b"},       {"llama-3.1-405b", "llama-3-405b"},
      {"llama-405b", "llama-3-405b"},       {"llama2-70b", "llama-2-70b"},    {"llama2-7b", "llama-2-7b"},
      {"llama2-13b", "llama-2-13b"},        {"codellama-34b-instruct", "codellama-34b"},
      {"qwen-32b", "qwen3-32b"},            {"qwen2.5-72b-instruct", "qwen2.5-72b"},
      {"deepseek-v3", "deepseek-r1"},       {"deepseek-ai/deepseek-r1", "deepseek-r1"}};
  for (const auto& [alias, key] : kAliases)
    if (n == alias) n = key;
  for (const auto& m : model_catalog())
    if (m.name == n) return m.config;
  std::string known;
  for (const auto& m : model_catalog()) known += (known.empty() ? "" : ", ") + m.name;
  fail("unknown model '", name_or_path, "' (known: ", known, "; or a path to an HF config.json, a checkpoint folder or a GGUF / llama2.c file)");
}

double model_weight_bytes(const ModelConfig& c, double bytes_per_param) {
  return double(c.param_count()) * bytes_per_param;
}

ModelArch find_model_arch(const std::string& name_or_path) {
  std::error_code ec;
  if (std::filesystem::exists(name_or_path, ec)) return {};
  const std::string n = lower(name_or_path);
  if (n == "deepseek-r1" || n == "deepseek-v3" || n == "deepseek-ai/deepseek-r1")
    for (const auto& m : model_catalog())
      if (m.name == "deepseek-r1") return m.arch;
  return {};
}

std::string ModelArch::summary() const {
  std::string s;
  if (mla) s += cat("MLA ", mla->kv_lora_rank, "+", mla->qk_rope_dim, " cached per token and layer");
  if (moe)
    s += cat(s.empty() ? "" : ", ", "MoE ", moe->n_routed, " routed + ", moe->n_shared, " shared experts (",
             moe->n_active, " active, width ", moe->expert_ffn, ") after ", moe->first_dense, " dense layers");
  return s;
}

int64_t arch_param_count(const ModelConfig& c, const ModelArch& a) {
  if (a.plain()) return c.param_count();
  const int64_t d = c.d_model, H = c.n_heads, v = c.vocab_size;
  int64_t attn = 0;
  if (a.mla) {
    const MlaShape& m = *a.mla;
    // W_DQ, W_UQ (nope + rope per head), W_DKV (latent + rope), W_UK and W_UV, W_O, and the two
    // latent norms.
    attn = d * m.q_lora_rank + int64_t(m.q_lora_rank) * H * (m.qk_nope_dim + m.qk_rope_dim) +
           d * (m.kv_lora_rank + m.qk_rope_dim) + int64_t(m.kv_lora_rank) * H * (m.qk_nope_dim + m.v_head_dim) +
           H * m.v_head_dim * d + m.q_lora_rank + m.kv_lora_rank;
  } else {
    attn = d * c.q_dim() + 2 * d * c.kv_dim() + int64_t(c.q_dim()) * d;
  }
  const int64_t dense_ffn = 3 * d * int64_t(c.ffn_dim);
  int64_t ffn_total = int64_t(c.n_layers) * dense_ffn;
  if (a.moe) {
    const MoeShape& e = *a.moe;
    const int64_t moe_layer = int64_t(e.n_routed + e.n_shared) * 3 * d * e.expert_ffn + d * e.n_routed;
    ffn_total = int64_t(e.first_dense) * dense_ffn + int64_t(c.n_layers - e.first_dense) * moe_layer;
  }
  return v * d * (c.tied_embeddings ? 1 : 2) + int64_t(c.n_layers) * (attn + 2 * d) + ffn_total + d;
}

}  // namespace loom::sim
