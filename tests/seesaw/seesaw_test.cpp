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

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/weight_tiles.h"
#include "engine/dist_engine.h"
#include "engine/policy.h"
#include "engine/rank_forward.h"
#include "kv/kv_tier.h"
#include "model/loader.h"
#include "model/synth.h"
#include "four_layer.h"
#include "resident_check.h"
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
    const std::string p = test::temp_dir() + "/seesaw-4layer.gguf";
    test::write_four_layer_model(p);
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
    const KvStore& kv = e.kv();
    std::string bad;
    const std::vector<int64_t> parked = e.parked_swap_outs();  // copied to the tier: the old stage's pages
    for (int64_t seq : kv.sequences()) {
      // The layers of the plan whose placement holds it (a decoding sequence stays in c_d's through
      // a prefill phase under c_p: Seesaw's resident sequences).
      const int home = holdings.ranks[size_t(rank)].home(seq);
      const Range layers = e.forward_of(home >= 0 ? home : e.current()).layout().layers;
      for (int l = 0; l < kv.n_layers() && bad.empty() && std::count(parked.begin(), parked.end(), seq) == 0; ++l) {
        bool any = false;
        for (int h = 0; h < kv.n_kv_heads(); ++h) any = any || !kv.table(seq, l, h).empty();
        if (any != layers.contains(l))
          bad = cat("rank ", rank, " (layers ", to_string(layers), ") ", any ? "holds" : "lacks", " KV of layer ", l,
                    " of sequence ", seq, " after step ", b.step_index);
      }
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

// Resident sequences (004 4.2: "prefill again, with running sequences resident"): a sequence
// decoding when the scheduler turns to prefill keeps its KV where c_d put it. Checked on every rank
// from the store itself, not from a counter: after each step, every sequence that decoded under c_d
// and is still live holds the same pages for the tokens it had (same page ids, same K and V bytes)
// and exactly c_d's cells of them (check_holdings against c_d's placement), through every prefill
// step under c_p; c_p's steps and switches list no resident sequence to migrate or swap out (the
// tier's traffic is the newly prefilled sequences'). pp=2 and tp=2 place a sequence's cells
// differently on every rank, so a migration either way would change the holdings or the pages.
// And the greedy tokens equal the single rank's, every request finishing once.
TEST(SeesawResident, DecodingSequencesStayInTheDecodePlacementThroughPrefill) {
  std::shared_ptr<Model> model = load_model(four_layer_path());
  const auto prompts = random_prompts(12, 40, model->config.vocab_size, 43);
  // Output lengths that differ, so that at each turn to prefill some sequences are mid-decode.
  std::vector<int> n;
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < prompts.size(); ++i) {
    n.push_back(6 + 4 * int(i % 3));
    want.push_back(alone(model, prompts[i], n.back()));
  }
  for (const std::vector<std::string>& plans :
       std::vector<std::vector<std::string>>{{"pp=2", "tp=2"}, {"pp=4", "tp=2,pp=2"}}) {
    const std::string label = cat(plans[0], " -> ", plans[1]);
    SCOPED_TRACE(label);
    std::mutex mu;
    std::vector<test::ResidentCheck> ranks(4);  // one per rank (each touched by its rank's thread)
    std::string error;
    std::set<int64_t> prefilled;  // rank 0: every sequence a c_p step ran
    const PhaseRun r = run_phases(
        plans, "seesaw", model, greedy_requests(prompts, n), 64, 16, 64,
        [&](DistOptions& o) {
          auto check = o.after_step;
          o.after_step = [&, check](int rank, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
            check(rank, e, b, rel);
            const std::string bad = ranks[size_t(rank)].after_step(e, b, rel);
            std::lock_guard<std::mutex> lock(mu);
            if (error.empty()) error = bad;
            if (rank == 0 && b.plan_id == 0)
              for (const ScheduledSeq& s : b.seqs) prefilled.insert(s.seq_id);
          };
        },
        64);
    int64_t resident_checks = 0;
    for (const test::ResidentCheck& c : ranks) resident_checks += c.checks;
    const int64_t turns_with_residents = ranks[0].turns, resumed = ranks[0].resumed;
    expect_tokens(label, model, prompts, want, r.run.out);
    EXPECT_EQ(r.run.out.size(), prompts.size()) << "a request lost";
    EXPECT_EQ(error, "");
    EXPECT_EQ(r.swapped_out, r.swapped_in);
    EXPECT_EQ(prefilled.size(), prompts.size()) << "every request prefilled under c_p, once each or recomputed";
    // Several turns to prefill with sequences mid-decode, and they decode again after each phase.
    EXPECT_GE(turns_with_residents, 3);
    EXPECT_GE(r.phase_switches, 6);
    EXPECT_GT(resident_checks, 0);
    EXPECT_GT(resumed, 0);
    // No switch moved KV between the ranks' stores.
    for (const PlanStats& p : r.run.stats) EXPECT_EQ(p.kv_bytes_moved, 0) << p.name;
  }
}

