// dtype conversions the kernels rely on: f16 and bf16 rounding, q8_0 error bound.
#include <immintrin.h>

#include <cstring>

#include "kernel_test_util.h"
#include "quant_bounds.h"

namespace loom {
namespace {

__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) { return _cvtss_sh(f, 0); }  // nearest even

bool is_f16_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(KernelsDtype, F16RoundTripAll65536) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float f = f16_to_f32(h);
    if (is_f16_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << i;
      EXPECT_TRUE(is_f16_nan(f32_to_f16(f))) << i;
    } else {
      ASSERT_EQ(f32_to_f16(f), h) << i;
    }
  }
}

// The software conversions against the F16C instructions (where the CPU has them).
TEST(KernelsDtype, F16MatchesHardware) {
  if (!kernels::cpu_features().f16c) GTEST_SKIP() << "CPU has no F16C";
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    if (is_f16_nan(h)) continue;
    const float a = f16_to_f32(h), b = hw_f16_to_f32(h);
    ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << i;
  }
  Rng rng(3);
  std::vector<float> xs = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.98e-8f, 2.9802322e-8f,
                           5.96e-8f, 6.1035156e-5f, 6.1e-5f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                           std::numeric_limits<float>::infinity(), 1e30f};
  for (int i = 0; i < 200000; ++i) xs.push_back(float(rng.normal() * std::pow(10.0, rng.uniform() * 12 - 8)));
  for (uint32_t u = 0x33000000u; u < 0x38900000u; u += 0x1001) xs.push_back(bits_to_f32(u));  // subnormal range
  for (float x : xs) ASSERT_EQ(f32_to_f16(x), hw_f32_to_f16(x)) << x;
}

// bf16 rounding against an independent nearest-even choice between the two neighbours.
TEST(KernelsDtype, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  Rng rng(4);
  for (int i = 0; i < 300000; ++i) {
    const uint32_t u = uint32_t(rng.next_u64());
    const float x = bits_to_f32(u);
    if (std::isnan(x) || std::isinf(x) || (u & 0x7f800000u) == 0x7f000000u) continue;  // skip near-overflow
    const uint32_t down = u & 0xffff0000u, up = down + 0x10000u;
    const double dd = std::fabs(double(x) - double(bits_to_f32(down))), du = std::fabs(double(bits_to_f32(up)) - double(x));
    const uint16_t want = uint16_t((dd < du || (dd == du && ((down >> 16) & 1) == 0)) ? down >> 16 : up >> 16);
    ASSERT_EQ(f32_to_bf16(x), want) << std::hex << u;
  }
}

