// `loom bench offline`: run a fixed set of requests through the Engine as fast as it can and
// report throughput (input+output tokens/s, requests/s) and latency percentiles
// (TTFT / TPOT / ITL / e2e, p50 p90 p99), like vLLM's benchmark_throughput.
//
// Workload: a trace file (Azure CSV, Mooncake JSONL, arXiv lengths CSV; engine/trace.h) or a
// synthetic one (arrival process + fixed or uniform lengths). Offline means every request is
// available at t = 0 unless --use-arrivals replays the trace's arrival times.
// Prompts are synthetic token ids drawn from Rng(seed, request index), so a run repeats exactly;
// outputs run to their trace length (ignore_eos), greedy unless --temperature is given.
// A request longer than the context (prompt + output > max_model_len) is clipped with --clip
// (its prompt cut, its output kept: clip_to_context), otherwise rejected on its own (the
// scheduler's rejection), counted in the report, and --clip suggested.
//
// The engine is built and run in run_engine() only, so the distributed engine (--ranks N
// --plan ... --comm local|mpi) can replace it there.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/tiers.h"
#include "cli/cli.h"
#include "cli/layout_cli.h"
#include "core/error.h"
#include "core/json_bounded.h"
#include "core/parse_number.h"
#include "core/progress.h"
#include "core/rng.h"
#include "engine/dist_engine.h"
#include "engine/engine.h"
#include "engine/metrics.h"
#include "engine/trace.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/tokenizer.h"

