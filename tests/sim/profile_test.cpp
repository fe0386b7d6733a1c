// loom profile, hardware entries, calibration transfer and the simulator against the engine
// (`loom sim validate-engine`). These check the machinery (files written and read back, the same
// requests on both sides, every metric reported and finite); the accuracy itself is a benchmark
// (bench/sim_fidelity.cpp), since timings on a shared machine are noisy.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "model/synth.h"
#include "sim/calibration.h"
#include "sim/measured_ops.h"
#include "sim/model_catalog.h"
#include "sim/profile.h"
#include "sim/shift_threshold.h"
#include "sim/simulator.h"
#include "sim/validate_engine.h"
#include "test_util.h"

namespace loom::sim {
namespace {

// A synthetic tiny model (d 64, 4 heads, 2 KV heads, 2 layers, f32) and a quick profile of its
// shapes on this machine, in a fresh folder.
struct Fixture {
  std::string dir, model, profile;
};

Fixture make_fixture() {
  Fixture f;
  f.dir = test::temp_dir();
  SynthOptions o;
  o.shape = synth_shape("tiny");
  o.dtype = DType::F32;
  o.threads = 1;
  f.model = write_synth_model(o, f.dir + "/tiny.gguf").model_path;
  f.profile = f.dir + "/profile";
  std::string out;
  const std::string cmd = test::loom_bin() + " profile --quick -o " + f.profile + " --model " + f.model +
                          " --shapes '' --dtypes f32,q8_0 --tokens 1,4,16,64 --tp 1,2 --ranks 2 --reps 3"
                          " --budget-mib 64 2>&1";
  EXPECT_EQ(test::run_command(cmd, &out), 0) << out;
  return f;
}

TEST(SimProfile, WritesMeasurementsAndAHardwareEntry) {
  const Fixture f = make_fixture();
  namespace fs = std::filesystem;
  for (const char* name : {"hardware.json", "mlp_tiny_f32.csv", "mlp_tiny_f32_r2.csv", "mlp_tiny_q8_0.csv",
                           "attention_tiny.csv", "step_overhead_cpu.csv", "all_reduce_cpu_local.csv",
                           "all_gather_cpu_local.csv", "all_to_all_cpu_local.csv", "send_recv_cpu_local.csv",
                           "broadcast_cpu_local.csv", "get_cpu_local.csv"})
    EXPECT_TRUE(fs::exists(f.profile + "/" + name)) << name;
  ASSERT_TRUE(is_profile(f.profile));
  const MachineProfile p = read_profile(f.profile);
  EXPECT_EQ(p.threads_per_rank, 1);
  EXPECT_GT(p.hardware.hbm_bw, 0);
  EXPECT_GT(p.hardware.flops_bf16, 0);
  EXPECT_GT(p.hardware.link_bw, 0);
  const std::vector<std::string> dtypes = p.weight_dtypes();
  EXPECT_EQ(std::set<std::string>(dtypes.begin(), dtypes.end()), (std::set<std::string>{"f32", "q8_0"}));
  EXPECT_EQ(p.backends(), std::vector<std::string>{"local"});
  // Every operator of every (tokens, tp) row, with its engine columns.
  for (const auto& mf : p.files) {
    EXPECT_FALSE(mf.samples.empty()) << mf.name;
    for (const auto& s : mf.samples) EXPECT_GT(s.measured_s, 0) << mf.name << " " << s.op;
    if (mf.kind == MeasurementFile::Mlp) {
      EXPECT_EQ(mf.kernels, StepKernels::LoomCpu) << mf.name;
      EXPECT_EQ(mf.act_bytes, 4) << mf.name;
      EXPECT_EQ(mf.samples.size(), 4u * 2u * 10u) << mf.name;  // 4 token counts x 2 tp x 10 operators
      EXPECT_DOUBLE_EQ(mf.weight_bytes, mf.weight_dtype == "f32" ? 4.0 : 34.0 / 32.0) << mf.name;
    }
  }
  // Ulysses' meeting cost: one per tp=1 row of the file measured with two concurrent ranks (SP's
  // shards are whole layers), none elsewhere (a single rank or a TP shard never meets there).
  for (const auto& mf : p.files) {
    if (mf.kind != MeasurementFile::Mlp) continue;
    if (mf.concurrent_ranks == 1) {
      EXPECT_TRUE(mf.ulysses_waits.empty()) << mf.name;
      continue;
    }
    std::set<double> tokens;
    for (const auto& w : mf.ulysses_waits) {
      tokens.insert(w.m);
      EXPECT_GE(w.measured_s, 0) << mf.name;
      EXPECT_EQ(w.k, 64) << mf.name;    // d_model of tiny
      EXPECT_EQ(w.n, 192) << mf.name;   // its whole FFN: tp=1
    }
    EXPECT_EQ(tokens, (std::set<double>{1, 4, 16, 64})) << mf.name;
  }
  {
    // Priced into SP steps only, once per layer: an sp=2 step costs exactly n_layers x the
    // measured wait more than under the same calibration without it; a DP and a TP step nothing.
    const ModelConfig tiny = find_model(f.model);
    const CostModel cm = profile_cost_model(p, tiny, DType::F32, 2);
    ASSERT_TRUE(cm.calibration().measured);
    Calibration without = cm.calibration();
    auto ops = std::make_shared<MeasuredOps>(*without.measured);
    ASSERT_EQ(ops->ulysses_wait.size(), 1u);
    ops->ulysses_wait.clear();
    without.measured = ops;
    CostModel bare(tiny, cm.node(), cm.options(), without);
    bare.set_collective_curves(cm.collective_curves());
    const std::vector<SeqWork> step{SeqWork{32, 32, true}};
    const double wait = cm.calibration().measured->ulysses_wait_s(16, 64, 192);  // 32 tokens, 16 a rank
    ASSERT_GT(wait, 0);
    EXPECT_NEAR(cm.price(Plan::make_sp_tp(2, 1), step).comm_s - bare.price(Plan::make_sp_tp(2, 1), step).comm_s,
                tiny.n_layers * wait, 1e-12);
    for (const Plan& other : {Plan::make_tp(2), Plan::make_shift(2, 1)})
      EXPECT_EQ(cm.price(other, step).total_s, bare.price(other, step).total_s) << other.to_string();
  }
  // The profile is a hardware entry and a measurement folder: the validation reads it.
  EXPECT_EQ(find_gpu(f.profile).name, "cpu");
  EXPECT_EQ(parse_node(f.profile + "x2").gpus_per_node, 2);
  for (const auto& r : validate_measurements(f.profile, f.profile)) {
    EXPECT_TRUE(std::isfinite(r.median)) << r.file;
    EXPECT_GT(r.samples, 0) << r.file;
  }
  // A dtype or backend the profile lacks is named.
  const ModelConfig mc = find_model(f.model);
  try {
    profile_cost_model(p, mc, DType::BF16, 1);
    FAIL() << "expected loom::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32, q8_0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(profile_cost_model(p, mc, DType::F32, 2, "mpi"), Error);
}

TEST(SimProfile, HardwareEntriesRoundTrip) {
  const std::string dir = test::temp_dir();
  GpuSpec g = find_gpu("h100");
  g.name = "my-h100";
  {
    std::ofstream f(dir + "/h.json");
    f << hardware_entry_json(g).dump();
  }
  const GpuSpec r = find_gpu(dir + "/h.json");
  EXPECT_EQ(r.name, "my-h100");
  EXPECT_DOUBLE_EQ(r.hbm_bw, g.hbm_bw);
  EXPECT_DOUBLE_EQ(r.flops_fp8, g.flops_fp8);
  EXPECT_DOUBLE_EQ(r.cache_bytes, g.cache_bytes);
  EXPECT_EQ(r.nvlink, g.nvlink);
  EXPECT_EQ(parse_node(dir + "/h.jsonx4").gpus_per_node, 4);
  {
    std::ofstream f(dir + "/bad.json");
    f << R"({"name": "x", "hbm_bytes": 1e9, "hbm_bw": 0, "flops_bf16": 1e12, "link_bw": 1e9})";
  }
  try {
    find_gpu(dir + "/bad.json");
    FAIL() << "expected loom::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hbm_bw = 0 must be > 0"), std::string::npos) << e.what();
  }
}

// The same simulator prices loom's CPU engine from the profile: `loom sim run` and `loom plan`
// take the profile as --hardware.
TEST(SimProfile, SimRunAndPlanOnTheProfiledMachine) {
  const Fixture f = make_fixture();
  std::string out;
  ASSERT_EQ(test::run_command(test::loom_bin() + " sim run --model " + f.model + " --hardware " + f.profile +
                                  " --plan sp=2 --policy shift --threshold 16 --synthetic poisson:50 --num-requests 9"
                                  " --prompt-len 40 --output-len 8 --json --quiet 2>&1",
                              &out),
            0)
      << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["summary"]["num_completed"], 9);
  EXPECT_EQ(j["hardware"], "cpux2");
  EXPECT_NE(j["calibration"].get<std::string>().find("loom profile"), std::string::npos);
  ASSERT_EQ(test::run_command(test::loom_bin() + " plan --model " + f.model + " --hardware " + f.profile +
                                  "x2 --input-tokens 64 --output-tokens 8 --num-requests 8 --json 2>/dev/null",
                              &out),
            0)
      << out;
  EXPECT_FALSE(nlohmann::json::parse(out)["pareto"].empty()) << out;
  // A GPU precision on a CPU profile is named.
  EXPECT_NE(test::run_command(test::loom_bin() + " sim run --model " + f.model + " --hardware " + f.profile +
                                  " --dtype fp8 --plan tp=1 --synthetic batch --num-requests 2 --quiet 2>&1",
                              &out),
            0);
  EXPECT_NE(out.find("weight dtype"), std::string::npos) << out;
}

