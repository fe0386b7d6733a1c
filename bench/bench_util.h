// Helpers the benchmarks share: the synthetic model cache and the machine-load report.
// (Header-only: every bench/*.cpp is its own executable.)
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "core/dtype.h"
#include "model/synth.h"

namespace loom::bench {

// Where synthetic models are cached: $LOOM_BENCH_DIR, default /tmp/loom-bench.
inline std::string bench_dir() {
  const char* env = std::getenv("LOOM_BENCH_DIR");
  return env && *env ? env : "/tmp/loom-bench";
}

// The synthetic model file of `shape` in `dtype` (seed 1, GGUF), written once (to a temporary
// name, then renamed, so an interrupted write is never reused).
inline std::string ensure_model(const std::string& shape, DType dtype) {
  const std::string dir = bench_dir();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + shape + "-" + std::string(dtype_name(dtype)) + ".gguf";
  if (std::filesystem::exists(path)) return path;
  SynthOptions o;
  o.shape = synth_shape(shape);
  o.dtype = dtype;
  o.format = "gguf";
  o.seed = 1;
  const std::string tmp = path + ".partial";
  std::printf("writing %s ...\n", path.c_str());
  std::fflush(stdout);
  const SynthResult r = write_synth_model(o, tmp);
  std::filesystem::rename(tmp, path);
  std::printf("  %.2f GB in %.1f s\n", double(r.bytes) / 1e9, r.seconds);
  return path;
}

// The 1-minute load average next to the core count: timings taken while other processes run
// (a shared machine) are slower than the roofline measured between them suggests.
inline void print_load(const char* when) {
  double l1 = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l1) != 1) l1 = -1;
    std::fclose(f);
  }
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("[%s: load average %.2f on %u cores%s]\n", when, l1, cores,
              l1 > double(cores) ? " -- machine busy, timings are pessimistic" : "");
}

}  // namespace loom::bench
