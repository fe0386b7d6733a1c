// Seesaw (../shared/papers/004, issue 13) on the stage engine: pipeline parallelism executed
// (embedding on the first stage, classifier on the last, activations sent stage to stage, P
// micro-batches in flight), each stage's KV holding only its layers, and the phase plans (prefill
// under c_p, decode under c_d).
//
// Exactness classes: PP alone moves activations between ranks and splits a step's sequences into
// micro-batches (pure data movement / rescheduling: every row's arithmetic is the single rank's);
// tp=T,pp=P adds the TP all-reduce (summation order). The criterion is the single-rank greedy
// tokens; a difference is explained with the single-rank top-2 logit gap (single_rank.h).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/dist_engine.h"
#include "engine/policy.h"
#include "engine/rank_forward.h"
#include "kv/kv_tier.h"
#include "model/loader.h"
#include "model/synth.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

using test::alone;
using test::expect_tokens;
using test::greedy_requests;
using test::random_prompts;

using test::error_of;

// A synthetic model of 4 layers (8 query heads, 2 KV heads, f32): pp=2, pp=4 and tp=2,pp=2 split
// it evenly. Written once per test process.
const std::string& four_layer_path() {
  static const std::string path = [] {
    SynthOptions o;
    o.shape = parse_synth_dims("d=64,layers=4,heads=8,kv_heads=2,head_dim=8,ffn=128,vocab=512,ctx=1024");
    o.dtype = DType::F32;
    o.seed = 13;
    o.threads = 1;
    const std::string p = test::temp_dir() + "/seesaw-4layer.gguf";
    write_synth_model(o, p);
    return p;
  }();
  return path;
}

struct Run {
  std::map<int64_t, std::vector<int32_t>> out;
  std::vector<PlanStats> stats;
  std::string stage_error;  // first stage whose KV held a layer outside its range
  int64_t stage_checks = 0;
};

// `requests` under `plans` / `policy` on the local backend; every rank's KV store is checked after
// every step against the running plan's placement (HoldingsCheck) and, independently, against the
// rank's layer range: a pipeline stage holds pages of its own layers only, and of every one of them.
Run run_plans(const std::vector<std::string>& plans, const std::string& policy, const std::shared_ptr<Model>& model,
              std::vector<Request> requests, int budget = 16, int64_t kv_bytes = int64_t(8) << 20,
              const std::function<void(DistOptions&)>& tweak = nullptr,
              const std::function<void(DistEngine&)>& inspect = nullptr) {
  DistOptions o;
  o.comm = "local";
  o.plans = plans;
  o.policy = policy;
  o.ranks = Plan::parse(plans[0]).size();
  o.engine.max_tokens_per_step = budget;
  o.engine.max_num_seqs = 64;
  o.engine.kv_cache_bytes = kv_bytes;
  o.migration_buffer_bytes = 4096;
  o.comm_options.timeout_s = 30;
  o.load_model = [model](int) { return model; };
  test::HoldingsCheck holdings;
  holdings.install(o, o.ranks);
  if (tweak) tweak(o);  // may wrap after_step (then it calls the holdings check first)
  Run r;
  std::mutex mu;
  auto check = o.after_step;
  o.after_step = [&](int rank, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
    check(rank, e, b, rel);
    const Range layers = e.forward_of(e.current()).layout().layers;
    const KvStore& kv = e.kv();
    std::string bad;
    for (int64_t seq : kv.sequences())
      for (int l = 0; l < kv.n_layers() && bad.empty(); ++l) {
        bool any = false;
        for (int h = 0; h < kv.n_kv_heads(); ++h) any = any || !kv.table(seq, l, h).empty();
        if (any != layers.contains(l))
          bad = cat("rank ", rank, " (layers ", to_string(layers), ") ", any ? "holds" : "lacks", " KV of layer ", l,
                    " of sequence ", seq, " after step ", b.step_index);
      }
    std::lock_guard<std::mutex> lock(mu);
    ++r.stage_checks;
    if (r.stage_error.empty()) r.stage_error = bad;
  };
  run_distributed(o, [&](DistEngine& e) {
    for (const Sequence& s : e.run(requests)) {
      EXPECT_TRUE(s.finish_reason == FinishReason::kLength || s.finish_reason == FinishReason::kStop)
          << "request " << s.id() << ": " << finish_reason_name(s.finish_reason) << " " << s.finish_detail;
      EXPECT_EQ(r.out.count(s.id()), 0u) << "request " << s.id() << " finished twice";
      r.out[s.id()] = s.output;
    }
    r.stats = e.plan_stats();
    EXPECT_EQ(e.scheduler().num_used_blocks(), 0);
    if (inspect) inspect(e);
  });
  holdings.expect_clean(plans[0] + " " + policy);
  EXPECT_GT(r.stage_checks, 0);
  EXPECT_EQ(r.stage_error, "");
  return r;
}

