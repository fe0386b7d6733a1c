// `loom sim ...` and `loom plan`: the simulator, its validation and experiments, and the planner.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <iostream>
#include <map>

#include "engine/policy.h"
#include "engine/policy_registry.h"
#include "engine/seesaw.h"
#include "engine/trace.h"
#include "model/loader.h"
#include "model/tokenizer.h"
#include "parallel/plan.h"
#include "sim/experiments.h"
#include "sim/model_catalog.h"
#include "sim/simulator.h"
#include "sim/profile.h"
#include "sim/validate_engine.h"

#include "cli/cli.h"
#include "core/error.h"
#include "core/json_bounded.h"
#include "core/parse_number.h"
#include "core/progress.h"
#include "sim/calibration.h"
#include "sim/hardware.h"

namespace loom::cli {

using loom::TraceRequest;

namespace {

struct ValidateArgs {
  std::string hardware = "a100-80gb";
  std::string dir;
  std::string calibrate_on;        // transfer: fit on this folder, predict `dir` on `hardware`
  std::string calibrate_hardware;  // what `calibrate_on` was measured on (default: measurement_hardware)
  bool json = false;
  bool by_op = false;
};

void run_validate(const ValidateArgs& a) {
  std::string from;
  ProgressCount files;
  const auto rows = [&] {
    ProgressReporter progress("loom sim validate", "files", files);
    if (a.calibrate_on.empty()) return sim::validate_measurements(a.hardware, a.dir, &files);
    from = a.calibrate_hardware.empty() ? sim::measurement_hardware(a.calibrate_on) : a.calibrate_hardware;
    return sim::validate_transfer(from, a.calibrate_on, a.hardware, a.dir, &files);
  }();
  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : rows) {
      nlohmann::json x = {{"file", r.file}, {"median", r.median}, {"p90", r.p90}, {"samples", r.samples}};
      if (r.analytic_median >= 0) x["analytic_median"] = r.analytic_median;
      j.push_back(x);
    }
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%-40s %8s %9s %9s %s\n", "file", "samples", "median", "p90", "analytic-median");
  for (const auto& r : rows) {
    std::printf("%-40s %8d %8.1f%% %8.1f%%", r.file.c_str(), r.samples, r.median * 100, r.p90 * 100);
    if (r.analytic_median >= 0) std::printf(" %8.1f%%", r.analytic_median * 100);
    std::printf("\n");
    if (a.by_op)
      for (const auto& [op, x] : r.by_op)
        std::printf("  %-38s %8d %8.1f%%\n", op.c_str(), x.first, x.second * 100);
  }
  if (a.calibrate_on.empty())
    std::printf("(|predicted - measured| / measured, out of sample: mlp and attention files leave-one-file-out, "
                "collectives 2-fold)\n");
  else
    std::printf("(|predicted - measured| / measured: efficiencies fitted on %s (%s), %s priced from its datasheet "
                "entry alone; collectives by the analytical model)\n",
                a.calibrate_on.c_str(), sim::find_gpu(from).name.c_str(), sim::find_gpu(a.hardware).name.c_str());
}

void print_calibration(const sim::Calibration& c) {
  std::printf("gemm: eff_max %.4f m_half %.2f mem_eff %.4f latency_us %.2f cache_gain %.3f cache_fraction %.3f\n",
              c.gemm.eff_max, c.gemm.m_half, c.gemm.mem_eff, c.gemm.latency_s * 1e6, c.gemm.cache_gain,
              c.gemm.cache_fraction);
  auto e = [](const char* n, const sim::ElementwiseCalibration& x) {
    std::printf("%s: bw_eff %.4f latency_us %.2f\n", n, x.bw_eff, x.latency_s * 1e6);
  };
  e("norm", c.norm), e("add", c.add), e("act", c.act), e("rope", c.rope), e("emb", c.emb);
  std::printf("attention: compute_eff %.4f mem_eff %.4f latency_us %.2f\n", c.attn_compute_eff, c.attn_mem_eff,
              c.attn_latency_s * 1e6);
  auto k = [](const char* n, const sim::CollectiveCalibration& x) {
    std::printf("%s: latency_us %.2f hop_latency_us %.2f bw_eff %.4f\n", n, x.latency_s * 1e6, x.hop_latency_s * 1e6,
                x.bw_eff);
  };
  k("all_reduce", c.all_reduce), k("all_gather", c.all_gather), k("all_to_all", c.all_to_all),
      k("send_recv", c.send_recv), k("broadcast", c.broadcast), k("net", c.net);
  std::printf("step overhead: %.2f us + %.3f us per sequence + %.4f us per token\n", c.step_overhead_s * 1e6,
              c.step_overhead_per_seq_s * 1e6, c.step_overhead_per_token_s * 1e6);
}

void run_calibrate(const ValidateArgs& a) {
  const auto files = sim::read_measurements(a.dir);
  std::vector<const sim::MeasurementFile*> all;
  for (const auto& f : files) all.push_back(&f);
  print_calibration(sim::fit_calibration(all, sim::find_gpu(a.hardware), sim::default_calibration()));
}

// The dtype a run prices: --dtype, or its default for the hardware (sim/profile.h).
std::string dtype_shown(const std::string& dtype, const std::string& hardware) {
  if (!dtype.empty()) return dtype;
  return sim::is_profile_hardware(hardware) ? "f32" : "fp8";
}

struct RunArgs {
  std::string model = "llama-3-70b";
  std::string hardware = "h200x8";
  std::string dtype;  // "": fp8 on GPUs, f32 on a loom profile
  std::string comm = "local";  // loom profile hardware: the collectives' backend
  std::string plan = "tp=8";
  std::string policy = "fixed";
  std::string trace;
  std::string synthetic;  // poisson:RATE | gamma:RATE:CV | bursty:RATE:ON:OFF
  int64_t num_requests = 1000;
  int prompt_len = 1024, output_len = 128;
  uint64_t seed = 1;
  double rate_scale = 1.0;
  int64_t max_requests = -1;
  int max_tokens_per_step = 8192;
  int max_num_seqs = 256;
  int threshold = 256;
  int64_t sidp_threshold = -1;  // --sidp-threshold; -1: from the cost model (the WaS/CaS crossover)
  double sidp_window_s = 60;    // --sidp-window: the policy's window in simulated seconds
  std::string out_dir;
  bool json = false;
  bool quiet = false;
};

void progress_bar(double t, int64_t done, int64_t total) {
  const int width = 30;
  const int filled = total > 0 ? int(double(done) / double(total) * width) : width;
  std::fprintf(stderr, "\r[%s%s] %lld/%lld requests, t=%.0f s", std::string(size_t(filled), '#').c_str(),
               std::string(size_t(width - filled), '.').c_str(), (long long)done, (long long)total, t);
  if (done >= total) std::fprintf(stderr, "\n");
}

std::vector<TraceRequest> load_trace(const RunArgs& a) {
  TraceOptions topt;
  topt.rate_scale = a.rate_scale;
  topt.max_requests = a.max_requests;
  if (!a.trace.empty()) return read_trace(a.trace, topt);
  if (a.synthetic.empty()) fail("give --trace FILE or --synthetic poisson:RATE|gamma:RATE:CV|bursty:RATE:ON:OFF");
  std::vector<double> v;
  std::string kind = a.synthetic, rest;
  if (auto c = kind.find(':'); c != std::string::npos) rest = kind.substr(c + 1), kind = kind.substr(0, c);
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t c = rest.find(':', pos);
    if (c == std::string::npos) c = rest.size();
    v.push_back(parse_double(rest.substr(pos, c - pos), cat("--synthetic ", text_excerpt(a.synthetic, 48), ": a value"), 0, 1e9));
    pos = c + 1;
  }
  ArrivalSpec spec;
  if (kind == "poisson" && v.size() == 1) spec = ArrivalSpec::poisson(v[0]);
  else if (kind == "gamma" && v.size() == 2) spec = ArrivalSpec::gamma(v[0], v[1]);
  else if (kind == "bursty" && v.size() == 3) spec = ArrivalSpec::bursty(v[0], v[1], v[2]);
  else if (kind == "batch" && v.empty()) spec = ArrivalSpec::all_at_zero();
  else fail("--synthetic ", a.synthetic, ": expected poisson:RATE, gamma:RATE:CV, bursty:RATE:ON_S:OFF_S or batch");
  // Separate seeds per random source (arrivals, prompt and output lengths).
  return synthesize_trace(a.num_requests, spec, a.seed, LengthDist::fixed(a.prompt_len), a.seed + 1,
                          LengthDist::fixed(a.output_len), a.seed + 2);
}

