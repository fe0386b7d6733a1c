// One rank's forward pass on the GPU for a whole model (TP(1)): the layer loop of
// engine/rank_forward.h (embedding, per layer x += attention(rmsnorm(x)), x += ffn(rmsnorm(x)),
// final norm, classifier) over device weights uploaded once and a paged KV cache in device
// memory. It is the single-rank GPU engine the stage engine's GPU stages will be carved from,
// and what bench_gpu times; tests/gpu compares its greedy tokens with the CPU engine's.
//
// Numerics against the CPU engine: f32 weights compute with cuBLAS Sgemm (no TF32) and the
// f32-exact kernels, so only summation orders differ (greedy tokens equal where the top two
// logits are further apart than that); bf16/f16 weights round the activations to the weight
// dtype for the tensor-core GEMM (gpu/cuda/gemm.h) unless `f32_activations` is set.
//
// KV pages: one page holds block_size positions of every layer and KV head of one sequence,
// [n_layers][n_kv_heads][block_size][head_dim] floats of K and the same of V; each sequence has
// one block table (device), so one attention launch per (sequence, layer) covers all heads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/weights.h"
#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/gemm.h"

namespace loom::gpu {

struct DeviceLayer {
  DeviceBuffer attn_norm, ffn_norm, bq, bk, bv;  // f32 vectors (biases empty when absent)
  DeviceWeight wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct DeviceModel {
  ModelConfig config;
  DeviceWeight tok_embd, output;
  DeviceBuffer out_norm;
  std::vector<DeviceLayer> layers;
  std::size_t weight_bytes() const;

  // Every weight of `m` copied to the device once (the engine's layout; q8_0 stays q8_0).
  static DeviceModel upload(const Model& m);
  // A model of `c`'s shape with device-generated weights of dtype dt (f32, f16, bf16): what
  // bench_gpu runs for llama-3.1-8b without a 16 GB file. Norm weights are 1.
  static DeviceModel random(const ModelConfig& c, DType dt, uint64_t seed);
};

// The tokens one sequence adds in a step.
struct DeviceStepSeq {
  int64_t seq = 0;       // caller's id
  int64_t pos0 = 0;      // position of its first new token (= tokens already cached)
  std::vector<int32_t> tokens;
};

class DeviceForward {
 public:
  // max_rows: most tokens of one step; kv_pages: pages in the pool (block_size positions each).
  DeviceForward(const DeviceModel& model, const kernels::RopeParams& rope, int64_t max_rows, int block_size,
                int64_t kv_pages, bool f32_activations = false);

  // Runs one step; returns the greedy next token of every sequence (its last row), and when
  // `logits` is non-null also their logits [seqs.size(), vocab] on the host.
  std::vector<int32_t> step(const std::vector<DeviceStepSeq>& seqs, std::vector<float>* logits = nullptr);
  // Frees a sequence's pages.
  void release(int64_t seq);
  int64_t free_pages() const { return int64_t(free_.size()); }
  cudaStream_t stream() const { return stream_.get(); }
  std::size_t kv_bytes() const { return k_.bytes() + v_.bytes(); }

 private:
  struct SeqState {
    std::vector<int32_t> pages;
    DeviceBuffer table;  // device copy of pages
  };
  void reserve(int64_t seq, int64_t n_positions);

  const DeviceModel& m_;
  kernels::RopeParams rope_;
  int64_t max_rows_;
  int block_;
  int64_t n_pages_;
  GemmPrecision precision_;
  Stream stream_;
  Gemm gemm_;
  DeviceBuffer k_, v_, inv_freq_;
  DeviceBuffer x_, xn_, q_, kk_, vv_, att_, gate_, up_, tok_, pos_, last_, xl_, logits_, next_;
  std::vector<int32_t> free_;
  std::map<int64_t, SeqState> seqs_;
};

}  // namespace loom::gpu
