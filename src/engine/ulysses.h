// The base config of Shift Parallelism on one rank: Ulysses sequence parallelism combined with
// Megatron TP, SP(s) x TP(t) (Shift 3.2, Algorithm 1; PLANS.md "SP(s) x TP(t) — Ulysses").
//
// Ranks of one replica: r = sp*t + tp. The rank computes with its TP shard (query heads
// [tp*H/t, (tp+1)*H/t), their KV heads, FFN columns of TP shard tp) on a contiguous slice of the
// step's tokens, and runs attention for H/(s*t) query heads over ALL the step's tokens:
//   1. tokens: n padded to n' = ceil(n/s)*s; SP rank sp takes [sp*n'/s, (sp+1)*n'/s), across
//      request boundaries (sp_token_slice). Padded rows are zeros: they write no KV, produce no
//      output and are never counted anywhere (only n reaches the cache, the logits, the metrics).
//   2. per layer: rmsnorm, Q/K/V of the slice with the TP shard, RoPE at each token's position;
//   3. ONE fused all-to-all over the SP group (Algorithm 1 line 4; Shift 3.2.1 "fusing
//      communications"): the chunk for SP peer j is, per token of the slice, the q heads of peer
//      j, then its KV heads' k, then v: [n'/s][(H/P + 2*kv_a) * dh]. When the TP shard holds fewer
//      KV heads than s (GQA, e.g. K=4, s*t=8) the same KV head goes into several peers' chunks:
//      replication inside the send buffer (Shift 3.2.1), never recomputation;
//   4. every rank now holds q, k, v of all n' tokens for its heads tp*H/t + sp*H/P + [0, H/P) and
//      their kv_a KV heads: it writes the K/V of the n real tokens into its paged cache (the same
//      heads TP(P) in the shift order stores on this rank: KvPlacement(base) == KvPlacement(shift),
//      Shift 3.3.1) and attends causally per sequence;
//   5. a second all-to-all returns the attention output to the token split (line 6): [n'/s,
//      H/t*dh] in TP-shard head order; Wo (TP column shard), TP all-reduce (line 8), SwiGLU FFN
//      with the TP shard, TP all-reduce (line 11), on the slice only;
//   6. the final hidden states of the rows that sample are all-gathered over the SP group of
//      tp == 0 (line 13, restricted to those rows), whose rank 0 (replica rank 0) computes the
//      logits: the classifier is not sharded (as in dist_executor.h).
// Every rank of the replica must call forward() with the same batch (SPMD). want_logits in the
// batch marks the sequences that sample, on EVERY rank (it decides what is gathered);
// `logits` is filled only where non-null and only on replica rank 0.
//
// Thread-safety: one rank's thread. The communicators must outlive the object.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "engine/transformer.h"
#include "parallel/plan.h"

namespace loom {

// Everything a base-config rank needs to know about its place in the replica.
struct UlyssesRank {
  int s = 1, t = 1;            // SP and TP degrees
  int sp = 0, tp = 0;          // this rank's coordinates
  ShardSpec proj;              // TP shard: projected q/kv heads, FFN columns (Wo: proj q heads)
  int attn_q_begin = 0, attn_n_q = 0;    // query heads attended after the all-to-all
  int attn_kv_begin = 0, attn_n_kv = 0;  // their KV heads (what the cache stores)
  // For SP peer j: first KV head (model index) of its attention heads; all peers hold attn_n_kv.
  std::vector<int> peer_kv_begin;

  // From a validated sp x tp plan (dp allowed) and a global rank of it.
  static UlyssesRank of(const Plan& plan, const ModelShape& shape, int rank);
};

class UlyssesTransformer {
 public:
  using AllReduce = Transformer::AllReduce;

  // `sp_group`: the ranks with this rank's tp index, ordered by sp (size s). `tp_all_reduce`
  // sums over the TP group (ranks with this rank's sp index; nullptr when t == 1). `weights`: the
  // TP shard's weights as ShardLayerWeights (empty: views of the model for rank.proj);
  // `keep_alive` owns them when they are copies.
  UlyssesTransformer(std::shared_ptr<const Model> model, UlyssesRank rank, ThreadPool* pool, Communicator* sp_group,
                     AllReduce tp_all_reduce, std::vector<ShardLayerWeights> weights = {},
                     std::shared_ptr<const void> keep_alive = nullptr);

  const ModelConfig& config() const { return model_->config; }
  const UlyssesRank& rank() const { return r_; }

  // One step (see the header comment). Returns the logit rows written (0 off replica rank 0).
  int forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>* logits);

 private:
  void ensure_scratch(int64_t slice_tokens);

  std::shared_ptr<const Model> model_;
  UlyssesRank r_;
  ThreadPool* pool_;
  Communicator* sp_;
  AllReduce all_reduce_;
  std::vector<ShardLayerWeights> layers_;
  std::shared_ptr<const void> keep_alive_;
  WeightView output_;  // the classifier, as Model::decode_output() gives it
  std::vector<HeadRun> head_runs_;
  kernels::RopeParams rope_;

  int64_t scratch_ = 0;  // slice tokens the scratch holds
  AlignedBuffer<float> x_, xn_, q_, k_, v_, send_, recv_, qa_, ka_, va_, att_, att_slice_, proj_, gate_, up_;
  std::vector<int32_t> pos_, slice_pos_;
};

}  // namespace loom