// The plan in loom::Plan's string form (the engine's); the Shift threshold is an option of the
// policy, not a plan key.
Plan parse_sim_plan(const std::string& text) {
  if (text.find("threshold=") != std::string::npos)
    fail("plan '", text, "': the Shift threshold is not a plan key; give --policy shift --threshold N");
  return Plan::parse(text);
}

void set_plan_and_policy(const RunArgs& a, sim::SimConfig& cfg) {
  cfg.plan = parse_sim_plan(a.plan);
  cfg.policy = a.policy;
  if (a.threshold < 0) fail("--threshold must be >= 0 tokens, got ", a.threshold);
  cfg.shift_threshold = a.threshold;
  if (a.sidp_threshold < -1) fail("--sidp-threshold must be >= 0 sequences per replica, got ", a.sidp_threshold);
  cfg.sidp_threshold = a.sidp_threshold;
  if (!(a.sidp_window_s >= 0)) fail("--sidp-window must be >= 0 seconds, got ", a.sidp_window_s);
  cfg.sidp_window_s = a.sidp_window_s;
  cfg.plan_set();  // names a bad policy, or shift without an sp x tp plan, up front
  // loom's CPU engine (a profile) steps its DP replicas together; GPU engines run them apart.
  if (sim::is_profile_hardware(a.hardware)) cfg.dp_mode = sim::DpMode::Lockstep;
}

