// The engine on many ranks (local backend: ranks as threads) against the single-rank path: every
// plan must produce the same greedy tokens for a batch of prompts of different lengths, batched
// with chunked prefill (STYLE.md: parallel executors are compared against the single-rank
// engine, token for token). TP changes the order in which Wo/W_down partial sums are added, so
// logits differ in the last bits: the criterion is equal greedy tokens; when one differs, the
// failure message gives the single-rank top-2 logit gap at that position, to tell a genuine
// near-tie from a bug.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/rng.h"
#include "engine/dist_engine.h"
#include "engine/generator.h"
#include "engine/step_codec.h"
#include "model/loader.h"
#include "model/synth.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

const std::vector<std::string> kPlans = {"tp=1", "tp=2", "tp=4", "tp=8", "dp=2", "dp=2,tp=2", "tp=4,weights=full"};
// Pipeline plans of stories260K's 5 layers (uneven stages), and Helix plans (KVP x TPA; 8 query
// heads, 4 KV heads; prompts shorter than a block leave some KVP ranks without a key).
const std::vector<std::string> kStoriesPp = {"pp=2,layers=3+2", "pp=5", "dp=2,pp=2,layers=1+4", "tp=2,pp=2,layers=2+3"};
const std::vector<std::string> kStoriesHelix = {"kvp=2,tpa=2", "kvp=4,tpa=1", "kvp=2,tpa=4", "kvp=2,tpa=2,hopb=off",
                                                "dp=2,kvp=2,tpa=1", "kvp=2,tpa=1,block=32"};
// The GQA model: 24 query heads, 6 KV heads.
const std::vector<std::string> kGqaHelix = {"kvp=2,tpa=3", "kvp=3,tpa=2", "kvp=4,tpa=1", "kvp=2,tpa=6"};

using test::alone;
using test::greedy_requests;
using test::expect_tokens;
using test::random_prompts;

// Runs `requests` under `plan` on the local backend; returns outputs by request id.
std::map<int64_t, std::vector<int32_t>> run_plan(const std::string& plan, const std::shared_ptr<Model>& model,
                                                 std::vector<Request> requests, int budget = 16) {
  DistOptions o;
  o.comm = "local";
  o.plan = plan;
  o.ranks = Plan::parse(plan).size();
  o.engine.max_tokens_per_step = budget;  // small: prompts are prefilled in chunks beside decodes
  o.engine.max_num_seqs = 64;
  o.engine.kv_cache_bytes = int64_t(8) << 20;
  o.comm_options.timeout_s = 30;
  o.load_model = [model](int) { return model; };
  test::HoldingsCheck holdings;
  holdings.install(o, o.ranks);
  std::map<int64_t, std::vector<int32_t>> out;
  run_distributed(o, [&](DistEngine& e) {
    EXPECT_EQ(e.num_replicas(), Plan::parse(plan).dp);
    for (const Sequence& s : e.run(requests)) {
      EXPECT_TRUE(s.finish_reason == FinishReason::kLength || s.finish_reason == FinishReason::kStop)
          << "request " << s.id() << ": " << finish_reason_name(s.finish_reason) << " " << s.finish_detail;
      out[s.id()] = s.output;
    }
    // Every request, of every replica, is in the metrics.
    EXPECT_EQ(e.metrics().summary().num_requests, int64_t(requests.size()));
    // Nothing left in any rank's KV: finished sequences were released everywhere.
    EXPECT_EQ(e.scheduler().num_used_blocks(), 0);
  });
  holdings.expect_clean(plan);
  return out;
}

// ---- the step descriptor ----

