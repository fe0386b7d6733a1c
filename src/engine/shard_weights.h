// Where a rank's shard weights live (Shift 3.3.2, "Memory Management"): the shift config needs
// its own 1/P shards beside the base config's 1/t shards. Two ways:
//   separate: owned copies of the base shard AND of the shift shard (two models sharing one KV
//             cache; memory w/t + w/P per rank, what the paper ships);
//   slice:    an owned copy of the base shard, and the shift shard as views sliced out of it
//             (parallel/sharding.h shift_slice_of_base; memory w/t, no second copy).
// A fixed layout copies its shard into the decode layout (row tiles, core/weight_tiles.h) unless
// LOOM_WEIGHT_TILES=0, which keeps memory-mapped views of the model file (no copy at all).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/transformer.h"
#include "parallel/sharding.h"

namespace loom {

enum class ShiftWeights { Separate, Slice };
// "separate" | "slice"; throws loom::Error naming the value and the choices.
ShiftWeights parse_shift_weights(const std::string& s);
const char* shift_weights_name(ShiftWeights w);

// A shard's weights with the bytes they point into (null storage: views of the model).
struct ShardWeightSet {
  std::vector<ShardLayerWeights> layers;
  std::shared_ptr<const void> storage;
  int64_t owned_bytes = 0;  // bytes this set allocated (0 for views)
};

// Owned, contiguous copies of `views` (biases copied): what "separate" means for mapped weights.
// tile: each matrix that can be (core/weight_tiles.h) in the decode layout of row tiles, the
// rest as plain rows at their own row size; otherwise all plain rows (what slice_shard needs).
// `pool` (optional) shares the copying.
ShardWeightSet copy_shard(const std::vector<ShardLayerWeights>& views, bool tile = false, ThreadPool* pool = nullptr);

// The weights a fixed-layout shard computes with: tiled copies of `views` when
// decode_copy_affordable(their bytes), else the views themselves (no copy).
ShardWeightSet decode_shard(const std::vector<ShardLayerWeights>& views, ThreadPool* pool = nullptr);

// The shift shard as views into the base shard `base` (Shift 3.3.2 on-the-fly slicing); `slice`
// gives the offsets (rows / columns inside the base shard). Shares base's storage.
ShardWeightSet slice_shard(const ShardWeightSet& base, const ShiftSlice& slice);

// Bytes of the seven matrices of every layer (what the shard computes with).
int64_t shard_matrix_bytes(const std::vector<ShardLayerWeights>& layers);

}  // namespace loom
