#include "engine/shard_weights.h"

#include <array>
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

// Bytes a copy of `w` takes: the tiled layout where it applies and `tile`, else plain rows.
size_t matrix_copy_bytes(const WeightView& w, bool tile) {
  return size_t(tile && can_tile(w) ? tiled_bytes(w) : w.bytes());
}

// Copies `w` to `at` (matrix_copy_bytes(w, tile) bytes) and returns the view of the copy.
WeightView copy_matrix(const WeightView& w, bool tile, uint8_t* at, ThreadPool* pool) {
  if (tile && can_tile(w)) return tile_weights(w, at, pool);
  const int64_t row_bytes = w.row_bytes();  // from col_offset: a K-quant shard keeps it
  WeightView out = w;
  out.data = at;
  out.row_stride = row_bytes;
  for (int64_t r = 0; r < w.rows; ++r) std::memcpy(at + r * row_bytes, w.row(r), size_t(row_bytes));
  return out;
}

}  // namespace

ShardWeightSet copy_shard(const std::vector<ShardLayerWeights>& views, bool tile, ThreadPool* pool) {
  // One arena for everything: every matrix starts on a 64-byte boundary.
  auto size_of = [&](const WeightView& w) { return matrix_copy_bytes(w, tile); };
  size_t total = 0;
  for (const ShardLayerWeights& L : views) {
    for (const WeightView* w : L.matrices()) total += align64(size_of(*w));
    if (L.bq) total += align64(size_t(L.wq.rows + 2 * L.wk.rows) * sizeof(float));
  }
  auto arena = std::make_shared<Arena>();
  arena->bytes.resize(total);
  uint8_t* at = arena->bytes.data();
  auto copy = [&](const WeightView& w) {
    const WeightView out = copy_matrix(w, tile, at, pool);
    at += align64(size_of(w));
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
  set.plain_rows = !tile;
  return set;
}

namespace {

// The rows or columns of matrix m (matrices() order) of a layer under `w`.
Range matrix_range(const WeightShards& w, int m) {
  switch (m) {
    case 0: return w.wq_rows;
    case 1: return w.wk_rows;
    case 2: return w.wv_rows;
    case 3: return w.wo_cols;
    case 4: return w.gate_rows;
    case 5: return w.up_rows;
    default: return w.down_cols;
  }
}

std::array<WeightView*, 7> matrices_mut(ShardLayerWeights& L) {
  return {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down};
}

}  // namespace

ShardWeightSet reshard(const Model& model, const WeightShards& want, const ShardWeightSet* held,
                       const WeightShards* held_shards, ThreadPool* pool, int64_t* built) {
  ShardWeightSet set;
  set.layers = shard_views(model, want);
  set.parts.assign(set.layers.size() * 7, nullptr);
  if (built) *built = 0;
  if (!decode_copy_affordable(shard_matrix_bytes(set.layers))) return set;  // views of the mapped rows
  set.tiled = true;
  set.plain_rows = false;
  const bool can_share = held && held_shards && held->tiled && held->parts.size() == held->layers.size() * 7;
  for (size_t i = 0; i < set.layers.size(); ++i) {
    const int64_t layer = want.layers.begin + int64_t(i);
    const std::array<WeightView*, 7> dst = matrices_mut(set.layers[i]);
    for (int m = 0; m < 7; ++m) {
      const WeightView w = *dst[size_t(m)];
      if (w.rows == 0 || w.cols == 0) continue;
      std::shared_ptr<const void>& part = set.parts[i * 7 + size_t(m)];
      if (can_share && held_shards->layers.contains(layer) && matrix_range(*held_shards, m) == matrix_range(want, m)) {
        const size_t h = size_t(layer - held_shards->layers.begin);
        if (held->parts[h * 7 + size_t(m)]) {  // the identical shard, in this layout: keep it
          part = held->parts[h * 7 + size_t(m)];
          *dst[size_t(m)] = *held->layers[h].matrices()[size_t(m)];
          continue;
        }
      }
      auto arena = std::make_shared<Arena>();
      arena->bytes.resize(matrix_copy_bytes(w, true));
      *dst[size_t(m)] = copy_matrix(w, true, arena->bytes.data(), pool);
      if (built) *built += int64_t(arena->bytes.size());
      part = std::move(arena);
    }
  }
  for (const auto& p : set.parts)
    if (p) set.owned_bytes += int64_t(static_cast<const Arena*>(p.get())->bytes.size());
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

namespace {

// Offsets of `part` inside `whole`, or false.
bool inside(const Range& part, const Range& whole, Range* out) {
  if (!whole.contains(part)) return false;
  *out = Range{part.begin - whole.begin, part.end - whole.begin};
  return true;
}

}  // namespace

bool slice_shard(const ShardWeightSet& base, const WeightShards& b, const WeightShards& w, ShardWeightSet* out) {
  if (!base.plain_rows || !b.layers.contains(w.layers)) return false;
  Range q, k, v, g, u, o, dn;
  if (!inside(w.wq_rows, b.wq_rows, &q) || !inside(w.wk_rows, b.wk_rows, &k) || !inside(w.wv_rows, b.wv_rows, &v) ||
      !inside(w.gate_rows, b.gate_rows, &g) || !inside(w.up_rows, b.up_rows, &u) ||
      !inside(w.wo_cols, b.wo_cols, &o) || !inside(w.down_cols, b.down_cols, &dn))
    return false;
  ShardWeightSet set;
  set.storage = base.storage;
  for (int64_t l = w.layers.begin; l < w.layers.end; ++l) {
    const ShardLayerWeights& L = base.layers[size_t(l - b.layers.begin)];
    ShardLayerWeights x;
    x.wq = L.wq.row_block(q.begin, q.size());
    x.wk = L.wk.row_block(k.begin, k.size());
    x.wv = L.wv.row_block(v.begin, v.size());
    x.wo = L.wo.col_block(o.begin, o.size());
    x.w_gate = L.w_gate.row_block(g.begin, g.size());
    x.w_up = L.w_up.row_block(u.begin, u.size());
    x.w_down = L.w_down.col_block(dn.begin, dn.size());
    if (L.bq) {
      x.bq = L.bq + q.begin;
      x.bk = L.bk + k.begin;
      x.bv = L.bv + v.begin;
    }
    set.layers.push_back(x);
  }
  *out = std::move(set);
  return true;
}

std::vector<ShardLayerWeights> shard_views(const Model& model, const WeightShards& w) {
  std::vector<ShardLayerWeights> out;
  for (int64_t l = w.layers.begin; l < w.layers.end; ++l) {
    const LayerWeights& L = model.layers.at(size_t(l));
    ShardLayerWeights s;
    s.wq = L.wq.row_block(w.wq_rows.begin, w.wq_rows.size());
    s.wk = L.wk.row_block(w.wk_rows.begin, w.wk_rows.size());
    s.wv = L.wv.row_block(w.wv_rows.begin, w.wv_rows.size());
    s.wo = L.wo.col_block(w.wo_cols.begin, w.wo_cols.size());
    s.w_gate = L.w_gate.row_block(w.gate_rows.begin, w.gate_rows.size());
    s.w_up = L.w_up.row_block(w.up_rows.begin, w.up_rows.size());
    s.w_down = L.w_down.col_block(w.down_cols.begin, w.down_cols.size());
    if (L.bq.present()) {
      s.bq = L.bq.f32() + w.wq_rows.begin;
      s.bk = L.bk.f32() + w.wk_rows.begin;
      s.bv = L.bv.f32() + w.wv_rows.begin;
    }
    out.push_back(s);
  }
  return out;
}

const ShardWeightSet& RankWeights::get(const WeightShards& shards, WeightSource source) {
  for (const auto& e : entries_)
    if (e->shards == shards && e->source == source) return e->set;
  auto e = std::make_unique<Entry>();
  e->shards = shards;
  e->source = source;
  std::vector<ShardLayerWeights> views = shard_views(*model_, shards);
  bool done = false;
  if (source == WeightSource::FetchFromOwner) {
    // SiDP (S1, S2): attention replicated and resident; the FFN is the owner stage's
    // (engine/sidp.h OwnerWeights holds the owned layers; the others are fetched or served).
    for (ShardLayerWeights& L : views) L.w_gate = L.w_up = L.w_down = WeightView{};
    e->set = decode_shard(views, pool_);
    done = true;
  } else if (source == WeightSource::SliceOfFull) {
    e->set.layers = views;  // Nitsum 3.2.1: compute on the mapped full copy
    done = true;
  } else if (mode_ == ShiftWeights::Slice) {
    // Shift 3.3.2 slicing: views of an earlier resident plain-row copy that contains these shards.
    for (const auto& o : entries_)
      if (o->source == WeightSource::Resident && o->set.owned_bytes > 0 &&
          slice_shard(o->set, o->shards, shards, &e->set)) {
        done = true;
        break;
      }
    if (!done && weight_tiles_enabled()) {
      e->set = copy_shard(views, false, pool_);  // plain rows, so later plans can slice it
      done = true;
    }
  }
  if (!done) e->set = decode_shard(views, pool_);
  entries_.push_back(std::move(e));
  return entries_.back()->set;
}

int64_t RankWeights::owned_bytes() const {
  int64_t b = 0;
  for (const auto& e : entries_) b += e->set.owned_bytes;
  return b;
}

}  // namespace loom