TEST(StepCodec, RoundTripAndMalformedInput) {
  StepBatch b;
  b.step_index = 97;
  b.block_size = 16;
  b.plan_id = 3;
  b.kv_seqs = {{5, 40}, {1000, 1}, {77, 0}};
  b.kv_resident = true;
  const std::vector<RequestId> released = {9, 2, int64_t(1) << 40};
  Rng rng(3);
  for (int i = 0; i < 7; ++i) {
    ScheduledSeq s;
    s.seq_id = 1000 + i * 17;
    s.start = int(rng.below(300));
    s.num_tokens = 1 + int(rng.below(17));
    s.is_prefill = s.num_tokens > 1;
    s.sample = i % 2 == 0;
    for (int k = 0; k < s.num_tokens; ++k) s.token_ids.push_back(int32_t(rng.below(512)));
    for (int k = 0; k < (s.start + s.num_tokens + 15) / 16; ++k) s.block_ids.push_back(int32_t(rng.below(999)));
    s.sampling.temperature = 0.7f;
    s.sampling.top_p = 0.9f;
    s.sampling.top_k = 40 + i;
    s.sampling.seed = 0xfeedull << i;
    s.priority = -i;
    b.seqs.push_back(s);
    b.num_tokens += s.num_tokens;
    (s.is_prefill ? b.num_prefill_tokens : b.num_decode_tokens) += s.num_tokens;
    b.num_sampled += s.sample;
  }
  std::vector<uint8_t> wire;
  encode_step(b, released, wire);
  const DecodedStep d = decode_step(wire.data(), wire.size());
  ASSERT_EQ(d.command, StepCommand::kStep);
  EXPECT_EQ(d.batch.step_index, 97);
  EXPECT_EQ(d.batch.block_size, 16);
  EXPECT_EQ(d.batch.plan_id, 3);
  EXPECT_EQ(d.released, released);
  EXPECT_TRUE(d.batch.kv_resident);
  ASSERT_EQ(d.batch.kv_seqs.size(), b.kv_seqs.size());
  for (size_t i = 0; i < b.kv_seqs.size(); ++i) {
    EXPECT_EQ(d.batch.kv_seqs[i].id, b.kv_seqs[i].id);
    EXPECT_EQ(d.batch.kv_seqs[i].n_tokens, b.kv_seqs[i].n_tokens);
  }
  EXPECT_EQ(d.batch.num_tokens, b.num_tokens);
  EXPECT_EQ(d.batch.num_prefill_tokens, b.num_prefill_tokens);
  EXPECT_EQ(d.batch.num_sampled, b.num_sampled);
  ASSERT_EQ(d.batch.seqs.size(), b.seqs.size());
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const ScheduledSeq &x = b.seqs[i], &y = d.batch.seqs[i];
    EXPECT_EQ(y.seq_id, x.seq_id);
    EXPECT_EQ(y.start, x.start);
    EXPECT_EQ(y.num_tokens, x.num_tokens);
    EXPECT_EQ(y.is_prefill, x.is_prefill);
    EXPECT_EQ(y.sample, x.sample);
    EXPECT_EQ(y.token_ids, x.token_ids);
    EXPECT_EQ(y.sampling.temperature, x.sampling.temperature);
    EXPECT_EQ(y.sampling.top_p, x.sampling.top_p);
    EXPECT_EQ(y.sampling.top_k, x.sampling.top_k);
    EXPECT_EQ(y.sampling.seed, x.sampling.seed);
    EXPECT_EQ(y.priority, x.priority);
  }
  const std::vector<uint8_t> stop = encode_stop();
  EXPECT_EQ(decode_step(stop.data(), stop.size()).command, StepCommand::kStop);
  // Every truncation is an error, never a read past the end (ASan builds would see one).
  for (size_t n : {size_t(0), size_t(3), size_t(13), wire.size() / 2, wire.size() - 1})
    EXPECT_THROW(decode_step(wire.data(), n), Error) << n;
  std::vector<uint8_t> longer = wire;
  longer.push_back(0);
  EXPECT_THROW(decode_step(longer.data(), longer.size()), Error);
  std::vector<uint8_t> bad = wire;
  bad[0] ^= 1;
  EXPECT_THROW(decode_step(bad.data(), bad.size()), Error);
}

// ---- exactness: stories260K (8 query heads, 4 KV heads, F = 172: uneven at tp=8) ----

class DistStories : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_SHARED();
    model_ = load_model(test::stories_dir() + "/stories260K.bin");
    prompts_ = random_prompts(9, 40, 512, 11);
  }
  std::shared_ptr<Model> model_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(DistStories, EveryPlanMatchesSingleRankGreedy) {
  const int n = 12;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts_) want.push_back(alone(model_, p, n));
  std::vector<std::string> plans = kPlans;
  plans.insert(plans.end(), kStoriesPp.begin(), kStoriesPp.end());
  plans.insert(plans.end(), kStoriesHelix.begin(), kStoriesHelix.end());
  for (const std::string& plan : plans) {
    SCOPED_TRACE(plan);
    expect_tokens(cat("plan ", plan), model_, prompts_, want,
                  run_plan(plan, model_, greedy_requests(prompts_, n)));
  }
}

