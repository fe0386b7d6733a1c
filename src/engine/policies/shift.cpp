// shift: Shift Parallelism (Shift 3.3, Algorithm 2) over an sp x tp base plan and its shift
// config (TP over the same ranks, same KV placement): the base for a step of more scheduled
// tokens than the threshold, the shift config otherwise. The threshold's default comes from the
// cost model of the machine (sim/shift_threshold.h, wired in by the caller: PolicyInputs).
#include "core/error.h"
#include "engine/policies/policies.h"
#include "engine/step.h"

namespace loom {

std::pair<int, int> shift_pair(const PlanSet& set) {
  for (int b = 0; b < set.size(); ++b) {
    const Plan& p = set.plan(b);
    if (p.sp <= 1 || p.shift) continue;
    const int s = set.id_of(p.shift_config());
    if (s >= 0) return {b, s};
  }
  fail("the shift policy needs an sp x tp base and its shift config in the plan set; got ", set.to_string());
}

namespace policies {

namespace {

class ShiftPolicy final : public LayoutPolicy {
 public:
  ShiftPolicy(int base, int shift, int64_t threshold) : base_(base), shift_(shift), threshold_(threshold) {
    if (threshold < 0) fail("shift threshold must be >= 0 tokens, got ", threshold);
  }
  int choose(const StepBatch& b) override { return shift_runs_base(b.num_tokens, threshold_) ? base_ : shift_; }
  std::string describe() const override { return cat("shift(threshold=", threshold_, ")"); }

 private:
  int base_, shift_;
  int64_t threshold_;
};

class ShiftSpec final : public PolicySpec {
 public:
  std::string syntax() const override { return "shift"; }
  std::string help() const override {
    return "shift (Shift Parallelism over an sp x tp plan: the base above --shift-threshold tokens per step, full "
           "TP below, same KV)";
  }
  bool matches(const std::string& name) const override { return name == "shift"; }
  PolicyTraits traits() const override {
    PolicyTraits t;
    t.threshold = PolicyThreshold::Tokens;
    return t;
  }
  std::vector<Plan> plans(const std::string&, std::vector<Plan> plans) const override {
    plans = with_shift_config(std::move(plans));
    if (plans.size() != 2 || plans[0].sp <= 1 || plans[0].shift || !(plans[1] == plans[0].shift_config()))
      fail("the shift policy needs an sp x tp base plan (sp > 1), e.g. --plan sp=2,tp=2 (its shift config is added); got ",
           plans_text(plans));
    return plans;
  }
  PolicyParams params(const std::string&, const PlanSet& set, const PolicyInputs& in) const override {
    PolicyParams p;
    p.threshold = in.shift_threshold;
    if (p.threshold < 0) {
      if (!in.default_shift_threshold) fail("--policy shift needs --shift-threshold (no default threshold given)");
      p.threshold = in.default_shift_threshold(set.plan(shift_pair(set).first));
    }
    return p;
  }
  std::unique_ptr<LayoutPolicy> make(const std::string&, const PlanSet& set, const PolicyParams& params) const override {
    const auto [base, shift] = shift_pair(set);
    return std::make_unique<ShiftPolicy>(base, shift, params.threshold);
  }
};

}  // namespace

void add_shift(Specs& out) { out.push_back(std::make_unique<ShiftSpec>()); }

}  // namespace policies
}  // namespace loom
