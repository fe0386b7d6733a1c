// `loom quantize` and `loom synth --dtype`: GGUF files in the type mixes llama.cpp's llama-quantize
// writes.
//
// A scheme names the file type a llama.cpp user asks for (llama-quantize's names, lower case):
//   q4_k_m, q5_k_m  Q4_K / Q5_K matrices, with Q6_K for the classifier and for attn_v and ffn_down in
//                   the layers where llama-quantize spends more bits: i < n/8, i >= 7n/8, or
//                   (i - n/8) % 3 == 2 (its use_more_bits);
//   q6_k, q4_0, q4_1, q5_0, q8_0
//                   every matrix of the type, the classifier (output.weight, or token_embd when the
//                   embedding is tied) Q6_K (q8_0: Q8_0);
//   f32, f16, bf16  every matrix of the type (what converters write).
// A matrix whose rows a type cannot hold whole falls back as llama-quantize does: Q4_K -> Q5_0,
// Q6_K -> Q8_0 (rows not a multiple of 256), then F16 (rows not a multiple of 32); Q5_K would fall
// back to Q5_1, which loom does not read: refused, naming the tensor. Vectors (norms, biases,
// rope_freqs) stay F32. general.file_type is llama.cpp's llama_ftype of the scheme.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace loom {

struct QuantScheme {
  std::string name;        // as above
  DType base = DType::F16; // the type of most matrices
  uint32_t file_type = 1;  // llama_ftype
  bool k_mix = false;      // q4_k_m, q5_k_m
};

std::vector<std::string> quant_scheme_names();
bool is_quant_scheme(std::string_view name);
// Throws loom::Error naming the value and listing the schemes.
QuantScheme parse_quant_scheme(std::string_view name);

// The type of 2-D tensor `gguf_name` (e.g. "blk.3.ffn_down.weight") with rows of `cols` values
// under scheme s, in a model of n_layers layers; tied: the model has no output.weight (token_embd
// is the classifier). Throws loom::Error for the Q5_1 fallback.
DType quant_scheme_tensor_type(const QuantScheme& s, const std::string& gguf_name, int64_t cols, int n_layers,
                               bool tied);

struct QuantizeResult {
  int64_t bytes_in = 0, bytes_out = 0;  // weight bytes
  std::map<DType, int> tensors;         // tensors written per type
  double seconds = 0;
};

// Reads `in` (a GGUF file, or an HF safetensors model: directory or .safetensors beside its
// config.json; matrices f32, f16 or bf16) and writes `out` as GGUF in scheme s. A GGUF input keeps
// its metadata and tensor order (general.file_type and general.quantization_version set); a
// safetensors input gets the metadata and tensors `loom synth` writes (llama Q/K rows in GGUF's
// interleaved-RoPE order, its vocabulary embedded). threads: 0 = all cores.
QuantizeResult quantize_model(const std::string& in, const std::string& out, const QuantScheme& s, int threads = 0);

}  // namespace loom
