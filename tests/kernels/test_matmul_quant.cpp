// matmul on the ggml block types Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K (kernels_quant_impl.h), on
// every kernel path, in both numerics modes, on plain rows and on column views that start inside
// a K-quant super-block (TP shards cut in 32-weight sub-blocks).
//
// Weights come two ways: quantize_row of random values, and random bytes with sane f16 scales
// (every bit pattern of the levels and sub-scales: Q6_K's negative scales, 6-bit mins near 63).
//
// Metrics (each test names its class):
//  - exact mode: the same bits as matmul of the f32 matrix of the dequantized weights (the exact
//    path dequantizes, then runs the f32 kernel); and against matmul_ref (double) within
//    (K + 8) * 2^-24 * sum_k |x_k w_k| (f32 summation order, as tests/kernels/test_matmul.cpp).
//  - fast mode: against matmul_fast_ref (the same int8 activations, products of the dequantized
//    weights summed in double) within (nb + 4) * 2^-24 * T, T = sum over sub-blocks b and their
//    weights i of (|a_b k_i (q_i - off_b)| + |mn_b|) (|x_i| + d_b) (the terms of the two f32
//    accumulations, kernels_quant_impl.h); against matmul_ref within that plus the activation
//    quantization sum_b 0.5001 d_b sum_{i in b} |w_i|; the same bits on every path, one token
//    alone as in a batch, on 1 thread and 2.
#include <algorithm>
#include <cstring>

#include "core/weight_tiles.h"
#include "kernel_test_util.h"

namespace loom {
namespace {
#include "core/dtype_blocks_impl.h"
}  // namespace

namespace {

using kernels::matmul;
using kernels::Numerics;

const DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

struct W {
  std::vector<uint8_t> bytes;
  WeightView view;
};

// Byte offsets of a block's f16 scales.
std::vector<int> f16_fields(DType t) {
  switch (t) {
    case DType::Q4_1: return {0, 2};
    case DType::Q4_K:
    case DType::Q5_K: return {0, 2};
    case DType::Q6_K: return {208};
    default: return {0};
  }
}

// rows x cols of type t, rows pad bytes apart beyond their size; random_bytes: every byte random
// but the f16 scales (uniform magnitude in [2^-12, 2^-6], either sign for d of the symmetric types).
W make_weight(Rng& rng, DType t, int64_t rows, int64_t cols, bool random_bytes, int64_t pad = 0) {
  W w;
  const int64_t rb = dtype_row_bytes(t, cols) + pad;
  w.bytes.assign(size_t(rows * rb + 64), 0xAB);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = w.bytes.data() + r * rb;
    if (!random_bytes) {
      const auto src = test::random_vec(rng, size_t(cols), 0.05);
      quantize_row(t, src.data(), row, cols);
      continue;
    }
    for (int64_t i = 0; i < dtype_row_bytes(t, cols); ++i) row[i] = uint8_t(rng.next_u64());
    for (int64_t b = 0; b < cols / dtype_block_elems(t); ++b)
      for (int off : f16_fields(t)) {
        float v = float(std::ldexp(1.0 + rng.uniform(), -12 + int(rng.uniform() * 6)));
        if (t == DType::Q4_1 && off == 2 && rng.uniform() < 0.5) v = -v;  // Q4_1's min: any sign
        const uint16_t h = f32_to_f16(v);
        std::memcpy(row + b * dtype_block_bytes(t) + off, &h, 2);
      }
  }
  w.view = WeightView{w.bytes.data(), t, rows, cols, rb};
  return w;
}

// Row r of view v dequantized (the reference reading: dequantize_span from the view's offset).
std::vector<float> row_values(const WeightView& v, int64_t r) {
  std::vector<float> out(size_t(v.cols));
  dequantize_span(v.dtype, v.row(r), v.col_offset, out.data(), v.cols);
  return out;
}

// The f32 matrix of the view's dequantized weights.
std::vector<float> dequantized(const WeightView& v) {
  std::vector<float> m(size_t(v.rows * v.cols));
  for (int64_t r = 0; r < v.rows; ++r) {
    const auto row = row_values(v, r);
    std::copy(row.begin(), row.end(), m.begin() + r * v.cols);
  }
  return m;
}

WeightView f32_view(const std::vector<float>& m, int64_t rows, int64_t cols) {
  return WeightView{m.data(), DType::F32, rows, cols, cols * 4};
}

int count_diff(const std::vector<float>& a, const std::vector<float>& b) {
  int d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], 4) != 0;
  return d;
}

