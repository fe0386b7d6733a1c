// Kernel benchmark: gemv (decode) as a fraction of this machine's memcpy bandwidth, gemm
// (prefill) as a fraction of its peak FMA FLOP/s, for every weight dtype at 1 and 2 threads.
//
//   bench_kernels [--path scalar|avx2|avx512] [--rows R] [--cols C] [--tokens N]
//                 [--stream-mib M] [--rounds K] [--dtypes f32,f16,bf16,q8_0]
//                 (any of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q4_k, q5_k, q6_k)
//
// bf16 and the quantized rows run in both numerics modes (kernels.h "Numerics"): "exact" (f32
// activations) and "fast" (bf16 / int8-block activations; the engines' default), each row against
// the roofline measured right beside it (compare modes by their fractions).
//
// gemv / gemm rows read plain row-major weights (4 KiB pages, as a memory-mapped file gives);
// gemvT / gemmT rows the same weights in the engines' decode layout (row tiles in huge pages,
// core/weight_tiles.h). gemv streams several copies of the matrix in turn (together --stream-mib, by default 2x the
// last-level cache in [256, 1024] MiB) so the weights come from DRAM, as in decode; its bytes
// are the weight bytes only. A small --stream-mib (e.g. 8) measures in-cache ceilings instead.
//
// Method: every row runs K rounds (default 3), each round one kernel measurement and one
// roofline measurement right after it on the same thread count; the row prints best kernel /
// best roofline. Interleaving makes both see the same machine load (the cores may be shared).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "core/weight_tiles.h"
#include "kernels/kernels.h"
#include "kernels/roofline.h"

using namespace loom;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Matrices {
  std::vector<uint8_t> bytes;  // `copies` matrices back to back, plain rows (4 KiB pages, as mmap)
  AlignedBuffer<uint8_t> tiled;  // the same in the engines' decode layout (row tiles, huge pages)
  int64_t matrix_bytes = 0, tiled_matrix_bytes = 0;
  int copies = 0;
  WeightView view(int i, DType dt, int64_t rows, int64_t cols) const {
    return WeightView{bytes.data() + i * matrix_bytes, dt, rows, cols, dtype_row_bytes(dt, cols)};
  }
  WeightView tiled0;  // the first tiled copy, as tile_weights made it
  WeightView tiled_view(int i) const {
    WeightView v = tiled0;
    v.data = tiled.data() + i * tiled_matrix_bytes;
    return v;
  }
};

Matrices make_matrices(DType dt, int64_t rows, int64_t cols, size_t target_bytes) {
  Matrices m;
  m.matrix_bytes = rows * dtype_row_bytes(dt, cols);
  m.copies = int(std::max<int64_t>(1, (int64_t(target_bytes) + m.matrix_bytes - 1) / m.matrix_bytes));
  m.bytes.resize(size_t(m.matrix_bytes * m.copies));
  Rng rng(1);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = float(rng.normal());
    quantize_row(dt, row.data(), m.bytes.data() + r * dtype_row_bytes(dt, cols), cols);
  }
  for (int c = 1; c < m.copies; ++c)
    std::memcpy(m.bytes.data() + c * m.matrix_bytes, m.bytes.data(), size_t(m.matrix_bytes));
  const WeightView plain = m.view(0, dt, rows, cols);
  if (can_tile(plain)) {
    m.tiled_matrix_bytes = (tiled_bytes(plain) + 63) / 64 * 64;
    m.tiled.resize(size_t(m.tiled_matrix_bytes * m.copies));
    for (int c = 0; c < m.copies; ++c) {
      const WeightView t = tile_weights(plain, m.tiled.data() + c * m.tiled_matrix_bytes);
      if (c == 0) m.tiled0 = t;
    }
  }
  return m;
}

