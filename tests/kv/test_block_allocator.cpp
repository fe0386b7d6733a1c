// BlockAllocator / BlockTable invariants, checked against naive models kept here.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "kv/block_allocator.h"

namespace loom {
namespace {

TEST(BlockAllocator, HandsOutEveryBlockOnceLowestFirst) {
  BlockAllocator a(7);
  EXPECT_EQ(a.num_free(), 7);
  for (int i = 0; i < 7; ++i) {
    EXPECT_TRUE(a.can_allocate(1));
    EXPECT_EQ(a.allocate(), i);
    EXPECT_EQ(a.ref_count(i), 1);
  }
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_EQ(a.num_used(), 7);
  EXPECT_FALSE(a.can_allocate(1));
  EXPECT_THROW(a.allocate(), InternalError);
}

TEST(BlockAllocator, AllOrNothing) {
  BlockAllocator a(5);
  std::vector<BlockId> got;
  EXPECT_TRUE(a.allocate(3, &got));
  EXPECT_EQ(got.size(), 3u);
  EXPECT_FALSE(a.allocate(3, &got));  // only 2 left
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_TRUE(a.allocate(0, &got));
}

TEST(BlockAllocator, RefCountsAndDoubleFree) {
  BlockAllocator a(3);
  const BlockId b = a.allocate();
  a.share(b);
  a.share(b);
  EXPECT_EQ(a.ref_count(b), 3);
  a.free(b);
  a.free(b);
  EXPECT_EQ(a.num_free(), 2);  // still referenced once
  a.free(b);
  EXPECT_EQ(a.num_free(), 3);
  EXPECT_EQ(a.ref_count(b), 0);
  EXPECT_THROW(a.free(b), InternalError);   // double free
  EXPECT_THROW(a.share(b), InternalError);  // share of a free block
  EXPECT_THROW(a.free(3), InternalError);   // out of range
  EXPECT_THROW(a.free(-1), InternalError);
  EXPECT_EQ(a.allocate(), b);  // freed block is reused first
}

// Random allocate/share/free against a naive map of reference counts.
TEST(BlockAllocator, RandomOpsMatchNaiveModel) {
  for (int n : {1, 7, 17, 97}) {
    BlockAllocator a(n);
    std::map<BlockId, int> ref;  // naive: referenced blocks only
    Rng rng(uint64_t(n) * 31 + 5);
    for (int it = 0; it < 3000; ++it) {
      const int op = int(rng.below(3));
      if (op == 0) {
        if (int(ref.size()) == n) {
          EXPECT_FALSE(a.can_allocate(1));
          continue;
        }
        const BlockId b = a.allocate();
        ASSERT_EQ(ref.count(b), 0u) << "handed out a referenced block " << b;
        ref[b] = 1;
      } else if (!ref.empty()) {
        auto it2 = ref.begin();
        std::advance(it2, long(rng.below(ref.size())));
        if (op == 1) {
          a.share(it2->first);
          ++it2->second;
        } else {
          a.free(it2->first);
          if (--it2->second == 0) ref.erase(it2);
        }
      }
      ASSERT_EQ(a.num_free(), n - int(ref.size()));
      for (auto& [b, c] : ref) ASSERT_EQ(a.ref_count(b), c);
    }
  }
}

TEST(BlockTable, BlocksNeededMatchesCeilFormula) {
  for (int bs : {1, 4, 16, 17}) {
    BlockAllocator a(1000);
    BlockTable t(bs);
    Rng rng{uint64_t(bs)};
    int slots = 0;
    for (int it = 0; it < 50; ++it) {
      const int more = int(rng.below(40));
      const int naive = (slots + more + bs - 1) / bs - (slots + bs - 1) / bs;
      ASSERT_EQ(t.blocks_needed(more), naive) << "bs " << bs << " slots " << slots;
      ASSERT_TRUE(t.append_slots(more, a));
      slots += more;
      ASSERT_EQ(t.num_slots(), slots);
      ASSERT_EQ(t.num_blocks(), (slots + bs - 1) / bs);
    }
    for (int p = 0; p < slots; ++p) ASSERT_EQ(t.block_of(p), t.blocks()[size_t(p / bs)]);
    EXPECT_THROW(t.block_of(slots), InternalError);
    t.release(a);
    EXPECT_EQ(a.num_free(), 1000);
    EXPECT_EQ(t.num_slots(), 0);
  }
}

TEST(BlockTable, AppendIsAllOrNothing) {
  BlockAllocator a(2);
  BlockTable t(4);
  EXPECT_TRUE(t.append_slots(5, a));  // 2 blocks
  EXPECT_TRUE(t.append_slots(3, a));  // fills the second block, no new one
  EXPECT_FALSE(t.append_slots(1, a));
  EXPECT_EQ(t.num_slots(), 8);
  EXPECT_EQ(t.num_blocks(), 2);
}

TEST(BlockTable, ForkSharesAndReleasesIndependently) {
  BlockAllocator a(7);
  BlockTable t(4);
  ASSERT_TRUE(t.append_slots(9, a));  // 3 blocks
  BlockTable f = t.fork(a);
  EXPECT_EQ(f.blocks(), t.blocks());
  for (BlockId b : t.blocks()) EXPECT_EQ(a.ref_count(b), 2);
  EXPECT_EQ(a.num_free(), 4);
  t.release(a);
  EXPECT_EQ(a.num_free(), 4);  // fork still holds them
  for (BlockId b : f.blocks()) EXPECT_EQ(a.ref_count(b), 1);
  f.release(a);
  EXPECT_EQ(a.num_free(), 7);
}

}  // namespace
}  // namespace loom
