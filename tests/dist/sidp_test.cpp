// SiDP (../shared/papers/001; PAPERS-NOTES.md S1-S11): dp=D,weights=owner on the thread backend.
// Exactness classes:
//  - WaS (sidp=was) is pure data movement: a non-owner computes with a byte copy of the owner's
//    FFN, same kernel, same rows: its logits must have the same bits as plain dp=D.
//  - CaS (sidp=cas) runs a replica's rows inside the owner's larger GEMM: the kernel's blocking
//    over rows may change the summation order, so the criterion is the single-rank greedy tokens
//    (and logits within 1e-4 of plain DP's, a bound far below the top-2 gaps of these prompts).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "comm/world.h"
#include "core/error.h"
#include "engine/dist_engine.h"
#include "engine/policy.h"
#include "engine/step.h"
#include "engine/rank_engine.h"
#include "engine/sidp.h"
#include "engine/stage_ffn_owner.h"
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

// ---- peak shifting (S7; PAPERS-NOTES 1.4.3): the schedule as a pure function ----

TEST(SidpPeakShifting, EveryNonOwnedLayerOncePerCycleAndOwnersAPermutationPerStep) {
  for (int D : {3, 4, 8}) {
    for (int L : {D, 3 * D, 3 * D + 1, 5 * D - 1}) {
      SCOPED_TRACE(cat("D=", D, " L=", L));
      for (int c = 0; c < L; c += D) {
        // (i) every non-owned layer of the cycle exactly once per rank, nothing else
        for (int r = 0; r < D; ++r) {
          std::multiset<int> got, want;
          for (int j = 0; j < D; ++j) {
            const int l = sidp::peak_shift_layer(r, D, L, c, j);
            if (l >= 0) got.insert(l);
          }
          for (int l = c; l < std::min(c + D, L); ++l)
            if (l % D != r) want.insert(l);
          EXPECT_EQ(got, want) << "rank " << r << " cycle " << c;
        }
        // (ii) at every step the owners being read are distinct (no owner has two readers)
        for (int j = 0; j < D; ++j) {
          std::set<int> owners;
          int readers = 0;
          for (int r = 0; r < D; ++r) {
            const int l = sidp::peak_shift_layer(r, D, L, c, j);
            if (l < 0) continue;
            ++readers;
            EXPECT_NE(sidp::owner_of(l, D), r);
            owners.insert(sidp::owner_of(l, D));
          }
          EXPECT_EQ(int(owners.size()), readers) << "cycle " << c << " step " << j;
        }
      }
      // Without peak shifting (the same owner for everyone at once): step 0 of the layer order
      // has every non-owner of layer 0 reading it from owner 0 - the incast peak shifting removes.
      for (int r = 1; r < D; ++r) EXPECT_EQ(sidp::fetch_order(r, D, L, false).front(), 0) << "rank " << r;
    }
  }
}

// The orders written out by hand from §4.2's rule with PAPERS-NOTES' assumptions (cycles of D
// layers from layer 0, owner(l) = l mod D, offset(r) = (r + 1) mod D): in the cycle starting at c,
// rank r reads c + offset(r), then onwards wrapping inside the cycle, skipping its own layer and
// layers past the model's end. Without peak shifting: its non-owned layers in ascending order.
TEST(SidpPeakShifting, FetchOrdersWrittenByHandFromTheRule) {
  using Orders = std::vector<std::vector<int>>;  // by rank
  auto orders = [](int D, int L, bool peak) {
    Orders o;
    for (int r = 0; r < D; ++r) o.push_back(sidp::fetch_order(r, D, L, peak));
    return o;
  };
  // D = 3, L = 7: cycles {0,1,2}, {3,4,5}, {6}.
  EXPECT_EQ(orders(3, 7, true), (Orders{{1, 2, 4, 5}, {2, 0, 5, 3, 6}, {0, 1, 3, 4, 6}}));
  EXPECT_EQ(orders(3, 7, false), (Orders{{1, 2, 4, 5}, {0, 2, 3, 5, 6}, {0, 1, 3, 4, 6}}));
  // D = 4, L = 8: cycles {0..3}, {4..7}; at each step the four ranks read four different owners.
  EXPECT_EQ(orders(4, 8, true),
            (Orders{{1, 2, 3, 5, 6, 7}, {2, 3, 0, 6, 7, 4}, {3, 0, 1, 7, 4, 5}, {0, 1, 2, 4, 5, 6}}));
  EXPECT_EQ(orders(4, 8, false),
            (Orders{{1, 2, 3, 5, 6, 7}, {0, 2, 3, 4, 6, 7}, {0, 1, 3, 4, 5, 7}, {0, 1, 2, 4, 5, 6}}));
  // D = 4, L = 5 (stories260K's layers): the last cycle is layer 4 alone, owned by rank 0.
  EXPECT_EQ(orders(4, 5, true), (Orders{{1, 2, 3}, {2, 3, 0, 4}, {3, 0, 1, 4}, {0, 1, 2, 4}}));
}

