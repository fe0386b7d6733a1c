// Serving metrics: per-request latencies and per-step counters, with percentile summaries.
//
// Definitions (all times in seconds on the loop's Clock; reports convert to ms where named _ms):
//   TTFT  = first_token - arrival
//   ITL   = differences of consecutive token times (n_out - 1 values)
//   TPOT  = (e2e - ttft) / (n_out - 1)   (undefined, not reported, when n_out < 2)
//   e2e   = finish - arrival
// Percentiles: linear interpolation between closest ranks, numpy's default ("linear"):
//   sorted x[0..n-1], h = (n-1) * p/100, result = x[floor(h)] + (h - floor(h)) *
//   (x[floor(h)+1] - x[floor(h)]). p in [0, 100]. Empty input -> NaN.
// Not thread-safe; written by the loop thread.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "engine/step.h"

namespace loom {

// numpy-default percentile (see above). Does not modify `values`.
double percentile(std::vector<double> values, double p);

struct Distribution {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // NaN when count == 0
};
Distribution summarize(const std::vector<double>& values);
nlohmann::json to_json(const Distribution& d);

struct RequestMetrics {
  RequestId id = 0;
  int priority = 0;
  int prompt_len = 0;
  std::optional<Slo> slo;
  double arrival_s = 0;
  double first_token_s = -1;      // -1: no token yet
  std::vector<double> token_s;    // time of every output token
  double finish_s = -1;           // -1: not finished
  FinishReason finish_reason = FinishReason::kNone;
  int num_preemptions = 0;

  int num_output() const { return int(token_s.size()); }
  double ttft_s() const { return first_token_s - arrival_s; }  // valid when num_output() > 0
  double e2e_s() const { return finish_s - arrival_s; }
  std::vector<double> itl_s() const;
  std::optional<double> tpot_s() const;  // nullopt when n_out < 2
  // SLO attainment: every set objective met (TTFT and TPOT); nullopt without an SLO.
  std::optional<bool> slo_met() const;
};

struct StepMetrics {
  int64_t index = 0;
  double start_s = 0, end_s = 0;
  int num_tokens = 0, num_seqs = 0;
  int num_prefill_tokens = 0, num_decode_tokens = 0;
  int kv_blocks_used = 0;  // after scheduling (what the step ran with)
  int num_preempted = 0;
  std::string plan;  // StepBatch::plan
  // SiDP replicas (sidp_coordinator.h) record one step per replica: the replica (-1: every other
  // engine, whose steps are the whole group's) and whether it was its part of a lockstep step of the
  // group (CaS) rather than a step of its own (WaS).
  int replica = -1;
  bool lockstep = false;
};

struct MetricsSummary {
  int64_t num_requests = 0, num_completed = 0, num_rejected = 0, num_aborted = 0, num_errors = 0;
  int64_t num_output_tokens = 0, num_prompt_tokens = 0, num_steps = 0, num_preemptions = 0;
  double duration_s = 0;             // first arrival to last finish
  double output_tokens_per_s = 0;    // num_output_tokens / duration_s
  double requests_per_s = 0;         // completed / duration_s
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;  // over completed (stop/length) requests
  std::optional<double> slo_attainment;  // fraction of completed requests with an SLO that met it
};

class Metrics {
 public:
  void on_arrival(const Request& r, double t_s);
  void on_token(RequestId id, double t_s);
  // Records the finish (any reason, including rejection at arrival).
  void on_finish(const Sequence& s, double t_s);
  void on_step(const StepMetrics& m) { steps_.push_back(m); }

  const std::vector<RequestMetrics>& requests() const { return requests_; }  // arrival order
  const std::vector<StepMetrics>& steps() const { return steps_; }
  const RequestMetrics* find(RequestId id) const;

  MetricsSummary summary() const;
  // {"summary": {...}, "requests": [...], "steps": [...]} (lists only when asked).
  nlohmann::json to_json(bool with_requests = false, bool with_steps = false) const;
  // One row per request / per step, with a header line.
  void write_requests_csv(std::ostream& os) const;
  void write_steps_csv(std::ostream& os) const;

 private:
  RequestMetrics* find_mut(RequestId id);
  std::vector<RequestMetrics> requests_;
  std::unordered_map<RequestId, size_t> index_;
  std::vector<StepMetrics> steps_;
};

nlohmann::json to_json(const MetricsSummary& s);

}  // namespace loom