void run_sim(const RunArgs& a) {
  sim::SimConfig cfg;
  set_plan_and_policy(a, cfg);
  sim::CostModel cm = sim::hardware_cost_model(sim::find_model(a.model), a.hardware, a.dtype, cfg.plan, a.comm);
  cm.set_arch(sim::find_model_arch(a.model));  // MLA / MoE catalog models
  cfg.max_tokens_per_step = a.max_tokens_per_step;
  cfg.max_num_seqs = a.max_num_seqs;
  const auto trace = load_trace(a);
  int longest = 0;
  for (const auto& r : trace) longest = std::max(longest, r.prompt_len + r.output_len);
  cfg.max_model_len = std::max(cm.model().max_seq_len, longest);
  // Progress bars are for people: only on a terminal, never into logs and pipes (issue 19).
  if (!a.quiet && ::isatty(STDERR_FILENO)) cfg.progress = progress_bar;
  const sim::Simulator simulator(cm, cfg);
  const sim::SimResult r = simulator.run(trace);
  const auto j = sim::summary_json(r, simulator);
  if (!a.out_dir.empty()) {
    std::filesystem::create_directories(a.out_dir);
    auto write = [&](const std::string& name, const std::string& text) {
      std::ofstream f(a.out_dir + "/" + name);
      if (!f) fail("cannot write ", a.out_dir, "/", name);
      f << text;
    };
    std::ofstream csv(a.out_dir + "/requests.csv");
    if (!csv) fail("cannot write ", a.out_dir, "/requests.csv");
    sim::write_requests_csv(r, csv);
    write("summary.json", j.dump(2) + "\n");
    write("latency_cdf.svg", sim::svg_latency_cdf(r));
    write("throughput.svg", sim::svg_throughput(r));
    write("plan_over_time.svg", sim::svg_plan_per_step(r));
  }
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const auto& s = r.summary;
  std::printf("%s on %s (%s), plan %s: %lld requests, %lld completed, %lld rejected\n", a.model.c_str(),
              cm.node().name().c_str(), dtype_shown(a.dtype, a.hardware).c_str(), cfg.describe().c_str(),
              (long long)s.num_requests,
              (long long)s.num_completed, (long long)s.num_rejected);
  std::printf("  TTFT ms  p50 %.1f  p90 %.1f  p99 %.1f\n", s.ttft_ms.p50, s.ttft_ms.p90, s.ttft_ms.p99);
  std::printf("  TPOT ms  p50 %.2f  p90 %.2f  p99 %.2f\n", s.tpot_ms.p50, s.tpot_ms.p90, s.tpot_ms.p99);
  std::printf("  makespan %.1f s, %.0f output tok/s, %.0f total tok/s, %lld steps, %lld preemptions\n", r.makespan_s,
              s.output_tokens_per_s, r.total_tokens_per_s, (long long)s.num_steps, (long long)s.num_preemptions);
  std::printf("  memory: %.1f GB weights per GPU, KV for %lld tokens per replica x %d replicas\n",
              r.memory.weight_bytes_per_gpu / 1e9, (long long)r.memory.kv_capacity_tokens, r.num_replicas);
  for (const auto& u : r.plan_use) {
    std::printf("  plan %-18s %lld steps, %.1f s busy", u.config.c_str(), (long long)u.steps, u.busy_s);
    if (u.switches_to > 0)
      std::printf(", %lld switches into it moving %lld KV bytes in %.3f s", (long long)u.switches_to,
                  (long long)u.kv_bytes_moved, u.switch_s);
    std::printf("\n");
  }
  if (cfg.plan.weights == WeightSource::FetchFromOwner) {  // SiDP: the mode of every step
    int64_t was = 0, cas = 0;
    for (const auto& st : r.metrics.steps()) (st.plan.find("sidp=cas") != std::string::npos ? cas : was) += 1;
    std::printf("  sidp: %lld steps in WaS, %lld in CaS", (long long)was, (long long)cas);
    if (r.policy_threshold >= 0)
      std::printf("; threshold %lld %s%s", (long long)r.policy_threshold, r.policy_threshold_unit.c_str(),
                  a.sidp_threshold < 0 ? " (cost model; --sidp-threshold overrides)" : "");
    std::printf("\n");
  }
  std::printf("  simulated %.0f requests per second (%.2f s host time)\n", r.sim_requests_per_s, r.wall_s);
}

struct ValidateEngineArgs {
  std::string model;
  std::string tokenizer;  // as every subcommand that takes a model file (the prompts are ids)
  std::string profile;
  std::string trace;
  std::string synthetic;  // as sim run: poisson:RATE | gamma:RATE:CV | bursty:RATE:ON:OFF | batch
  int64_t num_requests = 24;
  int prompt_len = 64, output_len = 16;
  double rate_scale = 1.0;
  uint64_t seed = 1;
  std::vector<std::string> plans;
  std::string policy = "fixed";
  int64_t threshold = -1;
  int64_t sidp_threshold = -1;
  int64_t cpu_kv_bytes = 0;
  int max_num_seqs = 16;
  int max_tokens_per_step = 256;
  int64_t kv_cache_bytes = 64 << 20;
  int max_model_len = 0;
  std::string steps_dir;
  bool json = false;
};

void run_validate_engine(const ValidateEngineArgs& a) {
  if (a.profile.empty())
    fail("give --profile DIR (a profile of this machine: `loom profile -o DIR --model ", a.model, "`)");
  if (a.plans.empty()) fail("give at least one --plan (e.g. --plan tp=2 --plan dp=2 --plan sp=2@shift)");
  if (!a.tokenizer.empty()) {
    // The workload is token ids: the tokenizer only has to load and agree with the model.
    const int n = Tokenizer::create(load_vocab(a.model, a.tokenizer))->vocab_size();
    const int model_vocab = sim::find_model(a.model).vocab_size;
    if (n > model_vocab)
      fail("--tokenizer ", a.tokenizer, " has ", n, " tokens, more than the model's vocabulary of ", model_vocab);
  }
  const sim::MachineProfile profile = sim::read_profile(a.profile);
  const ModelConfig mc = sim::find_model(a.model);
  sim::EngineValidationOptions o;
  o.model_path = a.model;
  o.seed = a.seed;
  o.max_num_seqs = a.max_num_seqs;
  o.max_tokens_per_step = a.max_tokens_per_step;
  o.kv_cache_bytes = a.kv_cache_bytes;
  o.max_model_len = a.max_model_len;
  o.shift_threshold = a.threshold;
  o.sidp_threshold = a.sidp_threshold;
  o.cpu_kv_bytes = a.cpu_kv_bytes;
  o.steps_dir = a.steps_dir;
  // The trace, clipped to the model's context (both sides run the clipped lengths).
  RunArgs ra;
  ra.trace = a.trace;
  ra.synthetic = a.synthetic;
  ra.num_requests = a.num_requests;
  ra.prompt_len = a.prompt_len;
  ra.output_len = a.output_len;
  ra.seed = a.seed;
  ra.rate_scale = a.rate_scale;
  ra.max_requests = a.trace.empty() ? -1 : a.num_requests;
  std::vector<TraceRequest> trace = load_trace(ra);
  TraceOptions clip;
  clip.max_context = a.max_model_len > 0 ? a.max_model_len : mc.max_seq_len;
  clip.clip = true;
  apply_trace_options(&trace, clip);
  o.trace = std::move(trace);
  std::vector<sim::EnginePlan> plans;
  // A phase policy (Seesaw) runs a plan set: `--plan pp=2 --plan tp=2 --policy seesaw` compares
  // the one set c_p = pp=2, c_d = tp=2 (as `loom serve` reads it); a PLAN@POLICY stays its own.
  if (is_seesaw_policy(a.policy)) {
    std::string set;
    for (const auto& p : a.plans)
      if (p.find('@') == std::string::npos) set += (set.empty() ? "" : "|") + p;
    if (!set.empty()) plans.push_back(sim::EnginePlan::parse(set, a.policy));
    for (const auto& p : a.plans)
      if (p.find('@') != std::string::npos) plans.push_back(sim::EnginePlan::parse(p, a.policy));
  } else {
    for (const auto& p : a.plans) plans.push_back(sim::EnginePlan::parse(p, a.policy));
  }
  const auto rows = sim::validate_engine(profile, o, plans, [&](const std::string& line) {
    if (!a.json) std::fprintf(stderr, "[validate-engine] %s\n", line.c_str());
  });
  if (a.json) {
    nlohmann::json j = {{"model", a.model}, {"profile", a.profile}, {"requests", o.trace.size()}};
    j["plans"] = nlohmann::json::array();
    for (const auto& r : rows) j["plans"].push_back(sim::to_json(r));
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: %zu requests, profile %s; error = (simulated - engine) / engine\n%s", a.model.c_str(),
              o.trace.size(), a.profile.c_str(), sim::to_text(rows).c_str());
}