// Two placements at once in each store: a stage of pp=2,layers=3+1 holds 6 pages of each block
// (3 layers x 2 KV heads), a tp=2 rank 4 (4 layers x 1 head), so with 40 pages a rank holds 6
// blocks under c_p, 10 under c_d. Resident decoders (c_d pages) and new prefills (c_p pages) share
// the store; the scheduler charges a c_p block 10/6 of a c_d block, so no rank runs out of pages
// (a KvStore out of pages is a LOOM_CHECK failure), and the tokens are the single rank's.
TEST(SeesawResident, UnevenStagesShareTheStoreWithResidentDecoders) {
  std::shared_ptr<Model> model = load_model(four_layer_path());
  const auto prompts = random_prompts(9, 40, model->config.vocab_size, 47);
  std::vector<int> n;
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < prompts.size(); ++i) {
    n.push_back(6 + 5 * int(i % 3));
    want.push_back(alone(model, prompts[i], n.back()));
  }
  const ModelConfig& c = model->config;
  const int64_t page = 2 * 16 * int64_t(c.head_dim) * 4;
  int64_t peak_used = 0, pages = 0;
  std::mutex mu;
  PhaseRun r;
  r.run = run_plans(
      {"pp=2,layers=3+1", "tp=2"}, "seesaw", model, greedy_requests(prompts, n), 16, 40 * page,
      [&](DistOptions& o) {
        phase_options(o, c, 100);
        auto check = o.after_step;
        o.after_step = [&, check](int rank, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
          check(rank, e, b, rel);
          std::lock_guard<std::mutex> lock(mu);
          peak_used = std::max(peak_used, e.kv().used_pages());
          pages = e.kv().num_pages();
        };
      },
      [&](DistEngine& e) {
        r.phase_switches = e.scheduler().phase_switches();
        r.swapped_out = e.scheduler().num_swapped_out();
      });
  expect_tokens("uneven", model, prompts, want, r.run.out);
  EXPECT_EQ(r.run.out.size(), prompts.size());
  EXPECT_GE(r.phase_switches, 3);
  EXPECT_GT(r.swapped_out, 0);
  EXPECT_LE(peak_used, pages);
  EXPECT_GT(peak_used, pages / 2) << "the store was never under pressure: the test shows nothing";
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
  // With slow copies too (a delay before each copy task): the swap-outs then run while later
  // prefill steps compute, and the bits must not change.
  for (const int delay_ms : {0, 3})
    for (const std::string cp : {"pp=2", "pp=4", "pp=2,layers=1+3"}) {
      const std::string label = cat(cp, " copy delay ", delay_ms, " ms");
      SCOPED_TRACE(label);
      // Rank 0 compares a sequence once its swap-out is complete on every rank (RankEngine::tier_ready:
      // the completion came back in a step's gather); it stays in the tier at least until its
      // swap-in is complete everywhere, a later step, so every sequence is seen.
      std::set<int64_t> compared;
      std::string bad;
      auto hook = [&](DistOptions& o) {
        if (delay_ms > 0)
          o.rank_options = [delay_ms](int, RankEngineOptions& ro) {
            ro.tier_copy_hook = [delay_ms] { std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms)); };
          };
        auto check = o.after_step;
        o.after_step = [&, check](int rank, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
          check(rank, e, b, rel);
          if (rank != 0) return;
          KvTier* tier = e.tier();
          ASSERT_NE(tier, nullptr);
          for (size_t i = 0; i < prompts.size(); ++i) {
            const int64_t id = int64_t(i) + 1;
            if (!e.tier_ready(id) || compared.count(id)) continue;
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
        };
      };
      const PhaseRun r = run_phases({cp, "tp=2" + std::string(cp.rfind("pp=4", 0) == 0 ? ",pp=2" : "")}, "seesaw",
                                    model, greedy_requests(prompts, 4), 150, 64, 1, hook);
      EXPECT_EQ(bad, "");
      EXPECT_EQ(compared.size(), prompts.size()) << "sequences compared in the tier";
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

