// rmsnorm, swiglu, add_bias, rope and rope_inv_freq.
#include <algorithm>

#include "kernel_test_util.h"

namespace loom {
namespace {

// rmsnorm. Metric: |out - ref| <= (dim + 8) * u * |ref| + 1e-30. Why: the f32 sum of squares is
// within dim*u relative of the exact one (all terms positive), its inverse square root halves
// that, and the two products add 2u; the reference is double.
TEST(KernelsElementwise, RmsnormMatchesReference) {
  uint64_t seed = 1;
  for (int64_t dim : {1, 7, 16, 97, 288, 4096 + 7})
    for (int64_t n : {1, 3, 17}) {
      SCOPED_TRACE(cat("dim ", dim, " n ", n));
      Rng rng(seed++);
      const auto x = test::random_vec(rng, size_t(n * dim), 3.0);
      const auto w = test::random_vec(rng, size_t(dim));
      std::vector<float> ref(x.size());
      kernels::rmsnorm_ref(ref.data(), x.data(), w.data(), n, dim, 1e-5f);
      test::for_each_path([&](const std::string&) {
        std::vector<float> out(x.size());
        kernels::rmsnorm(out.data(), x.data(), w.data(), n, dim, 1e-5f);
        for (size_t i = 0; i < out.size(); ++i)
          ASSERT_LE(std::fabs(out[i] - ref[i]), double(dim + 8) * test::kU32 * std::fabs(ref[i]) + 1e-30) << i;
        std::vector<float> inplace = x;  // out may alias x
        kernels::rmsnorm(inplace.data(), inplace.data(), w.data(), n, dim, 1e-5f);
        EXPECT_EQ(inplace, out);
      });
    }
}

// swiglu. Metric: |out - ref| <= 16 * u * |ref| + 1e-37. Why: exp (vector Cephes polynomial or
// libm) is within ~3 ulp, 1 + e, the division and the product add one rounding each; for very
// negative gates the exp's relative error carries over unchanged. 16 u leaves margin for
// neither more. Gates cover [-30, 30] and exact zeros.
TEST(KernelsElementwise, SwigluMatchesReference) {
  uint64_t seed = 50;
  for (int64_t n : {1, 7, 17, 97, 1000 + 3}) {
    Rng rng(seed++);
    auto gate = test::random_vec(rng, size_t(n), 6.0);
    const auto up = test::random_vec(rng, size_t(n));
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = std::clamp(gate[i], -30.0f, 30.0f);
    gate[0] = 0.0f;
    std::vector<float> ref(static_cast<size_t>(n));
    kernels::swiglu_ref(ref.data(), gate.data(), up.data(), n);
    test::for_each_path([&](const std::string&) {
      std::vector<float> out(static_cast<size_t>(n));
      kernels::swiglu(out.data(), gate.data(), up.data(), n);
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_LE(std::fabs(out[i] - ref[i]), 16.0 * test::kU32 * std::fabs(ref[i]) + 1e-37)
            << "gate " << gate[i] << " up " << up[i] << " out " << out[i] << " ref " << ref[i];
      std::vector<float> alias = gate;  // out may alias gate
      kernels::swiglu(alias.data(), alias.data(), up.data(), n);
      EXPECT_EQ(alias, out);
    });
  }
}

// An element's bits do not depend on where it falls in a call (vector body or tail): the FFN of a
// row computed in a batch of 2 rows (a pipeline micro-batch) must equal the same row in a batch of
// 20 (the single rank), which the exactness contract of PP and DP rests on. Pure data movement of
// the same arithmetic: bit-equal, on every kernel path.
TEST(KernelsElementwise, SwigluBitsDoNotDependOnTheCallsExtent) {
  Rng rng(77);
  const int64_t n = 20 * 172;
  auto gate = test::random_vec(rng, size_t(n), 4.0);
  const auto up = test::random_vec(rng, size_t(n));
  test::for_each_path([&](const std::string& path) {
    std::vector<float> whole(static_cast<size_t>(n));
    kernels::swiglu(whole.data(), gate.data(), up.data(), n);
    for (int64_t begin : {0, 1, 5, 172, 344}) {
      for (int64_t len : {1, 3, 8, 15, 17, 172, 344, 1000}) {
        std::vector<float> part(static_cast<size_t>(len));
        kernels::swiglu(part.data(), gate.data() + begin, up.data() + begin, len);
        ASSERT_EQ(std::memcmp(part.data(), whole.data() + begin, size_t(len) * sizeof(float)), 0)
            << path << ": elements [" << begin << ", " << begin + len << ") differ from the same elements of one call";
      }
    }
  });
}

TEST(KernelsElementwise, AddBiasStrided) {
  std::vector<float> x(3 * 5, 1.0f);
  const float bias[4] = {1, 2, 3, 4};
  kernels::add_bias(x.data(), 3, 5, bias, 4);
  for (int i = 0; i < 3; ++i) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(x[size_t(i * 5 + c)], 1.0f + bias[c]);
    EXPECT_EQ(x[size_t(i * 5 + 4)], 1.0f);  // beyond cols: untouched
  }
}

// rope_inv_freq without scaling: theta^(-2i/hd) (checked in double).
TEST(KernelsRope, InvFreqPlain) {
  kernels::RopeParams p;
  p.head_dim = 64;
  p.theta = 10000.0f;
  std::vector<float> f(32);
  kernels::rope_inv_freq(p, f.data());
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_FLOAT_EQ(f[1], float(std::pow(10000.0, -2.0 / 64)));
  EXPECT_FLOAT_EQ(f[31], float(std::pow(10000.0, -62.0 / 64)));
}

// Llama-3.1 scaling (factor 8, low 1, high 4, original 8192, theta 500000, head_dim 128), checked
// by its defining properties: wavelength < 2048 kept, > 8192 divided by 8, the band in between
// blended; values taken by hand from the formula in HF's _compute_llama3_parameters.
TEST(KernelsRope, InvFreqLlama3) {
  kernels::RopeParams p;
  p.head_dim = 128;
  p.theta = 500000.0f;
  p.llama3 = true;
  p.factor = 8.0f;
  p.low_freq_factor = 1.0f;
  p.high_freq_factor = 4.0f;
  p.original_max_position = 8192;
  std::vector<float> f(64);
  kernels::rope_inv_freq(p, f.data());
  const double pi = 3.14159265358979323846;
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128), wavelen = 2 * pi / base;
    if (wavelen < 8192.0 / 4) {
      EXPECT_FLOAT_EQ(f[size_t(i)], float(base)) << i;
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(f[size_t(i)], float(base / 8)) << i;
      ++divided;
    } else {
      EXPECT_LT(f[size_t(i)], float(base)) << i;
      EXPECT_GT(f[size_t(i)], float(base / 8)) << i;
      ++blended;
    }
    if (i > 0) {
      EXPECT_LT(f[size_t(i)], f[size_t(i - 1)]) << "inv_freq decreases with i";
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  // i = 25: base = 5e5^(-50/128) = 0.00594073, wavelen = 1057.6 < 2048: kept.
  EXPECT_NEAR(f[25], 0.00594073, 1e-8);
  // i = 32: base = 5e5^(-0.5) = 1.41421e-3, wavelen = 4442.9: smooth = (8192/4442.9 - 1)/3 = 0.28128,
  // inv = (1 - 0.28128) * base / 8 + 0.28128 * base = 5.24846e-4.
  EXPECT_NEAR(f[32], 5.24846e-4, 2e-9);
}

// rope. Metric: |out - ref| <= 4 * u * (|a| + |b|) for each rotated pair (a, b). Why: cos and sin
// are rounded to f32 (u each), two products and a sum add 2u; the reference rotates in double.
TEST(KernelsRope, MatchesReferenceBothConventions) {
  uint64_t seed = 7;
  for (bool interleaved : {true, false})
    for (int hd : {2, 16, 64, 96, 128})
      for (bool llama3 : {false, true}) {
        SCOPED_TRACE(cat("interleaved ", interleaved, " hd ", hd, " llama3 ", llama3));
        kernels::RopeParams p;
        p.head_dim = hd;
        p.theta = llama3 ? 500000.0f : 10000.0f;
        p.interleaved = interleaved;
        p.llama3 = llama3;
        p.factor = 8.0f;
        const int n_heads = 3;
        const int64_t n = 5, ld = int64_t(n_heads) * hd + 4;
        Rng rng(seed++);
        const auto x = test::random_vec(rng, size_t(n * ld));
        const std::vector<int32_t> pos = {0, 1, 17, 1000, 131071};
        std::vector<float> ref = x;
        kernels::rope_ref(ref.data(), n, ld, n_heads, pos.data(), p);
        std::vector<float> out = x;
        kernels::rope(out.data(), n, ld, n_heads, pos.data(), p);
        const int half = hd / 2;
        for (int64_t t = 0; t < n; ++t)
          for (int h = 0; h < n_heads; ++h)
            for (int i = 0; i < half; ++i) {
              const int64_t base = t * ld + int64_t(h) * hd;
              const int64_t ia = base + (interleaved ? 2 * i : i), ib = base + (interleaved ? 2 * i + 1 : i + half);
              const double tol = 4.0 * test::kU32 * (std::fabs(x[size_t(ia)]) + std::fabs(x[size_t(ib)]));
              ASSERT_LE(std::fabs(out[size_t(ia)] - ref[size_t(ia)]), tol);
              ASSERT_LE(std::fabs(out[size_t(ib)] - ref[size_t(ib)]), tol);
            }
        for (int64_t t = 0; t < n; ++t)  // the ld padding is untouched
          for (int64_t c = int64_t(n_heads) * hd; c < ld; ++c) ASSERT_EQ(out[size_t(t * ld + c)], x[size_t(t * ld + c)]);
        // Position 0 is the identity.
        for (int64_t c = 0; c < int64_t(n_heads) * hd; ++c) ASSERT_EQ(out[size_t(c)], x[size_t(c)]);
      }
}

// The convention: interleaved rotates (x[2i], x[2i+1]); half-split rotates (x[i], x[i + hd/2]).
TEST(KernelsRope, ConventionsRotateTheRightPairs) {
  kernels::RopeParams p;
  p.head_dim = 4;
  p.theta = 1.0f;  // inv_freq = {1, 1}
  const int32_t pos[1] = {1};
  const float c = std::cos(1.0f), s = std::sin(1.0f);
  float a[4] = {1, 0, 0, 0};
  p.interleaved = true;
  kernels::rope(a, 1, 4, 1, pos, p);
  EXPECT_FLOAT_EQ(a[0], c);
  EXPECT_FLOAT_EQ(a[1], s);
  EXPECT_EQ(a[2], 0.0f);
  float b[4] = {1, 0, 0, 0};
  p.interleaved = false;
  kernels::rope(b, 1, 4, 1, pos, p);
  EXPECT_FLOAT_EQ(b[0], c);
  EXPECT_EQ(b[1], 0.0f);
  EXPECT_FLOAT_EQ(b[2], s);
}

}  // namespace
}  // namespace loom
