// A stage on its rank equals the matching slice of the single-rank layer (stage.h): after two
// steps (prefill chunks of three sequences, then decodes beside a chunk), every rank's KV store
// holds exactly its plan's cells (the naive oracle, kv/kv_oracle.h), and each cell's K/V is the
// single-rank engine's for that (sequence, layer, KV head, position):
//   - bit for bit where the rank computed that layer from the same rows with the same rows of the
//     weights: every layer of a pipeline stage (pure data movement), and layer 0 of every TP rank
//     (its input is the embedding itself; its Wk/Wv rows are the single rank's);
//   - within |got - ref| <= 1e-4 + 1e-4 |ref| after a TP all-reduce changed the summation order
//     (layers >= 1 under TP), and under DP: a replica's step holds fewer rows than the single
//     rank's, and the matmul kernels choose their blocking (and so their order of sums) by the
//     row count, so DP is a summation-order change too, not pure data movement.
// The logits of the sampler equal the single-rank ones within the same bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "comm/local.h"
#include "core/error.h"
#include "core/rng.h"
#include "engine/rank_engine.h"
#include "model/loader.h"
#include "kv/kv_oracle.h"
#include "kv_cells.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

// Two steps: sequence 0: 20 + 1 tokens, 1: 5 + 1, 2: 18 (prefilled in one step).
std::vector<ForwardBatch> two_steps(int vocab) {
  Rng rng(17);
  auto toks = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(int32_t(rng.below(uint64_t(vocab))));
    return t;
  };
  ForwardBatch a, b;
  for (auto [id, n] : {std::pair{0, 20}, {1, 5}}) {
    const auto t = toks(n);
    a.tokens.insert(a.tokens.end(), t.begin(), t.end());
    a.seqs.push_back({id, 0, n, true});
  }
  for (auto [id, start, n] : {std::tuple{0, 20, 1}, {1, 5, 1}, {2, 0, 18}}) {
    const auto t = toks(n);
    b.tokens.insert(b.tokens.end(), t.begin(), t.end());
    b.seqs.push_back({id, start, n, true});
  }
  return {a, b};
}
const std::vector<SeqExtent> kExtents = {{0, 21}, {1, 6}, {2, 18}};

using test::Cell;
using test::Cells;

struct RankOut {
  Cells cells;
  std::string holdings;
  RankLayout layout;
};

