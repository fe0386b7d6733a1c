// The simulator against the engine (`loom sim validate-engine`): the same requests (ids, synthetic
// prompt ids from one seed, prompt and output lengths, arrival times) run through the real
// engine (engine/dist_engine.h, ranks as threads of this process) and through the simulator
// calibrated by a profile of this machine (sim/profile.h), with the same scheduler limits, KV
// cache size in blocks, plan, layout policy and Shift threshold; then, per plan, the relative
// error (simulated - engine) / engine of throughput, TTFT p50/p90, TPOT p50/p90 and step count.
//
// SiDP replicas stepping on their own also compare step records (PlanValidation::step_records).
//
// Timings are the engine's wall clock on a shared machine: the errors are a measurement, not a
// test assertion (bench/sim_fidelity.cpp records them; tests check the machinery).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/metrics.h"
#include "engine/trace.h"
#include "sim/profile.h"

namespace loom::sim {

// One plan to compare: a plan string (parallel/plan.h) run under a layout policy, or a plan set
// of several (Seesaw's c_p and c_d) that the policy chooses from.
struct EnginePlan {
  std::string plan;              // "tp=2", "dp=2", "sp=2,tp=2", "kvp=2,tpa=1", "pp=2", ...
  std::vector<std::string> more_plans;  // the rest of the plan set (Seesaw: c_d after c_p = plan)
  // a layout policy of engine/policy_registry.h: fixed | shift | cycle:N | alternate | random:SEED |
  // sidp | sidp:was | sidp:cas | seesaw | prefill-first | decode-first
  std::string policy = "fixed";
  std::vector<std::string> plans() const;  // plan, then more_plans
  std::string label() const;               // "tp=2", "sp=2 @shift", "pp=2|tp=2 @seesaw"
  // "PLAN" or "PLAN@POLICY" (e.g. "sp=2@shift"), several plans of one set joined by '|'
  // ("pp=2|tp=2@seesaw"); `default_policy` when no @. Names a bad plan or policy, and a policy
  // validate-engine cannot compare (Nitsum's pool), in one line (loom::Error) before anything loads.
  static EnginePlan parse(const std::string& text, const std::string& default_policy = "fixed");
};

struct EngineValidationOptions {
  std::string model_path;
  std::vector<TraceRequest> trace;  // arrival times, prompt and output lengths
  uint64_t seed = 1;                // synthetic prompt token ids
  int max_num_seqs = 16;
  int max_tokens_per_step = 256;
  int block_size = 16;
  int64_t kv_cache_bytes = 64 << 20;  // per rank: both sides then hold the same number of blocks
  int max_model_len = 0;              // 0: the model's context
  int64_t shift_threshold = -1;       // policy shift; < 0: derived from the profile's cost model
  // policy sidp: B_th in sequences per replica; < 0: derived from the profile's cost model at the
  // trace's mean decode context (as `loom sim run` does), the same value on both sides
  int64_t sidp_threshold = -1;
  // Seesaw's CPU KV tier (per host, both sides); 0: kv_cache_bytes times the plan's ranks
  int64_t cpu_kv_bytes = 0;
  // When set, each plan's step records of both sides (Metrics::write_steps_csv) go to
  // DIR/<i>_<plan>_engine.csv and DIR/<i>_<plan>_sim.csv (i: the plan's position, from 1), to set
  // step beside step where a metric's error comes from.
  std::string steps_dir;
};

// What the two sides did with one plan.
struct MetricComparison {
  std::string name;  // "throughput_tok_s", "ttft_p50_ms", ...
  double engine = 0, simulated = 0;
  double error() const;  // (simulated - engine) / engine; NaN when engine is 0 or either is NaN
};

struct PlanValidation {
  EnginePlan plan;
  std::string backend;       // the engine's communicator
  int ranks = 0;
  int threads_per_rank = 0;
  int64_t num_kv_blocks = 0;  // the engine's scheduler blocks under the plan (the simulator uses them)
  int64_t shift_threshold = -1;  // what both sides ran with (policy shift)
  int64_t sidp_threshold = -1;   // what both sides ran with (policy sidp: B_th)
  int64_t cpu_kv_bytes = 0;      // Seesaw's CPU tier both sides ran with (0: none)
  std::vector<MetricComparison> metrics;  // throughput, TTFT p50/p90, TPOT p50/p90, steps
  // Where an error comes from (not in the medians above): median step duration of decode-only
  // steps and of steps with prefill tokens, and the time between steps (scheduling, idle).
  std::vector<MetricComparison> diagnostics;
  // With LOOM_OP_TIMING=1 (core/op_timing.h): seconds over the whole run by operator class, world
  // rank 0's engine time (exclusive; collectives include waiting for the slower ranks) against
  // the simulator's priced StepCost parts: matmul / gemm, attention, elementwise, comm (engine:
  // collectives + the step descriptor), overhead (engine: scheduling, sampling and the token
  // gather, and the rest of the executor's step), and the sum of step durations. Empty when off.
  std::vector<MetricComparison> op_breakdown;
  // The requests both sides completed: same ids, prompt lengths and output lengths.
  int64_t num_requests = 0;
  bool same_requests = false;
  std::string request_mismatch;  // the first difference, when not the same
  MetricsSummary engine_summary, simulated_summary;
  std::vector<std::pair<std::string, int64_t>> engine_plan_steps, simulated_plan_steps;  // steps per plan name
  // SiDP replicas stepping on their own (engine/sidp_coordinator.h): the engine run once more on the
  // simulator's clock (DistOptions::sidp_priced_clock: every step still runs on the ranks, its end
  // time is the cost model's price), step record by step record against the simulator: replica,
  // lockstep flag, plan, start and end, the batch's sequences and their token counts. Both sides run
  // the same coordinator, so they are identical; -1 records: not compared (every other plan).
  int64_t step_records = -1;
  bool step_records_identical = false;
  std::string step_record_mismatch;  // the first difference, when not identical
  double engine_wall_s = 0, sim_wall_s = 0;

  double median_abs_error() const;
  double max_abs_error() const;
};

// Runs every plan on both sides. `progress` (optional) gets one line per plan.
std::vector<PlanValidation> validate_engine(const MachineProfile& profile, const EngineValidationOptions& options,
                                            const std::vector<EnginePlan>& plans,
                                            const std::function<void(const std::string&)>& progress = {});

nlohmann::json to_json(const PlanValidation& v);
// The table: one block per plan, one line per metric (engine, simulated, error).
std::string to_text(const std::vector<PlanValidation>& v);

}  // namespace loom::sim
