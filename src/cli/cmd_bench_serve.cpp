// `loom bench serve`: replay a trace (or synthetic arrivals) against a running server over HTTP
// and report TTFT / TPOT / ITL / E2E latency, throughput and goodput (server/bench_serve.h).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "cluster/tiers.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/json_bounded.h"
#include "core/parse_number.h"
#include "engine/trace.h"
#include "server/bench_serve.h"

namespace loom::cli {

namespace {

struct BenchServeArgs {
  std::string url = "http://127.0.0.1:8000";
  std::string model;
  std::string trace, trace_format = "auto";
  std::string synthetic;  // poisson | gamma | bursty (rate from --rate; also poisson:RATE...)
  double rate = 0;        // requests/s; with --trace: replace the trace's arrivals by Poisson at R
  double rate_scale = 1.0;
  double cv = 2.0;                 // gamma
  double burst_on_s = 1.0, burst_off_s = 1.0;  // bursty
  int64_t num_requests = 0;        // synthetic: count (default 100); trace: the first N
  std::string input_len = "128", output_len = "32";
  uint64_t seed = 0;
  int max_concurrency = 0;
  double slo_ttft_ms = 0, slo_tpot_ms = 0;
  std::string tiers, tier_mix;  // SLO tiers (Nitsum) and the share of requests per tier
  std::string output_json, output_csv;
  bool no_progress = false;
};

// "N" -> fixed, "A:B" -> uniform integers in [A, B].
LengthDist parse_len(const std::string& flag, const std::string& v) {
  const std::string what = cat(flag, " ", text_excerpt(v, 32), ": a length");
  const size_t c = v.find(':');
  if (c == std::string::npos) return LengthDist::fixed(int(parse_int(v, what, 1, 1 << 22)));
  const int lo = int(parse_int(v.substr(0, c), what, 1, 1 << 22)), hi = int(parse_int(v.substr(c + 1), what, 1, 1 << 22));
  if (hi < lo) fail(flag, " range ", text_excerpt(v, 32), " must be A:B with A <= B");
  return LengthDist::uniform(lo, hi);
}

ArrivalSpec parse_arrivals(const BenchServeArgs& a, std::string kind) {
  double rate = a.rate;
  // poisson:RATE (the `loom sim` spelling) as well as poisson --rate RATE.
  if (const size_t c = kind.find(':'); c != std::string::npos) {
    rate = parse_double(kind.substr(c + 1), cat("--synthetic ", text_excerpt(kind, 32), ": the rate"), 0, 1e6);
    kind = kind.substr(0, c);
  }
  if (rate <= 0) fail("--synthetic ", kind, " needs --rate R (requests per second, > 0)");
  ArrivalSpec s;
  if (kind == "poisson") s = ArrivalSpec::poisson(rate);
  else if (kind == "gamma") s = ArrivalSpec::gamma(rate, a.cv);
  else if (kind == "bursty") s = ArrivalSpec::bursty(rate, a.burst_on_s, a.burst_off_s);
  else fail("--synthetic must be poisson, gamma or bursty, got '", kind, "'");
  s.validate();
  return s;
}

void run_bench_serve_cmd(const BenchServeArgs& a) {
  if (a.trace.empty() == a.synthetic.empty()) fail("give exactly one of --trace FILE or --synthetic poisson|gamma|bursty");
  if (a.num_requests < 0) fail("--num-requests must be >= 0, got ", a.num_requests);
  if (a.max_concurrency < 0) fail("--max-concurrency must be >= 0, got ", a.max_concurrency);
  if (a.slo_ttft_ms < 0 || a.slo_tpot_ms < 0) fail("--slo-ttft-ms and --slo-tpot-ms must be >= 0");
  server::BenchServeOptions o;
  if (!a.tier_mix.empty() && a.tiers.empty()) fail("--tier-mix needs --tiers");
  if (!a.tiers.empty()) {
    o.tiers = cluster::parse_tiers(a.tiers);
    o.tier_weights = cluster::parse_tier_mix(o.tiers, a.tier_mix);
  }
  o.url = a.url;
  o.model = a.model;
  o.slo_ttft_ms = a.slo_ttft_ms;
  o.slo_tpot_ms = a.slo_tpot_ms;
  o.max_concurrency = a.max_concurrency;
  o.seed = a.seed;
  o.progress = !a.no_progress;
  if (!a.trace.empty()) {
    TraceOptions topt;
    topt.rate_scale = a.rate_scale;
    topt.max_requests = a.num_requests > 0 ? a.num_requests : -1;
    TraceFormat f = TraceFormat::kAuto;
    if (a.trace_format == "azure") f = TraceFormat::kAzureCsv;
    else if (a.trace_format == "mooncake") f = TraceFormat::kMooncakeJsonl;
    else if (a.trace_format == "arxiv" || a.trace_format == "lengths") f = TraceFormat::kLengthsCsv;
    else if (a.trace_format != "auto") fail("--trace-format must be auto, azure, mooncake or arxiv, got '", a.trace_format, "'");
    o.trace = read_trace(a.trace, topt, f);
    // A rate replaces the trace's times (the arXiv lengths have none) with Poisson arrivals.
    if (a.rate > 0) assign_arrivals(&o.trace, ArrivalSpec::poisson(a.rate), a.seed);
  } else {
    const int64_t n = a.num_requests > 0 ? a.num_requests : 100;
    o.trace = synthesize_trace(n, parse_arrivals(a, a.synthetic), a.seed, parse_len("--input-len", a.input_len),
                               a.seed + 1, parse_len("--output-len", a.output_len), a.seed + 2);
  }
  if (o.trace.empty()) fail("the trace has no requests");
  std::fprintf(stderr, "loom bench serve: %zu requests to %s\n", o.trace.size(), a.url.c_str());
  server::BenchServeReport rep = server::run_bench_serve(o);
  std::fputs(rep.summary_text().c_str(), stdout);
  if (rep.failed > 0) {
    for (const auto& r : rep.requests)
      if (!r.success) {
        std::fprintf(stderr, "loom bench serve: %lld requests failed; first error: %s\n", (long long)rep.failed,
                     r.error.c_str());
        break;
      }
  }
  if (!a.output_json.empty()) {
    std::ofstream f(a.output_json);
    if (!f) fail("cannot write --output-json ", a.output_json);
    f << rep.to_json(true).dump(2) << "\n";
  }
  if (!a.output_csv.empty()) {
    std::ofstream f(a.output_csv);
    if (!f) fail("cannot write --output-csv ", a.output_csv);
    rep.write_csv(f);
  }
}

}  // namespace

void register_bench_serve(CLI::App& bench) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* sub = bench.add_subcommand("serve", "Replay a trace against a running OpenAI-compatible server over HTTP");
  sub->add_option("--url", a->url, "Server base URL")->capture_default_str();
  sub->add_option("--model", a->model, "Model name (default: the server's first)");
  sub->add_option("--trace", a->trace, "Trace file: Azure CSV, Mooncake JSONL or arXiv lengths CSV");
  sub->add_option("--trace-format", a->trace_format, "auto, azure, mooncake, arxiv")->capture_default_str();
  sub->add_option("--synthetic", a->synthetic, "Synthetic arrivals: poisson, gamma or bursty (with --rate)");
  sub->add_option("--rate", a->rate, "Requests per second (synthetic; with --trace: Poisson arrivals instead of the trace's)");
  sub->add_option("--rate-scale", a->rate_scale, "Trace: multiply its arrival rate")->capture_default_str();
  sub->add_option("--cv", a->cv, "Gamma: coefficient of variation of inter-arrival times")->capture_default_str();
  sub->add_option("--burst-on-s", a->burst_on_s, "Bursty: seconds on")->capture_default_str();
  sub->add_option("--burst-off-s", a->burst_off_s, "Bursty: seconds off")->capture_default_str();
  sub->add_option("--num-requests,-n", a->num_requests, "Synthetic: requests (default 100); trace: the first N");
  sub->add_option("--input-len,--prompt-len", a->input_len, "Synthetic prompt tokens: N or A:B (uniform)")->capture_default_str();
  sub->add_option("--output-len", a->output_len, "Synthetic output tokens: N or A:B (uniform)")->capture_default_str();
  sub->add_option("--seed", a->seed, "Seed (arrivals; lengths use seed+1, seed+2; prompt ids)")->capture_default_str();
  sub->add_option("--max-concurrency", a->max_concurrency, "Requests in flight at most (0: no limit)")->capture_default_str();
  sub->add_option("--tiers", a->tiers, "SLO tiers (as the server's --tiers): requests carry a \"tier\"; per-tier goodput");
  sub->add_option("--tier-mix", a->tier_mix, "Share of requests per tier: NAME:WEIGHT,... (default: all in the first)");
  sub->add_option("--slo-ttft-ms", a->slo_ttft_ms, "TTFT objective for goodput (0: none)");
  sub->add_option("--slo-tpot-ms", a->slo_tpot_ms, "TPOT objective for goodput (0: none)");
  sub->add_option("--output-json", a->output_json, "Write the summary and per-request results as JSON");
  sub->add_option("--output-csv", a->output_csv, "Write per-request results as CSV");
  sub->add_flag("--no-progress", a->no_progress, "No progress bar (it is only drawn on a terminal anyway)");
  set_action(sub, [a] { run_bench_serve_cmd(*a); });
}

}  // namespace loom::cli
