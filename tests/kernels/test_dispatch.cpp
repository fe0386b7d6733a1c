// The kernel path: detection, forcing a lower path, errors.
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernel_test_util.h"

namespace loom {
namespace {

TEST(KernelsDispatch, PathsAreConsistentWithFeatures) {
  const auto paths = kernels::available_kernel_paths();
  ASSERT_FALSE(paths.empty());
  EXPECT_STREQ(paths.front(), "scalar");
  const auto& f = kernels::cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  EXPECT_EQ(paths.size(), size_t(avx512 ? 3 : avx2 ? 2 : 1));
  for (const char* p : paths) {
    kernels::set_kernel_path_for_testing(p);
    EXPECT_STREQ(kernels::kernel_path(), p);
  }
}

TEST(KernelsDispatch, UnknownPathIsAnError) {
  EXPECT_THROW(kernels::set_kernel_path_for_testing("sse9"), Error);
}

// Run by ctest with LOOM_KERNELS set and this test alone (tests/kernels/tests.cmake):
// LOOM_TEST_EXPECT_PATH names the path the process must have picked.
TEST(KernelsDispatch, EnvChoosesPath) {
  const char* want = std::getenv("LOOM_TEST_EXPECT_PATH");
  if (!want) GTEST_SKIP() << "LOOM_TEST_EXPECT_PATH not set (run through ctest: kernels_env_*)";
  const auto paths = kernels::available_kernel_paths();
  bool have = false;
  for (const char* p : paths) have = have || std::strcmp(p, want) == 0;
  if (!have) GTEST_SKIP() << "CPU cannot run " << want;
  EXPECT_STREQ(kernels::kernel_path(), want);
}

}  // namespace
}  // namespace loom
