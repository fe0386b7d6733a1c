#include "engine/seesaw.h"

#include "core/error.h"
#include "engine/policy_registry.h"
#include "engine/step.h"
#include "kv/kv_tier.h"

namespace loom {

bool is_seesaw_policy(const std::string& name) { return seesaw_phase_mode(name) != PhaseMode::None; }

// The registry's trait (engine/policies/seesaw.cpp declares the three names and their modes).
PhaseMode seesaw_phase_mode(const std::string& name) {
  const PolicySpec* p = find_policy(name);
  return p == nullptr ? PhaseMode::None : p->traits().phases;
}

const char* phase_mode_name(PhaseMode m) {
  switch (m) {
    case PhaseMode::Seesaw: return "seesaw";
    case PhaseMode::PrefillFirst: return "prefill-first";
    case PhaseMode::DecodeFirst: return "decode-first";
    case PhaseMode::None: break;
  }
  return "none";
}

void check_seesaw_plans(const std::string& policy, const std::vector<Plan>& plans) {
  if (plans.size() != 2)
    fail("--policy ", policy, " needs two plans, the prefill plan then the decode plan (e.g. --plan pp=2 --plan tp=2); got ",
         plans.size());
  if (plans[0].dp != plans[1].dp)
    fail("--policy ", policy, ": the prefill plan ", plans[0].to_string(), " has dp=", plans[0].dp,
         ", the decode plan ", plans[1].to_string(), " dp=", plans[1].dp,
         "; Seesaw changes only TP and PP, the DP degree must be equal");
}

int64_t seesaw_tier_tokens(const std::string& policy, int64_t bytes, int64_t bytes_per_token, int max_model_len) {
  if (bytes <= 0) fail("--policy ", policy, " needs a CPU KV tier: give --cpu-kv-bytes");
  const int64_t tokens = bytes / bytes_per_token;
  if (tokens < max_model_len)
    fail("--cpu-kv-bytes ", bytes, " holds ", tokens, " tokens of KV (", bytes_per_token,
         " bytes per token), less than one sequence of max_model_len ", max_model_len, " tokens (",
         int64_t(max_model_len) * bytes_per_token, " bytes)");
  return tokens;
}

void SeesawPolicy::configure(SchedulerConfig& sc, const PolicyEnv& env) const {
  LOOM_CHECK(env.model != nullptr, "SeesawPolicy::configure: no model");
  sc.phases = mode();
  sc.tier_tokens = seesaw_tier_tokens(name_, env.cpu_kv_bytes,
                                      tier_bytes_per_token(env.model->n_layers, env.model->n_kv_heads, env.model->head_dim),
                                      env.max_model_len);
}

int SeesawPolicy::choose(const StepBatch& b) {
  // Onboarding (swap_in) happens in decode steps only: a step that only starts prefetches (nothing
  // decodes yet, asynchronous swaps) is a decode step too, so the KV comes in under c_d. A step
  // that only waits for copies keeps the plan.
  if (b.num_prefill_tokens > 0) {
    current_ = 0;
  } else if (b.num_decode_tokens > 0 || !b.swap_in.empty()) {
    current_ = 1;
  }
  return current_;
}

}  // namespace loom
