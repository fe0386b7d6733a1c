#include "core/thread_pool.h"

#include "core/parse_number.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include "core/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LOOM_PAUSE() _mm_pause()
#else
#define LOOM_PAUSE() std::this_thread::yield()
#endif

namespace loom {

namespace {
constexpr int kSpinIterations = 20000;  // ~0.1-0.5 ms of pause before sleeping
constexpr int kWaitSpins = 2000;        // the caller's pause rounds before it yields
}

int default_thread_count() {
  const unsigned hw = std::thread::hardware_concurrency();
  const int cores = hw > 0 ? int(hw) : 1;
  if (const char* s = std::getenv("LOOM_THREADS"); s && *s) {
    // The CLI's range (cli/option_ranges.h): at most max(64, 8 x cores).
    const int64_t n = parse_int(s, "LOOM_THREADS", 1, std::max(64, 8 * cores));
    return int(n);
  }
  int n = int(std::thread::hardware_concurrency());
#if defined(__linux__)
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) n = CPU_COUNT(&allowed);
  // cgroup v2 quota ("max 100000" or "200000 100000": quota and period in microseconds).
  if (FILE* f = std::fopen("/sys/fs/cgroup/cpu.max", "r")) {
    char quota[32] = {0};
    long long period = 0;
    if (std::fscanf(f, "%31s %lld", quota, &period) == 2 && std::string(quota) != "max" && period > 0) {
      const long long q = std::atoll(quota);
      if (q > 0) n = std::min(n, int(std::max(1LL, (q + period - 1) / period)));
    }
    std::fclose(f);
  }
#endif
  return n > 0 ? n : 1;
}

bool bind_to_own_cores(int index, int slots, int cores_each) {
#if defined(__linux__)
  if (const char* s = std::getenv("LOOM_PIN_RANKS"); s && std::string(s) == "0") return false;
  if (slots < 1 || cores_each < 1 || index < 0 || index >= slots) return false;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  if (int64_t(slots) * cores_each > int64_t(cores.size())) return false;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int i = 0; i < cores_each; ++i) CPU_SET(cores[size_t(index * cores_each + i)], &mine);
  return pthread_setaffinity_np(pthread_self(), sizeof(mine), &mine) == 0;
#else
  (void)index, (void)slots, (void)cores_each;
  return false;
#endif
}

void parallel_for_each_index(size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i; (i = next++) < n;) {
      try {
        fn(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t n_threads = std::min(n, size_t(default_thread_count()));
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    state_.fetch_add(uint64_t(1) << 32);
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::claim(uint64_t generation) {
  for (;;) {
    uint64_t s = state_.load(std::memory_order_acquire);
    if ((s >> 32) != generation) return;  // a later job: not this one's slices
    const int slice = int(uint32_t(s));
    if (slice >= n_threads_) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) continue;
    // job_ is this generation's: it changes only after every slice of this one is done.
    (*job_)(slice, n_threads_);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t generation = (state_.load(std::memory_order_relaxed) >> 32) + 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.store(generation << 32, std::memory_order_release);  // slice 0 is next
  }
  wake_.notify_all();
  claim(generation);
  // Every slice is claimed; wait for those still running on workers. Spin briefly (workers usually
  // finish together), then yield: on an oversubscribed machine a worker that was descheduled
  // in its slice needs this core to finish (measured on the 2-core build machine at load 8-16, one
  // run each: stories260K, 64 sequences x 128 tokens, 2 threads: 88 s spinning, 18.6 s yielding).
  for (int spins = 0; done_.load(std::memory_order_acquire) != n_threads_; ++spins) {
    if (spins < kWaitSpins) LOOM_PAUSE();
    else std::this_thread::yield();
  }
  job_ = nullptr;
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    auto generation = [&] { return state_.load(std::memory_order_acquire) >> 32; };
    while (generation() == seen && spins < kSpinIterations) {
      LOOM_PAUSE();
      ++spins;
    }
    if (generation() == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation() != seen; });
    }
    seen = generation();
    if (stop_.load()) return;
    if (on_worker_wake) on_worker_wake(ith);
    claim(seen);
  }
}

}  // namespace loom
