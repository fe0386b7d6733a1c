// RankEngine: everything one rank holds to run any plan of its PlanSet (ARCHITECTURE.md "plan
// sets, warm"): for every plan, built once at start-up, its layout, communicator groups (split
// from the plan's meshes), shard weights and the stages of RankForward; and one KvStore shared by
// all plans. A step names its plan by id; a switch between plans with equal KV placements only
// flips the id (Shift 3.3.1), otherwise it runs the KV migration first (kv/kv_transfer.h).
//
// The step on every rank (SPMD; every rank of the world calls step() with the same descriptor):
//   1. release: drop the KV of the released sequences (store and connectors: a copy in flight for
//      one is waited for first);
//   2. KV operations (kv/kv_connector.h), the step's list run by the rank's connectors: swap-outs to
//      the CPU tier under the current plan (TierConnector, kv/tier_connector.h: the copies overlap
//      this step's and later steps' compute, Seesaw §5.2), the migration to the step's plan's
//      placement when it differs (MigrationConnector: over the world; the sequences still being
//      copied out stay where they are, and under Seesaw's phases, kv_resident, every sequence the
//      step does not list: engine/seesaw_tier.h "Resident sequences"), swap-ins under the step's
//      plan (the prefetcher copies; those sequences decode in a later step), and the waits the step
//      needs (Await: free pages for what it writes, and with no sequence to run the oldest copy);
//   3. switch: the step's plan becomes current (lazy weights re-shard into it);
//   4. RankForward of the plan over the rank's rows;
//   5. sample: each replica's sampler rank samples its sequences (sampling is reproducible per
//      request: the draw for the token at position p of a request with seed s comes from
//      Rng(hash(s, p))); the sampled tokens reach world rank 0 (an all-gather over the world when a
//      sampler is not rank 0: DP replicas, pipeline stages); while tier copies are in flight the
//      same all-gather carries every rank's completed-copy counters, so every rank learns,
//      identically, which swaps are complete everywhere (StepResult::swapped_out / swapped_in on
//      rank 0, for the scheduler).
//
// KV accounting: pools(plan) is the scheduler's pool shape for the plan (block_allocator.h): every
// rank's page budget divided by the pages one logical block costs it under the plan (its layers x
// its KV heads), the least roomy rank deciding. It is the same value on every rank.
//
// Thread-safety: one rank's thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/rank_forward.h"
#include "engine/step.h"
#include "kv/kv_connector.h"
#include "kv/kv_tier.h"
#include "kv/tier_connector.h"
#include "kv/kv_transfer.h"
#include "parallel/groups.h"
#include "parallel/plan_set.h"

namespace loom {

struct RankEngineOptions {
  // Where the rank computes (device/device.h; must outlive the engine, and a shared `kv` store must
  // live on it). Null: a CPU device over the engine's pool.
  Device* device = nullptr;
  int block_size = 16;           // tokens per KV page
  int64_t kv_pages = 0;          // this rank's KV pages
  ShiftWeights shift_weights = ShiftWeights::Separate;
  KvTransferOptions transfer;
  // Numerics of the matmuls (kernels.h); unset: kernels::default_numerics() at construction.
  std::optional<kernels::Numerics> numerics;
  // Seesaw's CPU KV tier (kv_tier.h): the host's shared arena; null: no tier.
  std::shared_ptr<KvTierArena> tier;
  // The rank's KV store, shared with the other engines of this rank (a Nitsum pool builds one
  // engine per candidate group of the rank, cluster/pool.h; only one steps at a time, and KV
  // moves between them by migration); its page count is then kv_pages. Null: a store of its own.
  std::shared_ptr<KvStore> kv;
  // false: the main thread waits for every swap right after starting it (swaps fully exposed: the
  // baseline the Seesaw bench compares the overlap with).
  bool overlap_swaps = true;
  // Test hook: runs on the rank's tier copy threads before each copy task (a delay keeps copies in
  // flight across steps).
  std::function<void()> tier_copy_hook;
  // Lazy re-shard (Seesaw, issue 13): the rank holds the weight copies of the current plan only. A
  // `weights=resident` plan's copy is built when the engine switches into it, sharing every
  // (layer, matrix) shard the plan it leaves holds identically (shard_weights.h reshard), and what
  // the new plan does not use is freed: one plan's copy at a time, never two. `weights=full`
  // computes on views of the mapped model: nothing is built. Groups, buffers and stages of every
  // plan stay warm. false: every plan's copy is built at start-up (Shift's warm pair).
  bool lazy_weights = false;
};

// This rank's traffic with the CPU KV tier (Seesaw swap-out / swap-in).
struct TierStats {
  int64_t swapped_out = 0, swapped_in = 0;  // sequences
  int64_t bytes_out = 0, bytes_in = 0;      // written / read by this rank
  double copy_s = 0;   // the copy threads' time copying
  double issue_s = 0;  // the main thread deciding copies and allocating pages
  double wait_s = 0;   // the main thread blocked on a copy a step needed
  int64_t waits = 0;
  // Sequences a step decoded while their swap-in was still in flight here (the step waited): 0
  // when the scheduler onboards only ready sequences (SchedulerConfig::async_swaps).
  int64_t unready_decodes = 0;
  double exposed_s() const { return issue_s + wait_s; }
  // Copy time that ran beside the main thread's work.
  double hidden_s() const { return copy_s > wait_s ? copy_s - wait_s : 0.0; }
};

// Copies of the CPU KV tier still running on this rank's threads when its last forward started.
struct SwapOverlap {
  int64_t out = 0, in = 0;
};

// What a switch did (the same on every rank, but bytes_sent / bytes_received).
struct SwitchResult {
  bool moved = false;          // the placements differed: a migration ran
  int64_t total_bytes = 0;     // KvMigration::total_bytes (all ranks)
  KvTransferStats transfer;    // this rank's part
  // Lazy re-shard (RankEngineOptions::lazy_weights): bytes this rank copied out of the mapped model
  // for the new plan, bytes it freed, and the time that took.
  int64_t weight_bytes_built = 0, weight_bytes_freed = 0;
  double reshard_s = 0;
};

// Weight bytes of one plan on this rank.
struct PlanMemory {
  int64_t shard_bytes = 0;  // the seven matrices it computes with
  int64_t owned_bytes = 0;  // bytes of copies made for it (0: views of the model or of another copy)
  bool lazy = false;        // built when the engine switches into it (owned_bytes: at start-up)
};

class RankEngine {
 public:
  // Collective over `world` (splits groups, agrees on every rank's KV pages). world.size() ==
  // plans.n_ranks(). `model` and `pool` must outlive the engine.
  RankEngine(std::shared_ptr<const Model> model, const PlanSet& plans, Communicator& world, ThreadPool* pool,
             const RankEngineOptions& options);

