// Shift Parallelism through the distributed engine (engine/dist_engine.h, local backend): batches
// of prompts of different lengths, chunked prefill beside decodes, under the Shift policy
// (Algorithm 2) and under forced interleavings (test hooks "alternate" and "random:SEED"), must
// give the single-rank greedy tokens (STYLE.md: parallel executors against the single-rank
// engine, token for token). SP and TP change the order of float sums, so the criterion is equal
// greedy tokens; a difference is reported with the single-rank top-2 logit gap at that position
// (a genuine near-tie vs a bug). Every step records its config; after every step every rank's KV
// store holds exactly what the running plan's placement gives it (so the base and shift configs
// keep one placement), and no switch runs a migration.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "engine/dist_engine.h"
#include "engine/generator.h"
#include "model/loader.h"
#include "model/synth.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

using test::alone;
using test::expect_tokens;
using test::random_prompts;

struct EngineRun {
  std::map<int64_t, std::vector<int32_t>> out;
  std::vector<StepMetrics> steps;
  std::vector<PlanStats> stats;
  std::vector<std::string> info;
  int64_t switches() const {
    int64_t n = 0;
    for (const PlanStats& p : stats) n += p.switches;
    return n;
  }
  int64_t kv_bytes_moved() const {
    int64_t n = 0;
    for (const PlanStats& p : stats) n += p.kv_bytes_moved;
    return n;
  }
};

struct RunOptions {
  std::string plan, policy = "fixed", weights = "separate";
  int64_t threshold = -1;
  int budget = 16;
};

EngineRun run(const RunOptions& ro, const std::shared_ptr<Model>& model, const std::vector<std::vector<int32_t>>& prompts,
        int n, std::vector<int32_t> eos = {}) {
  DistOptions o;
  o.comm = "local";
  o.plan = ro.plan;
  o.ranks = Plan::parse(ro.plan).size();
  o.engine.max_tokens_per_step = ro.budget;
  o.engine.max_num_seqs = 64;
  o.engine.kv_cache_bytes = int64_t(8) << 20;
  o.comm_options.timeout_s = 30;
  o.load_model = [model](int) { return model; };
  o.policy = ro.policy;
  o.shift_threshold = ro.threshold;
  o.shift_weights = ro.weights;
  const std::vector<Request> rs = test::greedy_requests(prompts, n, eos);
  EngineRun res;
  test::HoldingsCheck holdings;
  holdings.install(o, o.ranks);
  run_distributed(o, [&](DistEngine& e) {
    for (const Sequence& s : e.run(rs)) {
      EXPECT_TRUE(s.finish_reason == FinishReason::kLength || s.finish_reason == FinishReason::kStop)
          << "request " << s.id() << ": " << finish_reason_name(s.finish_reason) << " " << s.finish_detail;
      res.out[s.id()] = s.output;
    }
    res.steps = e.metrics().steps();
    res.stats = e.plan_stats();
    res.info = e.start_info();
  });
  holdings.expect_clean(ro.plan);
  return res;
}

// Under a switching policy: both configs ran, the switches moved nothing, every step is named.
void expect_switched(const std::string& label, const EngineRun& r, const Plan& base) {
  std::set<std::string> plans;
  for (const StepMetrics& s : r.steps) plans.insert(s.plan);
  EXPECT_EQ(plans, (std::set<std::string>{base.to_string(), base.shift_config().to_string()})) << label;
  EXPECT_GT(r.switches(), 0) << label;
  EXPECT_EQ(r.kv_bytes_moved(), 0) << label;
  ASSERT_EQ(r.stats.size(), 2u) << label;
  EXPECT_EQ(r.stats[0].steps + r.stats[1].steps, int64_t(r.steps.size())) << label;
}

