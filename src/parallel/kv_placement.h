// KvPlacement: for every rank, which (layer, kv head, sequence, token position) of the KV cache it
// stores. Derived from a Plan (ARCHITECTURE.md); two plans with equal placements can alternate at
// zero cost (Shift 3.3.1), otherwise the switch is a KvMigration (kv_migration.h).
//
// Compact form: per rank a list of entries (layer range, KV head set, token rule). A token rule
// selects sequences of one DP replica (id % seq_mod == seq_rem) and, inside a sequence, the
// positions of the KVP blocks owned by one Helix rank ((pos / block_tokens) % block_mod ==
// block_rem, Helix 2.1.1 round-robin). GQA replication (TP/SP degree > K) shows as the same
// (layer, head, token) held by several ranks.
//
// DP convention: a DP plan stores sequence `id` on replica id % dp; the scheduler assigns
// sequence ids to replicas by that rule (or renumbers) so that placements stay pure values.
//
// Invariant (checked): a (rank, layer, head) appears in at most one entry; the constructor
// canonicalises the entries so that operator== is set equality: two placements are equal iff every
// rank stores exactly the same (layer, kv head, sequence, token) set (a rank absent from one side
// stores nothing there).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/plan.h"

namespace loom {

struct TokenRule {
  int seq_mod = 1, seq_rem = 0;          // sequences with id % seq_mod == seq_rem
  int block_mod = 1, block_rem = 0;      // positions whose block index % block_mod == block_rem
  int64_t block_tokens = 1;              // tokens per block (1 when block_mod == 1)
  // When not empty: only these sequences, on top of the seq_mod rule (a Nitsum pool's instance
  // stores the sequences routed to it, not a residue class: cluster/pool.h). Ascending, distinct
  // once normalized.
  std::vector<int64_t> seq_ids;

  TokenRule normalized() const;          // mod 1 -> rem 0 (and block_tokens 1); seq_ids sorted
  bool has_seq(int64_t seq_id) const;
  bool has_pos(int64_t pos) const;
  // Positions in [0, n_tokens) it selects, as ascending disjoint ranges (generated block by
  // block, independently of has_pos).
  std::vector<Range> ranges(int64_t n_tokens) const;
  std::string to_string() const;
  auto operator<=>(const TokenRule&) const = default;
};

struct KvEntry {
  Range layers;               // [first, last+1)
  std::vector<int> kv_heads;  // ascending
  TokenRule tokens;
  std::string to_string() const;
  bool operator==(const KvEntry&) const = default;
};

// A sequence of the KV cache: its id and current length in tokens.
struct SeqExtent {
  int64_t id = 0;
  int64_t n_tokens = 0;
};

class KvPlacement {
 public:
  KvPlacement() = default;
  // per_rank[r] = entries of rank r. Throws loom::Error on a layer or head out of range;
  // LOOM_CHECK on a (rank, layer, head) given twice.
  KvPlacement(int n_layers, int n_kv_heads, const std::vector<std::vector<KvEntry>>& per_rank);

  int n_ranks() const { return int(ranks_.size()); }
  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  const std::vector<KvEntry>& entries(int rank) const;  // canonical form

  bool stores(int rank, int layer, int kv_head, int64_t seq_id, int64_t pos) const;
  // Ranks storing that KV cell, ascending (several under GQA replication).
  std::vector<int> holders(int layer, int kv_head, int64_t seq_id, int64_t pos) const;
  // Positions of `seq` that `rank` stores for (layer, kv_head), ascending ranges.
  std::vector<Range> stored_ranges(int rank, int layer, int kv_head, const SeqExtent& seq) const;
  // Cells (KV head x token, summed over layers) rank stores of these sequences.
  int64_t stored_cells(int rank, const std::vector<SeqExtent>& seqs) const;

  bool operator==(const KvPlacement& o) const;  // set equality, see above
  // Equality restricted to these sequences (every rank stores the same cells of them).
  bool equal_on(const KvPlacement& o, const std::vector<SeqExtent>& seqs) const;
  std::string to_string() const;  // one line per rank

 private:
  int n_layers_ = 0, n_kv_heads_ = 0;
  std::vector<std::vector<KvEntry>> ranks_;
};

// The placement of a validated plan (PLANS.md): rank r stores, for the layers of its stage, the
// KV heads of the query heads it attends (RankLayout::kv_heads), for the sequences of its DP
// replica, all positions (TP, SP x TP, Shift) or its round-robin KVP blocks (Helix).
KvPlacement kv_placement(const Plan& plan, const ModelShape& shape);

// Placements side by side in one group: part k's rank i is rank parts[k].where[i] of a group of
// `n_ranks` and stores what parts[k].placement gives it, but only of the sequences parts[k].seqs
// (none when empty); a rank in no part stores nothing. These are a Nitsum pool's instances inside
// the group it migrates KV over (cluster/pool.h): before and after a regrouping or a hand-off.
// Throws loom::Error when a part's `where` does not map its ranks into [0, n_ranks) one to one,
// or when the parts are of different models.
struct PlacementPart {
  const KvPlacement* placement = nullptr;
  std::vector<int> where;
  std::vector<int64_t> seqs;
};
KvPlacement combine_placements(const std::vector<PlacementPart>& parts, int n_ranks);

}  // namespace loom
