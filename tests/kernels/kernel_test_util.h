// Helpers shared by the kernel tests: run a body on every kernel path, random inputs, and the
// error metrics the tests state.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"

namespace loom::test {

inline constexpr double kU32 = 1.0 / 16777216.0;  // unit roundoff of f32 (2^-24)

// Runs body(path) once with every path this CPU supports selected, then restores the best one.
template <class F>
void for_each_path(F&& body) {
  const auto paths = kernels::available_kernel_paths();
  for (const char* p : paths) {
    kernels::set_kernel_path_for_testing(p);
    SCOPED_TRACE(std::string("kernel path ") + p);
    body(std::string(p));
  }
  kernels::set_kernel_path_for_testing(paths.back());
}

inline std::vector<float> random_vec(Rng& rng, size_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal() * scale);
  return v;
}

}  // namespace loom::test
