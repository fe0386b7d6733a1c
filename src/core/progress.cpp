#include "core/progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loom {

bool progress_enabled() {
  if (const char* e = std::getenv("LOOM_PROGRESS"); e && *e) return std::strcmp(e, "0") != 0;
  return isatty(STDERR_FILENO) == 1;
}

std::string progress_line(const std::string& label, int64_t done, int64_t total, const std::string& unit,
                          double elapsed_s) {
  char buf[128];
  if (total > 0)
    std::snprintf(buf, sizeof buf, ": %lld/%lld %s (%d%%), %.0f s", (long long)done, (long long)total, unit.c_str(),
                  int(100 * done / total), elapsed_s);
  else
    std::snprintf(buf, sizeof buf, ": %lld %s, %.0f s", (long long)done, unit.c_str(), elapsed_s);
  return label + buf;
}

ProgressReporter::ProgressReporter(std::string label, std::string unit, const ProgressCount& count, double period_s)
    : label_(std::move(label)), unit_(std::move(unit)), count_(count) {
  if (!progress_enabled() || !(period_s > 0)) return;
  thread_ = std::thread([this, period_s] {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lk(mu_);
    for (int k = 1;; ++k) {
      if (cv_.wait_until(lk, t0 + std::chrono::duration<double>(period_s * k), [this] { return stop_; })) break;
      print(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (printed_) print(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
}

ProgressReporter::~ProgressReporter() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ProgressReporter::print(double elapsed_s) {
  std::fprintf(stderr, "%s\n", progress_line(label_, count_.done.load(), count_.total.load(), unit_, elapsed_s).c_str());
  std::fflush(stderr);
  printed_ = true;
}

ProgressCount& simulations_finished() {
  static ProgressCount n;
  return n;
}

}  // namespace loom
