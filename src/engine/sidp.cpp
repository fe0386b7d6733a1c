#include "engine/sidp.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "core/weight_tiles.h"

namespace loom::sidp {

int peak_shift_layer(int rank, int dp, int n_layers, int cycle_start, int j) {
  LOOM_CHECK(dp >= 1 && rank >= 0 && rank < dp && j >= 0 && j < dp && cycle_start % dp == 0, "rank ", rank, " dp ",
             dp, " j ", j, " cycle ", cycle_start);
  // offset(r) = (r + 1) mod D (PAPERS-NOTES 1.4.3), then wrap-around within the cycle.
  const int l = cycle_start + (rank + 1 + j) % dp;
  if (owner_of(l, dp) == rank || l >= n_layers) return -1;
  return l;
}

std::vector<int> fetch_order(int rank, int dp, int n_layers, bool peak) {
  std::vector<int> out;
  if (!peak) {
    for (int l = 0; l < n_layers; ++l)
      if (owner_of(l, dp) != rank) out.push_back(l);
    return out;
  }
  for (int c = 0; c < n_layers; c += dp)
    for (int j = 0; j < dp; ++j) {
      const int l = peak_shift_layer(rank, dp, n_layers, c, j);
      if (l >= 0) out.push_back(l);
    }
  return out;
}

namespace {

int64_t align64(int64_t n) { return (n + 63) / 64 * 64; }

// The view a resident copy of `w` has (tiled where the engine tiles, when `tiles`), data = nullptr,
// and its bytes.
WeightView laid_out(const WeightView& w, int64_t* bytes, bool tiles) {
  WeightView v = w;
  v.data = nullptr;
  const int64_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
  if (tiles && weight_tiles_enabled() && can_tile(w)) {
    v.row_stride = 0;
    v.tile_rows = kTileRows;
    v.tile_stride = kTileRows * row_bytes;
    *bytes = tiled_bytes(w);
  } else {
    v.row_stride = row_bytes;
    v.tile_rows = 0;
    v.tile_stride = 0;
    *bytes = w.rows * row_bytes;
  }
  return v;
}

WeightView at(const WeightView& v, const void* base, int64_t off) {
  WeightView w = v;
  w.data = static_cast<const uint8_t*>(base) + off;
  return w;
}

}  // namespace

std::vector<FfnLayerLayout> ffn_layouts(const Model& model, int dp, bool tiles) {
  LOOM_CHECK(dp >= 1);
  std::vector<FfnLayerLayout> out;
  std::vector<int64_t> next(size_t(dp), 0);  // each owner's running offset
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const LayerWeights& W = model.layers[l];
    FfnLayerLayout L;
    int64_t b = 0;
    L.gate = laid_out(W.w_gate, &b, tiles);
    L.gate_at = 0;
    L.up_at = align64(b);
    L.up = laid_out(W.w_up, &b, tiles);
    L.down_at = L.up_at + align64(b);
    L.down = laid_out(W.w_down, &b, tiles);
    L.bytes = L.down_at + align64(b);
    int64_t& o = next[size_t(owner_of(int(l), dp))];
    L.offset = o;
    o += L.bytes;
    out.push_back(L);
  }
  return out;
}

void ffn_views(const FfnLayerLayout& L, const void* base, WeightView* gate, WeightView* up, WeightView* down) {
  *gate = at(L.gate, base, L.gate_at);
  *up = at(L.up, base, L.up_at);
  *down = at(L.down, base, L.down_at);
}

Memory memory(const Model& model, const Plan& plan, int rank) {
  Memory m;
  const int D = plan.dp;
  const std::vector<FfnLayerLayout> lay = ffn_layouts(model, D);
  int64_t max_remote = 0;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const LayerWeights& W = model.layers[l];
    for (const WeightView* w : {&W.wq, &W.wk, &W.wv, &W.wo}) m.attention += w->bytes();
    for (const WeightView* w : W.matrices()) m.plain_dp += w->bytes();
    if (owner_of(int(l), D) == rank) {
      m.ffn_owned += lay[l].bytes;
      ++m.n_owned;
    } else {
      max_remote = std::max(max_remote, lay[l].bytes);
    }
  }
  // CaS plans fetch no weights (their "two slots" are activation buffers, PAPERS-NOTES 1.4.9).
  if (!plan.sidp_cas) m.slots = int64_t(plan.sidp_slots()) * max_remote;
  return m;
}