// ---- asynchronous swaps (§5.2, W10/W11) and the lazy re-shard of weights ----

namespace loom {
namespace {

// Copies slowed by a delay before each copy task (on the ranks' swap-out and prefetcher threads),
// so that they stay in flight across steps: a swap-out runs while the next prefill step computes,
// a prefetch while other sequences decode. The tier holds 3 to 5 of these sequences and a step 2,
// so decode onboards them as slots free up. Same greedy tokens as the single rank (pp=2 / pp=4 move
// activations; tp=2 changes the all-reduce's summation order), every swapped-out sequence swapped
// back in, and no sequence decoded before its swap-in completed on the rank (the scheduler onboards
// only sequences every rank reported ready).
TEST(SeesawAsync, CopiesInFlightOverlapComputeAndStayExact) {
  std::shared_ptr<Model> model = load_model(four_layer_path());
  const auto prompts = random_prompts(9, 40, model->config.vocab_size, 37);
  // Different output lengths, so that the two sequences of a decode batch finish at different steps
  // and the freed slot's prefetch runs beside the other's decode.
  std::vector<int> n;
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < prompts.size(); ++i) {
    n.push_back(5 + 3 * int(i % 4));
    want.push_back(alone(model, prompts[i], n.back()));
  }
  for (const std::vector<std::string>& plans :
       std::vector<std::vector<std::string>>{{"pp=2", "tp=2"}, {"pp=4", "tp=2,pp=2"}}) {
    const std::string label = cat(plans[0], " -> ", plans[1]);
    SCOPED_TRACE(label);
    std::mutex mu;
    int64_t out_during_prefill = 0, in_during_decode = 0, unready = 0, await_steps = 0;
    const PhaseRun r = run_phases(
        plans, "seesaw", model, greedy_requests(prompts, n), 150, 16, 2,
        [&](DistOptions& o) {
          o.rank_options = [](int, RankEngineOptions& ro) {
            ro.tier_copy_hook = [] { std::this_thread::sleep_for(std::chrono::milliseconds(4)); };
          };
          auto check = o.after_step;
          o.after_step = [&, check](int rank, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
            check(rank, e, b, rel);
            const SwapOverlap& ov = e.last_overlap();  // copies still running when the forward started
            std::lock_guard<std::mutex> lock(mu);
            if (ov.out > 0 && b.num_prefill_tokens > 0) ++out_during_prefill;
            if (ov.in > 0 && b.num_decode_tokens > 0) ++in_during_decode;
            if (rank == 0 && b.seqs.empty()) ++await_steps;
            unready = std::max(unready, e.tier_stats().unready_decodes);
          };
        },
        64);
    expect_tokens(label, model, prompts, want, r.run.out);
    EXPECT_EQ(r.swapped_out, r.swapped_in);
    EXPECT_GE(r.swapped_out, int64_t(prompts.size()));
    EXPECT_GE(r.phase_switches, 3);
    EXPECT_GT(out_during_prefill, 0) << "no prefill step ran while a swap-out was in flight";
    EXPECT_GT(in_during_decode, 0) << "no decode step ran while a prefetch was in flight";
    EXPECT_EQ(unready, 0) << "a step decoded a sequence whose swap-in was not complete";
    EXPECT_GT(await_steps, 0) << "with 4 ms copies some step has nothing to run but copies to wait for";
  }
}

// Lazy re-shard: a rank holds the weight copy of the current plan only; a switch builds the
// (layer, matrix) shards the rank does not hold identically and frees the ones the new plan does not
// use. Checked on every rank after every step against the plans' layouts (what the rank holds), and
// the tokens against the single rank.
TEST(SeesawWeights, LazyReshardBuildsOnlyTheMissingShardsAndHoldsOneCopy) {
  if (!weight_tiles_enabled()) GTEST_SKIP() << "LOOM_WEIGHT_TILES=0: resident plans compute on the mapped rows";
  std::shared_ptr<Model> model = load_model(four_layer_path());
  const auto prompts = random_prompts(9, 40, model->config.vocab_size, 43);
  const int n = 8;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(model, p, n));
  struct Case {
    std::vector<std::string> plans;
    bool share_common_layers;  // the plans split a layer the same way (equal TP): its shards are kept
    bool full;                 // weights=full: nothing is ever built
  };
  for (const Case& k : std::vector<Case>{{{"pp=2", "tp=2"}, false, false},
                                        {{"tp=2,pp=2", "tp=2,pp=2,layers=1+3"}, true, false},
                                        {{"pp=2,weights=full", "tp=2,weights=full"}, false, true}}) {
    const std::string label = cat(k.plans[0], " -> ", k.plans[1]);
    SCOPED_TRACE(label);
    std::mutex mu;
    std::string bad;
    int64_t switches = 0, built_total = 0;
    std::map<int, int> plan_of;  // rank -> plan of its previous step
    auto note = [&](const std::string& what) {
      if (bad.empty()) bad = what;
    };
    const PhaseRun r = run_phases(
        k.plans, "seesaw", model, greedy_requests(prompts, n), 52, 16, 64,
        [&](DistOptions& o) {
          auto check = o.after_step;
          o.after_step = [&, check](int rank, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
            check(rank, e, b, rel);
            const int now = e.current();
            const int64_t shard_now = e.memory(now).shard_bytes;
            std::lock_guard<std::mutex> lock(mu);
            // One copy: the current plan's shards (f32, whole tiles: the copy is the shard's bytes).
            const int64_t owned = e.owned_weight_bytes();
            if (owned != (k.full ? 0 : shard_now))
              note(cat("rank ", rank, " step ", b.step_index, ": holds ", owned, " weight bytes, plan ", now,
                       "'s shards are ", shard_now));
            const auto prev = plan_of.find(rank);
            if (prev != plan_of.end() && prev->second != now) {
              ++switches;
              const SwitchResult& sw = e.last_switch();
              const Range was = e.forward_of(prev->second).layout().layers, is = e.forward_of(now).layout().layers;
              const int64_t per_was = e.memory(prev->second).shard_bytes / was.size();
              const int64_t per_is = shard_now / is.size();
              const int64_t common = std::max<int64_t>(0, std::min(was.end, is.end) - std::max(was.begin, is.begin));
              const int64_t kept = k.share_common_layers ? common : 0;
              const int64_t want_built = k.full ? 0 : (is.size() - kept) * per_is;
              const int64_t want_freed = k.full ? 0 : (was.size() - kept) * per_was;
              if (sw.weight_bytes_built != want_built || sw.weight_bytes_freed != want_freed)
                note(cat("rank ", rank, " switch ", prev->second, " -> ", now, " (layers ", to_string(was), " -> ",
                         to_string(is), "): built ", sw.weight_bytes_built, " freed ", sw.weight_bytes_freed,
                         " bytes, want ", want_built, " and ", want_freed));
              built_total += sw.weight_bytes_built;
            }
            plan_of[rank] = now;
          };
        },
        52);
    expect_tokens(label, model, prompts, want, r.run.out);
    EXPECT_EQ(bad, "");
    EXPECT_GE(switches, 5 * int64_t(Plan::parse(k.plans[0]).size())) << "plan switches seen on all ranks";
    if (k.full) EXPECT_EQ(built_total, 0);
    else EXPECT_GT(built_total, 0);
    // Rank 0's figures reach the plan statistics (what loom generate prints).
    int64_t reported = 0;
    for (const PlanStats& p : r.run.stats) reported += p.weight_bytes_built;
    EXPECT_EQ(reported > 0, !k.full);
  }
}

}  // namespace
}  // namespace loom

