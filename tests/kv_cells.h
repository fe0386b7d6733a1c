// What a rank's KV store holds, cell by cell, for tests that compare stores (header-only; needs
// only the kv layer).
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "kv/kv_store.h"

namespace loom::test {

// Calls fn(seq, layer, kv head, position, k row, v row) for every cell of `seqs` the store holds
// (rows writable when the store is).
template <typename Store, typename Fn>
void for_each_cell(Store& kv, const std::vector<SeqExtent>& seqs, Fn&& fn) {
  const int dh = kv.head_dim(), B = kv.block_size();
  for (const SeqExtent& s : seqs)
    for (int l = 0; l < kv.n_layers(); ++l)
      for (int h = 0; h < kv.n_kv_heads(); ++h)
        for (int64_t p = 0; p < s.n_tokens; ++p) {
          const int32_t page = kv.page(s.id, l, h, p / B);
          if (page != kNoPage) fn(s.id, l, h, p, kv.k(page) + (p % B) * dh, kv.v(page) + (p % B) * dh);
        }
}

using Cell = std::tuple<int64_t, int, int, int64_t>;  // seq, layer, kv head, position
using Cells = std::map<Cell, std::vector<float>>;     // K row then V row

inline Cells cells_of(const KvStore& kv, const std::vector<SeqExtent>& seqs) {
  Cells out;
  const int dh = kv.head_dim();
  for_each_cell(kv, seqs, [&](int64_t s, int l, int h, int64_t p, const float* k, const float* v) {
    std::vector<float> x(k, k + dh);
    x.insert(x.end(), v, v + dh);
    out[{s, l, h, p}] = std::move(x);
  });
  return out;
}

}  // namespace loom::test
