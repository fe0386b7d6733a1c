// Shift Parallelism on one replica (Shift 3.3): every rank of an SP(s) x TP(t) replica holds
//   - the base config: UlyssesTransformer (Algorithm 1) over its TP shard, and
//   - the shift config: a Transformer computing TP(P = s*t) shard j = sp + s*tp, i.e. the group
//     SP_TP ordered 0, t, 2t, ..., 1, t+1, ... (for s=3, t=2: 0,2,4,1,3,5; Shift 3.3.1), with
//     the Wo / W_down partial sums all-reduced over that group in shift order,
// over ONE paged KV cache: both configs store the same KV heads on the same rank
// (KvPlacement(base) == KvPlacement(shift)), so a switch moves nothing. The executor asserts that
// at every switch with KvMigration (parallel/kv_migration.h) over the step's sequences.
//
// Which config runs a step is StepBatch::plan (set on rank 0 by a LayoutPolicy, engine/policy.h,
// and carried by the step descriptor): the base plan's name ("sp=2,tp=2"), the shift config's
// ("shift:sp=2,tp=2"); "" means the base.
//
// Weights (Shift 3.3.2), ShiftWeights: Separate = owned copies of the base shard and of the shift
// shard (w/t + w/P per rank); Slice = an owned copy of the base shard and the shift shard as views
// into it (w/t). With only one config in use (fixed policy) the weights stay views of the model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/dist_executor.h"
#include "engine/executor.h"
#include "engine/shard_weights.h"
#include "engine/step.h"
#include "engine/ulysses.h"
#include "parallel/kv_migration.h"
#include "parallel/kv_placement.h"

namespace loom {

struct ShiftRankOptions {
  bool base = true;   // build the base (Ulysses) config
  bool shift = true;  // build the shift (TP(P)) config
  // When both are built: where their weights live. Ignored (views) when only one is built.
  ShiftWeights weights = ShiftWeights::Separate;
};

// Weight bytes of one rank (the seven matrices of every layer), for the start-up report.
struct ShiftRankMemory {
  int64_t base_shard_bytes = 0;   // what the base config computes with (w/t)
  int64_t shift_shard_bytes = 0;  // what the shift config computes with (w/P)
  int64_t owned_bytes = 0;        // bytes copied out of the model for them (0: views of the file)
};

class ShiftRank {
 public:
  // `replica`: this replica's ranks, rank = sp*t + tp (size s*t); `base`: the replica's sp x tp
  // plan (dp = 1, not a shift config). Collective over `replica` (splits the SP, TP and SP_TP
  // groups). `kv_layout.n_kv_heads` must be this rank's KV heads.
  ShiftRank(std::shared_ptr<const Model> model, const Plan& base, Communicator& replica, ThreadPool* pool,
            const KvLayout& kv_layout, ShiftRankOptions options = {});

  const Plan& base_plan() const { return base_; }
  const Plan& shift_plan() const { return shift_; }
  const std::string& base_name() const { return base_name_; }
  const std::string& shift_name() const { return shift_name_; }
  // Whether `plan_name` (StepBatch::plan) runs the base; throws loom::Error for a plan that is
  // neither (or a config this rank did not build).
  bool runs_base(const std::string& plan_name) const;

  // One step under `plan_name` on every rank of the replica. want_logits in `fb` marks the
  // sampling sequences on every rank; `logits` (replica rank 0 only, else null) gets their rows.
  int forward(const std::string& plan_name, const ForwardBatch& fb, std::vector<float>* logits);

  KvStorage& kv() { return *kv_; }
  int vocab_size() const { return model_->config.vocab_size; }
  const ShiftRankMemory& memory() const { return mem_; }
  const UlyssesRank& ulysses_rank() const { return urank_; }
  int shift_index() const { return shift_index_; }  // j: this rank's position in SP_TP

 private:
  std::shared_ptr<const Model> model_;
  Plan base_, shift_;
  std::string base_name_, shift_name_;
  UlyssesRank urank_;
  int shift_index_ = 0;
  std::unique_ptr<Communicator> sp_, tp_, sptp_;
  ShardWeightSet base_w_, shift_w_;
  std::unique_ptr<UlyssesTransformer> base_tf_;
  std::unique_ptr<Transformer> shift_tf_;
  std::unique_ptr<KvStorage> kv_;
  ShiftRankMemory mem_;
  ForwardBatch no_logits_;
};

// Checks that switching from plan `from` to plan `to` (names) moves no KV for `seqs` (Shift
// 3.3.1); returns the migration (zero bytes) and throws loom::Error naming the bytes otherwise.
KvMigration check_free_switch(const std::string& from, const std::string& to, const ModelShape& shape,
                              const std::vector<SeqExtent>& seqs, int block_size);

// Replica rank 0's StepExecutor: broadcasts each step's descriptor over the replica, runs the
// step's config, samples. Like DistExecutor (dist_executor.h), a communicator failure marks the
// executor broken and fails every later step at once.
class ShiftExecutor : public StepExecutor {
 public:
  ShiftExecutor(Communicator& replica, ShiftRank& rank, const ModelShape& shape);
  StepResult execute(const StepBatch& batch) override;
  void stop() { leader_.stop(); }  // sends the stop command (once)
  bool broken() const { return leader_.broken(); }
  const std::string& error() const { return leader_.error(); }
  int64_t num_switches() const { return switches_; }
  int64_t kv_bytes_moved() const { return bytes_moved_; }  // summed over switches (must stay 0)
  int64_t steps_base() const { return steps_base_; }
  int64_t steps_shift() const { return steps_shift_; }

 private:
  StepLeader leader_;
  ShiftRank& rank_;
  ModelShape shape_;
  ForwardBatch fb_;
  std::vector<float> logits_;
  std::string prev_plan_;
  int64_t switches_ = 0, bytes_moved_ = 0, steps_base_ = 0, steps_shift_ = 0;
};

// Replica ranks != 0: execute the broadcast steps until the stop command; returns the steps run.
int64_t run_shift_follower(Communicator& replica, ShiftRank& rank,
                           const std::function<void(const StepBatch&)>& before_step = nullptr);

}  // namespace loom