struct ExperimentArgs {
  std::string name;
  bool list = false;
  bool json = false;
  std::string out_dir;
};

void run_experiment(const ExperimentArgs& a) {
  if (a.list || a.name.empty()) {
    for (const auto& e : sim::experiment_registry()) std::printf("%-14s %s\n", e.name.c_str(), e.description.c_str());
    return;
  }
  const auto r = [&] {
    const auto& e = sim::find_experiment(a.name);
    ProgressReporter progress("loom sim experiment " + a.name, "simulations", simulations_finished());
    return e.run();
  }();
  if (a.json) std::printf("%s\n", sim::to_json(r).dump(2).c_str());
  else std::printf("%s", sim::to_text(r).c_str());
  if (!a.out_dir.empty()) {
    std::filesystem::create_directories(a.out_dir);
    std::map<std::string, std::string> files = r.files;
    if (files.empty()) {
      const std::string vs = sim::vs_paper_svg(r);
      if (vs.empty()) {
        std::fprintf(stderr, "loom sim experiment %s: no figure to write (no plot of its own and no paper number to "
                     "compare with)\n", a.name.c_str());
      } else {
        files[a.name + "-vs-paper.svg"] = vs;
      }
    }
    for (const auto& [name, content] : files) {
      const std::string path = a.out_dir + "/" + name;
      std::ofstream f(path);
      f << content;
      if (!f) fail("cannot write ", path);
      if (!a.json) std::printf("wrote %s\n", path.c_str());
    }
  }
}

struct PlanArgs {
  std::string model = "llama-3-70b";
  std::string hardware = "h200x8";
  std::string dtype;  // "": fp8 on GPUs, f32 on a loom profile
  int input_tokens = 4096, output_tokens = 250, num_requests = 512;
  double slo_ttft_ms = 0, slo_tpot_ms = 0;
  int64_t context = 0;  // > 0: price decode at this context instead of simulating requests
  bool json = false;
  bool seesaw = false;  // propose Seesaw (c_p, c_d) pairs for the offline load instead
};

struct Candidate {
  std::string plan;    // loom::Plan string form
  std::string policy;  // fixed | shift
  std::string label() const { return is_default_policy(policy) ? plan : plan + " +" + policy; }
  // The flags that run it (loom serve, generate, bench offline): the last line of a plan answer.
  std::string flags() const { return cat("--plan ", plan, " --policy ", policy); }
};

// The end of a successful `loom plan` answer: the flags to paste, alone on the last line.
void print_flags_line(const std::string& flags) {
  std::printf("to run it (loom serve --model PATH ..., or generate / bench offline):\n  %s\n", flags.c_str());
}

// Why no candidate was priced: every plan was refused (does not divide the model, the weights
// do not fit, ...); the reasons, most frequent first, at most 3.
std::string refusal_summary(const std::vector<std::pair<std::string, std::string>>& refused) {
  std::map<std::string, std::vector<std::string>> by_reason;
  for (const auto& [plan, why] : refused) by_reason[why].push_back(plan);
  std::vector<std::pair<std::string, std::vector<std::string>>> v(by_reason.begin(), by_reason.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.second.size() > y.second.size(); });
  std::string s;
  for (size_t i = 0; i < v.size() && i < 3; ++i)
    s += cat(i ? "; " : "", v[i].second.size(), " like ", v[i].second.front(), ": ", v[i].first);
  if (v.size() > 3) s += cat("; and ", v.size() - 3, " other reasons");
  return s;
}

// Every plan shape for n GPUs: dp x (tp, sp x tp, pp, tp x pp), and the Shift policy over each
// sp x tp.
std::vector<Candidate> candidate_plans(int n) {
  std::vector<Candidate> out;
  for (int dp = 1; dp <= n; dp *= 2) {
    const int g = n / dp;
    if (dp * g != n) continue;
    const std::string pre = dp > 1 ? cat("dp=", dp, ",") : "";
    for (int tp = 1; tp <= g; tp *= 2) {
      const int rest = g / tp;
      if (rest == 1) out.push_back({pre + cat("tp=", tp), "fixed"});
      else {
        out.push_back({pre + cat("sp=", rest, ",tp=", tp), "fixed"});
        out.push_back({pre + cat("sp=", rest, ",tp=", tp), "shift"});
        out.push_back({pre + cat("tp=", tp, ",pp=", rest), "fixed"});
      }
      // Helix (KVP x TPA attention, TP(N) FFN): kvp=rest,tpa=tp; validation drops TPA > K.
      if (rest > 1) out.push_back({pre + cat("kvp=", rest, ",tpa=", tp), "fixed"});
    }
  }
  return out;
}

