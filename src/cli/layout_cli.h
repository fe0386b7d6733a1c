// The layout flags shared by `loom generate`, `loom bench offline` and `loom serve`:
//   --plan P [--plan Q ...]  the plan set (parallel/plan_set.h); the first is the initial plan;
//                            default tp=<ranks>
//   --policy NAME            a layout policy of the registry (engine/policy_registry.h)
//   --shift-threshold N      tokens per step above which --policy shift runs the base (sp x tp)
//                            config; default: derived from the cost model for THIS machine (its
//                            measured memcpy bandwidth and peak FLOP/s, kernels/roofline.h, as a
//                            CPU device of the simulator, sim/shift_threshold.h), printed at start
//   --shift-weights separate|slice                        engine/shard_weights.h
//   --device cpu|cuda        where the ranks compute (default cpu). cuda is checked up front
//                            (gpu/device.h): one line and a non-zero exit when the build has no
//                            CUDA backend or no GPU is visible
//   --sidp-threshold N       SiDP: B_th in sequences per replica below which --policy sidp moves
//                            every replica to compute-as-a-service (engine/policy.h); default: the
//                            smallest batch whose forward hides the WaS fetches on THIS machine's
//                            cost model (sim/sidp_cost.h default_sidp_threshold), printed at start
//   --profile DIR            the default thresholds from the cost model calibrated by a loom profile
//                            of this machine (`loom profile -o DIR`, sim/profile.h) instead
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/dist_engine.h"
#include "engine/policy_registry.h"

namespace loom::cli {

struct LayoutArgs {
  std::vector<std::string> plans;
  std::string policy = kDefaultPolicy;
  int64_t threshold = -1;
  int64_t sidp_threshold = -1;  // --sidp-threshold: B_th of --policy sidp (sequences per replica)
  std::string weights = "separate";
  std::string profile;
  std::string device = "cpu";
  int64_t cpu_kv_bytes = 0;  // Seesaw's CPU KV tier (--cpu-kv-bytes)
  // Anything beyond one rank running tp=1 with the fixed policy on the CPU.
  bool given() const {
    return !(plans.empty() || (plans.size() == 1 && plans[0] == "tp=1")) || !is_default_policy(policy) || threshold >= 0 ||
           weights != "separate" || device != "cpu";
  }
};

void add_layout_options(CLI::App* sub, LayoutArgs& a);
// The plan set's rank count (its first plan's size), or `ranks` when no plan is given. Checks the
// plans and the policy first (one line naming the value: different rank counts, an unknown policy,
// cycle:0, a key that is not executed yet, a Helix block that is not whole KV blocks of
// `block_size` tokens): call it before loading anything.
int layout_ranks(const LayoutArgs& a, int ranks, int block_size = kDefaultKvBlockSize);
// Copies the flags into `o` (plans default: tp=<ranks>) and installs the cost-model default
// threshold (computed on world rank 0 when needed; it prints one line on stderr saying where the
// number comes from).
void apply_layout_options(const LayoutArgs& a, int ranks, DistOptions& o);
// stderr lines after a run: steps, tokens, switches, KV bytes moved and switch time per plan
// (nothing for a single plan that never switched).
void print_plan_stats(const DistEngine& e);
// The same as JSON: {"policy": ..., "plans": [{"name", "steps", "tokens", "switches",
// "kv_bytes_moved", "switch_ms"}, ...]}.
nlohmann::json plan_stats_json(const DistEngine& e);

}  // namespace loom::cli