// ---- PP executed: even stages (4-layer synthetic model) ----

TEST(SeesawPipeline, EvenStagesMatchSingleRankGreedy) {
  std::shared_ptr<Model> model = load_model(four_layer_path());
  ASSERT_EQ(model->config.n_layers, 4);
  const auto prompts = random_prompts(9, 40, model->config.vocab_size, 5);
  const int n = 10;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(model, p, n));
  for (const std::string plan : {"pp=2", "pp=4", "tp=2,pp=2", "dp=2,pp=2"}) {
    SCOPED_TRACE(plan);
    expect_tokens(plan, model, prompts, want, run_plans({plan}, "fixed", model, greedy_requests(prompts, n)).out);
  }
}

// ---- uneven stages (stories260K: 5 layers) ----

TEST(SeesawPipeline, UnevenStagesMatchSingleRankGreedy) {
  LOOM_REQUIRE_SHARED();
  std::shared_ptr<Model> model = load_model(test::stories_dir() + "/stories260K.bin");
  const auto prompts = random_prompts(9, 40, 512, 17);
  const int n = 12;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(model, p, n));
  for (const std::string plan : {"pp=2,layers=1+4", "pp=4,layers=2+1+1+1", "tp=2,pp=2,layers=3+2", "pp=5"}) {
    SCOPED_TRACE(plan);
    expect_tokens(plan, model, prompts, want, run_plans({plan}, "fixed", model, greedy_requests(prompts, n)).out);
  }
}

// ---- bad input ----