struct Reference {
  std::vector<int32_t> prompt_tokens, next_tokens;
  int steps = 0;
};

// Every sequence of reference_greedy.jsonl (an independent implementation), all in one batch,
// under every plan: next_tokens = prompt[1:] + generated, ending when BOS (1) is produced.
TEST_F(DistStories, ReferenceGreedyUnderEveryPlan) {
  std::vector<Reference> refs;
  std::ifstream in(test::stories_dir() + "/reference_greedy.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    refs.push_back({j.at("prompt_tokens").get<std::vector<int32_t>>(), j.at("next_tokens").get<std::vector<int32_t>>(),
                    j.at("steps").get<int>()});
  }
  ASSERT_FALSE(refs.empty());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
  for (const Reference& r : refs) {
    prompts.push_back(r.prompt_tokens);
    max_tokens.push_back(r.steps - int(r.prompt_tokens.size()) + 1);
  }
  std::vector<std::string> plans = kPlans;
  plans.insert(plans.end(), kStoriesHelix.begin(), kStoriesHelix.end());
  for (const std::string& plan : plans) {
    SCOPED_TRACE(plan);
    const auto got = run_plan(plan, model_, greedy_requests(prompts, max_tokens, {1}), 64);
    ASSERT_EQ(got.size(), refs.size());
    for (size_t i = 0; i < refs.size(); ++i) {
      std::vector<int32_t> next(refs[i].prompt_tokens.begin() + 1, refs[i].prompt_tokens.end());
      const auto& out = got.at(int64_t(i) + 1);
      next.insert(next.end(), out.begin(), out.end());
      EXPECT_EQ(next, refs[i].next_tokens) << "reference " << i;
    }
  }
}

// ---- exactness: a synthetic GQA model (24 query heads, 6 KV heads: at tp=4 and tp=8 some KV
// heads live on two ranks) ----

class DistSynthGqa : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = test::gqa_24x6_path();
  }
  static std::string path_;
};
std::string DistSynthGqa::path_;

TEST_F(DistSynthGqa, EveryPlanMatchesSingleRankGreedy) {
  std::shared_ptr<Model> model = load_model(path_);
  ASSERT_EQ(model->config.n_heads, 24);
  ASSERT_EQ(model->config.n_kv_heads, 6);
  const auto prompts = random_prompts(8, 40, model->config.vocab_size, 23);
  const int n = 8;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(model, p, n));
  std::vector<std::string> plans = kPlans;
  plans.insert(plans.end(), kGqaHelix.begin(), kGqaHelix.end());
  for (const std::string& plan : plans) {
    SCOPED_TRACE(plan);
    expect_tokens(cat("plan ", plan), model, prompts, want,
                  run_plan(plan, model, greedy_requests(prompts, n)));
  }
}

// ---- numerics modes: every plan gives the single-rank tokens in fast and exact mode, for
// q8_0 and bf16 weights (kernels.h "Numerics"). Exactness class: summation order (TP shards sum
// their activation blocks' products separately; the blocks themselves are the single rank's,
// since a q8_0 shard starts on a block), so greedy tokens equal, differences explained by
// expect_tokens with the single-rank top-2 gap. ----

TEST(DistNumerics, EveryPlanMatchesSingleRankInBothModes) {
  for (DType dt : {DType::Q8_0, DType::BF16}) {
    SynthOptions so;
    so.shape = parse_synth_dims("d=128,layers=2,heads=4,kv_heads=2,head_dim=32,ffn=256,vocab=512,ctx=256");
    so.dtype = dt;
    so.seed = 3;
    so.threads = 1;
    const std::string path = test::temp_dir() + "/numerics-" + std::string(dtype_name(dt)) + ".gguf";
    write_synth_model(so, path);
    std::shared_ptr<Model> model = load_model(path);
    const auto prompts = random_prompts(6, 30, model->config.vocab_size, 31);
    for (kernels::Numerics num : {kernels::Numerics::fast, kernels::Numerics::exact}) {
      const kernels::Numerics before = kernels::default_numerics();
      kernels::set_default_numerics(num);  // the single-rank reference and the engines below
      std::vector<std::vector<int32_t>> want;
      for (const auto& p : prompts) want.push_back(alone(model, p, 8));
      for (const std::string plan : {"tp=2", "tp=4", "dp=2,tp=2", "sp=2,tp=2", "kvp=2,tpa=2"}) {
        SCOPED_TRACE(cat(dtype_name(dt), " ", kernels::numerics_name(num), " ", plan));
        expect_tokens(cat("plan ", plan), model, prompts, want, run_plan(plan, model, greedy_requests(prompts, 8)));
      }
      kernels::set_default_numerics(before);
    }
  }
}

