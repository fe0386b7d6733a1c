#include "engine/policy.h"

#include "core/error.h"
#include "engine/seesaw.h"
#include "engine/step.h"

namespace loom {

namespace {

bool parse_u64(const std::string& v, uint64_t* out) {
  size_t used = 0;
  try {
    *out = std::stoull(v, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == v.size() && !v.empty() && v[0] != '-';
}

class FixedPolicy final : public LayoutPolicy {
 public:
  int choose(const StepBatch&) override { return 0; }
  std::string describe() const override { return "fixed"; }
};

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

class CyclePolicy final : public LayoutPolicy {
 public:
  CyclePolicy(int n_plans, int64_t every, std::string name) : n_(n_plans), every_(every), name_(std::move(name)) {}
  int choose(const StepBatch&) override { return int((steps_++ / every_) % n_); }
  std::string describe() const override { return name_; }

 private:
  int n_;
  int64_t every_;
  std::string name_;
  int64_t steps_ = 0;
};

class RandomPolicy final : public LayoutPolicy {
 public:
  RandomPolicy(int n_plans, uint64_t seed) : n_(n_plans), seed_(seed), rng_(seed) {}
  int choose(const StepBatch&) override { return int(rng_.below(uint64_t(n_))); }
  std::string describe() const override { return cat("random:", seed_); }

 private:
  int n_;
  uint64_t seed_;
  Rng rng_;
};

const char* kChoices = "fixed, shift, cycle:N, alternate, random:SEED, seesaw, prefill-first, decode-first";

}  // namespace

void check_policy_name(const std::string& name) {
  if (name == "fixed" || name == "shift" || name == "alternate" || is_seesaw_policy(name)) return;
  uint64_t v = 0;
  if (name.rfind("cycle:", 0) == 0) {
    if (!parse_u64(name.substr(6), &v) || v < 1)
      fail("--policy ", name, ": the cycle length must be a whole number of steps >= 1 (e.g. cycle:4)");
    return;
  }
  if (name.rfind("random:", 0) == 0) {
    if (!parse_u64(name.substr(7), &v)) fail("--policy ", name, ": '", name.substr(7), "' is not a non-negative integer seed");
    return;
  }
  fail("unknown --policy '", name, "' (", kChoices, ")");
}

std::vector<Plan> policy_plans(const std::string& name, std::vector<Plan> plans) {
  check_policy_name(name);
  const bool pairs = name == "shift" || name == "alternate" || name.rfind("random:", 0) == 0;
  if (pairs && plans.size() == 1 && plans[0].sp > 1 && !plans[0].shift) plans.push_back(plans[0].shift_config());
  if (name == "shift") {
    if (plans.size() != 2 || plans[0].sp <= 1 || plans[0].shift || !(plans[1] == plans[0].shift_config()))
      fail("the shift policy needs an sp x tp base plan (sp > 1), e.g. --plan sp=2,tp=2 (its shift config is added); got ",
           plans.empty() ? std::string("no plan") : plans[0].to_string(), plans.size() > 1 ? " and more plans" : "");
  }
  if (is_seesaw_policy(name)) check_seesaw_plans(name, plans);
  return plans;
}

std::pair<int, int> shift_pair(const PlanSet& set) {
  for (int b = 0; b < set.size(); ++b) {
    const Plan& p = set.plan(b);
    if (p.sp <= 1 || p.shift) continue;
    const int s = set.id_of(p.shift_config());
    if (s >= 0) return {b, s};
  }
  fail("the shift policy needs an sp x tp base and its shift config in the plan set; got ", set.to_string());
}

std::unique_ptr<LayoutPolicy> make_layout_policy(const std::string& name, const PlanSet& set, int64_t threshold) {
  check_policy_name(name);
  if (name == "fixed") return std::make_unique<FixedPolicy>();
  if (name == "shift") {
    const auto [base, shift] = shift_pair(set);
    return std::make_unique<ShiftPolicy>(base, shift, threshold);
  }
  if (name == "alternate") return std::make_unique<CyclePolicy>(set.size(), 1, "alternate");
  if (is_seesaw_policy(name)) return std::make_unique<SeesawPolicy>(name);
  uint64_t v = 0;
  if (name.rfind("cycle:", 0) == 0) {
    parse_u64(name.substr(6), &v);
    return std::make_unique<CyclePolicy>(set.size(), int64_t(v), name);
  }
  parse_u64(name.substr(7), &v);
  return std::make_unique<RandomPolicy>(set.size(), v);
}

}  // namespace loom
