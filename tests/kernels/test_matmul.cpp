// matmul vs matmul_ref on every path, dtype and awkward shape.
//
// Metric: per output, |y - y_ref| <= (K + 8) * 2^-24 * sum_k |x_k * w_k|  (+ 2^-23 * |y0| when
// accumulating onto y0). Why: the kernel sees exactly the weights the reference sees (f16/bf16
// widen exactly; q8_0 is d*q rounded once, as dequantize_row does), so the only difference is the
// f32 summation order, and any order of K additions in f32 is within K*u*sum|terms| of the exact
// sum (Higham, Accuracy and Stability of Numerical Algorithms, 3.1). The reference sums in
// double (error ~1e-16). A single wrong or missing term (~1/K of the sum) exceeds the bound.
#include <algorithm>
#include <cstring>

#include "core/weight_tiles.h"
#include "kernel_test_util.h"

namespace loom {
namespace {

using kernels::matmul;
using kernels::matmul_ref;

// A weight matrix of `dtype` with `rows` x `cols`, rows `pad_bytes` apart beyond their size.
struct TestWeight {
  std::vector<uint8_t> bytes;
  WeightView view;
};

TestWeight make_weight(Rng& rng, DType dtype, int64_t rows, int64_t cols, int64_t pad_bytes = 0) {
  TestWeight t;
  const int64_t row_bytes = dtype_row_bytes(dtype, cols) + pad_bytes;
  t.bytes.assign(size_t(rows * row_bytes + 64), 0xAB);  // padding holds garbage on purpose
  for (int64_t r = 0; r < rows; ++r) {
    const auto src = test::random_vec(rng, size_t(cols));
    quantize_row(dtype, src.data(), t.bytes.data() + r * row_bytes, cols);
  }
  t.view.data = t.bytes.data();
  t.view.dtype = dtype;
  t.view.rows = rows;
  t.view.cols = cols;
  t.view.row_stride = row_bytes;
  return t;
}

// Checks y (from matmul) against the bound above; y0 is y before the call when accumulating.
void expect_close(const std::vector<float>& x, int64_t n, int64_t ldx, const WeightView& w,
                  const std::vector<float>& y, const std::vector<float>& y_ref, int64_t ldy,
                  const std::vector<float>* y0) {
  std::vector<float> wrow(static_cast<size_t>(std::max<int64_t>(w.cols, 1)));
  std::vector<uint8_t> raw(size_t(dtype_row_bytes(w.dtype, w.cols) + 1));
  int bad = 0;
  for (int64_t r = 0; r < w.rows; ++r) {
    read_weight_row(w, r, raw.data());
    dequantize_row(w.dtype, raw.data(), wrow.data(), w.cols);
    for (int64_t i = 0; i < n; ++i) {
      double mag = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) mag += std::fabs(double(x[size_t(i * ldx + k)]) * wrow[size_t(k)]);
      double tol = double(w.cols + 8) * test::kU32 * mag;
      if (y0) tol += 2.0 * test::kU32 * std::fabs((*y0)[size_t(i * ldy + r)]);
      const double err = std::fabs(double(y[size_t(i * ldy + r)]) - y_ref[size_t(i * ldy + r)]);
      if (!(err <= tol) && bad++ < 5)
        ADD_FAILURE() << "y[" << i << "," << r << "] = " << y[size_t(i * ldy + r)] << " ref "
                      << y_ref[size_t(i * ldy + r)] << " err " << err << " > tol " << tol;
    }
  }
  EXPECT_EQ(bad, 0);
}

void run_case(DType dtype, int64_t n, int64_t rows, int64_t cols, ThreadPool* pool, uint64_t seed,
              bool accumulate = false, int64_t pad_bytes = 0) {
  SCOPED_TRACE(cat(dtype_name(dtype), " n=", n, " rows=", rows, " cols=", cols, " acc=", accumulate,
                   " pad=", pad_bytes, " threads=", pool ? pool->size() : 1));
  Rng rng(seed);
  TestWeight w = make_weight(rng, dtype, rows, cols, pad_bytes);
  const int64_t ldx = cols + 3, ldy = rows + 5;  // strided activations too
  const auto x = test::random_vec(rng, size_t(n * ldx));
  const auto y0 = test::random_vec(rng, size_t(n * ldy));
  std::vector<float> y_ref = y0;
  matmul_ref(x.data(), n, ldx, w.view, y_ref.data(), ldy, accumulate);
  test::for_each_path([&](const std::string&) {
    std::vector<float> y = y0;
    matmul(x.data(), n, ldx, w.view, y.data(), ldy, pool, accumulate);
    expect_close(x, n, ldx, w.view, y, y_ref, ldy, accumulate ? &y0 : nullptr);
    // Outside the [n, rows] block y is untouched (ldy padding).
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = rows; r < ldy; ++r) ASSERT_EQ(y[size_t(i * ldy + r)], y0[size_t(i * ldy + r)]);
  });
}

