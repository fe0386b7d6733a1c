// Seesaw experiments (../shared/papers/004 §6, issue 13): the simulator runs loom's own
// Scheduler in Seesaw's phases (engine/seesaw_tier.h PhaseMode: prefill under c_p, decode under c_d,
// the KV parked in the CPU tier, transitions only when the tier is full or empty) against every
// fixed (DP, TP, PP) plan of the node, on the paper's PCIe nodes (Table 1 GPUs; "PCIe 4.0 8x,
// providing 16 GiB/s", §6.1; 80 GiB of host memory per GPU for the tier). Offline: every request
// arrives at 0; the metric is end-to-end throughput (prompt + output tokens / makespan).
// Priced (CostModel):
//  - PP in steady state (PipelineSchedule::Steady): PP micro-batches of about 1/PP of the step's
//    tokens stay in flight from step to step, as in vLLM's virtual engines and Seesaw's workers
//    (§5.1), so a step costs PP stage slots of the busiest micro-batch, each re-reading the stage's
//    weights (§3.1 Observation 2), plus the sends between stages; the pipeline fill once per start
//    and after every transition;
//  - TP's all-reduce over PCIe: ring, 2(n-1)/n of the activations [tokens, d] per GPU link at
//    16 GiB/s times the calibrated efficiency, twice per layer (§3.1 Observation 1: the activation
//    stays whole whatever the TP degree, and the all-reduce bandwidth falls as n grows);
//  - the KV swaps over each GPU's host link, overlapped with the step (W10, W11), and at a
//    transition the weights of c_d a GPU did not hold under c_p, reloaded from host memory
//    (CostModel::reshard_s).
// For 70B on 8 A10 the hand computation of a decode and a prefill step under TP8, PP8 and TP4PP2
// is in tests/sim/seesaw_sim_test.cpp (SeesawPricing): a PP8 prefill token costs 0.19 ms against
// TP8's 0.62 ms, a PP8 decode token 19 ms against TP8's 3.7 ms (16 sequences at context 3500).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <tuple>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/seesaw.h"
#include "engine/trace.h"
#include "sim/experiments.h"
#include "sim/model_catalog.h"
#include "sim/simulator.h"