// ---- plan sets: a policy switching plans of different KV placements (the KV migrates) ----

struct SetRun {
  std::map<int64_t, std::vector<int32_t>> out;
  std::vector<PlanStats> stats;
  int64_t preemptions = 0;
  std::vector<int64_t> owned;  // weight bytes copied, per rank
};

// `requests` under the plan set `plans` and `policy` on the local backend, every rank's KV store
// checked against the running plan's placement after every step.
SetRun run_set(const std::vector<std::string>& plans, const std::string& policy, const std::shared_ptr<Model>& model,
               std::vector<Request> requests, int budget, int64_t kv_bytes) {
  DistOptions o;
  o.comm = "local";
  o.plans = plans;
  o.policy = policy;
  o.ranks = Plan::parse(plans[0]).size();
  o.engine.max_tokens_per_step = budget;
  o.engine.max_num_seqs = 64;
  o.engine.kv_cache_bytes = kv_bytes;
  o.migration_buffer_bytes = 4096;  // several double-buffered rounds per switch
  o.comm_options.timeout_s = 30;
  o.load_model = [model](int) { return model; };
  test::HoldingsCheck holdings;
  holdings.install(o, o.ranks);
  SetRun r;
  r.owned.assign(size_t(o.ranks), -1);
  std::mutex mu;
  auto check = o.after_step;
  o.after_step = [&](int rank, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
    check(rank, e, b, rel);
    std::lock_guard<std::mutex> lock(mu);
    r.owned[size_t(rank)] = e.owned_weight_bytes();
  };
  run_distributed(o, [&](DistEngine& e) {
    for (const Sequence& s : e.run(requests)) {
      EXPECT_TRUE(s.finish_reason == FinishReason::kLength || s.finish_reason == FinishReason::kStop)
          << "request " << s.id() << ": " << finish_reason_name(s.finish_reason) << " " << s.finish_detail;
      r.out[s.id()] = s.output;
    }
    r.stats = e.plan_stats();
    r.preemptions = e.scheduler().num_preemptions();
    EXPECT_EQ(e.scheduler().num_used_blocks(), 0);
  });
  holdings.expect_clean(plans[0] + " " + policy);
  return r;
}

// Switched, and the bytes moved are what the placements imply (> 0 for every set here, whose
// plans' placements all differ).
void expect_switched(const std::string& label, const SetRun& r) {
  int64_t switches = 0, moved = 0, steps = 0, ran = 0;
  for (const PlanStats& p : r.stats) switches += p.switches, moved += p.kv_bytes_moved, steps += p.steps, ran += p.steps > 0;
  EXPECT_GE(ran, 2) << label;
  EXPECT_GE(switches, 1) << label;
  EXPECT_GT(moved, 0) << label;
  EXPECT_GT(steps, 0) << label;
}

// Every set, several cycle lengths (1: a switch every step, so prompts of 40 tokens under a
// 16-token budget switch mid-prefill), against single-rank greedy. Exactness class: summation
// order (TP all-reduce) between plans, pure data movement for the migration itself.
TEST_F(DistStories, PlanSetsUnderCycleMatchSingleRank) {
  const int n = 10;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts_) want.push_back(alone(model_, p, n));
  const std::vector<std::vector<std::string>> sets = {
      {"tp=4", "dp=2,tp=2", "dp=4"},
      {"tp=4", "pp=2,tp=2,layers=3+2", "sp=2,tp=2"},
      {"tp=2", "dp=2", "pp=2,layers=2+3"},
      {"tp=8", "dp=2,tp=4", "dp=8,weights=full"},
      {"tp=4", "kvp=2,tpa=2", "dp=4", "kvp=4,tpa=1"},  // Helix <-> TP / DP (issue 12)
  };
  for (const auto& set : sets)
    for (const std::string policy : {"cycle:1", "cycle:3", "cycle:7"}) {
      std::string label = policy;
      for (const std::string& p : set) label += " " + p;
      SCOPED_TRACE(label);
      const SetRun r = run_set(set, policy, model_, greedy_requests(prompts_, n), 16, int64_t(8) << 20);
      expect_tokens(label, model_, prompts_, want, r.out);
      expect_switched(label, r);
    }
}

