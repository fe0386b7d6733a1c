// fixed: the first plan of the set every step (the default --policy).
#include "core/error.h"
#include "engine/policies/policies.h"

namespace loom::policies {

namespace {

class FixedPolicy final : public LayoutPolicy {
 public:
  int choose(const StepBatch&) override { return 0; }
  std::string describe() const override { return kDefaultPolicy; }
};

class FixedSpec final : public PolicySpec {
 public:
  std::string syntax() const override { return kDefaultPolicy; }
  std::string help() const override { return cat(kDefaultPolicy, " (the first plan)"); }
  bool matches(const std::string& name) const override { return name == kDefaultPolicy; }
  std::unique_ptr<LayoutPolicy> make(const std::string&, const PlanSet&, const PolicyParams&) const override {
    return std::make_unique<FixedPolicy>();
  }
  // A SiDP WaS first plan: its replicas step on their own (fixed runs the first plan only).
  bool replicas_on_their_own(const PlanSet& set) const override {
    return sidp_set(set) && !set.plan(0).sidp_cas && set.plan(0).dp > 1;
  }
};

}  // namespace

void add_fixed(Specs& out) { out.push_back(std::make_unique<FixedSpec>()); }

// ---- shared by the specs (policies.h) ----

bool parse_u64(const std::string& v, uint64_t* out) {
  size_t used = 0;
  try {
    *out = std::stoull(v, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == v.size() && !v.empty() && v[0] != '-';
}

bool sidp_set(const PlanSet& set) {
  for (const Plan& p : set.plans())
    if (p.weights != WeightSource::FetchFromOwner || p.dp != set.plan(0).dp) return false;
  return true;
}

std::string plans_text(const std::vector<Plan>& plans) {
  return cat(plans.empty() ? std::string("no plan") : plans[0].to_string(), plans.size() > 1 ? " and more plans" : "");
}

std::vector<Plan> with_shift_config(std::vector<Plan> plans) {
  if (plans.size() == 1 && plans[0].sp > 1 && !plans[0].shift) plans.push_back(plans[0].shift_config());
  return plans;
}

}  // namespace loom::policies
