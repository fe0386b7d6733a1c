#include "sim/experiments.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "sim/exp_nitsum.h"
#include "sim/model_catalog.h"
#include "sim/profile.h"
#include "sim/simulator.h"

namespace loom::sim {

LatencyThroughput measure_plan(const std::string& model, const std::string& hardware, const std::string& dtype,
                               const std::string& plan, const std::string& policy, int input_tokens,
                               int output_tokens, int num_requests) {
  SimConfig cfg;
  cfg.plan = Plan::parse(plan);
  CostModel cm = hardware_cost_model(find_model(model), hardware, dtype, cfg.plan);
  cm.set_arch(find_model_arch(model));
  cfg.policy = policy;
  cfg.max_model_len = input_tokens + output_tokens;
  const Simulator sim(cm, cfg);
  LatencyThroughput out;
  {
    // Lowest latency: one request alone (Shift 4.3.1: "we process requests sequentially").
    const TraceRequest one{0.0, input_tokens, output_tokens, {}, 0, false, false};
    const SimResult r = sim.run({one});
    const auto& q = r.metrics.requests().at(0);
    out.ttft_ms = q.ttft_s() * 1e3;
    out.tpot_ms = q.tpot_s().value_or(0) * 1e3;
  }
  {
    // Peak throughput: a batch of requests at once; input + output tokens per second while the
    // system is saturated, i.e. up to the last first token (every request admitted by then).
    std::vector<TraceRequest> batch(size_t(num_requests), TraceRequest{0.0, input_tokens, output_tokens, {}, 0, false, false});
    const SimResult r = sim.run(batch);
    double t_sat = 0;
    for (const auto& q : r.metrics.requests()) t_sat = std::max(t_sat, q.first_token_s);
    double tokens = 0;
    for (const auto& st : r.metrics.steps())
      if (st.end_s <= t_sat) tokens += st.num_tokens;
    out.throughput_tok_s = t_sat > 0 ? tokens / t_sat : 0;
  }
  return out;
}

namespace {

// Shift Parallelism, section 4.3.1 / Figure 12(a): Llama-70B FP8 on 8xH200, 4k input and 250
// output tokens. Figure 12 is a plot; the paper's text states only these numbers for Llama:
//  - TTFT: Shift is 1.56x lower than TP and 6x lower than DP (no absolute value);
//  - TPOT: Shift's is 9.34 ms, the lowest;
//  - throughput: relative to DP (the highest), TP loses 46% and Shift 18% (no absolute value).
// The plotted bars are not in the text we have, so values the text does not state are left
// without a paper number (null), and ratio-only statements are anchored on the simulated
// reference (Shift for TTFT, DP for throughput): the comparison then tests the stated ratio.
ExperimentResult run_shift_431() {
  const std::string model = "llama-3-70b", hw = "h200x8", dtype = "fp8";
  const int in = 4096, out = 250, n = 1024;
  struct C {
    const char* name;
    const char* plan;
    const char* policy;
  };
  const C configs[] = {{"dp", "dp=8", "fixed"}, {"tp", "tp=8", "fixed"}, {"sp", "sp=8", "fixed"}, {"shift", "sp=8", "shift"}};
  std::map<std::string, LatencyThroughput> v;
  for (const auto& c : configs) v[c.name] = measure_plan(model, hw, dtype, c.plan, c.policy, in, out, n);
  ExperimentResult r;
  r.name = "shift-4.3.1";
  r.title = "Shift 4.3.1 / Figure 12(a): Llama-70B FP8 on 8xH200, 4096 in / 250 out";
  const double shift_ttft = v["shift"].ttft_ms, dp_tput = v["dp"].throughput_tok_s;
  auto row = [&](const char* metric, const char* cfg, double sim, std::optional<double> paper, const char* basis) {
    r.rows.push_back({metric, cfg, sim, paper, basis});
  };
  row("ttft_ms", "dp", v["dp"].ttft_ms, 6.0 * shift_ttft, "text: Shift TTFT 6x lower than DP (anchored on simulated Shift)");
  row("ttft_ms", "tp", v["tp"].ttft_ms, 1.56 * shift_ttft, "text: Shift TTFT 1.56x lower than TP (anchored on simulated Shift)");
  row("ttft_ms", "sp", v["sp"].ttft_ms, std::nullopt, "plotted only");
  row("ttft_ms", "shift", shift_ttft, std::nullopt, "plotted only (the lowest)");
  row("tpot_ms", "dp", v["dp"].tpot_ms, std::nullopt, "plotted only");
  row("tpot_ms", "tp", v["tp"].tpot_ms, std::nullopt, "plotted only (4.3.2: similar to Shift)");
  row("tpot_ms", "sp", v["sp"].tpot_ms, std::nullopt, "plotted only (Table 1: worst)");
  row("tpot_ms", "shift", v["shift"].tpot_ms, 9.34, "text: 9.34 ms");
  row("throughput_tok_s", "dp", dp_tput, std::nullopt, "plotted only (the highest)");
  row("throughput_tok_s", "tp", v["tp"].throughput_tok_s, 0.54 * dp_tput, "text: TP loses 46% vs DP (anchored on simulated DP)");
  row("throughput_tok_s", "sp", v["sp"].throughput_tok_s, std::nullopt, "plotted only");
  row("throughput_tok_s", "shift", v["shift"].throughput_tok_s, 0.82 * dp_tput,
      "text: Shift loses 18% vs DP (anchored on simulated DP)");
  r.notes.push_back(
      "Plans: dp=8 (8 replicas of tp=1), tp=8, sp=8, and sp=8 under the shift policy (sp=8 base, its shift config "
      "shift:sp=8 = tp=8 in the Shift order for steps of <= 256 tokens).");
  r.notes.push_back("Throughput: input+output tokens/s of 1024 requests sent at once, until the last first token.");
  r.notes.push_back("Calibration: A100 fit carried to H200 as efficiencies; see `loom sim validate`.");
  return r;
}

}  // namespace

const std::vector<Experiment>& experiment_registry() {
  static const std::vector<Experiment> e = [] {
    std::vector<Experiment> v = {
        {"shift-4.3.1", "Shift 4.3.1 / Fig. 12: TTFT, TPOT, peak throughput of DP, TP, SP, Shift (Llama-70B FP8, 8xH200)",
         run_shift_431},
        {"nitsum-fig7", "Nitsum 3.2.2 / Fig. 7: KV migration 0.5-5 GB (Llama-3.1-8B), page by page vs aggregated", run_nitsum_fig7},
        {"nitsum-fig14", "Nitsum 4.2.1 / Fig. 14: ablation ladder (Qwen-14B, 8 H100, 70 req/s)", run_nitsum_fig14},
        {"nitsum-goodput", "Nitsum 4.1 / Fig. 10: goodput vs rate, Nitsum / static TP / per-tier split / no P/D", run_nitsum_goodput},
        {"nitsum-goodput-h100", "Nitsum 4.1 / Fig. 10: goodput vs rate on H100 (Table 1's 8B and 14B setups)",
         run_nitsum_goodput_h100},
        {"nitsum-planner", "Nitsum 4.2.3: planning time, 128 GPUs, 4 tiers", run_nitsum_planner},
    };
    for (auto&& part : {helix_experiments()}) v.insert(v.end(), part.begin(), part.end());
    for (Experiment& x : sidp_experiments()) v.push_back(std::move(x));
    for (Experiment& x : seesaw_experiments()) v.push_back(std::move(x));  // exp_seesaw.cpp
    return v;
  }();
  return e;
}

const Experiment& find_experiment(const std::string& name) {
  for (const auto& e : experiment_registry())
    if (e.name == name) return e;
  std::string known;
  for (const auto& e : experiment_registry()) known += (known.empty() ? "" : ", ") + e.name;
  fail("unknown experiment '", name, "' (known: ", known, ")");
}

nlohmann::json to_json(const ExperimentResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& x : r.rows) {
    nlohmann::json j = {{"metric", x.metric}, {"config", x.config}, {"simulated", x.simulated}};
    j["paper"] = x.paper ? nlohmann::json(*x.paper) : nlohmann::json(nullptr);
    j["basis"] = x.basis;
    rows.push_back(j);
  }
  return {{"experiment", r.name}, {"rows", rows}, {"notes", r.notes}};
}

std::string to_text(const ExperimentResult& r) {
  std::string s = r.title + "\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-18s %-7s %12s %12s %8s  %s\n", "metric", "config", "simulated", "paper", "ratio", "paper basis");
  s += buf;
  for (const auto& x : r.rows) {
    if (x.paper)
      std::snprintf(buf, sizeof buf, "%-18s %-7s %12.2f %12.2f %8.3f  %s\n", x.metric.c_str(), x.config.c_str(),
                    x.simulated, *x.paper, x.simulated / *x.paper, x.basis.c_str());
    else
      std::snprintf(buf, sizeof buf, "%-18s %-7s %12.2f %12s %8s  %s\n", x.metric.c_str(), x.config.c_str(), x.simulated,
                    "-", "-", x.basis.c_str());
    s += buf;
  }
  for (const auto& n : r.notes) s += "note: " + n + "\n";
  return s;
}

}  // namespace loom::sim
