// The single-process engine: a model, its paged KV store, the shared scheduler, the plan
// executor and the step loop, wired together. `loom bench offline`, `loom serve` and the tests
// drive it through EngineLoop (submit / cancel / step) or run a set of requests to completion.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_loop.h"
#include "engine/metrics.h"
#include "engine/plan_executor.h"
#include "engine/policy.h"
#include "engine/rank_engine.h"
#include "engine/scheduler.h"
#include "model/weights.h"

namespace loom {

struct EngineConfig {
  int threads = 0;                  // worker threads (0: default_thread_count())
  int max_num_seqs = 64;            // running sequences at most
  int max_tokens_per_step = 2048;   // token budget per step (chunked prefill)
  int block_size = kDefaultKvBlockSize;
  bool enable_chunked_prefill = true;
  int max_model_len = 0;            // 0: the model's context
  // KV cache size: explicit bytes, else this fraction of MemAvailable, capped at what
  // max_num_seqs sequences of max_model_len tokens can use.
  std::optional<int64_t> kv_cache_bytes;
  double kv_cache_fraction = 0.25;
  // Memory per rank for the weights it holds and its KV cache, as on a GPU (vLLM's
  // gpu_memory_utilization x memory): the KV budget is this less the weight bytes the rank holds
  // under its plan set (rank_weight_bytes), so a plan that holds fewer weights (TP shards, SiDP's
  // owned FFN, S12) gets more KV. Exclusive with kv_cache_bytes.
  std::optional<int64_t> rank_memory_bytes;
  // Numerics of the matmuls (kernels.h "Numerics"); unset: the process default at engine start
  // (kernels::default_numerics(): the CLI's --numerics, else LOOM_NUMERICS, else fast).
  std::optional<kernels::Numerics> numerics;
  kernels::Numerics resolved_numerics() const { return numerics ? *numerics : kernels::default_numerics(); }
  // Seesaw's CPU KV tier (kv/kv_tier.h), bytes per host (shared by its ranks); 0: none. Required
  // by the seesaw / prefill-first / decode-first policies (engine/seesaw.h).
  int64_t cpu_kv_bytes = 0;
  // Validates against the model; throws loom::Error naming the field and limit.
  void validate(const ModelConfig& model) const;
};

// The engine's side of a policy's start-up checks and scheduler hook (policy.h). `config` must be
// resolved (max_model_len set).
PolicyEnv policy_env(const ModelConfig& model, const EngineConfig& config);

// The scheduler limits of `config` (sequences and token budget times `scale`: a lockstep DP group
// schedules for all its replicas at once) and the KV pool of `pool`. Throws loom::Error naming
// --kv-cache-bytes when `pool` holds no block under `plan_name`.
SchedulerConfig scheduler_config(const EngineConfig& config, int scale, const KvPoolShape& pool,
                                 const std::string& plan_name);

// What a live front end (the HTTP server) needs of an engine, single-rank, distributed or a
// Nitsum pool of instances (cluster/pool.h): the loop and clock it drives, and the sizes it reports.
class EngineHandle {
 public:
  virtual ~EngineHandle() = default;
  virtual const EngineConfig& config() const = 0;
  virtual int num_kv_blocks() const = 0;  // per rank (a pool: of its smallest instance)
  virtual LiveLoop& loop() = 0;
  virtual Clock& clock() = 0;
  virtual Metrics& metrics() = 0;
  // Per plan of the engine's set: steps, tokens, switches into it, KV bytes moved, switch time.
  virtual std::vector<PlanStats> plan_stats() const = 0;
  // "" while the engine can run steps; else why it cannot (the first failure of its step group:
  // a communicator error, a peer that failed or timed out, plan_executor.h). A faulted engine
  // fails every later step at once: a server must stop serving it (server/serving_engine.h).
  virtual std::string fault() const { return {}; }
  // Called by the driving thread while it has nothing to run: a no-work round trip with every
  // rank that follows this one (plan_executor.h StepLeader::heartbeat), so a stalled rank shows
  // while the engine idles (server/serving_engine.h "Health"). Throws when the group failed.
  // Default: nothing to check (one rank; SiDP's replicas and a Nitsum pool keep their channels
  // alive on threads of their own).
  virtual void heartbeat() {}
};

// World rank 0's scheduling side over a RankEngine, shared by the single-rank Engine and the
// distributed engine: the scheduler (its KV pools per plan come from the RankEngine), the layout
// policy (PlanControl), the executor that broadcasts each step, the loop, clock and metrics.
class EngineCore {
 public:
  // `config` resolved (max_model_len set); its per-step limits are multiplied by `dp_scale` (the
  // largest DP degree of the plan set: the limits are per replica).
  EngineCore(RankEngine& rank, Communicator& world, const EngineConfig& config, std::unique_ptr<LayoutPolicy> policy,
             int dp_scale = 1);
  Scheduler& scheduler() { return *sched_; }
  EngineLoop& loop() { return *loop_; }
  Clock& clock() { return clock_; }
  Metrics& metrics() { return metrics_; }
  PlanExecutor& executor() { return *exec_; }
  const PlanExecutor& executor() const { return *exec_; }
  const PlanControl& control() const { return *control_; }
  // Runs `requests` (arrival_s relative to now) to completion; returns the finished sequences in
  // finishing order (rejected ones included). Throws loom::Error for a token id outside the
  // vocabulary (before anything runs) and when the group failed.
  std::vector<Sequence> run(std::vector<Request> requests);

