#include "kernels/roofline.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/dispatch.h"

namespace loom::kernels {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

size_t last_level_cache_bytes() {
  long l3 = -1, l2 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
  l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  if (l3 > 0) return size_t(l3);
  return l2 > 0 ? size_t(l2) : 0;
}

double measure_memcpy_bandwidth(int threads, size_t bytes) {
  if (bytes == 0) bytes = std::clamp<size_t>(2 * last_level_cache_bytes(), size_t(256) << 20, size_t(1) << 30);
  threads = std::max(threads, 1);
  std::vector<char> src(bytes), dst(bytes);
  ThreadPool pool(threads);
  // First touch both buffers from their copying threads (page faults are not bandwidth).
  auto copy = [&](int ith, int nth) {
    const auto [b, e] = ThreadPool::split(int64_t(bytes), ith, nth);
    std::memcpy(dst.data() + b, src.data() + b, size_t(e - b));
  };
  pool.run([&](int ith, int nth) {
    const auto [b, e] = ThreadPool::split(int64_t(bytes), ith, nth);
    std::memset(src.data() + b, ith + 1, size_t(e - b));
    std::memset(dst.data() + b, 0, size_t(e - b));
  });
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now_s();
    pool.run(copy);
    const double dt = now_s() - t0;
    best = std::max(best, 2.0 * double(bytes) / dt);
  }
  return best;
}

double measure_peak_flops(int threads) {
  threads = std::max(threads, 1);
  ThreadPool pool(threads);
  const detail::KernelTable& tab = detail::active_table();
  const int64_t iters = 20'000'000;
  double best = 0.0;
  std::vector<double> flops(static_cast<size_t>(threads));
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = now_s();
    pool.run([&](int ith, int) { flops[size_t(ith)] = tab.fma_peak(iters); });
    const double dt = now_s() - t0;
    double total = 0.0;
    for (double f : flops) total += f;
    best = std::max(best, total / dt);
  }
  return best;
}

}  // namespace loom::kernels