const int64_t kTokens[] = {1, 2, 3, 7, 17, 97};

TEST(KernelsMatmul, F32OddShapes) {
  uint64_t seed = 1;
  for (int64_t n : kTokens)
    for (int64_t cols : {1, 7, 97, 160})
      for (int64_t rows : {1, 5, 33}) run_case(DType::F32, n, rows, cols, nullptr, seed++);
}

TEST(KernelsMatmul, F16OddShapes) {
  uint64_t seed = 100;
  for (int64_t n : kTokens)
    for (int64_t cols : {1, 7, 97, 160})
      for (int64_t rows : {1, 5, 33}) run_case(DType::F16, n, rows, cols, nullptr, seed++);
}

TEST(KernelsMatmul, Bf16OddShapes) {
  uint64_t seed = 200;
  for (int64_t n : kTokens)
    for (int64_t cols : {1, 7, 97, 160})
      for (int64_t rows : {1, 5, 33}) run_case(DType::BF16, n, rows, cols, nullptr, seed++);
}

TEST(KernelsMatmul, Q8_0Shapes) {
  uint64_t seed = 300;
  for (int64_t n : kTokens)
    for (int64_t cols : {32, 96, 160, 1024 + 32})
      for (int64_t rows : {1, 5, 33}) run_case(DType::Q8_0, n, rows, cols, nullptr, seed++);
}

// Large enough to be threaded (and to cross the gemm column chunk of 1024), on 2 and 3 threads.
TEST(KernelsMatmul, Threaded) {
  ThreadPool pool2(2), pool3(3);
  uint64_t seed = 400;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    for (int64_t n : {1, 4, 6, 17, 26, 33}) {  // gemv; in-place tiles; packed gemm (n > 24), tails
      const int64_t cols = dt == DType::Q8_0 ? 2048 + 96 : 2048 + 97;
      run_case(dt, n, 133, cols, &pool2, seed++);
      run_case(dt, n, 133, cols, &pool3, seed++);
    }
}

TEST(KernelsMatmul, Accumulate) {
  ThreadPool pool(2);
  uint64_t seed = 500;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    for (int64_t n : {1, 3, 17, 33}) {
      run_case(dt, n, 37, dt == DType::Q8_0 ? 1056 : 1057, nullptr, seed++, true);
      run_case(dt, n, 101, dt == DType::Q8_0 ? 2080 : 2081, &pool, seed++, true);
    }
}

// Rows further apart than their size (padding bytes hold garbage).
TEST(KernelsMatmul, StridedRows) {
  uint64_t seed = 600;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    for (int64_t n : {1, 7}) run_case(dt, n, 19, dt == DType::Q8_0 ? 96 : 97, nullptr, seed++, false, 40);
}

