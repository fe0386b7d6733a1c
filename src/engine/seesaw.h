// Seesaw (../shared/papers/004, issue 13): prefill under one plan (c_p, the first of the set),
// decode under another (c_d, the second), the same DP in both (§4.1, W5: "only TP and PP change;
// DP is fixed"), with the KV of prefilled sequences parked in a CPU tier (kv/kv_tier.h) and the
// phases scheduled by the shared Scheduler (seesaw_tier.h PhaseMode, §4.2):
//   seesaw         transition-minimizing: prefill until the tier is full or nothing waits, decode
//                  (onboarding from the tier) until the tier is empty, repeat;
//   prefill-first  prefill-prioritizing (vLLM / Orca): back to prefill as soon as one fits;
//   decode-first   decode-prioritizing (FasterTransformer): back to prefill once nothing runs.
// The layout policy is the phase's plan: a step with prefill tokens runs c_p, a decode step (or
// one that starts swap-ins) c_d (the Scheduler never mixes them under these modes). A transition is
// a plan switch that moves no KV (4.2: "prefill again, with running sequences resident";
// seesaw_tier.h "Resident sequences"). A sequence decoding when the scheduler turns to prefill keeps
// its pages in c_d's placement in every rank's store: the c_p steps do not step it (prefill steps
// hold no decode), their prefills write c_p's cells of other sequences beside it and leave for the
// tier under c_p, and it decodes again under c_d with the same pages. (Until issue 13's residency
// change each transition migrated every running sequence c_d -> c_p and back, two all-to-all
// migrations of its whole KV per cycle, though no c_p step read it.) The rank re-shards its
// weights lazily (RankEngineOptions::lazy_weights, on for these policies: a `weights=resident` plan's
// copy is built at the switch into it from the mapped model, sharing what the rank already holds
// identically, and the old plan's is freed; `weights=full`: views of the mapped model, nothing built).
// The tier's swaps are asynchronous (SchedulerConfig::async_swaps, kv_tier.h TierSwaps, §5.2): the
// swap-out of a prefilled sequence overlaps the next prefill steps, a prefetcher thread per rank
// swaps sequences in for decode, and the scheduler decodes a sequence once every rank reported its
// swap-in complete.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/policy.h"
#include "engine/scheduler.h"

namespace loom {

// Whether `name` is one of the three policies above.
bool is_seesaw_policy(const std::string& name);
// Their scheduling mode (None for any other name).
PhaseMode seesaw_phase_mode(const std::string& name);
const char* phase_mode_name(PhaseMode m);

// Throws loom::Error (one line) unless `plans` are exactly two (c_p, c_d) of equal DP.
void check_seesaw_plans(const std::string& policy, const std::vector<Plan>& plans);

// Tokens of the whole model's KV a tier of `bytes` holds; throws loom::Error (one line naming
// the sizes) when it holds less than one sequence of max_model_len tokens, or none was given.
int64_t seesaw_tier_tokens(const std::string& policy, int64_t bytes, int64_t bytes_per_token, int max_model_len);

class SeesawPolicy final : public LayoutPolicy {
 public:
  explicit SeesawPolicy(std::string name) : name_(std::move(name)) {}
  int choose(const StepBatch& batch) override;
  std::string describe() const override { return name_; }
  // Phased steps (§4.2) and the CPU tier's tokens (throws when the tier holds no sequence).
  void configure(SchedulerConfig& sc, const PolicyEnv& env) const override;
  PhaseMode mode() const { return seesaw_phase_mode(name_); }

 private:
  std::string name_;
  int current_ = 0;
};

}  // namespace loom
