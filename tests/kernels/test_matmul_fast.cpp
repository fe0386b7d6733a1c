// The fast numerics mode of matmul (kernels.h "Numerics"): q8_0 weights with int8 activation
// blocks, bf16 weights with bf16-rounded activations.
//
// Metrics (each test names its class):
//  - against matmul_fast_ref (x quantized the same way, products summed in double): the f32
//    rounding of the kernel alone, (K' + 2) * 2^-24 * sum |terms| (K' = blocks for q8_0: one fma per
//    block; = cols for bf16), with sum|terms| bounded from x and w by the test itself:
//    q8_0: sum_k |w_k| (|x_k| + d_b) (|d q| <= |x| + d/2), bf16: sum_k |w_k| |x_k| (1 + 2^-8).
//  - against matmul_ref (exact): the quantization bound stated in kernels.h plus the above.
//  - between paths, between n == 1 and n > 1, between row tiles and plain rows: the same bits
//    (kernels.h: every path performs the same operations per output).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/weight_tiles.h"
#include "kernel_test_util.h"

namespace loom {
namespace {

using kernels::matmul;
using kernels::Numerics;

struct W {
  std::vector<uint8_t> bytes;
  WeightView view;
};

W make_weight(Rng& rng, DType dtype, int64_t rows, int64_t cols) {
  W t;
  const int64_t rb = dtype_row_bytes(dtype, cols);
  t.bytes.assign(size_t(rows * rb + 64), 0xAB);
  for (int64_t r = 0; r < rows; ++r) {
    const auto src = test::random_vec(rng, size_t(cols));
    quantize_row(dtype, src.data(), t.bytes.data() + r * rb, cols);
  }
  t.view = WeightView{t.bytes.data(), dtype, rows, cols, rb};
  return t;
}

W tile(const WeightView& w) {
  W t;
  t.bytes.assign(size_t(tiled_bytes(w)) + 64, 0xCD);
  uint8_t* at = t.bytes.data() + (64 - reinterpret_cast<uintptr_t>(t.bytes.data()) % 64) % 64;
  t.view = tile_weights(w, at);
  return t;
}

// Activations with a spread of block magnitudes (some blocks tiny, one all zero), so the
// per-block scales matter.
std::vector<float> make_x(Rng& rng, int64_t n, int64_t ld) {
  auto x = test::random_vec(rng, size_t(n * ld));
  for (int64_t i = 0; i < n * ld; ++i) {
    const int64_t blk = (i % ld) / 32;
    if (blk % 5 == 3) x[size_t(i)] *= 1e-3f;
    if (blk % 7 == 5) x[size_t(i)] = 0.0f;
  }
  return x;
}

// Checks y against the fast reference and the exact reference with the bounds above.
void expect_bounds(const std::vector<float>& x, int64_t n, int64_t ldx, const WeightView& w,
                   const std::vector<float>& y, int64_t ldy) {
  std::vector<float> y_fast(size_t(n * ldy)), y_exact(size_t(n * ldy));
  kernels::matmul_fast_ref(x.data(), n, ldx, w, y_fast.data(), ldy);
  kernels::matmul_ref(x.data(), n, ldx, w, y_exact.data(), ldy);
  const bool q8 = w.dtype == DType::Q8_0;
  std::vector<float> wrow(size_t(w.cols));
  std::vector<uint8_t> raw(size_t(dtype_row_bytes(w.dtype, w.cols)));
  int bad = 0;
  for (int64_t r = 0; r < w.rows; ++r) {
    read_weight_row(w, r, raw.data());
    dequantize_row(w.dtype, raw.data(), wrow.data(), w.cols);
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x.data() + i * ldx;
      double terms = 0.0, quant = 0.0, mag = 0.0;
      for (int64_t b = 0; b < w.cols; b += 32) {
        double amax = 0.0;
        for (int k = 0; k < 32; ++k) amax = std::max(amax, double(std::fabs(xi[b + k])));
        const double d = amax / 127.0;
        for (int k = 0; k < 32; ++k) {
          const double aw = std::fabs(double(wrow[size_t(b + k)]));
          mag += aw * std::fabs(double(xi[b + k]));
          terms += q8 ? aw * (std::fabs(double(xi[b + k])) + d) : aw * std::fabs(double(xi[b + k])) * (1.0 + 1.0 / 256);
          quant += q8 ? 0.5001 * d * aw : 0.0;
        }
      }
      const double k_terms = q8 ? double(w.cols / 32) : double(w.cols + 8);
      const double round = (k_terms + 2.0) * test::kU32 * terms;
      const double tol_exact = q8 ? quant + round : (1.0 / 512) * mag + round + double(w.cols) * 0x1p-126;
      const double got = y[size_t(i * ldy + r)];
      const double e1 = std::fabs(got - y_fast[size_t(i * ldy + r)]), e2 = std::fabs(got - y_exact[size_t(i * ldy + r)]);
      if (!(e1 <= round) && bad++ < 5)
        ADD_FAILURE() << "y[" << i << "," << r << "]=" << got << " fast ref " << y_fast[size_t(i * ldy + r)]
                      << " err " << e1 << " > " << round;
      if (!(e2 <= tol_exact) && bad++ < 5)
        ADD_FAILURE() << "y[" << i << "," << r << "]=" << got << " exact ref " << y_exact[size_t(i * ldy + r)]
                      << " err " << e2 << " > " << tol_exact;
    }
  }
  EXPECT_EQ(bad, 0);
}

int count_diff(const std::vector<float>& a, const std::vector<float>& b) {
  int d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], 4) != 0;
  return d;
}

