// Shift Parallelism at the level of one replica's forward passes (engine/rank_engine.h over the
// plan set {sp x tp base, its shift config}), on the local backend: fixed steps (mixed prefill
// chunks and decode tokens of three sequences, step sizes that need padding) run under
// interleavings of the base config SP(s) x TP(t) and its shift config TP(s*t), against the
// single-rank forward pass. Exactness class: summation order (TP all-reduce, Ulysses) —
//   - rank 0's logits of every step: |got - ref| <= 1e-4 + 1e-4 * |ref| per element, and the
//     same argmax;
//   - the execution-level KV check (Shift 3.3.1): after the steps, every rank's KV store holds
//     exactly the cells the plan gives it (the naive oracle, kv/kv_oracle.h) and each holds, for
//     every written position, what the single-rank store holds for that model head (same
//     tolerance) — so the base and the shift config wrote the same placement and a switch moves
//     nothing;
//   - both weight modes of Shift 3.3.2 (separate copies, slices of the base copy) give the same
//     logits bit for bit (pure data movement), and their memory is w/t + w/P and w/t per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "comm/local.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/weight_tiles.h"
#include "engine/rank_engine.h"
#include "model/loader.h"
#include "model/synth.h"
#include "parallel/sharding.h"
#include "kv/kv_oracle.h"
#include "kv_cells.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

constexpr int kBlock = 16;

struct Step {
  std::vector<std::pair<int, int>> work;  // (sequence, tokens) in batch order
};

// The fixed workload: three sequences; steps of 25, 25, 3, 3, 1, 9 tokens.
const std::vector<Step> kSteps = {
    {{{0, 20}, {1, 5}}},          // two prefills
    {{{1, 1}, {0, 17}, {2, 7}}},  // decode, prefill chunk, new prefill
    {{{0, 1}, {1, 1}, {2, 1}}},   // decodes
    {{{0, 1}, {1, 1}, {2, 1}}},
    {{{2, 1}}},                   // one token: padding to s on every rank but one
    {{{0, 1}, {2, 8}}},
};
constexpr int kSeqs = 3;

// The forward batches of kSteps with token ids from Rng(seed); want_logits on every sequence.
std::vector<ForwardBatch> make_batches(int vocab, uint64_t seed, std::vector<int>* final_len = nullptr) {
  Rng rng(seed);
  std::vector<int> len(kSeqs, 0);
  std::vector<ForwardBatch> out;
  for (const Step& st : kSteps) {
    ForwardBatch fb;
    for (auto [i, n] : st.work) {
      for (int k = 0; k < n; ++k) fb.tokens.push_back(int32_t(rng.below(uint64_t(vocab))));
      fb.seqs.push_back(ForwardSeq{i, len[size_t(i)], n, true});
      len[size_t(i)] += n;
    }
    out.push_back(fb);
  }
  if (final_len) *final_len = len;
  return out;
}

std::vector<SeqExtent> extents_before(size_t step) {
  std::vector<int64_t> len(kSeqs, 0);
  for (size_t i = 0; i < step; ++i)
    for (auto [s, n] : kSteps[i].work) len[size_t(s)] += n;
  std::vector<SeqExtent> out;
  for (int s = 0; s < kSeqs; ++s)
    if (len[size_t(s)] > 0) out.push_back({s, len[size_t(s)]});
  return out;
}

using test::Cells;
using test::cells_of;

struct Reference {
  std::vector<std::vector<float>> logits;  // per step
  Cells kv;
};

Reference single_rank(const std::shared_ptr<const Model>& m, const std::vector<ForwardBatch>& batches) {
  ThreadPool pool(1);
  SingleRankModel tf(m, &pool, 3 * 64);
  Reference r;
  for (const ForwardBatch& fb : batches) {
    std::vector<float> l;
    tf.forward(fb, l);
    r.logits.push_back(l);
  }
  r.kv = cells_of(tf.kv(), extents_before(kSteps.size()));
  return r;
}

