// nitsum (Nitsum, ../shared/papers/002 §3.2-3.3; cluster/pool.h): not a layout policy of one engine but
// `loom serve`'s pool of instances, re-planned every control window. The registry knows the name
// so that serve starts the pool for it and the engine, generate, bench and validate-engine refuse
// it in one line (check_policy_name); it has no plans, parameters or factory of its own here.
#include "core/error.h"
#include "engine/policies/policies.h"

namespace loom::policies {

namespace {

class NitsumSpec final : public PolicySpec {
 public:
  std::string syntax() const override { return "nitsum"; }
  std::string help() const override {
    return "loom serve only: nitsum (the ranks as a pool of instances, re-planned every --window)";
  }
  bool matches(const std::string& name) const override { return name == "nitsum"; }
  PolicyTraits traits() const override {
    PolicyTraits t;
    t.runs_pool = true;
    return t;
  }
  std::unique_ptr<LayoutPolicy> make(const std::string& name, const PlanSet&, const PolicyParams&) const override {
    fail("--policy ", name, " runs a pool of instances (loom serve), not a layout policy of one engine");
  }
};

}  // namespace

void add_nitsum(Specs& out) { out.push_back(std::make_unique<NitsumSpec>()); }

}  // namespace loom::policies