// One shape on every path: bounds, the same bits on every path as on the scalar path, each token
// alone (decode) gives the bits of the batch (prefill), row tiles the bits of plain rows.
void run_case(DType dt, int64_t n, int64_t rows, int64_t cols, ThreadPool* pool, uint64_t seed) {
  SCOPED_TRACE(cat(dtype_name(dt), " n=", n, " rows=", rows, " cols=", cols, " threads=", pool ? pool->size() : 1));
  Rng rng(seed);
  W w = make_weight(rng, dt, rows, cols);
  const bool tiles = can_tile(w.view);
  W t = tiles ? tile(w.view) : W{};
  const int64_t ldx = cols + 5, ldy = rows + 3;
  const auto x = make_x(rng, n, ldx);
  std::vector<float> first;
  std::string first_path;
  test::for_each_path([&](const std::string& path) {
    std::vector<float> y(size_t(n * ldy), 7.0f);
    matmul(x.data(), n, ldx, w.view, y.data(), ldy, pool, false, Numerics::fast);
    expect_bounds(x, n, ldx, w.view, y, ldy);
    for (int64_t i = 0; i < n; ++i)  // ldy padding untouched
      for (int64_t r = rows; r < ldy; ++r) ASSERT_EQ(y[size_t(i * ldy + r)], 7.0f);
    if (first.empty()) {
      first = y;
      first_path = path;
    } else {
      EXPECT_EQ(count_diff(y, first), 0) << path << " vs " << first_path << " (q8: "
                                         << kernels::fast_q8_kernel() << ", bf16: " << kernels::fast_bf16_kernel() << ")";
    }
    std::vector<float> y1(size_t(n * ldy), 7.0f);
    for (int64_t i = 0; i < n; ++i)
      matmul(x.data() + i * ldx, 1, ldx, w.view, y1.data() + i * ldy, ldy, pool, false, Numerics::fast);
    EXPECT_EQ(count_diff(y1, y), 0) << path << ": one token at a time differs from the batch";
    if (tiles) {
      std::vector<float> yt(size_t(n * ldy), 7.0f);
      matmul(x.data(), n, ldx, t.view, yt.data(), ldy, pool, false, Numerics::fast);
      EXPECT_EQ(count_diff(yt, y), 0) << path << ": row tiles differ from plain rows";
    }
  });
}

