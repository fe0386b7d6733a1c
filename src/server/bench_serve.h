// `loom bench serve`: replays a request trace against a running OpenAI-compatible server (loom
// serve, vLLM, llama.cpp's server) over HTTP and measures what its clients see.
//
// Each request is sent at its arrival time (relative to the start of the run) on a client
// thread of its own (at most max_concurrency in flight when set: later ones wait for a slot,
// as vLLM's --max-concurrency does), as a streaming POST /v1/completions with the prompt as a
// list of `prompt_len` random token ids, max_tokens = output_len and ignore_eos: true (a vLLM
// extension loom supports), temperature 0, stream_options.include_usage. Lengths are clipped to
// the server's max_model_len (from /v1/models when it says) like TraceOptions::clip.
//
// Definitions (vLLM's benchmarks/benchmark_serving.py):
//   TTFT    = time of the first chunk with non-empty text - time the request was sent
//   ITL     = gaps between consecutive chunks with text (every gap of every request)
//   TPOT    = (latency - TTFT) / (output_tokens - 1), per request with output_tokens > 1
//   E2E     = latency: last byte received - time sent
//   output_tokens = usage.completion_tokens (else the number of text chunks)
//   duration = end of the last request - start of the run
//   request throughput = completed / duration; output token throughput = sum(output) / duration;
//   total token throughput = (sum(prompt) + sum(output)) / duration
//   goodput = completed requests meeting every given SLO (TTFT <= slo_ttft_ms, TPOT <=
//             slo_tpot_ms; TPOT counts as 0 for one-token outputs) / duration
// Distributions: mean, median, p90, p99 (numpy-default percentiles, engine/metrics.h), in ms.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/tiers.h"
#include "engine/metrics.h"
#include "engine/trace.h"

namespace loom::server {

struct BenchServeOptions {
  std::string url = "http://127.0.0.1:8000";  // scheme://host:port
  std::string model;                          // "" -> the first model of /v1/models
  std::vector<TraceRequest> trace;            // arrival_s relative to the run's start
  double slo_ttft_ms = 0, slo_tpot_ms = 0;    // 0 = no objective
  int max_concurrency = 0;                    // 0 = no limit
  uint64_t seed = 0;                          // token ids of the synthetic prompts
  bool progress = false;                      // progress bar on stderr
  double request_timeout_s = 600;
  // SLO tiers (Nitsum): each request is sent with the "tier" assign_tiers(tier_weights) gives it,
  // and the report counts per tier the requests meeting both of its targets.
  cluster::SloTiers tiers;
  std::vector<double> tier_weights;
};

struct BenchRequestResult {
  int index = 0;
  int prompt_len = 0;
  int max_tokens = 0;
  bool clipped = false;
  bool success = false;
  std::string error;
  int http_status = 0;
  double scheduled_s = 0;  // arrival time in the trace
  double sent_s = 0;       // when it was sent (since the start of the run)
  double ttft_s = -1;
  double latency_s = -1;
  std::vector<double> itl_s;
  int num_chunks = 0;      // chunks with text
  int output_tokens = 0;
  int tier = -1;  // BenchServeOptions::tiers index, -1 when none
  std::optional<double> tpot_s() const;
};

struct BenchTierResult {
  std::string name;
  int64_t requests = 0, met = 0;
  double goodput = 0;  // met / duration
};

struct BenchServeReport {
  std::vector<BenchRequestResult> requests;
  std::string model;
  double duration_s = 0;
  int64_t completed = 0, failed = 0, clipped = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  std::optional<int64_t> good;      // when an SLO was given
  std::optional<double> goodput;    // good / duration
  double slo_ttft_ms = 0, slo_tpot_ms = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::vector<BenchTierResult> tiers;  // empty without tiers

  nlohmann::json to_json(bool with_requests = true) const;
  void write_csv(std::ostream& os) const;  // one row per request, header first
  std::string summary_text() const;       // the table printed at the end of a run
};

// Runs the benchmark. Throws loom::Error when the server cannot be reached or /v1/models is
// unusable; failed requests are counted, not thrown.
BenchServeReport run_bench_serve(const BenchServeOptions& options);

// Builds the report from per-request results (exposed for tests).
BenchServeReport summarize_bench(std::vector<BenchRequestResult> results, double duration_s,
                                 double slo_ttft_ms, double slo_tpot_ms);

// Incremental parser of a text/event-stream body: feed bytes, get each event's data payload
// (the "data:" lines of one event joined by '\n'; comments and other fields ignored).
class SseParser {
 public:
  template <typename F>
  void feed(const char* data, size_t n, F&& on_data) {
    buf_.append(data, n);
    size_t pos, after = 0;
    while ((pos = next_event_end(&after)) != std::string::npos) {
      std::string ev = buf_.substr(0, pos);
      buf_.erase(0, after);
      std::string payload;
      if (event_data(ev, &payload)) on_data(payload);
    }
  }

 private:
  // End of the first complete event (blank line), with *after set past the separator.
  size_t next_event_end(size_t* after) const;
  static bool event_data(const std::string& ev, std::string* payload);
  std::string buf_;
};

}  // namespace loom::server