TEST(SidpPlan, KeysParseValidateAndPrint) {
  const Plan p = Plan::parse("dp=4,weights=owner,slots=5,lookahead=3");
  EXPECT_EQ(p.sidp_slots(), 5);
  EXPECT_EQ(p.sidp_lookahead(), 3);
  EXPECT_EQ(p.to_string(), "dp=4,weights=owner,slots=5,lookahead=3");
  EXPECT_EQ(Plan::parse("dp=4,weights=owner").sidp_lookahead(), 3);  // D - 1
  EXPECT_EQ(Plan::parse("dp=4,weights=owner").sidp_slots(), 3);
  EXPECT_TRUE(Plan::parse("dp=2,weights=owner,sidp=cas").sidp_cas);
  EXPECT_FALSE(Plan::parse("dp=2,weights=owner,sidp=cas") == Plan::parse("dp=2,weights=owner"));
  EXPECT_THROW(Plan::parse("dp=2,slots=2"), Error);  // SiDP keys need weights=owner
  try {
    Plan::parse("dp=4,weights=owner,slots=2,lookahead=3");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slots=2 is fewer than lookahead=3"), std::string::npos) << e.what();
  }
  ModelShape s{8, 4, 8, 172, 5, 64, 1};
  try {
    validate(Plan::parse("dp=6,weights=owner"), s);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dp=6 exceeds num_hidden_layers=5"), std::string::npos) << e.what();
  }
}

// ---- RankEngines over a local world: logits of every replica, step by step ----

struct RankRun {
  std::vector<std::vector<float>> logits;  // per step: this replica's logit rows
  OwnerFfnStage::Stats stats;
  bool have_stats = false;
  int64_t slot_bytes = 0, owned_bytes = 0;
};

// Prefill of `prompts` (sequence i has id i + 1), then `decodes` decode steps feeding a fixed
// token per sequence; `active(id)` false leaves a sequence out of every step (dummy replicas).
std::vector<RankRun> run_engines(const std::shared_ptr<Model>& model, const std::string& plan_text,
                                 const std::vector<std::vector<int32_t>>& prompts, int decodes,
                                 const std::function<bool(int64_t)>& active = nullptr) {
  const Plan plan = Plan::parse(plan_text);
  const int D = plan.size();
  std::vector<RankRun> out(static_cast<size_t>(D));
  std::unique_ptr<World> world = make_world("local", D, CommOptions{30});
  world->run([&](Communicator& comm) {
    ThreadPool pool(1);
    const PlanSet set = PlanSet::make({plan}, ModelShape::from(model->config, weight_block_elems(*model)));
    RankEngineOptions o;
    o.kv_pages = 4096;
    RankEngine e(model, set, comm, &pool, o);
    RankRun& me = out[size_t(comm.rank())];
    std::vector<int64_t> pos(prompts.size(), 0);
    for (int step = 0; step <= decodes; ++step) {
      ForwardBatch fb;
      for (size_t i = 0; i < prompts.size(); ++i) {
        const int64_t id = int64_t(i) + 1;
        if (active && !active(id)) continue;
        const int n = step == 0 ? int(prompts[i].size()) : 1;
        if (step == 0) fb.tokens.insert(fb.tokens.end(), prompts[i].begin(), prompts[i].end());
        else fb.tokens.push_back(int32_t((step * 31 + i * 7) % model->config.vocab_size));
        fb.seqs.push_back(ForwardSeq{id, pos[i], n, true});
        pos[i] += n;
      }
      std::vector<float> logits;
      e.forward(fb, &logits);
      me.logits.push_back(logits);
    }
    if (auto* st = dynamic_cast<const OwnerFfnStage*>(&e.forward_of(0).ffn())) {
      me.stats = st->stats();
      me.have_stats = true;
      me.slot_bytes = st->slot_bytes();
    }
    me.owned_bytes = e.owned_weight_bytes();
  });
  return out;
}