class StageSlices : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_SHARED();
    model_ = load_model(test::stories_dir() + "/stories260K.bin");
    batches_ = two_steps(model_->config.vocab_size);
    ThreadPool pool(1);
    SingleRankModel ref(model_, &pool, 3 * 64);
    for (const ForwardBatch& b : batches_) {
      std::vector<float> l;
      ref.forward(b, l);
      ref_logits_.push_back(l);
    }
    ref_ = test::cells_of(ref.kv(), kExtents);
  }

  struct Run {
    std::vector<RankOut> ranks;
    std::vector<std::vector<float>> logits;  // replica 0's sampler
  };
  Run run(const std::string& plan_text) {
    Run out;
    const Plan plan = Plan::parse(plan_text);
    const PlanSet set = PlanSet::make({plan}, ModelShape::from(model_->config, weight_block_elems(*model_)));
    std::vector<RankOut>& ranks = out.ranks;
    ranks.resize(size_t(plan.size()));
    std::vector<std::vector<float>>& logits = out.logits;
    std::mutex mu;
    LocalWorld::run(plan.size(), [&](Communicator& world) {
      ThreadPool pool(1);
      RankEngineOptions o;
      o.kv_pages = 4096;
      RankEngine e(model_, set, world, &pool, o);
      std::vector<std::vector<float>> mine;
      for (const ForwardBatch& b : batches_) {
        std::vector<float> l;
        e.forward(b, &l);
        mine.push_back(l);
      }
      RankOut r;
      r.cells = test::cells_of(e.kv(), kExtents);
      r.holdings = test::naive_holdings_diff(e.kv(), plan, set.shape(), world.rank(), kExtents);
      r.layout = rank_layout(plan, set.shape(), world.rank());
      std::lock_guard<std::mutex> lock(mu);
      ranks[size_t(world.rank())] = std::move(r);
      if (is_sampler(ranks[size_t(world.rank())].layout, plan) && ranks[size_t(world.rank())].layout.dp == 0)
        logits = std::move(mine);
    });
    return out;
  }

  void check(const std::string& plan_text) {
    SCOPED_TRACE(plan_text);
    const Plan plan = Plan::parse(plan_text);
    const Run out = run(plan_text);
    const std::vector<RankOut>& ranks = out.ranks;
    const std::vector<std::vector<float>>& logits = out.logits;
    // A TP all-reduce (and Helix's LSE merge) reorders sums after layer 0.
    const bool reduces = plan.tp > 1 || plan.sp > 1 || plan.kvp > 1;
    for (const RankOut& r : ranks) {
      EXPECT_EQ(r.holdings, "") << "rank " << r.layout.rank;
      // The sequences span at most 2 blocks of 16: Helix KVP ranks past the first may hold nothing
      // (empty shards), KVP rank 0 always holds the first block.
      if (r.layout.kvp == 0) {
        EXPECT_FALSE(r.cells.empty()) << "rank " << r.layout.rank;
      }
      int64_t not_bits = 0, beyond = 0;
      for (const auto& [cell, got] : r.cells) {
        const std::vector<float>& want = ref_.at(cell);
        const bool exact = plan.dp == 1 && (!reduces || std::get<1>(cell) == 0);
        for (size_t i = 0; i < got.size(); ++i) {
          if (exact) not_bits += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
          beyond += std::fabs(got[i] - want[i]) > 1e-4f + 1e-4f * std::fabs(want[i]);
        }
      }
      EXPECT_EQ(not_bits, 0) << "rank " << r.layout.rank << ": elements not bit-equal where they must be";
      EXPECT_EQ(beyond, 0) << "rank " << r.layout.rank << ": elements beyond the summation-order bound";
    }
    // Replica 0's sampler saw replica 0's sequences (all of them without DP).
    ASSERT_EQ(logits.size(), ref_logits_.size());
    if (plan.dp == 1)
      for (size_t s = 0; s < logits.size(); ++s) {
        ASSERT_EQ(logits[s].size(), ref_logits_[s].size()) << "step " << s;
        int64_t beyond = 0;
        for (size_t i = 0; i < logits[s].size(); ++i)
          beyond += std::fabs(logits[s][i] - ref_logits_[s][i]) > 1e-4f + 1e-4f * std::fabs(ref_logits_[s][i]);
        EXPECT_EQ(beyond, 0) << "step " << s;
      }
  }

  std::shared_ptr<Model> model_;
  std::vector<ForwardBatch> batches_;
  std::vector<std::vector<float>> ref_logits_;
  Cells ref_;
};

TEST_F(StageSlices, TensorParallel) {
  for (const std::string p : {"tp=2", "tp=4", "tp=8", "tp=4,weights=full"}) check(p);
}
TEST_F(StageSlices, DataParallelAndPipeline) {
  for (const std::string p : {"dp=2", "dp=3", "pp=2,layers=3+2", "pp=5", "dp=2,pp=2,layers=1+4"}) check(p);
}
TEST_F(StageSlices, Mixed) {
  for (const std::string p : {"tp=2,pp=2,layers=2+3", "dp=2,tp=2", "shift:sp=2,tp=2"}) check(p);
}
TEST_F(StageSlices, Helix) {
  for (const std::string p : {"kvp=2,tpa=2", "kvp=4,tpa=1", "kvp=2,tpa=4", "dp=2,kvp=2,tpa=1"}) check(p);
}

