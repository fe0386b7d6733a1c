// Local-backend collective bandwidth: all-reduce and all-to-all for 2 and 4 ranks (threads) at
// 64 KiB .. 64 MiB per rank, as algorithm bandwidth (bytes per rank / time per call) and as a
// ratio to single-thread memcpy bandwidth of a buffer of the same size, measured in the same run
// (so in-cache sizes are compared with in-cache copies).
//
// What the ratio means: an all-reduce over P ranks moves, per rank, ~ (P-1)/P of the buffer in
// each of two phases (reduce: read P chunks, write one; gather: copy P-1 chunks), so on P
// dedicated cores with memory to spare it can reach about the memcpy rate; far below that
// means barrier latency (small sizes) or shared memory bandwidth / too few cores (large sizes).
// On a machine with fewer cores than ranks the threads share cores and the ratio drops.
//
// Usage: bench_comm [max_mib]   (default 64)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/local.h"
#include "core/clock.h"

namespace {

// Seconds per call of fn: the best of 3 rounds, each repeated until about min_s have passed
// (at least 3 calls). Best-of because the machine is shared: the fastest round is the one
// least disturbed by other work.
template <typename Fn>
double time_per_call(Fn fn, double min_s) {
  fn();  // warm up (page faults, caches)
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    int calls = 0;
    const double t0 = loom::now_seconds();
    double t = t0;
    while (calls < 3 || t - t0 < min_s) {
      fn();
      ++calls;
      t = loom::now_seconds();
    }
    best = std::min(best, (t - t0) / calls);
  }
  return best;
}

double memcpy_gbps(std::size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const double s = time_per_call(
      [&] {
        std::memcpy(b.data(), a.data(), bytes);
        a[0] = b[bytes - 1];  // keep the copy observable
      },
      0.3);
  return static_cast<double>(bytes) / s / 1e9;
}

enum class Op { AllReduce, AllToAll };

// Algorithm bandwidth in GB/s: bytes per rank / seconds per call, timed on rank 0 between
// barriers (every rank runs the same number of calls); best of 3 rounds.
double collective_gbps(Op op, int ranks, std::size_t bytes) {
  const std::size_t n = bytes / sizeof(float);
  double seconds = 0;
  loom::LocalWorld::run(ranks, [&](loom::Communicator& c) {
    std::vector<float> a(n, 1.0f), b(n, 0.0f);
    auto call = [&] {
      if (op == Op::AllReduce) {
        c.all_reduce_sum(a.data(), n);
      } else {
        c.all_to_all(a.data(), b.data(), n / static_cast<std::size_t>(c.size()));
      }
    };
    // The number of calls must be equal on every rank: rank 0 decides from a probe and
    // broadcasts it.
    call();
    c.barrier();
    const double p0 = loom::now_seconds();
    call();
    c.barrier();
    double probe = loom::now_seconds() - p0;
    c.broadcast(&probe, sizeof(probe), 0);
    const int calls = std::clamp(static_cast<int>(0.2 / std::max(probe, 1e-7)), 3, 20000);
    double best = 1e30;
    for (int round = 0; round < 3; ++round) {
      c.barrier();
      const double t0 = loom::now_seconds();
      for (int i = 0; i < calls; ++i) call();
      c.barrier();
      best = std::min(best, (loom::now_seconds() - t0) / calls);
    }
    if (c.rank() == 0) seconds = best;
  });
  return static_cast<double>(bytes) / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t max_mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  std::printf("local backend collectives; %u hardware threads\n",
              std::thread::hardware_concurrency());
  std::printf("ratio = algbw / single-thread memcpy GB/s of the same size (best of 3 rounds)\n\n");
  std::printf("%-11s %5s %10s %12s %12s %8s\n", "op", "ranks", "bytes/rank", "algbw GB/s",
              "memcpy GB/s", "ratio");
  std::vector<double> copy;
  for (std::size_t kib = 64; kib <= max_mib * 1024; kib *= 4) copy.push_back(memcpy_gbps(kib * 1024));
  for (Op op : {Op::AllReduce, Op::AllToAll}) {
    for (int ranks : {2, 4}) {
      std::size_t row = 0;
      for (std::size_t kib = 64; kib <= max_mib * 1024; kib *= 4, ++row) {
        const double g = collective_gbps(op, ranks, kib * 1024);
        char size[32];
        if (kib >= 1024) {
          std::snprintf(size, sizeof(size), "%zu MiB", kib / 1024);
        } else {
          std::snprintf(size, sizeof(size), "%zu KiB", kib);
        }
        std::printf("%-11s %5d %10s %12.2f %12.2f %8.3f\n",
                    op == Op::AllReduce ? "all_reduce" : "all_to_all", ranks, size, g, copy[row],
                    g / copy[row]);
      }
    }
  }
  return 0;
}
