// A loaded model: config plus views of every weight, wherever the bytes live (a memory-mapped
// file, or a buffer the loader converted into). Views never own; `storage` keeps the owners
// alive for as long as the Model lives.
//
// Matrices are W[rows = out][cols = in], row-major, rows `row_stride` bytes apart (a column block
// of a row-major matrix, as TP shards of Wo and W_down use, is a view with a smaller `cols` and
// the original stride). Norm weights and biases are always f32 (loaders convert them).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "core/weight_view.h"

namespace loom {

struct LayerWeights {
  WeightView attn_norm;           // [d_model] f32
  WeightView wq, wk, wv, wo;      // [q_dim, d], [kv_dim, d], [kv_dim, d], [d, q_dim]
  WeightView bq, bk, bv;          // Qwen2 biases [q_dim], [kv_dim], [kv_dim] f32, else absent
  WeightView ffn_norm;            // [d_model] f32
  WeightView w_gate, w_up, w_down;  // [ffn, d], [ffn, d], [d, ffn]

  // The seven matrices, in the order above.
  std::array<const WeightView*, 7> matrices() const { return {&wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down}; }
};

struct DecodeWeights;  // weights.cpp
std::shared_ptr<DecodeWeights> make_decode_weights();

struct Model {
  ModelConfig config;
  std::string path;    // what it was loaded from
  std::string format;  // "llama2c", "gguf", "safetensors"
  WeightView tok_embd; // [vocab, d]
  WeightView out_norm; // [d] f32
  WeightView output;   // [vocab, d]; == tok_embd when tied
  std::vector<LayerWeights> layers;
  std::vector<std::shared_ptr<const void>> storage;  // keeps mappings / converted buffers alive

  // The classifier as the engines' decode matmul reads it: a row-tiled copy of `output`
  // (core/weight_tiles.h), made on first call and shared by every engine of this Model (every
  // rank computes logits with the whole classifier); `output` itself when it cannot be tiled,
  // weight_tiles_enabled() is off or the copy is not decode_copy_affordable. Thread-safe;
  // `pool` (optional) shares the first call's copying.
  const WeightView& decode_output(ThreadPool* pool = nullptr) const;

  // Copies `n` f32 values into a buffer owned by this model and returns a view of it.
  WeightView own_f32(const float* values, int64_t n);
  // Every distinct weight tensor (name, view), for `loom info` and checks.
  std::vector<std::pair<std::string, WeightView>> tensors() const;

 private:
  // A copy of a Model starts with no decode copies of its own (it may change `output`).
  struct DecodeCache {
    std::shared_ptr<DecodeWeights> p = make_decode_weights();
    DecodeCache() = default;
    DecodeCache(const DecodeCache&) : p(make_decode_weights()) {}
    DecodeCache& operator=(const DecodeCache&) {
      p = make_decode_weights();
      return *this;
    }
  };
  DecodeCache decode_;
};

// The largest split unit of the layer matrices (core/dtype.h dtype_split_elems: 1, or 32 for every
// quantized type): TP splits their columns in whole units (a K-quant column shard may start inside
// a 256-weight super-block, core/weight_view.h col_offset).
int weight_block_elems(const Model& m);

// Makes a view over `bytes` holding a [rows, cols] matrix of `dtype`, checking the size.
// Throws loom::Error naming `name` with the expected and found byte counts.
WeightView make_view(const std::string& name, const void* bytes, int64_t available_bytes, DType dtype,
                     int64_t rows, int64_t cols);

}  // namespace loom
