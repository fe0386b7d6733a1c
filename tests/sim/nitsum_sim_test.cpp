// The Nitsum cluster simulator (src/sim/exp_nitsum.*) driving src/cluster: pure simulation, so
// exact properties (every request accounted for, all served at low load) and orderings the
// mechanism implies (not the paper's numbers).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "cluster/tiers.h"
#include "core/error.h"
#include "sim/exp_nitsum.h"
#include "sim/experiments.h"
#include "sim/hardware.h"
#include "sim/model_catalog.h"
#include "sim/profile.h"
#include "model/synth.h"
#include "test_util.h"
#include "nitsum_bands.h"
#include "paper_bands.h"

namespace loom::sim {
namespace {

std::function<CostModel(int)> a100_8b() {
  return [](int) {
    CostModelOptions o;
    o.weight_dtype = SimDType::BF16;
    return CostModel(find_model("llama-3-8b"), parse_node("a100x4"), o);
  };
}

// Aggregation removes the per-page cost: for the same bytes the paged copy is slower by orders of
// magnitude (one 3 us call per 2 KiB fragment against a link at hundreds of GB/s), and both grow
// with the bytes.
TEST(NitsumSim, AggregatedMigrationBeatsPagedForTheSameKv) {
  const auto cm = a100_8b()(1);
  const double per_token = kv_bytes_per_token_all(cm.model(), 2);
  EXPECT_DOUBLE_EQ(per_token, 128.0 * 1024);  // Llama-3.1-8B fp16: 32 layers x 8 heads x 128 x 2 x 2 B
  double prev_agg = 0, prev_paged = 0;
  for (int tokens : {4096, 16384, 40960}) {
    const double bytes = tokens * per_token;
    const double paged = kv_move_paged_s(cm, bytes, double(tokens) * 32 * 2);
    const double agg = kv_move_aggregated_s(cm, bytes);
    EXPECT_GT(paged / agg, 100) << tokens;
    EXPECT_GT(agg, prev_agg);
    EXPECT_GT(paged, prev_paged);
    // Never faster than the link alone.
    EXPECT_GE(agg, cm.collective_s(Collective::SendRecv, bytes, 2, 2) * 0.99);
    prev_agg = agg, prev_paged = paged;
  }
}

// At a low rate with loose targets every request completes and meets its SLO, under the dynamic
// planner (P/D units) and under the colocated no-P/D planner.
TEST(NitsumSim, LowLoadServesEveryRequest) {
  const cluster::SloTiers tiers = cluster::parse_tiers("chat=2000/100,code=4000/200");
  const auto cmf = a100_8b();
  const auto table = nitsum_profile_table(cmf, tiers, {{1000, 100}, {2000, 20}}, {1, 2, 4});
  std::vector<TieredRequest> trace;
  for (int i = 0; i < 60; ++i) trace.push_back({i * 0.25, i % 2 ? 2000 : 1000, i % 2 ? 20 : 100, i % 2});
  for (bool split : {true, false}) {
    ClusterSimConfig c;
    c.num_ranks = 4;
    c.sched.planner.allow_split = split;
    c.sched.planner.allow_colocated = !split;
    const ClusterSimResult r = simulate_cluster(cmf, tiers, table, trace, c);
    EXPECT_EQ(r.unfinished, 0) << split;
    EXPECT_EQ(r.met[0] + r.met[1], 60) << split << " " << r.first_plan;
    EXPECT_EQ(r.requests[0], 30);
    EXPECT_GT(r.windows, 10);
  }
}

// A TP switch that pauses for a weight reload and page-by-page KV (the ablation's step 6) stops
// the regrouped instances far longer than Nitsum's views + aggregated migration, on the same
// trace and plans (the planner does not see the mechanism).
TEST(NitsumSim, NaiveSwitchPausesLonger) {
  // a's 11 ms TPOT needs TP2+ decode for Llama-8B on A100 (TP1 decodes one token in ~12 ms); b's
  // loose targets are served best per GPU at TP1: a shift of the mix regroups ranks.
  const cluster::SloTiers tiers = cluster::parse_tiers("a=500/11,b=2000/60");
  const auto cmf = a100_8b();
  const auto table = nitsum_profile_table(cmf, tiers, {{1000, 100}, {2000, 20}}, {1, 2, 4});
  std::vector<TieredRequest> trace;
  // The mix flips between the tiers every 5 s, so the planner regroups.
  for (int i = 0; i < 400; ++i) {
    const double t = i * 0.05;
    const int tier = (int(t / 5) % 2 == 0) == (i % 4 != 0) ? 0 : 1;
    trace.push_back({t, tier ? 2000 : 1000, tier ? 20 : 100, tier});
  }
  ClusterSimConfig c;
  c.num_ranks = 4;
  c.sched.switch_gain = 0;
  const ClusterSimResult nitsum = simulate_cluster(cmf, tiers, table, trace, c);
  c.mechanism = SwitchMechanism::Naive;
  const ClusterSimResult naive = simulate_cluster(cmf, tiers, table, trace, c);
  ASSERT_GT(nitsum.reconfigurations, 0) << nitsum.first_plan << " | " << nitsum.last_plan << " windows " << nitsum.windows << table.to_json().dump();
  EXPECT_GT(naive.switch_pause_s, 10 * nitsum.switch_pause_s);
  EXPECT_GE(nitsum.goodput_total_rps, naive.goodput_total_rps);
}

// P_max as a load (exp_nitsum.h prefill_rate_at_quantile), against values solved by hand (bisection
// of rho exp(-2 (1 - rho) w / s) = 1 - q outside this code): Llama-8B's 2048-token prefill on one
// A100 (151 ms) under a 500 ms TTFT at p90: rho 0.609, 4.03 prompts/s (6.62 without queueing); a
// batch of 4 in 200 ms: rho 0.824, 16.48/s.
TEST(NitsumSim, PrefillRateAtQuantile) {
  EXPECT_NEAR(prefill_rate_at_quantile(0.151, 1, 0.5, 0.9), 4.0339, 1e-3);
  EXPECT_NEAR(prefill_rate_at_quantile(0.2, 4, 0.5, 0.9), 16.4845, 1e-3);
  EXPECT_DOUBLE_EQ(prefill_rate_at_quantile(0.151, 1, 0.5, 0), 1 / 0.151);  // no queueing: the batch throughput
  EXPECT_EQ(prefill_rate_at_quantile(0.6, 1, 0.5, 0.9), 0);                 // the batch alone misses the TTFT
  // A stricter quantile admits less load.
  EXPECT_LT(prefill_rate_at_quantile(0.151, 1, 0.5, 0.99), prefill_rate_at_quantile(0.151, 1, 0.5, 0.9));
}

TEST(NitsumSim, ProfileTableRejectsWhatTheModelCannotRun) {
  const cluster::SloTiers tiers = cluster::parse_tiers("a=500/15");
  // Qwen-14B has 8 KV heads and 40 query heads: TP16 is not a candidate (and exceeds the node).
  const auto cmf = [](int) {
    CostModelOptions o;
    o.weight_dtype = SimDType::BF16;
    return CostModel(nitsum_qwen14b(), parse_node("h100x8"), o);
  };
  const auto t = nitsum_profile_table(cmf, tiers, {{1000, 100}}, {1, 2, 4, 8, 16});
  EXPECT_EQ(t.tp_degrees(), (std::vector<int>{1, 2, 4, 8}));
  // Higher TP prefills faster per instance (Nitsum 2.2: TTFT improves with TP).
  EXPECT_GT(t.at(0, 2).prefill_rps, t.at(0, 1).prefill_rps);
  EXPECT_GT(t.at(0, 4).prefill_rps, t.at(0, 2).prefill_rps);
}

// CPU ranks: the profile table from a `loom profile` folder of this machine (the same factory
// the GPU path takes, here profile_cost_model through hardware_cost_model), and the cluster
// simulator on it serving every request of a small trace.
TEST(NitsumSim, ProfileTableFromALoomProfileFolder) {
  const std::string dir = test::temp_dir();
  SynthOptions so;
  so.shape = synth_shape("tiny");
  so.dtype = DType::F32;
  so.threads = 1;
  const std::string model = write_synth_model(so, dir + "/tiny.gguf").model_path;
  const std::string profile = dir + "/profile";
  std::string out;
  ASSERT_EQ(test::run_command(test::loom_bin() + " profile --quick -o " + profile + " --model " + model +
                                  " --shapes '' --dtypes f32 --tokens 1,4,16,64 --tp 1,2 --ranks 2 --reps 3"
                                  " --budget-mib 64 2>&1",
                              &out),
            0)
      << out;
  const ModelConfig mc = find_model(model);
  const auto cmf = [&](int tp) { return hardware_cost_model(mc, profile, "f32", Plan::parse(cat("tp=", tp))); };
  const cluster::SloTiers tiers = cluster::parse_tiers("chat=5000/1000");
  const auto table = nitsum_profile_table(cmf, tiers, {{32, 8}}, {1, 2});
  ASSERT_EQ(table.tp_degrees(), (std::vector<int>{1, 2}));
  for (int tp : {1, 2}) {
    EXPECT_GT(table.at(0, tp).prefill_rps, 0) << tp;
    EXPECT_GT(table.at(0, tp).decode_rps, 0) << tp;
  }
  std::vector<TieredRequest> trace;
  for (int i = 0; i < 20; ++i) trace.push_back({i * 0.05, 32, 8, 0});
  ClusterSimConfig c;
  c.num_ranks = 2;
  const ClusterSimResult r = simulate_cluster(cmf, tiers, table, trace, c);
  EXPECT_EQ(r.unfinished, 0);
  EXPECT_EQ(r.met[0], 20) << r.first_plan;
}

}  // namespace
}  // namespace loom::sim