TEST(SeesawErrors, MoreStagesThanLayers) {
  bool ran = false;
  DistOptions o;
  o.comm = "local";
  o.plan = "pp=5";
  o.ranks = 5;
  o.model_path = four_layer_path();
  o.engine.kv_cache_bytes = int64_t(1) << 20;
  o.comm_options.timeout_s = 20;
  const std::string e = error_of([&] { run_distributed(o, [&](DistEngine&) { ran = true; }); });
  EXPECT_NE(e.find("pp=5 exceeds num_hidden_layers=4"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// The micro-batches of a pipelined step: contiguous, non-empty, covering every sequence once,
// min(P, n) of them, about 1/P of the tokens each.
TEST(SeesawPipeline, MicroBatchesCutTheSequences) {
  EXPECT_TRUE(pipeline_micro_batches({}, 4).empty());
  const std::vector<int64_t> ones(10, 1);
  const auto four = pipeline_micro_batches(ones, 4);
  ASSERT_EQ(four.size(), 4u);
  for (const Range& r : four) EXPECT_TRUE(r.size() == 2 || r.size() == 3) << to_string(r);
  EXPECT_EQ(pipeline_micro_batches({7, 1}, 4).size(), 2u);
  for (int p = 1; p <= 6; ++p) {
    const std::vector<int64_t> toks = {40, 1, 1, 1, 17, 1, 3, 1, 1, 29};
    const auto parts = pipeline_micro_batches(toks, p);
    ASSERT_EQ(int(parts.size()), std::min<int>(p, int(toks.size()))) << p;
    int64_t next = 0;
    for (const Range& r : parts) {
      EXPECT_EQ(r.begin, next) << p;
      EXPECT_GT(r.size(), 0) << p;
      next = r.end;
    }
    EXPECT_EQ(next, int64_t(toks.size())) << p;
  }
}

}  // namespace
}  // namespace loom

// ---- phase plans: prefill under c_p, decode under c_d, the KV through the CPU tier ----

namespace loom {
namespace {

struct PhaseRun {
  Run run;
  int64_t phase_switches = 0, swapped_out = 0, swapped_in = 0, preemptions = 0;
  int64_t plan_switches = 0;
};

DistOptions& phase_options(DistOptions& o, const ModelConfig& c, int64_t tier_tokens, int max_model_len = 64) {
  o.engine.max_model_len = max_model_len;
  o.engine.cpu_kv_bytes = tier_tokens * tier_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_dim);
  return o;
}

// `plans` (c_p, c_d) under `policy` with a tier of `tier_tokens` tokens of the model's KV.
PhaseRun run_phases(const std::vector<std::string>& plans, const std::string& policy, const std::shared_ptr<Model>& model,
                    std::vector<Request> requests, int64_t tier_tokens, int budget = 16, int max_seqs = 64,
                    const std::function<void(DistOptions&)>& more = nullptr, int max_model_len = 64) {
  PhaseRun r;
  r.run = run_plans(
      plans, policy, model, std::move(requests), budget, int64_t(8) << 20,
      [&](DistOptions& o) {
        phase_options(o, model->config, tier_tokens, max_model_len);
        o.engine.max_num_seqs = max_seqs;
        if (more) more(o);
      },
      [&](DistEngine& e) {
        const Scheduler& s = e.scheduler();
        r.phase_switches = s.phase_switches();
        r.swapped_out = s.num_swapped_out();
        r.swapped_in = s.num_swapped_in();
        r.preemptions = s.num_preemptions();
        EXPECT_EQ(s.num_swapped(), 0) << "sequences left in the tier";
      });
  for (const PlanStats& p : r.run.stats) r.plan_switches += p.switches;
  return r;
}

// A tier of 52 tokens holds one or two of these sequences (up to 51 tokens each): the engine
// fills and drains it many times. Same greedy tokens as the single rank (exactness: pp=2 moves
// activations; tp=2 changes the summation order of the all-reduce), every request once, every
// swapped-out sequence swapped back in, and the transitions counted.
TEST(SeesawPhases, TierCyclesMatchSingleRankGreedy) {
  std::shared_ptr<Model> model = load_model(four_layer_path());
  const auto prompts = random_prompts(9, 40, model->config.vocab_size, 29);
  const int n = 10;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(model, p, n));
  for (const std::vector<std::string>& plans :
       std::vector<std::vector<std::string>>{{"pp=2", "tp=2"}, {"pp=2,weights=full", "tp=2,weights=full"},
                                             {"pp=4", "tp=2,pp=2"}, {"tp=2", "pp=2"}}) {
    for (const std::string policy : {"seesaw", "prefill-first", "decode-first"}) {
      const std::string label = cat(plans[0], " -> ", plans[1], " ", policy);
      SCOPED_TRACE(label);
      const PhaseRun r = run_phases(plans, policy, model, greedy_requests(prompts, n), 52, 16, 64, nullptr, 52);
      expect_tokens(label, model, prompts, want, r.run.out);
      // >= 3 full/empty cycles (prefill, decode) x 3: at least 5 transitions.
      EXPECT_GE(r.phase_switches, 5) << label;
      EXPECT_GE(r.plan_switches, 5) << label;
      EXPECT_EQ(r.swapped_out, r.swapped_in) << label;
      EXPECT_GE(r.swapped_out, int64_t(prompts.size())) << label;
      // Every step ran one plan: prefill steps the first, decode steps the second.
      ASSERT_EQ(r.run.stats.size(), 2u);
      EXPECT_GT(r.run.stats[0].steps, 0);
      EXPECT_GT(r.run.stats[1].steps, 0);
    }
  }
}

// A device KV cache so small that decodes preempt (recompute) while sequences come and go through
// the tier: still the single-rank tokens, none lost or duplicated.
TEST(SeesawPhases, PreemptionWithTheTier) {
  std::shared_ptr<Model> model = load_model(four_layer_path());
  const auto prompts = random_prompts(9, 40, model->config.vocab_size, 31);
  const int n = 14;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(model, p, n));
  // A page (16 tokens of one KV head, K and V, head_dim 8) is 1 KiB; 40 pages per rank hold 10
  // blocks under pp=2 (2 layers x 2 KV heads a block) and under tp=2 (4 layers x 1 KV head): 9
  // sequences of up to 55 tokens (4 blocks) do not fit either.
  const ModelConfig& c = model->config;
  const int64_t page = 2 * 16 * int64_t(c.head_dim) * 4;
  PhaseRun r;
  r.run = run_plans(
      {"pp=2", "tp=2"}, "seesaw", model, greedy_requests(prompts, n), 16, 40 * page,
      [&](DistOptions& o) { phase_options(o, c, 400); },
      [&](DistEngine& e) {
        r.preemptions = e.scheduler().num_preemptions();
        r.swapped_out = e.scheduler().num_swapped_out();
        r.swapped_in = e.scheduler().num_swapped_in();
      });
  expect_tokens("preemption", model, prompts, want, r.run.out);
  EXPECT_GT(r.swapped_out, 0);
  EXPECT_GT(r.preemptions, 0);
}

