// KvMigration: the KV-cache traffic of switching from one placement to another, as a value
// computed before anything moves (Nitsum TP switch, Seesaw phase switch, Helix <-> TP; a Shift
// switch has equal placements and moves nothing). One mechanism executes it for every switch.
//
// For each given sequence, each (layer, kv head) and each token the destination placement wants on
// rank `dst`: nothing when `dst` already holds it under the source placement; otherwise it comes
// from the lowest source rank that holds it. Moves are cut at the boundaries of KV blocks of
// `block_tokens` tokens (the paged cache's blocks): one move = (src, dst, layer, kv head, sequence,
// block, token range inside the block).
//
// Bytes: bytes_per_token is per token per KV head per layer = 2 (K and V) * head_dim * sizeof(kv
// dtype) (kv_bytes_per_token). total_bytes counts bytes moved; dropped_bytes counts bytes a rank
// stored before and no longer stores (freed, not moved). For the given sequences,
// total_bytes == 0 && dropped_bytes == 0  <=>  the placements are equal on them; total_bytes == 0
// alone means every destination already holds what it needs (e.g. TP(2) -> TP(1) with one KV head).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "parallel/kv_placement.h"

namespace loom {

// 2 * head_dim * bytes of one element of `kv_dtype` (head_dim a multiple of its block size).
int64_t kv_bytes_per_token(int head_dim, DType kv_dtype);

struct KvMove {
  int src = 0, dst = 0;
  int layer = 0, kv_head = 0;
  int64_t seq_id = 0;
  int64_t block = 0;  // index of the block_tokens-token block of the sequence
  Range tokens;       // positions moved, inside that block
  bool operator==(const KvMove&) const = default;
};

struct KvMigration {
  int64_t block_tokens = 0;
  int64_t bytes_per_token = 0;  // per token, per KV head, per layer
  // Sorted by (src, dst, seq_id, layer, kv_head, tokens.begin); adjacent ranges of one block merged.
  std::vector<KvMove> moves;
  std::map<std::pair<int, int>, int64_t> bytes_by_pair;  // (src, dst) -> bytes, only non-zero
  int64_t total_bytes = 0;
  int64_t dropped_bytes = 0;

  int64_t bytes(int src, int dst) const;
  int64_t move_bytes(const KvMove& m) const { return m.tokens.size() * bytes_per_token; }
  bool moves_nothing() const { return total_bytes == 0; }
  std::string summary() const;  // total, dropped, then "src->dst: bytes" per pair
};

// The byte counts of kv_migration() alone (bytes_by_pair, total_bytes, dropped_bytes, equal to
// its), without listing the moves: what a simulator prices a switch with. (layer, kv head) cells
// that every rank of both placements stores under the same entries move alike, so each such class
// is worked out once per sequence; block boundaries split moves but not their bytes. Throws
// where kv_migration() throws.
struct KvMigrationBytes {
  std::map<std::pair<int, int>, int64_t> bytes_by_pair;  // (src, dst) -> bytes, only non-zero
  int64_t total_bytes = 0;
  int64_t dropped_bytes = 0;
};
KvMigrationBytes kv_migration_bytes(const KvPlacement& from, const KvPlacement& to,
                                    const std::vector<SeqExtent>& seqs, int64_t block_tokens,
                                    int64_t bytes_per_token);

// Throws loom::Error when the placements are of different models (layers / kv heads), when a
// cell the destination needs is held by no source rank, or on block_tokens / bytes_per_token < 1.
KvMigration kv_migration(const KvPlacement& from, const KvPlacement& to, const std::vector<SeqExtent>& seqs,
                         int64_t block_tokens, int64_t bytes_per_token);

}  // namespace loom
