// ThreadPool (core/thread_pool.h): every slice of a job runs exactly once, and a worker that does
// not run (held here by a test hook, as a worker on a core shared with another process waits for
// the scheduler) holds nothing up: the caller claims its slices. Counts, no clocks.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace loom {
namespace {

TEST(ThreadPool, EverySliceExactlyOnce) {
  for (int n : {1, 2, 3, 8}) {
    ThreadPool pool(n);
    for (int job = 0; job < 200; ++job) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run([&](int ith, int nth) {
        ASSERT_EQ(nth, n);
        hits[size_t(ith)].fetch_add(1);
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n=" << n << " job " << job << " slice " << i;
    }
  }
}

TEST(ThreadPool, AWorkerThatDoesNotRunHoldsNothingUp) {
  // The hook's state outlives the pool: the pool's destructor wakes worker 2 once more, and the
  // hook then reads `release` (declared after it, the pool would read it out of scope).
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> held{0};
  ThreadPool pool(3);
  // Worker 2 stops as it wakes for the first job and stays there until released.
  pool.on_worker_wake = [&](int ith) {
    if (ith != 2) return;
    std::unique_lock<std::mutex> lk(mu);
    held.fetch_add(1);
    cv.notify_all();
    cv.wait(lk, [&] { return release; });
  };
  // A first job wakes worker 2, which then stays in the hook (whether or not it got there in time
  // to claim a slice of that job: the job completes either way).
  pool.run([](int, int) {});
  {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return held.load() == 1; });
  }
  const std::thread::id caller = std::this_thread::get_id();
  int by_caller = 0, jobs = 0;
  for (; jobs < 100; ++jobs) {
    std::vector<std::thread::id> ran(3);
    pool.run([&](int ith, int) { ran[size_t(ith)] = std::this_thread::get_id(); });
    for (const auto& id : ran) ASSERT_NE(id, std::thread::id()) << "job " << jobs << ": a slice did not run";
    for (const auto& id : ran) by_caller += id == caller;
  }
  // Every job completed while worker 2 was held: its share went to the caller and worker 1.
  EXPECT_EQ(held.load(), 1);
  EXPECT_GE(by_caller, jobs) << "the caller ran at least its own share";
  {
    std::lock_guard<std::mutex> lk(mu);
    release = true;
  }
  cv.notify_all();
  // Released, worker 2 finds the first job's slices gone and takes part again.
  std::vector<std::atomic<int>> hits(3);
  for (int j = 0; j < 50; ++j) pool.run([&](int ith, int) { hits[size_t(ith)].fetch_add(1); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 50);
}

}  // namespace
}  // namespace loom