// `loom plan --context N`: decode at an N-token context (the Helix paper's setting), priced step
// by step: TTL of one sequence, and of the largest batch the KV memory holds, per plan.
void run_plan_decode(const PlanArgs& a) {
  const sim::NodeSpec node = sim::parse_node(a.hardware);
  struct Point {
    Candidate c;
    sim::DecodeAtContext v;
  };
  std::vector<Point> pts;
  std::vector<std::pair<std::string, std::string>> refused;
  for (const auto& p : candidate_plans(node.gpus_per_node)) {
    if (!is_default_policy(p.policy)) continue;  // the Shift policy switches on prefill sizes only
    try {
      pts.push_back({p, sim::measure_decode(a.model, a.hardware, a.dtype, p.plan, a.context)});
    } catch (const Error& e) {
      // does not divide the model, the weights do not fit, or no sequence of that context fits
      refused.push_back({p.label(), e.what()});
    }
  }
  if (pts.empty())
    fail("no plan of ", a.model, " fits ", node.name(), " (", dtype_shown(a.dtype, a.hardware), ") at a ", a.context,
         "-token context: ", refused.size(), " refused (", refusal_summary(refused), ")");
  // Pareto over (TTL of one sequence: lower, tokens/s at the largest batch: higher).
  std::vector<Point> pareto;
  for (const auto& p : pts) {
    bool dom = false;
    for (const auto& o : pts)
      dom = dom || (o.v.ttl_b1_ms <= p.v.ttl_b1_ms && o.v.tok_s_max >= p.v.tok_s_max &&
                    (o.v.ttl_b1_ms < p.v.ttl_b1_ms || o.v.tok_s_max > p.v.tok_s_max));
    if (!dom) pareto.push_back(p);
  }
  std::sort(pareto.begin(), pareto.end(), [](const Point& x, const Point& y) { return x.v.ttl_b1_ms < y.v.ttl_b1_ms; });
  const Point* best = nullptr;
  for (const auto& p : pareto)
    if ((a.slo_tpot_ms <= 0 || p.v.ttl_max_ms <= a.slo_tpot_ms) && (!best || p.v.tok_s_max > best->v.tok_s_max)) best = &p;
  if (a.json) {
    nlohmann::json j;
    j["context"] = a.context;
    j["pareto"] = nlohmann::json::array();
    for (const auto& p : pareto)
      j["pareto"].push_back({{"plan", p.c.plan}, {"ttl_b1_ms", p.v.ttl_b1_ms}, {"max_batch", p.v.max_batch},
                             {"ttl_max_ms", p.v.ttl_max_ms}, {"tok_s", p.v.tok_s_max}});
    j["best"] = best ? nlohmann::json{{"plan", best->c.plan}, {"flags", best->c.flags()}} : nlohmann::json(nullptr);
    std::printf("%s\n", j.dump(2).c_str());
    if (!best) fail("no plan meets the SLO (TTL at the largest batch <= ", a.slo_tpot_ms, " ms)");
    return;
  }
  std::printf("%s on %s (%s), decode at a %lld-token context: %zu plans priced, %zu on the Pareto set over (TTL of "
              "one sequence, tokens/s at the largest batch the KV holds):\n",
              a.model.c_str(), node.name().c_str(), dtype_shown(a.dtype, a.hardware).c_str(), (long long)a.context,
              pts.size(), pareto.size());
  std::printf("  %-26s %12s %10s %12s %12s\n", "plan", "TTL B=1 ms", "max batch", "TTL max ms", "tok/s");
  for (const auto& p : pareto)
    std::printf("  %-26s %12.2f %10lld %12.2f %12.0f\n", p.c.plan.c_str(), p.v.ttl_b1_ms, (long long)p.v.max_batch,
                p.v.ttl_max_ms, p.v.tok_s_max);
  if (!best) {
    const Point* fastest = &pareto.front();  // sorted by TTL of one sequence
    fail("no plan meets the SLO (TTL at the largest batch <= ", a.slo_tpot_ms, " ms); the lowest TTL at its largest batch on the Pareto set: ",
         std::min_element(pareto.begin(), pareto.end(), [](const Point& x, const Point& y) { return x.v.ttl_max_ms < y.v.ttl_max_ms; })->v.ttl_max_ms,
         " ms; at batch 1: ", fastest->c.plan, " ", fastest->v.ttl_b1_ms, " ms");
  }
  std::printf("best for SLO (TTL at the largest batch <= %g ms; 0 = none): %s\n", a.slo_tpot_ms, best->c.plan.c_str());
  print_flags_line(best->c.flags());
}

