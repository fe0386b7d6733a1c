#include "kv/block_allocator.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/sysmem.h"

namespace loom {

BlockAllocator::BlockAllocator(int num_blocks) {
  if (num_blocks < 0) fail("BlockAllocator: num_blocks must be >= 0, found ", num_blocks);
  ref_counts_.assign(size_t(num_blocks), 0);
  free_.reserve(size_t(num_blocks));
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(i);  // back() = 0 first
}

BlockId BlockAllocator::allocate() {
  LOOM_CHECK(!free_.empty(), "no free KV block (test can_allocate first)");
  const BlockId id = free_.back();
  free_.pop_back();
  LOOM_CHECK(ref_counts_[size_t(id)] == 0, "free block ", id, " has references");
  ref_counts_[size_t(id)] = 1;
  return id;
}

bool BlockAllocator::allocate(int n, std::vector<BlockId>* out) {
  LOOM_CHECK(n >= 0);
  if (!can_allocate(n)) return false;
  for (int i = 0; i < n; ++i) out->push_back(allocate());
  return true;
}

void BlockAllocator::share(BlockId id) {
  LOOM_CHECK(id >= 0 && id < num_blocks(), "block id ", id, " out of range");
  LOOM_CHECK(ref_counts_[size_t(id)] > 0, "share of free block ", id);
  ++ref_counts_[size_t(id)];
}

void BlockAllocator::free(BlockId id) {
  LOOM_CHECK(id >= 0 && id < num_blocks(), "block id ", id, " out of range");
  LOOM_CHECK(ref_counts_[size_t(id)] > 0, "double free of block ", id);
  if (--ref_counts_[size_t(id)] == 0) free_.push_back(id);
}

int BlockAllocator::ref_count(BlockId id) const {
  LOOM_CHECK(id >= 0 && id < num_blocks(), "block id ", id, " out of range");
  return ref_counts_[size_t(id)];
}

BlockTable::BlockTable(int block_size) : block_size_(block_size) {
  LOOM_CHECK(block_size > 0, "block_size ", block_size);
}

int BlockTable::blocks_needed(int n_more) const {
  LOOM_CHECK(n_more >= 0);
  const int64_t want = (int64_t(num_slots_) + n_more + block_size_ - 1) / block_size_;
  return want > num_blocks() ? int(want - num_blocks()) : 0;
}

bool BlockTable::append_slots(int n_more, BlockAllocator& alloc) {
  const int need = blocks_needed(n_more);
  if (!alloc.allocate(need, &blocks_)) return false;
  num_slots_ += n_more;
  return true;
}

std::string KvPoolShape::to_string() const {
  return cat(n_pools(), " pool", n_pools() == 1 ? "" : "s", " (dp ", dp, " x kvp ", kvp,
             stripe > 1 ? cat(", stripes of ", stripe, " blocks") : std::string(), ") of ", blocks_per_pool, " blocks");
}

KvBlockPools::KvBlockPools(const KvPoolShape& shape) : shape_(shape) {
  if (shape.dp < 1 || shape.kvp < 1 || shape.stripe < 1 || shape.blocks_per_pool < 0)
    fail("KV pools need dp, kvp >= 1 and blocks_per_pool >= 0, got ", shape.to_string());
  if (shape.total_blocks() > int64_t(INT32_MAX)) fail("KV pools: ", shape.to_string(), " exceed 2^31 block ids");
  for (int p = 0; p < shape.n_pools(); ++p) pools_.emplace_back(shape.blocks_per_pool);
}

int KvBlockPools::num_free() const {
  int n = 0;
  for (const BlockAllocator& a : pools_) n += a.num_free();
  return n;
}

BlockId KvBlockPools::allocate(int pool) {
  LOOM_CHECK(pool >= 0 && pool < shape_.n_pools(), "pool ", pool, " of ", shape_.n_pools());
  return BlockId(pool * shape_.blocks_per_pool + pools_[size_t(pool)].allocate());
}

void KvBlockPools::free(BlockId id) {
  LOOM_CHECK(id >= 0 && id < num_blocks(), "block id ", id, " of ", num_blocks());
  const int pool = pool_of_id(id);
  pools_[size_t(pool)].free(BlockId(id - pool * shape_.blocks_per_pool));
}

std::vector<int> BlockTable::pool_needs(int n_more, const KvPoolShape& shape, int64_t seq) const {
  std::vector<int> need(size_t(shape.n_pools()), 0);
  const int extra = blocks_needed(n_more);
  if (extra <= 0) return need;
  if (shape.kvp == 1) {  // every block of the sequence in its replica's one pool
    need[size_t(shape.pool_of(seq, 0))] = extra;
    return need;
  }
  for (int i = 0; i < extra; ++i) ++need[size_t(shape.pool_of(seq, num_blocks() + i))];
  return need;
}

bool BlockTable::append_slots(int n_more, KvBlockPools& pools, int64_t seq) {
  const std::vector<int> need = pool_needs(n_more, pools.shape(), seq);
  for (size_t p = 0; p < need.size(); ++p)
    if (need[p] > pools.num_free(int(p))) return false;
  const int extra = blocks_needed(n_more);
  for (int i = 0; i < extra; ++i) blocks_.push_back(pools.allocate(pools.shape().pool_of(seq, num_blocks())));
  num_slots_ += n_more;
  return true;
}

void BlockTable::release(KvBlockPools& pools) {
  for (BlockId b : blocks_) pools.free(b);
  blocks_.clear();
  num_slots_ = 0;
}

BlockId BlockTable::block_of(int pos) const {
  LOOM_CHECK(pos >= 0 && pos < num_slots_, "position ", pos, " outside ", num_slots_, " slots");
  return blocks_[size_t(pos / block_size_)];
}

BlockTable BlockTable::fork(BlockAllocator& alloc) const {
  BlockTable copy = *this;
  for (BlockId b : blocks_) alloc.share(b);
  return copy;
}

void BlockTable::release(BlockAllocator& alloc) {
  for (BlockId b : blocks_) alloc.free(b);
  blocks_.clear();
  num_slots_ = 0;
}

int64_t mem_available_bytes() {
  const std::optional<int64_t> a = mem_available();
  if (!a) fail("cannot read MemAvailable from /proc/meminfo to size the KV cache; pass --kv-cache-bytes");
  return *a;
}

}  // namespace loom