// A cache so small that sequences are preempted (and recomputed) while the plans switch, including
// at a switch into a plan whose pools hold less.
TEST_F(DistStories, PlanSetsWithPreemption) {
  const int n = 24;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts_) want.push_back(alone(model_, p, n));
  // stories260K: a page (16 tokens of one KV head, K and V, head_dim 8) is 1 KiB; 100 pages per
  // rank hold 20 blocks of 16 tokens under tp=4 (1 head x 5 layers a block) and 5 per replica
  // under dp=4 (4 heads x 5 layers): 9 sequences of up to 64 tokens do not fit either.
  const SetRun r = run_set({"tp=4", "dp=4"}, "cycle:2", model_, greedy_requests(prompts_, n), 32, 100 * 1024);
  expect_tokens("preemption", model_, prompts_, want, r.out);
  expect_switched("preemption", r);
  EXPECT_GT(r.preemptions, 0);
}

// weights=full: the same tokens as resident shards, and no rank copies a byte of weights.
TEST_F(DistStories, WeightsFullCopiesNothing) {
  const int n = 8;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts_) want.push_back(alone(model_, p, n));
  const SetRun r = run_set({"tp=4,weights=full", "dp=2,tp=2,weights=full"}, "cycle:2", model_,
                           greedy_requests(prompts_, n), 16, int64_t(8) << 20);
  expect_tokens("weights=full", model_, prompts_, want, r.out);
  for (size_t i = 0; i < r.owned.size(); ++i) EXPECT_EQ(r.owned[i], 0) << "rank " << i;
  const SetRun res = run_set({"tp=4", "dp=2,tp=2"}, "cycle:2", model_, greedy_requests(prompts_, n), 16,
                             int64_t(8) << 20);
  for (size_t i = 0; i < res.owned.size(); ++i) EXPECT_GT(res.owned[i], 0) << "rank " << i;
}

TEST_F(DistSynthGqa, PlanSetsUnderCycleMatchSingleRank) {
  std::shared_ptr<Model> model = load_model(path_);
  const auto prompts = random_prompts(8, 40, model->config.vocab_size, 29);
  const int n = 8;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(model, p, n));
  // tp=4 over 6 KV heads holds some heads on two ranks (duplicates dropped or sent by one holder).
  const std::vector<std::vector<std::string>> sets = {
      {"tp=4", "dp=2,tp=2", "dp=4"},
      {"sp=2,tp=3", "tp=6", "dp=2,tp=3", "pp=2,tp=3"},
      {"sp=3,tp=2", "shift:sp=3,tp=2", "dp=3,tp=2"},
      {"tp=6", "kvp=2,tpa=3", "kvp=3,tpa=2", "dp=2,tp=3"},
  };
  for (const auto& set : sets)
    for (const std::string policy : {"cycle:1", "cycle:4"}) {
      std::string label = policy;
      for (const std::string& p : set) label += " " + p;
      SCOPED_TRACE(label);
      const SetRun r = run_set(set, policy, model, greedy_requests(prompts, n), 16, int64_t(8) << 20);
      expect_tokens(label, model, prompts, want, r.out);
      int64_t switches = 0;
      for (const PlanStats& p : r.stats) switches += p.switches;
      EXPECT_GT(switches, 1) << label;
    }
}

// ---- Helix at a long context (issue 12): thousands of tokens over many blocks, wrapping the
// round-robin many times ----

