// llama2.c checkpoints (Karpathy's llama2.c "version 0" format, as stories260K.bin).
//
// Header: 7 little-endian int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size
// (negative: the classifier is not shared and follows at the end), seq_len. Then f32 arrays,
// row-major: token_embedding [vocab, dim]; rms_att [layers, dim]; wq [layers, dim, dim];
// wk, wv [layers, kv_dim, dim]; wo [layers, dim, dim]; rms_ffn [layers, dim];
// w1 [layers, hidden, dim]; w2 [layers, dim, hidden]; w3 [layers, hidden, dim]; rms_final [dim];
// legacy freq_cis real and imaginary parts (seq_len * head_dim / 2 floats each, ignored);
// wcls [vocab, dim] only when not shared. kv_dim = dim * n_kv_heads / n_heads.
// RoPE interleaved, theta 10000, RMSNorm eps 1e-5, bos 1, eos 2. w1 is the gate, w3 the up
// projection, w2 the down projection: FFN = w2(silu(w1 x) * (w3 x)).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/loader.h"
#include "model/weights.h"

namespace loom {

inline constexpr int64_t kLlama2cHeaderBytes = 28;

// Config from the header; throws loom::Error on an inconsistent header. *shared_classifier is
// set from the sign of vocab_size.
ModelConfig llama2c_config(const int32_t header[7], bool* shared_classifier);
// Bytes a checkpoint with this header must have.
int64_t llama2c_file_bytes(const ModelConfig& c, bool shared_classifier);

// Loads and validates a checkpoint; the file size must equal the size the header implies.
std::shared_ptr<Model> load_llama2c_model(const std::string& path);
// The arrays of the file in order (for `loom info`), after validating it.
ModelFileInfo inspect_llama2c(const std::string& path);

}  // namespace loom
