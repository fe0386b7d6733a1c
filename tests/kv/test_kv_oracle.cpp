// The tests' naive KV placement oracle (kv_oracle.h) against stores whose holdings are known by
// construction: a store reserved for a rank's own placement passes, a store filled for another
// rank's placement, missing one block or holding one page too many is reported. Exactness class:
// set equality of held cells (which positions a rank holds), no values involved.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv/kv_oracle.h"
#include "kv/kv_store.h"
#include "parallel/kv_placement.h"
#include "parallel/plan.h"

namespace loom {
namespace {

using test::naive_holdings_diff;

constexpr int kBlock = 16, kDh = 4;

// 8 query heads, 4 KV heads (G = 2), 4 layers.
ModelShape shape() {
  ModelShape s;
  s.n_heads = 8;
  s.n_kv_heads = 4;
  s.head_dim = kDh;
  s.ffn_dim = 64;
  s.n_layers = 4;
  s.d_model = 32;
  return s;
}

const std::vector<SeqExtent> kSeqs = {{0, 1}, {1, 15}, {2, 16}, {3, 17}, {4, 40}, {7, 3}, {10, 64}};

// A store holding what kv_placement(plan) gives rank `as` for kSeqs.
std::unique_ptr<KvStore> filled_as(const std::string& plan, int as) {
  const ModelShape m = shape();
  auto kv = std::make_unique<KvStore>(m.n_layers, m.n_kv_heads, kDh, kBlock, 4096);
  const KvPlacement pl = kv_placement(Plan::parse(plan), m);
  for (const SeqExtent& s : kSeqs) kv->reserve(s.id, s.n_tokens, pl.entries(as));
  return kv;
}

std::string diff(const KvStore& kv, const std::string& plan, int rank) {
  return naive_holdings_diff(kv, Plan::parse(plan), shape(), rank, kSeqs);
}

// Every rank of every plan: the store the engine's placement reserves is the oracle's set.
TEST(KvOracle, AcceptsEveryRanksOwnPlacement) {
  for (const std::string plan : {"tp=1", "tp=2", "tp=4", "tp=8", "dp=2", "dp=2,tp=2", "sp=2,tp=2", "shift:sp=2,tp=2",
                                 "sp=4,tp=2", "pp=2", "pp=2,layers=1+3", "pp=2,tp=2", "kvp=2,tpa=2",
                                 "kvp=4,tpa=2", "dp=2,kvp=2,tpa=1,block=32"}) {
    for (int r = 0; r < Plan::parse(plan).size(); ++r)
      EXPECT_EQ(diff(*filled_as(plan, r), plan, r), "") << plan << " rank " << r;
  }
}

// Cases worked out by hand from the shape (H = 8, K = 4, G = 2, L = 4).
TEST(KvOracle, ReportsAStoreFilledForAnotherRank) {
  // tp=2: rank 0 holds KV heads 0-1, rank 1 heads 2-3: rank 1's store checked as rank 0 is wrong
  // at every position of every head of every layer: 4 heads x 4 layers x 156 tokens = 2496 cells.
  EXPECT_EQ(diff(*filled_as("tp=2", 1), "tp=2", 0),
            "rank 0 layer 0 kv head 0 sequence 0 position 0: not held, the plan says held; "
            "rank 0 layer 0 kv head 1 sequence 0 position 0: not held, the plan says held; "
            "rank 0 layer 0 kv head 2 sequence 0 position 0: held, the plan says not; "
            "rank 0 layer 0 kv head 3 sequence 0 position 0: held, the plan says not; "
            "and 2492 more cells");
  // tp=8: query heads 0 and 1 both use KV head 0, so ranks 0 and 1 hold the same cells (GQA
  // replication): rank 1's store is right for rank 0; rank 2's (KV head 1) is not.
  EXPECT_EQ(diff(*filled_as("tp=8", 1), "tp=8", 0), "");
  EXPECT_NE(diff(*filled_as("tp=8", 2), "tp=8", 0), "");
  // dp=2: replica 1 holds the odd sequences, replica 0 the even ones.
  EXPECT_NE(diff(*filled_as("dp=2", 1), "dp=2", 0), "");
  // pp=2: stage 1 holds layers 2-3, stage 0 layers 0-1.
  EXPECT_NE(diff(*filled_as("pp=2", 1), "pp=2", 0), "");
  // sp=2,tp=2: rank (sp 1, tp 0) attends query heads 2-3 (KV head 1), rank 0 heads 0-1 (KV head 0).
  EXPECT_NE(diff(*filled_as("sp=2,tp=2", 1), "sp=2,tp=2", 0), "");
  // Helix kvp=2, block 16: KVP rank 1 (global rank 2 under tpa=2) holds blocks 1, 3, ...; as
  // KVP rank 0 it holds positions 16-31 of sequence 3 (17 tokens: position 16) it must not.
  EXPECT_NE(diff(*filled_as("kvp=2,tpa=2", 2), "kvp=2,tpa=2", 0), "");
  // The same store is wrong under another plan: tp=2's rank 0 holds every position, Helix's
  // KVP rank 0 only the even blocks.
  EXPECT_NE(diff(*filled_as("tp=2", 0), "kvp=2,tpa=2", 0), "");
  EXPECT_NE(diff(*filled_as("kvp=2,tpa=2", 0), "tp=2", 0), "");
}

TEST(KvOracle, ReportsOneMissingBlockAndOneExtraPage) {
  // tp=2 rank 1: KV heads 2-3 of every layer.
  auto kv = filled_as("tp=2", 1);
  ASSERT_EQ(diff(*kv, "tp=2", 1), "");
  kv->drop(4, 3, 3, 1);  // sequence 4 (40 tokens), layer 3, head 3: positions 16-31 gone
  EXPECT_EQ(diff(*kv, "tp=2", 1),
            "rank 1 layer 3 kv head 3 sequence 4 position 16: not held, the plan says held; "
            "rank 1 layer 3 kv head 3 sequence 4 position 17: not held, the plan says held; "
            "rank 1 layer 3 kv head 3 sequence 4 position 18: not held, the plan says held; "
            "rank 1 layer 3 kv head 3 sequence 4 position 19: not held, the plan says held; "
            "and 12 more cells");
  kv->ensure_page(4, 3, 3, 1);
  ASSERT_EQ(diff(*kv, "tp=2", 1), "");
  kv->ensure_page(7, 2, 0, 0);  // sequence 7 (3 tokens), layer 2, head 0: not this rank's head
  EXPECT_EQ(diff(*kv, "tp=2", 1),
            "rank 1 layer 2 kv head 0 sequence 7 position 0: held, the plan says not; "
            "rank 1 layer 2 kv head 0 sequence 7 position 1: held, the plan says not; "
            "rank 1 layer 2 kv head 0 sequence 7 position 2: held, the plan says not");
}

}  // namespace
}  // namespace loom
