// The engine on many ranks: a plan (parallel/plan.h) executed by SPMD ranks over a communicator
// (comm/world.h). Today's plans: TP(t) (Megatron, PLANS.md), DP(d) (independent replicas),
// DP(d) x TP(t), and Shift Parallelism's SP(s) x TP(t) base with its shift config (with DP too;
// engine/shift_executor.h); other degrees (pp, kvp) are rejected with a message.
//
// Layout policy (engine/policy.h), run by each replica's rank 0 before every step: "fixed" (the
// plan's own config every step: "sp=2,tp=2" runs Ulysses only, "shift:sp=2,tp=2" full TP in the
// shift order only), "shift" (Shift Algorithm 2 over an sp x tp base: base when the step's
// scheduled tokens exceed the threshold, shift config otherwise) and the test hooks "alternate"
// and "random:SEED". The config that ran is StepBatch::plan / StepMetrics::plan. Under a
// switching policy each rank holds both configs' weights (DistOptions::shift_weights) and one
// KV cache; every switch is checked to move zero KV bytes (KvMigration).
//
// Ranks: plan rank = dp*t + tp (plan.h; with sp: (dp*s + sp)*t + tp). Each DP replica is one
// group (its TP group, or its s*t ranks for sp plans); its rank 0 owns a Scheduler + EngineLoop driving a DistExecutor (dist_executor.h: step descriptor
// broadcast, sharded forward, logits and sampling on the group's rank 0); the other ranks of the
// group run run_follower(). The replica leaders form a second group ("leaders", ordered by dp).
//
// Request routing (DP): request `id` runs on replica ((id % d) + d) % d, the rule KvPlacement
// assumes (kv_placement.h, "DP convention"). DistEngine::run() broadcasts the requests to the
// replica leaders, each runs its share to completion, and the finished sequences and their
// metrics come back to world rank 0.
//
// Start-up, on every rank, in this order, so that errors name the cause on every rank:
//   1. parse the plan; check_agreement("plan") over the world (ranks started with different
//      --plan fail on every rank, naming the values); plan size == world size;
//   2. load the model (memory-mapped: no weight bytes are read yet), validate(plan, shape) —
//      a layout that does not divide the model fails here, before any shard, KV cache or
//      transformer is built — and check_agreement("model and engine config") on a hash of the
//      plan, the model's config and weight dtype, and the engine config;
//   3. split the TP group and the leaders group; size the KV cache: each rank computes the blocks
//      its budget holds for ITS KV heads, the world takes the minimum (all ranks use the same
//      block ids, so every cache must have the same number of blocks);
//   4. build the shard (views of the mapped weights), the KV cache and, on leaders, the loop.
// A rank that throws anywhere (unreadable model file, bad plan, a failing step) fails its peers
// through the communicator within the comm timeout: local ranks throw "rank R failed: ..." and
// run_distributed rethrows the original error; mpi prints "loom: rank R failed: ..." and aborts
// the job (comm/world.h).
//
// For `loom generate` and `loom bench offline`: call run_distributed(options, driver). The driver
// runs on world rank 0 only, with a DistEngine (an Engine-like handle); when it returns the other
// ranks are released and run_distributed returns on every rank. Output belongs to the driver
// (only rank 0 prints). Example:
//   DistOptions o; o.comm = "local"; o.ranks = 4; o.plan = "tp=4"; o.model_path = path;
//   run_distributed(o, [&](DistEngine& e) { auto done = e.run(requests); ... e.metrics() ... });
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "engine/engine.h"
#include "parallel/plan.h"

namespace loom {

struct DistOptions {
  std::string comm = "local";  // single | local | mpi (comm/world.h)
  int ranks = 1;               // world size; mpi: 0 = as many as mpirun started (else must match)
  std::string plan = "tp=1";   // plan.h string form; its size must equal the world size
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
  // Called on every follower rank (tp index > 0) with each step before it executes (tracing;
  // tests inject a mid-run failure with it). May throw: that rank fails, and so does the job.
  std::function<void(int world_rank, const StepBatch&)> follower_before_step;

  // Layout policy (see above): fixed | shift | alternate | random:SEED.
  std::string policy = "fixed";
  // Shift threshold in scheduled tokens per step; < 0: default_shift_threshold(...) on world
  // rank 0 (required then), broadcast so every replica uses the same value.
  int64_t shift_threshold = -1;
  std::function<int64_t(const Model&, const Plan&, int threads_per_rank)> default_shift_threshold;
  // Shift 3.3.2 under a switching policy: "separate" (copies of both shards) or "slice".
  std::string shift_weights = "separate";
};

// What a Shift engine did (replica 0): steps per config, switches, KV bytes the switches moved
// (always 0: asserted at each switch).
struct ShiftStats {
  int64_t base_steps = 0, shift_steps = 0, switches = 0, kv_bytes_moved = 0;
};

// World rank 0's handle on the distributed engine. Not thread-safe (one driver thread), except
// loop().submit()/cancel() as EngineLoop documents.
class DistEngine : public EngineHandle {
 public:
  virtual const ModelConfig& model_config() const = 0;
  virtual std::shared_ptr<const Model> model() const = 0;
  virtual const Plan& plan() const = 0;
  virtual std::string_view backend() const = 0;
  virtual int world_size() const = 0;
  virtual int num_replicas() const = 0;  // plan.dp
  virtual int threads_per_rank() const = 0;
  int num_kv_blocks() const override = 0;  // per rank (equal on all ranks)
  const EngineConfig& config() const override = 0;
  // Start-up report lines (policy, threshold, weight bytes per rank for base and shift shards);
  // empty for plans without sp.
  virtual const std::vector<std::string>& start_info() const = 0;
  virtual std::string policy() const = 0;  // LayoutPolicy::describe()
  virtual ShiftStats shift_stats() const = 0;

  // Replica 0's scheduler, loop and clock (drive them directly for live, single-replica use,
  // e.g. streaming with loop().on_token; replicas 1.. only run through run()).
  Scheduler& scheduler() override = 0;
  EngineLoop& loop() override = 0;
  Clock& clock() override = 0;
  // Replica 0's metrics, plus, after run(), the requests and steps of the other replicas (their
  // times shifted onto this clock by the difference of the replicas' run() start times).
  Metrics& metrics() override = 0;

  // Runs `requests` (arrival_s relative to now; ids unique) to completion on their replicas
  // (id % dp); returns every finished sequence (rejected ones included) in finishing order.
  // Throws loom::Error if the group failed during the run.
  virtual std::vector<Sequence> run(std::vector<Request> requests) = 0;
};

// Runs the engine described by `options` on every rank this process hosts (see above), calling
// `driver` on world rank 0. Throws loom::Error on a user error (naming the value and limit) or
// when a rank failed.
void run_distributed(const DistOptions& options, const std::function<void(DistEngine&)>& driver);

// The replica that runs request `id` under dp replicas.
inline int replica_of(RequestId id, int dp) { return int(((id % dp) + dp) % dp); }

}  // namespace loom