// The KV the ranks write into the tier after a pipelined prefill is the single-rank KV, bit for
// bit (pure data movement: each stage computes its layers' K/V on the same rows as the single rank,
// one sequence of more than 24 tokens per prefill step, so every matmul takes the same path).
TEST(SeesawTier, KvAssembledAfterPipelinePrefillIsTheSingleRankKv) {
  std::shared_ptr<Model> model = load_model(four_layer_path());
  const ModelConfig& c = model->config;
  std::vector<std::vector<int32_t>> prompts;
  Rng rng(41);
  for (int i = 0; i < 9; ++i) {
    std::vector<int32_t> p = {1};
    const int len = 25 + int(rng.below(20));
    for (int j = 0; j < len; ++j) p.push_back(3 + int32_t(rng.below(uint64_t(c.vocab_size - 3))));
    prompts.push_back(p);
  }
  // The single rank's K/V of every prompt: one forward pass over the whole prompt.
  std::vector<std::vector<float>> want_k, want_v;  // [prompt][layer][head][token][dh]
  for (const auto& p : prompts) {
    ThreadPool pool(1);
    SingleRankModel one(model, &pool, int64_t(p.size()));
    ForwardBatch fb;
    fb.tokens = p;
    fb.seqs.push_back(ForwardSeq{0, 0, int(p.size()), true});
    std::vector<float> logits;
    one.forward(fb, logits);
    std::vector<float> k, v;
    const KvStore& kv = one.kv();
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h)
        for (int64_t t = 0; t < int64_t(p.size()); ++t) {
          const int32_t pg = kv.page(0, l, h, t / kv.block_size());
          const float* kr = kv.k(pg) + (t % kv.block_size()) * c.head_dim;
          const float* vr = kv.v(pg) + (t % kv.block_size()) * c.head_dim;
          k.insert(k.end(), kr, kr + c.head_dim);
          v.insert(v.end(), vr, vr + c.head_dim);
        }
    want_k.push_back(k);
    want_v.push_back(v);
  }
  for (const std::string cp : {"pp=2", "pp=4", "pp=2,layers=1+3"}) {
    SCOPED_TRACE(cp);
    // Rank 0 compares a sequence once it has been in the tier for a whole step (then every
    // rank has finished the step that swapped it out: rank 0 waits for the last stage's tokens).
    std::set<int64_t> before, compared;
    std::string bad;
    auto hook = [&](DistOptions& o) {
      auto check = o.after_step;
      o.after_step = [&, check](int rank, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
        check(rank, e, b, rel);
        if (rank != 0) return;
        KvTier* tier = e.tier();
        ASSERT_NE(tier, nullptr);
        std::set<int64_t> now;
        for (size_t i = 0; i < prompts.size(); ++i) {
          const int64_t id = int64_t(i) + 1;
          if (!tier->holds(id)) continue;
          now.insert(id);
          if (!before.count(id) || compared.count(id)) continue;
          compared.insert(id);
          const int64_t T = int64_t(prompts[i].size());
          EXPECT_EQ(tier->tokens(id), T);
          for (int l = 0; l < c.n_layers; ++l)
            for (int h = 0; h < c.n_kv_heads; ++h) {
              const size_t at = size_t((int64_t(l) * c.n_kv_heads + h) * T * c.head_dim);
              const size_t bytes = size_t(T * c.head_dim) * sizeof(float);
              if (std::memcmp(tier->k(id, l, h), want_k[i].data() + at, bytes) != 0 ||
                  std::memcmp(tier->v(id, l, h), want_v[i].data() + at, bytes) != 0)
                if (bad.empty()) bad = cat("sequence ", id, " layer ", l, " kv head ", h, " differs");
            }
        }
        before = now;
      };
    };
    const PhaseRun r = run_phases({cp, "tp=2" + std::string(cp.rfind("pp=4", 0) == 0 ? ",pp=2" : "")}, "seesaw", model,
                                  greedy_requests(prompts, 4), 150, 64, 1, hook);
    EXPECT_EQ(bad, "");
    // A sequence swapped out and in within one step is not seen (see above); with 3 or more
    // sequences per fill of the tier (150 tokens, prompts of 26 to 45) most are.
    EXPECT_GE(compared.size(), prompts.size() - 2) << "sequences compared in the tier";
  }
}