namespace loom::cli {

namespace {

struct BenchOfflineArgs {
  std::string model;
  std::string tiers;     // SLO tiers (Nitsum, cluster/tiers.h); "" = none
  std::string tier_mix;  // NAME:WEIGHT,... over the tiers; "" = all in the first
  std::string tokenizer;  // as every subcommand that takes a model (prompts here are synthetic ids)
  std::string trace;
  std::string trace_format = "auto";
  std::string synthetic;       // poisson[:RATE] | gamma[:RATE[:CV]] | bursty[:RATE[:ON:OFF]] | batch
  int64_t num_requests = -1;   // trace: first N (-1 all); synthetic: N (-1 -> 64)
  std::string prompt_len = "128";  // synthetic: N or LO:HI (uniform)
  std::string output_len = "128";
  uint64_t seed = 1;
  double rate_scale = 1.0;
  bool clip = false;
  bool use_arrivals = false;
  float temperature = 0.0f;
  // Engine.
  int max_num_seqs = 64;
  int max_tokens_per_step = 2048;
  int max_model_len = 0;
  std::optional<int64_t> kv_cache_bytes;
  std::optional<int64_t> rank_memory_bytes;
  double kv_cache_fraction = EngineConfig{}.kv_cache_fraction;
  int block_size = kDefaultKvBlockSize;
  int threads = 0;
  // Distributed (hook).
  int ranks = 0;  // 0: from --plan (1 without; mpi: as many as mpirun started)
  std::string comm = "local";
  LayoutArgs layout;
  // Output.
  std::string output_json, output_csv;
  bool quiet = false;
};

TraceFormat parse_trace_format(const std::string& s) {
  if (s == "auto") return TraceFormat::kAuto;
  if (s == "azure") return TraceFormat::kAzureCsv;
  if (s == "mooncake") return TraceFormat::kMooncakeJsonl;
  if (s == "arxiv" || s == "lengths") return TraceFormat::kLengthsCsv;
  fail("unknown --trace-format '", s, "' (auto, azure, mooncake, arxiv)");
}

// "N" -> fixed N; "LO:HI" -> uniform integers in [LO, HI].
LengthDist parse_length(const std::string& flag, const std::string& s) {
  // Token counts: the simulator's and benchmarks' range for lengths (cli/option_ranges.cpp).
  auto num = [&](const std::string& t) { return int(parse_int(t, cat(flag, " ", text_excerpt(s, 32), ": a length"), 1, 1 << 22)); };
  const auto c = s.find(':');
  if (c == std::string::npos) return LengthDist::fixed(num(s));
  const int lo = num(s.substr(0, c)), hi = num(s.substr(c + 1));
  if (lo > hi) fail(flag, " ", s, ": low ", lo, " > high ", hi);
  return LengthDist::uniform(lo, hi);
}

// KIND[:a[:b[:c]]] with defaults for omitted numbers.
ArrivalSpec parse_synthetic(const std::string& s) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    const size_t c = s.find(':', pos);
    parts.push_back(s.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  const std::string kind = parts[0];
  std::vector<double> v;
  for (size_t i = 1; i < parts.size(); ++i)
    v.push_back(parse_double(parts[i], cat("--synthetic ", text_excerpt(s, 48), ": a value"), 0, 1e9));
  auto arg = [&](size_t i, double dflt) { return i < v.size() ? v[i] : dflt; };
  ArrivalSpec spec;
  if (kind == "batch" && v.empty()) spec = ArrivalSpec::all_at_zero();
  else if (kind == "poisson" && v.size() <= 1) spec = ArrivalSpec::poisson(arg(0, 1.0));
  else if (kind == "gamma" && v.size() <= 2) spec = ArrivalSpec::gamma(arg(0, 1.0), arg(1, 2.0));
  else if (kind == "bursty" && v.size() <= 3) spec = ArrivalSpec::bursty(arg(0, 1.0), arg(1, 1.0), arg(2, 1.0));
  else
    fail("--synthetic '", s, "': expected batch, poisson[:RATE], gamma[:RATE[:CV]] or bursty[:RATE[:ON_S[:OFF_S]]]");
  spec.validate();
  return spec;
}

struct Workload {
  std::string source;  // trace path or synthetic spec
  std::vector<TraceRequest> trace;
};

Workload load_workload(const BenchOfflineArgs& a, int max_context) {
  if (a.trace.empty() == a.synthetic.empty()) fail("give exactly one of --trace FILE or --synthetic KIND");
  if (!(a.rate_scale > 0)) fail("--rate-scale must be > 0, got ", a.rate_scale);
  if (a.num_requests == 0 || a.num_requests < -1) fail("--num-requests must be >= 1, got ", a.num_requests);
  TraceOptions topt;
  topt.rate_scale = a.rate_scale;
  topt.max_context = max_context;
  topt.clip = a.clip;
  Workload w;
  if (!a.trace.empty()) {
    const TraceFormat f = parse_trace_format(a.trace_format);
    topt.max_requests = a.num_requests;
    w.source = a.trace;
    w.trace = read_trace(a.trace, topt, f);
    if (w.trace.empty()) fail("trace ", a.trace, " holds no request");
    return w;
  }
  const ArrivalSpec spec = parse_synthetic(a.synthetic);
  const LengthDist prompt = parse_length("--prompt-len", a.prompt_len);
  const LengthDist output = parse_length("--output-len", a.output_len);
  const int64_t n = a.num_requests > 0 ? a.num_requests : 64;
  // Separate seeds per random source (arrivals, prompt and output lengths).
  w.source = cat("synthetic ", a.synthetic, " prompt ", a.prompt_len, " output ", a.output_len);
  w.trace = synthesize_trace(n, spec, a.seed, prompt, a.seed + 1, output, a.seed + 2);
  apply_trace_options(&w.trace, topt);
  return w;
}

// Deterministic prompt ids for request i: uniform over the vocabulary from Rng(seed, i).
std::vector<TokenId> synth_prompt(int len, int vocab, uint64_t seed, int64_t index) {
  Rng rng(seed * 0x9e3779b97f4a7c15ull ^ uint64_t(index) * 0xd1b54a32d192ed03ull ^ 0x70726f6d7074ull);
  std::vector<TokenId> ids(size_t(std::max(len, 0)));
  for (auto& t : ids) t = TokenId(rng.below(uint64_t(vocab)));
  return ids;
}

std::vector<Request> make_requests(const std::vector<TraceRequest>& trace, const BenchOfflineArgs& a, int vocab) {
  std::vector<Request> out;
  out.reserve(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceRequest& t = trace[i];
    Request r;
    r.id = RequestId(i);
    r.prompt = synth_prompt(t.prompt_len, vocab, a.seed, int64_t(i));
    r.max_tokens = t.output_len;
    r.stop.ignore_eos = true;
    r.sampling.temperature = a.temperature;
    r.sampling.seed = a.seed + uint64_t(i);
    r.arrival_s = a.use_arrivals ? t.arrival_s : 0.0;
    out.push_back(std::move(r));
  }
  return out;
}

struct EngineRun {
  Metrics metrics;
  std::vector<Sequence> finished;
  nlohmann::json engine;  // the configuration that ran
  bool is_driver = true;  // false on the ranks of a distributed run other than world rank 0
};

// Builds the engine for the chosen layout and runs the requests to completion.
// Single rank: loom::Engine. Several ranks (or --comm mpi): the distributed engine
// (engine/dist_engine.h); its driver runs on world rank 0 only, so on the other ranks the
// returned run has is_driver == false and nothing to report.
EngineRun run_engine(const BenchOfflineArgs& a, std::shared_ptr<const Model> model, const EngineConfig& cfg,
                     std::vector<Request> requests) {
  if (a.comm != "local" && a.comm != "mpi") fail("unknown --comm '", a.comm, "' (local, mpi)");
  if (a.ranks < 0) fail("--ranks must be >= 1, got ", a.ranks);
  int ranks = layout_ranks(a.layout, a.ranks, a.block_size);
  // Under mpi without --ranks: as many as mpirun started (the plan's size is checked against them).
  if (a.comm == "mpi" && a.ranks == 0) ranks = 0;
  EngineRun run;
  if (ranks <= 1 && a.comm == "local" && !a.layout.given()) {
    Engine engine(std::move(model), cfg);
    run.engine = {{"ranks", 1},
                  {"plan", "tp=1"},
                  {"threads", cfg.threads > 0 ? cfg.threads : default_thread_count()},
                  {"max_num_seqs", engine.config().max_num_seqs},
                  {"max_tokens_per_step", engine.config().max_tokens_per_step},
                  {"max_model_len", engine.config().max_model_len},
                  {"block_size", engine.config().block_size},
                  {"num_kv_blocks", engine.num_kv_blocks()},
                  {"kv_cache_bytes", engine.kv_cache_bytes()},
                  {"kernel_path", kernels::kernel_path()},
                  {"numerics", kernels::numerics_name(kernels::default_numerics())}};
    ProgressCount count;
    count.total = int64_t(requests.size());
    engine.loop().on_finish = [&count](const Sequence&) { ++count.done; };
    {
      ProgressReporter progress("loom bench offline", "requests", count);
      run.finished = engine.run(std::move(requests));
    }
    engine.loop().on_finish = nullptr;
    run.metrics = engine.metrics();
    return run;
  }
  DistOptions o;
  o.comm = a.comm;
  o.ranks = ranks > 0 ? ranks : (a.comm == "mpi" ? 0 : 1);
  apply_layout_options(a.layout, std::max(o.ranks, 1), o);
  o.model_path = a.model;
  const int64_t tier_bytes = o.engine.cpu_kv_bytes;  // --cpu-kv-bytes, or Seesaw's default
  o.engine = cfg;
  o.engine.cpu_kv_bytes = tier_bytes;
  o.load_model = [model](int) { return model; };
  run.is_driver = false;
  run_distributed(o, [&](DistEngine& e) {
    run.is_driver = true;
    if (!a.quiet)
      for (const std::string& line : e.start_info()) std::fprintf(stderr, "[%s]\n", line.c_str());
    run.engine = {{"ranks", e.world_size()},
                  {"plan", e.plan().to_string()},
                  {"plan_set", e.plans().to_string()},
                  {"comm", std::string(e.backend())},
                  {"threads_per_rank", e.threads_per_rank()},
                  {"max_num_seqs", e.config().max_num_seqs},
                  {"max_tokens_per_step", e.config().max_tokens_per_step},
                  {"max_model_len", e.config().max_model_len},
                  {"block_size", e.config().block_size},
                  {"num_kv_blocks", e.num_kv_blocks()},
                  {"kernel_path", kernels::kernel_path()},
                  {"numerics", kernels::numerics_name(kernels::default_numerics())}};
    ProgressCount count;
    count.total = int64_t(requests.size());
    e.loop().on_finish = [&count](const Sequence&) { ++count.done; };
    {
      ProgressReporter progress("loom bench offline", "requests", count);
      run.finished = e.run(std::move(requests));
    }
    e.loop().on_finish = nullptr;
    run.metrics = e.metrics();
    run.engine["policy"] = e.policy();
    run.engine["start_info"] = e.start_info();
    run.engine["plan_stats"] = plan_stats_json(e)["plans"];
  });
  return run;
}

void print_dist(const char* name, const Distribution& d) {
  if (d.count == 0) {
    std::printf("  %-5s ms  (none)\n", name);
    return;
  }
  std::printf("  %-5s ms  p50 %9.2f  p90 %9.2f  p99 %9.2f  mean %9.2f  (%lld values)\n", name, d.p50, d.p90,
              d.p99, d.mean, (long long)d.count);
}

void run_bench_offline(const BenchOfflineArgs& a) {
  if (a.threads < 0) fail("--threads must be >= 0, got ", a.threads);
  // Tiers and the mix are checked before anything loads.
  const cluster::SloTiers tiers = a.tiers.empty() ? cluster::SloTiers() : cluster::parse_tiers(a.tiers);
  if (!a.tier_mix.empty() && a.tiers.empty()) fail("--tier-mix needs --tiers");
  const std::vector<double> tier_weights = cluster::parse_tier_mix(tiers, a.tier_mix);
  layout_ranks(a.layout, a.ranks, a.block_size);  // the plans and the policy, before any weight loads
  std::shared_ptr<const Model> model = load_model(a.model);
  const ModelConfig& mc = model->config;
  // The workload is token ids, so the tokenizer only has to agree with the model: loaded and
  // checked up front like everywhere else, and reported (ids beyond it would be no text).
  int tokenizer_vocab = -1;
  if (!a.tokenizer.empty()) {
    auto tok = Tokenizer::create(load_vocab(a.model, a.tokenizer));
    tokenizer_vocab = tok->vocab_size();
    if (tokenizer_vocab > mc.vocab_size)
      fail("--tokenizer ", a.tokenizer, " has ", tokenizer_vocab, " tokens, more than the model's vocabulary of ",
           mc.vocab_size);
  }

  EngineConfig cfg;
  cfg.threads = a.threads;
  cfg.max_num_seqs = a.max_num_seqs;
  cfg.max_tokens_per_step = a.max_tokens_per_step;
  cfg.max_model_len = a.max_model_len;
  cfg.kv_cache_bytes = a.kv_cache_bytes;
  cfg.rank_memory_bytes = a.rank_memory_bytes;
  cfg.kv_cache_fraction = a.kv_cache_fraction;
  cfg.block_size = a.block_size;
  cfg.validate(mc);
  const int max_context = a.max_model_len > 0 ? a.max_model_len : mc.max_seq_len;

  const Workload w = load_workload(a, max_context);
  const TraceStats ts = trace_stats(w.trace);
  std::vector<Request> requests = make_requests(w.trace, a, mc.vocab_size);
  const size_t n_requests = requests.size();
  // SLO tiers (Nitsum): each request gets a tier by the mix (smooth weighted round-robin, so the
  // shares hold in every prefix) and the tier's targets as its SLO; goodput per tier below.
  const std::vector<int> tier_of = cluster::assign_tiers(n_requests, tier_weights);
  for (size_t i = 0; i < n_requests; ++i)
    if (tier_of[i] >= 0 && !tiers[size_t(tier_of[i])].background)
      requests[i].slo = Slo{tiers[size_t(tier_of[i])].ttft_s * 1e3, tiers[size_t(tier_of[i])].tpot_s * 1e3};

  EngineRun run = run_engine(a, model, cfg, std::move(requests));
  if (!run.is_driver) return;  // only world rank 0 reports
  const MetricsSummary s = run.metrics.summary();

  // Input tokens of the requests that completed (MetricsSummary::num_prompt_tokens).
  const double total_tok_s =
      s.duration_s > 0 ? double(s.num_prompt_tokens + s.num_output_tokens) / s.duration_s : 0.0;
  const double input_tok_s = s.duration_s > 0 ? double(s.num_prompt_tokens) / s.duration_s : 0.0;

  nlohmann::json j;
  if (tokenizer_vocab >= 0) j["tokenizer"] = {{"path", a.tokenizer}, {"vocab_size", tokenizer_vocab}};
  j["model"] = {{"path", a.model},
                {"format", model->format},
                {"n_layers", mc.n_layers},
                {"d_model", mc.d_model},
                {"vocab_size", mc.vocab_size},
                {"max_seq_len", mc.max_seq_len}};
  j["workload"] = {{"source", w.source},
                   {"num_requests", int64_t(n_requests)},
                   {"num_clipped", ts.num_clipped},
                   {"num_too_long", ts.num_too_long},
                   {"max_context", max_context},
                   {"clip", a.clip},
                   {"use_arrivals", a.use_arrivals},
                   {"prompt_mean", ts.prompt_mean},
                   {"output_mean", ts.output_mean}};
  j["engine"] = run.engine;
  // Which config ran each step (StepMetrics::plan): steps and tokens per plan.
  nlohmann::json plans = nlohmann::json::object();
  for (const StepMetrics& st : run.metrics.steps()) {
    nlohmann::json& p = plans[st.plan.empty() ? std::string("default") : st.plan];
    if (p.is_null()) p = {{"steps", int64_t(0)}, {"tokens", int64_t(0)}};
    p["steps"] = p["steps"].get<int64_t>() + 1;
    p["tokens"] = p["tokens"].get<int64_t>() + st.num_tokens;
  }
  j["plans"] = plans;
  nlohmann::json sj = to_json(s);
  sj["input_tokens_per_s"] = input_tok_s;
  sj["total_tokens_per_s"] = total_tok_s;
  j["summary"] = sj;
  nlohmann::json rej = nlohmann::json::array();
  for (const Sequence& q : run.finished)
    if (q.finish_reason == FinishReason::kRejected || q.finish_reason == FinishReason::kError)
      rej.push_back({{"id", q.id()},
                     {"reason", std::string(finish_reason_name(q.finish_reason))},
                     {"detail", q.finish_detail}});
  j["rejected"] = rej;
  // Per-tier goodput: requests meeting both their tier's TTFT and TPOT targets per second.
  std::vector<int64_t> tier_n(tiers.size(), 0), tier_met(tiers.size(), 0);
  for (const RequestMetrics& q : run.metrics.requests()) {
    if (q.id < 0 || size_t(q.id) >= tier_of.size() || tier_of[size_t(q.id)] < 0) continue;
    const size_t t = size_t(tier_of[size_t(q.id)]);
    ++tier_n[t];
    if (q.finish_s >= 0 && q.num_output() > 0 && tiers[t].met(q.ttft_s(), q.tpot_s().value_or(0.0))) ++tier_met[t];
  }
  if (!tiers.tiers().empty()) {
    nlohmann::json tj = nlohmann::json::array();
    for (size_t t = 0; t < tiers.size(); ++t)
      tj.push_back({{"tier", tiers[t].name},
                    {"requests", tier_n[t]},
                    {"slo_met", tier_met[t]},
                    {"goodput_rps", s.duration_s > 0 ? double(tier_met[t]) / s.duration_s : 0.0}});
    j["tiers"] = tj;
  }

  if (!a.output_json.empty()) {
    std::ofstream f(a.output_json);
    if (!f) fail("cannot write --output-json ", a.output_json);
    f << j.dump(2) << "\n";
    if (!f) fail("cannot write --output-json ", a.output_json);
  }
  if (!a.output_csv.empty()) {
    std::ofstream f(a.output_csv);
    if (!f) fail("cannot write --output-csv ", a.output_csv);
    run.metrics.write_requests_csv(f);
    if (!f) fail("cannot write --output-csv ", a.output_csv);
  }
  // Rejected for their length: say how to keep them (printed even with --quiet: it is about
  // what was measured).
  if (ts.num_too_long > 0 && !a.clip)
    std::fprintf(stderr,
                 "loom bench offline: %lld of %zu requests are longer than the context (%d tokens) and were rejected; "
                 "--clip runs them with their prompts cut to fit (output lengths kept)%s\n",
                 (long long)ts.num_too_long, n_requests, max_context,
                 max_context < mc.max_seq_len ? cat(", or raise --max-model-len (the model's context is ",
                                                    mc.max_seq_len, " tokens)").c_str()
                                              : "");
  if (a.quiet) return;
  std::printf("%s: %zu requests (%s), %lld completed, %lld rejected (%lld too long for %d tokens), %lld clipped\n",
              a.model.c_str(), n_requests, w.source.c_str(), (long long)s.num_completed, (long long)s.num_rejected,
              (long long)ts.num_too_long, max_context, (long long)ts.num_clipped);
  std::printf("  engine: %s ranks, plan %s, %s threads, max_num_seqs %d, max_tokens_per_step %d, %d KV blocks, %s kernels, %s numerics\n",
              run.engine["ranks"].dump().c_str(), run.engine["plan"].get<std::string>().c_str(),
              run.engine.value("threads", run.engine.value("threads_per_rank", nlohmann::json(0))).dump().c_str(),
              cfg.max_num_seqs, cfg.max_tokens_per_step,
              run.engine["num_kv_blocks"].get<int>(), kernels::kernel_path(),
              kernels::numerics_name(kernels::default_numerics()));
  std::printf("  %.3f s, %lld steps, %lld preemptions\n", s.duration_s, (long long)s.num_steps,
              (long long)s.num_preemptions);
  std::printf("  throughput: %.1f tok/s total (%.1f input, %.1f output), %.3f requests/s\n", total_tok_s,
              input_tok_s, s.output_tokens_per_s, s.requests_per_s);
  if (run.engine.contains("plan_stats") && run.engine["plan_stats"].size() > 1) {
    std::printf("  plans (policy %s):\n", run.engine["policy"].get<std::string>().c_str());
    for (const auto& p : run.engine["plan_stats"])
      std::printf("    %-24s %6lld steps %9lld tokens, %lld switches in, %lld KV bytes moved in %.3f ms\n",
                  p["name"].get<std::string>().c_str(), (long long)p["steps"].get<int64_t>(),
                  (long long)p["tokens"].get<int64_t>(), (long long)p["switches"].get<int64_t>(),
                  (long long)p["kv_bytes_moved"].get<int64_t>(), p["switch_ms"].get<double>());
  }
  for (size_t t = 0; t < tiers.size(); ++t)
    std::printf("  tier %-12s %6lld requests, %6lld met TTFT and TPOT: goodput %.3f requests/s\n",
                tiers[t].name.c_str(), (long long)tier_n[t], (long long)tier_met[t],
                s.duration_s > 0 ? double(tier_met[t]) / s.duration_s : 0.0);
  print_dist("TTFT", s.ttft_ms);
  print_dist("TPOT", s.tpot_ms);
  print_dist("ITL", s.itl_ms);
  print_dist("e2e", s.e2e_ms);
}

}  // namespace

void register_bench_offline(CLI::App& bench) {
  auto a = std::make_shared<BenchOfflineArgs>();
  CLI::App* sub = bench.add_subcommand("offline", "Run a set of requests through the engine as fast as possible");
  sub->add_option("--model,-m", a->model, "Model: llama2.c .bin, GGUF file, or safetensors dir/file")->required();
  sub->add_option("--tokenizer,-t", a->tokenizer,
                  "Tokenizer file (llama2.c .bin or tokenizer.json) if not with the model; checked against the model");
  auto* trace = sub->add_option("--trace", a->trace, "Trace file: Azure CSV, Mooncake JSONL or arXiv lengths CSV");
  sub->add_option("--trace-format", a->trace_format, "auto, azure, mooncake, arxiv")->capture_default_str();
  auto* synth = sub->add_option("--synthetic", a->synthetic,
                                "Synthetic workload: batch, poisson[:RATE], gamma[:RATE[:CV]], "
                                "bursty[:RATE[:ON_S[:OFF_S]]] (arrivals used with --use-arrivals)");
  trace->excludes(synth);
  sub->add_option("--num-requests,-n", a->num_requests, "Trace: keep the first N; synthetic: N requests (64)");
  sub->add_option("--prompt-len,--input-len", a->prompt_len, "Synthetic prompt tokens: N or LO:HI (uniform)")->capture_default_str();
  sub->add_option("--output-len", a->output_len, "Synthetic output tokens: N or LO:HI (uniform)")->capture_default_str();
  sub->add_option("--seed", a->seed, "Seed of arrivals, lengths, prompt ids and sampling")->capture_default_str();
  sub->add_option("--rate-scale", a->rate_scale, "Multiply the arrival rate")->capture_default_str();
  sub->add_flag("--clip", a->clip, "Clip requests longer than the context instead of rejecting them");
  sub->add_flag("--use-arrivals", a->use_arrivals, "Honour arrival times (default: every request at t = 0)");
  sub->add_option("--temperature", a->temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  sub->add_option("--max-num-seqs", a->max_num_seqs, "Running sequences at most")->capture_default_str();
  sub->add_option("--max-tokens-per-step", a->max_tokens_per_step, "Token budget per step (chunked prefill)")
      ->capture_default_str();
  sub->add_option("--max-model-len", a->max_model_len, "Context limit per request (0: the model's)");
  sub->add_option("--kv-cache-bytes", a->kv_cache_bytes, "KV cache size in bytes (default: a share of free memory)");
  sub->add_option("--rank-memory-bytes", a->rank_memory_bytes,
                  "Memory per rank for its weights and KV, as on a GPU: the KV cache is what the rank's weights under "
                  "the plan set leave (SiDP's owned FFN frees room; exclusive with --kv-cache-bytes)");
  sub->add_option("--kv-cache-fraction", a->kv_cache_fraction,
                  "Without --kv-cache-bytes: this fraction of available memory for the KV cache")
      ->capture_default_str();
  sub->add_option("--block-size", a->block_size, "Tokens per KV-cache block")->capture_default_str();
  sub->add_option("--threads", a->threads, "Worker threads (0: all cores, or LOOM_THREADS)");
  add_numerics_option(sub);
  sub->add_option("--ranks", a->ranks, "Ranks of the distributed engine (default: the plan's; 1 without a plan)");
  sub->add_option("--comm", a->comm, "Communicator for --ranks > 1: local or mpi")->capture_default_str();
  add_layout_options(sub, a->layout);
  sub->add_option("--tiers", a->tiers, "SLO tiers (Nitsum): NAME=TTFT_MS/TPOT_MS,... or a file; per-tier goodput");
  sub->add_option("--tier-mix", a->tier_mix, "Share of requests per tier: NAME:WEIGHT,... (default: all in the first)");
  sub->add_option("--output-json", a->output_json, "Write the report as JSON");
  sub->add_option("--output-csv", a->output_csv, "Write one CSV row per request");
  sub->add_flag("--quiet,-q", a->quiet, "Print nothing (use with --output-json)");
  CLI::Option* ranks = sub->get_option("--ranks");
  set_action(sub, [a, ranks] {
    if (ranks->count() > 0 && a->ranks == 0 && a->comm != "mpi")
      fail("--ranks 0 means as many ranks as mpirun started: only with --comm mpi (give --ranks N >= 1)");
    run_bench_offline(*a);
  });
}

}  // namespace loom::cli
