#include "model/config.h"

#include <cmath>
#include <utility>

#include "core/error.h"

namespace loom {

void ModelConfig::validate() const {
  auto positive = [](const char* key, int64_t v) {
    if (v <= 0) fail("model config: ", key, " = ", v, " (must be positive)");
  };
  positive("hidden_size (d_model)", d_model);
  positive("num_hidden_layers", n_layers);
  positive("num_attention_heads", n_heads);
  positive("num_key_value_heads", n_kv_heads);
  positive("head_dim", head_dim);
  positive("intermediate_size", ffn_dim);
  positive("vocab_size", vocab_size);
  positive("max_position_embeddings (context)", max_seq_len);
  // Every product loom forms from these values is bounded here, before any is computed in int:
  // the head products must fit int (they index rows), each weight matrix must hold at most
  // 2^48 elements (as safetensors shapes), and the parameter count at most 2^50 (it is summed
  // in int64).
  constexpr int64_t kMaxMatrix = int64_t(1) << 48;
  const int64_t q = int64_t(n_heads) * head_dim, kv = int64_t(n_kv_heads) * head_dim;
  if (q > INT32_MAX)
    fail("model config: num_attention_heads x head_dim = ", n_heads, " x ", head_dim, " = ", q,
         " exceeds 2^31-1");
  if (kv > INT32_MAX)
    fail("model config: num_key_value_heads x head_dim = ", n_kv_heads, " x ", head_dim, " = ", kv,
         " exceeds 2^31-1");
  const std::pair<const char*, __int128> matrices[] = {{"hidden_size x num_attention_heads x head_dim", __int128(d_model) * q},
                                                       {"hidden_size x intermediate_size", __int128(d_model) * ffn_dim},
                                                       {"hidden_size x vocab_size", __int128(d_model) * vocab_size}};
  for (const auto& [name, elems] : matrices)
    if (elems > kMaxMatrix)
      fail("model config: ", name, " = ", int64_t(elems), " weights in one matrix, more than 2^48");
  const __int128 per_layer = __int128(d_model) * (2 * q + 2 * kv + 3 * __int128(ffn_dim) + 2) + q + 2 * kv;
  const __int128 params = __int128(n_layers) * per_layer + 2 * __int128(vocab_size) * d_model + d_model;
  if (params > (__int128(1) << 50))
    fail("model config: ", n_layers, " layers of d_model ", d_model, ", ffn ", ffn_dim, " and vocab ", vocab_size,
         " imply more than 2^50 parameters");
  if (n_heads % n_kv_heads != 0)
    fail("model config: num_attention_heads = ", n_heads, " is not a multiple of num_key_value_heads = ",
         n_kv_heads);
  if (head_dim % 2 != 0) fail("model config: head_dim = ", head_dim, " must be even for RoPE");
  // Finite too: a double key beyond float's range reads as inf.
  if (!(rms_eps > 0.0f) || !std::isfinite(rms_eps))
    fail("model config: rms_norm_eps = ", rms_eps, " (must be positive and finite)");
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta))
    fail("model config: rope_theta = ", rope_theta, " (must be positive and finite)");
  if (bos_id >= vocab_size || eos_id >= vocab_size)
    fail("model config: bos/eos token id (", bos_id, "/", eos_id, ") outside vocab_size = ", vocab_size);
  if (rope_scaling.llama3 && !(rope_scaling.factor >= 1.0f))
    fail("model config: rope_scaling.factor = ", rope_scaling.factor, " (must be >= 1)");
}

void ModelConfig::dim_overflow(int64_t a, int64_t b, const char* what) {
  fail("model config: ", what, " = ", a, " x ", b, " = ", a * b, " exceeds 2^31-1");
}

int64_t ModelConfig::param_count() const {
  const int64_t d = d_model, q = q_dim(), kv = kv_dim(), f = ffn_dim, v = vocab_size;
  int64_t per_layer = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d;
  if (qkv_bias) per_layer += q + 2 * kv;
  return v * d * (tied_embeddings ? 1 : 2) + int64_t(n_layers) * per_layer + d;
}

ModelConfig ModelConfig::from_dims(const std::string& arch, int d, int layers, int heads, int kv, int head_dim,
                                   int ffn, int vocab, int ctx, float theta) {
  ModelConfig c;
  c.arch = arch;
  c.d_model = d;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv;
  c.head_dim = head_dim;
  c.ffn_dim = ffn;
  c.vocab_size = vocab;
  c.max_seq_len = ctx;
  c.rope_theta = theta;
  c.rope_style = RopeStyle::HalfSplit;
  return c;
}

std::string ModelConfig::summary() const {
  return cat(arch, ": d_model ", d_model, ", layers ", n_layers, ", heads ", n_heads, " (kv ", n_kv_heads,
             ", head_dim ", head_dim, "), ffn ", ffn_dim, ", vocab ", vocab_size, ", context ", max_seq_len,
             ", rope ", rope_style == RopeStyle::Interleaved ? "interleaved" : "half-split", " theta ",
             rope_theta, rope_scaling.llama3 ? " (llama3 scaling)" : "", tied_embeddings ? ", tied embeddings" : "",
             qkv_bias ? ", qkv bias" : "");
}

}  // namespace loom
