// LOOM_OP_TIMING (core/op_timing.h): nested scopes charge each class its exclusive time, the
// classes of a thread add up to its outermost scope, and reset() clears the totals.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/clock.h"
#include "core/op_timing.h"

namespace loom::optime {
namespace {

void busy(double s) {
  const double end = now_seconds() + s;
  while (now_seconds() < end) {
  }
}

TEST(OpTiming, NestedScopesChargeExclusiveTime) {
  // Read once at first use: this test sets it before anything in this process timed.
  setenv("LOOM_OP_TIMING", "1", 1);
  ASSERT_TRUE(enabled());
  std::vector<Totals> all;
  double outer_s = 0;
  std::thread t([&] {
    set_rank(3);
    const double t0 = now_seconds();
    {
      Scope outer(Op::Matmul);
      busy(0.02);
      {
        Scope inner(Op::Collective);
        busy(0.01);
      }
      busy(0.005);
    }
    outer_s = now_seconds() - t0;
  });
  t.join();
  all = snapshot();
  const Totals* mine = nullptr;
  for (const Totals& x : all)
    if (x.rank == 3) mine = &x;
  ASSERT_NE(mine, nullptr);
  const double mm = mine->seconds[size_t(Op::Matmul)], coll = mine->seconds[size_t(Op::Collective)];
  EXPECT_EQ(mine->calls[size_t(Op::Matmul)], 1);
  EXPECT_EQ(mine->calls[size_t(Op::Collective)], 1);
  EXPECT_GE(coll, 0.01);
  EXPECT_GE(mm, 0.025);
  // The inner scope's time is not the outer's: together they are the outer scope's span.
  EXPECT_NEAR(mm + coll, outer_s, 1e-3);
  EXPECT_LT(mm, outer_s - 0.0095);
  reset();
  for (const Totals& x : snapshot()) EXPECT_NE(x.rank, 3);  // nothing timed since: absent
}

}  // namespace
}  // namespace loom::optime