  const PlanSet& plans() const { return plans_; }
  int current() const { return current_; }
  const Model& model() const { return *model_; }
  Device& device() { return *dev_; }
  KvStore& kv() { return *kv_; }
  KvTier* tier() { return tier_ ? &tier_->swaps().tier() : nullptr; }
  TierStats tier_stats() const;
  // Whether `seq`'s swap-out is complete on every rank (its KV assembled in the tier).
  bool tier_ready(int64_t seq) const { return tier_ && tier_->swaps().out_ready(seq); }
  SwapOverlap last_overlap() const { return tier_ ? SwapOverlap{tier_->overlap_out(), tier_->overlap_in()} : SwapOverlap{}; }
  // Sequences whose pages this rank still holds, under the plan that computed them, while their
  // copy to the tier is in flight.
  std::vector<int64_t> parked_swap_outs() const { return tier_ ? tier_->swaps().parked() : std::vector<int64_t>{}; }
  // What the last step's plan switch did on this rank (default when it did not switch).
  const SwitchResult& last_switch() const { return last_switch_; }
  const KvPoolShape& pools(int plan) const { return pools_.at(size_t(plan)); }
  const PlanMemory& memory(int plan) const { return memory_.at(size_t(plan)); }
  // Bytes of weight copies this rank holds now (lazy: the current plan's only).
  int64_t owned_weight_bytes() const { return weights_.owned_bytes() + held_.owned_bytes; }
  const RankForward& forward_of(int plan) const { return *instances_.at(size_t(plan))->forward; }
  int world_rank() const { return world_.rank(); }
  // Called at the end of every step() with the step and the sequences released before it (tests
  // check what the rank's KV store holds against the plan's placement here).
  std::function<void(RankEngine&, const StepBatch&, const std::vector<RequestId>& released)> after_step;

  // Drops the KV of these sequences (not collective).
  void release(const std::vector<RequestId>& seqs);
  // Collective: makes `plan` current; migrates the KV of `seqs` when the placement changes.
  // `resident` (StepBatch::kv_resident): `seqs` are the sequences that move, the others stay where
  // they are (none listed: nothing migrates; only the weights re-shard).
  SwitchResult switch_to(int plan, const std::vector<SeqExtent>& seqs, bool resident = false);
  // Collective: one step of a decoded descriptor (see the top). The result holds every sampled
  // token on world rank 0; elsewhere it is unspecified. `sw` (optional) gets the switch it made.
  StepResult step(const StepBatch& batch, const std::vector<RequestId>& released, SwitchResult* sw = nullptr);
  // Not collective: one step of this rank's own replica alone (SiDP replicas stepping on their own
  // under WaS, sidp_replicas.h). `batch` lists only sequences of this rank's replica; the plan must
  // be a one-rank-per-replica plan of the current plan's KV placement (no migration, no re-shard,
  // no CPU tier), and nothing is gathered: the result holds this rank's sampled tokens. A batch
  // without sequences only releases.
  StepResult step_replica(const StepBatch& batch, const std::vector<RequestId>& released);
  // Collective: one forward pass of the current plan (logits on the sampler of replica 0 when it is
  // this rank; tests and the single-sequence generator).
  int forward(const ForwardBatch& batch, std::vector<float>* logits);