// HOP-B changes when the all-to-all runs, not what is computed: logits and every stored K/V are
// the same bits with it on and off (pure rescheduling).
TEST_F(StageSlices, HelixHopBOnAndOffGiveTheSameBits) {
  for (const std::string p : {"kvp=2,tpa=2", "kvp=4,tpa=1"}) {
    const Run on = run(p), off = run(p + ",hopb=off");
    ASSERT_EQ(on.logits.size(), off.logits.size());
    for (size_t s = 0; s < on.logits.size(); ++s) {
      ASSERT_EQ(on.logits[s].size(), off.logits[s].size());
      EXPECT_EQ(std::memcmp(on.logits[s].data(), off.logits[s].data(), on.logits[s].size() * sizeof(float)), 0)
          << p << " step " << s;
    }
    for (size_t r = 0; r < on.ranks.size(); ++r) EXPECT_TRUE(on.ranks[r].cells == off.ranks[r].cells) << p << " rank " << r;
  }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// The count the Helix stage turns positions into, against a walk over the positions.
TEST(HelixKeysHeld, MatchesANaiveCount) {
  for (int64_t block : {1, 4, 16})
    for (int64_t k : {2, 3, 5})
      for (int64_t me = 0; me < k; ++me) {
        int64_t naive = 0;
        for (int64_t end = 0; end <= 200; ++end) {
          ASSERT_EQ(helix_keys_held(end, block, k, me), naive) << block << " " << k << " " << me << " " << end;
          if ((end / block) % k == me) ++naive;
        }
      }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Helix's local attention the way the stage runs it: keys in blocks of 4 round-robin over k shards,
// each shard's blocks as one compact paged sequence and each query at its held-key count
// (helix_keys_held), then the exact LSE merge — equal to attention over all keys within
// 1e-5 * (1 + max|V|) (f32 softmax over 61 keys, merge of k parts). Early queries see no key of
// the later shards: their parts have lse = -inf and weigh nothing.
TEST(HelixKeysHeld, RoundRobinShardsMergeToFullAttention) {
  const int n_ctx = 61, n_heads = 4, hd = 16, B = 4;
  Rng rng(3);
  auto fill = [&](std::vector<float>& v) {
    for (float& x : v) x = float(rng.uniform() * 2 - 1);
  };
  std::vector<float> q(size_t(n_ctx * n_heads * hd)), k(size_t(n_ctx * hd)), v(k.size());
  fill(q), fill(k), fill(v);
  std::vector<int32_t> pos(n_ctx);
  for (int i = 0; i < n_ctx; ++i) pos[size_t(i)] = i;
  const kernels::AttentionShape s{n_heads, 1, hd, 0.25f};
  const int64_t row = n_heads * hd;
  std::vector<float> full(size_t(n_ctx * row)), full_lse(size_t(n_ctx * n_heads));
  kernels::attention_ref(q.data(), n_ctx, row, pos.data(), kernels::KvView::contiguous(k.data(), v.data(), 1, hd, n_ctx),
                         0, n_ctx, s, full.data(), row, full_lse.data());
  for (int shards : {2, 3, 5}) {
    std::vector<std::vector<float>> parts(size_t(shards), std::vector<float>(full.size())),
        lses(size_t(shards), std::vector<float>(full_lse.size()));
    for (int me = 0; me < shards; ++me) {
      // The shard's pages: its blocks' keys, block after block.
      std::vector<float> pk, pv;
      std::vector<int32_t> table;
      for (int b = 0; b * B < n_ctx; ++b) {
        if (b % shards != me) continue;
        table.push_back(int32_t(table.size()));
        for (int p = b * B; p < (b + 1) * B; ++p)
          for (int e = 0; e < hd; ++e) {
            pk.push_back(p < n_ctx ? k[size_t(p * hd + e)] : 0.0f);
            pv.push_back(p < n_ctx ? v[size_t(p * hd + e)] : 0.0f);
          }
      }
      if (table.empty()) table.push_back(0), pk.assign(size_t(B * hd), 0.0f), pv = pk;
      kernels::KvView view;
      view.k = pk.data(), view.v = pv.data(), view.block_table = table.data();
      view.block_size = B, view.block_stride = B * hd, view.head_stride = 0, view.pos_stride = hd;
      std::vector<int32_t> vpos(n_ctx);
      for (int t = 0; t < n_ctx; ++t) vpos[size_t(t)] = int32_t(helix_keys_held(t + 1, B, shards, me) - 1);
      kernels::attention(q.data(), n_ctx, row, vpos.data(), view, 0, helix_keys_held(n_ctx, B, shards, me), s,
                         parts[size_t(me)].data(), row, lses[size_t(me)].data(), nullptr);
    }
    EXPECT_TRUE(std::isinf(lses[size_t(shards - 1)][0]));  // query 0 sees nothing on the last shard
    std::vector<const float*> pp, pl;
    for (int i = 0; i < shards; ++i) pp.push_back(parts[size_t(i)].data()), pl.push_back(lses[size_t(i)].data());
    std::vector<float> merged(full.size());
    kernels::merge_attention(pp.data(), pl.data(), shards, int64_t(n_ctx) * n_heads, hd, merged.data(), nullptr);
    float maxv = 0;
    for (float x : v) maxv = std::max(maxv, std::fabs(x));
    int64_t bad = 0;
    for (size_t i = 0; i < full.size(); ++i) bad += std::fabs(merged[i] - full[i]) > 1e-5f * (1 + maxv);
    EXPECT_EQ(bad, 0) << shards << " shards";
  }
}

}  // namespace
}  // namespace loom