// The default Shift threshold read from the profile: the profile-calibrated cost model prices the
// base below the shift config at every step size above it, and not at the threshold itself.
TEST(SimProfile, ShiftThresholdFromTheProfile) {
  const Fixture f = make_fixture();
  const ModelConfig mc = find_model(f.model);
  const ShiftThreshold t =
      default_shift_threshold(mc, DType::F32, Plan::make_sp_tp(2, 1), f.profile, "local", 0, 0, 512);
  EXPECT_NE(t.explain.find("calibrated by the profile"), std::string::npos) << t.explain;
  const CostModel cm = profile_cost_model(read_profile(f.profile), mc, DType::F32, 2);
  auto price = [&](const Plan& p, int n) { return cm.price(p, {SeqWork{n, n, true}}).total_s; };
  const int n = int(t.threshold);
  if (!t.crossed) {
    EXPECT_EQ(n, 512) << t.explain;
    EXPECT_GE(price(Plan::make_sp_tp(2, 1), 512), price(Plan::make_shift(2, 1), 512)) << t.explain;
    return;
  }
  if (n > 0) {
    EXPECT_GE(price(Plan::make_sp_tp(2, 1), n), price(Plan::make_shift(2, 1), n)) << t.explain;
  }
  for (int k = n + 1; k <= 512; ++k)
    ASSERT_LT(price(Plan::make_sp_tp(2, 1), k), price(Plan::make_shift(2, 1), k)) << "step of " << k << " tokens";
}

