#include "sim/experiments.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "sim/exp_nitsum.h"
#include "sim/model_catalog.h"
#include "sim/profile.h"
#include "sim/simulator.h"
#include "sim/svg.h"

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

// Shift Parallelism, section 4.3.1 / Figure 12: Llama-70B FP8 (a) and Qwen-32B FP8 (b) on 8xH200,
// 4k input and 250 output tokens. Figure 12 is a plot; the paper's text states only these numbers:
//  - TTFT: Shift is 1.56x lower than TP and 6x lower than DP (Llama); "4.45x and 1.31x for Qwen"
//    in the same "TP and DP" order, which would put Qwen's DP below its TP, the reverse of every
//    other panel and of the mechanism (DP prefills a 4k prompt on one GPU): read as 4.45x vs DP and
//    1.31x vs TP (ASSUMPTION, tests/sim/shift_bands.h);
//  - TPOT: Shift's is 9.34 ms (Llama) and 8.68 ms (Qwen), the lowest;
//  - throughput: relative to DP (the highest), TP loses 46% and 45% (Llama, Qwen), Shift 18% and
//    23% (no absolute value).
// The plotted bars are not in the text we have, so values the text does not state are left
// without a paper number (null); the ratio and loss statements are rows of their own (the
// ratio_* and loss_* metrics, banded in tests/sim/shift_bands.h), and the absolute rows anchored
// on the simulated reference (Shift for TTFT, DP for throughput) are kept for the old test.
void shift_431_panel(ExperimentResult& r, const std::string& model, const std::string& prefix, double tpot_paper,
                     double ttft_dp_x, double ttft_tp_x, double loss_tp, double loss_shift) {
  const std::string hw = "h200x8", dtype = "fp8";
  const int in = 4096, out = 250, n = 1024;
  struct C {
    const char* name;
    const char* plan;
    const char* policy;
  };
  const C configs[] = {{"dp", "dp=8", "fixed"}, {"tp", "tp=8", "fixed"}, {"sp", "sp=8", "fixed"}, {"shift", "sp=8", "shift"}};
  std::map<std::string, LatencyThroughput> v;
  for (const auto& c : configs) v[c.name] = measure_plan(model, hw, dtype, c.plan, c.policy, in, out, n);
  const double shift_ttft = v["shift"].ttft_ms, dp_tput = v["dp"].throughput_tok_s;
  auto row = [&](const std::string& metric, const std::string& cfg, double sim, std::optional<double> paper,
                 const std::string& basis) { r.rows.push_back({metric, prefix + cfg, sim, paper, basis}); };
  row("ttft_ms", "dp", v["dp"].ttft_ms, ttft_dp_x * shift_ttft, cat("text: Shift TTFT ", ttft_dp_x, "x lower than DP (anchored on simulated Shift)"));
  row("ttft_ms", "tp", v["tp"].ttft_ms, ttft_tp_x * shift_ttft, cat("text: Shift TTFT ", ttft_tp_x, "x lower than TP (anchored on simulated Shift)"));
  row("ttft_ms", "sp", v["sp"].ttft_ms, std::nullopt, "plotted only");
  row("ttft_ms", "shift", shift_ttft, std::nullopt, "plotted only (the lowest)");
  row("tpot_ms", "dp", v["dp"].tpot_ms, std::nullopt, "plotted only");
  row("tpot_ms", "tp", v["tp"].tpot_ms, std::nullopt, "plotted only (4.3.2: similar to Shift)");
  row("tpot_ms", "sp", v["sp"].tpot_ms, std::nullopt, "plotted only (Table 1: worst)");
  row("tpot_ms", "shift", v["shift"].tpot_ms, tpot_paper, cat("text: ", tpot_paper, " ms"));
  row("throughput_tok_s", "dp", dp_tput, std::nullopt, "plotted only (the highest)");
  row("throughput_tok_s", "tp", v["tp"].throughput_tok_s, (1 - loss_tp) * dp_tput,
      cat("text: TP loses ", loss_tp * 100, "% vs DP (anchored on simulated DP)"));
  row("throughput_tok_s", "sp", v["sp"].throughput_tok_s, std::nullopt, "plotted only");
  row("throughput_tok_s", "shift", v["shift"].throughput_tok_s, (1 - loss_shift) * dp_tput,
      cat("text: Shift loses ", loss_shift * 100, "% vs DP (anchored on simulated DP)"));
  // The statements as the ratios and losses they are.
  row("ratio_ttft", "dp/shift", v["dp"].ttft_ms / shift_ttft, ttft_dp_x, "text: Shift's TTFT this many times lower than DP's");
  row("ratio_ttft", "tp/shift", v["tp"].ttft_ms / shift_ttft, ttft_tp_x, "text: Shift's TTFT this many times lower than TP's");
  row("loss_vs_dp", "tp", 1 - v["tp"].throughput_tok_s / dp_tput, loss_tp, "text: TP's throughput loss against DP");
  row("loss_vs_dp", "shift", 1 - v["shift"].throughput_tok_s / dp_tput, loss_shift, "text: Shift's throughput loss against DP");
}