// `loom plan --seesaw`: Seesaw's (c_p, c_d) pairs for an offline batch of the given lengths, by
// simulated throughput (exp_seesaw.cpp), beside the best fixed plan.
void run_plan_seesaw(const PlanArgs& a) {
  const ModelConfig model = sim::find_model(a.model);
  const sim::CostModel cm = sim::hardware_cost_model(model, a.hardware, a.dtype.empty() ? "bf16" : a.dtype, Plan::make_tp(1));
  const int gpus = cm.node().gpus_per_node;
  const std::vector<TraceRequest> trace(size_t(a.num_requests),
                                        TraceRequest{0.0, a.input_tokens, a.output_tokens, {}, 0, false, false});
  const auto pairs = sim::propose_seesaw_pairs(cm, gpus, trace, a.input_tokens + a.output_tokens);
  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& p : pairs)
      j.push_back({{"prefill", p.prefill.to_string()}, {"decode", p.decode.to_string()}, {"throughput_tok_s", p.tok_s},
                   {"best_fixed", p.best_fixed}, {"best_fixed_tok_s", p.best_fixed_tok_s}, {"switches", p.switches}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s on %s, %d requests of %d in / %d out, offline; Seesaw pairs (prefill plan -> decode plan, equal DP, "
              "CPU KV tier 80 GiB per GPU):\n",
              a.model.c_str(), cm.node().name().c_str(), a.num_requests, a.input_tokens, a.output_tokens);
  if (pairs.empty())
    fail("no Seesaw pair (prefill plan, decode plan of equal DP) of ", a.model, " fits ", cm.node().name(), " for ",
         a.num_requests, " requests of ", a.input_tokens, " in / ", a.output_tokens, " out");
  std::printf("  best fixed plan: %s, %.0f tok/s\n", pairs[0].best_fixed.c_str(), pairs[0].best_fixed_tok_s);
  std::printf("  %-16s %-16s %12s %9s %10s\n", "prefill (c_p)", "decode (c_d)", "tok/s", "vs fixed", "switches");
  for (const auto& p : pairs)
    std::printf("  %-16s %-16s %12.0f %8.2fx %10lld\n", p.prefill.to_string().c_str(), p.decode.to_string().c_str(),
                p.tok_s, p.best_fixed_tok_s > 0 ? p.tok_s / p.best_fixed_tok_s : 0.0, (long long)p.switches);
  const auto top = std::max_element(pairs.begin(), pairs.end(), [](const auto& x, const auto& y) { return x.tok_s < y.tok_s; });
  print_flags_line(cat("--plan ", top->prefill.to_string(), " --plan ", top->decode.to_string(), " --policy seesaw"));
}

// Why no plan of the Pareto set meets the SLOs: the best TTFT and the best TPOT on offer.
template <class Point>
std::string no_slo_reason(const PlanArgs& a, const std::vector<Point>& pareto) {
  const auto ttft = std::min_element(pareto.begin(), pareto.end(), [](const Point& x, const Point& y) { return x.v.ttft_ms < y.v.ttft_ms; });
  const auto tpot = std::min_element(pareto.begin(), pareto.end(), [](const Point& x, const Point& y) { return x.v.tpot_ms < y.v.tpot_ms; });
  char buf[256];
  std::snprintf(buf, sizeof buf, "the lowest TTFT is %.1f ms (%s), the lowest TPOT %.2f ms (%s)", ttft->v.ttft_ms,
                ttft->c.label().c_str(), tpot->v.tpot_ms, tpot->c.label().c_str());
  return cat("no plan meets the SLO (TTFT <= ", a.slo_ttft_ms, " ms, TPOT <= ", a.slo_tpot_ms, " ms; 0 = none): ", buf);
}

void run_plan(const PlanArgs& a) {
  // An unknown model is one line naming it and the catalog, before anything is priced.
  sim::find_model(a.model);
  if (a.seesaw) return run_plan_seesaw(a);
  if (a.context > 0) return run_plan_decode(a);
  const sim::NodeSpec node = sim::parse_node(a.hardware);
  struct Point {
    Candidate c;
    sim::LatencyThroughput v;
  };
  std::vector<Point> pts;
  const auto cands = candidate_plans(node.gpus_per_node);
  std::vector<std::pair<std::string, std::string>> refused;
  int done = 0;
  const bool bar = !a.json && ::isatty(STDERR_FILENO);  // only on a terminal
  for (const auto& p : cands) {
    ++done;
    if (bar) std::fprintf(stderr, "\r[%d/%zu] %-30s", done, cands.size(), p.label().c_str());
    try {
      pts.push_back({p, sim::measure_plan(a.model, a.hardware, a.dtype, p.plan, p.policy, a.input_tokens,
                                          a.output_tokens, a.num_requests)});
    } catch (const Error& e) {
      // A plan that does not divide the model or whose weights do not fit is not a candidate.
      refused.push_back({p.label(), e.what()});
    }
  }
  if (bar) std::fprintf(stderr, "\n");
  if (pts.empty())
    fail("no plan of ", a.model, " fits ", node.name(), " (", dtype_shown(a.dtype, a.hardware), "): ", refused.size(),
         " refused (", refusal_summary(refused), ")");
  auto dominates = [](const sim::LatencyThroughput& x, const sim::LatencyThroughput& y) {
    const bool ge = x.ttft_ms <= y.ttft_ms && x.tpot_ms <= y.tpot_ms && x.throughput_tok_s >= y.throughput_tok_s;
    const bool gt = x.ttft_ms < y.ttft_ms || x.tpot_ms < y.tpot_ms || x.throughput_tok_s > y.throughput_tok_s;
    return ge && gt;
  };
  std::vector<Point> pareto;
  for (const auto& p : pts) {
    bool dom = false;
    for (const auto& o : pts) dom = dom || dominates(o.v, p.v);
    if (!dom) pareto.push_back(p);
  }
  std::sort(pareto.begin(), pareto.end(), [](const Point& x, const Point& y) { return x.v.throughput_tok_s > y.v.throughput_tok_s; });
  const Point* best = nullptr;
  for (const auto& p : pareto) {
    const bool ok = (a.slo_ttft_ms <= 0 || p.v.ttft_ms <= a.slo_ttft_ms) && (a.slo_tpot_ms <= 0 || p.v.tpot_ms <= a.slo_tpot_ms);
    if (ok && (!best || p.v.throughput_tok_s > best->v.throughput_tok_s)) best = &p;
  }
  if (a.json) {
    nlohmann::json j;
    j["pareto"] = nlohmann::json::array();
    for (const auto& p : pareto)
      j["pareto"].push_back({{"plan", p.c.plan}, {"policy", p.c.policy}, {"ttft_ms", p.v.ttft_ms}, {"tpot_ms", p.v.tpot_ms}, {"throughput_tok_s", p.v.throughput_tok_s}});
    j["best"] = best ? nlohmann::json{{"plan", best->c.plan}, {"policy", best->c.policy}, {"flags", best->c.flags()}}
                     : nlohmann::json(nullptr);
    std::printf("%s\n", j.dump(2).c_str());
    if (!best) fail(no_slo_reason(a, pareto));
    return;
  }
  std::printf("%s on %s (%s), %d in / %d out: %zu plans priced, %zu on the Pareto set over (TTFT, TPOT, throughput):\n",
              a.model.c_str(), node.name().c_str(), dtype_shown(a.dtype, a.hardware).c_str(), a.input_tokens, a.output_tokens, pts.size(), pareto.size());
  std::printf("  %-26s %10s %10s %14s\n", "plan", "TTFT ms", "TPOT ms", "tok/s");
  for (const auto& p : pareto)
    std::printf("  %-26s %10.1f %10.2f %14.0f\n", p.c.label().c_str(), p.v.ttft_ms, p.v.tpot_ms, p.v.throughput_tok_s);
  if (!best) fail(no_slo_reason(a, pareto));
  std::printf("best for SLO (TTFT <= %g ms, TPOT <= %g ms; 0 = none): %s\n", a.slo_ttft_ms, a.slo_tpot_ms, best->c.label().c_str());
  print_flags_line(best->c.flags());
}

}  // namespace