 private:
  RankEngine& rank_;
  std::unique_ptr<PlanExecutor> exec_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<PlanControl> control_;
  WallClock clock_;
  Metrics metrics_;
  std::unique_ptr<EngineLoop> loop_;
};

// KV pages for one rank: `budget_bytes` of pages, capped at what max_num_seqs sequences of
// max_model_len tokens can use on `rank` under the roomiest plan of the set. Throws loom::Error when
// the budget holds no page.
int64_t kv_pages_for(const EngineConfig& config, const PlanSet& plans, int rank, int head_dim, int64_t budget_bytes);

// Weight bytes of rank `rank` under its plan set, for the KV budget (before anything is built):
//   copied: the copies of layer matrices RankWeights makes (weights=resident: one per distinct
//           shard; weights=owner: SiDP's attention + owned FFN + slots, sidp::memory;
//           weights=full: none, views of the mapped model); with lazy_weights
//           (RankEngineOptions: Seesaw's lazy re-shard) one resident plan's copy at a time, the
//           largest;
//   held:   what the rank computes with, as a device would hold it: copied, plus the whole layer
//           matrices when a plan computes on views of the full model, plus the classifier.
struct RankWeightBytes {
  int64_t copied = 0, held = 0;
};
RankWeightBytes rank_weight_bytes(const Model& model, const PlanSet& plans, int rank, bool lazy_weights = false);

// The KV budget in bytes of rank `rank` (one formula for the single-rank and the distributed
// engine): kv_cache_bytes when given; rank_memory_bytes less the weights it holds when given;
// else kv_cache_fraction of MemAvailable, less the copies of the `ranks_here` ranks this process
// hosts from `first_rank` on, divided among them. Throws loom::Error naming the sizes when the
// weights leave no room.
int64_t kv_budget_bytes(const EngineConfig& config, const Model& model, const PlanSet& plans, int rank, int first_rank,
                        int ranks_here, bool lazy_weights = false);

// The single-rank engine: plan tp=1 on one rank, through the same RankEngine and step path as
// every distributed plan.
class Engine : public EngineHandle {
 public:
  Engine(std::shared_ptr<const Model> model, const EngineConfig& config);
  ~Engine() override;

  const ModelConfig& model_config() const { return model_->config; }
  const EngineConfig& config() const override { return config_; }
  Scheduler& scheduler() { return core_->scheduler(); }
  EngineLoop& loop() override { return core_->loop(); }
  Metrics& metrics() override { return core_->metrics(); }
  Clock& clock() override { return core_->clock(); }
  int num_kv_blocks() const override { return num_blocks_; }
  std::vector<PlanStats> plan_stats() const override { return core_->executor().stats(); }
  std::string fault() const override { return core_->executor().broken() ? core_->executor().error() : std::string(); }
  int64_t kv_cache_bytes() const { return rank_->kv().bytes(); }
  RankEngine& rank() { return *rank_; }

  // Runs `requests` (arrival_s relative to now) to completion; returns the finished sequences
  // in finishing order (rejected ones included, with FinishReason::kRejected).
  std::vector<Sequence> run(std::vector<Request> requests) { return core_->run(std::move(requests)); }

 private:
  std::shared_ptr<const Model> model_;
  EngineConfig config_;
  int num_blocks_ = 0;
  std::unique_ptr<Communicator> world_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<RankEngine> rank_;
  std::unique_ptr<EngineCore> core_;
};

}  // namespace loom