TEST(KernelsMatmulFast, Q8_0EveryPathDecodeAndPrefill) {
  uint64_t seed = 1;
  for (int64_t n : {1, 2, 7, 30})
    for (int64_t rows : {1, 5, 8, 13, 33})
      for (int64_t cols : {32, 160, 512, 1056}) run_case(DType::Q8_0, n, rows, cols, nullptr, seed++);
}

TEST(KernelsMatmulFast, Bf16EveryPathDecodeAndPrefill) {
  uint64_t seed = 100;
  for (int64_t n : {1, 2, 7, 30})
    for (int64_t rows : {1, 5, 8, 13, 33})
      for (int64_t cols : {32, 160, 512, 1056}) run_case(DType::BF16, n, rows, cols, nullptr, seed++);
}

TEST(KernelsMatmulFast, Threaded) {
  ThreadPool pool2(2), pool3(3);
  uint64_t seed = 200;
  for (DType dt : {DType::Q8_0, DType::BF16})
    for (int64_t n : {1, 33}) {
      run_case(dt, n, 133, 2048 + 128, &pool2, seed++);
      run_case(dt, n, 133, 2048 + 128, &pool3, seed++);
    }
}

// The batched kernels (AVX2: q8_0 and bf16 from 2 tokens, groups of 4 tokens sharing
// each weight load, 8-row q8_0 panels): token counts around and past the group size, odd ones, rows
// that are not whole 8-row tiles, single-block and long rows. run_case compares every path's bits
// with the scalar path's, each token alone with the batch, tiles with plain rows, and both bounds.
TEST(KernelsMatmulFast, BatchedTokenGroupsAndPartialTiles) {
  uint64_t seed = 600;
  for (DType dt : {DType::Q8_0, DType::BF16})
    for (int64_t n : {3, 4, 5, 9, 19})
      for (int64_t rows : {3, 8, 21})
        for (int64_t cols : {32, 96, 2080}) run_case(dt, n, rows, cols, nullptr, seed++);
  ThreadPool pool2(2);
  for (DType dt : {DType::Q8_0, DType::BF16}) run_case(dt, 67, 133, 1024 + 32, &pool2, seed++);
}

// Activations whose scaled values x * (127 / amax) fall exactly halfway between integers (amax
// = 127: the scale is 1), which the quantizer rounds to even, with the same bits on every path
// (the AVX2 path quantizes with its own vector code).
TEST(KernelsMatmulFast, QuantizerTiesGiveTheSameBitsOnEveryPath) {
  Rng rng(700);
  const int64_t rows = 16, cols = 128, n = 5;
  W w = make_weight(rng, DType::Q8_0, rows, cols);
  std::vector<float> x(size_t(n * cols));
  for (int64_t i = 0; i < n * cols; ++i) {
    const int64_t k = i % 32;
    x[size_t(i)] = k == 0 ? 127.0f : (float(int64_t(k * 7 + i / 32) % 254 - 127) + 0.5f) * (i % 3 == 0 ? -1.0f : 1.0f);
  }
  // The halfway values 0.5, 1.5, 2.5, ... quantize to 0, 2, 2, ... (ties to even).
  int8_t q[32];
  float d;
  int32_t qs;
  const float halves[4] = {0.5f, 1.5f, 2.5f, -3.5f};
  std::vector<float> xb(32, 0.0f);
  xb[0] = 127.0f;
  for (int i = 0; i < 4; ++i) xb[size_t(1 + i)] = halves[i];
  kernels::quantize_activations_q8(xb.data(), 32, q, &d, &qs);
  EXPECT_EQ(q[1], 0);
  EXPECT_EQ(q[2], 2);
  EXPECT_EQ(q[3], 2);
  EXPECT_EQ(q[4], -4);
  std::vector<float> first;
  test::for_each_path([&](const std::string& path) {
    for (int64_t m : {int64_t(1), n}) {
      std::vector<float> y(size_t(n * rows), 0.0f);
      for (int64_t t0 = 0; t0 < n; t0 += m)
        matmul(x.data() + t0 * cols, m, cols, w.view, y.data() + t0 * rows, rows, nullptr, false, Numerics::fast);
      if (first.empty()) first = y;
      EXPECT_EQ(count_diff(y, first), 0) << path << " tokens per call " << m;
    }
  });
}

