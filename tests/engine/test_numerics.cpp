// The fast numerics mode through the engine (kernels.h "Numerics"): decode equals prefill bit for
// bit, the mode is what the engine options say, and the exact mode is unchanged.
//
// Exactness class: same bits. In fast mode every matmul gives the same bits for a token alone
// and inside a batch (tests/kernels/test_matmul_fast.cpp), and rmsnorm, RoPE and attention work
// per token, so the logits of the last prompt token are the same whether the prompt is prefilled
// in one step or its last token is decoded after the rest.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/rank_engine.h"
#include "model/loader.h"
#include "model/synth.h"
#include "test_util.h"

namespace loom {
namespace {

std::shared_ptr<Model> synth(DType dt) {
  SynthOptions o;
  o.shape = parse_synth_dims("d=128,layers=2,heads=4,kv_heads=2,head_dim=32,ffn=256,vocab=512,ctx=256");
  o.dtype = dt;
  o.seed = 9;
  o.threads = 1;
  const std::string p = test::temp_dir() + "/num-" + std::string(dtype_name(dt)) + ".gguf";
  write_synth_model(o, p);
  return load_model(p);
}

ForwardBatch seq(const std::vector<int32_t>& tokens, int start) {
  ForwardBatch b;
  b.tokens = tokens;
  b.seqs.push_back({0, start, int(tokens.size()), true});
  return b;
}

// Logits after `prompt` (one step), and after prompt[:-1] then the last token (two steps).
std::pair<std::vector<float>, std::vector<float>> prefill_vs_decode(const std::shared_ptr<Model>& m, int n_prompt,
                                                                    kernels::Numerics num) {
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt), 0);
  for (int i = 0; i < n_prompt; ++i) prompt[size_t(i)] = (i * 131 + 5) % m->config.vocab_size;
  ThreadPool pool(2);
  std::vector<float> a, b;
  {
    SingleRankModel tf(m, &pool, 64, 16, Plan::make_tp(1), num);
    tf.forward(seq(prompt, 0), a);
  }
  {
    SingleRankModel tf(m, &pool, 64, 16, Plan::make_tp(1), num);
    std::vector<float> ignore;
    tf.forward(seq(std::vector<int32_t>(prompt.begin(), prompt.end() - 1), 0), ignore);
    tf.forward(seq({prompt.back()}, n_prompt - 1), b);
  }
  return {a, b};
}

int diff_bits(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  int d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d += std::memcmp(&a[i], &b[i], 4) != 0;
  return d;
}

class Numerics : public ::testing::TestWithParam<DType> {};

TEST_P(Numerics, FastDecodeEqualsPrefillBitForBit) {
  const auto m = synth(GetParam());
  for (int n : {5, 30}) {  // the small-batch and the packed prefill sizes
    const auto [a, b] = prefill_vs_decode(m, n, kernels::Numerics::fast);
    EXPECT_EQ(diff_bits(a, b), 0) << "prompt " << n;
  }
}

// The mode reaches the kernels: fast and exact logits differ (the activations are quantized) by
// by no more than the quantization allows at this size.
TEST_P(Numerics, ModesDifferWithinTheQuantization) {
  const auto m = synth(GetParam());
  const auto [fa, fb] = prefill_vs_decode(m, 12, kernels::Numerics::fast);
  const auto [ea, eb] = prefill_vs_decode(m, 12, kernels::Numerics::exact);
  EXPECT_GT(diff_bits(fa, ea), 0) << "fast mode computed the exact logits";
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < fa.size(); ++i) {
    num += (double(fa[i]) - ea[i]) * (double(fa[i]) - ea[i]);
    den += double(ea[i]) * ea[i];
  }
  // Relative RMS difference: q8_0 activations carry ~0.4% relative error per value (d/2 over
  // amax/127 spread), bf16 ~0.2%; through 2 layers well under 5%.
  EXPECT_LT(std::sqrt(num / den), 0.05);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Numerics, ::testing::Values(DType::Q8_0, DType::BF16),
                         [](const auto& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace loom
