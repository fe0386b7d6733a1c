// parallel_for_each_index (core/thread_pool.h): every index runs exactly once whatever the thread
// count, and an exception thrown by one task reaches the caller after all tasks have finished.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "core/thread_pool.h"

namespace loom {
namespace {

TEST(ParallelForEachIndex, EveryIndexOnceAtAnyThreadCount) {
  for (const char* threads : {"1", "2", "7"}) {
    ::setenv("LOOM_THREADS", threads, 1);
    for (size_t n : {size_t(0), size_t(1), size_t(5), size_t(100)}) {
      std::vector<std::atomic<int>> calls(n);
      parallel_for_each_index(n, [&](size_t i) { calls[i]++; });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(calls[i].load(), 1) << "index " << i << " of " << n << ", " << threads;
    }
  }
  ::unsetenv("LOOM_THREADS");
}

TEST(ParallelForEachIndex, AnExceptionReachesTheCallerAfterEveryTask) {
  ::setenv("LOOM_THREADS", "3", 1);
  std::atomic<int> done{0};
  EXPECT_THROW(parallel_for_each_index(20,
                                       [&](size_t i) {
                                         if (i == 4) throw std::runtime_error("task 4");
                                         done++;
                                       }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 19);  // the other tasks still ran
  ::unsetenv("LOOM_THREADS");
}

}  // namespace
}  // namespace loom