struct RankResult {
  Cells kv;
  std::string holdings;  // against the naive oracle of the plan ("" = exact)
  PlanMemory base_mem, shift_mem;
  int64_t owned = 0;
};
struct DistResult {
  std::vector<std::vector<float>> logits;
  std::vector<RankResult> ranks;
};

// Runs the steps on base.size() local ranks, step i under plan id ids[i] (0 base, 1 shift).
DistResult run_replica(const std::shared_ptr<const Model>& m, const Plan& base, const std::vector<ForwardBatch>& batches,
                       const std::vector<int>& ids, ShiftWeights weights) {
  const PlanSet set = PlanSet::make({base, base.shift_config()}, ModelShape::from(m->config, weight_block_elems(*m)));
  EXPECT_TRUE(set.same_placement(0, 1)) << "Shift 3.3.1: equal placements";
  DistResult out;
  out.ranks.resize(size_t(base.size()));
  std::mutex mu;
  CommOptions co;
  co.timeout_s = 30;
  LocalWorld::run(
      base.size(),
      [&](Communicator& world) {
        ThreadPool pool(1);
        RankEngineOptions o;
        o.block_size = kBlock;
        o.kv_pages = 4096;
        o.shift_weights = weights;
        RankEngine e(m, set, world, &pool, o);
        std::vector<std::vector<float>> logits;
        for (size_t i = 0; i < batches.size(); ++i) {
          const SwitchResult sw = e.switch_to(ids[i], extents_before(i));
          EXPECT_FALSE(sw.moved);
          std::vector<float> l;
          e.forward(batches[i], world.rank() == 0 ? &l : nullptr);
          logits.push_back(l);
        }
        RankResult rr;
        const std::vector<SeqExtent> all = extents_before(kSteps.size());
        rr.kv = cells_of(e.kv(), all);
        rr.holdings = test::naive_holdings_diff(e.kv(), set.plan(e.current()), set.shape(), world.rank(), all);
        rr.base_mem = e.memory(0);
        rr.shift_mem = e.memory(1);
        rr.owned = e.owned_weight_bytes();
        std::lock_guard<std::mutex> lock(mu);
        out.ranks[size_t(world.rank())] = std::move(rr);
        if (world.rank() == 0) out.logits = std::move(logits);
      },
      co);
  return out;
}

bool close(float got, float ref) { return std::fabs(got - ref) <= 1e-4f + 1e-4f * std::fabs(ref); }

// Compares logits and every rank's store with the single-rank run; `label` names the case.
void expect_matches(const std::shared_ptr<const Model>& m, const Reference& ref, const DistResult& got,
                    const std::string& label) {
  const int V = m->config.vocab_size;
  ASSERT_EQ(got.logits.size(), ref.logits.size()) << label;
  for (size_t s = 0; s < ref.logits.size(); ++s) {
    ASSERT_EQ(got.logits[s].size(), ref.logits[s].size()) << label << " step " << s;
    float worst = 0;
    for (size_t i = 0; i < ref.logits[s].size(); ++i)
      if (!close(got.logits[s][i], ref.logits[s][i]))
        worst = std::max(worst, std::fabs(got.logits[s][i] - ref.logits[s][i]));
    EXPECT_EQ(worst, 0.0f) << label << " step " << s << ": logits beyond tolerance by up to " << worst;
    for (size_t row = 0; row * V < ref.logits[s].size(); ++row) {
      const float* a = got.logits[s].data() + row * V;
      const float* b = ref.logits[s].data() + row * V;
      EXPECT_EQ(std::max_element(a, a + V) - a, std::max_element(b, b + V) - b) << label << " step " << s;
    }
  }
  for (size_t r = 0; r < got.ranks.size(); ++r) {
    const RankResult& rr = got.ranks[r];
    EXPECT_EQ(rr.holdings, "") << label;
    EXPECT_GT(rr.kv.size(), 0u) << label << " rank " << r;
    int64_t bad = 0;
    for (const auto& [cell, kv] : rr.kv) {
      const auto it = ref.kv.find(cell);
      ASSERT_NE(it, ref.kv.end()) << label;
      for (size_t e = 0; e < kv.size(); ++e) bad += !close(kv[e], it->second[e]);
    }
    EXPECT_EQ(bad, 0) << label << " rank " << r << ": cells differing from the single-rank cache";
  }
}

