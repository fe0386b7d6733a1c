// Wall-clock helpers for metrics and benchmarks (monotonic).
#pragma once

#include <chrono>

namespace loom {

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace loom