std::vector<float> make_x(Rng& rng, int64_t n, int64_t ld) {
  auto x = test::random_vec(rng, size_t(n * ld));
  for (int64_t i = 0; i < n * ld; ++i) {
    const int64_t blk = (i % ld) / 32;
    if (blk % 5 == 3) x[size_t(i)] *= 1e-3f;
    if (blk % 7 == 5) x[size_t(i)] = 0.0f;
  }
  return x;
}

// Exact mode: same bits as the f32 kernel on the dequantized matrix; within the summation bound of
// matmul_ref.
void exact_case(const W& w, const WeightView& v, int64_t n, ThreadPool* pool, uint64_t seed, bool accumulate) {
  SCOPED_TRACE(cat(dtype_name(v.dtype), " exact n=", n, " rows=", v.rows, " cols=", v.cols, " col_offset=",
                   v.col_offset, " acc=", accumulate, " threads=", pool ? pool->size() : 1));
  (void)w;
  Rng rng(seed);
  const int64_t ldx = v.cols + 3, ldy = v.rows + 5;
  const auto x = test::random_vec(rng, size_t(n * ldx));
  const auto y0 = test::random_vec(rng, size_t(n * ldy));
  const std::vector<float> m = dequantized(v);
  std::vector<float> y_ref = y0;
  kernels::matmul_ref(x.data(), n, ldx, v, y_ref.data(), ldy, accumulate);
  test::for_each_path([&](const std::string& path) {
    std::vector<float> y = y0, yf = y0;
    matmul(x.data(), n, ldx, v, y.data(), ldy, pool, accumulate, Numerics::exact);
    matmul(x.data(), n, ldx, f32_view(m, v.rows, v.cols), yf.data(), ldy, pool, accumulate, Numerics::exact);
    EXPECT_EQ(count_diff(y, yf), 0) << path << ": differs from the f32 kernel on the dequantized weights";
    int bad = 0;
    for (int64_t r = 0; r < v.rows; ++r)
      for (int64_t i = 0; i < n; ++i) {
        double mag = 0.0;
        for (int64_t k = 0; k < v.cols; ++k) mag += std::fabs(double(x[size_t(i * ldx + k)]) * m[size_t(r * v.cols + k)]);
        double tol = double(v.cols + 8) * test::kU32 * mag;
        if (accumulate) tol += 2.0 * test::kU32 * std::fabs(y0[size_t(i * ldy + r)]);
        const double err = std::fabs(double(y[size_t(i * ldy + r)]) - y_ref[size_t(i * ldy + r)]);
        if (!(err <= tol) && bad++ < 5) ADD_FAILURE() << path << " y[" << i << "," << r << "] err " << err << " > " << tol;
      }
    EXPECT_EQ(bad, 0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = v.rows; r < ldy; ++r) ASSERT_EQ(y[size_t(i * ldy + r)], y0[size_t(i * ldy + r)]);
  });
}

// The fast mode's bounds (see the top of the file) for every output of y.
void expect_fast_bounds(const std::vector<float>& x, int64_t n, int64_t ldx, const WeightView& v,
                        const std::vector<float>& y, int64_t ldy) {
  std::vector<float> y_fast(size_t(n * ldy)), y_exact(size_t(n * ldy));
  kernels::matmul_fast_ref(x.data(), n, ldx, v, y_fast.data(), ldy);
  kernels::matmul_ref(x.data(), n, ldx, v, y_exact.data(), ldy);
  const DType t = v.dtype;
  const int subs = qb_subs(t), bb = dtype_block_bytes(t);
  const int64_t nb = v.cols / 32, j0 = v.col_offset / 32;
  int bad = 0;
  for (int64_t r = 0; r < v.rows; ++r) {
    const auto wr = row_values(v, r);
    // |a k (q - off)| + |mn| per weight, from the format's decomposition.
    std::vector<double> dec(size_t(v.cols));
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = v.row(r) + ((j0 + b) / subs) * bb;
      const int j = int((j0 + b) % subs);
      uint8_t q[32];
      qb_sub_quants(t, blk, j, q);
      const QbScales s = qb_sub_scales(t, blk, j, [](uint16_t h) { return f16_to_f32(h); });
      for (int i = 0; i < 32; ++i)
        dec[size_t(b * 32 + i)] = std::fabs(double(s.a) * (i < 16 ? s.k_lo : s.k_hi) * (int(q[i]) - s.offset)) +
                                  std::fabs(double(s.mn));
    }
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x.data() + i * ldx;
      double terms = 0.0, quant = 0.0;
      for (int64_t b = 0; b < nb; ++b) {
        double amax = 0.0;
        for (int k = 0; k < 32; ++k) amax = std::max(amax, double(std::fabs(xi[b * 32 + k])));
        const double d = amax / 127.0;
        for (int k = 0; k < 32; ++k) {
          terms += dec[size_t(b * 32 + k)] * (std::fabs(double(xi[b * 32 + k])) + d);
          quant += 0.5001 * d * std::fabs(double(wr[size_t(b * 32 + k)]));
        }
      }
      const double round = double(nb + 4) * test::kU32 * terms;
      const double got = y[size_t(i * ldy + r)];
      const double e1 = std::fabs(got - y_fast[size_t(i * ldy + r)]), e2 = std::fabs(got - y_exact[size_t(i * ldy + r)]);
      if (!(e1 <= round) && bad++ < 5)
        ADD_FAILURE() << "y[" << i << "," << r << "]=" << got << " fast ref " << y_fast[size_t(i * ldy + r)] << " err "
                      << e1 << " > " << round;
      if (!(e2 <= quant + round) && bad++ < 5)
        ADD_FAILURE() << "y[" << i << "," << r << "]=" << got << " exact ref " << y_exact[size_t(i * ldy + r)]
                      << " err " << e2 << " > " << quant + round;
    }
  }
  EXPECT_EQ(bad, 0);
}

