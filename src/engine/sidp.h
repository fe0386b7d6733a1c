// SiDP (../shared/papers/001: "SiDP: Memory-Efficient Data Parallelism for Offline LLM
// Inference"; PAPERS-NOTES.md section 1, S1-S15): DP replicas whose FFN weights are owned layer by
// layer. The pure parts, shared by the engine's owner FFN stages (stage_ffn_owner.cpp), the
// policy and the simulator:
//   - ownership (S3; PAPERS-NOTES 1.4.2): the FFN of layer l is owned by DP rank l mod D, which
//     alone holds it; attention, norms, embedding and classifier stay replicated (S1);
//   - peak shifting (S7, §4.2; the rule's symbols are stripped in our copy, PAPERS-NOTES 1.4.3):
//     layers in cycles of D; at step j of the cycle starting at layer c rank r reads layer
//     c + (r + 1 + j) mod D, skipping its own layer (and layers past the model's end). Properties:
//     (i) within a cycle every rank fetches each of its non-owned layers exactly once, (ii) at each
//     step the owners being read are distinct (owner (r + 1 + j) mod D is a permutation of r);
//   - the owner FFN's byte layout (every rank computes every owner's layout, so a non-owner knows
//     where in the owner's buffer layer l lies without asking: the owner is oblivious, S4) and
//     per-rank memory against plain DP (S2, S12).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "device/device.h"
#include "core/thread_pool.h"
#include "engine/shard_weights.h"
#include "model/weights.h"
#include "parallel/plan.h"

namespace loom::sidp {

inline int owner_of(int layer, int dp) { return layer % dp; }

// Peak shifting: the layer rank `rank` reads at step j (0 <= j < dp) of the cycle starting at
// `cycle_start` (a multiple of dp), or -1 when it reads nothing then (its own layer, or past
// n_layers).
int peak_shift_layer(int rank, int dp, int n_layers, int cycle_start, int j);

// The order in which `rank` fetches its non-owned layers over one forward pass (all layers): cycle
// by cycle in peak-shifting order (peak) or ascending (no peak shifting).
std::vector<int> fetch_order(int rank, int dp, int n_layers, bool peak);

// Whether a plan fetches in peak-shifting order: the lookahead must cover a cycle's remote layers
// (dp - 1), or a rank could hold every slot with later layers of its cycle while compute waits on
// the first (PAPERS-NOTES 1.4.3, "the schedule assumes the cache holds a whole cycle"). Below
// that the fetcher goes in layer order (the paper's "small lookahead window", S5).
inline bool peak_shifting(const Plan& p) { return p.dp > 2 && p.sidp_lookahead() >= p.dp - 1; }

// Where a layer's three FFN matrices lie in its owner's buffer: offsets from the layer's start and
// the matrices' views with data = nullptr (rebased by ffn_views()).
struct FfnLayerLayout {
  WeightView gate, up, down;
  int64_t gate_at = 0, up_at = 0, down_at = 0;
  int64_t bytes = 0;  // the layer's bytes (64-byte aligned pieces)
  int64_t offset = 0; // the layer's offset in its owner's buffer
};

// Layouts of every layer under `dp` owners: the matrices tiled (core/weight_tiles.h) where the
// engine tiles resident weights (weight_tiles_enabled() and can_tile), else plain rows.
// tiles = false: plain rows everywhere (a GPU's layout).
std::vector<FfnLayerLayout> ffn_layouts(const Model& model, int dp, bool tiles = true);

// The views of a layer whose bytes start at `base` (its owner's buffer + offset, or a cache slot).
void ffn_views(const FfnLayerLayout& L, const void* base, WeightView* gate, WeightView* up, WeightView* down);

// Bytes of one rank's weights under dp=D,weights=owner against plain DP (layer matrices only:
// embedding, norms and classifier are replicated in both).
struct Memory {
  int64_t attention = 0;  // Wq, Wk, Wv, Wo of every layer (replicated)
  int64_t ffn_owned = 0;  // the owned layers' FFN (as laid out)
  int64_t slots = 0;      // cache slots x the largest FFN layer (0 for a rank that fetches nothing)
  int64_t plain_dp = 0;   // the seven matrices of every layer: what a plain DP rank holds
  int n_owned = 0;
  int64_t total() const { return attention + ffn_owned + slots; }
  int64_t freed() const { return plain_dp - total(); }  // may be < 0 (more slots than it saves)
};
Memory memory(const Model& model, const Plan& plan, int rank);
std::string describe_memory(const Memory& m, const Plan& plan, int rank);

// One rank's owned FFN layers in one contiguous buffer (the layout of ffn_layouts), shared by the
// owner stages of every plan of the rank's set (a WaS and a CaS plan hold one copy).
// `device` (null: host memory, the CPU's layout): where the owned bytes live; a GPU holds them in
// plain rows in its memory (the fetches of weight-as-a-service read them there).
class OwnerWeights {
 public:
  OwnerWeights(const Model& model, int dp, int rank, ThreadPool* pool, Device* device = nullptr);
  int dp() const { return dp_; }
  int rank() const { return rank_; }
  const std::vector<FfnLayerLayout>& layouts() const { return layouts_; }
  uint8_t* data() { return on_device_.data() ? on_device_.data() : buf_.data(); }
  const uint8_t* data() const { return on_device_.data() ? on_device_.data() : buf_.data(); }
  size_t bytes() const { return on_device_.data() ? on_device_.size() : buf_.size(); }
  int64_t max_layer_bytes() const { return max_layer_; }
  // Views of an owned layer in this buffer.
  void views(int layer, WeightView* gate, WeightView* up, WeightView* down) const;

  // The rank's one copy: made by the first plan that asks, shared by the later ones (keyed by the
  // model and the rank's world communicator, so the local backend's thread ranks do not share).
  static std::shared_ptr<OwnerWeights> shared(const Model& model, const void* rank_key, int dp, int rank,
                                              ThreadPool* pool, Device* device = nullptr);

 private:
  int dp_, rank_;
  std::vector<FfnLayerLayout> layouts_;
  AlignedBuffer<uint8_t> buf_;
  DeviceArray<uint8_t> on_device_;
  int64_t max_layer_ = 0;
};

// B_th (S11; PAPERS-NOTES S11 "B_th = min { b : T_fwd(b) >= T_fetch }", per-iteration form): the
// smallest per-replica batch whose forward time hides fetching the non-owned FFN layers, from
// per-layer costs. t_layer(b): seconds of one layer's forward at b rows; fetch_s: seconds to fetch
// all non-owned FFN layers once. Returns max_b + 1 when no b <= max_b hides it.
template <class F>
int64_t threshold_batch(F t_iter, double fetch_s, int64_t max_b = 1 << 16) {
  for (int64_t b = 1; b <= max_b; b *= 2)
    if (t_iter(b) >= fetch_s) {
      int64_t lo = b / 2 + 1, hi = b;  // smallest in (b/2, b]
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (t_iter(mid) >= fetch_s) hi = mid; else lo = mid + 1;
      }
      return hi;
    }
  return max_b + 1;
}

}  // namespace loom::sidp

namespace loom {

// Start-up report lines for a plan's weights beyond its shards, for ranks [0, world_size): a
// weights=owner plan's mode, slots and every rank's bytes against plain DP (S2); none for the
// other weight sources.
std::vector<std::string> describe_plan_weights(const Model& model, const Plan& plan, int world_size);

}  // namespace loom