namespace loom::sim {

namespace {

constexpr double kGiB = 1073741824.0;

// An 8-GPU (or `gpus`) PCIe node of the paper: its GPU from the catalog (Table 1 figures), peers
// and host over PCIe 4.0 x8 at 16 GiB/s (§6.1).
NodeSpec paper_node(const std::string& gpu, int gpus) {
  NodeSpec n;
  n.gpu = find_gpu(gpu);
  n.gpu.nvlink = false;
  n.gpu.link_bw = 16 * kGiB;
  n.gpus_per_node = gpus;
  n.topology = Topology::Pcie;
  return n;
}

// `all_reduce_scale`: the interconnect bandwidth relative to PCIe for Fig. 14, applied as the
// paper does ("mutate the all-reduce time", §6.5): every all-reduce takes 1 / scale of its time.
CostModel paper_cost(const std::string& model, const NodeSpec& node, double all_reduce_scale = 1.0) {
  CostModelOptions o;
  o.weight_dtype = SimDType::BF16;  // the paper runs float16: same bytes and tensor-core peak
  o.all_reduce_time_scale = 1.0 / all_reduce_scale;
  return CostModel(find_model(model), node, o);
}

// The arXiv-summarization lengths (../shared/data/traces/arxiv_summarization_lengths.csv, read
// at run time: $LOOM_SHARED_DIR/data/traces, then ../shared and ../../shared from the working
// directory), the first n, all at 0. Empty, with *source saying so, when the file is not found:
// the experiments then skip the arXiv cases with a note.
std::vector<TraceRequest> arxiv(int n, int max_context, std::string* source) {
  std::vector<std::string> dirs;
  if (const char* s = std::getenv("LOOM_SHARED_DIR")) dirs.push_back(std::string(s) + "/data/traces");
  dirs.push_back("../shared/data/traces");
  dirs.push_back("../../shared/data/traces");
  TraceOptions o;
  o.max_requests = n;
  o.max_context = max_context;
  o.clip = true;
  for (const std::string& d : dirs) {
    const std::string p = d + "/arxiv_summarization_lengths.csv";
    if (!std::filesystem::exists(p)) continue;
    *source = p;
    std::vector<TraceRequest> t = read_lengths_csv(p, o);
    for (TraceRequest& r : t) r.arrival_s = 0;
    return t;
  }
  *source = "";
  return {};
}

const char* const kNoArxiv =
    "skipped: arxiv_summarization_lengths.csv not found (set LOOM_SHARED_DIR to the shared folder, or run from "
    "a checkout beside ../shared)";

// ShareGPT-like: input and output of comparable length (the paper samples 2000 conversations;
// the file is not in ../shared): both ~N(300, 250) clipped to [8, 2048].
std::vector<TraceRequest> sharegpt(int n) {
  return synthesize_trace(n, ArrivalSpec::all_at_zero(), 1, LengthDist::normal_clipped(300, 250, 8, 2048), 2,
                          LengthDist::normal_clipped(300, 250, 8, 2048), 3);
}

struct Outcome {
  std::string config;  // "tp=4,pp=2" or "pp=8 -> tp=4,pp=2"
  double tok_s = -1;   // -1: does not fit
  int64_t switches = 0;
};

Outcome simulate(const CostModel& cm, const std::vector<Plan>& plans, const std::string& policy,
                 const std::vector<TraceRequest>& trace, int max_model_len) {
  Outcome o;
  o.config = plans[0].to_string();
  if (plans.size() > 1) o.config += " -> " + plans[1].to_string();
  SimConfig c;
  c.plan = plans[0];
  c.more_plans.assign(plans.begin() + 1, plans.end());
  c.policy = policy;
  c.max_model_len = max_model_len;
  // Chunked prefill, 2048 tokens per step and 256 sequences (the tuned vLLM baseline, W13), per
  // pipeline: vLLM runs PP with one scheduler per stage ("virtual engines", each with these
  // limits and 1/PP of the KV blocks), and Seesaw's decode step covers every resident sequence
  // in PP micro-batches (§5.1), so the one scheduler here gets PP times the limits and the cost
  // model cuts each step into PP micro-batches (PipelineSchedule::Steady).
  int pp = 1;
  for (const Plan& p : plans) pp = std::max(pp, p.pp);
  c.max_tokens_per_step = 2048 * pp;
  c.max_num_seqs = 256 * pp;
  c.cpu_kv_bytes = 80 * kGiB * cm.node().gpus_per_node;  // §6.1: 80 GiB of host memory per GPU
  try {
    const SimResult r = Simulator(cm, c).run(trace);
    o.tok_s = r.total_tokens_per_s;
    o.switches = r.num_switches;
  } catch (const Error&) {
  }
  return o;
}

// The outcomes of `jobs` (plan lists with their policy), in order. The simulations are
// independent and deterministic, so they run on the machine's cores and the result is the same
// as one after another (a fig10 case is about 40 of them).
using Job = std::pair<std::vector<Plan>, std::string>;
std::vector<Outcome> simulate_all(const CostModel& cm, const std::vector<Job>& jobs,
                                  const std::vector<TraceRequest>& trace, int max_model_len) {
  std::vector<Outcome> out(jobs.size());
  parallel_for_each_index(jobs.size(),
                          [&](size_t i) { out[i] = simulate(cm, jobs[i].first, jobs[i].second, trace, max_model_len); });
  return out;
}

// Every (dp, tp, pp) of `gpus` the model divides (tp within a node: all of them here).
std::vector<Plan> node_plans(const CostModel& cm, int gpus) {
  std::vector<Plan> out;
  for (int dp = 1; dp <= gpus; dp *= 2)
    for (int tp = 1; dp * tp <= gpus; tp *= 2) {
      const int pp = gpus / (dp * tp);
      if (dp * tp * pp != gpus) continue;
      Plan p;
      p.dp = dp;
      p.tp = tp;
      p.pp = pp;
      try {
        validate(p, cm.shape());
      } catch (const Error&) {
        continue;
      }
      out.push_back(p.normalized());
    }
  return out;
}

struct Comparison {
  Outcome best_fixed, best_seesaw;
  double speedup() const { return best_fixed.tok_s > 0 ? best_seesaw.tok_s / best_fixed.tok_s : 0; }
};

// The best fixed plan (vLLM's full sweep, §6.1) and the best Seesaw pair of equal DP.
Comparison compare(const CostModel& cm, int gpus, const std::vector<TraceRequest>& trace, int max_model_len,
                   const std::vector<Plan>* only_fixed = nullptr) {
  Comparison c;
  const std::vector<Plan> plans = node_plans(cm, gpus);
  std::vector<Job> jobs;
  for (const Plan& p : only_fixed ? *only_fixed : plans) jobs.push_back({{p}, "fixed"});
  const size_t n_fixed = jobs.size();
  for (const Plan& cp : plans)
    for (const Plan& cd : plans) {
      if (cp == cd || cp.dp != cd.dp) continue;
      // Seesaw's premise (§3.1): c_p has no more TP than c_d.
      if (cp.tp > cd.tp) continue;
      jobs.push_back({{cp, cd}, "seesaw"});
    }
  const std::vector<Outcome> outcomes = simulate_all(cm, jobs, trace, max_model_len);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    Outcome& best = i < n_fixed ? c.best_fixed : c.best_seesaw;
    if (outcomes[i].tok_s > best.tok_s) best = outcomes[i];
  }
  return c;
}

double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double logsum = 0;
  for (double x : v) logsum += std::log(x);
  return std::exp(logsum / double(v.size()));
}

