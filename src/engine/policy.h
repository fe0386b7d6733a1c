// Layout policies: which plan of the engine's PlanSet runs each step (ARCHITECTURE.md "layout
// policies"). One implementation shared by the engine (the loop's on_batch sets StepBatch::plan_id)
// and the simulator, so a policy tested in simulation is the policy that runs in production.
// A policy looks only at the scheduled batch and returns a plan id; it is not thread-safe (one per
// scheduler).
//
// Names (--policy):
//   fixed        the first plan every step
//   shift        Shift 3.3 Algorithm 2 over an sp x tp base and its shift config: the base for a
//                step of more scheduled tokens than the threshold, the shift config otherwise
//   cycle:N      the next plan of the set every N steps (tests and demonstrations)
//   alternate    cycle:1
//   random:SEED  a plan drawn per step from Rng(SEED) (reproducible; a test hook)
//   sidp         SiDP §4.3 over one plan dp=D,weights=owner (policy_plans adds its sidp=cas
//                twin): CaS once the effective batch per replica (the step's sequences / D) has
//                stayed below B_th (`threshold`) for kSidpWindow steps, WaS again once it has
//                stayed above (1 + kSidpHysteresis) * B_th as long; both plans share one KV
//                placement, so a switch moves nothing. The mode of every step is its plan's
//                (PlanStats per plan: steps in WaS, steps in CaS)
//   sidp:was, sidp:cas  the one mode, forced
//   seesaw, prefill-first, decode-first   Seesaw's phase plans (seesaw.h): prefill steps under
//                the first plan, decode steps under the second, phases scheduled by the Scheduler
// shift, alternate and random given a single sp x tp plan run it with its shift config
// (policy_plans adds it), as `--plan sp=2,tp=2 --policy shift` always has.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "parallel/plan_set.h"

namespace loom {

struct StepBatch;

inline constexpr int kSidpWindow = 4;            // steps (PAPERS-NOTES 1.4.4: W iterations)
inline constexpr double kSidpHysteresis = 0.5;   // h: back to WaS above (1 + h) * B_th

class LayoutPolicy {
 public:
  virtual ~LayoutPolicy() = default;
  virtual int choose(const StepBatch& batch) = 0;  // the plan id for this step
  virtual std::string describe() const = 0;        // "fixed", "shift(threshold=N)", "cycle:4", ...
};

// Shift 3.3, Algorithm 2: the base (SP x TP) config runs a step whose scheduled token count
// exceeds the threshold; the shift config (TP(SP*TP)) runs the others.
inline bool shift_runs_base(int64_t scheduled_tokens, int64_t threshold) { return scheduled_tokens > threshold; }

// Throws loom::Error, naming the value and the choices, for a policy name that is not one of the
// above (cycle:0 included). Cheap: call it before loading anything.
void check_policy_name(const std::string& name);

// The plans a policy runs: `plans` itself, plus the shift config of a single sp x tp plan for
// shift / alternate / random. Throws loom::Error for shift without an sp x tp base.
std::vector<Plan> policy_plans(const std::string& name, std::vector<Plan> plans);

// The policy `name` over `set`; `threshold` (tokens) is used by shift.
std::unique_ptr<LayoutPolicy> make_layout_policy(const std::string& name, const PlanSet& set, int64_t threshold);

// For `shift`: the ids of the base and shift configs in `set` (throws loom::Error when absent).
std::pair<int, int> shift_pair(const PlanSet& set);

}  // namespace loom