// Calibration transfer: efficiencies fitted on one machine's measurements predict another's from
// its datasheet entry alone; every file gets a finite error (the figures are in the report).
TEST(SimValidate, TransferBetweenTheProfileAndTheA100) {
  LOOM_REQUIRE_SHARED();
  const Fixture f = make_fixture();
  const std::string a100 = test::shared_dir() + "/data/gpu-measurements/a100";
  EXPECT_EQ(measurement_hardware(a100), "a100");
  EXPECT_EQ(measurement_hardware(f.profile), f.profile);
  const auto to_a100 = validate_transfer(f.profile, f.profile, "a100", a100);
  EXPECT_EQ(to_a100.size(), 12u);
  for (const auto& r : to_a100) EXPECT_TRUE(std::isfinite(r.median)) << r.file;
  const auto to_cpu = validate_transfer("a100", a100, f.profile, f.profile);
  EXPECT_EQ(to_cpu.size(), read_measurements(f.profile).size());
  for (const auto& r : to_cpu) EXPECT_TRUE(std::isfinite(r.median)) << r.file;
}

// The simulator against the engine, end to end, on every engine plan of two ranks and one: the
// same requests on both sides, every metric reported and finite.
TEST(SimValidateEngine, SameRequestsEveryMetricFinite) {
  const Fixture f = make_fixture();
  EngineValidationOptions o;
  o.model_path = f.model;
  o.trace = synthesize_trace(10, ArrivalSpec::poisson(200.0), 3, LengthDist::uniform(9, 40), 4,
                             LengthDist::uniform(2, 12), 5);
  o.max_num_seqs = 4;
  o.max_tokens_per_step = 32;
  o.kv_cache_bytes = 4 << 20;
  o.shift_threshold = 8;  // prefill chunks run the base, decodes the shift config
  o.steps_dir = f.dir + "/steps";
  const std::vector<EnginePlan> plans = {EnginePlan::parse("tp=1"), EnginePlan::parse("tp=2"),
                                         EnginePlan::parse("dp=2"), EnginePlan::parse("sp=2,tp=1"),
                                         EnginePlan::parse("sp=2@shift")};
  const auto rows = validate_engine(read_profile(f.profile), o, plans);
  ASSERT_EQ(rows.size(), plans.size());
  const std::vector<std::string> stems = {"1_tp=1", "2_tp=2", "3_dp=2", "4_sp=2", "5_sp=2_@shift"};
  for (size_t i = 0; i < rows.size(); ++i) {
    const PlanValidation& v = rows[i];
    const std::string what = v.plan.label();
    // --steps-dir: one row per step on each side, as many as the step counts compared.
    for (const char* side : {"engine", "sim"}) {
      std::ifstream in(cat(o.steps_dir, "/", stems[i], "_", side, ".csv"));
      ASSERT_TRUE(in) << stems[i] << " " << side;
      int lines = 0;
      for (std::string l; std::getline(in, l);) ++lines;
      const double steps = std::string(side) == "engine" ? v.metrics.back().engine : v.metrics.back().simulated;
      EXPECT_EQ(lines - 1, int(steps)) << stems[i] << " " << side;
    }
    EXPECT_TRUE(v.same_requests) << what << ": " << v.request_mismatch;
    EXPECT_EQ(v.num_requests, 10) << what;
    EXPECT_EQ(v.engine_summary.num_completed, 10) << what;
    EXPECT_EQ(v.simulated_summary.num_completed, 10) << what;
    EXPECT_EQ(v.engine_summary.num_output_tokens, v.simulated_summary.num_output_tokens) << what;
    EXPECT_EQ(v.ranks, Plan::parse(v.plan.plan).size()) << what;
    EXPECT_GT(v.num_kv_blocks, 0) << what;
    std::vector<std::string> names;
    for (const auto& m : v.metrics) {
      names.push_back(m.name);
      EXPECT_GT(m.engine, 0) << what << " " << m.name;
      EXPECT_GT(m.simulated, 0) << what << " " << m.name;
      EXPECT_TRUE(std::isfinite(m.error())) << what << " " << m.name;
    }
    EXPECT_EQ(names, (std::vector<std::string>{"throughput_tok_s", "ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms",
                                               "tpot_p90_ms", "steps"}))
        << what;
    EXPECT_TRUE(std::isfinite(v.median_abs_error())) << what;
    // Both sides name the steps with the same plans (Shift: the base and its shift config).
    std::set<std::string> e, s;
    for (const auto& [name, n] : v.engine_plan_steps) e.insert(name);
    for (const auto& [name, n] : v.simulated_plan_steps) s.insert(name);
    EXPECT_EQ(e, s) << what;
    if (v.plan.policy == "shift") {
      EXPECT_EQ(v.shift_threshold, 8) << what;
      EXPECT_EQ(e, (std::set<std::string>{"sp=2", "shift:sp=2"})) << what;
    }
  }
}