class SidpStories : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_SHARED();
    model_ = load_model(test::stories_dir() + "/stories260K.bin");
    prompts_ = random_prompts(7, 30, 512, 5);
  }
  std::shared_ptr<Model> model_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(SidpStories, WasSameBitsAsPlainDpAndEveryLayerFetchedOncePerStep) {
  const int decodes = 6, L = model_->config.n_layers;
  for (const std::string was : {"dp=2,weights=owner", "dp=3,weights=owner", "dp=4,weights=owner",
                                "dp=4,weights=owner,slots=2,lookahead=1"}) {
    SCOPED_TRACE(was);
    const int D = Plan::parse(was).dp;
    const auto plain = run_engines(model_, cat("dp=", D), prompts_, decodes);
    const auto got = run_engines(model_, was, prompts_, decodes);
    for (int r = 0; r < D; ++r) {
      ASSERT_EQ(got[size_t(r)].logits.size(), plain[size_t(r)].logits.size());
      for (size_t s = 0; s < plain[size_t(r)].logits.size(); ++s) {
        const auto &a = plain[size_t(r)].logits[s], &b = got[size_t(r)].logits[s];
        ASSERT_EQ(a.size(), b.size());
        EXPECT_TRUE(a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0)
            << "rank " << r << " step " << s << ": WaS logits differ from plain DP";
      }
      const RankRun& rr = got[size_t(r)];
      ASSERT_TRUE(rr.have_stats);
      const int steps = decodes + 1;  // every replica has sequences in every step here
      const Plan p = Plan::parse(was);
      int64_t ahead = 0;
      for (int l = 0; l < L; ++l) {
        if (l % D == r) {
          EXPECT_EQ(rr.stats.fetched[size_t(l)], 0) << "owned layer " << l << " fetched";
          continue;
        }
        EXPECT_EQ(rr.stats.used[size_t(l)], steps) << "layer " << l;
        EXPECT_GE(rr.stats.fetched[size_t(l)], steps) << "layer " << l;
        EXPECT_LE(rr.stats.fetched[size_t(l)], steps + 1) << "layer " << l;
        ahead += rr.stats.fetched[size_t(l)] - steps;
      }
      EXPECT_LE(ahead, p.sidp_lookahead());  // the prefetcher never runs more than the lookahead ahead
      // The prefetch thread issued the rank's fetch order, pass after pass: written by hand for
      // L = 5 (cycles of D layers from 0, owner l mod D; peak shifting from dp=3 when the lookahead
      // covers a cycle's D - 1 remote layers, else ascending layer order).
      ASSERT_EQ(L, 5);
      const std::map<std::string, std::vector<std::vector<int>>> kOrders = {
          {"dp=2,weights=owner", {{1, 3}, {0, 2, 4}}},
          {"dp=3,weights=owner", {{1, 2, 4}, {2, 0, 3}, {0, 1, 3, 4}}},
          {"dp=4,weights=owner", {{1, 2, 3}, {2, 3, 0, 4}, {3, 0, 1, 4}, {0, 1, 2, 4}}},
          {"dp=4,weights=owner,slots=2,lookahead=1", {{1, 2, 3}, {0, 2, 3, 4}, {0, 1, 3, 4}, {0, 1, 2, 4}}}};
      const std::vector<int>& order = kOrders.at(was)[size_t(r)];
      EXPECT_GE(rr.stats.fetch_log.size(), order.size()) << "not one pass of fetches logged";
      for (size_t i = 0; i < rr.stats.fetch_log.size(); ++i)
        EXPECT_EQ(rr.stats.fetch_log[i], order[i % order.size()]) << "fetch " << i;
      // What the rank holds: attention copies (RankWeights) + its owned FFN layers + slots.
      const sidp::Memory m = sidp::memory(*model_, p, r);
      EXPECT_EQ(rr.slot_bytes, m.slots);
      // Layers of stories260K are equal in size: the rank holds less than plain DP exactly when its
      // owned layers plus slots are fewer than the layers (dp=4 over 5 layers with 3 slots: not).
      EXPECT_EQ(m.total() < m.plain_dp, m.n_owned + p.sidp_slots() < L) << m.total() << " vs " << m.plain_dp;
    }
  }
}

