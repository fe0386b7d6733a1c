// Numerics modes side by side (issue 16): the fast mode's matmul against the exact mode's on the
// same weights, the two measured in alternation (exact, fast, exact, fast, ...; best of each), so
// both see the same machine load (the cores may be shared), for q8_0 and bf16 weights, plain rows
// and row tiles (the engines' layout), 1 and 2 threads, at several token counts.
//
//   bench_numerics [--rows R] [--cols C] [--tokens 1,8,32,128,512] [--rounds K] [--dtypes q8_0,bf16]
//                  [--stream-mib M]
//
// "in cache" rows run one matrix (R x C) again and again: the kernels' compute rate. "streamed"
// rows (row tiles only) walk copies of the matrix totalling M MiB (default 512) per pass, so the
// weights come from DRAM as in decode (n <= 128): their tokens/s at batch n over batch 1 is what a
// batched decode step gains from reading each weight once for n sequences.
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

using namespace loom;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    v.push_back(std::atoll(s.substr(i, j - i).c_str()));
    i = j + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 2048, cols = 2048;
  int rounds = 7;
  std::string tokens_s = "1,8,32,128,512", dtypes = "q8_0,bf16";
  size_t stream_bytes = size_t(512) << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rows") rows = std::atoll(argv[i + 1]);
    else if (a == "--cols") cols = std::atoll(argv[i + 1]);
    else if (a == "--tokens") tokens_s = argv[i + 1];
    else if (a == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--dtypes") dtypes = argv[i + 1];
    else if (a == "--stream-mib") stream_bytes = size_t(std::atoll(argv[i + 1])) << 20;
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  cols = (cols + 31) / 32 * 32;
  const std::vector<int64_t> tokens = parse_list(tokens_s);
  const int64_t max_n = *std::max_element(tokens.begin(), tokens.end());
  std::printf("kernel path %s, fast kernels: q8_0 %s, bf16 %s; %lld x %lld; best of %d alternating rounds\n",
              kernels::kernel_path(), kernels::fast_q8_kernel(), kernels::fast_bf16_kernel(), (long long)rows,
              (long long)cols, rounds);
  std::printf("load: ");
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[64] = {0};
    if (std::fgets(buf, sizeof buf, f)) std::printf("%s", buf);
    std::fclose(f);
  }
  Rng rng(2);
  std::vector<float> x(size_t(max_n * cols)), y(size_t(max_n * rows));
  for (auto& v : x) v = float(rng.normal());
  for (DType dt : {DType::Q8_0, DType::BF16}) {
    if (("," + dtypes + ",").find("," + std::string(dtype_name(dt)) + ",") == std::string::npos) continue;
    const std::string dn(dtype_name(dt));
    const int64_t rb = dtype_row_bytes(dt, cols), mbytes = rows * rb;
    std::vector<uint8_t> plain(static_cast<size_t>(mbytes));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : row) v = float(rng.normal());
      quantize_row(dt, row.data(), plain.data() + r * rb, cols);
    }
    const WeightView pv{plain.data(), dt, rows, cols, rb};
    const int64_t tbytes = (tiled_bytes(pv) + 63) / 64 * 64;
    const int copies = int(std::max<int64_t>(1, int64_t(stream_bytes) / tbytes));
    AlignedBuffer<uint8_t> tiled(size_t(tbytes * copies));
    std::vector<WeightView> tv;
    for (int c = 0; c < copies; ++c) tv.push_back(tile_weights(pv, tiled.data() + c * tbytes));
    std::printf("\n%-5s %-8s %3s %5s %12s %12s %10s\n", "dtype", "weights", "thr", "n", "exact", "fast",
                "fast/exact");
    for (int thr : {1, 2}) {
      ThreadPool pool(thr);
      // in cache: plain rows and row tiles, GFLOP/s
      for (int layout = 0; layout < 2; ++layout)
        for (int64_t n : tokens) {
          const WeightView w = layout == 0 ? pv : tv[0];
          double best[2] = {1e30, 1e30};
          for (int i = 0; i < rounds + 1; ++i)
            for (int m = 0; m < 2; ++m) {
              const double t0 = now_s();
              kernels::matmul(x.data(), n, cols, w, y.data(), rows, &pool, false,
                              m ? kernels::Numerics::fast : kernels::Numerics::exact);
              if (i > 0) best[m] = std::min(best[m], now_s() - t0);  // round 0 warms up
            }
          const double fl = 2.0 * double(n) * double(rows) * double(cols);
          std::printf("%-5s %-8s %3d %5lld %7.1f GF/s %7.1f GF/s %9.2fx\n", dn.c_str(),
                      layout == 0 ? "plain" : "tiles", thr, (long long)n, fl / best[0] * 1e-9, fl / best[1] * 1e-9,
                      best[0] / best[1]);
        }
      // streamed row tiles: tokens/s per matrix pass, batch n over batch 1
      double tps1[2] = {0, 0};
      for (int64_t n : tokens) {
        if (n > 128) continue;  // decode batches; prefill sizes are the in-cache rows
        double best[2] = {1e30, 1e30};
        for (int i = 0; i < std::max(2, rounds / 2) + 1; ++i)
          for (int m = 0; m < 2; ++m) {
            const double t0 = now_s();
            for (int c = 0; c < copies; ++c)
              kernels::matmul(x.data(), n, cols, tv[size_t(c)], y.data(), rows, &pool, false,
                              m ? kernels::Numerics::fast : kernels::Numerics::exact);
            if (i > 0) best[m] = std::min(best[m], (now_s() - t0) / copies);
          }
        const double tps[2] = {double(n) / best[0], double(n) / best[1]};
        if (n == 1) {
          tps1[0] = tps[0];
          tps1[1] = tps[1];
        }
        std::printf("%-5s %-8s %3d %5lld %7.0f tok/s %6.0f tok/s %8.2fx   batch-%lld/batch-1: exact %.2fx, fast %.2fx\n",
                    dn.c_str(), "streamed", thr, (long long)n, tps[0], tps[1], tps[1] / tps[0], (long long)n,
                    tps1[0] > 0 ? tps[0] / tps1[0] : 0.0, tps1[1] > 0 ? tps[1] / tps1[1] : 0.0);
      }
    }
  }
  return 0;
}
