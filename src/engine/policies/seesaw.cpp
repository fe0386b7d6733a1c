// Seesaw's phase policies (../shared/papers/004; engine/seesaw.h, where the phase machine lives):
// prefill steps under the first plan (c_p), decode steps under the second (c_d), the same DP in
// both, the KV of prefilled sequences parked in a CPU tier between the phases:
//   seesaw          transition-minimizing: prefill until the tier is full or nothing waits, then
//                   decode until the tier is empty (§4.2)
//   prefill-first   vLLM's phase order; decode-first   FasterTransformer's
// The ranks re-shard their weights lazily at the rare phase switches (PolicyTraits::lazy_weights).
#include "core/error.h"
#include "engine/policies/policies.h"
#include "engine/seesaw.h"
#include "kv/kv_tier.h"

namespace loom::policies {

namespace {

class SeesawSpec final : public PolicySpec {
 public:
  SeesawSpec(const char* name, PhaseMode mode, const char* help) : name_(name), mode_(mode), help_(help) {}
  std::string syntax() const override { return name_; }
  std::string family() const override { return "seesaw"; }
  std::string help() const override { return help_; }
  bool matches(const std::string& name) const override { return name == name_; }
  PolicyTraits traits() const override {
    PolicyTraits t;
    t.phases = mode_;
    t.lazy_weights = true;
    return t;
  }
  std::vector<Plan> plans(const std::string& name, std::vector<Plan> plans) const override {
    check_seesaw_plans(name, plans);
    return plans;
  }
  // The CPU tier must hold one sequence of max_model_len.
  void check_setup(const std::string& name, const PlanSet&, const PolicyEnv& env) const override {
    LOOM_CHECK(env.model != nullptr, "check_policy_setup: no model");
    seesaw_tier_tokens(name, env.cpu_kv_bytes,
                       tier_bytes_per_token(env.model->n_layers, env.model->n_kv_heads, env.model->head_dim),
                       env.max_model_len);
  }
  std::unique_ptr<LayoutPolicy> make(const std::string& name, const PlanSet&, const PolicyParams&) const override {
    return std::make_unique<SeesawPolicy>(name);
  }

 private:
  std::string name_;
  PhaseMode mode_;
  std::string help_;
};

}  // namespace

void add_seesaw(Specs& out) {
  out.push_back(std::make_unique<SeesawSpec>(
      "seesaw", PhaseMode::Seesaw,
      "seesaw (prefill under the first plan, decode under the second, KV parked in the CPU tier between them, phases "
      "changed when the tier is full or empty)"));
  out.push_back(std::make_unique<SeesawSpec>("prefill-first", PhaseMode::PrefillFirst, "prefill-first"));
  out.push_back(std::make_unique<SeesawSpec>(
      "decode-first", PhaseMode::DecodeFirst,
      "decode-first (the same plans in vLLM's or FasterTransformer's phase order)"));
}

}  // namespace loom::policies