void check(const std::shared_ptr<Model>& m, const std::vector<std::pair<int, int>>& degrees,
           const std::vector<std::string>& policies, int n_prompts, int n, uint64_t seed) {
  const auto prompts = random_prompts(n_prompts, 40, m->config.vocab_size, seed);
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(m, p, n));
  for (auto [s, t] : degrees) {
    const Plan base = Plan::make_sp_tp(s, t);
    for (const std::string& policy : policies) {
      RunOptions ro;
      ro.plan = base.to_string();
      ro.policy = policy;
      ro.threshold = 8;  // with the 16-token budget: prefill chunks run the base, small steps shift
      const std::string label = cat(ro.plan, " --policy ", policy);
      SCOPED_TRACE(label);
      const EngineRun r = run(ro, m, prompts, n);
      expect_tokens(label, m, prompts, want, r.out);
      expect_switched(label, r, base);
    }
  }
}

TEST(ShiftEngine, Stories260KInterleavingsMatchSingleRank) {
  LOOM_REQUIRE_SHARED();
  std::shared_ptr<Model> m = load_model(test::stories_dir() + "/stories260K.bin");
  check(m, {{2, 1}, {2, 2}, {2, 4}, {4, 1}, {4, 2}, {8, 1}}, {"shift", "alternate", "random:3"}, 9, 12, 11);
}

TEST(ShiftEngine, SynthGqaInterleavingsMatchSingleRank) {
  std::shared_ptr<Model> m = load_model(test::gqa_24x6_path());
  check(m, {{2, 1}, {3, 1}, {3, 2}, {2, 3}, {6, 1}, {2, 6}, {12, 1}}, {"shift", "random:5"}, 8, 8, 23);
}

// Prefill under SP, decode under TP for the same sequences: with the threshold at the decode
// batch size, every step with a prefill chunk runs the base and every decode-only step the shift
// config (Algorithm 2), and the tokens are the single-rank ones.
TEST(ShiftEngine, PrefillUnderSpDecodeUnderTp) {
  LOOM_REQUIRE_SHARED();
  std::shared_ptr<Model> m = load_model(test::stories_dir() + "/stories260K.bin");
  const auto prompts = random_prompts(5, 40, 512, 4);
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(m, p, 10));
  RunOptions ro;
  ro.plan = "sp=2,tp=2";
  ro.policy = "shift";
  ro.threshold = 5;  // 5 sequences decode 5 tokens: shift; any step with a prefill chunk here has more
  ro.budget = 64;
  const EngineRun r = run(ro, m, prompts, 10);
  expect_tokens("prefill sp / decode tp", m, prompts, want, r.out);
  int64_t prefill_steps = 0, decode_steps = 0;
  for (const StepMetrics& s : r.steps) {
    if (s.num_tokens > 5) {
      EXPECT_EQ(s.plan, "sp=2,tp=2") << "step " << s.index << " of " << s.num_tokens << " tokens";
      prefill_steps += s.num_prefill_tokens > 0;
    } else {
      EXPECT_EQ(s.plan, "shift:sp=2,tp=2") << "step " << s.index << " of " << s.num_tokens << " tokens";
      decode_steps += s.num_prefill_tokens == 0;
    }
  }
  EXPECT_GT(prefill_steps, 0);
  EXPECT_GT(decode_steps, 0);
  EXPECT_EQ(r.kv_bytes_moved(), 0);
}

// Fixed plans: the base alone and the shift config alone; DP replicas of an sp x tp base with
// the Shift policy; both weight modes give the same tokens; the start-up report names the bytes.
TEST(ShiftEngine, FixedConfigsDpAndWeightModes) {
  std::shared_ptr<Model> m = load_model(test::gqa_24x6_path());
  const auto prompts = random_prompts(6, 30, m->config.vocab_size, 9);
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(m, p, 8));
  for (const std::string plan : {"sp=3,tp=2", "shift:sp=3,tp=2"}) {
    RunOptions ro;
    ro.plan = plan;
    const EngineRun r = run(ro, m, prompts, 8);
    expect_tokens(plan, m, prompts, want, r.out);
    for (const StepMetrics& s : r.steps) EXPECT_EQ(s.plan, plan);
    EXPECT_EQ(r.switches(), 0);
  }
  {
    RunOptions ro;
    ro.plan = "dp=2,sp=2,tp=1";
    ro.policy = "random:7";
    const EngineRun r = run(ro, m, prompts, 8);
    expect_tokens(ro.plan, m, prompts, want, r.out);
  }
  for (const std::string weights : {"separate", "slice"}) {
    RunOptions ro;
    ro.plan = "sp=2,tp=3";
    ro.policy = "alternate";
    ro.weights = weights;
    const EngineRun r = run(ro, m, prompts, 8);
    expect_tokens(cat("weights ", weights), m, prompts, want, r.out);
    ASSERT_EQ(r.info.size(), 7u);  // the plans line and one line per rank
    EXPECT_NE(r.info[0].find(cat("weights ", weights)), std::string::npos) << r.info[0];
    EXPECT_NE(r.info[1].find("rank 0: sp=2,tp=3 shard "), std::string::npos) << r.info[1];
    EXPECT_NE(r.info[1].find("shift:sp=2,tp=3 shard "), std::string::npos) << r.info[1];
    // slice: the shift shard is views of the base copy; separate: its own copy.
    const std::string shift_part = r.info[1].substr(r.info[1].find("shift:sp=2,tp=3 shard "));
    EXPECT_EQ(shift_part.find("(no copy)") < shift_part.find(";"), weights == "slice") << r.info[1];
  }
}

