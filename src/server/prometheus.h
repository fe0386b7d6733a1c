// Prometheus text exposition (format 0.0.4) of loom serve's metrics, named as vLLM names them
// where vLLM has the metric (so existing dashboards and scrapers work):
//   vllm:time_to_first_token_seconds     histogram  arrival -> first token
//   vllm:inter_token_latency_seconds     histogram  gaps between consecutive tokens
//   vllm:time_per_output_token_seconds   histogram  the same gaps, under older vLLM's name
//   vllm:e2e_request_latency_seconds     histogram  arrival -> finish (stop or length)
//   vllm:num_requests_running / _waiting gauges
//   vllm:kv_cache_usage_perc             gauge, fraction in [0, 1] (vLLM's unit despite the
//                                        name); vllm:gpu_cache_usage_perc, its older name
//   vllm:prompt_tokens_total, vllm:generation_tokens_total       counters
//   vllm:request_success_total{finished_reason="stop"|"length"|"abort"}  counter
//   vllm:num_preemptions_total           counter
// and loom's own: loom:step_plan_info{plan="..."} (plan of the last step, 1), loom:kv_blocks_used
// and loom:kv_blocks_total (exact block counts), loom:requests_failed_total{reason="error"|
// "rejected"}, loom:requests_rejected_overload_total (429s).
// Every vllm: series carries the label model_name, as vLLM's do. Bucket bounds are vLLM's.
// Thread-safety: Histogram and Counter are not synchronised; ServingEngine guards them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // upper bounds, increasing; +Inf implied
  void observe(double v);
  // "# HELP/# TYPE" lines and the _bucket{le=...}, _sum and _count series.
  void render(std::string* out, const std::string& name, const std::string& help,
              const std::string& labels) const;  // labels: `model_name="x"` or ""
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative), last = +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

// vLLM's bucket bounds (vllm/engine/metrics.py).
std::vector<double> ttft_buckets();
std::vector<double> itl_buckets();
std::vector<double> e2e_buckets();

// A label value escaped for the text format (backslash, quote, newline).
std::string prom_escape(const std::string& v);
// A sample value: integers without a fraction, others with enough digits; NaN/Inf spelled as
// the format wants.
std::string prom_number(double v);

}  // namespace loom::server
