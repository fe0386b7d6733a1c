// Discrete-event simulator: the engine's own Scheduler (src/engine/scheduler.h) driven through
// the StepExecutor and Clock interfaces, with step times from the CostModel.
//
// Events are ordered by (time, priority, sequence number): at equal times step completions
// (priority 0) apply before arrivals (priority 1), and ties within a priority keep insertion
// order, so a run is a pure function of its inputs. Every random source has its own seed (the
// trace generators in engine/trace.h take theirs; DP routing is round-robin, not random).
//
// Plans are loom::Plan values priced through CostModel::prepare (the engine's validate() and
// rank_layout()). The plan of each step is chosen by the engine's own layout policy
// (engine/policy.h: fixed, shift, cycle:N, alternate, random:SEED), on the same
// StepBatch the engine's loop hands it, and the step carries that plan's name
// (StepMetrics::plan), as in the engine.
// DP (SimConfig::dp_mode): independent replicas, each its own Scheduler, KV cache (memory model:
// HBM * utilisation - weights - activation reserve, in blocks) and clock, or loom's lockstep
// replicas under one scheduler; either way request `id` runs on replica id % dp (the engine's
// routing, dist_engine.h replica_of). The plan of each step is chosen, and the scheduler's KV
// pools re-homed on a placement change, by the engine's own PlanControl (plan_executor.h).
// Shift: each step runs the base (SP x TP) config when it schedules more than the threshold's
// tokens, the shift config otherwise (Shift 3.3 Algorithm 2); both share one KV placement, so
// switching is free (Shift 3.3.1) and the memory model holds both weight copies.
// Any other switch between plans whose KV placements differ migrates the KV of every live
// sequence before the step (stop-and-migrate, Nitsum 3.2.2), priced with the bytes of
// kv_migration() (CostModel::switch_s).
// Seesaw (../shared/papers/004): the Scheduler runs the phases (prefill steps under the first
// plan, decode steps under the second, the KV of prefilled sequences in the CPU tier of
// SimConfig::cpu_kv_bytes); a step's swaps are priced over the GPUs' host links, overlapped with
// the step (W10), and a transition reloads the weights a GPU did not hold (CostModel::reshard_s).
// The two plans are never resident together: the memory model takes the tighter of the two.
// SiDP (../shared/papers/001; --policy sidp | sidp:was | sidp:cas over dp=D,weights=owner), as
// the engine runs it whatever dp_mode says: with a WaS plan under fixed, sidp:was or sidp
// (sidp_independent), the engine's own SidpCoordinator (engine/sidp_coordinator.h: one Scheduler
// per replica, own steps, the policy's observations once per round of D own steps, draining into
// lockstep, the group step, the records) on its event clock (PricedSidpBackend), each step priced
// by price_sidp over each replica's rows in it (an own step: that replica's alone), the policy given
// the simulated time through LayoutPolicy::advance for its window in seconds. A CaS-only set
// (sidp:cas) steps in lockstep under one scheduler. One StepMetrics per replica and step
// (StepMetrics::replica, ::lockstep; SimResult::step_replica) as the engine records them; PlanUse
// counts an own step or a group step as one step of its mode's plan.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "engine/metrics.h"
#include "engine/policy.h"
#include "engine/trace.h"
#include "sim/cost_model.h"

