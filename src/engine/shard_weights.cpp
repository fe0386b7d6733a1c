#include "engine/shard_weights.h"

#include <cstring>

#include "core/buffer.h"
#include "core/error.h"
#include "core/log.h"
#include "core/weight_tiles.h"

namespace loom {

ShiftWeights parse_shift_weights(const std::string& s) {
  if (s == "separate") return ShiftWeights::Separate;
  if (s == "slice") return ShiftWeights::Slice;
  fail("unknown --shift-weights '", s, "' (separate, slice)");
}

const char* shift_weights_name(ShiftWeights w) { return w == ShiftWeights::Separate ? "separate" : "slice"; }

int64_t shard_matrix_bytes(const std::vector<ShardLayerWeights>& layers) {
  int64_t b = 0;
  for (const ShardLayerWeights& L : layers)
    for (const WeightView* w : L.matrices()) b += w->bytes();
  return b;
}

namespace {

struct Arena {
  AlignedBuffer<uint8_t> bytes;
};

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

ShardWeightSet copy_shard(const std::vector<ShardLayerWeights>& views, bool tile, ThreadPool* pool) {
  // One arena for everything: every matrix starts on a 64-byte boundary.
  auto size_of = [&](const WeightView& w) { return size_t(tile && can_tile(w) ? tiled_bytes(w) : w.bytes()); };
  size_t total = 0;
  for (const ShardLayerWeights& L : views) {
    for (const WeightView* w : L.matrices()) total += align64(size_of(*w));
    if (L.bq) total += align64(size_t(L.wq.rows + 2 * L.wk.rows) * sizeof(float));
  }
  auto arena = std::make_shared<Arena>();
  arena->bytes.resize(total);
  uint8_t* at = arena->bytes.data();
  auto copy = [&](const WeightView& w) {
    if (tile && can_tile(w)) {
      const WeightView out = tile_weights(w, at, pool);
      at += align64(size_of(w));
      return out;
    }
    const int64_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
    WeightView out = w;
    out.data = at;
    out.row_stride = row_bytes;
    for (int64_t r = 0; r < w.rows; ++r) std::memcpy(at + r * row_bytes, w.row(r), size_t(row_bytes));
    at += align64(size_t(w.bytes()));
    return out;
  };
  auto copy_f32 = [&](const float* p, int64_t n) {
    float* out = reinterpret_cast<float*>(at);
    std::memcpy(out, p, size_t(n) * sizeof(float));
    at += align64(size_t(n) * sizeof(float));
    return static_cast<const float*>(out);
  };
  ShardWeightSet set;
  for (const ShardLayerWeights& L : views) {
    ShardLayerWeights c;
    c.wq = copy(L.wq);
    c.wk = copy(L.wk);
    c.wv = copy(L.wv);
    c.wo = copy(L.wo);
    c.w_gate = copy(L.w_gate);
    c.w_up = copy(L.w_up);
    c.w_down = copy(L.w_down);
    if (L.bq) {
      c.bq = copy_f32(L.bq, L.wq.rows);
      c.bk = copy_f32(L.bk, L.wk.rows);
      c.bv = copy_f32(L.bv, L.wv.rows);
    }
    set.layers.push_back(c);
  }
  LOOM_CHECK(size_t(at - arena->bytes.data()) <= total);
  set.owned_bytes = int64_t(total);
  set.storage = std::move(arena);
  return set;
}

ShardWeightSet decode_shard(const std::vector<ShardLayerWeights>& views, ThreadPool* pool) {
  const int64_t bytes = shard_matrix_bytes(views);
  if (decode_copy_affordable(bytes)) return copy_shard(views, true, pool);
  if (weight_tiles_enabled())
    log_warn("weights: computing on the memory-mapped rows; a decode copy of ", bytes,
             " bytes would take more than half of the memory available");
  ShardWeightSet set;
  set.layers = views;
  return set;
}

ShardWeightSet slice_shard(const ShardWeightSet& base, const ShiftSlice& s) {
  ShardWeightSet set;
  set.storage = base.storage;
  for (const ShardLayerWeights& L : base.layers) {
    ShardLayerWeights v;
    v.wq = L.wq.row_block(s.wq_rows.begin, s.wq_rows.size());
    v.wk = L.wk.row_block(s.wk_rows.begin, s.wk_rows.size());
    v.wv = L.wv.row_block(s.wv_rows.begin, s.wv_rows.size());
    v.wo = L.wo.col_block(s.wo_cols.begin, s.wo_cols.size());
    v.w_gate = L.w_gate.row_block(s.gate_rows.begin, s.gate_rows.size());
    v.w_up = L.w_up.row_block(s.up_rows.begin, s.up_rows.size());
    v.w_down = L.w_down.col_block(s.down_cols.begin, s.down_cols.size());
    if (L.bq) {
      v.bq = L.bq + s.wq_rows.begin;
      v.bk = L.bk + s.wk_rows.begin;
      v.bv = L.bv + s.wv_rows.begin;
    }
    set.layers.push_back(v);
  }
  return set;
}

}  // namespace loom