TEST_F(SidpStories, CasMatchesPlainDpAndDummiesSendNothing) {
  const int decodes = 6, d = model_->config.d_model, L = model_->config.n_layers;
  for (int D : {2, 3, 4}) {
    SCOPED_TRACE(cat("D=", D));
    // Only replica 0 has sequences: replicas 1..D-1 are dummies every step, yet own layers.
    auto only0 = [D](int64_t id) { return id % D == 0; };
    const auto plain = run_engines(model_, cat("dp=", D), prompts_, decodes, only0);
    const auto got = run_engines(model_, cat("dp=", D, ",weights=owner,sidp=cas"), prompts_, decodes, only0);
    for (size_t s = 0; s < plain[0].logits.size(); ++s) {
      const auto &a = plain[0].logits[s], &b = got[0].logits[s];
      ASSERT_EQ(a.size(), b.size());
      ASSERT_FALSE(a.empty());
      double diff = 0;
      for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::fabs(a[i] - b[i])));
      EXPECT_LE(diff, 1e-4) << "step " << s;
    }
    int64_t rows0 = 0;  // replica 0's rows over the run
    for (size_t i = 0; i < prompts_.size(); ++i)
      if (only0(int64_t(i) + 1)) rows0 += int64_t(prompts_[i].size()) + decodes;
    int64_t layers_of_others = 0;
    for (int l = 0; l < L; ++l) layers_of_others += l % D != 0;
    // Replica 0 ships its rows to the other owners, once per layer they own.
    EXPECT_EQ(got[0].stats.bytes_sent, rows0 * layers_of_others * d * int64_t(sizeof(float)));
    for (int r = 1; r < D; ++r) {
      const OwnerFfnStage::Stats& st = got[size_t(r)].stats;
      int64_t owned = 0;
      for (int l = 0; l < L; ++l) owned += l % D == r;
      // A dummy sends no rows of its own: every byte it sent is an owner's reply...
      EXPECT_EQ(st.bytes_sent, st.rows_served * d * int64_t(sizeof(float))) << "rank " << r;
      // ...and as an owner without work it still served replica 0 at each of its layers.
      EXPECT_EQ(st.rows_served, rows0 * owned) << "rank " << r;
      EXPECT_EQ(st.gemms_served, int64_t(decodes + 1) * owned) << "rank " << r;
    }
  }
}

// ---- the engine: greedy tokens of the single-rank engine, threads ----

std::map<int64_t, std::vector<int32_t>> run_dist(const std::vector<std::string>& plans, const std::string& policy,
                                                 const std::shared_ptr<Model>& model, std::vector<Request> requests,
                                                 std::vector<PlanStats>* stats = nullptr,
                                                 std::vector<std::string>* info = nullptr, int64_t threshold = -1) {
  DistOptions o;
  o.comm = "local";
  o.plans = plans;
  o.policy = policy;
  o.ranks = Plan::parse(plans[0]).size();
  o.engine.max_tokens_per_step = 16;
  o.engine.max_num_seqs = 64;
  o.engine.kv_cache_bytes = int64_t(8) << 20;
  o.comm_options.timeout_s = 30;
  o.sidp_threshold = threshold;
  o.load_model = [model](int) { return model; };
  std::map<int64_t, std::vector<int32_t>> out;
  run_distributed(o, [&](DistEngine& e) {
    for (const Sequence& s : e.run(requests)) out[s.id()] = s.output;
    if (stats) *stats = e.plan_stats();
    if (info) *info = e.start_info();
  });
  return out;
}

