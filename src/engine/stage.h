// Stages: the pieces one rank's forward pass is composed from (ARCHITECTURE.md "executors are
// composed from stages"; llama.cpp's build_attn / build_ffn picked by the input they get, vLLM's
// layer range per pipeline stage). RankForward (rank_forward.h) runs the one layer loop over them:
//
//   x = embed(rows)                 first pipeline stage (else received from the previous stage)
//   for each layer of the stage:
//     x += attention(rmsnorm(x))    an AttentionStage: projections, RoPE, KV store + attention,
//                                   Wo and its reduction
//     x += ffn(rmsnorm(x))          an FfnStage: SwiGLU and its reduction
//   logits(rows that sample)        last pipeline stage (else sent to the next stage)
//
// Attention stages (make_attention_stage, one factory for every plan):
//   HeadParallel  TP (Megatron; PLANS.md "TP(t)"), the shift config of Shift 3.3.1 (TP(P) in
//                 the shift order) and the single rank (TP(1)): the rank projects its query and KV
//                 heads for all its rows, attends, and multiplies by its Wo columns (out_heads);
//                 the partial sums are all-reduced over "ffn-tp".
//   Ulysses       SP x TP (Shift Algorithm 1): the rank projects its token slice with its TP shard,
//                 one fused all-to-all over "sp" trades tokens for heads, attention, a second
//                 all-to-all returns to the token slice, Wo, all-reduce over "ffn-tp".
//   Helix        KVP x TPA (Helix 2.1, stage_helix.cpp): every KVP rank projects all rows for its
//                TPA heads, attends over its round-robin KV blocks (partial output + LSE), one
//                all-to-all over "kvp" per chunk of sequences (HOP-B overlaps it with the next
//                chunk's attention), the exact LSE merge, Wo by out_heads, all-reduce over "ffn-tp".
// FFN stages (make_ffn_stage):
//   TensorParallel  W_gate / W_up row block, W_down column block of the rank's FFN units, partial
//                   sums all-reduced over "ffn-tp" (a group of one on a single rank: local).
//   Owner (SiDP, stage_ffn_owner.h; weights=owner): the FFN of layer l lives only on DP rank
//                   l mod D. WaS (sidp=was): a prefetch thread streams the upcoming non-owned
//                   layers from their owners into cache slots with one-sided gets; compute runs
//                   locally. CaS (sidp=cas): a non-owner ships its rows to the owner, which runs one
//                   GEMM over every replica's rows and returns them.
//
// Rows: a step's rows reach a rank through its plan's token share (RankLayout::tokens): the
// sequences of its DP replica, and with SP a padded slice of their tokens. A stage sees StepRows.
//
// Device (device/device.h): a stage holds its activations on its rank's Device and computes with
// the device's ops only (matmul, rmsnorm, RoPE, paged attention with LSE, LSE merge, SwiGLU, copies);
// the metadata of a step (StepRows, page tables) stays on the host. The same stages run on the CPU
// device and on CUDA; pointers named xn, out, q, k, v below are device memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "device/device.h"
#include "engine/forward_batch.h"
#include "engine/shard_weights.h"
#include "kernels/kernels.h"
#include "kv/kv_store.h"
#include "model/weights.h"
#include "parallel/groups.h"
#include "parallel/plan.h"

namespace loom {

// The rows of one step on one rank: its DP replica's sequences (in batch order) and its slice.
struct StepRows {
  std::vector<ForwardSeq> seqs;    // the replica's sequences
  std::vector<int64_t> seq_row;    // first row of each (rows numbered over the replica's tokens)
  std::vector<int32_t> tokens;     // [n]
  std::vector<int32_t> pos;        // [n] absolute positions
  int64_t n = 0;                   // the replica's tokens this step
  TokenSlice slice;                // the rank's residual rows: without SP padded == real == [0, n)
  int64_t m() const { return slice.padded.size(); }
};

// Builds the rows of `batch` that `layout`'s token share gives the rank (DP: sequences with
// id % dp == dp_index; SP: sp_token_slice).
void make_step_rows(const ForwardBatch& batch, const TokenShare& share, StepRows& rows);

// One layer's weights on the rank's device: the shard's seven matrices and biases
// (ShardLayerWeights) and the layer's two norm weights.
struct DeviceLayerWeights {
  DeviceMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  DeviceMatrix bq, bk, bv;  // Qwen2 biases of the shard's rows, else absent
  DeviceMatrix attn_norm, ffn_norm;
};

// Matrices a device already holds, by the view they were made from (data, dtype, shape, layout):
// plans whose shards are the same bytes share one device copy.
class DeviceUploads {
 public:
  DeviceMatrix get(Device& dev, const WeightView& w);
  void clear() { held_.clear(); }