// Best of `rounds` of (kernel seconds, roofline value), interleaved.
std::pair<double, double> interleaved(int rounds, const std::function<double()>& kernel_s,
                                      const std::function<double()>& roofline) {
  double best_s = 1e30, best_roof = 0.0;
  for (int i = 0; i < rounds; ++i) {
    best_s = std::min(best_s, kernel_s());
    best_roof = std::max(best_roof, roofline());
  }
  return {best_s, best_roof};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 2048, cols = 8192, tokens = 64;
  int rounds = 3;
  std::string dtypes = "f32,f16,bf16,q8_0";
  size_t stream_bytes =
      std::clamp<size_t>(2 * kernels::last_level_cache_bytes(), size_t(256) << 20, size_t(1) << 30);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--path") kernels::set_kernel_path_for_testing(argv[i + 1]);
    else if (a == "--rows") rows = std::atoll(argv[i + 1]);
    else if (a == "--cols") cols = std::atoll(argv[i + 1]);
    else if (a == "--tokens") tokens = std::atoll(argv[i + 1]);
    else if (a == "--stream-mib") stream_bytes = size_t(std::atoll(argv[i + 1])) << 20;
    else if (a == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--dtypes") dtypes = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  cols = (cols + 255) / 256 * 256;
  std::printf("fast-mode kernels: q8_0 %s, bf16 %s, q4_0 .. q6_k %s\n", kernels::fast_q8_kernel(),
              kernels::fast_bf16_kernel(), kernels::fast_quant_kernel());
  std::printf("kernel path: %s   last-level cache: %zu MiB   gemv working set: %zu MiB   rounds: %d\n",
              kernels::kernel_path(), kernels::last_level_cache_bytes() >> 20, stream_bytes >> 20, rounds);
  kernels::Roofline roof(2);
  const double peak1 = roof.peak_flops(1, 3), peak2 = roof.peak_flops(2, 3);
  std::printf("roofline now: memcpy 1T %.1f GB/s, 2T %.1f GB/s (read+write); peak f32 FMA 1T %.1f, 2T %.1f GFLOP/s\n",
              roof.memcpy_bandwidth(1, 2) * 1e-9, roof.memcpy_bandwidth(2, 2) * 1e-9, peak1 * 1e-9, peak2 * 1e-9);
  // If 2 threads do not reach ~1.6x the FMA rate of one, the second core is busy (shared machine)
  // and the 2-thread rows measure contention, not the kernels.
  std::printf("2T/1T peak FLOP/s: %.2f%s\n", peak2 / peak1,
              peak2 / peak1 < 1.6 ? "  (the second core is busy: 2-thread rows are not meaningful)" : "");
  std::printf("\n%-5s %-10s %3s  %-16s %14s %14s  %s\n", "op", "dtype", "thr", "shape", "achieved", "roofline",
              "fraction");
  Rng rng(2);
  std::vector<float> x(static_cast<size_t>(tokens * cols)), y(static_cast<size_t>(tokens * rows));
  for (auto& v : x) v = float(rng.normal());
  const std::string gemv_shape = std::to_string(rows) + "x" + std::to_string(cols);
  const std::string gemm_shape = std::to_string(tokens) + "x" + gemv_shape;
  for (DType dt : kAllDTypes) {
    if (("," + dtypes + ",").find("," + std::string(dtype_name(dt)) + ",") == std::string::npos) continue;
    const Matrices m = make_matrices(dt, rows, cols, stream_bytes);
   for (kernels::Numerics num : {kernels::Numerics::exact, kernels::Numerics::fast}) {
    if (num == kernels::Numerics::fast && !kernels::numerics_applies(num, dt)) continue;
    const std::string name = std::string(dtype_name(dt)) + (num == kernels::Numerics::fast ? "/fast" : "");
    for (int t : {1, 2})
      for (bool tiled : {false, true}) {
        if (tiled && m.tiled_matrix_bytes == 0) continue;
        ThreadPool pool(t);
        auto gemv_pass = [&] {  // every copy once
          const double t0 = now_s();
          for (int c = 0; c < m.copies; ++c)
            kernels::matmul(x.data(), 1, cols, tiled ? m.tiled_view(c) : m.view(c, dt, rows, cols),
                            y.data(), rows, &pool, false, num);
          return now_s() - t0;
        };
        gemv_pass();  // warm-up
        const auto [s, bw] = interleaved(rounds, gemv_pass, [&] { return roof.memcpy_bandwidth(t); });
        const double got = double(m.matrix_bytes) * m.copies / s;
        std::printf("%-5s %-10s %3d  %-16s %9.1f GB/s %9.1f GB/s  %.2f of memcpy\n", tiled ? "gemvT" : "gemv",
                    name.c_str(), t, gemv_shape.c_str(), got * 1e-9, bw * 1e-9, got / bw);
      }
    for (int t : {1, 2})
      for (bool tiled : {false, true}) {
      if (tiled && m.tiled_matrix_bytes == 0) continue;
      ThreadPool pool(t);
      auto gemm_once = [&] {
        const double t0 = now_s();
        kernels::matmul(x.data(), tokens, cols, tiled ? m.tiled_view(0) : m.view(0, dt, rows, cols), y.data(), rows,
                        &pool, false, num);
        return now_s() - t0;
      };
      gemm_once();  // warm-up
      const auto [s, pk] = interleaved(rounds, gemm_once, [&] { return roof.peak_flops(t); });
      const double got = 2.0 * double(tokens) * double(rows) * double(cols) / s;
      std::printf("%-5s %-10s %3d  %-16s %6.1f GFLOP/s %6.1f GFLOP/s  %.2f of peak\n", tiled ? "gemmT" : "gemm",
                  name.c_str(), t, gemm_shape.c_str(), got * 1e-9, pk * 1e-9, got / pk);
    }
   }
  }
  return 0;
}