TEST_F(SidpStories, GreedyTokensOfTheSingleRankEngine) {
  const int n = 10;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts_) want.push_back(alone(model_, p, n));
  for (const std::string plan : {"dp=2,weights=owner", "dp=3,weights=owner", "dp=4,weights=owner",
                                 "dp=2,weights=owner,sidp=cas", "dp=3,weights=owner,sidp=cas",
                                 "dp=4,weights=owner,sidp=cas"}) {
    SCOPED_TRACE(plan);
    std::vector<std::string> info;
    expect_tokens(cat("plan ", plan), model_, prompts_, want,
                  run_dist({plan}, "fixed", model_, greedy_requests(prompts_, n), nullptr, &info));
    bool printed = false;
    for (const std::string& line : info) printed = printed || line.find("plain DP holds") != std::string::npos;
    EXPECT_TRUE(printed) << "start-up prints the bytes per rank against plain DP";
  }
}

// The orchestrated switch (S11): a shrinking batch (requests of different lengths) enters CaS in
// the tail; tokens stay the single-rank engine's across the switch, and the steps of each mode
// are the steps of its plan.
TEST_F(SidpStories, PolicySwitchesToCasInTheTailWithTheSameTokens) {
  std::vector<int> lengths;
  for (size_t i = 0; i < prompts_.size(); ++i) lengths.push_back(4 + 5 * int(i));
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < prompts_.size(); ++i) want.push_back(alone(model_, prompts_[i], lengths[i]));
  for (int D : {2, 3, 4}) {
    SCOPED_TRACE(cat("D=", D));
    std::vector<PlanStats> stats;
    const auto got = run_dist({cat("dp=", D, ",weights=owner")}, "sidp", model_, greedy_requests(prompts_, lengths),
                              &stats, nullptr, /*B_th=*/2);
    expect_tokens("sidp", model_, prompts_, want, got);
    ASSERT_EQ(stats.size(), 2u);
    EXPECT_NE(stats[0].name.find("weights=owner"), std::string::npos);
    EXPECT_NE(stats[1].name.find("sidp=cas"), std::string::npos);
    EXPECT_GT(stats[0].steps, 0) << "WaS steps";
    EXPECT_GT(stats[1].steps, 0) << "CaS steps";
    EXPECT_EQ(stats[1].kv_bytes_moved, 0) << "the modes share one KV placement";
  }
}

TEST(SidpPolicy, HysteresisWindow) {
  const PlanSet set = PlanSet::make(policy_plans("sidp", {Plan::parse("dp=2,weights=owner")}),
                                    ModelShape{8, 4, 8, 172, 5, 64, 1});
  ASSERT_EQ(set.size(), 2);
  auto policy = make_layout_policy("sidp", set, 4);  // B_th = 4 sequences per replica
  auto step = [](int seqs) {
    StepBatch b;
    b.seqs.resize(size_t(seqs));
    return b;
  };
  // 2 replicas: 6 sequences = 3 per replica < 4; CaS only after kSidpWindow such steps.
  for (int i = 0; i < kSidpWindow - 1; ++i) EXPECT_EQ(policy->choose(step(6)), 0) << i;
  EXPECT_EQ(policy->choose(step(16)), 0);  // one big step resets the count
  for (int i = 0; i < kSidpWindow - 1; ++i) EXPECT_EQ(policy->choose(step(6)), 0) << i;
  EXPECT_EQ(policy->choose(step(6)), 1);
  // Back to WaS only above (1 + h) * B_th = 6 per replica for a window; 5 per replica stays CaS.
  for (int i = 0; i < 3 * kSidpWindow; ++i) EXPECT_EQ(policy->choose(step(10)), 1) << i;
  for (int i = 0; i < kSidpWindow - 1; ++i) EXPECT_EQ(policy->choose(step(14)), 1) << i;
  EXPECT_EQ(policy->choose(step(14)), 0);
  EXPECT_EQ(policy_plans("sidp:cas", {Plan::parse("dp=2,weights=owner")})[0].to_string(),
            "dp=2,weights=owner,sidp=cas");
  EXPECT_THROW(policy_plans("sidp", {Plan::parse("dp=2")}), Error);
}

