// Kernel benchmark: gemv (decode) as a fraction of this machine's memcpy bandwidth, gemm
// (prefill) as a fraction of its peak FMA FLOP/s, for every weight dtype at 1 and 2 threads.
//
//   bench_kernels [--path scalar|avx2|avx512] [--rows R] [--cols C] [--tokens N] [--stream-mib M]
//
// --stream-mib sets the gemv working set (default: 2x the last-level cache, in [256, 1024] MiB);
// a small one (e.g. 8) measures the in-cache compute ceiling of each dtype instead.
//
// gemv streams several copies of the matrix in turn (together larger than the last-level cache)
// so the weights come from DRAM, as in decode; its bytes are the weight bytes only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/roofline.h"

using namespace loom;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Matrices {
  std::vector<uint8_t> bytes;  // `copies` matrices back to back
  int64_t matrix_bytes = 0;
  int copies = 0;
  WeightView view(int i, DType dt, int64_t rows, int64_t cols) const {
    return WeightView{bytes.data() + i * matrix_bytes, dt, rows, cols, dtype_row_bytes(dt, cols)};
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
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 2048, cols = 8192, tokens = 64;
  size_t stream_bytes =
      std::clamp<size_t>(2 * kernels::last_level_cache_bytes(), size_t(256) << 20, size_t(1) << 30);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--path") kernels::set_kernel_path_for_testing(argv[i + 1]);
    else if (a == "--rows") rows = std::atoll(argv[i + 1]);
    else if (a == "--cols") cols = std::atoll(argv[i + 1]);
    else if (a == "--tokens") tokens = std::atoll(argv[i + 1]);
    else if (a == "--stream-mib") stream_bytes = size_t(std::atoll(argv[i + 1])) << 20;
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  cols = (cols + 31) / 32 * 32;
  std::printf("kernel path: %s   last-level cache: %zu MiB   gemv working set: %zu MiB\n", kernels::kernel_path(),
              kernels::last_level_cache_bytes() >> 20, stream_bytes >> 20);
  const int thread_counts[2] = {1, 2};
  double mem[3] = {0, 0, 0}, peak[3] = {0, 0, 0};
  for (int t : thread_counts) {
    mem[t] = kernels::measure_memcpy_bandwidth(t);
    peak[t] = kernels::measure_peak_flops(t);
    std::printf("roofline %dT: memcpy %.1f GB/s (read+write)   peak f32 FMA %.1f GFLOP/s\n", t, mem[t] * 1e-9,
                peak[t] * 1e-9);
  }
  // The cores are often shared (CI, other ranks): if 2 threads do not reach ~1.6x the FMA rate of
  // one, the 2-thread rows measure contention, not the kernels. Say so next to the numbers.
  const double core_scaling = peak[2] / peak[1];
  std::printf("2T/1T peak FLOP/s: %.2f%s\n", core_scaling,
              core_scaling < 1.6 ? "  (the second core is busy: 2-thread rows are not meaningful)" : "");
  std::printf("\n%-5s %-5s %3s  %-16s %12s  %s\n", "op", "dtype", "thr", "shape", "achieved", "fraction of roofline");
  Rng rng(2);
  std::vector<float> x(static_cast<size_t>(tokens * cols)), y(static_cast<size_t>(tokens * rows));
  for (auto& v : x) v = float(rng.normal());
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    const Matrices m = make_matrices(dt, rows, cols, stream_bytes);
    for (int t : thread_counts) {
      ThreadPool pool(t);
      // gemv: every copy once per pass, best of 3 passes (after one warm-up pass).
      double best = 1e30;
      for (int rep = 0; rep < 4; ++rep) {
        const double t0 = now_s();
        for (int c = 0; c < m.copies; ++c)
          kernels::matmul(x.data(), 1, cols, m.view(c, dt, rows, cols), y.data(), rows, &pool);
        if (rep > 0) best = std::min(best, now_s() - t0);
      }
      const double bw = double(m.matrix_bytes) * m.copies / best;
      std::printf("%-5s %-5s %3d  %-16s %7.1f GB/s  %.2f of memcpy(%dT)\n", "gemv", std::string(dtype_name(dt)).c_str(),
                  t, (std::to_string(rows) + "x" + std::to_string(cols)).c_str(), bw * 1e-9, bw / mem[t], t);
    }
    for (int t : thread_counts) {
      ThreadPool pool(t);
      double best = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        const double t0 = now_s();
        kernels::matmul(x.data(), tokens, cols, m.view(0, dt, rows, cols), y.data(), rows, &pool);
        if (rep > 0) best = std::min(best, now_s() - t0);
      }
      const double flops = 2.0 * double(tokens) * double(rows) * double(cols) / best;
      std::printf("%-5s %-5s %3d  %-16s %6.1f GFLOP/s  %.2f of peak(%dT)\n", "gemm", std::string(dtype_name(dt)).c_str(),
                  t, (std::to_string(tokens) + "x" + std::to_string(rows) + "x" + std::to_string(cols)).c_str(),
                  flops * 1e-9, flops / peak[t], t);
    }
  }
  return 0;
}
