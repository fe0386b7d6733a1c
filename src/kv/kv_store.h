// KvStore: one rank's paged KV cache. It holds exactly the (layer, KV head, sequence, token
// block) cells its plan's placement gives the rank (parallel/kv_placement.h) and nothing else:
// a tensor-parallel rank only its heads, a pipeline stage only its layers, a DP replica only its
// sequences, a Helix KVP rank only its round-robin blocks (ARCHITECTURE.md: KV placement derives
// from the plan).
//
// Storage is a pool of fixed-size pages, one page per (sequence, layer, KV head, logical block of
// block_size tokens), each [block_size][head_dim] floats of K and the same of V. The page is the
// same size under every plan (only head_dim and block_size fix it), so a switch between plans
// whose placements differ (kv_transfer.h) allocates pages for the cells a rank gains, frees the
// pages of the cells it loses, and leaves every cell it keeps where it is (no copy, no
// re-layout of the arena).
//
// Page tables: for each (sequence, layer, KV head) a vector indexed by logical block, holding the
// page or kNoPage where the rank does not store that block. Attention reads them as the block
// table of its key sequence (device/device.h PagedKv, AttentionJob::pages).
//
// Where the pages live: in the memory of the store's Device (device/device.h): host memory for the
// CPU device, device memory for a GPU. The tables and the page bookkeeping stay on the host either
// way; k(page) / v(page) are pointers into the device's memory, so code that reads or writes page
// contents goes through the device's copies (the stages, kv_transfer.h, kv_tier.h).
//
// Pages are allocated lowest id first from a fresh store and reused LIFO, so a run is
// deterministic. Running out of pages is a programmer error (LOOM_CHECK): the scheduler's block
// accounting (block_allocator.h, KvPoolShape) admits only what every rank's store can hold.
//
// Thread-safety: one rank's thread (the forward pass reads tables from the pool's workers while
// nothing is allocated).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/device.h"
#include "parallel/kv_placement.h"

namespace loom {

inline constexpr int32_t kNoPage = -1;

class KvStore {
 public:
  // A store for a model of n_layers x n_kv_heads (global counts: the tables are indexed by the
  // model's layer and KV head numbers) with `num_pages` pages of block_size x head_dim floats, in
  // the memory of `device` (which must outlive the store; null: host memory of a CPU device of
  // the store's own).
  KvStore(int n_layers, int n_kv_heads, int head_dim, int block_size, int64_t num_pages, Device* device = nullptr);
  ~KvStore();
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  Device& device() const { return *dev_; }
  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int block_size() const { return block_size_; }
  int64_t page_floats() const { return int64_t(block_size_) * head_dim_; }
  int64_t page_bytes() const { return 2 * page_floats() * int64_t(sizeof(float)); }  // K and V
  int64_t num_pages() const { return num_pages_; }
  int64_t free_pages() const { return int64_t(free_.size()); }
  int64_t used_pages() const { return num_pages_ - free_pages(); }
  int64_t bytes() const { return num_pages_ * page_bytes(); }

  float* k(int32_t page) { return k_.data() + int64_t(page) * page_floats(); }
  float* v(int32_t page) { return v_.data() + int64_t(page) * page_floats(); }
  const float* k(int32_t page) const { return k_.data() + int64_t(page) * page_floats(); }
  const float* v(int32_t page) const { return v_.data() + int64_t(page) * page_floats(); }
  // The page pool: page p's K at k_pages() + p * page_floats() (device memory).
  float* k_pages() { return k_.data(); }
  float* v_pages() { return v_.data(); }
  const float* k_pages() const { return k_.data(); }
  const float* v_pages() const { return v_.data(); }

  // The page table of (seq, layer, kv_head): one entry per logical block it covers (kNoPage where
  // not held); empty when the rank holds nothing of it.
  std::span<const int32_t> table(int64_t seq, int layer, int kv_head) const;
  int32_t page(int64_t seq, int layer, int kv_head, int64_t block) const;

  // Gives every cell of positions [0, n_tokens) of `seq` that `holds` selects (the rank's entries of
  // a KvPlacement) a page. Blocks must be whole for the rule: a token rule's block_tokens is a
  // multiple of block_size (LOOM_CHECK).
  void reserve(int64_t seq, int64_t n_tokens, const std::vector<KvEntry>& holds);
  // The pages reserve(seq, n_tokens, holds) would allocate now.
  int64_t pages_to_reserve(int64_t seq, int64_t n_tokens, const std::vector<KvEntry>& holds) const;
  // The page of one cell, allocated when missing (used by the migration's unpack).
  int32_t ensure_page(int64_t seq, int layer, int kv_head, int64_t block);
  // Frees one cell's page (no-op when not held).
  void drop(int64_t seq, int layer, int kv_head, int64_t block);
  // Frees every page of `seq`.
  void release(int64_t seq);
  // Sequences holding at least one page, ascending.
  std::vector<int64_t> sequences() const;

  // The positions of [0, n_tokens) held for (seq, layer, kv_head): whole blocks, clipped to
  // n_tokens, merged into ascending disjoint ranges (what KvPlacement::stored_ranges gives for a
  // placement, so the two compare directly).
  std::vector<Range> held_ranges(int64_t seq, int layer, int kv_head, int64_t n_tokens) const;

 private:
  using Tables = std::vector<std::vector<int32_t>>;  // [layer * n_kv_heads + head][block]
  int32_t alloc_page();
  std::vector<int32_t>& table_mut(int64_t seq, int layer, int kv_head);

  int n_layers_, n_kv_heads_, head_dim_, block_size_;
  int64_t num_pages_;
  std::unique_ptr<Device> own_dev_;
  Device* dev_;
  DeviceArray<float> k_, v_;
  std::vector<int32_t> free_;  // stack: back() is handed out next
  std::unordered_map<int64_t, Tables> seqs_;
};

// Checks that `store` holds exactly what `placement` gives `rank` for these sequences (every cell
// the placement assigns has a page; no other cell has one). Returns "" when it does, otherwise a
// description of the first differences (rank, layer, head, sequence, ranges held vs wanted).
std::string check_holdings(const KvStore& store, const KvPlacement& placement, int rank,
                           const std::vector<SeqExtent>& seqs);

}  // namespace loom