// The independent reference (reference_greedy.jsonl) under a random interleaving of sp=2,tp=2.
TEST(ShiftEngine, ReferenceGreedyUnderRandomInterleaving) {
  LOOM_REQUIRE_SHARED();
  std::shared_ptr<Model> m = load_model(test::stories_dir() + "/stories260K.bin");
  std::ifstream in(test::stories_dir() + "/reference_greedy.jsonl");
  std::string line;
  std::vector<std::vector<int32_t>> prompts, nexts;
  int max_new = 0;
  std::vector<int> steps;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    prompts.push_back(j.at("prompt_tokens").get<std::vector<int32_t>>());
    nexts.push_back(j.at("next_tokens").get<std::vector<int32_t>>());
    steps.push_back(j.at("steps").get<int>());
  }
  ASSERT_FALSE(prompts.empty());
  for (size_t i = 0; i < prompts.size(); ++i) max_new = std::max(max_new, steps[i] - int(prompts[i].size()) + 1);
  RunOptions ro;
  ro.plan = "sp=2,tp=2";
  ro.policy = "random:11";
  ro.budget = 64;
  const EngineRun r = run(ro, m, prompts, max_new, {1});
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> next(prompts[i].begin() + 1, prompts[i].end());
    const auto& out = r.out.at(int64_t(i) + 1);
    next.insert(next.end(), out.begin(), out.end());
    next.resize(std::min(next.size(), nexts[i].size()));
    EXPECT_EQ(next, nexts[i]) << "reference " << i;
  }
}

using test::error_of;

TEST(ShiftEngine, PolicyErrorsUpFront) {
  std::shared_ptr<Model> m = load_model(test::gqa_24x6_path());
  auto try_run = [&](const std::string& plan, const std::string& policy, int64_t threshold) {
    return error_of([&] {
      RunOptions ro;
      ro.plan = plan;
      ro.policy = policy;
      ro.threshold = threshold;
      run(ro, m, {{1, 5}}, 1);
    });
  };
  EXPECT_NE(try_run("tp=4", "shift", 8).find("e.g. --plan sp=2,tp=2 (its shift config is added); got tp=4"),
            std::string::npos)
      << try_run("tp=4", "shift", 8);
  EXPECT_NE(try_run("shift:sp=2,tp=1", "shift", 8).find("got shift:sp=2"), std::string::npos);
  EXPECT_NE(try_run("sp=2,tp=1", "cycle:0", 8).find("cycle length must be a whole number of steps >= 1"),
            std::string::npos);
  EXPECT_NE(try_run("sp=2,tp=1", "sometimes", 8).find("unknown --policy 'sometimes'"), std::string::npos);
  EXPECT_NE(try_run("sp=2,tp=1", "shift", -1).find("needs --shift-threshold"), std::string::npos);
  EXPECT_NE(try_run("sp=2,tp=2", "shift", 8).find("sp*tp (sp=2, tp=2)=4"), std::string::npos)
      << try_run("sp=2,tp=2", "shift", 8);
}

}  // namespace
}  // namespace loom
