// The Shift Parallelism flags shared by `loom generate` and `loom bench offline`:
//   --policy fixed|shift (test hooks: alternate, random:SEED)   engine/policy.h
//   --shift-threshold N    tokens per step above which the base (sp x tp) config runs;
//                          default: derived from the cost model for THIS machine (its measured
//                          memcpy bandwidth and peak FLOP/s, kernels/roofline.h, as a CPU
//                          device of the simulator, sim/shift_threshold.h), printed at start
//   --shift-weights separate|slice                              engine/shard_weights.h
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "engine/dist_engine.h"

namespace loom::cli {

struct ShiftArgs {
  std::string policy = "fixed";
  int64_t threshold = -1;
  std::string weights = "separate";
  bool given() const { return policy != "fixed" || threshold >= 0 || weights != "separate"; }
};

void add_shift_options(CLI::App* sub, ShiftArgs& a);
// Copies the flags into `o` and installs the cost-model default threshold (computed on world rank
// 0 when needed; it prints one line on stderr saying where the number comes from).
void apply_shift_options(const ShiftArgs& a, DistOptions& o);
// One stderr line after a run: steps per config, switches, KV bytes moved (when it switched).
void print_shift_stats(const DistEngine& e);

}  // namespace loom::cli