TEST(SidpSynthGqa, GreedyTokensOfTheSingleRankEngine) {
  // The GQA shape (24 query heads, 6 KV heads) with 6 layers, so D = 2, 3 and 4 each own some.
  SynthOptions so;
  so.shape = synth_shape("gqa-24x6");
  so.shape.config.n_layers = 6;
  so.dtype = DType::F32;
  so.seed = 9;
  so.threads = 1;
  const std::string path = test::temp_dir() + "/sidp-gqa-24x6-6l.gguf";
  write_synth_model(so, path);
  std::shared_ptr<Model> model = load_model(path);
  ASSERT_EQ(model->config.n_layers, 6);
  const auto prompts = random_prompts(6, 30, model->config.vocab_size, 3);
  const int n = 6;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(model, p, n));
  for (const std::string plan : {"dp=2,weights=owner", "dp=3,weights=owner", "dp=4,weights=owner",
                                 "dp=3,weights=owner,sidp=cas", "dp=4,weights=owner,sidp=cas"}) {
    SCOPED_TRACE(plan);
    expect_tokens(cat("plan ", plan), model, prompts, want, run_dist({plan}, "fixed", model, greedy_requests(prompts, n)));
  }
}


// S12 ("the KV budget grows by the bytes freed"): under the same memory per rank
// (--rank-memory-bytes, the device memory of a GPU rank), a dp=2,weights=owner rank's KV store is
// larger than a plain dp=2 rank's by the FFN bytes it does not hold, less its cache slots. The
// expectation is computed from the model's own tensors (not from sidp::memory); what is compared
// is each rank's actual KV store. Exact up to one KV page (the budget is whole pages) and the
// 64-byte alignment of the owner layout's pieces.
TEST(SidpMemory, KvStoreGrowsByTheFfnBytesARankDoesNotHold) {
  SynthOptions so;
  so.shape = synth_shape("gqa-24x6");
  so.shape.config.n_layers = 6;
  so.dtype = DType::F32;
  so.seed = 9;
  so.threads = 1;
  const std::string path = test::temp_dir() + "/sidp-gqa-24x6-6l-mem.gguf";
  write_synth_model(so, path);
  std::shared_ptr<Model> model = load_model(path);
  const ModelConfig& c = model->config;
  int64_t layers = 0, max_ffn = 0;
  std::vector<int64_t> ffn(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = model->layers[size_t(l)];
    for (const WeightView* w : L.matrices()) layers += w->bytes();
    ffn[size_t(l)] = L.w_gate.bytes() + L.w_up.bytes() + L.w_down.bytes();
    max_ffn = std::max(max_ffn, ffn[size_t(l)]);
  }
  const int64_t memory = layers + model->output.bytes() + (int64_t(6) << 20);
  auto kv_bytes = [&](const std::string& plan) {
    std::vector<int64_t> got(2, -1);
    std::mutex mu;
    DistOptions o;
    o.comm = "local";
    o.plans = {plan};
    o.ranks = 2;
    o.engine.max_num_seqs = 256;
    o.engine.rank_memory_bytes = memory;
    o.comm_options.timeout_s = 30;
    o.load_model = [model](int) { return model; };
    o.after_step = [&](int r, RankEngine& e, const StepBatch&, const std::vector<RequestId>&) {
      std::lock_guard<std::mutex> lock(mu);
      got[size_t(r)] = e.kv().bytes();
    };
    run_distributed(o, [&](DistEngine& e) { e.run(greedy_requests(random_prompts(2, 8, c.vocab_size, 4), 2)); });
    return got;
  };
  const std::vector<int64_t> plain = kv_bytes("dp=2"), owner = kv_bytes("dp=2,weights=owner");
  const Plan p = Plan::parse("dp=2,weights=owner");
  const int64_t page = 2 * int64_t(EngineConfig{}.block_size) * c.head_dim * int64_t(sizeof(float));
  for (int r = 0; r < 2; ++r) {
    int64_t not_held = 0;
    for (int l = 0; l < c.n_layers; ++l)
      if (l % 2 != r) not_held += ffn[size_t(l)];
    const int64_t want = not_held - int64_t(p.sidp_slots()) * max_ffn;
    ASSERT_GT(plain[size_t(r)], 0) << "rank " << r << " ran no step";
    EXPECT_NEAR(double(owner[size_t(r)] - plain[size_t(r)]), double(want), double(page + 3 * 64 * c.n_layers))
        << "rank " << r << ": plain DP KV " << plain[size_t(r)] << " bytes, SiDP " << owner[size_t(r)];
  }
}

