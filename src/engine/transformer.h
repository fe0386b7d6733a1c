// The Llama-family forward pass on one rank, over one batch of tokens from many sequences
// (mixed prefill chunks and decode tokens), with a paged KV cache.
//
// A rank computes a shard of the model (TP, ../shared/docs/PLANS.md "TP(t) — Megatron"): query
// heads [q_head_begin, +n_q_heads), KV heads [kv_head_begin, +n_kv_heads) (which may be one
// head replicated on several ranks when t > K), FFN columns [ffn_begin, +ffn_len). Wq/Wk/Wv/
// W_gate/W_up are row blocks, Wo/W_down column blocks of the model's matrices (shard_views); the
// default constructor copies them into the decode layout (row tiles, shard_weights.h).
// After Wo and after W_down the partial sums of the shard are combined by `all_reduce`
// (identity on one rank). The single-rank engine is the shard that owns everything.
//
// Per layer (shapes for a step of T tokens, local sizes):
//   xn = rmsnorm(x)                       // [T, d]
//   q = xn Wq^T (+bq), k, v               // [T, hq*dh], [T, hk*dh], [T, hk*dh]
//   rope(q), rope(k) at each token's absolute position
//   K/V cache[block(pos)][head][pos % B] = k, v
//   a = attention(q, cache)               // [T, hq*dh], causal per sequence
//   x += all_reduce(a Wo^T)               // [T, d]
//   x += all_reduce(W_down(silu(xn2 Wg^T) * (xn2 Wu^T)))
// Logits only for the tokens that sample: logits = rmsnorm(x) Wout^T  // [n_sample, vocab]
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "engine/attention_stage.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kv/kv_layout.h"
#include "model/weights.h"

namespace loom {

// Which part of the model this rank computes (everything, on one rank).
struct ShardSpec {
  int q_head_begin = 0, n_q_heads = 0;
  int kv_head_begin = 0, n_kv_heads = 0;
  int64_t ffn_begin = 0, ffn_len = 0;
  static ShardSpec full(const ModelConfig& c) {
    return ShardSpec{0, c.n_heads, 0, c.n_kv_heads, 0, c.ffn_dim};
  }
};

// K and V storage for every layer: KvLayout's [n_layers][num_blocks][n_kv_heads][block][head_dim].
struct KvStorage {
  KvLayout layout;
  AlignedBuffer<float> k, v;
  explicit KvStorage(const KvLayout& l) : layout(l) {
    layout.validate();
    k.resize(size_t(l.floats_per_arena()));
    v.resize(size_t(l.floats_per_arena()));
  }
  int64_t bytes() const { return 2 * layout.floats_per_arena() * int64_t(sizeof(float)); }
};

// One sequence's slice of a step.
struct ForwardSeq {
  int64_t start_pos = 0;          // absolute position of its first token in this step
  int n_tokens = 0;               // tokens of this sequence in the step (consecutive in the batch)
  const int32_t* block_table = nullptr;  // physical KV blocks, logical order; covers start_pos + n_tokens
  int n_blocks = 0;
  bool want_logits = false;       // compute logits for its last token of the step
};

struct ForwardBatch {
  std::vector<int32_t> tokens;    // [T] token ids, sequence after sequence
  std::vector<ForwardSeq> seqs;
};

// One layer's shard weights as a forward pass uses them: Wq/Wk/Wv/W_gate/W_up hold exactly the
// shard's rows (q heads, kv heads, FFN columns of the ShardSpec, in that order), Wo/W_down its
// input columns. Views: they may point into the model's mapping (shard_views) or into owned
// copies (engine/shard_weights.h, Shift 3.3.2).
struct ShardLayerWeights {
  WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
  // The seven matrices, in the order above.
  std::array<const WeightView*, 7> matrices() const { return {&wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down}; }
  const float* bq = nullptr;  // Qwen2 biases of the shard's rows, or null
  const float* bk = nullptr;
  const float* bv = nullptr;
};

// Views of `model`'s weights for `shard`, one entry per layer (no copy).
std::vector<ShardLayerWeights> shard_views(const Model& model, const ShardSpec& shard);

class Transformer {
 public:
  using AllReduce = std::function<void(float* data, int64_t n)>;

  // `model` must outlive the Transformer. `all_reduce` combines partial sums across the TP group
  // (nullptr: single rank). The shard's weights are copied into the decode layout (row tiles;
  // shard_weights.h decode_shard).
  Transformer(std::shared_ptr<const Model> model, ShardSpec shard, ThreadPool* pool,
              AllReduce all_reduce = nullptr);
  // The same shard computed with the given weights (one entry per layer, shaped as
  // ShardLayerWeights says); `keep_alive` owns their bytes when they are not the model's.
  Transformer(std::shared_ptr<const Model> model, ShardSpec shard, ThreadPool* pool, AllReduce all_reduce,
              std::vector<ShardLayerWeights> weights, std::shared_ptr<const void> keep_alive = nullptr);

  const ModelConfig& config() const { return model_->config; }
  const ShardSpec& shard() const { return shard_; }

  // Runs one step. Writes the K/V of every token into `kv`, and for each sequence with
  // want_logits the logits of its last token into `logits` ([n_want, vocab], in sequence order).
  // Returns the number of logit rows written.
  int forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>& logits);

 private:
  using LayerShard = ShardLayerWeights;
  void ensure_scratch(int64_t n_tokens);

  std::vector<HeadRun> head_runs_;

  std::shared_ptr<const Model> model_;
  ShardSpec shard_;
  ThreadPool* pool_;
  AllReduce all_reduce_;
  std::vector<LayerShard> layers_;
  std::shared_ptr<const void> keep_alive_;
  WeightView output_;  // the classifier, as Model::decode_output() gives it
  kernels::RopeParams rope_;
  std::vector<float> inv_freq_;

  // Scratch, grown to the largest step seen: [T, d], [T, q], [T, kv], [T, ffn] ...
  int64_t scratch_tokens_ = 0;
  AlignedBuffer<float> x_, xn_, q_, k_, v_, att_, proj_, gate_, up_;
  std::vector<int32_t> pos_;
};

}  // namespace loom
