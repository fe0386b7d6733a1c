// The weights a rank computes with, per plan (parallel/sharding.h says which rows and columns;
// this file says where their bytes live).
//
// A plan's `weights=` key (plan.h WeightSource):
//   resident: the rank copies its shards out of the mapped model into the decode layout (row
//             tiles, core/weight_tiles.h) when the copy is affordable, else computes on the mapped
//             rows;
//   full:     the rank computes with views of the mapped model (row blocks and strided column
//             blocks), copying nothing: changing the TP degree loads nothing (Nitsum 3.2.1).
//   owner:    SiDP, not executed yet (plan_set.h check_executable).
// Within one rank's plan set (RankWeights): a plan whose shards equal an earlier plan's shares its
// copy; with `slice` (Shift 3.3.2 "slice", --shift-weights slice) a resident plan whose shards lie
// inside an earlier plan's plain-row copy uses views of that copy (memory w/t instead of
// w/t + w/P for the Shift pair), so the first copy keeps plain rows (tiles cannot be sliced).
// LOOM_WEIGHT_TILES=0 keeps every resident shard on the mapped rows (no copy at all).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "core/weight_view.h"
#include "model/weights.h"
#include "parallel/sharding.h"

namespace loom {

// One layer's shard weights as a forward pass uses them: Wq/Wk/Wv/W_gate/W_up hold exactly the
// shard's rows (its projected q heads, kv heads, FFN columns, in that order), Wo/W_down its input
// columns (Wo by out_heads).
struct ShardLayerWeights {
  WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
  // The seven matrices, in the order above.
  std::array<const WeightView*, 7> matrices() const { return {&wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down}; }
  const float* bq = nullptr;  // Qwen2 biases of the shard's rows, or null
  const float* bk = nullptr;
  const float* bv = nullptr;
};

// Shift 3.3.2 weights of a base / shift pair: "separate" copies or "slice" views.
enum class ShiftWeights { Separate, Slice };
ShiftWeights parse_shift_weights(const std::string& s);  // throws loom::Error naming the choices
const char* shift_weights_name(ShiftWeights w);

// A shard's weights (one entry per layer of shards.layers) with the bytes they point into (null
// storage: views of the model).
struct ShardWeightSet {
  std::vector<ShardLayerWeights> layers;
  std::shared_ptr<const void> storage;
  int64_t owned_bytes = 0;  // bytes this set allocated (0 for views)
  bool plain_rows = true;   // every matrix in plain rows (views can be cut from it)
  // A re-sharded set (reshard()): one allocation per (layer, matrix), [layer * 7 + matrix] in
  // matrices() order (null: a view of the model), so that a later set can keep any of them.
  std::vector<std::shared_ptr<const void>> parts;
  bool tiled = false;
};

// Views of `model`'s weights for `shards` (layers shards.layers; no copy).
std::vector<ShardLayerWeights> shard_views(const Model& model, const WeightShards& shards);

// Owned, contiguous copies of `views` (biases copied); tile: in the decode layout of row tiles
// where a matrix can be, else plain rows. `pool` (optional) shares the copying.
ShardWeightSet copy_shard(const std::vector<ShardLayerWeights>& views, bool tile = false, ThreadPool* pool = nullptr);

// Tiled copies of `views` when decode_copy_affordable(their bytes), else the views themselves.
ShardWeightSet decode_shard(const std::vector<ShardLayerWeights>& views, ThreadPool* pool = nullptr);

// Views of `want` cut from `base` (a plain-row set of shards `base_shards`); false when `want`
// does not lie inside it (other layers, rows or columns).
bool slice_shard(const ShardWeightSet& base, const WeightShards& base_shards, const WeightShards& want,
                 ShardWeightSet* out);

// Bytes of the seven matrices of every layer (what the shard computes with).
int64_t shard_matrix_bytes(const std::vector<ShardLayerWeights>& layers);

// Lazy re-shard (Seesaw, ../shared/papers/004 §4.1 W5 "re-sharded by reloading the required shards",
// issue 13: only the difference materialized): the decode copy of shards `want` of `model` (tiled
// when decode_copy_affordable, else views of the mapped rows, like decode_shard), in which every
// (layer, matrix) shard that `held` (a reshard() set of shards `held_shards`; may be null) holds
// identically -- same layer, same rows or columns, same layout -- is shared, not copied; the others
// are copied from the mapped model. The granularity is the (layer, matrix) shard: a shard that only
// lies inside a held one (a TP slice of a PP stage's full layer) is copied again, since keeping the
// larger copy for a view would hold more than one copy. Biases stay views of the model.
// *built (optional): bytes copied now.
ShardWeightSet reshard(const Model& model, const WeightShards& want, const ShardWeightSet* held,
                       const WeightShards* held_shards, ThreadPool* pool = nullptr, int64_t* built = nullptr);

// The weights of every plan of a rank's set (see the top of the file).
class RankWeights {
 public:
  RankWeights(std::shared_ptr<const Model> model, ThreadPool* pool, ShiftWeights mode = ShiftWeights::Separate)
      : model_(std::move(model)), pool_(pool), mode_(mode) {}
  // The weights of a plan whose shards on this rank are `shards`, under `source`.
  const ShardWeightSet& get(const WeightShards& shards, WeightSource source);
  // Bytes copied out of the model for all plans (0: everything computes on the mapping).
  int64_t owned_bytes() const;

 private:
  struct Entry {
    WeightShards shards;
    WeightSource source;
    ShardWeightSet set;
  };
  std::shared_ptr<const Model> model_;
  ThreadPool* pool_;
  ShiftWeights mode_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace loom
