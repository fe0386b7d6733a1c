// The simulator's model catalog takes any model loom can load, not only built-in names.
#include <gtest/gtest.h>

#include "model/synth.h"
#include "sim/model_catalog.h"
#include "test_util.h"

namespace loom {
namespace {

void expect_shape(const ModelConfig& got, const ModelConfig& want) {
  EXPECT_EQ(got.d_model, want.d_model);
  EXPECT_EQ(got.n_layers, want.n_layers);
  EXPECT_EQ(got.n_heads, want.n_heads);
  EXPECT_EQ(got.n_kv_heads, want.n_kv_heads);
  EXPECT_EQ(got.ffn_dim, want.ffn_dim);
  EXPECT_EQ(got.vocab_size, want.vocab_size);
  EXPECT_EQ(got.param_count(), want.param_count());
}

TEST(SimCatalogFiles, ReadsGgufFilesCheckpointFoldersAndConfigJson) {
  const std::string dir = test::temp_dir();
  SynthOptions o;
  o.shape = synth_shape("gqa-24x6");
  o.dtype = DType::F16;
  o.threads = 1;
  o.format = "gguf";
  expect_shape(sim::find_model(write_synth_model(o, dir + "/m.gguf").model_path), o.shape.config);
  o.format = "safetensors";
  const std::string st = write_synth_model(o, dir + "/st").model_path;
  expect_shape(sim::find_model(st), o.shape.config);                   // the folder
  expect_shape(sim::find_model(st + "/config.json"), o.shape.config);  // its config.json alone
}

TEST(SimCatalogFiles, StoriesCheckpoint) {
  LOOM_REQUIRE_SHARED();
  const ModelConfig c = sim::find_model(test::stories_dir() + "/stories260K.bin");
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
}

}  // namespace
}  // namespace loom