TEST(DistHelix, LongContextKvSplitAndTokens) {
  // A synthetic model with an 8K context and 4 KV heads (16 query heads).
  SynthOptions so;
  so.shape = parse_synth_dims("d=64,layers=2,heads=16,kv_heads=4,head_dim=8,ffn=128,vocab=512,ctx=8192");
  so.dtype = DType::F32;
  so.seed = 5;
  so.threads = 1;
  const std::string path = test::temp_dir() + "/long-ctx.gguf";
  write_synth_model(so, path);
  std::shared_ptr<Model> model = load_model(path);
  Rng rng(41);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {2500, 700, 9}) {
    std::vector<int32_t> p = {1};
    for (int i = 1; i < len; ++i) p.push_back(3 + int32_t(rng.below(509)));
    prompts.push_back(p);
  }
  const int n = 6;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(model, p, n));
  for (const std::string plan : {"kvp=4,tpa=1", "kvp=2,tpa=2", "kvp=2,tpa=4"}) {
    SCOPED_TRACE(plan);
    const Plan pl = Plan::parse(plan);
    DistOptions o;
    o.comm = "local";
    o.plan = plan;
    o.ranks = pl.size();
    o.engine.max_tokens_per_step = 512;
    o.engine.kv_cache_bytes = int64_t(64) << 20;
    o.comm_options.timeout_s = 60;
    o.load_model = [model](int) { return model; };
    test::HoldingsCheck holdings;
    holdings.install(o, o.ranks);
    // After every step: each rank's pages (from its store) against the cache's cells at that step.
    std::mutex mu;
    std::vector<std::map<int64_t, int64_t>> lens(size_t(o.ranks));   // per rank: sequence -> length
    std::map<int64_t, std::vector<int64_t>> pages;                    // step -> pages per rank
    std::map<int64_t, int64_t> cells;                                 // step -> blocks x layers x KV heads
    const ModelConfig& c = model->config;
    auto check = o.after_step;
    o.after_step = [&](int r, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
      check(r, e, b, rel);
      auto& len = lens[size_t(r)];
      for (RequestId id : rel) len.erase(id);
      for (const ScheduledSeq& q : b.seqs) len[q.seq_id] = q.start + q.num_tokens;
      int64_t blocks = 0;
      for (const auto& [id, l] : len) blocks += (l + 15) / 16;
      std::lock_guard<std::mutex> lock(mu);
      auto& v = pages[b.step_index];
      v.resize(size_t(o.ranks), -1);
      v[size_t(r)] = e.kv().used_pages();
      cells[b.step_index] = blocks * c.n_layers * c.n_kv_heads;
    };
    std::map<int64_t, std::vector<int32_t>> got;
    run_distributed(o, [&](DistEngine& e) {
      for (const Sequence& s : e.run(test::greedy_requests(prompts, n))) got[s.id()] = s.output;
    });
    holdings.expect_clean(plan);
    expect_tokens(plan, model, prompts, want, got);
    // Every KV cell once: at every step the ranks' pages add up to one copy of the cache, and each
    // rank holds its 1/KVP share within one Helix block per sequence (3 sequences).
    const int64_t per_block = int64_t(c.n_layers) * (c.n_kv_heads / pl.tp);
    ASSERT_FALSE(pages.empty());
    for (const auto& [step, v] : pages) {
      int64_t sum = 0;
      for (int64_t x : v) sum += x;
      EXPECT_EQ(sum, cells.at(step)) << "step " << step << ": a KV cell held twice or not at all";
      for (size_t r = 0; r < v.size(); ++r)
        EXPECT_LE(std::abs(double(v[r]) - double(cells.at(step)) / pl.size()), double(3 * per_block))
            << "step " << step << " rank " << r << ": " << v[r] << " pages";
    }
  }
}

// ---- errors and faults ----

using test::error_of;

DistOptions stories_options(const std::string& plan, int ranks) {
  DistOptions o;
  o.comm = "local";
  o.plan = plan;
  o.ranks = ranks;
  o.model_path = test::stories_dir() + "/stories260K.bin";
  o.engine.kv_cache_bytes = int64_t(4) << 20;
  o.comm_options.timeout_s = 20;
  return o;
}

