// Weight shards and Shift 3.3.2 slicing / memory, against row and column ranges written out by
// hand from PLANS.md.
#include <gtest/gtest.h>

#include "core/error.h"
#include "parallel/sharding.h"

namespace loom {
namespace {

const ModelShape kStories{8, 4, 8, 96, 5, 64};
const ModelShape kSynth{24, 6, 4, 48 * 24, 6, 96};

TEST(Sharding, TensorParallelRowsAndColumns) {
  // TP(2), stories260K shapes (dh=8): rank 1 owns query heads 4..7 -> Wq rows [32,64), KV heads
  // 2..3 -> Wk/Wv rows [16,32), Wo columns [32,64), FFN [48,96).
  const WeightShards w = weight_shards(Plan::make_tp(2), kStories, 1);
  EXPECT_EQ(w.wq_rows, (Range{32, 64}));
  EXPECT_EQ(w.wk_rows, (Range{16, 32}));
  EXPECT_EQ(w.wv_rows, (Range{16, 32}));
  EXPECT_EQ(w.wo_cols, (Range{32, 64}));
  EXPECT_EQ(w.gate_rows, (Range{48, 96}));
  EXPECT_EQ(w.up_rows, (Range{48, 96}));
  EXPECT_EQ(w.down_cols, (Range{48, 96}));
  EXPECT_EQ(w.layers, (Range{0, 5}));
  // d_model * (32 + 16 + 16 + 32 + 48*3) per layer
  EXPECT_EQ(w.elems_per_layer, 64 * (32 + 16 + 16 + 32 + 144));
  // TP(8) (t > K): rank 5 owns query head 5 and the replicated KV head 5*4/8 = 2.
  const WeightShards w8 = weight_shards(Plan::make_tp(8), kStories, 5);
  EXPECT_EQ(w8.wq_rows, (Range{40, 48}));
  EXPECT_EQ(w8.wk_rows, (Range{16, 24}));
  EXPECT_EQ(w8.down_cols, (Range{60, 72}));
  // SP x TP: projections use the TP shard; pipeline stage layers.
  const WeightShards u = weight_shards(Plan::parse("sp=2,tp=2"), kStories, 3);  // (sp 1, tp 1)
  EXPECT_EQ(u.wq_rows, (Range{32, 64}));
  EXPECT_EQ(u.wo_cols, (Range{32, 64}));
  EXPECT_EQ(weight_shards(Plan::parse("pp=2,layers=1+4,tp=2"), kStories, 3).layers, (Range{1, 5}));
  // Helix kvp=2,tpa=2: QKV by tpa; Wo / FFN as TP(4) shard tpa*2 + kvp. Rank 2 = (kvp 1, tpa 0):
  // Wq heads 0..3 -> [0,32), KV heads 0..1 -> [0,16), Wo heads 2..3 -> [16,32), FFN shard 1 of 4.
  const WeightShards h = weight_shards(Plan::parse("kvp=2,tpa=2"), kStories, 2);
  EXPECT_EQ(h.wq_rows, (Range{0, 32}));
  EXPECT_EQ(h.wk_rows, (Range{0, 16}));
  EXPECT_EQ(h.wo_cols, (Range{16, 32}));
  EXPECT_EQ(h.ffn, (Range{24, 48}));
}

// Shift 3.3.2: base rank (sp, tp) = global sp*t + tp holds a superset of what shift rank
// j = sp + s*tp needs; slices are the shift ranges minus the base shard's start.
TEST(Sharding, ShiftShardIsASliceOfTheBaseShard) {
  int checked = 0;
  for (const ModelShape& m : {kStories, kSynth}) {
    const int H = m.n_heads, K = m.n_kv_heads, F = m.ffn_dim, dh = m.head_dim;
    for (int s = 2; s <= H; ++s)
      for (int t = 1; s * t <= H; ++t) {
        const int P = s * t;
        const auto ok = [&](int d) { return d <= K ? K % d == 0 : d % K == 0; };
        if (H % P != 0 || !ok(t) || !ok(P)) continue;
        for (int g = 0; g < P; ++g) {
          const int sp = g / t, tp = g % t, j = sp + s * tp;
          const Range base_q{int64_t(tp) * H / t * dh, int64_t(tp + 1) * H / t * dh};
          const Range shift_q{int64_t(j) * H / P * dh, int64_t(j + 1) * H / P * dh};
          const Range base_kv = t <= K ? Range{int64_t(tp) * K / t * dh, int64_t(tp + 1) * K / t * dh}
                                       : Range{int64_t(tp * K / t) * dh, int64_t(tp * K / t + 1) * dh};
          const Range shift_kv = P <= K ? Range{int64_t(j) * K / P * dh, int64_t(j + 1) * K / P * dh}
                                        : Range{int64_t(j * K / P) * dh, int64_t(j * K / P + 1) * dh};
          const Range base_f{int64_t(tp) * F / t, int64_t(tp + 1) * F / t};
          const Range shift_f{int64_t(j) * F / P, int64_t(j + 1) * F / P};
          ASSERT_TRUE(base_q.contains(shift_q) && base_kv.contains(shift_kv) && base_f.contains(shift_f))
              << "PLANS.md superset claim, s=" << s << " t=" << t << " g=" << g;
          const WeightShards bw = weight_shards(Plan::make_sp_tp(s, t), m, g);
          const WeightShards sw = weight_shards(Plan::make_shift(s, t), m, g);
          EXPECT_EQ(bw.wq_rows, base_q);
          EXPECT_EQ(sw.wq_rows, shift_q);
          EXPECT_EQ(bw.wk_rows, base_kv);
          EXPECT_EQ(sw.wk_rows, shift_kv) << "s=" << s << " t=" << t << " g=" << g;
          EXPECT_EQ(sw.wo_cols, shift_q);
          EXPECT_EQ(sw.down_cols, shift_f);
          const ShiftSlice x = shift_slice_of_base(Plan::make_sp_tp(s, t), m, g);
          const auto rel = [](Range part, Range whole) { return Range{part.begin - whole.begin, part.end - whole.begin}; };
          EXPECT_EQ(x.wq_rows, rel(shift_q, base_q));
          EXPECT_EQ(x.wk_rows, rel(shift_kv, base_kv));
          EXPECT_EQ(x.wv_rows, rel(shift_kv, base_kv));
          EXPECT_EQ(x.wo_cols, rel(shift_q, base_q));
          EXPECT_EQ(x.gate_rows, rel(shift_f, base_f));
          EXPECT_EQ(x.up_rows, rel(shift_f, base_f));
          EXPECT_EQ(x.down_cols, rel(shift_f, base_f));
          ++checked;
        }
      }
  }
  EXPECT_GT(checked, 50);
  // The paper's example (Figure 6, six heads of dh=4): global rank 3 = (sp 1, tp 1) holds base
  // heads 3..5 (rows [12,24)) and needs head 4 (rows [16,20)): offset [4,8) in its shard.
  const ModelShape six{6, 6, 4, 12, 1, 24};
  EXPECT_EQ(shift_slice_of_base(Plan::parse("shift:sp=3,tp=2"), six, 3).wq_rows, (Range{4, 8}));
  EXPECT_EQ(shift_slice_of_base(Plan::parse("sp=3,tp=2"), six, 2).wq_rows, (Range{4, 8}));  // head 1 in 0..2
}

// Memory per rank: separate shift shards cost w/t + w/P, slicing costs w/t, where w is one
// layer's seven matrices: d * (H*dh [Wq] + 2*K*dh [Wk, Wv] + H*dh [Wo] + 3*F [gate, up, down]).
TEST(Sharding, ShiftWeightMemory) {
  const ModelShape m{8, 4, 4, 64, 2, 32};
  const int64_t w = 32 * (32 + 2 * 16 + 32 + 3 * 64);  // 9216 per layer
  // s=2, t=2: P=4 <= K, every matrix divides evenly.
  for (int g = 0; g < 4; ++g) {
    const ShiftWeightMemory mem = shift_weight_memory(Plan::make_sp_tp(2, 2), m, g);
    EXPECT_EQ(mem.sliced(), 2 * w / 2);
    EXPECT_EQ(mem.separate(), 2 * (w / 2 + w / 4));
  }
  // s=4, t=2: P=8 > K: each shift rank replicates a whole KV head (dh rows of Wk and Wv), so the
  // shift shard is d * (4 [Wq] + 4 + 4 [Wk, Wv] + 4 [Wo] + 3*8 [FFN]) = 32 * 40 per layer, more
  // than w/8 = 32 * 36.
  const ShiftWeightMemory mem = shift_weight_memory(Plan::make_sp_tp(4, 2), m, 5);
  EXPECT_EQ(mem.base_elems, 2 * w / 2);
  EXPECT_EQ(mem.shift_elems, 2 * 32 * 40);
  EXPECT_EQ(mem.separate(), 2 * (w / 2 + 32 * 40));
  EXPECT_EQ(mem.sliced(), 2 * w / 2);
  // A Helix plan has no shift config.
  EXPECT_THROW(shift_weight_memory(Plan::parse("kvp=2,tpa=2"), m, 0), Error);
}

}  // namespace
}  // namespace loom
