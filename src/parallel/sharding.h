// Weight sharding: which part of every weight matrix a rank computes with, as pure functions of
// (Plan, ModelShape, rank). Weights are stored W[out][in] row-major (PLANS.md):
//   Wq [H*dh, d]  Wk, Wv [K*dh, d]  Wo [d, H*dh]  W_gate, W_up [F, d]  W_down [d, F]
// Wq/Wk/Wv/W_gate/W_up are split by output rows (a contiguous row block); Wo and W_down by input
// columns (a strided column block, leading dimension = in). Norms and embeddings are replicated
// and not counted here.
//
// Shift 3.3.2: the shift config needs its own 1/P shards. They are either a second resident copy
// (memory w/t + w/P per rank, what the paper ships) or views sliced from the base rank's shard
// (memory w/t): shift_slice_of_base gives those slices and fails if the base shard did not contain
// them (it always does for a validated plan: base rank (sp, tp) holds a superset).
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/plan.h"

namespace loom {

struct WeightShards {
  Range layers;                                      // layers held (pipeline stage)
  Range wq_rows, wk_rows, wv_rows, gate_rows, up_rows;  // output rows
  Range wo_cols, down_cols;                          // input columns
  std::vector<int> q_heads;    // heads of wq_rows, in row order
  std::vector<int> kv_heads;   // heads of wk_rows / wv_rows, in row order
  std::vector<int> out_heads;  // heads of wo_cols
  Range ffn;                   // FFN units of gate_rows / up_rows / down_cols
  int64_t elems_per_layer = 0; // elements of the seven matrices' shards in one layer
  int64_t elems() const { return elems_per_layer * layers.size(); }
  bool operator==(const WeightShards&) const = default;
};

// Shards of `rank` (validates the plan). Heads map to rows/columns as head h -> [h*dh, (h+1)*dh).
WeightShards weight_shards(const Plan& plan, const ModelShape& shape, int rank);

// The shift config's shards of global rank `rank` as offsets inside the base config's shards of
// the same rank (Shift 3.3.2, on-the-fly slicing): e.g. wq_rows is the row range of the base Wq
// shard to use. `plan` may be the base or its shift config. Throws loom::Error if not contained.
struct ShiftSlice {
  Range wq_rows, wk_rows, wv_rows, gate_rows, up_rows;  // rows inside the base shard
  Range wo_cols, down_cols;                             // columns inside the base shard
};
ShiftSlice shift_slice_of_base(const Plan& plan, const ModelShape& shape, int rank);

// Weight memory of one rank under Shift (elements; multiply by the dtype's size):
// separate = base + shift shards (two resident models), sliced = base only.
struct ShiftWeightMemory {
  int64_t base_elems = 0;   // w/t
  int64_t shift_elems = 0;  // w/P
  int64_t separate() const { return base_elems + shift_elems; }
  int64_t sliced() const { return base_elems; }
};
ShiftWeightMemory shift_weight_memory(const Plan& plan, const ModelShape& shape, int rank);

}  // namespace loom
