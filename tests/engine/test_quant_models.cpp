// The engine on GGUF files quantized by an independent tool (../shared/models/tiny-quants: a
// random-weight Llama quantized by llama.cpp's llama-quantize, and F32 twins holding gguf-py's
// dequantization of the Q4_0 and Q4_K_M files).
//
// Exactness classes:
//  - exact numerics, quantized file vs its F32 twin: the same weights (dequantization is bit-exact,
//    tests/model/test_quant_gguf.cpp) through the f32 kernels (kernels_quant_impl.h: the exact
//    path dequantizes, then runs the f32 kernel): greedy tokens equal.
//  - fast numerics: a prompt's last logits are the same bits prefilled in one step or with its last
//    token decoded after the rest (every fast kernel gives a token alone the bits it gets in a
//    batch, tests/kernels/test_matmul_quant.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "engine/generator.h"
#include "engine/rank_engine.h"
#include "model/loader.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

std::string quant_file(const std::string& name) {
  const std::string s = test::shared_dir();
  return s.empty() ? "" : s + "/models/tiny-quants/tiny-" + name + ".gguf";
}

#define REQUIRE_QUANTS()                                                                                \
  do {                                                                                                  \
    if (quant_file("q4_0").empty() || !std::ifstream(quant_file("q4_0")))                               \
      GTEST_SKIP() << "../shared/models/tiny-quants is missing beside the checkout; this test needs it"; \
  } while (0)

struct NumericsScope {
  kernels::Numerics before = kernels::default_numerics();
  explicit NumericsScope(kernels::Numerics n) { kernels::set_default_numerics(n); }
  ~NumericsScope() { kernels::set_default_numerics(before); }
};

std::vector<std::vector<int32_t>> prompts(int vocab) {
  return test::random_prompts(4, 24, vocab, 35);
}

TEST(QuantModels, ExactGreedyTokensEqualTheF32Twin) {
  REQUIRE_QUANTS();
  NumericsScope exact(kernels::Numerics::exact);
  for (const std::string q : {"q4_0", "q4_k_m"}) {
    SCOPED_TRACE(q);
    const auto m = load_model(quant_file(q));
    const auto twin = load_model(quant_file(q + "-dequant-f32"));
    for (const auto& p : prompts(m->config.vocab_size)) {
      const auto a = test::alone(m, p, 24), b = test::alone(twin, p, 24);
      EXPECT_EQ(a, b);
    }
  }
}

ForwardBatch seq(const std::vector<int32_t>& tokens, int start) {
  ForwardBatch b;
  b.tokens = tokens;
  b.seqs.push_back({0, start, int(tokens.size()), true});
  return b;
}

TEST(QuantModels, FastDecodeEqualsPrefillBitForBit) {
  REQUIRE_QUANTS();
  for (const std::string q : {"q4_0", "q4_1", "q5_0", "q4_k_m", "q5_k_m", "q6_k"}) {
    SCOPED_TRACE(q);
    const auto m = load_model(quant_file(q));
    for (int n : {5, 30}) {
      std::vector<int32_t> prompt(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) prompt[size_t(i)] = (i * 131 + 5) % m->config.vocab_size;
      ThreadPool pool(2);
      std::vector<float> a, b, ignore;
      {
        SingleRankModel tf(m, &pool, 64, 16, Plan::make_tp(1), kernels::Numerics::fast);
        tf.forward(seq(prompt, 0), a);
      }
      {
        SingleRankModel tf(m, &pool, 64, 16, Plan::make_tp(1), kernels::Numerics::fast);
        tf.forward(seq(std::vector<int32_t>(prompt.begin(), prompt.end() - 1), 0), ignore);
        tf.forward(seq({prompt.back()}, n - 1), b);
      }
      ASSERT_EQ(a.size(), b.size());
      int diff = 0;
      for (size_t i = 0; i < a.size(); ++i) diff += std::memcmp(&a[i], &b[i], 4) != 0;
      EXPECT_EQ(diff, 0) << "prompt " << n;
    }
  }
}

// Fast and exact numerics differ on a quantized model by what quantizing the activations allows
// (the mode reaches the kernels of every block type).
TEST(QuantModels, FastAndExactDifferWithinTheActivationQuantization) {
  REQUIRE_QUANTS();
  for (const std::string q : {"q4_0", "q4_k_m", "q6_k"}) {
    SCOPED_TRACE(q);
    const auto m = load_model(quant_file(q));
    std::vector<int32_t> prompt(12);
    for (int i = 0; i < 12; ++i) prompt[size_t(i)] = (i * 37 + 11) % m->config.vocab_size;
    ThreadPool pool(1);
    std::vector<float> f, e;
    SingleRankModel(m, &pool, 64, 16, Plan::make_tp(1), kernels::Numerics::fast).forward(seq(prompt, 0), f);
    SingleRankModel(m, &pool, 64, 16, Plan::make_tp(1), kernels::Numerics::exact).forward(seq(prompt, 0), e);
    double num = 0, den = 0;
    int diff = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      num += (double(f[i]) - e[i]) * (double(f[i]) - e[i]);
      den += double(e[i]) * e[i];
      diff += std::memcmp(&f[i], &e[i], 4) != 0;
    }
    EXPECT_GT(diff, 0) << "fast mode computed the exact logits";
    // int8 activations carry ~0.4% relative error per value; through 4 layers well under 5%.
    EXPECT_LT(std::sqrt(num / den), 0.05);
  }
}

}  // namespace
}  // namespace loom