// --rank-memory-bytes that the weights fill, or given with --kv-cache-bytes: one line, before
// anything is built.
TEST(SidpMemory, RankMemoryErrorsNameTheSizes) {
  SynthOptions so;
  so.shape = synth_shape("tiny");
  so.dtype = DType::F32;
  const std::string path = test::temp_dir() + "/sidp-tiny-mem.gguf";
  write_synth_model(so, path);
  DistOptions o;
  o.comm = "local";
  o.plans = {"dp=2,weights=owner"};
  o.ranks = 2;
  o.model_path = path;
  o.comm_options.timeout_s = 30;
  o.engine.rank_memory_bytes = 1024;
  const std::string small = test::error_of([&] { run_distributed(o, [](DistEngine&) {}); });
  EXPECT_NE(small.find("--rank-memory-bytes 1024 leaves no room for KV"), std::string::npos) << small;
  o.engine.kv_cache_bytes = int64_t(1) << 20;
  const std::string both = test::error_of([&] { run_distributed(o, [](DistEngine&) {}); });
  EXPECT_NE(both.find("not both"), std::string::npos) << both;
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// `loom generate --plan dp=2,weights=owner --policy sidp` needs no --sidp-threshold: the threshold
// (the WaS/CaS crossover) comes from the cost model of this machine (sim/sidp_cost.h default_sidp_threshold), printed at start,
// and the greedy text is the single-rank text (WaS/CaS are the same tokens, SidpStories.*).
TEST(SidpCli, PolicySidpRunsWithTheCostModelsDefaultThreshold) {
  LOOM_REQUIRE_SHARED();
  const std::string model = test::stories_dir() + "/stories260K.bin";
  const std::string args = "generate -m " + model + " -n 24 -p 'Once upon a time' --temperature 0 --threads 1";
  std::string sidp, single;
  ASSERT_EQ(test::run_command(test::loom_bin() + " " + args + " --plan dp=2,weights=owner --policy sidp 2>&1", &sidp), 0)
      << sidp;
  EXPECT_NE(sidp.find("[sidp threshold "), std::string::npos) << sidp;
  EXPECT_NE(sidp.find("sequences per replica: cost model on "), std::string::npos) << sidp;
  ASSERT_EQ(test::run_command(test::loom_bin() + " " + args + " 2>/dev/null", &single), 0) << single;
  // The generated text (before the statistics line in brackets) is the single-rank text.
  const std::string text = single.substr(0, single.find('['));
  ASSERT_GT(text.size(), std::string("Once upon a time").size()) << single;
  EXPECT_NE(sidp.find(text), std::string::npos) << "single:\n" << single << "sidp:\n" << sidp;
  // A negative threshold is bad input: one line naming it, before anything loads.
  std::string bad;
  EXPECT_NE(test::run_command(test::loom_bin() + " " + args +
                                  " --plan dp=2,weights=owner --policy sidp --sidp-threshold -5 2>&1",
                              &bad),
            0);
  EXPECT_NE(bad.find("--sidp-threshold: -5 is out of range [-1, "), std::string::npos) << bad;
}

}  // namespace
}  // namespace loom