ExperimentResult run_shift_431() {
  ExperimentResult r;
  r.name = "shift-4.3.1";
  r.title = "Shift 4.3.1 / Figure 12: Llama-70B FP8 (a) and Qwen-32B FP8 (b) on 8xH200, 4096 in / 250 out";
  shift_431_panel(r, "llama-3-70b", "", 9.34, 6.0, 1.56, 0.46, 0.18);
  shift_431_panel(r, "qwen3-32b", "qwen3-32b:", 8.68, 4.45, 1.31, 0.45, 0.23);
  r.notes.push_back(
      "Plans: dp=8 (8 replicas of tp=1), tp=8, sp=8, and sp=8 under the shift policy (sp=8 base, its shift config "
      "shift:sp=8 = tp=8 in the Shift order for steps of <= 256 tokens). Rows without a prefix: Llama-70B; "
      "'qwen3-32b:': Qwen-32B (Qwen/Qwen3-32B-FP8, the paper's list).");
  r.notes.push_back("Throughput: input+output tokens/s of 1024 requests sent at once, until the last first token.");
  r.notes.push_back("Qwen's TTFT ratios: the text's \"4.45x and 1.31x for Qwen\" after \"lower than TP and DP\" read as "
                    "4.45x vs DP, 1.31x vs TP (the literal order would put DP's TTFT below TP's).");
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
        {"nitsum-table1", "Nitsum Table 1: the decode step fitted to both rows, memory efficiency and overhead free",
         run_nitsum_table1},
        {"nitsum-fig14-servegen", "Nitsum 4.2.1 / Fig. 14 on ServeGen (Qwen-14B, 8 H100, 70 req/s)", run_nitsum_fig14_servegen},
        {"nitsum-goodput-servegen", "Nitsum 4.1 / Figs. 10-11 on ServeGen (Llama-3.1-8B, 4 A100)", run_nitsum_goodput_servegen},
        {"nitsum-fig2", "Nitsum 2.2 / Fig. 2: decode per GPU of TP1-8 over TP1 (14B, A100)", run_nitsum_fig2},
        {"nitsum-fig3", "Nitsum 2.3 / Fig. 3: static TP1/TP2/mix vs dynamic TP (8B, 4 A100, ServeGen)", run_nitsum_fig3},
        {"nitsum-slo-scale", "Nitsum 4.2.2: SLO scale 0.75-3, Nitsum vs SGLang (14B, 8 H100, ServeGen)", run_nitsum_slo_scale},
        {"nitsum-three-tier", "Nitsum 4.2.2: three tiers, Nitsum vs SGLang vs Split (14B, 8 H100, ServeGen)",
         run_nitsum_three_tier},
        {"nitsum-fig17", "Nitsum Fig. 17: 4-32 GPUs and the reconfiguration interval (14B, ServeGen)", run_nitsum_fig17},
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

std::string vs_paper_svg(const ExperimentResult& r) {
  std::vector<std::pair<std::string, double>> bars;  // label, simulated / paper
  for (const ExperimentRow& x : r.rows)
    if (x.paper && *x.paper > 0 && x.simulated > 0) bars.push_back({x.metric + "  " + x.config, x.simulated / *x.paper});
  if (bars.empty()) return "";
  double lo = 0.5, hi = 2;
  for (const auto& b : bars) lo = std::min(lo, b.second), hi = std::max(hi, b.second);
  lo = std::pow(10, std::floor(std::log10(lo) * 2) / 2), hi = std::pow(10, std::ceil(std::log10(hi) * 2) / 2);
  Svg s(r.name + ": simulated / paper, one bar per printed number", 30 + 50 + 18 * double(bars.size()) + 10, 300);
  s.axes("simulated / paper (log; 1 = the paper's number)", "", lo, hi, 0, 0, true);
  auto fx = [&](double v) { return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)); };
  const double n = double(bars.size());
  for (size_t i = 0; i < bars.size(); ++i) {
    const auto& [label, ratio] = bars[i];
    const double yc = s.py(1 - (double(i) + 0.5) / n);
    const double xa = s.px(fx(std::min(1.0, ratio))), xb = s.px(fx(std::max(1.0, ratio)));
    // Within 25% of the paper (the bands' usual width) green, else orange.
    const bool near = ratio >= 0.75 && ratio <= 1.25;
    s.os << "<rect class=\"bar\" x=\"" << xa << "\" y=\"" << yc - 6 << "\" width=\"" << std::max(1.0, xb - xa)
         << "\" height=\"12\" fill=\"" << (near ? "#2ca02c" : "#ff7f0e") << "\"/>\n"
         << "<text x=\"" << s.l - 6 << "\" y=\"" << yc + 4 << "\" text-anchor=\"end\">"
         << Svg::esc(label.size() > 44 ? label.substr(0, 43) + "~" : label) << "</text>\n";
  }
  const double x1 = s.px(fx(1));
  s.os << "<line x1=\"" << x1 << "\" y1=\"" << s.top << "\" x2=\"" << x1 << "\" y2=\"" << s.h - s.bot
       << "\" stroke=\"black\"/>\n";
  s.legend(0, "within 25% of the paper", "#2ca02c");
  s.legend(1, "outside 25%", "#ff7f0e");
  return s.done();
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