// The plans later issues added, through validate-engine end to end on the synthetic model:
// Helix (kvp=2,tpa=1 and kvp=2,tpa=2), pipeline parallelism (pp=2, tp=2,pp=2), SiDP (dp=2,
// weights=owner under sidp, sidp:was, sidp:cas) and Seesaw's plan set (pp=2 prefill, tp=2 decode).
// The machinery: the same requests on both sides, every metric reported and finite, both sides'
// steps named by the same plans where the policy's choice does not depend on timing.
TEST(SimValidateEngine, LaterPlansSameRequestsEveryMetricFinite) {
  const Fixture f = make_fixture();
  EngineValidationOptions o;
  o.model_path = f.model;
  o.trace = synthesize_trace(8, ArrivalSpec::poisson(200.0), 3, LengthDist::uniform(9, 40), 4,
                             LengthDist::uniform(2, 12), 5);
  o.max_num_seqs = 4;
  o.max_tokens_per_step = 32;
  o.kv_cache_bytes = 4 << 20;
  const std::vector<EnginePlan> plans = {
      EnginePlan::parse("kvp=2,tpa=1"),          EnginePlan::parse("kvp=2,tpa=2"),
      EnginePlan::parse("pp=2"),                 EnginePlan::parse("tp=2,pp=2"),
      EnginePlan::parse("dp=2,weights=owner@sidp"), EnginePlan::parse("dp=2,weights=owner@sidp:was"),
      EnginePlan::parse("dp=2,weights=owner@sidp:cas"), EnginePlan::parse("pp=2|tp=2@seesaw")};
  const auto rows = validate_engine(read_profile(f.profile), o, plans);
  ASSERT_EQ(rows.size(), plans.size());
  for (const PlanValidation& v : rows) {
    const std::string what = v.plan.label();
    EXPECT_TRUE(v.same_requests) << what << ": " << v.request_mismatch;
    EXPECT_EQ(v.num_requests, 8) << what;
    EXPECT_EQ(v.engine_summary.num_completed, 8) << what;
    EXPECT_EQ(v.simulated_summary.num_completed, 8) << what;
    EXPECT_EQ(v.engine_summary.num_output_tokens, v.simulated_summary.num_output_tokens) << what;
    EXPECT_EQ(v.ranks, Plan::parse(v.plan.plan).size()) << what;
    ASSERT_EQ(v.metrics.size(), 6u) << what;
    for (const auto& m : v.metrics) {
      EXPECT_GT(m.engine, 0) << what << " " << m.name;
      EXPECT_GT(m.simulated, 0) << what << " " << m.name;
      EXPECT_TRUE(std::isfinite(m.error())) << what << " " << m.name;
    }
    std::set<std::string> e, s;
    for (const auto& [name, n] : v.engine_plan_steps) e.insert(name);
    for (const auto& [name, n] : v.simulated_plan_steps) s.insert(name);
    if (v.plan.policy == "sidp") {
      EXPECT_GT(v.sidp_threshold, 0) << what;  // derived from the profile, both sides the same
    } else {
      EXPECT_EQ(e, s) << what;
    }
    if (v.plan.policy == "sidp:cas") {
      EXPECT_EQ(e, (std::set<std::string>{"dp=2,weights=owner,sidp=cas"})) << what;
    }
    if (v.plan.policy == "sidp:was") {
      EXPECT_EQ(e, (std::set<std::string>{"dp=2,weights=owner"})) << what;
    }
    if (v.plan.policy == "seesaw") {
      EXPECT_EQ(e, (std::set<std::string>{"pp=2", "tp=2"})) << what;  // prefill under c_p, decode under c_d
      EXPECT_EQ(v.cpu_kv_bytes, 2 * o.kv_cache_bytes) << what;
    } else {
      EXPECT_EQ(v.cpu_kv_bytes, 0) << what;
    }
  }
}

