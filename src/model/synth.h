// Synthetic models for `loom synth`: deterministic random weights of a named or given shape,
// written as GGUF or as an HF safetensors directory that other tools can open.
//
// Weights are generated per row from (seed, tensor name, row), so any row can be regenerated
// (tests compare loaded weights with synth_row) and rows are produced in parallel with the same
// bytes on every run and thread count. Values (f32, before conversion to the file's dtype):
//  - matrices W[rows][cols]: uniform in [-a, a] with a = sqrt(3 / cols) (std 1/sqrt(fan_in),
//    so activations keep their scale through every layer);
//  - norm weights: uniform in [0.9, 1.1]; Q/K/V biases: uniform in [-0.05, 0.05].
// The values are the HF layout (half-split RoPE). The GGUF writer stores what llama.cpp's
// converter would from that HF checkpoint: llama Q/K rows permuted to interleaved RoPE order
// (gguf_llama_qk_source_row), norms and biases f32, Llama-3 scaling as rope_freqs.weight. So the
// GGUF and safetensors files of one seed are the same model up to the dtype rounding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"
#include "model/vocab.h"

namespace loom {

struct SynthShape {
  std::string name;  // "tiny", ... or "custom"
  ModelConfig config;
  VocabKind vocab_kind = VocabKind::Spm;
  std::string vocab_pre = "llama3";  // Bpe pre-tokenizer: "llama3" | "qwen2" | "gpt2"
};

// tiny, small, gqa-24x6, llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b.
std::vector<std::string> synth_shape_names();
// Throws loom::Error listing the names for an unknown one.
SynthShape synth_shape(const std::string& name);
// "d=64,layers=2,heads=4,kv_heads=2,ffn=192,vocab=512,ctx=256" plus optional head_dim=,
// theta=, eps=, arch=llama|mistral|qwen2 (qwen2 adds QKV biases), tied=0|1 (default 1),
// tok=spm|llama3|qwen2|gpt2 (default spm). kv_heads defaults to heads, head_dim to d/heads,
// ctx to 2048. Throws loom::Error naming the key for unknown keys and bad values.
SynthShape parse_synth_dims(const std::string& spec);

struct SynthOptions {
  SynthShape shape;
  DType dtype = DType::F16;
  // A llama-quantize type mix (model/quantize.h: q4_k_m, q5_k_m, q6_k, q4_0, q4_1, q5_0) instead of
  // one dtype for every matrix; GGUF only. Empty: every matrix `dtype`.
  std::string mix;
  std::string format = "gguf";  // "gguf" | "safetensors"
  uint64_t seed = 0;
  int threads = 0;  // 0: default_thread_count()
};

// Throws loom::Error when the options cannot be written: an invalid config, a block type with a
// matrix row length (d_model, q_dim, ffn_dim) not a multiple of its block, a block type or a mix
// in safetensors, an unknown format.
void check_synth_options(const SynthOptions& o);

struct SynthResult {
  std::string model_path;  // what load_model takes: the .gguf file or the safetensors directory
  int64_t bytes = 0;       // weight file bytes written
  double seconds = 0;
};
// Writes the model. gguf: `out` is the file (vocabulary embedded). safetensors: `out` is a
// directory (created) receiving model.safetensors, config.json, tokenizer.json and
// tokenizer_config.json (an Spm vocabulary in the layout of Llama-2's tokenizer.json).
// Same options -> byte-identical files. Memory: one chunk of rows per thread, not the model.
SynthResult write_synth_model(const SynthOptions& o, const std::string& out);

// ---- regeneration (tests, tools) ----

struct SynthTensor {
  enum Kind { Matrix, Norm, Bias };
  std::string name;  // canonical (loader.h): token_embd, blk.0.attn_q, blk.0.attn_q.bias...
  int64_t rows = 1, cols = 0;  // vectors: rows 1
  Kind kind = Matrix;
};
// Tensors of a model of this config, in the order the writers store them.
std::vector<SynthTensor> synth_tensors(const ModelConfig& c);
// Row `row` of tensor t for `seed`, in the HF layout: out[t.cols].
void synth_row(uint64_t seed, const SynthTensor& t, int64_t row, float* out);
// The vocabulary written with the model (synth_vocab / synth_bpe_vocab of the shape's kind).
Vocab synth_model_vocab(const SynthShape& s, uint64_t seed);
// Llama-3 per-frequency divisors [head_dim/2] implied by c.rope_scaling (as llama.cpp's
// converter computes rope_freqs.weight); empty when c.rope_scaling.llama3 is false.
std::vector<float> llama3_rope_freq_factors(const ModelConfig& c);

}  // namespace loom
