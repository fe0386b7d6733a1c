// A stage on its rank equals the matching slice of the single-rank layer (stage.h): after two
// steps (prefill chunks of three sequences, then decodes beside a chunk), every rank's KV store
// holds exactly its placement's cells (check_holdings), and each cell's K/V is the single-rank
// engine's for that (sequence, layer, KV head, position):
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

  void check(const std::string& plan_text) {
    SCOPED_TRACE(plan_text);
    const Plan plan = Plan::parse(plan_text);
    const PlanSet set = PlanSet::make({plan}, ModelShape::from(model_->config, weight_block_elems(*model_)));
    std::vector<RankOut> ranks(size_t(plan.size()));
    std::vector<std::vector<float>> logits;
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
      r.holdings = check_holdings(e.kv(), set.placement(0), world.rank(), kExtents);
      r.layout = rank_layout(plan, set.shape(), world.rank());
      std::lock_guard<std::mutex> lock(mu);
      ranks[size_t(world.rank())] = std::move(r);
      if (is_sampler(ranks[size_t(world.rank())].layout, plan) && ranks[size_t(world.rank())].layout.dp == 0)
        logits = std::move(mine);
    });
    const bool reduces = plan.tp > 1 || plan.sp > 1;  // a TP all-reduce reorders sums after layer 0
    for (const RankOut& r : ranks) {
      EXPECT_EQ(r.holdings, "") << "rank " << r.layout.rank;
      EXPECT_FALSE(r.cells.empty()) << "rank " << r.layout.rank;
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

}  // namespace
}  // namespace loom
