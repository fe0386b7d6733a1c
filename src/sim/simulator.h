// Discrete-event simulator: the engine's own Scheduler (src/engine/scheduler.h) driven through
// the StepExecutor and Clock interfaces, with step times from the CostModel.
//
// Events are ordered by (time, priority, sequence number): at equal times step completions
// (priority 0) apply before arrivals (priority 1), and ties within a priority keep insertion
// order, so a run is a pure function of its inputs. Every random source has its own seed (the
// trace generators in engine/trace.h take theirs; DP routing is round-robin, not random).
//
// DP: `plan.dp` replicas, each its own Scheduler, KV cache (memory model: HBM * utilisation -
// weights - activation reserve, in blocks) and clock; arrivals go to replicas round-robin.
// Shift: each step runs the base (SP x TP) config when it schedules more than the threshold's
// tokens, the shift (full TP) config otherwise (Shift 3.3 Algorithm 2); both share one KV
// placement, so switching is free (Shift 3.3.1) and the memory model holds both weight copies.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "engine/metrics.h"
#include "engine/trace.h"
#include "sim/cost_model.h"

namespace loom::sim {

struct SimConfig {
  SimPlan plan;
  int max_num_seqs = 256;           // per replica (vLLM's default)
  int max_tokens_per_step = 8192;   // chunked-prefill token budget per step
  bool enable_chunked_prefill = true;
  int max_model_len = 0;            // 0: the model's context length
  int block_size = 16;
  // Called every `progress_every` steps with (simulated time, requests finished, total).
  std::function<void(double, int64_t, int64_t)> progress;
  int64_t progress_every = 20000;
};

struct PlanUse {
  std::string config;  // ParallelConfig::name()
  int64_t steps = 0;
  double busy_s = 0;
};

struct SimResult {
  Metrics metrics;  // per request and per step (steps of every replica, by start time)
  MetricsSummary summary;
  MemoryPlan memory;
  int num_replicas = 1;
  int64_t num_blocks_per_replica = 0;
  double makespan_s = 0;         // first arrival to last finish
  double total_tokens_per_s = 0;  // (prompt + output tokens) / makespan
  double wall_s = 0;             // host time of the run
  double sim_requests_per_s = 0;  // requests simulated per host second
  std::vector<PlanUse> plan_use;  // steps and busy time per config
  std::vector<int> step_replica;  // replica of metrics.steps()[i]
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
// Config of every step over time (one row per config), with the step's token count.
std::string svg_plan_per_step(const SimResult& r);

}  // namespace loom::sim
