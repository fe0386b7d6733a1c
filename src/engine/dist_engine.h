// The engine on many ranks: a plan set (parallel/plan_set.h) executed by SPMD ranks over a
// communicator (comm/world.h). Every plan the engine executes (TP, DP, DP x TP, SP x TP and its
// Shift config, PP; `weights=resident|full`) runs through the same RankEngine (rank_engine.h) and
// the same step path (plan_executor.h); a layout policy (policy.h) names each step's plan.
//
// SiDP under WaS is the exception: its replicas schedule and step on their own, rank 0 keeping one
// scheduler per replica and stepping them over channels (engine/sidp_replicas.h).
//
// Ranks: plan rank = global rank (plan.h). World rank 0 owns the one Scheduler and EngineLoop; DP
// replicas are a token share of each step (a replica's ranks compute the sequences with
// id % dp == its index, plan.h TokenShare), so the replicas step together and a plan set may mix
// DP degrees (tp=4 | tp=2,dp=2 | dp=4). The per-step limits (max_num_seqs, max_tokens_per_step)
// are per replica: the scheduler gets them times the largest DP degree of the set.
//
// Start-up, on every rank, in this order, so that errors name the cause on every rank:
//   1. parse the plans (and the policy's extra plan); check_agreement over the world (ranks started
//      with different --plan / --policy fail on every rank, naming the values); plan size == world
//      size; unexecutable keys rejected;
//   2. load the model (memory-mapped: no weight bytes are read yet), validate every plan against
//      its sizes — a layout that does not divide the model fails here, before any shard, KV cache
//      or stage is built — and agree on a hash of the plans, the model's config and weight dtype,
//      and the engine config;
//   3. size this rank's KV store (pages) and build the RankEngine: every plan's groups, shards and
//      stages (collective);
//   4. world rank 0: scheduler (its KV pools per plan from the RankEngine), policy, loop, executor.
// A rank that throws anywhere fails its peers through the communicator within the comm timeout:
// local ranks throw "rank R failed: ..." and run_distributed rethrows the original error; mpi
// prints "loom: rank R failed: ..." and aborts the job (comm/world.h).
//
// For `loom generate`, `loom bench offline` and `loom serve`: call run_distributed(options,
// driver). The driver runs on world rank 0 only, with a DistEngine; when it returns the other ranks
// are released and run_distributed returns on every rank. Output belongs to the driver. Example:
//   DistOptions o; o.comm = "local"; o.ranks = 4; o.plans = {"tp=4", "dp=4"}; o.policy = "cycle:8";
//   run_distributed(o, [&](DistEngine& e) { auto done = e.run(requests); ... e.plan_stats() ... });
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "comm/rank_memory.h"
#include "device/device.h"
#include "engine/engine.h"
#include "engine/plan_executor.h"
#include "parallel/plan.h"
#include "parallel/plan_set.h"

namespace loom {

class SidpReplicas;

struct DistOptions {
  std::string comm = "local";  // single | local | mpi (comm/world.h)
  // Where the ranks compute (--device): the CPU, or CUDA: local ranks are threads sharing GPU 0
  // (their communicator moves device memory, gpu/cuda/shared_gpu.h); MPI ranks one GPU each (local
  // rank mod the GPUs of the host) with NCCL for device buffers and MPI for the rest.
  DeviceKind device = DeviceKind::Cpu;
  int ranks = 1;               // world size; mpi: 0 = as many as mpirun started (else must match)
  // The plan set (plan.h string forms; the first is the initial plan); empty: {plan}. Every plan's
  // size must equal the world size.
  std::vector<std::string> plans;
  std::string plan = "tp=1";
  std::string model_path;
  // Per replica (max_num_seqs, token budget, block size...). engine.threads = worker threads PER
  // RANK; 0 picks 1 on the local backend with several ranks (ranks are threads already), cores /
  // ranks-on-this-host under mpi (OMPI_COMM_WORLD_LOCAL_SIZE), else default_thread_count().
  // kv_cache_bytes is per rank; without it each rank takes kv_cache_fraction of MemAvailable
  // divided by the ranks sharing this process.
  EngineConfig engine;
  CommOptions comm_options;
  // How rank `world_rank` gets its model; default load_model(model_path). Tests use it to inject
  // a failure on one rank.
  std::function<std::shared_ptr<const Model>(int world_rank)> load_model;
  // Called on every rank but world rank 0 with each step before it executes (tracing; tests inject
  // a mid-run failure with it). May throw: that rank fails, and so does the job.
  std::function<void(int world_rank, const StepBatch&)> follower_before_step;
  // Test hook: runs on a follower rank before it answers a heartbeat (EngineHandle::heartbeat).
  std::function<void(int world_rank)> follower_heartbeat;