void register_sim(CLI::App& app) {
  auto* sim = app.add_subcommand("sim", "Simulate layouts on hardware no one here has");
  sim->require_subcommand(1);

  auto* val = sim->add_subcommand("validate", "Cost model error against measured operator/collective times");
  auto va = std::make_shared<ValidateArgs>();
  val->add_option("--hardware", va->hardware,
                  "GPU the measurements were taken on (catalog name, hardware entry JSON or loom profile folder); "
                  "with --calibrate-on: the GPU to predict")
      ->capture_default_str();
  val->add_option("--measurements", va->dir,
                  "Folder of mlp_*, attention_*, <collective>_* and step_overhead_* .csv files")
      ->required();
  val->add_option("--calibrate-on", va->calibrate_on,
                  "Fit the efficiencies on this folder instead (another machine's measurements) and predict "
                  "--measurements from --hardware's datasheet entry alone");
  val->add_option("--calibrate-hardware", va->calibrate_hardware,
                  "What --calibrate-on was measured on (default: its hardware.json, or its folder name)");
  val->add_flag("--json", va->json, "One JSON object per file: file, median, p90, samples");
  val->add_flag("--by-op", va->by_op, "Also the median error of each operation");
  set_action(val, [va] { run_validate(*va); });

  auto* calib = sim->add_subcommand("calibrate", "Fit the cost model's calibration to measurements and print it");
  auto ca = std::make_shared<ValidateArgs>();
  calib->add_option("--hardware", ca->hardware, "GPU the measurements were taken on")->capture_default_str();
  calib->add_option("--measurements", ca->dir, "Folder of measurement files")->required();
  set_action(calib, [ca] { run_calibrate(*ca); });

  auto* run = sim->add_subcommand("run", "Simulate a trace on a model, hardware and plan");
  auto ra = std::make_shared<RunArgs>();
  run->add_option("--model", ra->model, "Catalog name or path to an HF config.json")->capture_default_str();
  run->add_option("--hardware", ra->hardware,
                  "Node: GPU x count (h200x8, a100x4:pairwise, l4x2), a hardware entry JSON, or a loom profile "
                  "folder (loom's CPU engine on that machine)")
      ->capture_default_str();
  run->add_option("--dtype", ra->dtype, "Weights: bf16, fp8 (default), fp4; on a loom profile f32 (default), f16, bf16, q8_0");
  run->add_option("--comm", ra->comm, "On a loom profile: the collectives' backend, local or mpi")->capture_default_str();
  run->add_option("--plan", ra->plan,
                  "Layout, as the engine's --plan: tp=8, dp=8, sp=8, sp=4,tp=2, pp=2, tp=2,pp=2, "
                  "shift:sp=8 (the shift config alone)")
      ->capture_default_str();
  run->add_option("--policy", ra->policy, policy_help(/*with_pool=*/false))
      ->capture_default_str();
  run->add_option("--threshold,--shift-threshold", ra->threshold, "Shift: tokens per step above which the base config runs")->capture_default_str();
  run->add_option("--sidp-threshold", ra->sidp_threshold,
                  "SiDP (--plan dp=D,weights=owner --policy sidp): the batch per replica below which the group runs "
                  "CaS (default: where the cost model prices a CaS step faster than WaS, at the trace's mean decode "
                  "context)");
  run->add_option("--sidp-window", ra->sidp_window_s,
                  "SiDP: seconds of simulated time the group's state must hold before a switch (0: 4 observations)")
      ->capture_default_str();
  run->add_option("--trace", ra->trace,
                  "Azure CSV, Mooncake JSONL, lengths CSV, or servegen:DIR[@START:DURATION] (a ServeGen client "
                  "folder's superposition over that window in seconds; --rate-scale multiplies every client's rate)");
  run->add_option("--synthetic", ra->synthetic, "poisson:RATE, gamma:RATE:CV, bursty:RATE:ON_S:OFF_S, batch");
  run->add_option("--num-requests", ra->num_requests, "Synthetic: requests")->capture_default_str();
  run->add_option("--prompt-len,--input-len", ra->prompt_len, "Synthetic: prompt tokens")->capture_default_str();
  run->add_option("--output-len", ra->output_len, "Synthetic: output tokens")->capture_default_str();
  run->add_option("--seed", ra->seed, "Synthetic: seed (arrivals seed, lengths seed+1, seed+2)")->capture_default_str();
  run->add_option("--rate-scale", ra->rate_scale, "Multiply the trace's arrival rate")->capture_default_str();
  run->add_option("--max-requests", ra->max_requests, "Keep the first N requests of the trace");
  run->add_option("--max-tokens-per-step", ra->max_tokens_per_step, "Chunked-prefill budget")->capture_default_str();
  run->add_option("--max-num-seqs", ra->max_num_seqs, "Running sequences per replica")->capture_default_str();
  run->add_option("--out", ra->out_dir, "Write requests.csv, summary.json and SVG plots here");
  run->add_flag("--json", ra->json, "Print the summary JSON");
  run->add_flag("--quiet", ra->quiet, "No progress bar");
  set_action(run, [ra] { run_sim(*ra); });

  auto* ve = sim->add_subcommand("validate-engine",
                                 "Run the same requests through the real engine and the profile-calibrated simulator "
                                 "and print the relative error per plan");
  auto vea = std::make_shared<ValidateEngineArgs>();
  ve->add_option("--model", vea->model, "Model file loom can load (llama2.c, GGUF, safetensors)")->required();
  ve->add_option("--tokenizer,-t", vea->tokenizer,
                 "Tokenizer file (llama2.c .bin or tokenizer.json) if not with the model; checked against the model");
  ve->add_option("--profile", vea->profile, "Profile of this machine (`loom profile -o DIR --model PATH`)");
  ve->add_option("--trace", vea->trace, "Azure CSV, Mooncake JSONL or lengths CSV (clipped to the context)");
  ve->add_option("--synthetic", vea->synthetic, "poisson:RATE, gamma:RATE:CV, bursty:RATE:ON_S:OFF_S, batch");
  ve->add_option("--num-requests", vea->num_requests, "Synthetic: requests; trace: the first N")->capture_default_str();
  ve->add_option("--prompt-len,--input-len", vea->prompt_len, "Synthetic: prompt tokens")->capture_default_str();
  ve->add_option("--output-len", vea->output_len, "Synthetic: output tokens")->capture_default_str();
  ve->add_option("--rate-scale", vea->rate_scale, "Multiply the arrival rate")->capture_default_str();
  ve->add_option("--seed", vea->seed, "Seed of the synthetic arrivals, lengths and prompt ids")->capture_default_str();
  ve->add_option("--plan", vea->plans, "Plan to compare, PLAN or PLAN@POLICY (repeatable: --plan tp=2 --plan dp=2 "
                                       "--plan sp=2@shift); a plan set joined by '|' ('pp=2|tp=2@seesaw'); under "
                                       "--policy seesaw the plans without @ form one set (c_p then c_d)");
  ve->add_option("--sidp-threshold", vea->sidp_threshold,
                 "SiDP threshold, sequences per replica (default: the WaS/CaS crossover of the profile's cost model)");
  ve->add_option("--cpu-kv-bytes", vea->cpu_kv_bytes,
                 "Seesaw's CPU KV tier per host, both sides (default: --kv-cache-bytes times the ranks)");
  ve->add_option("--policy", vea->policy, "Policy of plans without @POLICY")->capture_default_str();
  ve->add_option("--shift-threshold", vea->threshold, "Shift threshold (default: from the profile's cost model)");
  ve->add_option("--max-num-seqs", vea->max_num_seqs, "Running sequences per replica")->capture_default_str();
  ve->add_option("--max-tokens-per-step", vea->max_tokens_per_step, "Chunked-prefill budget")->capture_default_str();
  ve->add_option("--kv-cache-bytes", vea->kv_cache_bytes, "KV cache per rank (both sides)")->capture_default_str();
  ve->add_option("--max-model-len", vea->max_model_len, "Context limit (0: the model's)");
  ve->add_option("--steps-dir", vea->steps_dir,
                 "Write each plan's step records, engine and simulated: DIR/<i>_<plan>_engine.csv and _sim.csv");
  ve->add_flag("--json", vea->json, "Machine-readable output");
  set_action(ve, [vea] { run_validate_engine(*vea); });

  auto* exp = sim->add_subcommand("experiment", "Named reproductions of papers' figures");
  auto ea = std::make_shared<ExperimentArgs>();
  exp->add_option("name", ea->name, "Experiment name (see --list)");
  exp->add_flag("--list", ea->list, "List the experiments");
  exp->add_flag("--json", ea->json, "Machine-readable rows");
  exp->add_option("--out", ea->out_dir, "Write the experiment's plots (SVG) into this folder");
  set_action(exp, [ea] { run_experiment(*ea); });
}

