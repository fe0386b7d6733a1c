// Request traces: readers for the public traces (../shared/data/README.md) and synthetic
// arrival / length generators, all producing the same TraceRequest list.
//
// Formats:
//   Azure CSV   header `arrived_at,num_prefill_tokens,num_decode_tokens` (seconds from start)
//   Mooncake    JSONL, one object per line: `timestamp` (ms from start), `input_length`,
//               `output_length`, `hash_ids` (one id per 512-token prefix block)
//   Lengths CSV header starting `num_prefill_tokens,num_decode_tokens` (arXiv summarization;
//               no arrival times: all arrive at t = 0 unless assign_arrivals() is used)
// Malformed input throws loom::Error "<file>:<line>: field '<name>': <what>, found '<text>'".
// Randomness: every generator takes its own seed (STYLE.md), so a run repeats exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"

namespace loom {

inline constexpr int kMooncakeHashBlockTokens = 512;

struct TraceRequest {
  double arrival_s = 0;
  int prompt_len = 0;
  int output_len = 0;
  std::vector<int64_t> prefix_hashes;  // one per hash_block_tokens prompt tokens (Mooncake)
  int hash_block_tokens = 0;           // 0 when the trace has no prefix hashes
  bool clipped = false;   // lengths were reduced to fit TraceOptions::max_context
  bool too_long = false;  // prompt + output > max_context and clipping was off: reject alone
};

enum class TraceFormat { kAuto, kAzureCsv, kMooncakeJsonl, kLengthsCsv };

struct TraceOptions {
  // Multiply the arrival rate: inter-arrival times are divided by rate_scale (> 0); times are
  // taken relative to the first arrival, which stays at its time.
  double rate_scale = 1.0;
  int64_t max_requests = -1;  // keep the first N (in file order); -1 = all
  // Context limit (prompt + output); 0 = none. Over it: clip (prompt cut to max_context - 1 at
  // most, then output to max_context - prompt) when clip is set, else mark too_long.
  int max_context = 0;
  bool clip = false;
};

// kAuto picks by extension and header: .jsonl -> Mooncake; CSV header `arrived_at,...` -> Azure,
// `num_prefill_tokens,...` -> lengths.
std::vector<TraceRequest> read_trace(const std::string& path, const TraceOptions& options = {},
                                     TraceFormat format = TraceFormat::kAuto);
std::vector<TraceRequest> read_azure_csv(const std::string& path, const TraceOptions& options = {});
std::vector<TraceRequest> read_mooncake_jsonl(const std::string& path,
                                              const TraceOptions& options = {});
std::vector<TraceRequest> read_lengths_csv(const std::string& path,
                                           const TraceOptions& options = {});

// Applies rate scaling, max_requests and the context limit of `options` (the readers call it).
void apply_trace_options(std::vector<TraceRequest>* trace, const TraceOptions& options);

// --- synthetic load ---

struct LengthDist {
  enum class Kind { kFixed, kUniform, kNormalClipped, kEmpirical };
  Kind kind = Kind::kFixed;
  int value = 128;            // kFixed
  int min = 1, max = 128;     // kUniform: integers in [min, max]; kNormalClipped: clip range
  double mean = 128, stddev = 0;  // kNormalClipped: round(N(mean, stddev)) clipped to [min, max]
  std::vector<int> samples;   // kEmpirical: drawn uniformly (e.g. a trace's prompt lengths)

  static LengthDist fixed(int v);
  static LengthDist uniform(int lo, int hi);
  static LengthDist normal_clipped(double mean, double stddev, int lo, int hi);
  static LengthDist empirical(std::vector<int> samples);
  int sample(Rng& rng) const;
  void validate() const;  // loom::Error naming the field
};

struct ArrivalSpec {
  enum class Kind { kAllAtZero, kPoisson, kGamma, kBursty };
  Kind kind = Kind::kPoisson;
  double rate_per_s = 1.0;  // mean arrival rate over the whole run (> 0)
  double cv = 1.0;          // kGamma: coefficient of variation of inter-arrival times (> 0)
  // kBursty: deterministic on/off periods starting with `on`; Poisson at
  // rate_per_s * (on_s + off_s) / on_s during on periods, nothing during off periods (so the
  // long-run mean rate is rate_per_s).
  double on_s = 1.0, off_s = 1.0;

  static ArrivalSpec all_at_zero();
  static ArrivalSpec poisson(double rate);
  static ArrivalSpec gamma(double rate, double cv);
  static ArrivalSpec bursty(double rate, double on_s, double off_s);
  void validate() const;
};

// n arrival times (seconds, non-decreasing, the first inter-arrival gap included: the first
// request arrives after one gap, not at 0; kAllAtZero: all 0).
std::vector<double> synth_arrivals(const ArrivalSpec& spec, int64_t n, uint64_t seed);

// n requests: arrivals from `arrivals` (seed arrival_seed), prompt and output lengths from
// their distributions (each its own seed).
std::vector<TraceRequest> synthesize_trace(int64_t n, const ArrivalSpec& arrivals,
                                           uint64_t arrival_seed, const LengthDist& prompt,
                                           uint64_t prompt_seed, const LengthDist& output,
                                           uint64_t output_seed);

// Replaces the arrival times of `trace` (e.g. the arXiv lengths) in order.
void assign_arrivals(std::vector<TraceRequest>* trace, const ArrivalSpec& spec, uint64_t seed);

struct TraceStats {
  int64_t count = 0, num_too_long = 0, num_clipped = 0;
  double duration_s = 0;  // last arrival - first arrival
  double prompt_mean = 0, prompt_median = 0, prompt_p99 = 0;
  double output_mean = 0, output_median = 0, output_p99 = 0;
};
// Medians and p99 by numpy-default linear interpolation (engine/metrics.h percentile()).
TraceStats trace_stats(const std::vector<TraceRequest>& trace);

}  // namespace loom
