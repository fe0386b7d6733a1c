// bind_to_own_cores (core/thread_pool.h): a thread bound to slot i of n slices holds exactly the
// i-th slice of the cores the process may use, threads it creates inherit that, and nothing is
// bound when the slices do not fit or LOOM_PIN_RANKS=0. Each case runs on a fresh thread, so the
// test binary's own thread keeps its mask. Linux only (elsewhere the call does nothing).
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>

namespace loom {
namespace {

std::vector<int> cores_of(const cpu_set_t& s) {
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s)) out.push_back(c);
  return out;
}

std::vector<int> process_cores() {
  cpu_set_t s;
  CPU_ZERO(&s);
  EXPECT_EQ(sched_getaffinity(0, sizeof(s), &s), 0);
  return cores_of(s);
}

std::vector<int> thread_cores() {
  cpu_set_t s;
  CPU_ZERO(&s);
  EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(s), &s), 0);
  return cores_of(s);
}

// Runs fn on a new thread and returns what it returned and the cores it and its child held.
struct Outcome {
  bool bound = false;
  std::vector<int> mine, child;
};
Outcome on_thread(int index, int slots, int each) {
  Outcome o;
  std::thread t([&] {
    o.bound = bind_to_own_cores(index, slots, each);
    o.mine = thread_cores();
    std::thread c([&] { o.child = thread_cores(); });
    c.join();
  });
  t.join();
  return o;
}

TEST(BindToOwnCores, EachSlotHoldsItsSliceAndChildrenInheritIt) {
  ::unsetenv("LOOM_PIN_RANKS");
  const std::vector<int> all = process_cores();
  ASSERT_FALSE(all.empty());
  const int n = int(all.size());
  for (int i = 0; i < n; ++i) {
    const Outcome o = on_thread(i, n, 1);
    EXPECT_TRUE(o.bound) << "slot " << i << " of " << n;
    EXPECT_EQ(o.mine, std::vector<int>{all[size_t(i)]}) << "slot " << i;
    EXPECT_EQ(o.child, o.mine) << "a thread the bound one creates (a rank's pool worker)";
  }
  if (n >= 2) {  // two cores a slot: slot 0 the first two of the process's cores
    const Outcome o = on_thread(0, n / 2, 2);
    EXPECT_TRUE(o.bound);
    EXPECT_EQ(o.mine, (std::vector<int>{all[0], all[1]}));
  }
  EXPECT_EQ(thread_cores(), all) << "the test's own thread was not touched";
}

TEST(BindToOwnCores, OversubscribedOrSwitchedOffBindsNothing) {
  const std::vector<int> all = process_cores();
  const int n = int(all.size());
  ::unsetenv("LOOM_PIN_RANKS");
  Outcome o = on_thread(0, n + 1, 1);  // more slots than cores
  EXPECT_FALSE(o.bound);
  EXPECT_EQ(o.mine, all);
  o = on_thread(0, n, 2);  // slices of two cores do not fit n cores
  EXPECT_FALSE(o.bound);
  EXPECT_EQ(o.mine, all);
  o = on_thread(n, n, 1);  // no such slot
  EXPECT_FALSE(o.bound);
  ::setenv("LOOM_PIN_RANKS", "0", 1);
  o = on_thread(0, 1, 1);
  EXPECT_FALSE(o.bound);
  EXPECT_EQ(o.mine, all);
  ::unsetenv("LOOM_PIN_RANKS");
}

}  // namespace
}  // namespace loom
#endif