std::string describe_memory(const Memory& m, const Plan& plan, int rank) {
  return cat("rank ", rank, ": SiDP ", plan.to_string(), " attention ", m.attention, " + FFN of ", m.n_owned,
             " owned layers ", m.ffn_owned, " + ", plan.sidp_cas ? 0 : plan.sidp_slots(), " cache slots ", m.slots,
             " = ", m.total(), " bytes; plain DP holds ", m.plain_dp, " bytes (", m.freed() >= 0 ? "frees " : "costs ",
             m.freed() >= 0 ? m.freed() : -m.freed(), " bytes, ",
             cat(int(1000.0 * double(m.total()) / double(std::max<int64_t>(m.plain_dp, 1))) / 10.0), "% of plain DP)");
}

OwnerWeights::OwnerWeights(const Model& model, int dp, int rank, ThreadPool* pool, Device* device)
    : dp_(dp), rank_(rank), layouts_(ffn_layouts(model, dp, !device || device->kind() == DeviceKind::Cpu)) {
  int64_t total = 0;
  for (size_t l = 0; l < layouts_.size(); ++l) {
    max_layer_ = std::max(max_layer_, layouts_[l].bytes);
    if (owner_of(int(l), dp) == rank) total += layouts_[l].bytes;
  }
  buf_.resize(size_t(std::max<int64_t>(total, 64)));
  // S2 step 3: load only the owned FFN weights (the copy a plain DP rank would make, laid out the
  // same way, so every kernel sees the same bytes and gives the same bits).
  for (size_t l = 0; l < layouts_.size(); ++l) {
    if (owner_of(int(l), dp) != rank) continue;
    const FfnLayerLayout& L = layouts_[l];
    const LayerWeights& W = model.layers[l];
    uint8_t* base = buf_.data() + L.offset;
    const std::pair<const WeightView*, std::pair<const WeightView*, int64_t>> mats[3] = {
        {&W.w_gate, {&L.gate, L.gate_at}}, {&W.w_up, {&L.up, L.up_at}}, {&W.w_down, {&L.down, L.down_at}}};
    for (const auto& [src, dst] : mats) {
      uint8_t* to = base + dst.second;
      if (dst.first->tiled()) {
        const WeightView t = tile_weights(*src, to, pool);
        LOOM_CHECK(t.tile_rows == dst.first->tile_rows && t.tile_stride == dst.first->tile_stride,
                   "owner FFN layout of layer ", l);
      } else {
        const int64_t rb = dtype_row_bytes(src->dtype, src->cols);
        for (int64_t r = 0; r < src->rows; ++r) std::memcpy(to + r * rb, src->row(r), size_t(rb));
      }
    }
  }
  if (device && device->kind() != DeviceKind::Cpu) {  // a GPU: the bytes move to its memory
    on_device_.bind(*device);
    on_device_.resize(buf_.size());
    device->from_host(on_device_.data(), buf_.data(), buf_.size());
    buf_.resize(0);
  }
}

void OwnerWeights::views(int layer, WeightView* gate, WeightView* up, WeightView* down) const {
  LOOM_CHECK(owner_of(layer, dp_) == rank_, "layer ", layer, " is owned by rank ", owner_of(layer, dp_));
  const FfnLayerLayout& L = layouts_.at(size_t(layer));
  ffn_views(L, data() + L.offset, gate, up, down);
}

std::shared_ptr<OwnerWeights> OwnerWeights::shared(const Model& model, const void* rank_key, int dp, int rank,
                                                   ThreadPool* pool, Device* device) {
  static std::mutex mu;
  static std::map<std::tuple<const Model*, const void*, int, const Device*>, std::weak_ptr<OwnerWeights>> made;
  std::lock_guard<std::mutex> lock(mu);
  auto& w = made[{&model, rank_key, dp, device}];
  if (auto p = w.lock()) return p;
  auto p = std::make_shared<OwnerWeights>(model, dp, rank, pool, device);
  w = p;
  return p;
}

}  // namespace loom::sidp

namespace loom {

std::vector<std::string> describe_plan_weights(const Model& model, const Plan& p, int world_size) {
  std::vector<std::string> lines;
  if (p.weights != WeightSource::FetchFromOwner) return lines;
  lines.push_back(cat("SiDP ", p.to_string(), ": ", p.sidp_cas ? "compute-as-a-service" : "weight-as-a-service",
                      p.sidp_cas ? std::string()
                                 : cat(", ", p.sidp_slots(), " slots, lookahead ", p.sidp_lookahead(),
                                       sidp::peak_shifting(p) ? ", peak shifting" : ", layer order")));
  for (int r = 0; r < world_size; ++r) lines.push_back(sidp::describe_memory(sidp::memory(model, p, r), p, r));
  return lines;
}

}  // namespace loom