// Accumulating adds the product (computed as without accumulation) to y: y0 + y_fast, one f32 add.
TEST(KernelsMatmulFast, Accumulate) {
  for (DType dt : {DType::Q8_0, DType::BF16}) {
    Rng rng(300);
    W w = make_weight(rng, dt, 37, 1024);
    for (int64_t n : {3, 9}) {  // 9: the batched kernels
      const auto x = make_x(rng, n, 1024);
      const auto y0 = test::random_vec(rng, size_t(n * 37));
      test::for_each_path([&](const std::string&) {
        std::vector<float> y = y0, p(y0.size());
        matmul(x.data(), n, 1024, w.view, p.data(), 37, nullptr, false, Numerics::fast);
        matmul(x.data(), n, 1024, w.view, y.data(), 37, nullptr, true, Numerics::fast);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], y0[i] + p[i]) << dtype_name(dt) << " n=" << n << " " << i;
      });
    }
  }
}

// A TP shard: columns [c0, c0 + k) of W times the matching slice of x. The slice's blocks are
// the full row's blocks (c0 on a block boundary), so the shards' sum is the full product within
// the summation-order bound (same quantized values, blocks summed in another grouping).
TEST(KernelsMatmulFast, ColumnShardsSumToTheFullRow) {
  Rng rng(400);
  const int64_t rows = 40, cols = 1024, half = 512;
  W w = make_weight(rng, DType::Q8_0, rows, cols);
  const auto x = make_x(rng, 1, cols);
  std::vector<float> full(rows), a(rows), b(rows), fast_ref(rows);
  matmul(x.data(), 1, cols, w.view, full.data(), rows, nullptr, false, Numerics::fast);
  matmul(x.data(), 1, cols, w.view.col_block(0, half), a.data(), rows, nullptr, false, Numerics::fast);
  matmul(x.data() + half, 1, half, w.view.col_block(half, half), b.data(), rows, nullptr, false, Numerics::fast);
  kernels::matmul_fast_ref(x.data(), 1, cols, w.view, fast_ref.data(), rows);
  std::vector<float> wrow(cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(DType::Q8_0, w.view.row(r), wrow.data(), cols);
    double terms = 0.0;  // sum |w| (|x| + d) as above
    for (int64_t k = 0; k < cols; ++k) {
      double amax = 0.0;
      for (int64_t j = k / 32 * 32; j < k / 32 * 32 + 32; ++j) amax = std::max(amax, double(std::fabs(x[size_t(j)])));
      terms += std::fabs(double(wrow[size_t(k)])) * (std::fabs(double(x[size_t(k)])) + amax / 127.0);
    }
    const double tol = (cols / 32 + 3) * test::kU32 * terms;
    EXPECT_NEAR(a[size_t(r)] + b[size_t(r)], fast_ref[size_t(r)], tol);
    EXPECT_NEAR(full[size_t(r)], fast_ref[size_t(r)], tol);
  }
  // The quantization of a slice is the slice of the quantization.
  std::vector<int8_t> q(cols), qs(half);
  std::vector<float> d(cols / 32), ds(half / 32);
  std::vector<int32_t> s(cols / 32), ss(half / 32);
  kernels::quantize_activations_q8(x.data(), cols, q.data(), d.data(), s.data());
  kernels::quantize_activations_q8(x.data() + half, half, qs.data(), ds.data(), ss.data());
  EXPECT_EQ(std::memcmp(q.data() + half, qs.data(), size_t(half)), 0);
  EXPECT_EQ(std::memcmp(d.data() + half / 32, ds.data(), ds.size() * 4), 0);
}

