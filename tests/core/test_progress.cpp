// Progress lines (core/progress.h): the text of a line from its counts, and the switch. The
// reporter's cadence is wall time and only paces output, so it is not asserted here.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/progress.h"

namespace loom {
namespace {

TEST(Progress, LineFromTheCounts) {
  EXPECT_EQ(progress_line("loom bench offline", 120, 512, "requests", 14.2), "loom bench offline: 120/512 requests (23%), 14 s");
  EXPECT_EQ(progress_line("loom sim experiment x", 37, 0, "simulations", 40.6), "loom sim experiment x: 37 simulations, 41 s");
  EXPECT_EQ(progress_line("v", 9, 9, "files", 0), "v: 9/9 files (100%), 0 s");
}

TEST(Progress, EnvironmentTurnsItOnAndOff) {
  const char* old = std::getenv("LOOM_PROGRESS");
  const std::string saved = old ? old : "";
  setenv("LOOM_PROGRESS", "1", 1);
  EXPECT_TRUE(progress_enabled());
  setenv("LOOM_PROGRESS", "0", 1);
  EXPECT_FALSE(progress_enabled());
  // A reporter that is off starts no thread and prints nothing; the run's counts are its own.
  ProgressCount c;
  c.total = 3;
  {
    ProgressReporter r("t", "units", c, 0.001);
    for (int i = 0; i < 3; ++i) ++c.done;
  }
  EXPECT_EQ(c.done.load(), 3);
  if (old) setenv("LOOM_PROGRESS", saved.c_str(), 1);
  else unsetenv("LOOM_PROGRESS");
}

}  // namespace
}  // namespace loom