 private:
  std::map<std::tuple<const void*, int, int64_t, int64_t, int64_t, int, int64_t>, DeviceMatrix> held_;
};

// The device's operands for `shard` (layers `layers` of `model`, one entry each): views on the
// CPU device, copies in device memory on a GPU (through `uploads` when given).
std::vector<DeviceLayerWeights> upload_layers(Device& dev, const Model& model, const std::vector<ShardLayerWeights>& shard,
                                              const Range& layers, DeviceUploads* uploads = nullptr);

// What the stages of one plan share on a rank.
struct StageContext {
  std::shared_ptr<const Model> model;
  Plan plan;
  ModelShape shape;
  RankLayout layout;
  const PlanGroups* groups = nullptr;
  ThreadPool* pool = nullptr;  // the host threads of the rank (SiDP's owner weights are laid out with it)
  Device* dev = nullptr;       // where the stages compute
  DeviceUploads* uploads = nullptr;  // the rank's device copies (shared by its plans); null: upload anew
  KvStore* kv = nullptr;       // its pages are memory of `dev`
  const std::vector<DeviceLayerWeights>* weights = nullptr;  // the stage's layers, from layout.layers.begin
  kernels::RopeParams rope;
  kernels::Numerics numerics = kernels::Numerics::exact;  // of every matmul the stages run
  const DeviceLayerWeights& layer(int l) const { return (*weights)[size_t(l - layout.layers.begin)]; }
};

class AttentionStage {
 public:
  virtual ~AttentionStage() = default;
  // xn: [m, d] the rank's normed residual rows; out: [m, d] the attention block's output (after
  // Wo and its reduction), to be added to the residual. Writes the step's K/V into the KV store.
  virtual void forward(int layer, const StepRows& rows, const float* xn, float* out) = 0;
  virtual const char* name() const = 0;
  // Seconds this stage waited for a non-blocking exchange it had started (the communication the
  // overlap did not hide; Helix HOP-B), summed over its life.
  virtual double exposed_comm_s() const { return 0.0; }
};

class FfnStage {
 public:
  virtual ~FfnStage() = default;
  // xn: [m, d] normed rows; out: [m, d] the FFN block's output (after its reduction).
  virtual void forward(int layer, int64_t m, const float* xn, float* out) = 0;
  virtual const char* name() const = 0;
  // Called by RankForward with every step's whole batch before the layer loop (SiDP CaS: an owner
  // learns how many rows each replica sends; the orchestrator's dummy flags, S10).
  virtual void begin_step(const ForwardBatch&) {}
  // Called instead of the layer loop when the rank has no rows this step (a DP replica without
  // work): an FFN that serves other ranks (SiDP CaS owner) serves them here.
  virtual void idle(const Range& /*layers*/) {}
};

// The stage factory: the one place a plan's layout turns into code.
std::unique_ptr<AttentionStage> make_attention_stage(const StageContext& ctx);
std::unique_ptr<FfnStage> make_ffn_stage(const StageContext& ctx);

// Helix (H10, round-robin blocks): how many of positions [0, end) KVP rank kvp_index stores when
// position p lives on rank (p / block) mod kvp. The Helix stage presents a rank's keys to the
// attention kernel as one compact sequence and gives a query at position p the position
// helix_keys_held(p + 1, ...) - 1 in it (-1: it sees no key here, lse = -inf).
int64_t helix_keys_held(int64_t end, int64_t block, int64_t kvp, int64_t kvp_index);

// RoPE parameters of the model (both conventions, Llama-3 scaling, GGUF per-frequency factors;
// the factors point into `c`, which must outlive the result).
kernels::RopeParams rope_params(const ModelConfig& c);

// q = xn Wq^T (+bq), k, v likewise, then RoPE on q and k at positions pos (host): the projection
// every attention stage starts with.  // q [m, hq*dh], k, v [m, hk*dh] (device)
void project_qkv(Device& dev, const DeviceLayerWeights& W, const float* xn, int64_t m, int64_t d, int hq, int hk,
                 int64_t dh, const int32_t* pos, const kernels::RopeParams& rope, float* q, float* k, float* v,
                 kernels::Numerics numerics);

// The pages of a KV store as the device's attention reads them.
PagedKv paged_kv(const KvStore& kv);

// Writes the K/V of rows [0, rows.n) for KV heads kv_heads (global ids, ascending; k/v rows hold
// them in that order, ld floats apart) of `layer` into the store's pages, then runs causal
// attention for query heads q_heads (global ids; q/out rows hold them in that order) of every
// sequence, each query head over the KV head q / group_size. Pages must be reserved already.
void store_kv_and_attend(Device& dev, const StepRows& rows, int layer, KvStore& kv, const std::vector<int>& q_heads,
                         const std::vector<int>& kv_heads, int group_size, const float* q, int64_t ldq,
                         const float* k, const float* v, int64_t ldkv, float* out, int64_t ldo);

}  // namespace loom