// ---------------------------------------------------------------- the paper's figures
// Bands: tests/sim/nitsum_bands.h (fixed before any modelling change of this branch).

namespace loom::sim {
namespace {

using namespace nitsum_bands;

// Table 1 is a measurement (Nitsum 4, "SLO setups", the SplitWise methodology): the strict TPOT is
// the TPOT of the minimal TP at batch 1, the loose one at batch 128, at the workload's average
// token sizes. The cost model priced at those points (Azure conversation: 1155-token prompt, 211
// outputs, so a mean context of 1260) within the band rule of each printed TPOT. The TTFT column
// is not checked: it is the same for both tiers (batch 1 and 128 cannot both measure 200 ms), so
// it is a chosen target, not a measurement.
TEST(NitsumPaper, CostModelAgreesWithTable1) {
  struct Row {
    const char* model;
    const char* node;
    int tp;
    double strict_ms, loose_ms;
  };
  const Row rows[] = {{"llama-3-8b", "a100x8", 1, 15, 30}, {"llama-3-8b", "h100x8", 1, 10, 20}, {"qwen14b", "h100x8", 2, 10, 15}};
  for (const Row& x : rows) {
    CostModelOptions o;
    o.weight_dtype = SimDType::BF16;
    const ModelConfig m = std::string(x.model) == "qwen14b" ? nitsum_qwen14b() : find_model(x.model);
    const CostModel cm(m, parse_node(x.node), o);
    const PricedPlan p = cm.prepare(Plan::parse(cat("tp=", x.tp)));
    const double b1 = cm.price(p, {SeqWork{1, 1260, true}}).total_s * 1e3;
    const double b128 = cm.price(p, std::vector<SeqWork>(128, SeqWork{1, 1260, true})).total_s * 1e3;
    EXPECT_TRUE(in_band(b1, x.strict_ms)) << x.model << " " << x.node << " batch 1: " << b1 << " ms vs " << x.strict_ms;
    EXPECT_TRUE(in_band(b128, x.loose_ms)) << x.model << " " << x.node << " batch 128: " << b128 << " ms vs " << x.loose_ms;
  }
}

// Fig. 14's step 1 by hand: Qwen-14B at TP1 on H100 reads 27.98 GB of weights per decode step,
// 8.35 ms at the datasheet's 3.35 TB/s. No pricing may beat that, and the strict tier's 10 ms is
// out of reach at TP1 while TP4 reaches it (the TP the strict tier needs in nitsum-fig14).
TEST(NitsumPaper, Qwen14bTp1CannotMeetTheStrictTpot) {
  CostModelOptions o;
  o.weight_dtype = SimDType::BF16;
  const CostModel cm(nitsum_qwen14b(), parse_node("h100x8"), o);
  const double hbm = 3.35e12;
  double prev = 1e9;
  for (int tp : {1, 2, 4}) {
    const PricedPlan p = cm.prepare(Plan::parse(cat("tp=", tp)));
    EXPECT_NEAR(p.weight_bytes * tp / 1e9, 27.98, 0.05) << tp;  // 14.8 B params less the input embedding, bf16
    const double t = cm.price(p, {SeqWork{1, 1260, true}}).total_s;
    EXPECT_GT(t, p.weight_bytes / hbm) << tp;
    EXPECT_LT(t, prev) << tp;
    prev = t;
    if (tp == 1) {
      EXPECT_GT(t, 10e-3);
    }
    if (tp == 4) {
      EXPECT_LT(t, 10e-3);
    }
  }
}

const ExperimentRow& find_row(const ExperimentResult& r, const std::string& metric, const std::string& config_prefix) {
  for (const auto& x : r.rows)
    if (x.metric == metric && x.config.rfind(config_prefix, 0) == 0) return x;
  throw Error(cat("no row ", metric, " / ", config_prefix, "* in ", r.name));
}

const ExperimentResult& cached(const std::string& name) {
  // The experiments read ../shared (Azure traces, ServeGen) at run time through LOOM_SHARED_DIR;
  // ctest runs the tests from build/tests.
  if (!test::shared_dir().empty()) setenv("LOOM_SHARED_DIR", test::shared_dir().c_str(), 0);
  static std::map<std::string, ExperimentResult> done;
  auto it = done.find(name);
  if (it == done.end()) it = done.emplace(name, find_experiment(name).run()).first;
  return it->second;
}

double step(int n) { return find_row(cached("nitsum-fig14"), "goodput_rps", cat(n, "-")).simulated; }

void expect_ratio(double simulated, double paper, const char* what) {
  EXPECT_TRUE(in_band(simulated, paper)) << what << ": simulated " << simulated << ", paper " << paper << ", band ["
                                         << kLow * paper << ", " << kHigh * paper << "]";
}

// Fig. 14: both collapses and the top of the ladder.
TEST(NitsumPaper, Fig14CollapsesAndOrdering) {
  const double s7 = step(7);
  EXPECT_GT(s7, 0);
  EXPECT_LT(step(2), kCollapseFrac * s7) << "static P/D";
  EXPECT_LT(step(6), kCollapseFrac * s7) << "dynamic TP with a naive switch";
  for (int n : {1, 2, 3, 4, 5, 6}) EXPECT_GT(s7, step(n)) << n;
  for (int n : {1, 3, 4}) EXPECT_GT(step(5), step(n)) << n;
  // The rows carry the paper's numbers the bands are made of.
  EXPECT_DOUBLE_EQ(*find_row(cached("nitsum-fig14"), "goodput_rps", "7-").paper, kStep7);
  EXPECT_DOUBLE_EQ(*find_row(cached("nitsum-fig14"), "goodput_rps", "1-").paper, kStep1);
}


// The band of a ratio the paper prints (nitsum_bands.h's rule), with its KnownMiss where the
// simulator stays outside (paper_bands.h).
paper::PaperBand ratio(const char* name, double paper, const char* where, std::optional<paper::KnownMiss> miss = {}) {
  return paper::ratio_band(name, paper, kLow, kHigh, where, miss);
}

// Measured with `loom sim experiment nitsum-fig14` (0.02, 0.00, 3.25, 3.56, 14.69, 0.08, 16.73 req/s).
// Step 1 is 0.02 req/s: Qwen-14B at TP1 decodes a token in 14.8 ms (>= 8.35 ms by the HBM bound;
// Table 1's measured 10 ms is TP2), so only the loose 15 ms tier is reachable and not with batching;
// on top, the Azure lengths we run in place of the stripped ServeGen workload keep each TP1 GPU
// prefilling 65% of the time at 70 req/s (row prefill_busy/tp1), tripling every TPOT. Step 1 at TP2
// gives 0.38 req/s (alt-1-vanilla-tp2: TP2 prefills 91% of the time); at 10 req/s TP1 still meets
// only 111 of the 300 loose-tier requests (alt-1-vanilla-tp1@10rps).
constexpr const char* kStep1Cause =
    "step 1 is 0 req/s: Qwen-14B at TP1 decodes in >= 8.35 ms at 100% of HBM (Table 1's 10 ms is TP2), and the "
    "Azure lengths run in place of the stripped ServeGen workload keep each TP1 GPU prefilling most of the time at "
    "70 req/s (row prefill_busy/tp1)";
// The ladder's ratios (each test of this file runs its experiment once: ctest runs a test per process).
TEST(NitsumPaper, Fig14Ratios) {
  paper::expect_band(ratio("nitsum-fig14 step 7 / step 5", kFullOverSched, "4.2.1: 33.3 / 28.0"), step(7) / step(5));
  paper::expect_band(ratio("nitsum-fig14 step 4 / step 3", kPerTierOverSloRule, "4.2.1: 17.2 / 16.7",
                           paper::KnownMiss{2.10494, "step 3 (one static TP for both tiers with the SLO batch rule: TP4) "
                                                     "meets 2.7 req/s, step 4 (a static TP per tier: TP8 strict, TP1 "
                                                     "loose) 5.6: at 70 req/s of Azure lengths the loose tier alone on "
                                                     "TP1 doubles what one TP serves for both, where the paper's "
                                                     "per-tier split adds 3%"}),
                     step(4) / step(3));
  paper::expect_band(ratio("nitsum-fig14 step 3 / step 1", kSloRuleOverVanilla, "4.2.1: 16.7 / 13.2",
                           paper::KnownMiss{paper::kInf, kStep1Cause}),
                     step(3) / step(1));
  paper::expect_band(ratio("nitsum-fig14 step 7 / step 1", kFullOverVanilla, "4.2.1: 33.3 / 13.2",
                           paper::KnownMiss{paper::kInf, kStep1Cause}),
                     step(7) / step(1));
  paper::expect_band(
      ratio("nitsum-fig14 step 5 / step 4", kSchedOverPerTier, "4.2.1: 28.0 / 17.2",
            paper::KnownMiss{2.96774, "steps 3 and 4 (SLO-agnostic batching with the defer rule, static TP) keep "
                                     "2.7-5.6 req/s: at 70 req/s of Azure-length prompts every colocated TP is "
                                     "prefill-bound (prompts take 0.65, 0.91, 1.33, 2.18 of each GPU's time at TP1, 2, 4, "
                                     "8: rows prefill_busy) and TP1-2 cannot meet the strict TPOT; Nitsum's P/D units "
                                     "take the prefill stalls out of the decode instances"}),
      step(5) / step(4));
}

// ---- Fig. 10 (4.1.1): goodput vs rate, Llama-3.1-8B on 4 A100, Azure conv + code, Table 1 tiers.
const std::vector<int> kRates = {10, 20, 30, 40, 60, 80};  // nitsum-goodput's rates

// The goodput of `system` ("nitsum", "static-tp" = SGLang, "static-pd" = SGLang (PD), "split")
// at `rate` req/s.
double fig10(const std::string& system, int rate) {
  const std::string suffix = cat("@", rate, "rps");
  for (const auto& x : cached("nitsum-goodput").rows) {
    if (x.metric != "goodput_rps" || x.config.rfind(system, 0) != 0) continue;
    if (x.config.size() >= suffix.size() && x.config.compare(x.config.size() - suffix.size(), suffix.size(), suffix) == 0)
      return x.simulated;
  }
  throw Error(cat("no nitsum-goodput row ", system, suffix));
}

// "all the baselines except for Split drops to 0 goodput beyond 40 incoming RPS": vanilla SGLang.
void Fig10SglangCollapsesBeyond40() {
  for (int rate : kRates)
    if (rate > kCollapseBeyondRps) {
      EXPECT_LT(fig10("static-tp", rate), kCollapseFrac * fig10("nitsum", rate)) << rate;
    }
}

// ... "except for Split".
void Fig10SplitDoesNotCollapse() {
  for (int rate : kRates) EXPECT_GT(fig10("split", rate), kCollapseFrac * fig10("nitsum", rate)) << rate;
}

// Measured with `loom sim experiment nitsum-goodput`, nitsum / static-tp / static-pd / split at 10
// 20 30 40 60 80 req/s: 5.23 8.15 9.74 9.96 11.43 9.01 / 3.89 6.34 5.56 1.03 0.35 0.33 / 3.92
// 2.08 1.08 0.73 0.68 0.70 / 4.25 7.04 7.74 7.43 9.28 10.98.
// SGLang (PD) beyond 40 req/s: the largest share of Nitsum it keeps, band [0, kCollapseFrac].
void Fig10SglangPdCollapsesBeyond40() {
  double worst = 0;
  for (int rate : kRates)
    if (rate > kCollapseBeyondRps) worst = std::max(worst, fig10("static-pd", rate) / fig10("nitsum", rate));
  paper::expect_band(
      {"nitsum-goodput SGLang (PD) / Nitsum beyond 40 req/s (max)", 0.0, kCollapseFrac,
       "4.1.1: all the baselines except Split drop to 0 goodput beyond 40 incoming RPS",
       paper::KnownMiss{0.077778, "its 2 TP1 prefill GPUs (about 12 conversation prompts/s each) are overrun from "
                                  "the first second; what is met is the start-up transient of our 40 s of arrivals "
                                  "(about 28 requests), 0.05 req/s over the paper's 10-minute traces"}},
      worst);
}
// "the only system that has consistently increasing goodput": the smallest ratio of a rate's
// goodput to the previous rate's, band [kMonotoneSlack, inf).
void Fig10NitsumGoodputGrowsWithRate() {
  double worst = paper::kInf;
  for (size_t i = 1; i < kRates.size(); ++i) worst = std::min(worst, fig10("nitsum", kRates[i]) / fig10("nitsum", kRates[i - 1]));
  paper::expect_band({"nitsum-goodput Nitsum goodput(rate) / goodput(previous rate) (min)", kMonotoneSlack, paper::kInf,
                      "4.1.1: Nitsum is the only system with consistently increasing goodput",
                      paper::KnownMiss{0.78758, "Nitsum falls from 11.43 (60) to 9.01 (80): at 80 req/s the planner gives "
                                                "all 4 GPUs to the conversation tier as 2 TP1 prefill + 1 TP2 decode (its "
                                                "profile capacity per GPU is the highest), the code tier only spills, and "
                                                "past saturation the P/D unit's prefill queue misses the TTFT (P_max is a "
                                                "throughput without queueing)"}},
                     worst);
}
// "Nitsum achieves the highest goodput among all the systems": the smallest Nitsum / baseline.
void Fig10NitsumHighest() {
  double worst = paper::kInf;
  for (int rate : kRates)
    for (const char* b : {"static-tp", "static-pd", "split"}) worst = std::min(worst, fig10("nitsum", rate) / fig10(b, rate));
  paper::expect_band({"nitsum-goodput Nitsum / best baseline (min over rates)", 1.0, paper::kInf,
                      "4.1.1: Nitsum achieves the highest goodput among all the systems",
                      paper::KnownMiss{0.82005, "Split passes Nitsum at 80 req/s (10.98 vs 9.01): its colocated TP4 serves "
                                                "more of the conversation tier (439 vs 354 of 1600) past saturation"}},
                     worst);
}
// "At low system load, all the systems perform similarly": at 10 req/s each baseline / Nitsum in
// the band rule.
void Fig10LowLoadSimilar() {
  const char* cause =
      "our 10 req/s is not a light load: the first 200 Azure code requests hold a burst of 88 code prompts in their "
      "last 4 s (0.8 s once rescaled to 5 req/s), which no system prefills within 500 ms, and the colocated baselines "
      "also stall conversation decodes behind it (15 ms TPOT)";
  const double low = kRates.front();
  paper::expect_band(ratio("nitsum-goodput SGLang / Nitsum at 10 req/s", 1.0, "4.1.1", paper::KnownMiss{0.74519, cause}),
                     fig10("static-tp", low) / fig10("nitsum", low));
  paper::expect_band(ratio("nitsum-goodput SGLang (PD) / Nitsum at 10 req/s", 1.0, "4.1.1", paper::KnownMiss{0.75, cause}),
                     fig10("static-pd", low) / fig10("nitsum", low));
  paper::expect_band(ratio("nitsum-goodput Split / Nitsum at 10 req/s", 1.0, "4.1.1"), fig10("split", low) / fig10("nitsum", low));
}
// ctest runs each TEST in its own process: one test per experiment runs it once.
TEST(NitsumPaper, Fig10Claims) {
  Fig10SglangCollapsesBeyond40();
  Fig10SplitDoesNotCollapse();
  Fig10SglangPdCollapsesBeyond40();
  Fig10NitsumGoodputGrowsWithRate();
  Fig10NitsumHighest();
  Fig10LowLoadSimilar();
}

// The same claims on Table 1's two H100 setups (nitsum-goodput-h100: Llama-3.1-8B on 4 H100,
// Qwen-14B on 8 H100): "Nitsum achieves the highest goodput among all the systems".
double fig10_h100(const std::string& setting, const std::string& system, int rate) {
  const std::string head = setting + "/" + system, suffix = cat("@", rate, "rps");
  for (const auto& x : cached("nitsum-goodput-h100").rows) {
    if (x.metric != "goodput_rps" || x.config.rfind(head, 0) != 0) continue;
    if (x.config.size() >= suffix.size() && x.config.compare(x.config.size() - suffix.size(), suffix.size(), suffix) == 0)
      return x.simulated;
  }
  throw Error(cat("no nitsum-goodput-h100 row ", head, suffix));
}
const char* const kH100Settings[] = {"llama8b-h100x4", "qwen14b-h100x8"};

// Per setting, the smallest Nitsum / baseline over rates and baselines, band [1, inf).
void Fig10H100NitsumHighest() {
  const std::map<std::string, paper::KnownMiss> misses = {
      {"llama8b-h100x4",
       {0.98885, "at 10 req/s Split's per-tier static TP meets 6.76 req/s against Nitsum's 6.68: the first Azure code "
                 "burst (a few dozen prompts within a second) costs Nitsum's P/D units the TTFT of more code requests"}}};
  for (const char* st : kH100Settings) {
    double worst = paper::kInf;
    for (int rate : kRates)
      for (const char* b : {"static-tp", "static-pd", "split"})
        worst = std::min(worst, fig10_h100(st, "nitsum", rate) / fig10_h100(st, b, rate));
    const auto it = misses.find(st);
    paper::expect_band({cat("nitsum-goodput-h100 ", st, " Nitsum / best baseline (min)"), 1.0, paper::kInf,
                        "4.1.1: Nitsum achieves the highest goodput",
                        it == misses.end() ? std::nullopt : std::optional<paper::KnownMiss>(it->second)},
                       worst);
  }
}
// Measured with `loom sim experiment nitsum-goodput-h100`, Nitsum at 10 20 30 40 60 80 req/s: 8B
// on 4 H100 6.86 12.46 15.20 16.10 14.04 11.58; 14B on 8 H100 5.78 10.08 12.02 10.04 7.03 5.90.
void Fig10H100NitsumGoodputGrowsWithRate() {
  const char* cause =
      "past the knee (LOOM_NITSUM_DEBUG=1) the plans give all their units to one tier (14B at 40 and 60: only the "
      "code tier; 8B at 60: only the conversation tier) and the other tier spills round-robin into every prefill "
      "instance (N12) as best-effort; the served tier's TTFT and TPOT counts fall with the spill";
  const double measured[] = {0.79842, 0.67876};
  for (size_t k = 0; k < 2; ++k) {
    const char* st = kH100Settings[k];
    double worst = paper::kInf;
    for (size_t i = 1; i < kRates.size(); ++i)
      worst = std::min(worst, fig10_h100(st, "nitsum", kRates[i]) / fig10_h100(st, "nitsum", kRates[i - 1]));
    paper::expect_band({cat("nitsum-goodput-h100 ", st, " goodput(rate) / goodput(previous rate) (min)"), kMonotoneSlack,
                        paper::kInf, "4.1.1: consistently increasing goodput", paper::KnownMiss{measured[k], cause}},
                       worst);
  }
}
// ctest runs each TEST in its own process: one test per experiment runs it once.
TEST(NitsumPaper, Fig10H100Claims) {
  Fig10H100NitsumHighest();
  Fig10H100NitsumGoodputGrowsWithRate();
}

// ---- Fig. 7 (3.2.2): page-by-page against aggregated KV migration, 0.5 and 5 GB.
double fig7(const std::string& metric, const std::string& tokens) {
  return find_row(cached("nitsum-fig7"), metric, tokens + "tok").simulated;
}
void Fig7PagedCopy() {
  expect_ratio(fig7("paged_s", "4096"), kPagedLoS, "paged 0.5 GB");
  expect_ratio(fig7("paged_s", "40960"), kPagedHiS, "paged 5 GB");
}
void Fig7AggregatedAt5GB() {
  expect_ratio(fig7("aggregated_ms", "40960"), kAggHiMs, "aggregated 5 GB");
  expect_ratio(fig7("speedup_x", "40960"), kSpeedupHi, "speedup 5 GB");
}
void Fig7AggregatedAtHalfGB() {
  const char* cause =
      "our aggregated move is the bytes at the calibrated NVLink send/recv speed and nothing else; the paper's two "
      "ends fit t = 1.2 ms + bytes / 228 GB/s, a fixed ~1.2 ms per migration (the handshake of 3.2.2 step 2, launches, "
      "a sync) the simulator does not price (fitting it to Fig. 7 would be tuning)";
  paper::expect_band(ratio("nitsum-fig7 aggregated 0.5 GB (ms)", kAggLoMs, "3.2.2: 3.6", paper::KnownMiss{2.33737, cause}),
                     fig7("aggregated_ms", "4096"));
  paper::expect_band(ratio("nitsum-fig7 speedup 0.5 GB (x)", kSpeedupLo, "3.2.2: 245x", paper::KnownMiss{337.271, cause}),
                     fig7("speedup_x", "4096"));
}
// ctest runs each TEST in its own process: one test per experiment runs it once.
TEST(NitsumPaper, Fig7Migration) {
  Fig7PagedCopy();
  Fig7AggregatedAt5GB();
  Fig7AggregatedAtHalfGB();
}

// ---- Issue 31: Table 1's fit, ServeGen and the paper's other figures (nitsum_bands.h) ----

double val(const std::string& experiment, const std::string& metric, const std::string& config) {
  for (const auto& x : cached(experiment).rows)
    if (x.metric == metric && x.config == config) return x.simulated;
  throw Error(cat("no row ", metric, " / ", config, " in ", experiment));
}

// Table 1: a split of efficiency and overhead a GPU can have, for each setup.
TEST(NitsumPaper, Table1FitBothRows) {
  for (const char* setup : {"llama8b-a100", "llama8b-h100", "qwen14b-h100"}) {
    const double e = val("nitsum-table1", "mem_eff", setup), o = val("nitsum-table1", "overhead_ms", setup);
    EXPECT_GT(e, kTable1Eff[0]) << setup;
    EXPECT_LE(e, kTable1Eff[1]) << setup;
    EXPECT_GE(o, 0.0) << setup;
  }
}

// Fig. 14 on ServeGen: the ladder's ratios, collapses and top.
TEST(NitsumPaper, Fig14OnServeGen) {
  LOOM_REQUIRE_SHARED();
  std::map<int, double> st;
  for (const auto& x : cached("nitsum-fig14-servegen").rows)
    if (x.metric == "goodput_rps") st[x.config[0] - '0'] = x.simulated;
  ASSERT_EQ(st.size(), 7u);
  const char* light =
      "the ServeGen m-mid window is much lighter than Azure's (mean prompt 449, output 58 tokens), so every static "
      "configuration with SLO-aware batching serves most of 70 req/s and the ladder's steps 3-5 and 7 sit at 34-63 req/s";
  paper::expect_band(ratio("nitsum-fig14-servegen step 7 / step 5", kFullOverSched, "4.2.1: 33.3 / 28.0",
                           paper::KnownMiss{0.80790, "the planner's P/D units across TP degrees lose to step 5's static "
                                                     "TP4 units on this light workload (51.8 against 64.1 req/s)"}),
                     st[7] / st[5]);
  paper::expect_band(ratio("nitsum-fig14-servegen step 4 / step 3", kPerTierOverSloRule, "4.2.1: 17.2 / 16.7",
                           paper::KnownMiss{1.36368, light}),
                     st[4] / st[3]);
  paper::expect_band(ratio("nitsum-fig14-servegen step 5 / step 4", kSchedOverPerTier, "4.2.1: 28.0 / 17.2"), st[5] / st[4]);
  paper::expect_band(ratio("nitsum-fig14-servegen step 3 / step 1", kSloRuleOverVanilla, "4.2.1: 16.7 / 13.2",
                           paper::KnownMiss{8.82533, "step 1 (static TP1, SLO-agnostic batches of 256) meets 3.8 req/s: "
                                                     "Qwen-14B at TP1 cannot meet the 10 ms tier and batches past the 15 "
                                                     "ms one"}),
                     st[3] / st[1]);
  paper::expect_band(ratio("nitsum-fig14-servegen step 7 / step 1", kFullOverVanilla, "4.2.1: 33.3 / 13.2",
                           paper::KnownMiss{13.5721, "as step 3 / step 1"}),
                     st[7] / st[1]);
  paper::expect_band({"nitsum-fig14-servegen step 2 / step 7 (collapse)", 0.0, kCollapseFrac, "4.2.1: static P/D collapses",
                      paper::KnownMiss{0.063707, "static P/D keeps 3.3 req/s on the light ServeGen window, 6% of step 7's "
                                                 "51.8, just above the 5% the band calls a collapse"}},
                     st[2] / st[7]);
  paper::expect_band({"nitsum-fig14-servegen step 6 / step 7 (collapse)", 0.0, kCollapseFrac,
                      "4.2.1: dynamic TP with a naive switch collapses",
                      paper::KnownMiss{0.58488, "step 6 keeps 30.2 req/s, 58% of step 7's 51.8: its 30 s restarts stop "
                                                "only the instances a window regroups, and the light window leaves the "
                                                "others meeting their SLOs"}},
                     st[6] / st[7]);
  double top = 0;
  for (int n = 1; n <= 6; ++n) top = std::max(top, st[n]);
  paper::expect_band({"nitsum-fig14-servegen step 7 / the best other step", 1.0, paper::kInf, "4.2.1: full Nitsum on top",
                      paper::KnownMiss{0.80790, "step 5 is on top (as step 7 / step 5)"}},
                     st[7] / top);
}

double goodput_sg(const std::string& system, int rate) {
  const std::string suffix = cat("@", rate, "rps");
  for (const auto& x : cached("nitsum-goodput-servegen").rows) {
    if (x.metric != "goodput_rps" || x.config.rfind(system, 0) != 0) continue;
    if (x.config.size() >= suffix.size() && x.config.compare(x.config.size() - suffix.size(), suffix.size(), suffix) == 0)
      return x.simulated;
  }
  throw Error(cat("no nitsum-goodput-servegen row ", system, suffix));
}

// Figs. 10 and 11 on ServeGen.
TEST(NitsumPaper, Fig10And11OnServeGen) {
  LOOM_REQUIRE_SHARED();
  double sglang = 0, pd = 0, grow = paper::kInf, highest = paper::kInf, split = paper::kInf;
  for (size_t i = 0; i < kRates.size(); ++i) {
    const int rate = kRates[i];
    const double n = goodput_sg("nitsum", rate);
    if (rate > kCollapseBeyondRps) sglang = std::max(sglang, goodput_sg("static-tp", rate) / n), pd = std::max(pd, goodput_sg("static-pd", rate) / n);
    if (i > 0) grow = std::min(grow, n / goodput_sg("nitsum", kRates[i - 1]));
    for (const char* b : {"static-tp", "static-pd", "split"}) highest = std::min(highest, n / goodput_sg(b, rate));
    split = std::min(split, goodput_sg("split", rate) / n);
  }
  const char* light = "the ServeGen window's short requests keep the baselines' colocated TP instances within the SLOs "
                      "well past 40 req/s (Split's per-tier TP the best at 60 and 80)";
  paper::expect_band({"nitsum-goodput-servegen SGLang / Nitsum beyond 40 req/s (max)", 0.0, kCollapseFrac,
                      "4.1.1: baselines but Split drop to 0 beyond 40 RPS", paper::KnownMiss{1.24098, light}},
                     sglang);
  paper::expect_band({"nitsum-goodput-servegen SGLang (PD) / Nitsum beyond 40 req/s (max)", 0.0, kCollapseFrac,
                      "4.1.1", paper::KnownMiss{0.84795, light}},
                     pd);
  EXPECT_GT(split, kCollapseFrac) << "Split does not collapse";
  paper::expect_band({"nitsum-goodput-servegen Nitsum goodput(rate) / goodput(previous rate) (min)", kMonotoneSlack,
                      paper::kInf, "4.1.1: consistently increasing goodput",
                      paper::KnownMiss{0.81087, "Nitsum falls from 33.5 (40) to 27.2 (60): past 40 req/s its P/D units' "
                                                "prefill queues miss the 500 ms TTFT (Fig. 11's p90 TTFT 7x the SLO at 60)"}},
                     grow);
  paper::expect_band({"nitsum-goodput-servegen Nitsum / best baseline (min)", 1.0, paper::kInf,
                      "4.1.1: Nitsum the highest", paper::KnownMiss{0.73730, light}},
                     highest);
  for (const char* b : {"static-tp", "static-pd", "split"})
    paper::expect_band(ratio(cat("nitsum-goodput-servegen ", b, " / Nitsum at 10 req/s").c_str(), 1.0, "4.1.1: similar at low load"),
                       goodput_sg(b, kRates.front()) / goodput_sg("nitsum", kRates.front()));
  // Fig. 11: Nitsum's percentiles over the SLOs (the worst tier and metric).
  double p50 = 0, p90 = 0;
  for (int rate : kRates) {
    const std::string c = cat("nitsum@", rate, "rps");
    p50 = std::max({p50, val("nitsum-goodput-servegen", "ttft_p50_over_slo", c), val("nitsum-goodput-servegen", "tpot_p50_over_slo", c)});
    p90 = std::max({p90, val("nitsum-goodput-servegen", "ttft_p90_over_slo", c), val("nitsum-goodput-servegen", "tpot_p90_over_slo", c)});
  }
  const std::string top = cat("nitsum@", kRates.back(), "rps");
  paper::expect_band({"nitsum-goodput-servegen Fig. 11 p50 / SLO (max over rates)", 0.0, 1.0, "4.1.2: medians under the SLOs",
                      paper::KnownMiss{1.22516, "at 80 req/s the median TTFT (612 ms) is past the 500 ms SLO: the P/D "
                                                "units' prefill queues past saturation"}},
                     p50);
  paper::expect_band({"nitsum-goodput-servegen Fig. 11 p90 / SLO (max over rates)", 0.0, 1.0, "4.1.2: p90 under the SLOs",
                      paper::KnownMiss{62.3889, "the p90 TTFT at 80 req/s is 31 s: the queues of the saturated prefill "
                                                "units"}},
                     p90);
  paper::expect_band({"nitsum-goodput-servegen Fig. 11 p99 / SLO at the highest rate", 1.0, paper::kInf,
                      "4.1.2: p99 violates at high RPS"},
                     std::max(val("nitsum-goodput-servegen", "ttft_p99_over_slo", top), val("nitsum-goodput-servegen", "tpot_p99_over_slo", top)));
}

TEST(NitsumPaper, Fig2Fig3SloScaleThreeTiersFig17) {
  LOOM_REQUIRE_SHARED();
  paper::expect_band(ratio("nitsum-fig2 best TP / TP1 per GPU at batch 1", kFig2SmallBatchGain, "2.2: up to 3x",
                           paper::KnownMiss{1.0, "the cost model's GEMMs read every shard from HBM (no L2 term in the A100 "
                                                 "fit), so per GPU a higher TP only adds its all-reduces (TP2 0.79, TP8 "
                                                 "0.38 of TP1); 2.2 measures the L2 hit rate of smaller shards"}),
                     val("nitsum-fig2", "small_batch_gain", "best-tp/tp1"));
  paper::expect_band(ratio("nitsum-fig3 dynamic / best static", kFig3DynamicGain, "2.3: 23% to 29% higher",
                           paper::KnownMiss{0.94797, "on the light ServeGen window at 40 req/s the static TP1-prefill + "
                                                     "TP2-decode mix serves 35.6 req/s, more than the planner's choice "
                                                     "(33.7): the planner sizes units by P_max / D_max without queueing"}),
                     val("nitsum-fig3", "dynamic_gain", "dynamic/best-static"));
  // SLO scale.
  double worst = paper::kInf, best = 0;
  for (const char* k : {"0.75x", "1x", "1.5x", "2x", "3x"}) {
    const double g = val("nitsum-slo-scale", "gain", k);
    worst = std::min(worst, g), best = std::max(best, g);
  }
  paper::expect_band({"nitsum-slo-scale Nitsum / SGLang (min over scales)", 1.0, paper::kInf,
                      "4.2.2: Nitsum beats SGLang across the range",
                      paper::KnownMiss{0.98239, "from 1.5x on both serve nearly all of the light ServeGen window (64-69 "
                                                "req/s of 70); at 1.5x SGLang's best static TP is 2% ahead"}},
                     worst);
  paper::expect_band({"nitsum-slo-scale largest gain / gain at 3x", 1.0, paper::kInf,
                      "4.2.2: the gain is largest at moderate SLOs and shrinks when loose"},
                     best / val("nitsum-slo-scale", "gain", "3x"));
  // Three tiers.
  double three = paper::kInf;
  for (int rate : {20, 40, 70, 100}) {
    const std::string c = cat("@", rate, "rps");
    three = std::min(three, val("nitsum-three-tier", "goodput_rps", "nitsum" + c) /
                                std::max(val("nitsum-three-tier", "goodput_rps", "sglang" + c),
                                         val("nitsum-three-tier", "goodput_rps", "split" + c)));
  }
  paper::expect_band({"nitsum-three-tier Nitsum / best baseline (min over rates)", 1.0, paper::kInf,
                      "4.2.2: Nitsum the highest everywhere",
                      paper::KnownMiss{0.68792, "with a third, relaxed tier (600 ms / 60 ms) the planner gives it units "
                                                "sized by its P_max / D_max and the strict tiers' requests spill; at 20 req/s "
                                                "Nitsum meets 13.7 where SGLang's static TP meets 19.8"}},
                     three);
  paper::expect_band({"nitsum-three-tier Split / SGLang at 100 req/s", 1.0, paper::kInf, "4.2.2: Split above SGLang at high load"},
                     val("nitsum-three-tier", "goodput_rps", "split@100rps") / val("nitsum-three-tier", "goodput_rps", "sglang@100rps"));
  paper::expect_band({"nitsum-three-tier SGLang / Split at 20 req/s", 1.0, paper::kInf, "4.2.2: Split below SGLang at low load",
                      paper::KnownMiss{0.99834, "at 20 req/s both serve the light window almost whole (19.84 and 19.87)"}},
                     val("nitsum-three-tier", "goodput_rps", "sglang@20rps") / val("nitsum-three-tier", "goodput_rps", "split@20rps"));
  // Fig. 17.
  const double eight = val("nitsum-fig17", "goodput_per_gpu", "8gpus");
  const std::map<std::string, double> scale_misses = {{"4gpus", 0.63846}, {"32gpus", 1.25690}};
  for (const char* n : {"4gpus", "16gpus", "32gpus"}) {
    const auto it = scale_misses.find(n);
    paper::expect_band(ratio(cat("nitsum-fig17 goodput per GPU, ", n, " / 8").c_str(), 1.0, "4.2.3: near-linear scaling",
                             it == scale_misses.end()
                                 ? std::nullopt
                                 : std::optional<paper::KnownMiss>(paper::KnownMiss{
                                       it->second, "at 8.75 req/s a GPU the units are coarse at 4 GPUs (a 14B TP2 P/D "
                                                   "pair is half the pool) and the per-tier remainders vanish at 32: "
                                                   "goodput per GPU 4.1, 6.6, 8.0, 8.3 at 4, 8, 16, 32"})),
                       val("nitsum-fig17", "goodput_per_gpu", n) / eight);
  }
  double best_w = 0, best_at = 0, lo = paper::kInf, hi = 0;
  for (double w : {0.25, 0.5, 1.0, 2.0, 4.0}) {
    const double g = val("nitsum-fig17", "goodput_rps", cat("interval-", w, "s"));
    if (g > best_w) best_w = g, best_at = w;
    if (w >= 0.5 && w <= 2.0) lo = std::min(lo, g), hi = std::max(hi, g);
  }
  EXPECT_TRUE(best_at == 0.5 || best_at == 1.0) << best_at;
  paper::expect_band({"nitsum-fig17 worst / best interval in 0.5-2 s", kIntervalSpread, 1.0, "4.2.4: varies within 6%"}, lo / hi);
}

}  // namespace
}  // namespace loom::sim