// SiDP under WaS (sidp:was): the engine's replicas step on their own (engine/sidp_replicas.h), and
// so do the simulator's; on a batch workload both sides run the same per-replica schedulers, so
// the step records (one per replica and step) agree exactly. By hand, with 32 tokens a step:
// replica 0 (ids 0, 2): prompts 20 + 10 in one step, which samples both first tokens, then 2
// decode steps for id 0's 3 tokens: 3 steps; replica 1 (id 1): prompt 40 in 2 chunks (32 + 8,
// the second samples), then 11 decode steps for 12 tokens: 13 steps. 16 in all.
TEST(SimValidateEngine, SidpWasReplicaStepsAgreeWithTheEngine) {
  const Fixture f = make_fixture();
  EngineValidationOptions o;
  o.model_path = f.model;
  o.trace = {TraceRequest{0.0, 20, 3, {}, 0, false, false}, TraceRequest{0.0, 40, 12, {}, 0, false, false},
             TraceRequest{0.0, 10, 2, {}, 0, false, false}};
  o.max_num_seqs = 4;
  o.max_tokens_per_step = 32;
  o.kv_cache_bytes = 4 << 20;
  const auto rows = validate_engine(read_profile(f.profile), o, {EnginePlan::parse("dp=2,weights=owner@sidp:was")});
  ASSERT_EQ(rows.size(), 1u);
  const PlanValidation& v = rows.front();
  EXPECT_TRUE(v.same_requests) << v.request_mismatch;
  EXPECT_EQ(v.engine_summary.num_completed, 3);
  EXPECT_EQ(v.simulated_summary.num_completed, 3);
  EXPECT_EQ(v.engine_summary.num_steps, 16);
  EXPECT_EQ(v.simulated_summary.num_steps, 16);
  const auto steps = std::find_if(v.metrics.begin(), v.metrics.end(), [](const MetricComparison& m) { return m.name == "steps"; });
  ASSERT_NE(steps, v.metrics.end());
  EXPECT_EQ(steps->engine, steps->simulated);
  using Steps = std::vector<std::pair<std::string, int64_t>>;
  EXPECT_EQ(v.engine_plan_steps, (Steps{{"dp=2,weights=owner", 16}}));
  EXPECT_EQ(v.simulated_plan_steps, (Steps{{"dp=2,weights=owner", 16}}));
}

