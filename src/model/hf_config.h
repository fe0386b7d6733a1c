// HF transformers config.json <-> ModelConfig, for LlamaForCausalLM, MistralForCausalLM and
// Qwen2ForCausalLM. HF checkpoints use half-split RoPE ("rotate_half"). Keys read:
// architectures, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads (default: heads), head_dim (default: hidden/heads), rms_norm_eps,
// rope_theta, rope_scaling {rope_type|type "llama3", factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings}, max_position_embeddings, vocab_size, tie_word_embeddings
// (default false), bos_token_id, eos_token_id (a number or a list: eos_id is the first, eos_ids
// all), torch_dtype.
#pragma once

#include <string>

#include "core/dtype.h"
#include "model/config.h"

namespace loom {

struct HfConfig {
  ModelConfig config;
  std::string architecture;  // "LlamaForCausalLM"...
  std::string torch_dtype;   // as written ("bfloat16"), may be ""
};

// Parses config.json text; `what` names the file in messages. Throws loom::Error naming the key
// with the expected and found values; validates the config.
HfConfig parse_hf_config(const std::string& json_text, const std::string& what = "config.json");
HfConfig load_hf_config(const std::string& path);

// config.json text for c (architecture from c.arch: llama -> LlamaForCausalLM, mistral ->
// MistralForCausalLM, qwen2 -> Qwen2ForCausalLM) with torch_dtype of `dtype` (f32/f16/bf16).
std::string hf_config_json(const ModelConfig& c, DType dtype);

// Canonical tensor name (loader.h) -> HF name ("blk.0.attn_q" -> "model.layers.0.self_attn.q_proj.weight").
std::string hf_tensor_name(const std::string& canonical);

}  // namespace loom