// Interleavings: base only, shift only, alternating from either side, and a seeded random one.
std::vector<std::pair<std::string, std::vector<int>>> schedules(const Plan& base) {
  const size_t n = kSteps.size();
  std::vector<std::pair<std::string, std::vector<int>>> out;
  out.push_back({"base", std::vector<int>(n, 0)});
  out.push_back({"shift", std::vector<int>(n, 1)});
  std::vector<int> alt1, alt2, rnd;
  Rng rng(uint64_t(base.sp * 31 + base.tp));
  for (size_t i = 0; i < n; ++i) {
    alt1.push_back(int(i % 2));
    alt2.push_back(int(1 - i % 2));
    rnd.push_back(int(rng.below(2)));
  }
  out.push_back({"base,shift,...", alt1});
  out.push_back({"shift,base,...", alt2});
  out.push_back({"random", rnd});
  return out;
}

void check_model(const std::shared_ptr<const Model>& m, const std::vector<std::pair<int, int>>& degrees) {
  const std::vector<ForwardBatch> batches = make_batches(m->config.vocab_size, 5);
  const Reference ref = single_rank(m, batches);
  for (auto [s, t] : degrees) {
    const Plan base = Plan::make_sp_tp(s, t);
    for (const auto& [name, ids] : schedules(base)) {
      const std::string label = cat(base.to_string(), " ", name);
      expect_matches(m, ref, run_replica(m, base, batches, ids, ShiftWeights::Separate), label);
    }
  }
}

TEST(ShiftForward, Stories260KEverySpTp) {
  LOOM_REQUIRE_SHARED();
  std::shared_ptr<const Model> m = load_model(test::stories_dir() + "/stories260K.bin");
  ASSERT_EQ(m->config.n_heads, 8);
  ASSERT_EQ(m->config.n_kv_heads, 4);
  // Every (s, t) with s > 1 and s*t | 8; s*t = 8 exceeds the 4 KV heads (GQA replication).
  check_model(m, {{2, 1}, {2, 2}, {2, 4}, {4, 1}, {4, 2}, {8, 1}});
}

TEST(ShiftForward, SynthGqa24x6EveryValidSpTp) {
  std::shared_ptr<const Model> m = load_model(test::gqa_24x6_path());
  ASSERT_EQ(m->config.n_heads, 24);
  ASSERT_EQ(m->config.n_kv_heads, 6);
  // s*t in {2, 3, 6, 12, 24} (the products that also split or replicate the 6 KV heads evenly),
  // including the paper's SP=3, TP=2 (head order 0,2,4,1,3,5).
  check_model(m, {{2, 1}, {3, 1}, {2, 3}, {3, 2}, {6, 1}, {2, 6}, {4, 3}, {6, 2}, {12, 1}, {8, 3}, {2, 12}});
}

