// The engine's decode layout (row tiles, core/weight_tiles.h) against the model's plain rows: the
// single-rank model built the default way (weights=resident: its shard copied into row tiles) and
// one with weights=full (views of the memory-mapped file, no copy) compute the same function. Where both run the same kernel code (one
// token per step: the tiled gemv repeats the plain gemv's operations in its order; prompts longer
// than the small-batch path: both unpack to the same f32 panels) the logits are equal bit for bit.
#include <gtest/gtest.h>

#include "core/weight_tiles.h"
#include "engine/shard_weights.h"
#include "engine/rank_engine.h"
#include "model/loader.h"
#include "model/synth.h"
#include "test_util.h"

namespace loom {
namespace {

ForwardBatch one_seq(const std::vector<int32_t>& tokens, int start) {
  ForwardBatch b;
  b.tokens = tokens;
  b.seqs.push_back({0, start, int(tokens.size()), true});
  return b;
}

// Logits of a 30-token prompt, then of 6 single-token steps.
std::vector<std::vector<float>> run(SingleRankModel& tf, const ModelConfig& c) {
  std::vector<int32_t> prompt(30);
  for (int i = 0; i < 30; ++i) prompt[size_t(i)] = (i * 389 + 7) % c.vocab_size;
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  tf.forward(one_seq(prompt, 0), logits);
  out.push_back(logits);
  for (int s = 0; s < 6; ++s) {
    int32_t next = 0;
    for (int v = 1; v < c.vocab_size; ++v) next = logits[size_t(v)] > logits[size_t(next)] ? v : next;
    tf.forward(one_seq({next}, 30 + s), logits);
    out.push_back(logits);
  }
  return out;
}

class WeightTiles : public ::testing::TestWithParam<DType> {};

TEST_P(WeightTiles, TiledShardGivesTheBitsOfThePlainViews) {
  if (!weight_tiles_enabled()) GTEST_SKIP() << "LOOM_WEIGHT_TILES=0: engines keep plain rows";
  SynthOptions o;
  o.shape = synth_shape("small");  // d 512, ffn 1536: every matrix tiles in every dtype
  o.dtype = GetParam();
  o.seed = 5;
  o.threads = 2;
  o.format = "gguf";
  const std::string dir = test::temp_dir();
  std::shared_ptr<const Model> m = load_model(write_synth_model(o, dir + "/m.gguf").model_path);
  const WeightShards full = weight_shards(Plan::make_tp(1), ModelShape::from(m->config, weight_block_elems(*m)), 0);

  const ShardWeightSet tiled = decode_shard(shard_views(*m, full));
  for (const ShardLayerWeights& L : tiled.layers)
    for (const WeightView* w : L.matrices()) ASSERT_TRUE(w->tiled());
  ASSERT_TRUE(m->decode_output().tiled());

  ThreadPool pool(2);
  SingleRankModel a(m, &pool, 64);                                             // resident: row tiles
  SingleRankModel b(m, &pool, 64, 16, Plan::parse("tp=1,weights=full"));  // views of the file
  EXPECT_GT(a.engine().owned_weight_bytes(), 0);
  EXPECT_EQ(b.engine().owned_weight_bytes(), 0);  // weights=full copies nothing
  const auto la = run(a, m->config), lb = run(b, m->config);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t s = 0; s < la.size(); ++s) {
    ASSERT_EQ(la[s].size(), lb[s].size());
    int diff = 0;
    for (size_t i = 0; i < la[s].size(); ++i) diff += la[s][i] != lb[s][i];
    EXPECT_EQ(diff, 0) << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, WeightTiles, ::testing::Values(DType::F32, DType::BF16, DType::Q8_0),
                         [](const auto& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace loom
