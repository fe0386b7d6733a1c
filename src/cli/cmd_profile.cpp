// `loom profile -o DIR`: the flags of the profiler (src/profiler/profiler.h says what it measures).
#include <memory>

#include "cli/cli.h"
#include "cli/option_ranges.h"
#include "profiler/profiler.h"

namespace loom::cli {

void register_profile(CLI::App& app) {
  auto a = std::make_shared<profiler::ProfileOptions>();
  a->max_ranks = max_threads();
  CLI::App* sub = app.add_subcommand("profile", "Measure this machine's operator and collective times for the simulator");
  sub->add_option("-o,--out", a->out, "Profile folder to write (measurement CSVs + hardware.json)")->required();
  sub->add_option("--threads", a->threads, "Threads of one rank (the engine's ranks: 1 each on the local backend)")
      ->capture_default_str();
  sub->add_option("--model", a->models, "Also profile this model's shapes (repeatable)");
  sub->add_option("--shapes", a->shapes, "Built-in synthetic shapes to profile (loom synth names; empty: none)")
      ->capture_default_str();
  sub->add_option("--dtypes", a->dtypes, "Weight dtypes")->capture_default_str();
  sub->add_option("--tokens", a->tokens, "Token counts per step (default 1..512, quick 1,4,16,64)");
  sub->add_option("--tp", a->tp, "TP degrees (rank 0's shard)")->capture_default_str();
  sub->add_option("--ranks", a->ranks, "Rank counts of the local collectives (default 2,4, quick 2)");
  sub->add_option("--comm", a->comm,
                  "local (everything), or mpi: under mpirun, the collectives over MPI only")
      ->capture_default_str();
  sub->add_option("--reps", a->reps, "Timed runs per point (median; default 9, quick 5)");
  sub->add_option("--sweeps", a->sweeps,
                  "Measure the layer operators' token counts this many times over, --reps runs each, one sweep "
                  "after another; each point is the median of all (spreads a point over the whole run on a "
                  "machine whose speed drifts)");
  sub->add_option("--op-order", a->op_order,
                  "Layer operators timed in the engine's order within each layer (engine), or each on its own "
                  "over the layer copies (isolated: warmer caches than a step finds)")
      ->capture_default_str();
  sub->add_option("--clock", a->clock,
                  "Clock of the operator timings: wall, or cpu (the rank thread's CPU time: what an operator "
                  "costs a core of its own on a shared machine)")
      ->capture_default_str();
  sub->add_option("--concurrent", a->concurrent,
                  "Ranks computing at once while operators are timed (the plans' rank counts; default 1,2)");
  sub->add_option("--budget-mib", a->budget_mib,
                  "Memory for the per-layer weight copies of all concurrent ranks (a step streams every layer)")
      ->capture_default_str();
  sub->add_flag("--quick", a->quick, "Fewer points (seconds instead of minutes), for tests");
  set_action(sub, [a] { profiler::run_profile(*a); });
}

}  // namespace loom::cli