void register_plan(CLI::App& app) {
  auto* plan = app.add_subcommand("plan", "Search layouts: Pareto set over TTFT, TPOT, throughput, best for SLOs");
  auto pa = std::make_shared<PlanArgs>();
  plan->add_option("--model", pa->model, "Catalog name or path to an HF config.json")->capture_default_str();
  plan->add_option("--hardware", pa->hardware, "Node, e.g. h200x8, or a loom profile folder (DIR or DIRxN ranks)")
      ->capture_default_str();
  plan->add_option("--dtype", pa->dtype, "bf16, fp8 (default), fp4; on a loom profile f32 (default), f16, bf16, q8_0");
  plan->add_option("--input-tokens,--input-len", pa->input_tokens, "Prompt tokens per request")->capture_default_str();
  plan->add_option("--output-tokens,--output-len", pa->output_tokens, "Output tokens per request")->capture_default_str();
  plan->add_option("--num-requests", pa->num_requests, "Requests in the throughput run")->capture_default_str();
  plan->add_option("--slo-ttft-ms", pa->slo_ttft_ms, "TTFT objective (0 = none)");
  plan->add_option("--slo-tpot-ms", pa->slo_tpot_ms, "TPOT objective (0 = none)");
  plan->add_option("--context", pa->context,
                   "Price decode at this context length (tokens) instead of simulating requests: TTL of one "
                   "sequence and tokens/s at the largest batch the KV holds (Helix plans shine here)");
  plan->add_flag("--json", pa->json, "Machine-readable output");
  plan->add_flag("--seesaw", pa->seesaw,
                 "Propose Seesaw (prefill plan, decode plan) pairs of equal DP for an offline batch of these lengths");
  set_action(plan, [pa] { run_plan(*pa); });
}

}  // namespace loom::cli
