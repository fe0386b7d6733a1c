// The engine's decode layout (row tiles, core/weight_tiles.h) against the model's plain rows: a
// Transformer built the default way (its shard copied into row tiles) and one built on views of
// the memory-mapped file compute the same function. Where both run the same kernel code (one
// token per step: the tiled gemv repeats the plain gemv's operations in its order; prompts longer
// than the small-batch path: both unpack to the same f32 panels) the logits are equal bit for bit.
#include <gtest/gtest.h>

#include "core/weight_tiles.h"
#include "engine/shard_weights.h"
#include "engine/transformer.h"
#include "model/loader.h"
#include "model/synth.h"
#include "test_util.h"

namespace loom {
namespace {

ForwardBatch one_seq(const std::vector<int32_t>& tokens, int start, int32_t* table) {
  ForwardBatch b;
  b.tokens = tokens;
  b.seqs.push_back({start, int(tokens.size()), table, 8, true});
  return b;
}

// Logits of a 30-token prompt, then of 6 single-token steps.
std::vector<std::vector<float>> run(Transformer& tf, const ModelConfig& c) {
  KvLayout lay{c.n_layers, c.n_kv_heads, c.head_dim, 16, 8};
  KvStorage kv(lay);
  std::vector<int32_t> table(8);
  for (int i = 0; i < 8; ++i) table[size_t(i)] = i;
  std::vector<int32_t> prompt(30);
  for (int i = 0; i < 30; ++i) prompt[size_t(i)] = (i * 389 + 7) % c.vocab_size;
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  tf.forward(one_seq(prompt, 0, table.data()), kv, logits);
  out.push_back(logits);
  for (int s = 0; s < 6; ++s) {
    int32_t next = 0;
    for (int v = 1; v < c.vocab_size; ++v) next = logits[size_t(v)] > logits[size_t(next)] ? v : next;
    tf.forward(one_seq({next}, 30 + s, table.data()), kv, logits);
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
  const ShardSpec full = ShardSpec::full(m->config);

  const ShardWeightSet tiled = decode_shard(shard_views(*m, full));
  for (const ShardLayerWeights& L : tiled.layers)
    for (const WeightView* w : L.matrices()) ASSERT_TRUE(w->tiled());
  ASSERT_TRUE(m->decode_output().tiled());

  ThreadPool pool(2);
  Transformer a(m, full, &pool);                                     // the default: row tiles
  Transformer b(m, full, &pool, nullptr, shard_views(*m, full));     // plain views of the file
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
