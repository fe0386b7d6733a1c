// KvTier: Seesaw's CPU KV cache storage (../shared/papers/004 §4.2 "tiered KV cache buffering",
// W6/W8, and §5.2's HND layout, W12): a host store of whole sequences' KV, with its own capacity
// (`--cpu-kv-bytes`), shared by the ranks of a host, that is the host endpoint of the one KV
// migration mechanism (kv_transfer.h): a sequence leaves the ranks' paged stores for the tier
// (swap-out: every rank writes the cells its plan's placement gives it, the lowest holder of a
// GQA-replicated cell writing it) and comes back under any other placement (swap-in: every rank
// reads the cells the new placement gives it). Both run from the same KvPlacement the migration
// uses, and end with the same check_holdings of what a rank's store holds.
//
// Layout: one region per sequence, HND: K then V, each [layer][kv head][token][head_dim] f32, so a
// rank's shard under TP (a range of KV heads of every layer) or PP (a range of layers, every head)
// is one contiguous run per (layer, head) and a run of consecutive heads is contiguous too.
//
// Memory: a KvTierArena is the bytes (threads: one allocation in the process, shared by every
// rank's engine; MPI: one MPI shared-memory window per host, Communicator::allocate_host_shared).
// A KvTier is one rank's index into it. Regions are handed out by a bump pointer that resets when
// the tier is empty: Seesaw fills the tier during a prefill phase and drains it during a decode
// phase (§4.2 transition-minimizing scheduling: the phase changes only when the tier is full or
// empty), so regions never fragment. Every rank applies the same reserve/release sequence (the
// step descriptors), so every rank's index gives the same offsets, and the scheduler's
// accounting (tokens x bytes_per_token against capacity) predicts exactly whether a sequence fits.
//
// Ordering: a swap-in of a sequence reads what other ranks wrote at its swap-out in an earlier
// step; RankEngine puts a barrier over the world between the two (and after the tier empties, so
// no rank writes a new phase's regions while another still reads the old ones).
//
// Thread-safety: a KvTier is one rank's; the arena is written by several ranks at disjoint cells.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "kv/kv_store.h"
#include "parallel/kv_placement.h"

namespace loom {

// The shared bytes of a tier. `data` stays valid while the arena lives.
struct KvTierArena {
  float* data = nullptr;
  int64_t bytes = 0;
  std::shared_ptr<void> owner;  // keeps the allocation (or the MPI window) alive
  // A process-memory arena of `bytes` (zero-filled).
  static std::shared_ptr<KvTierArena> allocate(int64_t bytes);
  // Collective over `group` (one host): one arena shared by its ranks (allocate_host_shared).
  static std::shared_ptr<KvTierArena> host_shared(Communicator& group, int64_t bytes);
};

// Bytes one token of the whole model's KV takes in the tier (K and V, every layer and KV head).
inline int64_t tier_bytes_per_token(int n_layers, int n_kv_heads, int head_dim) {
  return 2 * int64_t(n_layers) * n_kv_heads * head_dim * int64_t(sizeof(float));
}

class KvTier {
 public:
  KvTier(int n_layers, int n_kv_heads, int head_dim, std::shared_ptr<KvTierArena> arena);

  int64_t capacity_bytes() const { return arena_->bytes; }
  int64_t used_bytes() const { return top_; }  // bump pointer: bytes of the current fill
  int64_t bytes_per_token() const { return tier_bytes_per_token(n_layers_, n_kv_heads_, head_dim_); }
  bool empty() const { return seqs_.empty(); }
  int64_t num_sequences() const { return int64_t(seqs_.size()); }
  bool holds(int64_t seq) const { return seqs_.count(seq) != 0; }
  int64_t tokens(int64_t seq) const;
  // Whether a sequence of n_tokens fits after what the current fill holds.
  bool fits(int64_t n_tokens) const { return top_ + n_tokens * bytes_per_token() <= capacity_bytes(); }

  // A region for `seq` of n_tokens (LOOM_CHECK: not held yet and fits).
  void reserve(int64_t seq, int64_t n_tokens);
  // Forgets `seq` (no-op when absent); the bump pointer resets when the tier becomes empty.
  void release(int64_t seq);

  // [n_tokens][head_dim] K (V) rows of (seq, layer, kv head).
  float* k(int64_t seq, int layer, int kv_head);
  float* v(int64_t seq, int layer, int kv_head);

 private:
  struct Region {
    int64_t offset = 0;  // floats into the arena
    int64_t tokens = 0;
  };
  const Region& region(int64_t seq) const;
  int n_layers_, n_kv_heads_, head_dim_;
  std::shared_ptr<KvTierArena> arena_;
  int64_t top_ = 0;  // bytes
  std::unordered_map<int64_t, Region> seqs_;
};

struct TierSwapStats {
  int64_t bytes = 0;  // written (swap-out) or read (swap-in) by this rank
  int64_t pages = 0;  // pages freed (swap-out) or filled (swap-in)
};

// Swap-out (Seesaw W8): `rank` writes every cell of `seq` ([0, seq.n_tokens)) that it holds under
// `from` into the tier region of seq (reserved by the caller on every rank), unless a lower rank
// holds the same cell (GQA replication: one writer per cell), then frees the sequence's pages.
TierSwapStats tier_swap_out(const SeqExtent& seq, const KvPlacement& from, int rank, KvStore& store, KvTier& tier);

// Swap-in: `rank` gives the cells `to` assigns it of `seq` pages and reads them from the tier;
// checks that its store then holds exactly them (check_holdings). The tier keeps the region (the
// caller releases it once every rank has read).
TierSwapStats tier_swap_in(const SeqExtent& seq, const KvPlacement& to, int rank, KvStore& store, KvTier& tier);

}  // namespace loom
