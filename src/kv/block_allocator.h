// Paged KV-cache bookkeeping: physical block allocation with reference counts, per-sequence
// block tables, and KV pools per plan (vLLM's PagedAttention, sections 4.2-4.3).
//
// Only ids are managed here (the scheduler's accounting); each rank stores K/V in its own pages
// (kv_store.h), found by sequence id.
// Not thread-safe: owned by the scheduler on rank 0, which is single-threaded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace loom {
inline constexpr int kDefaultKvBlockSize = 16;  // tokens per KV block (vLLM's default)
}  // namespace loom


namespace loom {

using BlockId = int32_t;  // physical block index in [0, num_blocks)
inline constexpr BlockId kNoBlock = -1;

// Fixed pool of `num_blocks` physical blocks.
// Invariants: every block is either on the free list (ref_count 0) or referenced (ref_count > 0),
// never both; num_free() + number of referenced blocks == num_blocks(). Freeing a block whose
// count is already 0 is a programmer error (LOOM_CHECK, "double free").
// Blocks are handed out lowest id first from a fresh pool; a freed block is reused first (LIFO),
// which keeps runs deterministic.
class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);

  int num_blocks() const { return int(ref_counts_.size()); }
  int num_free() const { return int(free_.size()); }
  int num_used() const { return num_blocks() - num_free(); }
  bool can_allocate(int n) const { return n <= num_free(); }

  // Takes one free block (ref_count becomes 1). LOOM_CHECK when none is free: callers test
  // can_allocate() first.
  BlockId allocate();
  // All-or-nothing: appends n fresh blocks to *out and returns true, or changes nothing.
  bool allocate(int n, std::vector<BlockId>* out);
  // Prefix sharing / fork: one more owner of a referenced block.
  void share(BlockId id);
  // One owner fewer; at 0 the block returns to the free list.
  void free(BlockId id);
  int ref_count(BlockId id) const;

 private:
  std::vector<int> ref_counts_;  // [num_blocks]
  std::vector<BlockId> free_;    // stack; back() is handed out next
};

// How the scheduler's KV blocks are pooled under a plan. DP replicas store disjoint sequences and
// Helix KVP ranks store round-robin blocks, so a logical block costs memory only on the ranks of
// its pool: block i of sequence s comes from pool (s mod dp) * kvp + (i mod kvp), and every pool
// holds blocks_per_pool blocks (what the least roomy rank serving it holds). One pool (dp = kvp =
// 1) is the plain cache every rank of the group stores for its heads and layers.
struct KvPoolShape {
  int dp = 1, kvp = 1;
  int blocks_per_pool = 0;
  int stripe = 1;  // scheduler blocks per Helix KVP block (the plan's block= over the KV block size)

  int n_pools() const { return dp * kvp; }
  int64_t total_blocks() const { return int64_t(n_pools()) * blocks_per_pool; }
  int pool_of(int64_t seq, int64_t block) const {
    return int(((seq % dp) + dp) % dp) * kvp + int((block / stripe) % kvp);
  }
  // Blocks a sequence of n_blocks logical blocks takes from its most loaded pool (the stripe of
  // KVP rank 0, which the round-robin fills first).
  int64_t max_pool_blocks(int64_t n_blocks) const {
    const int64_t cycle = int64_t(stripe) * kvp;
    return n_blocks / cycle * stripe + std::min<int64_t>(n_blocks % cycle, stripe);
  }
  std::string to_string() const;
  bool operator==(const KvPoolShape&) const = default;
};

// The pools of a KvPoolShape, one BlockAllocator each; global block ids are
// pool * blocks_per_pool + (id inside the pool).
class KvBlockPools {
 public:
  explicit KvBlockPools(const KvPoolShape& shape);
  const KvPoolShape& shape() const { return shape_; }
  int num_blocks() const { return int(shape_.total_blocks()); }
  int num_free() const;
  int num_used() const { return num_blocks() - num_free(); }
  int num_free(int pool) const { return pools_[size_t(pool)].num_free(); }
  int pool_of_id(BlockId id) const { return id / shape_.blocks_per_pool; }
  BlockId allocate(int pool);
  void free(BlockId id);

 private:
  KvPoolShape shape_;
  std::vector<BlockAllocator> pools_;
};

// Logical -> physical mapping of one sequence: logical block i holds positions
// [i*block_size, (i+1)*block_size) at physical block blocks()[i].
// num_slots() = positions with a reserved slot (<= capacity() = blocks().size() * block_size).
class BlockTable {
 public:
  explicit BlockTable(int block_size = kDefaultKvBlockSize);

  int block_size() const { return block_size_; }
  const std::vector<BlockId>& blocks() const { return blocks_; }
  int num_blocks() const { return int(blocks_.size()); }
  int num_slots() const { return num_slots_; }
  int capacity() const { return num_blocks() * block_size_; }

  // Extra physical blocks needed so that n_more further positions have slots.
  int blocks_needed(int n_more) const;
  // Reserves slots for n_more positions, taking blocks from `alloc`. All-or-nothing: returns
  // false (and changes nothing) when the allocator has too few free blocks.
  bool append_slots(int n_more, BlockAllocator& alloc);
  // The same over pooled blocks: logical block i of sequence `seq` from pool shape.pool_of(seq, i).
  bool append_slots(int n_more, KvBlockPools& pools, int64_t seq);
  // Blocks per pool (indexed by pool) the next n_more positions need.
  std::vector<int> pool_needs(int n_more, const KvPoolShape& shape, int64_t seq) const;
  void release(KvBlockPools& pools);
  // Physical block and offset inside it of position `pos` (< num_slots()).
  BlockId block_of(int pos) const;
  int offset_in_block(int pos) const { return pos % block_size_; }
  // A copy that shares every block (ref_count + 1 each): prefix sharing / parallel sampling.
  BlockTable fork(BlockAllocator& alloc) const;
  // Drops every block reference (returning blocks at count 0 to the free list); empty afterwards.
  void release(BlockAllocator& alloc);

 private:
  int block_size_;
  int num_slots_ = 0;
  std::vector<BlockId> blocks_;
};

// MemAvailable from /proc/meminfo in bytes; throws loom::Error when it cannot be read.
int64_t mem_available_bytes();

}  // namespace loom