ExperimentResult run_fig10() {
  ExperimentResult r;
  r.name = "seesaw-fig10";
  r.title = "Seesaw 6.2 / Fig. 10: throughput of Seesaw vs the best fixed plan, A10 and L4 PCIe nodes";
  struct Case {
    const char* model;
    int gpus;
  };
  const Case cases[] = {{"llama-3-15b", 4}, {"codellama-34b", 8}, {"llama-2-70b", 8}};
  std::string arxiv_source;
  const auto ax = arxiv(500, 8192, &arxiv_source);
  const auto sg = sharegpt(2000);
  std::vector<double> all;
  for (const char* gpu : {"a10", "l4"}) {
    std::vector<double> speedups;
    for (const Case& k : cases) {
      const CostModel cm = paper_cost(k.model, paper_node(gpu, k.gpus));
      using Load = std::tuple<const char*, const std::vector<TraceRequest>*, int>;
      for (const auto& [wname, trace, len] : std::vector<Load>{Load{"arxiv", &ax, 8192}, Load{"sharegpt", &sg, 4096}}) {
        if (trace->empty()) continue;
        const Comparison c = compare(cm, k.gpus, *trace, std::min(len, cm.model().max_seq_len));
        const std::string where = cat(gpu, " ", k.model, " x", k.gpus, " ", wname);
        r.rows.push_back({"throughput_tok_s", cat(where, " best fixed ", c.best_fixed.config), c.best_fixed.tok_s,
                          std::nullopt, "plotted only"});
        r.rows.push_back({"throughput_tok_s", cat(where, " seesaw ", c.best_seesaw.config), c.best_seesaw.tok_s,
                          std::nullopt, "plotted only"});
        r.rows.push_back({"speedup", where, c.speedup(), std::nullopt, "plotted only (6.2, 8: 1.06x-1.78x)"});
        r.rows.push_back({"seesaw_switches", where, double(c.best_seesaw.switches), std::nullopt, "not printed"});
        if (c.speedup() > 0) speedups.push_back(c.speedup()), all.push_back(c.speedup());
      }
    }
    double mx = 0;
    for (double x : speedups) mx = std::max(mx, x);
    const bool a10 = std::string(gpu) == "a10";
    r.rows.push_back({"speedup_geomean", gpu, geomean(speedups), a10 ? 1.45 : 1.29,
                      a10 ? "6.2: A10 geometric mean 1.45x" : "6.2: L4 geometric mean 1.29x"});
    r.rows.push_back({"speedup_max", gpu, mx, a10 ? 1.78 : 1.52, a10 ? "6.2: A10 up to 1.78x" : "6.2: L4 up to 1.52x"});
  }
  r.rows.push_back({"speedup_geomean", "all", geomean(all), 1.36,
                    "abstract / 6.2: 1.36x on average (geometric: sqrt(1.45 x 1.29) = 1.37)"});
  r.notes.push_back("Best fixed: the highest-throughput (dp, tp, pp) of the node with chunked prefill (2048 tokens and "
                    "256 sequences per step per pipeline), vLLM's full sweep (6.1); Seesaw: the best (c_p, c_d) pair "
                    "of equal DP with c_p's TP <= c_d's, the tier 80 GiB per GPU (6.1).");
  r.notes.push_back(ax.empty() ? std::string("arxiv: ") + kNoArxiv
                               : "arxiv: " + arxiv_source + ", the first 500 requests (6.1), clipped to 8192 tokens");
  r.notes.push_back("sharegpt: 2000 synthetic requests, input and output ~N(300, 250) clipped to [8, 2048] (the "
                    "ShareGPT sample is not in ../shared).");
  r.notes.push_back("Nodes: the catalog GPU (Table 1: A10 24 GB 600 GB/s 125 TF; L4 24 GB 300 GB/s 121 TF) with "
                    "PCIe 4.0 x8 (16 GiB/s) between GPUs and to the host; 15B on 4 GPUs, 34B and 70B on 8 (6.2).");
  return r;
}