// Products that divide the 24 query heads but not the KV heads evenly, and TP degrees that
// neither split nor replicate them, are rejected before anything runs, naming the sizes.
TEST(ShiftForward, ImpossibleCombinationsRejectedUpFront) {
  std::shared_ptr<const Model> m = load_model(test::gqa_24x6_path());
  const ModelShape shape = ModelShape::from(m->config);
  auto error_of = [&](int s, int t) -> std::string {
    try {
      validate(Plan::make_sp_tp(s, t), shape);
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(error_of(2, 2).find("sp*tp (sp=2, tp=2)=4"), std::string::npos) << error_of(2, 2);
  EXPECT_NE(error_of(4, 1).find("num_key_value_heads=6"), std::string::npos) << error_of(4, 1);
  EXPECT_NE(error_of(8, 1).find("num_key_value_heads=6"), std::string::npos) << error_of(8, 1);
  EXPECT_NE(error_of(3, 4).find("tp=4"), std::string::npos) << error_of(3, 4);
  EXPECT_NE(error_of(5, 1).find("num_attention_heads=24"), std::string::npos) << error_of(5, 1);
  // And a plan set of them is refused too (no rank of them is ever built).
  EXPECT_THROW(PlanSet::make({Plan::make_sp_tp(2, 2)}, shape), Error);
}

// Shift 3.3.2: separate copies and slices of the base copy compute the same logits bit for bit;
// memory per rank is w/t + w/P (separate) and w/t (slice), as shift_weight_memory says.
TEST(ShiftForward, WeightModesSeparateAndSliceAgree) {
  std::shared_ptr<const Model> m = load_model(test::gqa_24x6_path());
  const std::vector<ForwardBatch> batches = make_batches(m->config.vocab_size, 9);
  const Plan base = Plan::make_sp_tp(3, 2);
  const auto sched = schedules(base)[4].second;  // random interleaving
  const DistResult a = run_replica(m, base, batches, sched, ShiftWeights::Separate);
  const DistResult b = run_replica(m, base, batches, sched, ShiftWeights::Slice);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) EXPECT_EQ(a.logits[i], b.logits[i]) << "step " << i;
  const ModelShape shape = ModelShape::from(m->config);
  for (int r = 0; r < base.size(); ++r) {
    const ShiftWeightMemory w = shift_weight_memory(base, shape, r);
    const RankResult &x = a.ranks[size_t(r)], &y = b.ranks[size_t(r)];
    EXPECT_EQ(x.base_mem.shard_bytes, w.base_elems * 4) << r;
    EXPECT_EQ(x.shift_mem.shard_bytes, w.shift_elems * 4) << r;
    // Owned copies: at least the shards, at most 64 bytes of alignment per matrix more, and for
    // the separate copies (in the row-tile layout) at most kTileRows - 1 padding rows per matrix.
    const int64_t slack = 64 * 7 * m->config.n_layers;
    const int64_t tile_pad =
        int64_t(kTileRows - 1) * 4 * std::max<int64_t>(m->config.d_model, m->config.ffn_dim) * 7 * m->config.n_layers;
    EXPECT_GE(x.owned, w.separate() * 4) << r;
    EXPECT_LE(x.owned, w.separate() * 4 + 2 * (slack + tile_pad)) << r;
    EXPECT_GE(y.owned, w.sliced() * 4) << r;
    EXPECT_LE(y.owned, w.sliced() * 4 + slack) << r;
    EXPECT_EQ(y.shift_mem.owned_bytes, 0) << r << ": the shift shard is a view of the base copy";
  }
  expect_matches(m, single_rank(m, batches), b, "slice sp=3,tp=2");
}

// The switch is free: the base and shift placements are equal (a KvMigration between them moves
// and drops nothing), for the paper's 3x2 and for s*t above the KV heads, while a different layout
// would move KV.
TEST(ShiftForward, SwitchMovesNoKv) {
  std::shared_ptr<const Model> m = load_model(test::gqa_24x6_path());
  const ModelShape shape = ModelShape::from(m->config);
  const std::vector<SeqExtent> seqs = {{0, 37}, {1, 6}, {7, 129}};
  for (auto [s, t] : std::vector<std::pair<int, int>>{{3, 2}, {2, 6}, {12, 1}}) {
    const Plan b = Plan::make_sp_tp(s, t);
    const PlanSet set = PlanSet::make({b, b.shift_config()}, shape);
    EXPECT_TRUE(set.same_placement(0, 1));
    const KvMigration mig = kv_migration(set.placement(0), set.placement(1), seqs, kBlock, 64);
    EXPECT_EQ(mig.total_bytes, 0);
    EXPECT_EQ(mig.dropped_bytes, 0);
    EXPECT_TRUE(mig.moves.empty());
  }
  // Plain TP(6) in natural order differs from the 3x2 base's order: that switch moves KV.
  const PlanSet other = PlanSet::make({Plan::make_sp_tp(3, 2), Plan::make_tp(6)}, shape);
  EXPECT_FALSE(other.same_placement(0, 1));
  EXPECT_GT(kv_migration(other.placement(0), other.placement(1), seqs, kBlock, 64).total_bytes, 0);
}

}  // namespace
}  // namespace loom