// q8_0: x_hat = f16(d) * q with d = amax/127 and q = round(x/d). Bound per element:
// |x - x_hat| <= |x - d*q| + |q| * |d - f16(d)| <= d/2 * (1 + 1e-6) + 127 * |d - f16(d)|.
TEST(KernelsDtype, Q8_0ErrorBound) {
  Rng rng(5);
  for (double scale : {1e-3, 1.0, 300.0}) {
    const int64_t n = 32 * 67;
    auto x = test::random_vec(rng, size_t(n), scale);
    for (int j = 0; j < 32; ++j) x[size_t(64 + j)] = 0.0f;  // an all-zero block
    std::vector<BlockQ8_0> q(static_cast<size_t>(n / 32));
    quantize_row(DType::Q8_0, x.data(), q.data(), n);
    std::vector<float> back(static_cast<size_t>(n));
    dequantize_row(DType::Q8_0, q.data(), back.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
      const double d = amax / 127.0, dh = f16_to_f32(f32_to_f16(float(d)));
      const double bound = d / 2 * (1 + 1e-6) + 127 * std::fabs(d - dh);
      for (int j = 0; j < 32; ++j) {
        const size_t i = size_t(b * 32 + j);
        ASSERT_LE(std::fabs(double(x[i]) - back[i]), bound) << "block " << b << " elem " << j;
      }
    }
    for (int j = 0; j < 32; ++j) EXPECT_EQ(back[size_t(64 + j)], 0.0f);
  }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// The block types' quantizers against the bounds dtype.h states for quantize_row
// (tests/quant_bounds.h), on values of several scales, with blocks of one sign, constant blocks
// and all-zero blocks.
void check_quantizer(DType t, const std::vector<float>& x) {
  SCOPED_TRACE(dtype_name(t));
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(size_t(dtype_row_bytes(t, n)));
  quantize_row(t, x.data(), q.data(), n);
  std::vector<float> w(static_cast<size_t>(n));
  dequantize_row(t, q.data(), w.data(), n);
  const std::vector<double> bound = test::quant_error_bounds(t, x.data(), n);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::fabs(double(x[size_t(i)]) - double(w[size_t(i)]));
    if (!(err <= bound[size_t(i)]) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": x " << x[size_t(i)] << " w " << w[size_t(i)] << " err " << err << " > "
                    << bound[size_t(i)];
  }
  EXPECT_EQ(bad, 0);
}

TEST(KernelsDtype, BlockQuantizersWithinTheirBounds) {
  Rng rng(11);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (double scale : {1e-4, 0.02, 1.0, 50.0}) {
      const int64_t n = 256 * 9;
      auto x = test::random_vec(rng, size_t(n), scale);
      for (int i = 0; i < 32; ++i) x[size_t(64 + i)] = 0.0f;                           // an all-zero block
      for (int i = 0; i < 32; ++i) x[size_t(288 + i)] = float(scale);                   // a constant block
      for (int i = 0; i < 256; ++i) x[size_t(512 + i)] = -std::fabs(x[size_t(512 + i)]) - float(scale);  // all negative
      for (int i = 0; i < 256; ++i) x[size_t(768 + i)] = std::fabs(x[size_t(768 + i)]) + float(scale);   // all positive
      for (int i = 0; i < 256; ++i) x[size_t(1024 + i)] *= (i / 32 == 3) ? 100.0f : 0.01f;  // one loud sub-block
      check_quantizer(t, x);
    }
  }
}

// Refused with a message naming the value: non-finite input, scales past f16.
TEST(KernelsDtype, BlockQuantizersRefuseWhatF16CannotHold) {
  for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    std::vector<float> x(256, 1.0f);
    std::vector<uint8_t> q(size_t(dtype_row_bytes(t, 256)));
    x[7] = std::numeric_limits<float>::quiet_NaN();
    try {
      quantize_row(t, x.data(), q.data(), 256);
      ADD_FAILURE() << dtype_name(t) << ": NaN accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
    }
    x[7] = 1e30f;
    try {
      quantize_row(t, x.data(), q.data(), 256);
      ADD_FAILURE() << dtype_name(t) << ": 1e30 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("f16 range"), std::string::npos) << e.what();
    }
  }
}

// dequantize_span is dequantize_row's values from an offset (views inside K-quant super-blocks).
TEST(KernelsDtype, DequantizeSpanIsTheRowsValuesFromTheOffset) {
  Rng rng(12);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const auto x = test::random_vec(rng, 768);
    std::vector<uint8_t> q(size_t(dtype_row_bytes(t, 768)));
    quantize_row(t, x.data(), q.data(), 768);
    std::vector<float> all(768);
    dequantize_row(t, q.data(), all.data(), 768);
    for (int64_t off : {0, 32, 224})
      for (int64_t len : {32, 256, 512 - 32}) {
        std::vector<float> part(static_cast<size_t>(len));
        dequantize_span(t, q.data(), off, part.data(), len);
        for (int64_t i = 0; i < len; ++i) ASSERT_EQ(part[size_t(i)], all[size_t(off + i)]) << off << "+" << i;
      }
  }
}

}  // namespace
}  // namespace loom