// The fixed plans of every (dp, tp, pp) of `gpus` that fit (throughput -1 when the KV of one
// request does not fit either).
std::vector<Outcome> fixed_outcomes(const CostModel& cm, const std::vector<Plan>& plans,
                                    const std::vector<TraceRequest>& trace, int max_model_len) {
  std::vector<Job> jobs;
  for (const Plan& p : plans) jobs.push_back({{p}, "fixed"});
  return simulate_all(cm, jobs, trace, max_model_len);
}

ExperimentResult run_fig13() {
  ExperimentResult r;
  r.name = "seesaw-fig13";
  r.title = "Seesaw 6.5 / Fig. 13: 70B on 8 A10, 3000 input tokens, output swept";
  const CostModel cm = paper_cost("llama-2-70b", paper_node("a10", 8));
  const std::vector<Plan> fixed = {Plan::parse("pp=8"), Plan::parse("tp=2,pp=4"), Plan::parse("tp=4,pp=2"),
                                   Plan::parse("tp=8")};
  for (int out : {1, 16, 32, 64, 128, 256, 512, 1024, 3000}) {
    const std::vector<TraceRequest> trace(200, TraceRequest{0.0, 3000, out, {}, 0, false, false});
    std::string best;
    double best_tok = -1;
    for (const Outcome& o : fixed_outcomes(cm, fixed, trace, 3000 + out)) {
      r.rows.push_back({"throughput_tok_s", cat("out=", out, " ", o.config), o.tok_s, std::nullopt, "plotted only"});
      if (o.tok_s > best_tok) best_tok = o.tok_s, best = o.config;
    }
    const Comparison c = compare(cm, 8, trace, 3000 + out, &fixed);
    r.rows.push_back({"throughput_tok_s", cat("out=", out, " seesaw"), c.best_seesaw.tok_s, std::nullopt,
                      "6.5: Seesaw consistently outperforms other strategies (plotted only)"});
    r.notes.push_back(cat("output ", out, ": best fixed ", best, "; Seesaw ", c.best_seesaw.config, " (",
                          c.best_seesaw.switches, " switches) at ", c.speedup(), "x of it"));
  }
  r.notes.push_back("200 requests of 3000 input tokens at t = 0 per output length (the paper's count is not printed). "
                    "Paper (plotted only): PP8 best for prefill-heavy, TP4PP2 for decode-heavy, TP2PP4 in between; at "
                    "output 1 Seesaw ~ PP8. TP8 is not a named curve of Fig. 13; it is shown because 6.2's "
                    "baseline is a full sweep.");
  return r;
}