 private:
  struct Instance {
    RankLayout layout;
    PlanGroups groups;
    WeightShards shards;
    bool lazy = false;  // its weights are built at a switch into it (lazy_weights, resident)
    std::vector<ShardLayerWeights> weights;
    std::vector<DeviceLayerWeights> on_device;  // `weights` as the device computes with them
    std::unique_ptr<RankForward> forward;
    std::vector<int> sampler_replica;  // per world rank: its replica when it samples, else -1
  };
  std::shared_ptr<const Model> model_;
  PlanSet plans_;
  Communicator& world_;
  ThreadPool* pool_;
  RankEngineOptions options_;
  std::unique_ptr<Device> own_dev_;  // when options.device is null
  Device* dev_;
  DeviceUploads uploads_;  // every matrix this rank's device holds, shared by the plans that use it
  // The step's KV operations (see the top), the context they run in, and whether a switch to `plan`
  // migrates.
  std::vector<KvOp> kv_ops(const StepBatch& b) const;
  KvOpContext kv_context(int plan, KvOpsResult* result);
  bool migrates(int plan, const std::vector<SeqExtent>& seqs, bool resident) const;
  // Makes `plan` current (weights: lazy re-shard); its KV is already in place.
  void switch_plan(int plan, SwitchResult* r);
  void reshard_to(int plan, SwitchResult* r);
  StepResult sample(const StepBatch& batch, const std::vector<RequestId>& released, int n_rows);
  std::shared_ptr<KvStore> kv_;
  KvConnectors kv_ops_;              // after kv_: its copy threads end before the store goes
  TierConnector* tier_ = nullptr;    // the CPU tier's, in kv_ops_ (null: no tier)
  SwitchResult last_switch_;
  GroupCache groups_;
  RankWeights weights_;
  ShardWeightSet held_;  // lazy_weights: the copy of the current plan (when it is a lazy one)
  std::vector<std::unique_ptr<Instance>> instances_;
  std::vector<KvPoolShape> pools_;
  std::vector<PlanMemory> memory_;
  int current_ = 0;
  ForwardBatch fb_;
  std::vector<float> logits_;
};

// Throws loom::Error when a Helix plan's block (block=) is not a whole number of KV pages of
// `block_size` tokens (a page is stored on one KVP rank).
void check_block_sizes(const std::vector<Plan>& plans, int block_size);

// The token chosen from `logits[vocab]` for the sample at `position` of a request.
// With p.adjusts_logits(): logit bias and penalties (request.h) on a copy of the logits first;
// output_counts as in ScheduledSeq (ids outside [0, vocab) are ignored).
int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, int64_t position,
                     const std::vector<std::pair<TokenId, int32_t>>& output_counts = {});

// OpenAI's logprobs of the token `chosen` sampled from `logits[vocab]`: out->logprob and the
// min(top_n, vocab) most likely tokens (descending; equal values: lower id first), as the
// log-softmax of the model's logits in double precision, rounded to float. Which distribution:
// the raw one, before logit_bias, the penalties, temperature and top-k / top-p (vLLM's default,
// logprobs_mode = raw_logprobs; OpenAI documents logprobs as the model's). So a token forced by
// logit_bias reports its unbiased probability, and greedy's choice is top-1 when nothing adjusts
// the logits. Sets out->token = chosen; out->seq_id is left as it is.
void token_logprobs(const float* logits, int vocab, TokenId chosen, int top_n, TokenLogprobs* out);

// The forward batch of a step; want_logits follows ScheduledSeq::sample.
void to_forward_batch(const StepBatch& batch, ForwardBatch& fb);

// One rank over plan tp=1 on a single-rank communicator: the single-rank engine's forward pass,
// for the single-sequence generator (generator.h) and as the tests' reference.
class SingleRankModel {
 public:
  // KV room for `kv_tokens` tokens of one sequence (rounded up to pages). `plan`: a one-rank plan
  // (tp=1, or tp=1,weights=full to compute on the mapped file).
  SingleRankModel(std::shared_ptr<const Model> model, ThreadPool* pool, int64_t kv_tokens, int block_size = 16,
                  const Plan& plan = Plan::make_tp(1), std::optional<kernels::Numerics> numerics = std::nullopt);
  ~SingleRankModel();
  const ModelConfig& config() const { return model_->config; }
  // One forward pass: writes [rows, vocab] logits for the sequences that want them.
  int forward(const ForwardBatch& batch, std::vector<float>& logits);
  KvStore& kv() { return engine_->kv(); }
  RankEngine& engine() { return *engine_; }

 private:
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<RankEngine> engine_;
};

}  // namespace loom
