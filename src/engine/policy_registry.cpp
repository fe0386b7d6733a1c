#include "engine/policy_registry.h"

#include "core/error.h"
#include "engine/policies/policies.h"

namespace loom {

namespace {

struct Registry {
  policies::Specs owned;
  std::vector<const PolicySpec*> specs;
  Registry() {
    policies::add_fixed(owned);
    policies::add_shift(owned);
    policies::add_cycle(owned);
    policies::add_sidp(owned);
    policies::add_seesaw(owned);
    policies::add_nitsum(owned);
    for (const auto& s : owned) specs.push_back(s.get());
  }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

// The layout policies of one engine, as the list of choices in an error line.
std::string engine_choices() {
  std::string s;
  for (const PolicySpec* p : policy_specs())
    if (!p->traits().runs_pool) s += (s.empty() ? "" : ", ") + p->syntax();
  return s;
}

}  // namespace

const char* threshold_unit(PolicyThreshold t) {
  switch (t) {
    case PolicyThreshold::Tokens: return "tokens";
    case PolicyThreshold::SequencesPerReplica: return "sequences per replica";
    case PolicyThreshold::None: break;
  }
  return "";
}

const std::vector<const PolicySpec*>& policy_specs() { return registry().specs; }

const PolicySpec* find_policy(const std::string& name) {
  for (const PolicySpec* p : policy_specs())
    if (p->matches(name)) return p;
  return nullptr;
}

const PolicySpec& policy_spec(const std::string& name) {
  const PolicySpec* p = find_policy(name);
  if (p == nullptr) fail("unknown --policy '", name, "' (", engine_choices(), ")");
  return *p;
}

PolicyTraits policy_traits(const std::string& name) { return policy_spec(name).traits(); }

bool is_default_policy(const std::string& name) { return name == kDefaultPolicy; }

bool policy_runs_pool(const std::string& name) {
  const PolicySpec* p = find_policy(name);
  return p != nullptr && p->traits().runs_pool;
}

PolicyThreshold policy_threshold(const std::string& name) {
  const PolicySpec* p = find_policy(name);
  return p == nullptr ? PolicyThreshold::None : p->traits().threshold;
}

std::string policy_help(bool with_pool) {
  std::string s = "Layout policy: ", family;
  for (const PolicySpec* p : policy_specs()) {
    const std::string h = p->help();
    if (h.empty() || (p->traits().runs_pool && !with_pool)) continue;
    if (!family.empty()) s += p->family() == family ? ", " : "; ";
    s += h;
    family = p->family();
  }
  return s;
}

// ---- policy.h, by name ----

void check_policy_name(const std::string& name) {
  const PolicySpec& p = policy_spec(name);
  if (p.traits().runs_pool)
    fail("--policy ", name, " runs a pool of re-planned instances: loom serve only (the layout policies of one "
         "engine: ", engine_choices(), ")");
}

std::vector<Plan> policy_plans(const std::string& name, std::vector<Plan> plans) {
  check_policy_name(name);
  return policy_spec(name).plans(name, std::move(plans));
}

void check_policy_setup(const std::string& name, const PlanSet& set, const PolicyEnv& env) {
  check_policy_name(name);
  policy_spec(name).check_setup(name, set, env);
}

PolicyParams resolve_policy_params(const std::string& name, const PlanSet& set, const PolicyInputs& in) {
  check_policy_name(name);
  const PolicySpec& spec = policy_spec(name);
  PolicyParams p = spec.params(name, set, in);
  p.threshold_unit = threshold_unit(spec.traits().threshold);
  return p;
}

std::unique_ptr<LayoutPolicy> make_layout_policy(const std::string& name, const PlanSet& set, int64_t threshold) {
  PolicyParams p;
  p.threshold = threshold;
  return make_layout_policy(name, set, p);
}

std::unique_ptr<LayoutPolicy> make_layout_policy(const std::string& name, const PlanSet& set, const PolicyParams& params) {
  check_policy_name(name);
  return policy_spec(name).make(name, set, params);
}

bool policy_lazy_weights(const std::string& name) {
  const PolicySpec* p = find_policy(name);
  return p != nullptr && p->traits().lazy_weights;
}

}  // namespace loom
