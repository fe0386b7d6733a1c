#include "parallel/kv_migration.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"

namespace loom {

int64_t kv_bytes_per_token(int head_dim, DType kv_dtype) {
  if (head_dim < 1 || head_dim % dtype_block_elems(kv_dtype) != 0)
    fail("head_dim=", head_dim, " is not a multiple of the ", dtype_name(kv_dtype), " block of ",
         dtype_block_elems(kv_dtype), " elements");
  return 2 * dtype_row_bytes(kv_dtype, head_dim);
}

int64_t KvMigration::bytes(int src, int dst) const {
  auto it = bytes_by_pair.find({src, dst});
  return it == bytes_by_pair.end() ? 0 : it->second;
}

std::string KvMigration::summary() const {
  std::string s = cat("kv migration: ", total_bytes, " bytes in ", moves.size(), " moves, ", dropped_bytes,
                      " bytes dropped");
  for (const auto& [pair, b] : bytes_by_pair) s += cat("; ", pair.first, "->", pair.second, ": ", b);
  return s;
}

namespace {

bool covers(const std::vector<Range>& ranges, int64_t pos) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), pos,
                             [](int64_t p, const Range& r) { return p < r.end; });
  return it != ranges.end() && it->contains(pos);
}

}  // namespace

KvMigration kv_migration(const KvPlacement& from, const KvPlacement& to, const std::vector<SeqExtent>& seqs,
                         int64_t block_tokens, int64_t bytes_per_token) {
  if (from.n_layers() != to.n_layers() || from.n_kv_heads() != to.n_kv_heads())
    fail("KV migration between placements of different models: ", from.n_layers(), " layers x ",
         from.n_kv_heads(), " kv heads vs ", to.n_layers(), " x ", to.n_kv_heads());
  if (block_tokens < 1) fail("KV migration block_tokens=", block_tokens, " must be >= 1");
  if (bytes_per_token < 1) fail("KV migration bytes_per_token=", bytes_per_token, " must be >= 1");
  KvMigration mig;
  mig.block_tokens = block_tokens;
  mig.bytes_per_token = bytes_per_token;
  const int n_ranks = std::max(from.n_ranks(), to.n_ranks());
  int64_t dropped_tokens = 0;

  std::vector<std::vector<Range>> have(n_ranks), want(n_ranks);
  std::vector<int64_t> cuts;
  std::vector<int> holders;
  for (const SeqExtent& seq : seqs) {
    if (seq.n_tokens < 0) fail("sequence ", seq.id, " has n_tokens=", seq.n_tokens);
    for (int layer = 0; layer < from.n_layers(); ++layer) {
      for (int head = 0; head < from.n_kv_heads(); ++head) {
        // Segments on which every rank's have/want is constant: cut at every range end and at
        // every block boundary.
        cuts.assign({0, seq.n_tokens});
        for (int64_t b = block_tokens; b < seq.n_tokens; b += block_tokens) cuts.push_back(b);
        for (int r = 0; r < n_ranks; ++r) {
          have[r] = from.stored_ranges(r, layer, head, seq);
          want[r] = to.stored_ranges(r, layer, head, seq);
          for (const Range& x : have[r]) cuts.push_back(x.begin), cuts.push_back(x.end);
          for (const Range& x : want[r]) cuts.push_back(x.begin), cuts.push_back(x.end);
        }
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        for (size_t c = 0; c + 1 < cuts.size(); ++c) {
          const int64_t a = cuts[c], e = cuts[c + 1];
          holders.clear();
          for (int r = 0; r < n_ranks; ++r)
            if (covers(have[r], a)) holders.push_back(r);
          for (int r = 0; r < n_ranks; ++r) {
            const bool has = covers(have[r], a), wants = covers(want[r], a);
            if (has && !wants) dropped_tokens += e - a;
            if (!wants || has) continue;
            if (holders.empty())
              fail("KV migration: layer ", layer, " kv head ", head, " of sequence ", seq.id, " tokens [", a, ",", e,
                   ") are stored by no rank of the source placement");
            // Prefer the destination itself (handled above: it moves nothing), then the lowest rank.
            const int src = holders.front();
            const int64_t block = a / block_tokens;
            KvMove m{src, r, layer, head, seq.id, block, Range{a, e}};
            mig.moves.push_back(m);
          }
        }
      }
    }
  }
  std::sort(mig.moves.begin(), mig.moves.end(), [](const KvMove& x, const KvMove& y) {
    return std::tie(x.src, x.dst, x.seq_id, x.layer, x.kv_head, x.tokens.begin) <
           std::tie(y.src, y.dst, y.seq_id, y.layer, y.kv_head, y.tokens.begin);
  });
  // Merge adjacent pieces of one block (cut apart by another rank's range boundary).
  std::vector<KvMove> merged;
  for (const KvMove& m : mig.moves) {
    if (!merged.empty()) {
      KvMove& p = merged.back();
      if (p.src == m.src && p.dst == m.dst && p.seq_id == m.seq_id && p.layer == m.layer &&
          p.kv_head == m.kv_head && p.block == m.block && p.tokens.end == m.tokens.begin) {
        p.tokens.end = m.tokens.end;
        continue;
      }
    }
    merged.push_back(m);
  }
  mig.moves = std::move(merged);
  for (const KvMove& m : mig.moves) {
    const int64_t b = mig.move_bytes(m);
    mig.bytes_by_pair[{m.src, m.dst}] += b;
    mig.total_bytes += b;
  }
  mig.dropped_bytes = dropped_tokens * bytes_per_token;
  return mig;
}

}  // namespace loom
