// Layout policies: which plan runs each step (ARCHITECTURE.md: "layout policies (fixed, shift,
// ...)"). One implementation shared by the engine (EngineLoop::on_batch sets StepBatch::plan, the
// executors run that plan) and the simulator (src/sim prices the plan a policy picks), so a policy
// tested in simulation is the policy that runs in production.
//
// A policy looks only at the scheduled batch (token counts, sequences) and returns a plan in
// plan.h's string form, e.g. "sp=2,tp=2" or "shift:sp=2,tp=2". Policies are not thread-safe
// (one per scheduler).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/rng.h"
#include "parallel/plan.h"

namespace loom {

struct StepBatch;

class LayoutPolicy {
 public:
  virtual ~LayoutPolicy() = default;
  // The plan for this step (Plan::to_string form).
  virtual std::string choose(const StepBatch& batch) = 0;
  // For reports: "fixed", "shift(threshold=N)", ...
  virtual std::string describe() const = 0;
};

// Shift 3.3, Algorithm 2: the base (SP x TP) config runs a step whose scheduled token count
// exceeds the threshold; the shift config (TP(SP*TP)) runs the others.
inline bool shift_runs_base(int64_t scheduled_tokens, int64_t threshold) { return scheduled_tokens > threshold; }

// Always the same plan.
class FixedPolicy final : public LayoutPolicy {
 public:
  explicit FixedPolicy(const Plan& plan) : name_(plan.to_string()) {}
  std::string choose(const StepBatch&) override { return name_; }
  std::string describe() const override { return "fixed"; }

 private:
  std::string name_;
};

// Shift Algorithm 2 over `base` (sp > 1, not itself a shift config; throws loom::Error naming the
// plan otherwise); threshold >= 0 in tokens per step.
class ShiftPolicy final : public LayoutPolicy {
 public:
  ShiftPolicy(const Plan& base, int64_t threshold);
  std::string choose(const StepBatch& batch) override;
  std::string describe() const override;
  bool runs_base(int64_t scheduled_tokens) const { return shift_runs_base(scheduled_tokens, threshold_); }
  int64_t threshold() const { return threshold_; }
  const std::string& base_name() const { return base_name_; }
  const std::string& shift_name() const { return shift_name_; }

 private:
  int64_t threshold_;
  std::string base_name_, shift_name_;
};

// Test hook: forces interleavings of the base and shift configs regardless of the batch.
// "alternate" (base, shift, base, ... starting with base) or "random:SEED" (each step a fair
// coin from Rng(SEED), reproducible).
class ForcedShiftPolicy final : public LayoutPolicy {
 public:
  ForcedShiftPolicy(const Plan& base, bool alternate, uint64_t seed);
  std::string choose(const StepBatch& batch) override;
  std::string describe() const override;

 private:
  std::string base_name_, shift_name_;
  bool alternate_;
  uint64_t seed_;
  Rng rng_;
  int64_t steps_ = 0;
};

// "fixed" | "shift" | "alternate" | "random:SEED" over `plan`. For everything but "fixed" the
// plan must be an sp x tp base (sp > 1); `threshold` is used by "shift". Throws loom::Error naming
// the value and the choices.
std::unique_ptr<LayoutPolicy> make_layout_policy(const std::string& name, const Plan& plan, int64_t threshold);

// True when `name` (make_layout_policy's names) switches between a base and its shift config.
bool policy_switches(const std::string& name);

}  // namespace loom
