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

// The one walk over a (sequence, layer, head) cell both functions below make: `cuts` (holding 0,
// n_tokens and any extra cut points; sorted and made unique here) gains every end of every rank's
// have/want ranges, so each segment [a, e) between two cuts has one holder set; for every rank
// that wants a segment it does not have, move(src, dst, a, e) with src the lowest holder (-1:
// none). Returns the tokens ranks hold and do not want (dropped).
template <class Move>
int64_t walk_segments(const std::vector<std::vector<Range>>& have, const std::vector<std::vector<Range>>& want,
                      std::vector<int64_t>& cuts, Move&& move) {
  const int n_ranks = int(have.size());
  for (int r = 0; r < n_ranks; ++r) {
    for (const Range& x : have[size_t(r)]) cuts.push_back(x.begin), cuts.push_back(x.end);
    for (const Range& x : want[size_t(r)]) cuts.push_back(x.begin), cuts.push_back(x.end);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  int64_t dropped = 0;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const int64_t a = cuts[c], e = cuts[c + 1];
    int src = -1;
    for (int r = 0; r < n_ranks && src < 0; ++r)
      if (covers(have[size_t(r)], a)) src = r;
    for (int r = 0; r < n_ranks; ++r) {
      const bool has = covers(have[size_t(r)], a), wants = covers(want[size_t(r)], a);
      if (has && !wants) dropped += e - a;
      if (wants && !has) move(src, r, a, e);
    }
  }
  return dropped;
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
  for (const SeqExtent& seq : seqs) {
    if (seq.n_tokens < 0) fail("sequence ", seq.id, " has n_tokens=", seq.n_tokens);
    for (int layer = 0; layer < from.n_layers(); ++layer) {
      for (int head = 0; head < from.n_kv_heads(); ++head) {
        // Moves are per block: cut at every block boundary too.
        cuts.assign({0, seq.n_tokens});
        for (int64_t b = block_tokens; b < seq.n_tokens; b += block_tokens) cuts.push_back(b);
        for (int r = 0; r < n_ranks; ++r) {
          have[r] = from.stored_ranges(r, layer, head, seq);
          want[r] = to.stored_ranges(r, layer, head, seq);
        }
        dropped_tokens += walk_segments(have, want, cuts, [&](int src, int dst, int64_t a, int64_t e) {
          if (src < 0)
            fail("KV migration: layer ", layer, " kv head ", head, " of sequence ", seq.id, " tokens [", a, ",", e,
                 ") are stored by no rank of the source placement");
          mig.moves.push_back(KvMove{src, dst, layer, head, seq.id, a / block_tokens, Range{a, e}});
        });
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

namespace {

// Index of the entry of `rank` holding (layer, head) for every cell (layer * n_kv_heads + head),
// -1 where none does (at most one does: KvPlacement's invariant).
void entry_of_cell(const KvPlacement& p, int rank, std::vector<int>& out) {
  out.assign(size_t(p.n_layers()) * size_t(p.n_kv_heads()), -1);
  if (rank >= p.n_ranks()) return;
  const std::vector<KvEntry>& es = p.entries(rank);
  for (size_t i = 0; i < es.size(); ++i)
    for (int64_t l = es[i].layers.begin; l < es[i].layers.end; ++l)
      for (int h : es[i].kv_heads) out[size_t(l) * size_t(p.n_kv_heads()) + size_t(h)] = int(i);
}

}  // namespace

KvMigrationBytes kv_migration_bytes(const KvPlacement& from, const KvPlacement& to,
                                    const std::vector<SeqExtent>& seqs, int64_t block_tokens,
                                    int64_t bytes_per_token) {
  if (from.n_layers() != to.n_layers() || from.n_kv_heads() != to.n_kv_heads())
    fail("KV migration between placements of different models: ", from.n_layers(), " layers x ",
         from.n_kv_heads(), " kv heads vs ", to.n_layers(), " x ", to.n_kv_heads());
  if (block_tokens < 1) fail("KV migration block_tokens=", block_tokens, " must be >= 1");
  if (bytes_per_token < 1) fail("KV migration bytes_per_token=", bytes_per_token, " must be >= 1");
  KvMigrationBytes out;
  const int n_ranks = std::max(from.n_ranks(), to.n_ranks());
  const int n_heads = from.n_kv_heads();
  const size_t n_cells = size_t(from.n_layers()) * size_t(n_heads);
  // Classes of cells: the same (source entry, destination entry) on every rank. A class is
  // listed by its first cell in (layer, head) order, so errors name the cell kv_migration names.
  std::vector<std::vector<int>> sig(n_cells, std::vector<int>(2 * size_t(n_ranks), -1));
  std::vector<int> col;
  for (int r = 0; r < n_ranks; ++r) {
    entry_of_cell(from, r, col);
    for (size_t c = 0; c < n_cells; ++c) sig[c][2 * size_t(r)] = col[c];
    entry_of_cell(to, r, col);
    for (size_t c = 0; c < n_cells; ++c) sig[c][2 * size_t(r) + 1] = col[c];
  }
  struct Class {
    size_t first_cell;
    int64_t cells;
  };
  std::vector<Class> classes;
  {
    std::map<std::vector<int>, size_t> index;
    for (size_t c = 0; c < n_cells; ++c) {
      auto [it, fresh] = index.try_emplace(sig[c], classes.size());
      if (fresh) classes.push_back(Class{c, 0});
      ++classes[it->second].cells;
    }
  }
  static const std::vector<KvEntry> kNone;
  auto entries = [&](const KvPlacement& p, int r) -> const std::vector<KvEntry>& {
    return r < p.n_ranks() ? p.entries(r) : kNone;
  };
  // Tokens moved per (src, dst), summed over sequences and cells.
  std::vector<int64_t> pair_tokens(size_t(n_ranks) * size_t(n_ranks), 0);
  int64_t dropped_tokens = 0;
  std::vector<std::vector<Range>> have(n_ranks), want(n_ranks);
  std::vector<int64_t> cuts;
  for (const SeqExtent& seq : seqs) {
    if (seq.n_tokens < 0) fail("sequence ", seq.id, " has n_tokens=", seq.n_tokens);
    for (const Class& cl : classes) {
      const std::vector<int>& s = sig[cl.first_cell];
      cuts.assign({0, seq.n_tokens});
      for (int r = 0; r < n_ranks; ++r) {
        const int fe = s[2 * size_t(r)], te = s[2 * size_t(r) + 1];
        have[r].clear();
        want[r].clear();
        if (fe >= 0) {
          const TokenRule& t = entries(from, r)[size_t(fe)].tokens;
          if (t.has_seq(seq.id)) have[r] = t.ranges(seq.n_tokens);
        }
        if (te >= 0) {
          const TokenRule& t = entries(to, r)[size_t(te)].tokens;
          if (t.has_seq(seq.id)) want[r] = t.ranges(seq.n_tokens);
        }
      }
      // No block cuts: bytes need only the segments; an error names the block kv_migration names.
      dropped_tokens += cl.cells * walk_segments(have, want, cuts, [&](int src, int dst, int64_t a, int64_t e) {
        if (src < 0) {
          const int layer = int(cl.first_cell / size_t(n_heads)), head = int(cl.first_cell % size_t(n_heads));
          fail("KV migration: layer ", layer, " kv head ", head, " of sequence ", seq.id, " tokens [", a, ",",
               std::min(e, (a / block_tokens + 1) * block_tokens), ") are stored by no rank of the source placement");
        }
        pair_tokens[size_t(src) * size_t(n_ranks) + size_t(dst)] += (e - a) * cl.cells;
      });
    }
  }
  for (int s = 0; s < n_ranks; ++s)
    for (int d = 0; d < n_ranks; ++d) {
      const int64_t b = pair_tokens[size_t(s) * size_t(n_ranks) + size_t(d)] * bytes_per_token;
      if (b == 0) continue;
      out.bytes_by_pair[{s, d}] = b;
      out.total_bytes += b;
    }
  out.dropped_bytes = dropped_tokens * bytes_per_token;
  return out;
}

}  // namespace loom