// A column block of a wider matrix (the TP row-parallel shard of Wo / W_down) and a row block.
TEST(KernelsMatmul, ColumnAndRowBlocks) {
  ThreadPool pool(2);
  uint64_t seed = 700;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    for (int64_t n : {1, 3, 17, 33}) {
      SCOPED_TRACE(cat(dtype_name(dt), " n=", n));
      Rng rng(seed++);
      const int64_t rows = 70, cols = 1024 + 64 * 3;
      TestWeight full = make_weight(rng, dt, rows, cols);
      const WeightView w = full.view.col_block(dt == DType::Q8_0 ? 64 : 67, 1024 + 32).row_block(3, 61);
      const auto x = test::random_vec(rng, size_t(n * w.cols));
      std::vector<float> y_ref(static_cast<size_t>(n * w.rows));
      matmul_ref(x.data(), n, w.cols, w, y_ref.data(), w.rows);
      // The reference itself against the full matrix restricted by hand (independent of views).
      std::vector<float> wrow(static_cast<size_t>(cols));
      for (int64_t r = 0; r < w.rows; ++r) {
        dequantize_row(dt, full.view.row(r + 3), wrow.data(), cols);
        const int64_t c0 = dt == DType::Q8_0 ? 64 : 67;
        double acc = 0.0;
        for (int64_t k = 0; k < w.cols; ++k) acc += double(x[size_t(k)]) * wrow[size_t(c0 + k)];
        ASSERT_NEAR(y_ref[size_t(r)], acc, 1e-5 * (1.0 + std::fabs(acc)));
      }
      test::for_each_path([&](const std::string&) {
        std::vector<float> y(size_t(n * w.rows), -1.0f);
        matmul(x.data(), n, w.cols, w, y.data(), w.rows, &pool);
        expect_close(x, n, w.cols, w, y, y_ref, w.rows, nullptr);
      });
    }
}

TEST(KernelsMatmul, ZeroColumnsGivesZero) {
  std::vector<float> x(4, 1.0f), y(6, 5.0f);
  float wdata[1] = {0};
  WeightView w{wdata, DType::F32, 3, 0, 0};
  test::for_each_path([&](const std::string&) {
    std::fill(y.begin(), y.end(), 5.0f);
    kernels::matmul(x.data(), 2, 2, w, y.data(), 3, nullptr);
    for (float v : y) EXPECT_EQ(v, 0.0f);
  });
}

}  // namespace
}  // namespace loom