// ---- bad input ----

TEST(SeesawErrors, TierSmallerThanOneSequence) {
  std::shared_ptr<Model> model = load_model(four_layer_path());
  const ModelConfig& c = model->config;
  DistOptions o;
  o.comm = "local";
  o.plans = {"pp=2", "tp=2"};
  o.policy = "seesaw";
  o.ranks = 2;
  o.load_model = [model](int) { return model; };
  o.engine.kv_cache_bytes = int64_t(1) << 20;
  o.comm_options.timeout_s = 20;
  phase_options(o, c, 63);  // max_model_len 64
  bool ran = false;
  std::string e = error_of([&] { run_distributed(o, [&](DistEngine&) { ran = true; }); });
  EXPECT_NE(e.find("less than one sequence of max_model_len 64 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("--cpu-kv-bytes 32256"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  o.engine.cpu_kv_bytes = 0;
  e = error_of([&] { run_distributed(o, [&](DistEngine&) { ran = true; }); });
  EXPECT_NE(e.find("--policy seesaw needs a CPU KV tier: give --cpu-kv-bytes"), std::string::npos) << e;
  EXPECT_FALSE(ran);
}

TEST(SeesawErrors, PlansOfDifferentDpOrCount) {
  auto plans_error = [](const std::vector<std::string>& plans) {
    return error_of([&] { policy_plans("seesaw", PlanSet::parse(plans)); });
  };
  std::string e = plans_error({"dp=2,pp=2", "tp=4"});
  EXPECT_NE(e.find("the prefill plan dp=2,pp=2 has dp=2, the decode plan tp=4 dp=1"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  e = plans_error({"pp=2"});
  EXPECT_NE(e.find("needs two plans"), std::string::npos) << e;
  // Through the engine: every rank fails with the line before anything loads.
  DistOptions o;
  o.comm = "local";
  o.plans = {"dp=2,pp=2", "tp=4"};
  o.policy = "seesaw";
  o.ranks = 4;
  o.model_path = four_layer_path();
  o.engine.cpu_kv_bytes = int64_t(1) << 20;
  o.comm_options.timeout_s = 20;
  e = error_of([&] { run_distributed(o, [&](DistEngine&) {}); });
  EXPECT_NE(e.find("Seesaw changes only TP and PP, the DP degree must be equal"), std::string::npos) << e;
}

}  // namespace
}  // namespace loom
