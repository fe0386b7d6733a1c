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

// Fits a request of prompt + output tokens into max_context (>= 2) the way a benchmark user
// wants: the output length is kept (it is what decode throughput and TPOT measure) up to
// max_context - 1, and the prompt is cut to what is left (at least 1). Returns whether anything
// was cut.
bool clip_to_context(int* prompt_len, int* output_len, int max_context);

struct TraceOptions {
  // Multiply the arrival rate: inter-arrival times are divided by rate_scale (> 0); times are
  // taken relative to the first arrival, which stays at its time.
  double rate_scale = 1.0;
  int64_t max_requests = -1;  // keep the first N (in file order); -1 = all
  // Context limit (prompt + output); 0 = none. Over it: clip (clip_to_context) when clip is set,
  // else mark too_long.
  int max_context = 0;
  bool clip = false;
};

// kAuto picks by extension and header: .jsonl -> Mooncake; CSV header `arrived_at,...` -> Azure,
// `num_prefill_tokens,...` -> lengths; a path "servegen:DIR[@START:DURATION]" is a ServeGen
// workload (read_servegen below: the window START..START+DURATION seconds, default 0:600, every
// client's rate times options.rate_scale; max_requests and the context limit as for the others).
std::vector<TraceRequest> read_trace(const std::string& path, const TraceOptions& options = {},
                                     TraceFormat format = TraceFormat::kAuto);
std::vector<TraceRequest> read_azure_csv(const std::string& path, const TraceOptions& options = {});
std::vector<TraceRequest> read_mooncake_jsonl(const std::string& path,
                                              const TraceOptions& options = {});
std::vector<TraceRequest> read_lengths_csv(const std::string& path,
                                           const TraceOptions& options = {});

// ServeGen (../shared/data/servegen/README.md; the Nitsum paper's second workload set, 5.1): per-
// client statistics of production serving, one pair of files per client N in DIR:
//   chunk-N-trace.csv    `timestamp_s,rate_rps,cv,pattern,arg1,arg2` per 600 s window (no header):
//                        the client's mean rate and its fitted inter-arrival distribution (Gamma
//                        shape arg1, Weibull shape arg1, Exponential; empty when it sent nothing);
//   chunk-N-dataset.json {"<timestamp_s>": {"input_tokens": "{len: p, ...}", "output_tokens": ...}}
//                        every 6 h, the lengths' empirical distributions as Python dict literals.
// The workload over [start_s, start_s + duration_s) is the superposition of the clients:
//   - arrivals: in each window's overlap with the range, a client sends its rate x rate_scale x
//     overlap requests, rounded by carrying the fraction from window to window (a client of 0.3
//     rps sends 3 in 10 s of three windows: floor(0.9) = 0, floor(1.8) - 0 = 1, ...); their times
//     are the overlap cut by n + 1 gaps drawn from the window's distribution shape (the scale
//     drops out: the count is the rate's, the burstiness the shape's; for Exponential gaps this is
//     exactly a Poisson process conditioned on its count);
//   - lengths: each request's prompt and output lengths drawn from the client's distributions at
//     the nearest earlier 6 h timestamp that has data (else the nearest later one). A client whose
//     dataset file is missing (the README's MISSING.txt: the busiest clients' files were too large
//     for the snapshot) draws from a client picked among those with a dataset, weighted by their
//     requests in the range (borrow_lengths), or is left out (not borrow_lengths);
//   - times relative to start_s, sorted (ties by client number); every random source seeded per
//     client from `seed`, so adding a client to DIR leaves the others' requests as they were.
// Malformed files throw loom::Error naming the file, the line or key, and the value.
struct ServeGenOptions {
  double start_s = 0;
  double duration_s = 600;
  double rate_scale = 1.0;
  uint64_t seed = 1;
  bool borrow_lengths = true;
};
struct ServeGenStats {
  int clients = 0;            // trace files read
  int active_clients = 0;     // with requests in the range
  int borrowing_clients = 0;  // active, lengths drawn from others (no dataset)
  int64_t requests = 0, borrowed_requests = 0, dropped_requests = 0;  // dropped: no lengths, not borrowing
  double mean_rate_rps = 0;   // requests / duration_s
};
std::vector<TraceRequest> read_servegen(const std::string& dir, const ServeGenOptions& options,
                                        ServeGenStats* stats = nullptr);
// The total mean rate of DIR's clients over [start_s, start_s + duration_s) at rate_scale 1
// (requests per second), to pick a rate_scale for a target rate.
double servegen_mean_rate(const std::string& dir, double start_s, double duration_s);
// "servegen:DIR[@START:DURATION]" -> {DIR, START, DURATION}; throws loom::Error naming the text.
ServeGenOptions parse_servegen_spec(const std::string& spec, std::string* dir);

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