  // Called on every rank after each step it ran (RankEngine::after_step; tests check each rank's
  // KV store against the placement here). Runs on the rank's thread (world rank 0 of SiDP replicas
  // stepping on their own: replica 0's worker thread, sidp_replicas.h).
  std::function<void(int world_rank, RankEngine&, const StepBatch&, const std::vector<RequestId>& released)> after_step;
  // Tests: make rank `world_rank`'s Device (default gpu::make_device(device, ...)), and the local
  // backend's memory (default gpu::rank_memory(device)); tests/strict_device.h uses both.
  std::function<std::unique_ptr<Device>(int world_rank, ThreadPool* pool)> make_device;
  RankMemoryFactory rank_memory;
  // Called on every rank with its RankEngine options before the RankEngine is built (tests and
  // benches: tier copy hooks, overlap_swaps).
  std::function<void(int world_rank, RankEngineOptions&)> rank_options;

  // Layout policy (policy.h): fixed | shift | cycle:N | alternate | random:SEED.
  std::string policy = "fixed";
  // Shift threshold in scheduled tokens per step; < 0: default_shift_threshold(...) on world
  // rank 0 (required then).
  int64_t shift_threshold = -1;
  std::function<int64_t(const Model&, const Plan&, int threads_per_rank)> default_shift_threshold;
  // SiDP (--policy sidp): B_th in sequences per replica (policy.h); < 0: default_sidp_threshold
  // on world rank 0 (required then).
  int64_t sidp_threshold = -1;
  std::function<int64_t(const Model&, const Plan&, int threads_per_rank)> default_sidp_threshold;
  // SiDP under WaS: replicas step on their own (sidp_replicas.h). true: they step in lockstep on one
  // descriptor as every other DP plan does (the engine before that; benches compare the two).
  bool sidp_lockstep = false;
  // SiDP replicas stepping on their own, priced mode (sidp_replicas.h; `loom sim validate-engine`):
  // every step still runs on the ranks, but the coordinator's clock and completion order come from
  // this price of the step in seconds (parts[j]: replica j's rows or null), so the step records are
  // the simulator's. Unset: the wall clock.
  std::function<double(int plan, const std::vector<const StepBatch*>& parts)> sidp_priced_clock;
  // Shift 3.3.2 weights of a base / shift pair: "separate" (copies of both shards) or "slice".
  std::string shift_weights = "separate";
  // KV migration buffer per round (bytes); 0: the default (kv_transfer.h).
  int64_t migration_buffer_bytes = 0;

  std::vector<std::string> plan_texts() const { return plans.empty() ? std::vector<std::string>{plan} : plans; }
};

// World rank 0's handle on the distributed engine. Not thread-safe (one driver thread), except
// loop().submit()/cancel() as EngineLoop documents.
class DistEngine : public EngineHandle {
 public:
  virtual const ModelConfig& model_config() const = 0;
  virtual std::shared_ptr<const Model> model() const = 0;
  virtual const Plan& plan() const = 0;         // the initial plan
  virtual const PlanSet& plans() const = 0;
  virtual std::string_view backend() const = 0;
  virtual int world_size() const = 0;
  virtual int num_replicas() const = 0;  // the initial plan's dp
  virtual int threads_per_rank() const = 0;
  int num_kv_blocks() const override = 0;  // the scheduler's blocks under the initial plan
  const EngineConfig& config() const override = 0;
  // Start-up report lines (plans, policy, threshold, weight bytes per rank per plan).
  virtual const std::vector<std::string>& start_info() const = 0;
  virtual std::string policy() const = 0;  // LayoutPolicy::describe()
  // Per plan of the set: steps, tokens, switches into it, KV bytes those moved, switch time.
  std::vector<PlanStats> plan_stats() const override = 0;
  // World rank 0's traffic with Seesaw's CPU KV tier (zeros without one).
  virtual TierStats tier_stats() const { return {}; }
  // SiDP replicas stepping on their own (sidp_replicas.h): their loop; null for every other engine.
  virtual SidpReplicas* sidp_replicas() { return nullptr; }

  // The scheduler; SiDP replicas stepping on their own (sidp_replicas.h) have one each: replica 0's.
  virtual Scheduler& scheduler() = 0;
  // The loop: an EngineLoop over the one scheduler, or SiDP's replicas (sidp_replicas.h).
  LiveLoop& loop() override = 0;
  Clock& clock() override = 0;
  Metrics& metrics() override = 0;

  // Runs `requests` (arrival_s relative to now; ids unique) to completion; returns every finished
  // sequence (rejected ones included) in finishing order. Throws loom::Error if the group failed.
  virtual std::vector<Sequence> run(std::vector<Request> requests) = 0;
};

// Runs the engine described by `options` on every rank this process hosts (see above), calling
// `driver` on world rank 0. Throws loom::Error on a user error (naming the value and limit) or
// when a rank failed.
void run_distributed(const DistOptions& options, const std::function<void(DistEngine&)>& driver);

}  // namespace loom
