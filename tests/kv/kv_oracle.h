// The naive KV placement oracle of the tests (header-only): which ranks hold a KV cell under a plan,
// read from PLANS.md by a plain loop over the plan's degrees, and a check that a rank's KvStore
// holds exactly those cells, position by position. It reads only the Plan's fields and the model's
// head counts: not KvPlacement (parallel/kv_placement.h) and not check_holdings (kv/kv_store.h),
// which production runs and which derive from the same placement code under test.
//
// The rules, as PLANS.md states them:
//   - global rank = (((dp*PP + pp)*SP + sp)*KVP + kvp)*TP + tp (TP innermost);
//   - DP: sequence `id` lives on replica id % dp;
//   - PP: stage s holds its layers (the even split L/pp, or the explicit layers=a+b+...);
//   - TP / Ulysses SP x TP / Shift: the rank attends query heads [tp*H/TP + sp*H/(SP*TP), +H/(SP*TP))
//     and stores the KV head q / G of each such query head q, every position (GQA: a KV head whose
//     query heads several ranks attend is stored on all of them); a shift config keeps the heads of
//     its sp x tp base (Shift 3.3.1), so it is read as the base;
//   - Helix (kvp > 1): TPA rank tp attends [tp*H/TP, +H/TP) and KVP rank kvp stores only the
//     positions of blocks b (of kv_block tokens) with b % kvp == kvp (Helix 2.1.1 round-robin).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/kv_store.h"
#include "parallel/plan.h"

namespace loom::test {

// Whether global rank `rank` of plan `p` stores the KV cell (layer, KV head, sequence, position).
inline bool naive_stores(const Plan& p, const ModelShape& m, int rank, int layer, int head, int64_t seq, int64_t pos) {
  const int H = m.n_heads, G = m.n_heads / m.n_kv_heads, L = m.n_layers;
  int x = rank;
  const int tp = x % p.tp;
  x /= p.tp;
  const int kvp = x % p.kvp;
  x /= p.kvp;
  const int sp = x % p.sp;
  x /= p.sp;
  const int stage = x % p.pp;
  const int replica = x / p.pp;
  int first = 0, count = L / p.pp;
  if (!p.stage_layers.empty()) {
    for (int i = 0; i < stage; ++i) first += p.stage_layers[size_t(i)];
    count = p.stage_layers[size_t(stage)];
  } else {
    first = stage * count;
  }
  if (layer < first || layer >= first + count) return false;
  if (seq % p.dp != replica) return false;
  int q_begin, q_count;
  if (p.kvp > 1) {
    if ((pos / p.kv_block) % p.kvp != kvp) return false;
    q_begin = tp * H / p.tp, q_count = H / p.tp;
  } else {
    const int P = p.sp * p.tp;
    q_begin = tp * H / p.tp + sp * H / P, q_count = H / P;
  }
  for (int q = q_begin; q < q_begin + q_count; ++q)
    if (q / G == head) return true;
  return false;
}

// The global ranks storing (layer, KV head, sequence, position) under `p`, ascending.
inline std::vector<int> naive_holders(const Plan& p, const ModelShape& m, int layer, int head, int64_t seq,
                                      int64_t pos) {
  std::vector<int> out;
  for (int r = 0; r < p.size(); ++r)
    if (naive_stores(p, m, r, layer, head, seq, pos)) out.push_back(r);
  return out;
}

// "" when `kv` (global rank `rank` of plan `p`) holds, of every sequence of `seqs`, exactly the
// cells naive_stores gives it, judged position by position from the store's held_ranges;
// otherwise the first differences (rank, layer, head, sequence, position, held or not) and how
// many there are.
inline std::string naive_holdings_diff(const KvStore& kv, const Plan& p, const ModelShape& m, int rank,
                                       const std::vector<SeqExtent>& seqs) {
  LOOM_CHECK(kv.n_layers() == m.n_layers && kv.n_kv_heads() == m.n_kv_heads, "store and model shape differ");
  std::string why;
  int64_t wrong = 0;
  for (const SeqExtent& s : seqs)
    for (int l = 0; l < m.n_layers; ++l)
      for (int h = 0; h < m.n_kv_heads; ++h) {
        const std::vector<Range> held = kv.held_ranges(s.id, l, h, s.n_tokens);
        auto is_held = [&](int64_t pos) {
          for (const Range& r : held)
            if (pos >= r.begin && pos < r.end) return true;
          return false;
        };
        // naive_stores reads the position only through pos / kv_block under Helix (kvp > 1), not at
        // all otherwise: asked once per such run of positions. A run is right when the held ranges
        // cover all of it (held) or none of it (not held); otherwise its positions are judged one by
        // one (the per-step checks of long runs would cost seconds a test position by position).
        const int64_t run = p.kvp > 1 ? int64_t(p.kv_block) : std::max<int64_t>(s.n_tokens, 1);
        for (int64_t b = 0; b < s.n_tokens; b += run) {
          const int64_t e = std::min(s.n_tokens, b + run);
          const bool want = naive_stores(p, m, rank, l, h, s.id, b);
          int64_t covered = 0;
          for (const Range& r : held) covered += std::max<int64_t>(0, std::min(e, r.end) - std::max(b, r.begin));
          if (covered == (want ? e - b : 0)) continue;
          for (int64_t pos = b; pos < e; ++pos) {
            if (is_held(pos) == want) continue;
            if (wrong++ < 4)
              why += cat(why.empty() ? "" : "; ", "rank ", rank, " layer ", l, " kv head ", h, " sequence ", s.id,
                         " position ", pos, want ? ": not held, the plan says held" : ": held, the plan says not");
          }
        }
      }
  if (wrong > 4) why += cat("; and ", wrong - 4, " more cells");
  return why;
}

}  // namespace loom::test