// ---------------------------------------------------------------- row tiles (decode layout)
namespace loom {
namespace {

struct TiledWeight {
  std::vector<uint8_t> bytes;
  WeightView view;
};

TiledWeight tile(const WeightView& w) {
  TiledWeight t;
  t.bytes.assign(size_t(tiled_bytes(w)) + 64, 0xCD);
  // 64-byte aligned start, as the engine's arenas give.
  uint8_t* at = t.bytes.data() + (64 - reinterpret_cast<uintptr_t>(t.bytes.data()) % 64) % 64;
  t.view = tile_weights(w, at);
  return t;
}

TEST(KernelsTiles, RoundTripAndPadding) {
  Rng rng(900);
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    for (int64_t rows : {1, 7, 8, 9, 133}) {
      const int64_t cols = tile_chunk_cols(dt) * 3;
      SCOPED_TRACE(cat(dtype_name(dt), " rows=", rows));
      TestWeight w = make_weight(rng, dt, rows, cols, 5);
      ASSERT_TRUE(can_tile(w.view));
      TiledWeight t = tile(w.view);
      EXPECT_TRUE(t.view.tiled());
      EXPECT_EQ(t.view.bytes(), w.view.bytes());  // the same weights, no more
      EXPECT_EQ(tiled_bytes(w.view) % (kTileRows * dtype_row_bytes(dt, cols)), 0);
      const size_t rb = size_t(dtype_row_bytes(dt, cols));
      std::vector<uint8_t> row(rb);
      for (int64_t r = 0; r < rows; ++r) {
        read_weight_row(t.view, r, row.data());
        ASSERT_EQ(std::memcmp(row.data(), w.view.row(r), rb), 0) << "row " << r;
      }
      // The padding rows of the last tile are zero weights.
      if (rows % kTileRows != 0) {
        WeightView one = t.view;  // read lane rows % kTileRows of the last tile as a row
        one.rows = (rows + kTileRows - 1) / kTileRows * kTileRows;
        read_weight_row(one, one.rows - 1, row.data());
        std::vector<float> f(static_cast<size_t>(cols));
        dequantize_row(dt, row.data(), f.data(), cols);
        for (float v : f) ASSERT_EQ(v, 0.0f);
      }
    }
}

// Engines copy weights into tiles only when the copy leaves room (half of MemAvailable at most):
// a model near the machine's memory keeps running on its memory-mapped rows.
TEST(KernelsTiles, DecodeCopyOnlyWhenItFits) {
  EXPECT_FALSE(decode_copy_affordable(int64_t(1) << 60));  // an exabyte never fits
  if (weight_tiles_enabled()) EXPECT_TRUE(decode_copy_affordable(4096));
  else EXPECT_FALSE(decode_copy_affordable(4096));
}

TEST(KernelsTiles, WhatCannotBeTiled) {
  Rng rng(901);
  TestWeight odd = make_weight(rng, DType::F32, 8, 24);  // 24 columns: not whole 16-column chunks
  EXPECT_FALSE(can_tile(odd.view));
  TestWeight q = make_weight(rng, DType::Q8_0, 8, 96);  // 3 blocks: not whole 4-block chunks
  EXPECT_FALSE(can_tile(q.view));
  EXPECT_THROW(tile_weights(q.view, nullptr), InternalError);  // misuse: a LOOM_CHECK
  TestWeight ok = make_weight(rng, DType::BF16, 16, 64);
  TiledWeight t = tile(ok.view);
  EXPECT_FALSE(can_tile(t.view));  // already tiled
  EXPECT_THROW(t.view.row_block(8, 8), InternalError);
  EXPECT_THROW(t.view.col_block(0, 32), InternalError);
}

// A tiled copy against the reference (the bound above) on every path, and against its plain
// original bit for bit where both run the same code: decode (n == 1: the tiled gemv performs the
// plain gemv's operations in its order) and large batches (both unpack to the same f32 panel).
void run_tiled_case(DType dt, int64_t n, int64_t rows, int64_t cols, ThreadPool* pool, uint64_t seed, bool accumulate) {
  SCOPED_TRACE(cat("tiled ", dtype_name(dt), " n=", n, " rows=", rows, " cols=", cols, " acc=", accumulate,
                   " threads=", pool ? pool->size() : 1));
  Rng rng(seed);
  TestWeight w = make_weight(rng, dt, rows, cols, 3);
  TiledWeight t = tile(w.view);
  const int64_t ldx = cols + 3, ldy = rows + 5;
  const auto x = test::random_vec(rng, size_t(n * ldx));
  const auto y0 = test::random_vec(rng, size_t(n * ldy));
  std::vector<float> y_ref = y0;
  matmul_ref(x.data(), n, ldx, w.view, y_ref.data(), ldy, accumulate);
  test::for_each_path([&](const std::string& path) {
    std::vector<float> yt = y0, yp = y0;
    matmul(x.data(), n, ldx, t.view, yt.data(), ldy, pool, accumulate);
    matmul(x.data(), n, ldx, w.view, yp.data(), ldy, pool, accumulate);
    expect_close(x, n, ldx, w.view, yt, y_ref, ldy, accumulate ? &y0 : nullptr);
    if (n == 1 || n > 24) {
      int diff = 0;
      for (size_t i = 0; i < yt.size(); ++i) diff += yt[i] != yp[i];
      EXPECT_EQ(diff, 0) << path << ": tiled and plain differ";
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = rows; r < ldy; ++r) ASSERT_EQ(yt[size_t(i * ldy + r)], y0[size_t(i * ldy + r)]);
  });
}

TEST(KernelsTiles, MatmulOnEveryPath) {
  ThreadPool pool2(2), pool3(3);
  uint64_t seed = 1000;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    for (int64_t n : {1, 2, 7, 30}) {
      const int64_t cc = tile_chunk_cols(dt);
      for (int64_t rows : {1, 8, 13})
        for (int64_t cols : {cc, 3 * cc}) run_tiled_case(dt, n, rows, cols, nullptr, seed++, false);
      // threaded, rows not a multiple of the tile, columns across the gemm chunk, accumulating
      const int64_t cols = (2048 / cc + 1) * cc;
      run_tiled_case(dt, n, 133, cols, &pool2, seed++, false);
      run_tiled_case(dt, n, 133, cols, &pool3, seed++, true);
    }
}

}  // namespace
}  // namespace loom