// `loom sim validate-engine` on SiDP under --policy sidp across WaS -> CaS -> WaS (issue 30): the
// engine run on the simulator's clock (every step executed on its ranks, its end time the cost
// model's price) gives the simulator's step records exactly (replica, lockstep flag, plan, start
// and end, the batch's sequences and token counts), because both run SidpCoordinator
// (engine/sidp_coordinator.h). The trace, 2 replicas, B_th = 2 sequences a replica (back to WaS
// above (1 + 0.5) x 2 = 3): wave 1 at t = 0, ids 0..5 with prompts of 10, id 0 writes 40 tokens and
// the others 4; replicas 0 (ids 0, 2, 4) and 1 (1, 3, 5) start with 3 each; once the short ones are
// done replica 0 runs id 0 alone (0.5 a replica), and after 4 observations (rounds of 2 own steps)
// the group goes CaS and steps in lockstep. Wave 2 at t = 1.5 s (simulated; wave 1 is done long
// before at this machine's milliseconds a step): ids 6..13, prompts of 10 and 12 tokens, 4 a
// replica, above 3 for 4 decode group steps -> WaS. Counts, not timings: the switches follow the
// batch sizes wherever the profile puts the steps.
TEST(SimValidateEngine, SidpPolicyStepRecordsIdenticalAcrossWasCasWas) {
  const Fixture f = make_fixture();
  EngineValidationOptions o;
  o.model_path = f.model;
  for (int i = 0; i < 6; ++i) o.trace.push_back(TraceRequest{0.0, 10, i == 0 ? 40 : 4, {}, 0, false, false});
  for (int i = 0; i < 8; ++i) o.trace.push_back(TraceRequest{1.5, 10, 12, {}, 0, false, false});
  o.max_num_seqs = 8;
  o.max_tokens_per_step = 64;
  o.kv_cache_bytes = 4 << 20;
  o.sidp_threshold = 2;
  o.steps_dir = f.dir + "/sidp_steps";
  const auto rows = validate_engine(read_profile(f.profile), o, {EnginePlan::parse("dp=2,weights=owner@sidp")});
  ASSERT_EQ(rows.size(), 1u);
  const PlanValidation& v = rows.front();
  EXPECT_TRUE(v.same_requests) << v.request_mismatch;
  EXPECT_EQ(v.simulated_summary.num_completed, 14);
  EXPECT_GT(v.step_records, 0);
  EXPECT_TRUE(v.step_records_identical) << v.step_record_mismatch;
  EXPECT_EQ(v.step_records, v.simulated_summary.num_steps);
  // The simulator's modes in step order: WaS, then CaS (lockstep), then WaS again.
  std::ifstream in(o.steps_dir + "/1_dp=2_weights=owner_@sidp_sim.csv");
  ASSERT_TRUE(in);
  std::string line, modes;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const char m = line.find("sidp=cas") != std::string::npos ? 'C' : 'W';
    if (modes.empty() || modes.back() != m) modes += m;
  }
  EXPECT_EQ(modes.substr(0, 3), "WCW") << modes;
  const auto json = to_json(v);
  EXPECT_EQ(json.at("step_records_identical"), true);
  EXPECT_NE(to_text(rows).find("step records (the engine on the simulator's clock): "), std::string::npos);
}

