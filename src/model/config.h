// Model hyper-parameters, whatever file they came from (HF config.json, GGUF metadata,
// llama2.c header). Every loader fills one ModelConfig and calls validate() before any weight
// is touched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

// How RoPE pairs the dimensions of a head:
//  - Interleaved: pairs (x[2i], x[2i+1]), as llama2.c and GGUF llama checkpoints (whose Q/K rows
//    the converters permute);
//  - HalfSplit: pairs (x[i], x[i + head_dim/2]), as HF transformers ("rotate_half") and GGUF
//    qwen2 (NEOX).
enum class RopeStyle { Interleaved, HalfSplit };

// Llama-3 frequency scaling ("rope_type": "llama3" in HF config.json).
struct RopeScaling {
  bool llama3 = false;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
  // Per-frequency divisors as GGUF stores Llama-3 scaling (tensor rope_freqs.weight,
  // [head_dim/2] f32): the angle of pair i is pos * rope_theta^(-2i/head_dim) / freq_factors[i].
  // Empty: none. When set, `llama3` is false (the factors already encode it).
  std::vector<float> freq_factors;
};

struct ModelConfig {
  std::string arch = "llama";  // llama | mistral | qwen2
  int d_model = 0;             // hidden size
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  int head_dim = 0;    // usually d_model / n_heads
  int ffn_dim = 0;     // SwiGLU intermediate size
  int vocab_size = 0;
  int max_seq_len = 0;  // context length
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::Interleaved;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // classifier shares the token embedding
  bool qkv_bias = false;         // Qwen2 has biases on Q, K and V
  int bos_id = 1;
  int eos_id = 2;
  std::vector<int> eos_ids;  // every end-of-sequence id the file lists (HF eos may be a list);
                             // eos_id is the first; may be empty (= {eos_id})

  // Products of values read from files: computed in 64 bits and checked (validate() rejects a
  // config whose products leave int; these throw loom::Error rather than overflow if called
  // on one that was not validated).
  int q_dim() const { return dim_product(n_heads, head_dim, "num_attention_heads x head_dim"); }
  int kv_dim() const { return dim_product(n_kv_heads, head_dim, "num_key_value_heads x head_dim"); }
  int group_size() const { return n_heads / n_kv_heads; }

  // Throws loom::Error naming the first inconsistent key with its value and the expected one.
  void validate() const;
  // Number of parameters implied by the shapes (embedding counted once when tied).
  int64_t param_count() const;
  std::string summary() const;  // one line: arch, dims, heads, layers, vocab, context

  // A config from the dimensions a published config.json gives (HF names: hidden_size,
  // num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
  // vocab_size, max_position_embeddings, rope_theta), with HF's half-split RoPE; the other
  // fields keep their defaults.
  static int dim_product(int a, int b, const char* what) {
    const int64_t p = int64_t(a) * int64_t(b);
    if (p > INT32_MAX || p < INT32_MIN) [[unlikely]]
      dim_overflow(a, b, what);
    return int(p);
  }
  [[noreturn]] static void dim_overflow(int64_t a, int64_t b, const char* what);

  static ModelConfig from_dims(const std::string& arch, int d, int layers, int heads, int kv, int head_dim, int ffn,
                               int vocab, int ctx, float theta);
};

}  // namespace loom