TEST(DistErrors, LayoutAndRankCountRejectedUpFront) {
  LOOM_REQUIRE_SHARED();
  bool driver_ran = false;
  auto never = [&](DistEngine&) { driver_ran = true; };
  EXPECT_NE(error_of([&] { run_distributed(stories_options("tp=3", 3), never); })
                .find("tp=3 does not divide num_attention_heads=8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { run_distributed(stories_options("tp=4", 2), never); })
                .find("plan tp=4 needs 4 ranks, but the local world has 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { run_distributed(stories_options("kvp=2,tpa=8", 16), never); })
                .find("tpa=8 exceeds num_key_value_heads=4"),
            std::string::npos);
  // Parsed but not executed: one line naming the key, before any weight loads (SiDP runs on DP
  // replicas of one rank each).
  EXPECT_NE(error_of([&] { run_distributed(stories_options("dp=2,tp=2,weights=owner", 4), never); }).find("weights=owner"),
            std::string::npos);
  // SiDP bad input: more replicas than layers (stories260K has 5), fewer slots than the lookahead.
  EXPECT_NE(error_of([&] { run_distributed(stories_options("dp=6,weights=owner", 6), never); })
                .find("dp=6 exceeds num_hidden_layers=5"),
            std::string::npos);
  EXPECT_NE(error_of([&] { run_distributed(stories_options("dp=3,weights=owner,slots=1,lookahead=2", 3), never); })
                .find("slots=1 is fewer than lookahead=2"),
            std::string::npos);
  EXPECT_FALSE(driver_ran);
}

// One rank cannot read the model: every rank stops with an error naming it, well within the
// comm timeout (no hang), and the driver never runs.
TEST(DistErrors, UnreadableModelOnOneRankFailsAllRanks) {
  LOOM_REQUIRE_SHARED();
  DistOptions o = stories_options("tp=4", 4);
  const std::string good = o.model_path;
  o.load_model = [good](int rank) -> std::shared_ptr<const Model> {
    return load_model(rank == 2 ? good + ".missing" : good);
  };
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = error_of([&] { run_distributed(o, [](DistEngine&) { ADD_FAILURE() << "driver ran"; }); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(err.find("stories260K.bin.missing"), std::string::npos) << err;
  EXPECT_LT(s, 10.0) << "the other ranks must be released at once, not after the 20 s timeout";
}

// A follower fails in the middle of a run (after a few steps): rank 0's step fails through the
// communicator, and run_distributed reports the follower's own error well before the timeout.
TEST(DistErrors, FollowerFailingMidRunFailsTheJob) {
  LOOM_REQUIRE_SHARED();
  DistOptions o = stories_options("dp=2,tp=2", 4);
  o.follower_before_step = [](int rank, const StepBatch& b) {
    if (rank == 3 && b.step_index == 4) throw Error("rank 3 broke at step 4");
  };
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = error_of([&] {
    run_distributed(o, [](DistEngine& e) {
      std::vector<Request> rs;
      for (int i = 0; i < 4; ++i) {
        Request r;
        r.id = i;
        r.prompt = {1, 403, 407, 261};
        r.max_tokens = 20;
        r.sampling.temperature = 0;
        rs.push_back(r);
      }
      e.run(rs);
      ADD_FAILURE() << "run() returned although a rank failed";
    });
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(err.find("rank 3 broke at step 4"), std::string::npos) << err;
  EXPECT_LT(s, 10.0);
}

// Ranks holding different models disagree on the fingerprint: a clear error.
TEST(DistErrors, RanksDisagreeingOnTheModel) {
  LOOM_REQUIRE_SHARED();
  SynthOptions so;
  so.shape = synth_shape("tiny");
  so.dtype = DType::F32;
  const std::string other = test::temp_dir() + "/tiny.gguf";
  write_synth_model(so, other);
  DistOptions o = stories_options("tp=2", 2);
  const std::string good = o.model_path;
  o.load_model = [good, other](int rank) -> std::shared_ptr<const Model> { return load_model(rank == 1 ? other : good); };
  const std::string err = error_of([&] { run_distributed(o, [](DistEngine&) {}); });
  EXPECT_NE(err.find("ranks disagree on the model and engine config"), std::string::npos) << err;
}

// The driver (rank 0) fails mid-run: the followers are released with an error, and the driver's
// own error is what run_distributed reports.
TEST(DistErrors, DriverFailureReleasesTheOtherRanks) {
  LOOM_REQUIRE_SHARED();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = error_of([&] {
    run_distributed(stories_options("dp=2,tp=2", 4), [](DistEngine& e) {
      Request r;
      r.id = 1;
      r.prompt = {1, 403, 407};
      r.max_tokens = 3;
      r.sampling.temperature = 0;
      e.run({r});
      throw Error("driver gave up");
    });
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(err, "driver gave up");
  EXPECT_LT(s, 10.0);
  // A token outside the vocabulary is refused before anything is sent to the other ranks.
  const std::string bad = error_of([&] {
    run_distributed(stories_options("tp=2", 2), [](DistEngine& e) {
      Request r;
      r.id = 5;
      r.prompt = {1, 512};
      e.run({r});
    });
  });
  EXPECT_NE(bad.find("request 5: token id 512 is outside the vocabulary [0, 512)"), std::string::npos) << bad;
}

}  // namespace
}  // namespace loom