// What validate-engine cannot compare is named in one line before anything loads.
TEST(SimValidateEngine, NamesWhatItCannotCompare) {
  try {
    EnginePlan::parse("tp=2@nitsum");
    FAIL() << "nitsum accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--policy nitsum cannot be compared"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // Seesaw needs its two plans (c_p, c_d); a set of plans of different sizes is no set.
  EXPECT_THROW(EnginePlan::parse("tp=2@seesaw"), Error);
  EXPECT_THROW(EnginePlan::parse("tp=2|tp=4@seesaw"), Error);
  const EnginePlan p = EnginePlan::parse("pp=2|tp=2@seesaw");
  EXPECT_EQ(p.plans(), (std::vector<std::string>{"pp=2", "tp=2"}));
  EXPECT_EQ(p.label(), "pp=2|tp=2 @seesaw");
}

// The command: the table, --json for scripts, and bad input named before anything runs.
TEST(SimValidateEngine, CommandLine) {
  const Fixture f = make_fixture();
  std::string out;
  const std::string base = test::loom_bin() + " sim validate-engine --model " + f.model + " --profile " + f.profile +
                           " --synthetic poisson:100 --num-requests 6 --prompt-len 24 --output-len 6"
                           " --max-num-seqs 4 --max-tokens-per-step 32 --kv-cache-bytes 4000000";
  ASSERT_EQ(test::run_command(base + " --plan tp=2 --plan sp=2@shift --shift-threshold 8 --json 2>/dev/null", &out), 0)
      << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["plans"].size(), 2u);
  EXPECT_EQ(j["plans"][1]["policy"], "shift");
  for (const auto& p : j["plans"]) {
    EXPECT_TRUE(p["same_requests"].get<bool>()) << p.dump();
    EXPECT_EQ(p["metrics"].size(), 6u);
    for (const auto& m : p["metrics"]) EXPECT_TRUE(m["error"].is_number()) << m.dump();
  }
  ASSERT_EQ(test::run_command(base + " --plan dp=2 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("ttft_p90_ms"), std::string::npos) << out;
  EXPECT_NE(out.find("same on both sides"), std::string::npos) << out;
  EXPECT_NE(test::run_command(base + " --plan tp=3 2>&1", &out), 0);
  EXPECT_NE(out.find("tp=3 does not divide num_attention_heads=4"), std::string::npos) << out;
  ASSERT_EQ(test::run_command(base + " --plan pp=2 --plan tp=2 --policy seesaw --json 2>/dev/null", &out), 0) << out;
  const nlohmann::json js = nlohmann::json::parse(out);
  ASSERT_EQ(js["plans"].size(), 1u) << out;  // one plan set, c_p then c_d
  EXPECT_EQ(js["plans"][0]["plans"], (nlohmann::json{"pp=2", "tp=2"})) << out;
  EXPECT_TRUE(js["plans"][0]["same_requests"].get<bool>()) << out;
  EXPECT_NE(test::run_command(base + " --plan tp=2 --policy nitsum 2>&1", &out), 0);
  EXPECT_NE(out.find("--policy nitsum cannot be compared"), std::string::npos) << out;
  EXPECT_NE(test::run_command(base + " --plan tp=2@often 2>&1", &out), 0);
  EXPECT_NE(out.find("often"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::loom_bin() + " sim validate-engine --model " + f.model + " --profile " + f.dir +
                                  " --synthetic batch --num-requests 2 --plan tp=2 2>&1",
                              &out),
            0);
  EXPECT_NE(out.find("hardware.json"), std::string::npos) << out;
}

// LOOM_OP_TIMING: validate-engine sets the engine's time by operator class beside the simulator's
// priced parts; the classes timed inside the steps fit in the steps' wall time; off, nothing.
TEST(SimValidateEngine, OperatorBreakdown) {
  const Fixture f = make_fixture();
  std::string out;
  const std::string args = " sim validate-engine --model " + f.model + " --profile " + f.profile +
                           " --synthetic batch --num-requests 4 --prompt-len 24 --output-len 6"
                           " --max-num-seqs 4 --max-tokens-per-step 32 --kv-cache-bytes 4000000 --plan tp=2 --json";
  ASSERT_EQ(test::run_command("LOOM_OP_TIMING=1 " + test::loom_bin() + args + " 2>/dev/null", &out), 0) << out;
  const nlohmann::json p = nlohmann::json::parse(out)["plans"][0];
  ASSERT_TRUE(p.contains("op_breakdown")) << out;
  std::map<std::string, std::pair<double, double>> ops;
  for (const auto& m : p["op_breakdown"])
    ops[m["metric"]] = {m["engine"].get<double>(), m["simulated"].is_number() ? m["simulated"].get<double>() : -1};
  for (const char* k : {"matmul_s", "attention_s", "elementwise_s", "comm_s", "overhead_s", "sum_of_steps_s"}) {
    ASSERT_TRUE(ops.count(k)) << k << " " << out;
    EXPECT_GT(ops[k].first, 0) << k;   // tp=2: every class ran, the all-reduces included
    EXPECT_GT(ops[k].second, 0) << k;  // and was priced
  }
  // Matmuls, attention and element-wise ops run inside the steps on rank 0 (comm_s also holds the
  // stop command's broadcast after the last step).
  const double inside = ops["matmul_s"].first + ops["attention_s"].first + ops["elementwise_s"].first;
  EXPECT_LE(inside, ops["sum_of_steps_s"].first * 1.001) << out;
  ASSERT_EQ(test::run_command(test::loom_bin() + args + " 2>/dev/null", &out), 0) << out;
  EXPECT_FALSE(nlohmann::json::parse(out)["plans"][0].contains("op_breakdown")) << out;
}

// loom profile --clock and --op-order: recorded in the hardware entry, bad values named.
TEST(SimProfile, ClockAndOperatorOrder) {
  const Fixture f = make_fixture();
  std::ifstream in(f.profile + "/hardware.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["profile"]["clock"], "wall");
  EXPECT_EQ(j["profile"]["op_order"], "engine");
  std::string out;
  const std::string cmd = test::loom_bin() + " profile --quick -o " + f.dir + "/p2 --model " + f.model +
                          " --shapes '' --dtypes f32 --tokens 1,4 --tp 1 --ranks 2 --concurrent 1 --reps 3"
                          " --budget-mib 16 --clock cpu --op-order isolated 2>&1";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  std::ifstream in2(f.dir + "/p2/hardware.json");
  const nlohmann::json j2 = nlohmann::json::parse(in2);
  EXPECT_EQ(j2["profile"]["clock"], "cpu");
  EXPECT_EQ(j2["profile"]["op_order"], "isolated");
  const MachineProfile prof = read_profile(f.dir + "/p2");
  EXPECT_FALSE(prof.files.empty());
  EXPECT_NE(test::run_command(test::loom_bin() + " profile -o " + f.dir + "/p3 --clock gpu 2>&1", &out), 0);
  EXPECT_NE(out.find("--clock must be wall or cpu"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::loom_bin() + " profile -o " + f.dir + "/p3 --op-order random 2>&1", &out), 0);
  EXPECT_NE(out.find("--op-order must be engine or isolated"), std::string::npos) << out;
}

// --sweeps N measures the layer operators' token counts N times over and writes each point's
// median; with TP shards on concurrent ranks the passes meet at the layer's all-reduce points
// (src/profiler/profiler.cpp segment_sync). The machinery: every row there, every time positive and finite,
// recorded in hardware.json; a bad count is named.
TEST(SimProfile, SweepsWriteEveryRowOnce) {
  const Fixture f = make_fixture();
  std::string out;
  const std::string cmd = test::loom_bin() + " profile --quick -o " + f.dir + "/sw --model " + f.model +
                          " --shapes '' --dtypes f32 --tokens 1,4 --tp 1,2 --ranks 2 --concurrent 2 --reps 2"
                          " --sweeps 3 --budget-mib 16 2>&1";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  std::ifstream in(f.dir + "/sw/hardware.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["profile"]["sweeps"], 3);
  const MachineProfile prof = read_profile(f.dir + "/sw");
  std::set<std::pair<std::string, int>> rows;  // (file, data row)
  int gemms = 0;
  for (const auto& file : prof.files) {
    if (file.kind != MeasurementFile::Mlp) continue;
    EXPECT_EQ(file.concurrent_ranks, 2) << file.name;
    for (const OpSample& x : file.samples) {
      rows.insert({file.name, x.row});
      if (x.op == "attn_pre_proj" || x.op == "mlp_up_proj" || x.op == "mlp_down_proj") {
        ++gemms;
        EXPECT_GT(x.measured_s, 0.0) << x.op;
        EXPECT_TRUE(std::isfinite(x.measured_s)) << x.op;
      }
    }
  }
  // tokens {1, 4} x tp {1, 2}, each written once whatever the sweeps, three GEMM operators each.
  EXPECT_EQ(rows.size(), 4u);
  EXPECT_EQ(gemms, 12);
  EXPECT_NE(test::run_command(test::loom_bin() + " profile -o " + f.dir + "/sw2 --sweeps 0 2>&1", &out), 0);
  EXPECT_NE(out.find("--sweeps: 0 is out of range [1, 10000]"), std::string::npos) << out;
}

}  // namespace
}  // namespace loom::sim
