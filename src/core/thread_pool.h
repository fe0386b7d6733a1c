// A fixed pool of worker threads for data-parallel kernels.
//
// run(fn) calls fn(ith, nth) once for every ith in [0, nth) and returns when all are done. The
// slices are claimed, not assigned: the caller's thread and each worker take the next unclaimed ith
// until none is left, so a worker the kernel has not scheduled yet (a core shared with another
// process) holds nothing up, the caller runs its slice instead (each ith still runs exactly once,
// on one thread, so results do not depend on which thread ran it). Workers spin briefly before
// sleeping, so back-to-back kernel calls in a decode step do not pay a futex wake-up each; they
// sleep when idle so ranks-as-threads do not burn cores they share.
//
// Thread-safety: one run() at a time per pool (each rank owns its own pool).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  void run(const std::function<void(int ith, int nth)>& fn);

  // Test hook: runs on worker `ith`'s thread each time it wakes for a job, before it claims a
  // slice (a test holds a worker there to play a descheduled one). Set before any run().
  std::function<void(int ith)> on_worker_wake;

  // Splits [0, n) into nth near-equal contiguous ranges and returns the ith one.
  static std::pair<int64_t, int64_t> split(int64_t n, int ith, int nth) {
    const int64_t base = n / nth, rem = n % nth;
    const int64_t begin = ith * base + (ith < rem ? ith : rem);
    return {begin, begin + base + (ith < rem ? 1 : 0)};
  }

 private:
  void worker(int ith);
  // Claims and runs slices of job `generation` while any is left.
  void claim(uint64_t generation);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  // The job's generation (high 32 bits) and its next unclaimed slice (low 32 bits): a claim is one
  // compare-and-swap, and a worker late for one job cannot claim a slice of the next.
  std::atomic<uint64_t> state_{0};
  std::atomic<int> done_{0};  // slices of the current job finished
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable wake_;
};

// Runs fn(ith, nth) on `pool` when given, else once on the calling thread as (0, 1).
inline void parallel_run(ThreadPool* pool, const std::function<void(int, int)>& fn) {
  if (pool && pool->size() > 1) pool->run(fn); else fn(0, 1);
}

// The default thread count: LOOM_THREADS if set, else the cores this process may run on (its
// affinity mask, and a cgroup CPU quota below it: a container's share, not the host's cores).
int default_thread_count();

// Binds the calling thread (and the threads it creates later, which inherit the mask) to cores
// of its own: slot `index` of `slots` equal slices of `cores_each` cores taken from the cores
// this process may use (sched_getaffinity), as mpirun's --bind-to core does for the processes of
// one host. Does nothing, and returns false, when the slices do not fit those cores
// (oversubscribed: the kernel shares them best), when LOOM_PIN_RANKS=0, or off Linux. Why the
// local backend's rank threads want it: ranks that wait for each other at every layer sleep and
// wake many times a step, and a scheduler may wake them onto one core (the guest kernel of this
// project's machines packs waking threads, sched_vcpu_pack), where two ranks then take turns and a
// TP step runs at one core's speed; a rank bound to its own core cannot be moved there.
bool bind_to_own_cores(int index, int slots, int cores_each);

// Calls fn(i) once for every i in [0, n), on up to default_thread_count() threads (the caller's
// included), each taking the next index from a shared counter: for a few independent, uneven
// tasks (simulations, calibration fits), not for kernels (ThreadPool). Returns when all are done;
// then rethrows the first exception one of them threw.
void parallel_for_each_index(size_t n, const std::function<void(size_t i)>& fn);

}  // namespace loom
