#include "kernels/roofline.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

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

Roofline::Roofline(int max_threads, size_t bytes)
    : threads_(std::max(max_threads, 1)), pool_(std::make_unique<ThreadPool>(std::max(max_threads, 1))) {
  if (bytes == 0) bytes = std::clamp<size_t>(2 * last_level_cache_bytes(), size_t(256) << 20, size_t(1) << 30);
  src_.resize(bytes);
  dst_.resize(bytes);
  // First touch from the copying threads (page faults are not bandwidth).
  pool_->run([&](int ith, int nth) {
    const auto [b, e] = ThreadPool::split(int64_t(bytes), ith, nth);
    std::memset(src_.data() + b, ith + 1, size_t(e - b));
    std::memset(dst_.data() + b, 0, size_t(e - b));
  });
}

Roofline::~Roofline() = default;

double Roofline::memcpy_bandwidth(int threads, int reps) {
  const int64_t bytes = int64_t(src_.size());
  const int nth = std::clamp(threads, 1, threads_);
  double best = 0.0;
  for (int rep = 0; rep < std::max(reps, 1); ++rep) {
    const double t0 = now_s();
    pool_->run([&](int ith, int) {
      if (ith >= nth) return;
      const auto [b, e] = ThreadPool::split(bytes, ith, nth);
      std::memcpy(dst_.data() + b, src_.data() + b, size_t(e - b));
    });
    best = std::max(best, 2.0 * double(bytes) / (now_s() - t0));
  }
  return best;
}

double Roofline::peak_flops(int threads, int reps) {
  const detail::KernelTable& tab = detail::active_table();
  const int64_t iters = 10'000'000;
  const int nth = std::clamp(threads, 1, threads_);
  std::vector<double> flops(static_cast<size_t>(threads_), 0.0);
  double best = 0.0;
  for (int rep = 0; rep < std::max(reps, 1); ++rep) {
    const double t0 = now_s();
    pool_->run([&](int ith, int) { flops[size_t(ith)] = ith < nth ? tab.fma_peak(iters) : 0.0; });
    const double dt = now_s() - t0;
    double total = 0.0;
    for (double f : flops) total += f;
    best = std::max(best, total / dt);
  }
  return best;
}

double measure_memcpy_bandwidth(int threads, size_t bytes) {
  return Roofline(threads, bytes).memcpy_bandwidth(threads, 5);
}

double measure_peak_flops(int threads) { return Roofline(threads, 64).peak_flops(threads, 3); }

}  // namespace loom::kernels