namespace loom::sim {

// How DP replicas run.
enum class DpMode {
  // Independent engines (vLLM-class GPU serving): each replica its own scheduler, KV cache and
  // clock; the plans of a set share one DP degree.
  Independent,
  // loom's engine (engine/dist_engine.h): one scheduler for the world whose per-step limits are
  // the replica's times the largest DP degree of the set, KV pools per replica; each step the
  // replicas compute their token share (sequence id % dp) together and the step lasts as long
  // as the busiest replica; a plan set may mix DP degrees.
  Lockstep,
};

struct SimConfig {
  Plan plan;  // the initial plan
  // The rest of the plan set a policy may switch to (same rank count; parallel/plan_set.h). Their
  // weights are resident on every rank (memory model), like those of a switching Shift policy's
  // two configs.
  std::vector<Plan> more_plans;
  std::string policy = "fixed";    // a layout policy of engine/policy_registry.h (fixed, shift, sidp, seesaw, ...)
  int64_t shift_threshold = 256;   // tokens per step above which "shift" runs the base
  // SiDP (--policy sidp over a dp=D,weights=owner plan): the threshold in sequences per replica;
  // < 0: from the cost model (the crossover, derive_sidp_crossover in sim/sidp_cost.h) at the
  // trace's mean decode context.
  int64_t sidp_threshold = -1;
  // SiDP: the policy's decision window in simulated seconds (engine/policy.h; §4.3: switches
  // "empirically minute-level at the tail of a job"); 0: kSidpWindow observations.
  double sidp_window_s = 60;
  DpMode dp_mode = DpMode::Independent;
  int max_num_seqs = 256;           // per replica (vLLM's default)
  int max_tokens_per_step = 8192;   // chunked-prefill token budget per step, per replica
  bool enable_chunked_prefill = true;
  int max_model_len = 0;            // 0: the model's context length
  int block_size = 16;
  // KV blocks of one replica; 0: from the memory model (MemoryPlan::kv_capacity_tokens, at most
  // what max_num_seqs sequences of max_model_len can use). validate-engine gives the engine's.
  int64_t num_blocks = 0;
  // Seesaw (policies seesaw / prefill-first / decode-first, engine/seesaw.h): the CPU KV tier in
  // bytes (the scheduler holds this many bytes of the whole model's KV: CostModel::kv_bytes_per_token).
  double cpu_kv_bytes = 0;
  // Called every `progress_every` steps with (simulated time, requests finished, total).
  std::function<void(double, int64_t, int64_t)> progress;
  // Called for every priced step with its plan, each replica's work (one entry unless lockstep)
  // and its cost (experiments re-price steps under other variants).
  std::function<void(const PricedPlan&, const std::vector<std::vector<SeqWork>>&, const StepCost&)> on_step;
  // Called with every step's batch once its plan is named (SiDP replicas: each replica's own step,
  // or its part of a group step before the policy names the group's plan); validate-engine records
  // the batches' sequences with it.
  std::function<void(const StepBatch&)> on_batch;
  int64_t progress_every = 20000;

  // The plan set: `plan`, `more_plans`, and what the policy adds (engine/policy.h policy_plans:
  // the shift config of an sp x tp plan for shift / alternate / random); no repeats.
  std::vector<Plan> plan_set() const;
  // "sp=8, policy shift(threshold=256)" for reports.
  std::string describe() const;
};

struct PlanUse {
  std::string config;  // Plan::to_string() of the plan that ran the steps
  int64_t steps = 0;
  double busy_s = 0;
  int64_t switches_to = 0;      // switches into this plan
  int64_t kv_bytes_moved = 0;   // by those switches (KvMigration::total_bytes)
  double switch_s = 0;          // time the migrations took
};

struct SimResult {
  Metrics metrics;  // per request and per step (steps of every replica, by start time)
  MetricsSummary summary;
  MemoryPlan memory;
  int num_replicas = 1;             // of the initial plan
  int64_t num_blocks_per_replica = 0;
  double makespan_s = 0;         // first arrival to last finish
  double total_tokens_per_s = 0;  // (prompt + output tokens) / makespan
  double wall_s = 0;             // host time of the run
  double sim_requests_per_s = 0;  // requests simulated per host second
  std::vector<PlanUse> plan_use;  // steps, busy time and switches per plan
  int64_t num_switches = 0;       // plan changes between consecutive steps of a replica
  int64_t kv_bytes_moved = 0;     // by all of them
  std::vector<int> step_replica;  // replica of metrics.steps()[i] (0 for a lockstep engine's steps)
  int64_t policy_threshold = -1;  // the threshold the policy ran with (resolve_policy_params; -1: none)
  std::string policy_threshold_unit;  // "tokens" (shift), "sequences per replica" (sidp's B_th)
};

class Simulator {
 public:
  Simulator(CostModel model, SimConfig config);
  const CostModel& cost_model() const { return model_; }
  const SimConfig& config() const { return config_; }
  // Runs the trace to completion. Throws loom::Error when the plan does not fit the node.
  SimResult run(const std::vector<TraceRequest>& trace) const;

 private:
  CostModel model_;
  SimConfig config_;
};

// Outputs: summary JSON (summary, memory, plan use, speed), per-request CSV, and SVG plots.
nlohmann::json summary_json(const SimResult& r, const Simulator& sim);
void write_requests_csv(const SimResult& r, std::ostream& os);
// TTFT and TPOT CDFs (ms, log x axis).
std::string svg_latency_cdf(const SimResult& r);
// Output and total tokens per second over simulated time, in `bins` bins.
std::string svg_throughput(const SimResult& r, int bins = 100);
// The plan over simulated time: one row per plan of the set, a band where steps ran under it
// (sim run --out writes it as plan_over_time.svg).
std::string svg_plan_per_step(const SimResult& r);

}  // namespace loom::sim
