// Layout policies: which plan of the engine's PlanSet runs each step (ARCHITECTURE.md "layout
// policies"). One implementation shared by the engine (the loop's plan control, PlanControl in
// plan_executor.h, sets StepBatch::plan_id) and the simulator, so a policy tested in simulation is
// the policy that runs in production.
// A policy looks only at the scheduled batch and returns a plan id; it is not thread-safe (one per
// scheduler).
//
// The policies themselves, by name (--policy), are in the registry (policy_registry.h): one file
// per policy in engine/policies/ with its plans, checks, parameters, factory and traits:
//   fixed        the first plan every step (policies/fixed.cpp)
//   shift        Shift 3.3 Algorithm 2 over an sp x tp base and its shift config (policies/shift.cpp)
//   cycle:N, alternate, random:SEED   switches that ignore the batch (policies/cycle.cpp)
//   sidp, sidp:was, sidp:cas          SiDP §4.3's WaS/CaS switch, or one mode (policies/sidp.cpp)
//   seesaw, prefill-first, decode-first   Seesaw's phase plans (policies/seesaw.cpp, seesaw.h)
//   nitsum       loom serve's pool of instances, not a policy of one engine (policies/nitsum.cpp)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/config.h"
#include "parallel/plan_set.h"

namespace loom {

struct StepBatch;
struct SchedulerConfig;

// What a policy may read of the engine it runs in, at start-up (every rank, before anything is
// built) and when the scheduler is made.
struct PolicyEnv {
  const ModelConfig* model = nullptr;
  int max_model_len = 0;     // the engine's (EngineConfig::max_model_len, resolved)
  int64_t cpu_kv_bytes = 0;  // Seesaw's CPU KV tier per host (EngineConfig::cpu_kv_bytes)
};

// A policy's start-up inputs: the user's thresholds and the defaults for them (the CLI wires in
// src/sim's cost model of this machine; an empty function: no default).
struct PolicyInputs {
  int64_t shift_threshold = -1;  // tokens per step (--shift-threshold); < 0: the default
  int64_t sidp_threshold = -1;   // sequences per replica (--sidp-threshold); < 0: the default
  double sidp_window_s = 0;      // SiDP's decision window in seconds; 0: kSidpWindow observations
  std::function<int64_t(const Plan&)> default_shift_threshold;  // over the shift base plan
  std::function<int64_t(const Plan&)> default_sidp_threshold;   // over the SiDP (WaS) plan
};

// What a policy runs with, resolved once on world rank 0 (resolve_policy_params).
struct PolicyParams {
  int64_t threshold = -1;      // -1: the policy takes no threshold
  std::string threshold_unit;  // "tokens", "sequences per replica"
  double window_s = 0;         // sidp: the decision window in seconds (0: kSidpWindow observations)
};

inline constexpr int kSidpWindow = 4;            // observations (PAPERS-NOTES 1.4.4: W iterations) when no window in seconds
inline constexpr double kSidpHysteresis = 0.5;   // h: back to WaS above (1 + h) * B_th

class LayoutPolicy {
 public:
  virtual ~LayoutPolicy() = default;
  virtual int choose(const StepBatch& batch) = 0;  // the plan id for this step
  virtual std::string describe() const = 0;        // "fixed", "shift(threshold=N)", "cycle:4", ...
  // SiDP replicas stepping on their own (sidp_coordinator.h): the plan for the whole group from one
  // observation of its effective batch per replica (`prompt_chunks`: some replica's recent step
  // carried prompt chunks, so the observation does not count, as choose() skips such steps).
  // sidp: the same hysteresis state as choose(); the other policies: their first plan.
  virtual int choose_effective(double per_replica, bool prompt_chunks) {
    (void)per_replica;
    (void)prompt_chunks;
    return 0;
  }
  // The time now on the clock of the loop that runs the policy (seconds; simulated time in the
  // simulator, wall time in the engine), given before choose / choose_effective. Policies whose
  // decisions span a window of time read it (sidp with PolicyParams::window_s); the others ignore it.
  virtual void advance(double now_s) { (void)now_s; }
  // Shapes the scheduler the policy drives (Seesaw: phased steps and the CPU tier's tokens);
  // default: nothing. Throws loom::Error naming the value when `env` cannot serve the policy.
  virtual void configure(SchedulerConfig& sc, const PolicyEnv& env) const {
    (void)sc;
    (void)env;
  }
};

// Shift 3.3, Algorithm 2: the base (SP x TP) config runs a step whose scheduled token count
// exceeds the threshold; the shift config (TP(SP*TP)) runs the others.
inline bool shift_runs_base(int64_t scheduled_tokens, int64_t threshold) { return scheduled_tokens > threshold; }

// The registry's functions by name (policy_registry.cpp).
// Throws loom::Error, naming the value and the choices, for a policy name that is not a layout
// policy of one engine (cycle:0 and nitsum included). Cheap: call it before loading anything.
void check_policy_name(const std::string& name);

// The plans a policy runs: `plans` itself, plus the shift config of a single sp x tp plan for
// shift / alternate / random. Throws loom::Error for shift without an sp x tp base.
std::vector<Plan> policy_plans(const std::string& name, std::vector<Plan> plans);

// The policy `name` over `set`; `threshold` is used by shift (tokens) and sidp (sequences per
// replica).
std::unique_ptr<LayoutPolicy> make_layout_policy(const std::string& name, const PlanSet& set, int64_t threshold);
std::unique_ptr<LayoutPolicy> make_layout_policy(const std::string& name, const PlanSet& set, const PolicyParams& params);

// Start-up checks of the policy `name` against the engine, on every rank before any weight,
// group or KV store is built (Seesaw: the CPU tier must hold one sequence of max_model_len).
// Throws loom::Error, one line naming the value and the limit.
void check_policy_setup(const std::string& name, const PlanSet& set, const PolicyEnv& env);

// The parameters of the policy `name` over `set`: the user's threshold, else the default for the
// plan the policy thresholds (Shift's base, SiDP's WaS plan). Throws loom::Error naming the flag
// when the policy needs a threshold and neither is given.
PolicyParams resolve_policy_params(const std::string& name, const PlanSet& set, const PolicyInputs& in);

// Whether the ranks of policy `name` hold one plan's weight copy at a time and re-shard lazily at a
// switch (RankEngineOptions::lazy_weights): Seesaw's policies, whose switches are the rare phase
// transitions (the others switch per step and keep every plan's copy warm).
bool policy_lazy_weights(const std::string& name);

// For `shift`: the ids of the base and shift configs in `set` (throws loom::Error when absent).
std::pair<int, int> shift_pair(const PlanSet& set);

}  // namespace loom