void fast_case(const WeightView& v, int64_t n, ThreadPool* pool, uint64_t seed) {
  SCOPED_TRACE(cat(dtype_name(v.dtype), " fast n=", n, " rows=", v.rows, " cols=", v.cols, " col_offset=",
                   v.col_offset, " threads=", pool ? pool->size() : 1));
  Rng rng(seed);
  const int64_t ldx = v.cols + 5, ldy = v.rows + 3;
  const auto x = make_x(rng, n, ldx);
  std::vector<float> first;
  std::string first_path;
  test::for_each_path([&](const std::string& path) {
    std::vector<float> y(size_t(n * ldy), 7.0f);
    matmul(x.data(), n, ldx, v, y.data(), ldy, pool, false, Numerics::fast);
    expect_fast_bounds(x, n, ldx, v, y, ldy);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = v.rows; r < ldy; ++r) ASSERT_EQ(y[size_t(i * ldy + r)], 7.0f);
    if (first.empty()) {
      first = y;
      first_path = path;
    } else {
      EXPECT_EQ(count_diff(y, first), 0) << path << " (" << kernels::fast_quant_kernel() << ") vs " << first_path;
    }
    std::vector<float> y1(size_t(n * ldy), 7.0f);
    for (int64_t i = 0; i < n; ++i)
      matmul(x.data() + i * ldx, 1, ldx, v, y1.data() + i * ldy, ldy, pool, false, Numerics::fast);
    EXPECT_EQ(count_diff(y1, y), 0) << path << ": one token at a time differs from the batch";
    // Accumulating adds the same result onto y.
    std::vector<float> ya(size_t(n * ldy), 0.5f);
    matmul(x.data(), n, ldx, v, ya.data(), ldy, pool, true, Numerics::fast);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < v.rows; ++r) ASSERT_EQ(ya[size_t(i * ldy + r)], 0.5f + y[size_t(i * ldy + r)]);
  });
}

// Row tiles (core/weight_tiles.h): the tiled copy reads back as the plain rows, and both modes give
// the plain rows' bits on every path, decode and batch.
TEST(KernelsMatmulQuant, RowTilesGiveThePlainRowsBits) {
  ThreadPool pool2(2);
  uint64_t seed = 700;
  for (DType t : kTypes)
    for (int64_t rows : {5, 8, 29}) {
      Rng rng(seed);
      const W w = make_weight(rng, t, rows, int64_t(2) * dtype_block_elems(t) * (dtype_is_k_quant(t) ? 1 : 5), true);
      ASSERT_TRUE(can_tile(w.view));
      std::vector<uint8_t> buf(size_t(tiled_bytes(w.view)) + 64);
      const WeightView tv = tile_weights(w.view, buf.data());
      std::vector<uint8_t> a(size_t(w.view.row_bytes())), b(a.size());
      for (int64_t r = 0; r < rows; ++r) {
        read_weight_row(tv, r, a.data());
        read_weight_row(w.view, r, b.data());
        ASSERT_EQ(a, b) << dtype_name(t) << " row " << r;
      }
      for (int64_t n : {1, 3, 9})
        for (Numerics num : {Numerics::exact, Numerics::fast}) {
          SCOPED_TRACE(cat(dtype_name(t), " rows=", rows, " n=", n, " ", kernels::numerics_name(num)));
          const int64_t ldx = w.view.cols, ldy = rows;
          const auto x = make_x(rng, n, ldx);
          test::for_each_path([&](const std::string& path) {
            std::vector<float> yp(size_t(n * ldy)), yt(size_t(n * ldy));
            matmul(x.data(), n, ldx, w.view, yp.data(), ldy, &pool2, false, num);
            matmul(x.data(), n, ldx, tv, yt.data(), ldy, &pool2, false, num);
            EXPECT_EQ(count_diff(yp, yt), 0) << path;
          });
        }
      ++seed;
    }
}

