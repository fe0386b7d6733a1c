// The Shift policy (Algorithm 2) as one implementation for the engine and the simulator, the
// cost-model threshold for a CPU device, and the bench report of which config ran each step.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "core/error.h"
#include "engine/policy.h"
#include "engine/step.h"
#include "model/synth.h"
#include "sim/shift_threshold.h"
#include "sim/simulator.h"
#include "test_util.h"

namespace loom {
namespace {

StepBatch batch_of(int tokens) {
  StepBatch b;
  b.num_tokens = tokens;
  return b;
}

TEST(ShiftPolicy, AlgorithmTwoAndHooks) {
  const ModelShape shape = ModelShape::from(synth_shape("gqa-24x6").config);
  const PlanSet set = PlanSet::make(policy_plans("shift", {Plan::make_sp_tp(3, 2)}), shape);
  ASSERT_EQ(set.size(), 2);
  EXPECT_EQ(set.name(1), "shift:sp=3,tp=2");
  auto p = make_layout_policy("shift", set, 97);
  EXPECT_EQ(p->choose(batch_of(97)), 1);  // n <= threshold: shift config
  EXPECT_EQ(p->choose(batch_of(98)), 0);  // n > threshold: base
  EXPECT_EQ(p->choose(batch_of(1)), 1);
  EXPECT_EQ(p->describe(), "shift(threshold=97)");
  EXPECT_THROW(policy_plans("shift", {Plan::make_tp(4)}), Error);
  EXPECT_THROW(policy_plans("shift", {Plan::make_shift(2, 2)}), Error);
  EXPECT_THROW(make_layout_policy("shift", PlanSet::make({Plan::make_tp(4)}, shape), 8), Error);
  const PlanSet pair = PlanSet::make(policy_plans("alternate", {Plan::make_sp_tp(2, 3)}), shape);
  auto alt = make_layout_policy("alternate", pair, 0);
  EXPECT_EQ(alt->choose(batch_of(1)), 0);
  EXPECT_EQ(alt->choose(batch_of(1)), 1);
  EXPECT_EQ(alt->choose(batch_of(1)), 0);
  // cycle:N moves to the next plan every N steps, round the set.
  const PlanSet three = PlanSet::make({Plan::make_tp(4), Plan::parse("dp=2,tp=2"), Plan::make_dp(4)}, shape);
  auto cyc = make_layout_policy("cycle:2", three, 0);
  std::vector<int> got;
  for (int i = 0; i < 8; ++i) got.push_back(cyc->choose(batch_of(1)));
  EXPECT_EQ(got, (std::vector<int>{0, 0, 1, 1, 2, 2, 0, 0}));
  // random:SEED is reproducible and takes every plan.
  auto r1 = make_layout_policy("random:4", three, 0);
  auto r2 = make_layout_policy("random:4", three, 0);
  std::vector<int> count(3, 0);
  for (int i = 0; i < 90; ++i) {
    const int a = r1->choose(batch_of(1));
    EXPECT_EQ(a, r2->choose(batch_of(1)));
    ++count[size_t(a)];
  }
  for (int c : count) EXPECT_GT(c, 10);
  EXPECT_THROW(check_policy_name("random:x"), Error);
  EXPECT_THROW(check_policy_name("often"), Error);
  EXPECT_THROW(check_policy_name("cycle:0"), Error);
  EXPECT_THROW(check_policy_name("cycle:-3"), Error);
  EXPECT_EQ(make_layout_policy("fixed", three, 0)->choose(batch_of(5)), 0);
}

// A policy's parameters are resolved behind the policy factory (resolve_policy_params), not by
// name in the engine's set-up: the user's threshold wins, else the default for the plan the policy
// thresholds (Shift's base, SiDP's WaS plan), else one line naming the flag.
TEST(PolicyParams, ThresholdsResolvedByThePolicy) {
  const ModelShape shape = ModelShape::from(synth_shape("gqa-24x6").config);
  const PlanSet shift = PlanSet::make(policy_plans("shift", {Plan::make_sp_tp(3, 2)}), shape);
  PolicyInputs in;
  EXPECT_NE(test::error_of([&] { resolve_policy_params("shift", shift, in); }).find("--shift-threshold"),
            std::string::npos);
  std::string asked;
  in.default_shift_threshold = [&](const Plan& p) {
    asked = p.to_string();
    return int64_t(123);
  };
  PolicyParams got = resolve_policy_params("shift", shift, in);
  EXPECT_EQ(got.threshold, 123);
  EXPECT_EQ(got.threshold_unit, "tokens");
  EXPECT_EQ(asked, "sp=3,tp=2");  // the base, not its shift config
  in.shift_threshold = 7;
  EXPECT_EQ(resolve_policy_params("shift", shift, in).threshold, 7);
  EXPECT_EQ(make_layout_policy("shift", shift, resolve_policy_params("shift", shift, in))->describe(), "shift(threshold=7)");

  const PlanSet sidp = PlanSet::make(policy_plans("sidp", {Plan::parse("dp=2,weights=owner")}), shape);
  EXPECT_NE(test::error_of([&] { resolve_policy_params("sidp", sidp, in); }).find("--sidp-threshold"), std::string::npos);
  in.default_sidp_threshold = [](const Plan& p) { return int64_t(p.sidp_cas ? -5 : 9); };
  got = resolve_policy_params("sidp", sidp, in);
  EXPECT_EQ(got.threshold, 9);
  EXPECT_EQ(got.threshold_unit, "sequences per replica");
  // Policies without a threshold take none, whatever is given.
  EXPECT_EQ(resolve_policy_params("cycle:3", shift, in).threshold, -1);
  EXPECT_EQ(resolve_policy_params("fixed", sidp, in).threshold, -1);
}

// The simulator runs the same rule: every simulated step above the threshold ran the base, every
// other the shift config.
TEST(ShiftPolicy, SimulatorUsesTheEnginePolicy) {
  const ModelConfig mc = synth_shape("gqa-24x6").config;
  const sim::CostModel cm = sim::cpu_cost_model(mc, 4.0, 10e9, 50e9, 16e9, 2);
  sim::SimConfig sc;
  sc.plan = Plan::parse("sp=2");
  sc.policy = "shift";
  sc.shift_threshold = 37;
  sc.max_tokens_per_step = 64;
  sim::Simulator simulator(cm, sc);
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 13; ++i) trace.push_back(TraceRequest{0.001 * i, 17 + 11 * i, 9, {}, 0, false, false});
  const sim::SimResult r = simulator.run(trace);
  int64_t base = 0, shift = 0;
  for (const StepMetrics& s : r.metrics.steps()) {
    const bool want_base = shift_runs_base(s.num_tokens, 37);
    EXPECT_EQ(s.plan, want_base ? "sp=2" : "shift:sp=2") << "step " << s.index << ", " << s.num_tokens << " tokens";
    (want_base ? base : shift) += 1;
  }
  EXPECT_GT(base, 0);
  EXPECT_GT(shift, 0);
}

// The derived threshold is the last step size where the cost model prices the base at or above
// TP(P) (the base below it at every larger size): checked against the cost model directly, on two
// different "machines".
TEST(ShiftPolicy, ThresholdFromTheCostModel) {
  const ModelConfig mc = synth_shape("small").config;
  for (auto [bw, flops] : std::vector<std::pair<double, double>>{{10e9, 50e9}, {40e9, 400e9}}) {
    const sim::CostModel cm = sim::cpu_cost_model(mc, 4.0, bw, flops, 16e9, 4);
    const sim::ShiftThreshold t = sim::derive_shift_threshold(cm, 2, 2, 4096);
    ASSERT_TRUE(t.crossed) << t.explain;
    auto price = [&](int tp, int sp, int n) {
      return cm.price(sp > 1 ? Plan::make_sp_tp(sp, tp) : Plan::make_shift(2, 2), {sim::SeqWork{n, n, true}}).total_s;
    };
    const int n = int(t.threshold);
    ASSERT_GE(n, 1) << t.explain;
    EXPECT_GE(price(2, 2, n), price(4, 1, n)) << t.explain;
    for (int k = n + 1; k <= 4096; ++k) ASSERT_LT(price(2, 2, k), price(4, 1, k)) << "step of " << k << " tokens";
    EXPECT_NE(t.explain.find("cpux4"), std::string::npos) << t.explain;
  }
  EXPECT_THROW(sim::derive_shift_threshold(sim::cpu_cost_model(mc, 4.0, 1e10, 1e11, 1e10, 4), 1, 4), Error);
}

// `loom bench offline` with the Shift policy: the JSON names the policy, the steps per config
// and the (zero) KV bytes moved; the same run with --policy fixed runs only the base.
TEST(ShiftPolicy, BenchOfflineReportsPlans) {
  LOOM_REQUIRE_SHARED();
  const std::string model = test::shared_dir() + "/models/stories260K/stories260K.bin";
  const std::string json = test::temp_dir() + "/shift_bench.json";
  std::string out;
  const std::string cmd = test::loom_bin() + " bench offline -m " + model +
                          " --synthetic batch -n 6 --prompt-len 20 --output-len 8 --max-tokens-per-step 32"
                          " --kv-cache-bytes 4000000 --ranks 4 --plan sp=2,tp=2 --policy shift --shift-threshold 8"
                          " --output-json " +
                          json + " -q 2>&1";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  std::ifstream f(json);
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["engine"]["policy"], "shift(threshold=8)");
  int64_t moved = 0, switches = 0;
  for (const auto& p : j["engine"]["plan_stats"]) moved += p["kv_bytes_moved"].get<int64_t>(), switches += p["switches"].get<int64_t>();
  EXPECT_EQ(moved, 0);
  EXPECT_GT(switches, 0);
  EXPECT_GT(j["plans"]["sp=2,tp=2"]["steps"].get<int>(), 0) << j["plans"].dump();
  EXPECT_GT(j["plans"]["shift:sp=2,tp=2"]["steps"].get<int>(), 0) << j["plans"].dump();
  EXPECT_EQ(j["summary"]["num_completed"], 6);
  EXPECT_EQ(j["engine"]["start_info"].size(), 5u);
}

}  // namespace
}  // namespace loom
