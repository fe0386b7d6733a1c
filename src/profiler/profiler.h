// Measures this machine's operator and collective times as loom's CPU engine runs them and writes
// them in the measurement format of src/sim/calibration.h plus a hardware entry (src/sim/profile.h
// lists the files), so that `loom sim`, `loom plan`, the default Shift threshold and
// `loom sim validate-engine` price the CPU ranks loom runs on. `loom profile` (cli/cmd_profile.cpp)
// parses its flags into ProfileOptions and calls run_profile.
//
// What is measured, each the median of `reps` timed runs after one warm-up, on one rank of
// `threads` threads (the engine's ranks: 1 thread each on the local backend with several ranks):
//  - the layer operators as the engine's stages run them (engine/stage_*.cpp) for every weight dtype
//    (f32, f16, bf16, q8_0), token count and TP degree (rank 0's shard of parallel/plan.h
//    rank_layout), on the shapes of the `models` files and of built-in synthetic shapes, weights in
//    the engines' decode layout (core/weight_tiles.h) where they can be tiled;
//  - one layer's attention as engine/stage_attention.cpp runs it: K/V rows scattered into the
//    pages of the engine's KvStore, then the attention kernel per (sequence, KV head), decode over
//    context lengths and prefill chunks;
//  - the engine's per-step work outside the forward pass: the shared Scheduler's schedule() and
//    on_step_done(), greedy sampling of every sampled row, metrics;
//  - each collective (all-reduce, all-gather, all-to-all, send/recv, broadcast, and the one-sided
//    get SiDP fetches weights with) over sizes and rank counts on the local backend; with
//    comm = "mpi" (under `mpirun -np N loom profile --comm mpi -o DIR`) the same over MPI for
//    groups of 2..N ranks (only the collective files are written then);
//  - the roofline (kernels/roofline.h) for the hardware entry.
#pragma once

#include <string>
#include <vector>

namespace loom::profiler {

// The defaults are `loom profile`'s.
struct ProfileOptions {
  std::string out;  // the profile folder (created)
  int threads = 1;  // of one rank
  std::vector<std::string> models;     // also profile these model files' shapes
  std::string shapes = "tiny,small";   // built-in synthetic shapes (model/synth.h names)
  std::string dtypes = "f32,f16,bf16,q8_0";
  std::string tokens;  // comma list; empty: 1..512 (quick: 1,4,16,64)
  std::string tp = "1,2,4";
  std::string ranks;   // local collectives' rank counts; empty: 2,4 (quick: 2)
  std::string comm = "local";  // local | mpi
  int reps = 0;        // 0: 9 (quick: 5)
  int sweeps = 1;      // passes over the token counts (layer operators), reps each; median over all
  std::string concurrent;  // ranks computing at once during the operator measurements; empty: 1,2
  std::string op_order = "engine";  // engine | isolated (the layer operators)
  std::string clock = "wall";       // wall | cpu (operators)
  int budget_mib = 1024;   // weight copies of all concurrent ranks
  bool quick = false;
  int max_ranks = 64;      // the largest rank count `ranks` and `concurrent` may list
};

// Writes the profile folder. Throws loom::Error naming the option and its value on bad options.
void run_profile(const ProfileOptions& options);

}  // namespace loom::profiler
