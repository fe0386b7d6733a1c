#include "parallel/sharding.h"

#include "core/error.h"

namespace loom {

namespace {

// Rows / columns of a contiguous ascending head list.
Range head_span(const std::vector<int>& heads, int head_dim) {
  if (heads.empty()) return {};
  for (size_t i = 1; i < heads.size(); ++i)
    LOOM_CHECK(heads[i] == heads[i - 1] + 1, "head list is not contiguous");
  return Range{int64_t(heads.front()) * head_dim, int64_t(heads.back() + 1) * head_dim};
}

Range inside(const Range& part, const Range& whole, const char* what, int rank) {
  if (!whole.contains(part))
    fail("shift shard ", what, " ", to_string(part), " of rank ", rank, " is not inside its base shard ",
         to_string(whole));
  return Range{part.begin - whole.begin, part.end - whole.begin};
}

}  // namespace

WeightShards weight_shards(const Plan& plan, const ModelShape& m, int rank) {
  const RankLayout lay = rank_layout(plan, m, rank);
  WeightShards w;
  w.layers = lay.layers;
  w.q_heads = lay.proj_q_heads;
  w.kv_heads = lay.proj_kv_heads;
  w.out_heads = lay.out_heads;
  w.ffn = lay.ffn;
  w.wq_rows = head_span(w.q_heads, m.head_dim);
  w.wk_rows = w.wv_rows = head_span(w.kv_heads, m.head_dim);
  w.wo_cols = head_span(w.out_heads, m.head_dim);
  w.gate_rows = w.up_rows = w.down_cols = w.ffn;
  const int64_t d = m.d_model;
  w.elems_per_layer = d * (w.wq_rows.size() + w.wk_rows.size() + w.wv_rows.size() + w.wo_cols.size() +
                           w.gate_rows.size() + w.up_rows.size() + w.down_cols.size());
  return w;
}

ShiftSlice shift_slice_of_base(const Plan& plan, const ModelShape& m, int rank) {
  const Plan base = plan.base(), shift = plan.shift_config();
  const WeightShards b = weight_shards(base, m, rank), s = weight_shards(shift, m, rank);
  ShiftSlice x;
  x.wq_rows = inside(s.wq_rows, b.wq_rows, "Wq rows", rank);
  x.wk_rows = inside(s.wk_rows, b.wk_rows, "Wk rows", rank);
  x.wv_rows = inside(s.wv_rows, b.wv_rows, "Wv rows", rank);
  x.gate_rows = inside(s.gate_rows, b.gate_rows, "W_gate rows", rank);
  x.up_rows = inside(s.up_rows, b.up_rows, "W_up rows", rank);
  x.wo_cols = inside(s.wo_cols, b.wo_cols, "Wo columns", rank);
  x.down_cols = inside(s.down_cols, b.down_cols, "W_down columns", rank);
  return x;
}

ShiftWeightMemory shift_weight_memory(const Plan& plan, const ModelShape& m, int rank) {
  ShiftWeightMemory mem;
  mem.base_elems = weight_shards(plan.base(), m, rank).elems();
  mem.shift_elems = weight_shards(plan.shift_config(), m, rank).elems();
  return mem;
}

}  // namespace loom
