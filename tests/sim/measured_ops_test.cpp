// The profiled machine's operators priced as measured (sim/measured_ops.h): the curves interpolate
// and extrapolate as documented, noise that makes more work cheaper is pooled away, and a step of
// loom's CPU engine is priced from hand-written measurement files to the sum a reader computes
// from those files (operators chosen as power laws, so log-log interpolation between the rows is
// exact and the expected sums follow from the rows alone).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "sim/calibration.h"
#include "sim/cost_model.h"
#include "sim/measured_ops.h"
#include "test_util.h"

namespace loom::sim {
namespace {

TEST(SimMeasuredOps, CurveInterpolatesInLogLogAndExtrapolatesLinearly) {
  const LogCurve c = LogCurve::from_points({{1, 1e-3}, {4, 4e-3}, {16, 16e-3}, {4, 100e-3}, {4, 3e-3}});
  // x = 4 holds 3, 4 and 100 ms: their median, 4 ms.
  EXPECT_NEAR(c.seconds(4), 4e-3, 1e-12);
  // Between knots of a proportional curve: proportional.
  EXPECT_NEAR(c.seconds(2), 2e-3, 1e-12);
  EXPECT_NEAR(c.seconds(10), 10e-3, 1e-12);
  // Below the first knot: its value (a latency floor); above the last: the last slope (1 ms/unit).
  EXPECT_NEAR(c.seconds(0.25), 1e-3, 1e-12);
  EXPECT_NEAR(c.seconds(32), 32e-3, 1e-12);
}

TEST(SimMeasuredOps, MoreWorkIsNeverCheaper) {
  // 2 ms at 1 token, then 1 ms at 2 (noise), 4 ms at 4: the first two pool to their geometric mean.
  const LogCurve c = LogCurve::from_points({{1, 2e-3}, {2, 1e-3}, {4, 4e-3}});
  EXPECT_NEAR(c.seconds(1), std::sqrt(2.0) * 1e-3, 1e-12);
  EXPECT_NEAR(c.seconds(2), std::sqrt(2.0) * 1e-3, 1e-12);
  EXPECT_NEAR(c.seconds(4), 4e-3, 1e-12);
  for (double x = 1; x < 8; x += 0.25) EXPECT_LE(c.seconds(x), c.seconds(x + 0.25) + 1e-15) << x;
}

TEST(SimMeasuredOps, ATokenNeverCostsMoreInALargerGemm) {
  // Per token 1.0, 1.2 (a slow moment), 0.9 ms at 64, 128, 256 tokens: the first two pool to
  // their geometric mean per token, sqrt(1.2) ms; 256 stays at 0.9.
  const std::vector<std::pair<double, double>> pts{{64, 64e-3}, {128, 128 * 1.2e-3}, {256, 256 * 0.9e-3}};
  const LogCurve c = LogCurve::from_points(pts, /*economies_of_scale=*/true);
  EXPECT_NEAR(c.seconds(64), 64 * std::sqrt(1.2) * 1e-3, 1e-12);
  EXPECT_NEAR(c.seconds(128), 128 * std::sqrt(1.2) * 1e-3, 1e-12);
  EXPECT_NEAR(c.seconds(256), 256 * 0.9e-3, 1e-12);
  // Without: as measured (the curve is already non-decreasing).
  EXPECT_NEAR(LogCurve::from_points(pts).seconds(128), 128 * 1.2e-3, 1e-12);
  // Both hold at once on noisy points: never cheaper for more tokens, never dearer per token.
  const LogCurve n = LogCurve::from_points({{1, 3e-3}, {2, 2e-3}, {4, 9e-3}, {8, 10e-3}, {16, 12e-3}, {32, 30e-3}},
                                           true);
  for (double x = 1; x < 32; x += 0.5) {
    EXPECT_LE(n.seconds(x), n.seconds(x + 0.5) + 1e-15) << x;
    EXPECT_GE(n.seconds(x) / x, n.seconds(x + 0.5) / (x + 0.5) - 1e-15) << x;
  }
}

// Model: d 64, 4 heads of 16, 2 KV heads, FFN 128, vocabulary 256, 2 layers.
ModelConfig tiny() {
  ModelConfig c;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 128;
  c.vocab_size = 256;
  c.max_seq_len = 1024;
  return c;
}

// ms per token of each operator of one layer (tp = 1); every operator proportional to its tokens.
constexpr double kPre = 0.010, kPost = 0.004, kUp = 0.020, kDown = 0.008, kNorm = 0.001, kAdd = 0.0005,
                 kAct = 0.002, kRope = 0.0015, kEmb = 0.0003;

std::string write_files() {
  const std::string dir = test::temp_dir();
  std::ofstream mlp(dir + "/mlp_tiny_f32.csv");
  mlp << "time_stats.emb.median,time_stats.input_layernorm.median,time_stats.attn_pre_proj.median,"
         "time_stats.attn_rope.median,time_stats.attn_post_proj.median,time_stats.post_attention_layernorm.median,"
         "time_stats.mlp_up_proj.median,time_stats.mlp_act.median,time_stats.mlp_down_proj.median,time_stats.add.median,"
         "n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers,"
         "weight_dtype,weight_bytes,act_bytes,kv_bytes,kernels,concurrent_ranks\n";
  for (int m : {1, 4, 16, 64})
    mlp << kEmb * m << "," << kNorm * m << "," << kPre * m << "," << kRope * m << "," << kPost * m << ","
        << kNorm * m << "," << kUp * m << "," << kAct * m << "," << kDown * m << "," << kAdd * m
        << ",4,2,64,128,256,True," << m << ",1,f32,4,4,4,loom_cpu,1\n";
  std::ofstream att(dir + "/attention_tiny.csv");
  att << "time_stats.attn_prefill.median,time_stats.attn_decode.median,n_q_head,n_kv_head,n_embd,"
         "num_tensor_parallel_workers,batch_size,prefill_chunk_size,kv_cache_size,is_prefill,kv_bytes,act_bytes\n";
  // Decode: 1e-4 ms per context token and sequence at batch 1, half that at batch 4.
  for (int before : {16, 64, 256}) {
    att << "," << 1e-4 * (before + 1) << ",4,2,64,1,1,1," << before << ",False,4,4\n";
    att << "," << 4 * 0.5e-4 * (before + 1) << ",4,2,64,1,4,1," << before << ",False,4,4\n";
  }
  // Prefill: 1e-3 ms per chunk token, times (1 + earlier tokens / 256).
  for (int chunk : {16, 64})
    for (int before : {0, 256}) att << 1e-3 * chunk * (1 + before / 256.0) << ",,4,2,64,1,1," << chunk << "," << before << ",True,4,4\n";
  return dir;
}


CostModel measured_model(const std::vector<MeasurementFile>& files) {
  std::vector<const MeasurementFile*> use;
  for (const auto& f : files) use.push_back(&f);
  Calibration cal = default_calibration();
  cal.measured = std::make_shared<MeasuredOps>(measured_ops(use));
  CostModelOptions o;
  o.weight_bytes = 4, o.act_bytes = 4, o.kv_bytes = 4;
  o.kernels = StepKernels::LoomCpu;
  o.custom_all_reduce = false;
  o.activation_reserve_bytes = 0;
  o.memory_utilization = 1.0;
  return CostModel(tiny(), cpu_node(cpu_spec(20e9, 50e9, 8e9), 1), o, cal);
}

TEST(SimMeasuredOps, StepPricedFromTheMeasuredOperators) {
  const auto files = read_measurements(write_files());
  const CostModel cm = measured_model(files);
  const PricedPlan tp1 = cm.prepare(Plan::make_tp(1));
  // One prompt chunk of 32 tokens (not a measured count), sampling its last row.
  const StepCost c = cm.price(tp1, {SeqWork{32, 32, true}});
  const double layers = 2, m = 32;
  // Wq/Wk/Wv, W_O, W_gate/W_up, W_down per layer; the classifier ([1, 64] x [64, 256]) scaled from
  // the widest measured GEMM of k = 64, W_gate + W_up (2 x 128 columns): 256 / 256 of it at 1 row.
  const double gemm_ms = layers * m * (kPre + kPost + kUp + kDown) + kUp * 1 * 256.0 / 256.0;
  EXPECT_NEAR(c.gemm_s * 1e3, gemm_ms, 1e-9);
  // RoPE, two norms, two adds, SwiGLU per layer; the embedding of 32 rows and the final norm of 1.
  const double elem_ms = layers * m * (kRope + 2 * kNorm + 2 * kAdd + kAct) + kEmb * m + kNorm * 1;
  EXPECT_NEAR(c.elementwise_s * 1e3, elem_ms, 1e-9);
  // Prefill of 32 tokens with no earlier ones: 1e-3 ms per token (the before = 0 curve), per layer.
  EXPECT_NEAR(c.attention_s * 1e3, layers * 1e-3 * m, 1e-9);
}

TEST(SimMeasuredOps, AttentionAtTheStepsBatchAndContexts) {
  const auto files = read_measurements(write_files());
  std::vector<const MeasurementFile*> use;
  for (const auto& f : files) use.push_back(&f);
  const MeasuredOps ops = measured_ops(use);
  // Two decodes (contexts 65 and 257): per sequence between batch 1 (1e-4 ms per token) and
  // batch 4 (0.5e-4), log-interpolated at batch 2 (halfway in log): sqrt(1e-4 * 0.5e-4) per token.
  const double per_token = std::sqrt(1e-4 * 0.5e-4);
  EXPECT_NEAR(ops.attention_s({{1, 65}, {1, 257}}, 4, 2, 16) * 1e3, per_token * (65 + 257), 1e-12);
  // A 32-token chunk after 128 earlier tokens: halfway between 0 and 256 earlier, 1.5e-3 ms per
  // token; after 512, beyond the last count on the line through both: 3e-3 ms per token.
  EXPECT_NEAR(ops.attention_s({{32, 160}}, 4, 2, 16) * 1e3, 32 * 1.5e-3, 1e-12);
  EXPECT_NEAR(ops.attention_s({{32, 544}}, 4, 2, 16) * 1e3, 32 * 3e-3, 1e-12);
  // Heads that were not measured: no price (the efficiency fit prices them).
  EXPECT_LT(ops.attention_s({{1, 65}}, 2, 1, 16), 0);
  EXPECT_LT(ops.gemm_s(4, 64, 999), 0);
}

TEST(SimMeasuredOps, UnmeasuredShapesKeepTheFit) {
  const auto files = read_measurements(write_files());
  const CostModel measured = measured_model(files);
  CostModelOptions o = measured.options();
  const CostModel fitted(tiny(), measured.node(), o, default_calibration());
  // A GEMM of a shape no file has: the same price with and without the measurements.
  EXPECT_DOUBLE_EQ(measured.gemm_s(8, 64, 300, SimDType::BF16, 4, 4), fitted.gemm_s(8, 64, 300, SimDType::BF16, 4, 4));
  // A measured one: the measurement (W_down, k = 128, n = 64, 8 tokens).
  EXPECT_NEAR(measured.gemm_s(8, 128, 64, SimDType::BF16, 4, 4) * 1e3, kDown * 8, 1e-12);
}

}  // namespace
}  // namespace loom::sim