int64_t cols_of(DType t, int blocks) { return int64_t(blocks) * dtype_block_elems(t); }

TEST(KernelsMatmulQuant, ExactEqualsF32KernelOnDequantizedWeights) {
  uint64_t seed = 1;
  for (DType t : kTypes)
    for (bool rnd : {false, true})
      for (int64_t n : {1, 3, 30})
        for (int64_t rows : {1, 9, 33}) {
          Rng rng(seed);
          const W w = make_weight(rng, t, rows, cols_of(t, dtype_is_k_quant(t) ? 2 : 5), rnd, rows % 2 ? 3 : 0);
          exact_case(w, w.view, n, nullptr, seed++, n == 3);
        }
}

TEST(KernelsMatmulQuant, FastWithinBoundsSameBitsEveryPath) {
  uint64_t seed = 100;
  for (DType t : kTypes)
    for (bool rnd : {false, true})
      for (int64_t n : {1, 2, 5, 30})
        for (int64_t rows : {1, 8, 13}) {
          Rng rng(seed);
          const W w = make_weight(rng, t, rows, cols_of(t, dtype_is_k_quant(t) ? 2 : 6), rnd, rows % 2 ? 1 : 0);
          fast_case(w.view, n, nullptr, seed++);
        }
}

// Column views at the 32-weight granularity (K-quants: from inside a super-block, ending inside
// another), row views, both modes; the view's reading against the f32 matrix of the whole.
TEST(KernelsMatmulQuant, ColumnViewsInsideSuperBlocks) {
  uint64_t seed = 300;
  for (DType t : kTypes) {
    Rng rng(seed);
    const int64_t cols = cols_of(t, dtype_is_k_quant(t) ? 4 : 16);  // 1024 or 512
    const W w = make_weight(rng, t, 21, cols, true);
    const std::vector<float> full = dequantized(w.view);
    for (int64_t c0 : {int64_t(0), int64_t(32), int64_t(96), int64_t(224), int64_t(288)})
      for (int64_t nc : {int64_t(32), int64_t(128), int64_t(160)}) {
        const WeightView v = w.view.col_block(c0, nc).row_block(2, 17);
        EXPECT_EQ(v.col_offset, dtype_is_k_quant(t) ? c0 % 256 : 0);
        const std::vector<float> m = dequantized(v);
        for (int64_t r = 0; r < v.rows; ++r)
          for (int64_t c = 0; c < nc; ++c)
            ASSERT_EQ(m[size_t(r * nc + c)], full[size_t((r + 2) * cols + c0 + c)]) << "r " << r << " c " << c;
        for (int64_t n : {1, 4, 27}) {
          exact_case(w, v, n, nullptr, seed++, false);
          fast_case(v, n, nullptr, seed++);
        }
      }
  }
}

// Threaded: enough rows that the pool splits them.
TEST(KernelsMatmulQuant, Threaded) {
  ThreadPool pool2(2);
  uint64_t seed = 500;
  for (DType t : kTypes) {
    Rng rng(seed);
    const W w = make_weight(rng, t, 75, cols_of(t, dtype_is_k_quant(t) ? 4 : 32), seed % 2 == 0);  // n = 1: 75 x 1024 is threaded too
    for (int64_t n : {1, 29}) {
      exact_case(w, w.view, n, &pool2, seed++, false);
      fast_case(w.view, n, &pool2, seed++);
    }
  }
}

// Every fast kernel this CPU has is among the paths compared above.
TEST(KernelsMatmulQuant, FastKernelsOfThePaths) {
  std::vector<std::string> seen;
  test::for_each_path([&](const std::string&) { seen.push_back(kernels::fast_quant_kernel()); });
  EXPECT_EQ(seen.front(), "scalar");
  const auto& f = kernels::cpu_features();
  if (f.avx2 && f.fma && f.f16c) {
    EXPECT_EQ(seen[1], "avx2");
  }
  if (seen.size() > 2) {
    EXPECT_EQ(seen[2], f.avx512_vnni && f.avx512vl ? "vnni" : "avx2");
  }
}

TEST(KernelsMatmulQuant, NumericsApplyToEveryBlockType) {
  for (DType t : kTypes) {
    EXPECT_TRUE(kernels::numerics_applies(Numerics::fast, t)) << dtype_name(t);
    EXPECT_FALSE(kernels::numerics_applies(Numerics::exact, t)) << dtype_name(t);
  }
}

}  // namespace
}  // namespace loom