// ---- the scheduler's side of asynchronous swaps, step by step (no model: completions are given
// as the ranks' gather would report them) ----

namespace loom {
namespace {

StepResult tokens_for(const StepBatch& b) {
  StepResult r;
  for (const ScheduledSeq& s : b.seqs)
    if (s.sample) r.sampled.push_back({s.seq_id, 7});
  return r;
}

std::vector<int64_t> ids_of(const std::vector<SeqExtent>& v) {
  std::vector<int64_t> out;
  for (const SeqExtent& e : v) out.push_back(e.id);
  return out;
}

std::vector<int64_t> seq_ids(const StepBatch& b) {
  std::vector<int64_t> out;
  for (const ScheduledSeq& s : b.seqs) out.push_back(s.seq_id);
  return out;
}

// Two placements in one store (scheduler.h "Resident sequences"): the pools are c_d's (the
// resident decoders' home), and a sequence admitted for prefill under c_p is charged the c_d blocks
// its c_p pages cost on the least roomy rank. With 6 blocks a pool under c_p and 10 under c_d (a
// rank of P pages pays P/6 pages per c_p block, P/10 per c_d block), a prompt of 40 tokens (3
// blocks) costs 3 * 10/6 = 5 c_d blocks while it prefills, and nothing once it left for the tier.
TEST(SeesawScheduler, PrefillUnderCpIsChargedInTheDecodePools) {
  SchedulerConfig c;
  c.phases = PhaseMode::Seesaw;
  c.tier_tokens = 1000;
  c.pool_shapes = {KvPoolShape{1, 1, 6}, KvPoolShape{1, 1, 10}};
  c.max_model_len = 64;
  c.max_tokens_per_step = 40;
  c.watermark = 0;
  Scheduler s(c);
  EXPECT_TRUE(s.keeps_kv_resident());
  EXPECT_EQ(s.pools().shape().blocks_per_pool, 10);
  for (int64_t id : {1, 2}) {
    Request r;
    r.id = id;
    r.prompt.assign(40, 5);
    r.max_tokens = 3;
    r.stop.ignore_eos = true;
    s.add_request(r);
  }
  StepBatch b = s.schedule();  // the 40-token budget holds one prompt
  EXPECT_EQ(b.seqs.size(), 1u);
  EXPECT_EQ(s.num_used_blocks(), 5);
  s.on_step_done(b, tokens_for(b));  // prefilled: to the tier, its blocks free
  EXPECT_EQ(s.num_used_blocks(), 0);
  EXPECT_EQ(s.num_swapped(), 1);
  // The c_p rule without the surcharge would let 10 c_p blocks in (10/6 of a stage's pages).
  EXPECT_EQ(s.prefill_surcharge(6), 4);
  EXPECT_EQ(s.prefill_surcharge(1), 1);
}

TEST(SeesawScheduler, AsyncSwapsRunOnlyWhatEveryRankReportedComplete) {
  SchedulerConfig c;
  c.phases = PhaseMode::Seesaw;
  c.async_swaps = true;
  c.tier_tokens = 100;
  c.num_blocks = 64;
  c.max_model_len = 64;
  c.max_tokens_per_step = 64;
  Scheduler s(c);
  for (int64_t id : {1, 2}) {
    Request r;
    r.id = id;
    r.prompt.assign(20, 5);
    r.max_tokens = 3;
    r.stop.ignore_eos = true;
    s.add_request(r);
  }
  StepBatch b = s.schedule();  // both prefill
  ASSERT_EQ(b.num_prefill_tokens, 40);
  s.on_step_done(b, tokens_for(b));
  EXPECT_EQ(s.num_swapped(), 2);

  b = s.schedule();  // decode phase: their swap-outs start; nothing is ready to onboard
  EXPECT_EQ(s.phase(), Phase::Decode);
  EXPECT_EQ(ids_of(b.swap_out), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(b.seqs.empty());
  EXPECT_TRUE(b.swap_in.empty());
  EXPECT_FALSE(b.empty());
  s.on_step_done(b, {});  // not complete on every rank yet

  b = s.schedule();  // nothing to run: a step that waits for the copies
  EXPECT_TRUE(b.await_swaps);
  EXPECT_TRUE(b.seqs.empty() && b.swap_out.empty() && b.swap_in.empty());
  StepResult done;
  done.swapped_out = {1};  // only the first is complete everywhere
  s.on_step_done(b, done);

  b = s.schedule();  // the first onboards (prefetch starts), the second is not ready
  EXPECT_EQ(ids_of(b.swap_in), (std::vector<int64_t>{1}));
  EXPECT_TRUE(b.seqs.empty()) << "a sequence decodes only after its swap-in completed";
  done = {};
  done.swapped_out = {2};
  s.on_step_done(b, done);

  b = s.schedule();
  EXPECT_EQ(ids_of(b.swap_in), (std::vector<int64_t>{2}));
  EXPECT_TRUE(b.seqs.empty());
  EXPECT_EQ(s.num_prefetching(), 2);
  done = {};
  done.swapped_in = {1};
  s.on_step_done(b, done);

  b = s.schedule();  // 1 decodes while 2's prefetch is in flight
  EXPECT_EQ(seq_ids(b), (std::vector<int64_t>{1}));
  // Cancelled while its prefetch runs: the tier stays accounted full until the copy completes.
  EXPECT_TRUE(s.cancel(2));
  EXPECT_GT(s.tier_reserved_tokens(), 0);
  s.on_step_done(b, tokens_for(b));
  b = s.schedule();
  EXPECT_EQ(seq_ids(b), (std::vector<int64_t>{1}));
  s.on_step_done(b, tokens_for(b));  // 1 finishes (3 tokens)
  EXPECT_FALSE(s.has_unfinished());
  b = s.schedule();
  EXPECT_TRUE(b.await_swaps) << "the cancelled sequence's copy is still in flight on the ranks";
  EXPECT_GT(s.tier_reserved_tokens(), 0);
  done = {};
  done.swapped_in = {2};
  s.on_step_done(b, done);
  b = s.schedule();
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(s.tier_reserved_tokens(), 0) << "the tier is empty and no copy is in flight";
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// The KV budget counts what a rank holds: with the lazy re-shard one resident plan's copy (the
// larger), not the sum of the set's (each plan alone gives its own copy's bytes).
TEST(SeesawWeights, KvBudgetCountsOneCopyUnderLazyReshard) {
  std::shared_ptr<Model> model = load_model(four_layer_path());
  const ModelShape shape = ModelShape::from(model->config, weight_block_elems(*model));
  const PlanSet both = PlanSet::make(PlanSet::parse({"pp=2,layers=1+3", "tp=2"}), shape);
  for (int rank = 0; rank < 2; ++rank) {
    const int64_t cp = rank_weight_bytes(*model, PlanSet::make(PlanSet::parse({"pp=2,layers=1+3"}), shape), rank).copied;
    const int64_t cd = rank_weight_bytes(*model, PlanSet::make(PlanSet::parse({"tp=2"}), shape), rank).copied;
    ASSERT_GT(cp, 0);
    ASSERT_NE(cp, cd) << "uneven stages: the two plans' copies differ on rank " << rank;
    EXPECT_EQ(rank_weight_bytes(*model, both, rank).copied, cp + cd) << rank;
    EXPECT_EQ(rank_weight_bytes(*model, both, rank, true).copied, std::max(cp, cd)) << rank;
  }
  EXPECT_TRUE(policy_lazy_weights("seesaw") && policy_lazy_weights("prefill-first") && policy_lazy_weights("decode-first"));
  EXPECT_FALSE(policy_lazy_weights("shift") || policy_lazy_weights("fixed") || policy_lazy_weights("cycle:4"));
}

}  // namespace
}  // namespace loom
