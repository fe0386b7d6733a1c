// This machine's roofline, measured at run time: memory-copy bandwidth and peak f32 FMA FLOP/s.
// Benchmarks print achieved throughput as a fraction of these (never absolute-time asserts).
//
// On shared machines (CI, a team's build box, ranks sharing cores) the load changes during a
// run: measure the roofline interleaved with the kernel being measured (Roofline keeps its
// buffers and threads for that) and take the best of several rounds of each.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace loom {
class ThreadPool;
}

namespace loom::kernels {

class Roofline {
 public:
  // `bytes`: size of each of the two memcpy buffers; 0 picks 2x the last-level cache, clamped
  // to [256 MiB, 1 GiB], so the copy runs from DRAM.
  explicit Roofline(int max_threads, size_t bytes = 0);
  ~Roofline();
  Roofline(const Roofline&) = delete;
  Roofline& operator=(const Roofline&) = delete;

  // Bytes moved per second by a memcpy split over `threads` (<= max_threads) threads:
  // (bytes read + bytes written) / time, best of `reps`.
  double memcpy_bandwidth(int threads, int reps = 1);
  // Peak f32 FLOP/s (one FMA = 2 FLOP) of the active kernel path (kernel_path()):
  // independent register-resident FMA chains on `threads` threads, best of `reps`.
  double peak_flops(int threads, int reps = 1);
  int max_threads() const { return threads_; }

 private:
  int threads_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<char> src_, dst_;
};

// One-shot forms: best of 5 copies / 3 FMA runs.
double measure_memcpy_bandwidth(int threads = 1, size_t bytes = 0);
double measure_peak_flops(int threads = 1);

// The last-level cache size in bytes as the OS reports it (0 if unknown).
size_t last_level_cache_bytes();

}  // namespace loom::kernels
