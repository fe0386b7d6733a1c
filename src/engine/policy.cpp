#include "engine/policy.h"

#include "core/error.h"
#include "engine/step.h"

namespace loom {

namespace {

void check_base(const Plan& base, const char* who) {
  if (base.sp <= 1 || base.shift || base.helix())
    fail("the ", who, " policy needs an sp x tp base plan (sp > 1), e.g. --plan sp=2,tp=2; got ",
         base.to_string());
}

}  // namespace

ShiftPolicy::ShiftPolicy(const Plan& base, int64_t threshold) : threshold_(threshold) {
  check_base(base, "shift");
  if (threshold < 0) fail("shift threshold must be >= 0 tokens, got ", threshold);
  base_name_ = base.to_string();
  shift_name_ = base.shift_config().to_string();
}

std::string ShiftPolicy::choose(const StepBatch& batch) {
  return runs_base(batch.num_tokens) ? base_name_ : shift_name_;
}

std::string ShiftPolicy::describe() const { return cat("shift(threshold=", threshold_, ")"); }

ForcedShiftPolicy::ForcedShiftPolicy(const Plan& base, bool alternate, uint64_t seed)
    : alternate_(alternate), seed_(seed), rng_(seed) {
  check_base(base, alternate ? "alternate" : "random");
  base_name_ = base.to_string();
  shift_name_ = base.shift_config().to_string();
}

std::string ForcedShiftPolicy::choose(const StepBatch&) {
  bool base;
  if (alternate_) {
    base = steps_ % 2 == 0;
  } else {
    base = (rng_.next_u64() >> 40) & 1;
  }
  ++steps_;
  return base ? base_name_ : shift_name_;
}

std::string ForcedShiftPolicy::describe() const {
  return alternate_ ? std::string("alternate") : cat("random:", seed_);
}

std::unique_ptr<LayoutPolicy> make_layout_policy(const std::string& name, const Plan& plan, int64_t threshold) {
  if (name == "fixed") return std::make_unique<FixedPolicy>(plan);
  if (name == "shift") return std::make_unique<ShiftPolicy>(plan, threshold);
  if (name == "alternate") return std::make_unique<ForcedShiftPolicy>(plan, true, 0);
  if (name.rfind("random:", 0) == 0) {
    const std::string v = name.substr(7);
    size_t used = 0;
    uint64_t seed = 0;
    try {
      seed = std::stoull(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) fail("--policy ", name, ": '", v, "' is not a non-negative integer seed");
    return std::make_unique<ForcedShiftPolicy>(plan, false, seed);
  }
  fail("unknown --policy '", name, "' (fixed, shift; test hooks: alternate, random:SEED)");
}

bool policy_switches(const std::string& name) { return name != "fixed"; }

}  // namespace loom