// What the mode leaves alone: f32/f16 weights, bf16 rows that are not whole 32-column chunks.
TEST(KernelsMatmulFast, ExactWhereTheModeDoesNotApply) {
  Rng rng(500);
  for (auto [dt, cols] : {std::pair{DType::F32, int64_t(160)}, {DType::F16, 160}, {DType::BF16, 97}}) {
    W w = make_weight(rng, dt, 21, cols);
    const auto x = make_x(rng, 3, cols);
    std::vector<float> ye(3 * 21), yf(3 * 21);
    matmul(x.data(), 3, cols, w.view, ye.data(), 21, nullptr, false, Numerics::exact);
    matmul(x.data(), 3, cols, w.view, yf.data(), 21, nullptr, false, Numerics::fast);
    EXPECT_EQ(count_diff(ye, yf), 0) << dtype_name(dt);
  }
  EXPECT_FALSE(kernels::numerics_applies(Numerics::fast, DType::F32));
  EXPECT_FALSE(kernels::numerics_applies(Numerics::fast, DType::F16));
  EXPECT_TRUE(kernels::numerics_applies(Numerics::fast, DType::BF16));
  EXPECT_TRUE(kernels::numerics_applies(Numerics::fast, DType::Q8_0));
  EXPECT_FALSE(kernels::numerics_applies(Numerics::exact, DType::Q8_0));
}

// The activation quantizers, against the definitions in kernels.h written out here.
TEST(KernelsMatmulFast, ActivationQuantizers) {
  float x[64];
  for (int i = 0; i < 32; ++i) x[i] = float(i - 16) * 0.37f;
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;  // an all-zero block: q = 0, d = 0
  int8_t q[64];
  float d[2];
  int32_t s[2];
  kernels::quantize_activations_q8(x, 64, q, d, s);
  const float amax = 16 * 0.37f;
  EXPECT_EQ(d[0], amax / 127.0f);
  EXPECT_EQ(d[1], 0.0f);
  EXPECT_EQ(s[1], 0);
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(q[i], int8_t(std::nearbyint(x[i] * (127.0f / amax)))) << i;
    EXPECT_LE(std::fabs(x[i] - d[0] * q[i]), 0.5001f * d[0]);
    sum += q[i];
  }
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(s[0], sum);
  // bf16: ties to even, NaN stays NaN.
  EXPECT_EQ(kernels::round_to_bf16(1.0f), 0x3F80);
  float t;
  uint32_t u = 0x3F808000u;  // halfway between 0x3F80 and 0x3F81: to the even 0x3F80
  std::memcpy(&t, &u, 4);
  EXPECT_EQ(kernels::round_to_bf16(t), 0x3F80);
  u = 0x3F818000u;  // halfway between 0x3F81 and 0x3F82: to the even 0x3F82
  std::memcpy(&t, &u, 4);
  EXPECT_EQ(kernels::round_to_bf16(t), 0x3F82);
  const uint16_t nan = kernels::round_to_bf16(std::nanf(""));
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x7F, 0);
}

TEST(KernelsMatmulFast, NumericsNames) {
  EXPECT_EQ(kernels::parse_numerics("exact", "x"), Numerics::exact);
  EXPECT_EQ(kernels::parse_numerics("fast", "x"), Numerics::fast);
  try {
    kernels::parse_numerics("quick", "--numerics");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--numerics='quick' is not a numerics mode"), std::string::npos) << e.what();
  }
}

// LOOM_NUMERICS sets the process default (tests.cmake runs this alone per value).
TEST(KernelsMatmulFast, EnvSetsTheDefault) {
  const char* want = std::getenv("LOOM_TEST_EXPECT_NUMERICS");
  if (!want) GTEST_SKIP() << "run by ctest with LOOM_NUMERICS and LOOM_TEST_EXPECT_NUMERICS";
  EXPECT_STREQ(kernels::numerics_name(kernels::default_numerics()), want);
}

}  // namespace
}  // namespace loom
