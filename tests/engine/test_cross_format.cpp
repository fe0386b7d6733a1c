// One synthetic model written as GGUF (interleaved RoPE with permuted Q/K rows, Llama-3 scaling
// as rope_freqs divisors) and as HF safetensors (half-split RoPE, llama3 rope_scaling in
// config.json) is the same function: the engine must produce the same greedy tokens from both.
// This checks the loaders, the Q/K permutation, both RoPE conventions and both encodings of
// Llama-3 scaling against each other.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generator.h"
#include "model/loader.h"
#include "model/synth.h"
#include "test_util.h"

namespace loom {
namespace {

std::vector<int32_t> greedy(const std::shared_ptr<Model>& m, const std::vector<int32_t>& prompt, int n,
                            std::vector<float>* first_logits) {
  ThreadPool pool(1);
  SingleRankModel tf(m, &pool, int64_t(prompt.size()) + n);
  GenerateOptions o;
  o.max_new_tokens = n;
  std::vector<int32_t> out = generate(tf, prompt, o).tokens;
  if (first_logits) {
    // Logits of the prompt's last position, through a fresh cache (generate released sequence 0).
    ForwardBatch b;
    b.tokens = prompt;
    b.seqs.push_back({0, 0, int(prompt.size()), true});
    tf.forward(b, *first_logits);
  }
  return out;
}

class CrossFormat : public ::testing::TestWithParam<DType> {};

TEST_P(CrossFormat, GgufAndSafetensorsOfOneSeedGiveTheSameTokens) {
  SynthShape shape = synth_shape("tiny");
  shape.name = "tiny-llama3-rope";
  // Llama-3 scaling with a short original context so that every band of the scaling (kept,
  // divided, blended) is hit by head_dim 16's frequencies.
  shape.config.rope_theta = 10000.0f;
  shape.config.rope_scaling.llama3 = true;
  shape.config.rope_scaling.factor = 8.0f;
  shape.config.rope_scaling.low_freq_factor = 1.0f;
  shape.config.rope_scaling.high_freq_factor = 4.0f;
  shape.config.rope_scaling.original_max_position = 64;
  const std::string dir = test::temp_dir();
  SynthOptions o;
  o.shape = shape;
  o.dtype = GetParam();
  o.seed = 11;
  o.threads = 1;
  o.format = "gguf";
  auto gguf = load_model(write_synth_model(o, dir + "/m.gguf").model_path);
  o.format = "safetensors";
  auto st = load_model(write_synth_model(o, dir + "/st").model_path);

  ASSERT_EQ(gguf->config.rope_style, RopeStyle::Interleaved);
  ASSERT_EQ(st->config.rope_style, RopeStyle::HalfSplit);
  ASSERT_FALSE(gguf->config.rope_scaling.freq_factors.empty());
  ASSERT_TRUE(st->config.rope_scaling.llama3);

  const std::vector<int32_t> prompt = {1, 17, 230, 5, 99, 410, 77, 3, 250, 12, 300, 44, 8, 91, 160, 501, 2, 64, 33, 71};
  std::vector<float> la, lb;
  const auto a = greedy(gguf, prompt, 60, &la);
  const auto b = greedy(st, prompt, 60, &lb);
  EXPECT_EQ(a, b);
  // In f32 the two files hold the same numbers, so the logits agree up to summation order (f32
  // rounding of a few hundred terms). In bf16 they are two slightly different models: GGUF keeps
  // norm weights in f32 (as llama.cpp's converter does) while safetensors rounds them to bf16
  // (relative 2^-9), so only the tokens are compared there.
  ASSERT_EQ(la.size(), lb.size());
  if (GetParam() != DType::F32) return;
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    max_diff = std::max(max_diff, double(std::fabs(la[i] - lb[i])));
    max_abs = std::max(max_abs, double(std::fabs(la[i])));
  }
  EXPECT_LE(max_diff, 1e-4 * std::max(1.0, max_abs)) << "max |logit diff| " << max_diff;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CrossFormat, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace loom