ExperimentResult run_fig14() {
  ExperimentResult r;
  r.name = "seesaw-fig14";
  r.title = "Seesaw 6.5 / Fig. 14: 34B on 8 A10, arXiv-summarization, all-reduce bandwidth 0.1x-50x PCIe";
  std::string source;
  const auto trace = arxiv(500, 8192, &source);
  if (trace.empty()) {
    r.notes.push_back(kNoArxiv);
    return r;
  }
  for (double scale : {0.1, 0.3, 1.0, 3.0, 10.0, 50.0}) {
    const CostModel cm = paper_cost("codellama-34b", paper_node("a10", 8), scale);
    const std::vector<Plan> plans = node_plans(cm, 8);
    std::string best;
    double best_tok = -1;
    for (const Outcome& o : fixed_outcomes(cm, plans, trace, 8192)) {
      r.rows.push_back({"throughput_tok_s", cat(scale, "x ", o.config), o.tok_s, std::nullopt, "plotted only"});
      if (o.tok_s > best_tok) best_tok = o.tok_s, best = o.config;
    }
    const Comparison c = compare(cm, 8, trace, 8192, &plans);
    r.rows.push_back({"throughput_tok_s", cat(scale, "x seesaw"), c.best_seesaw.tok_s, std::nullopt,
                      "6.5: better than any fixed strategy from 0.1x to 50x (plotted only)"});
    r.rows.push_back({"speedup", cat(scale, "x"), c.speedup(), std::nullopt, "plotted only (> 1)"});
    r.notes.push_back(cat(scale, "x: best fixed ", best, "; Seesaw ", c.best_seesaw.config, " at ", c.speedup(),
                          "x of it"));
  }
  r.notes.push_back("arxiv: " + source + ", the first 500 requests. Every all-reduce takes 1 / scale of its PCIe "
                    "time (the paper re-scales traced all-reduce times, 6.5); KV swaps, weight reloads and pipeline "
                    "sends keep the PCIe price. Slow links favour PP, fast ones TP (6.5).");
  return r;
}

}  // namespace

std::vector<Experiment> seesaw_experiments() {
  return {
      {"seesaw-fig10", "Seesaw 6.2 / Fig. 10: Seesaw vs the best fixed plan on A10 and L4 nodes (15B, 34B, 70B)",
       run_fig10},
      {"seesaw-fig13", "Seesaw 6.5 / Fig. 13: 70B on 8 A10, 3000 in, output swept: PP8 / TP2PP4 / TP4PP2 / Seesaw",
       run_fig13},
      {"seesaw-fig14", "Seesaw 6.5 / Fig. 14: 34B on 8 A10, interconnect 0.1x-50x PCIe", run_fig14},
  };
}

std::vector<SeesawPair> propose_seesaw_pairs(const CostModel& cm, int gpus, const std::vector<TraceRequest>& trace,
                                             int max_model_len, int top) {
  std::vector<SeesawPair> out;
  const std::vector<Plan> plans = node_plans(cm, gpus);
  double best_fixed = 0;
  std::string best_fixed_name;
  for (const Plan& p : plans) {
    const Outcome o = simulate(cm, {p}, "fixed", trace, max_model_len);
    if (o.tok_s > best_fixed) best_fixed = o.tok_s, best_fixed_name = o.config;
  }
  for (const Plan& cp : plans)
    for (const Plan& cd : plans) {
      if (cp == cd || cp.dp != cd.dp || cp.tp > cd.tp) continue;
      const Outcome o = simulate(cm, {cp, cd}, "seesaw", trace, max_model_len);
      if (o.tok_s > 0) out.push_back({cp, cd, o.tok_s, best_fixed, best_fixed_name, o.switches});
    }
  std::sort(out.begin(), out.end(), [](const SeesawPair& a, const SeesawPair& b) { return a.tok_s > b.tok_s; });
  if (int(out.size()) > top) out.resize(size_t(top));
  return out;
}

}  // namespace loom::sim
