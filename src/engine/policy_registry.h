// The layout policies by name (--policy): one PolicySpec per policy, declared in its own file of
// engine/policies/ (fixed.cpp; shift.cpp; cycle.cpp: cycle:N, alternate, random:SEED; sidp.cpp:
// sidp, sidp:was, sidp:cas; seesaw.cpp: seesaw, prefill-first, decode-first; nitsum.cpp). A spec
// says which names it answers, the plans it accepts (and adds), its start-up checks, its
// parameters and their defaults, its factory and its traits. Everything that depends on a
// policy's name asks the registry; nothing else compares policy names.
//
// The free functions of policy.h (check_policy_name, policy_plans, check_policy_setup,
// resolve_policy_params, make_layout_policy, policy_lazy_weights) are the registry's, by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/policy.h"
#include "engine/scheduler.h"

namespace loom {

// The threshold a policy takes, and its unit (PolicyParams::threshold_unit).
enum class PolicyThreshold {
  None,
  Tokens,               // shift: scheduled tokens per step (--shift-threshold)
  SequencesPerReplica,  // sidp: B_th, active sequences per replica (--sidp-threshold)
};
const char* threshold_unit(PolicyThreshold t);  // "", "tokens", "sequences per replica"

struct PolicyTraits {
  PolicyThreshold threshold = PolicyThreshold::None;
  // The ranks hold one plan's weight copy at a time and re-shard lazily at a switch
  // (RankEngineOptions::lazy_weights): Seesaw's policies, whose switches are rare phase changes.
  bool lazy_weights = false;
  // Seesaw's phased scheduling (seesaw_tier.h PhaseMode; None: mixed steps).
  PhaseMode phases = PhaseMode::None;
  // Not a layout policy of one engine: `loom serve` runs a pool of re-planned instances
  // (cluster/pool.h, Nitsum). The engine, generate, bench and the simulator refuse it.
  bool runs_pool = false;
};

class PolicySpec {
 public:
  virtual ~PolicySpec() = default;
  // How the name is written in --policy and in the list of choices: "fixed", "cycle:N".
  virtual std::string syntax() const = 0;
  // The family in --policy's help: specs of one family are listed together ("sidp (...),
  // sidp:was, sidp:cas"); families are separated by "; ".
  virtual std::string family() const { return syntax(); }
  // This spec's part of --policy's help ("" for test hooks: not listed).
  virtual std::string help() const = 0;
  // Whether `name` is this policy. Throws loom::Error naming the value when it is this policy
  // with a bad argument (cycle:0, random:x).
  virtual bool matches(const std::string& name) const = 0;
  virtual PolicyTraits traits() const { return {}; }
  // The plans the policy runs given the user's `plans`: the plans themselves, or with what the
  // policy adds (Shift's shift config, SiDP's CaS twin). Throws loom::Error, one line naming the
  // plans, when the policy cannot run them.
  virtual std::vector<Plan> plans(const std::string& name, std::vector<Plan> plans) const { return plans; }
  // Start-up checks against the engine (every rank, before anything is built).
  virtual void check_setup(const std::string& name, const PlanSet& set, const PolicyEnv& env) const {
    (void)name, (void)set, (void)env;
  }
  // The parameters: the user's threshold, else the default (from the cost model) for the plan
  // the policy thresholds. Throws loom::Error naming the flag when neither is given.
  virtual PolicyParams params(const std::string& name, const PlanSet& set, const PolicyInputs& in) const {
    (void)name, (void)set, (void)in;
    return {};
  }
  virtual std::unique_ptr<LayoutPolicy> make(const std::string& name, const PlanSet& set,
                                             const PolicyParams& params) const = 0;
  // Whether the engine runs the SiDP replicas of `set` stepping on their own (sidp_replicas.h):
  // fixed over a WaS plan, sidp, sidp:was; every plan weights=owner with one DP degree.
  virtual bool replicas_on_their_own(const PlanSet& set) const {
    (void)set;
    return false;
  }
};

// Every policy, in the order of --policy's help and the list of choices.
const std::vector<const PolicySpec*>& policy_specs();
// The spec of `name`; nullptr when no policy has that name. Throws loom::Error for a bad argument
// of a known policy (cycle:0).
const PolicySpec* find_policy(const std::string& name);
// The spec of `name`, whatever kind of policy (Nitsum's pool included); throws loom::Error naming
// the value and the choices when there is none.
const PolicySpec& policy_spec(const std::string& name);
PolicyTraits policy_traits(const std::string& name);

// The default --policy (the first plan every step).
inline constexpr const char* kDefaultPolicy = "fixed";
bool is_default_policy(const std::string& name);
// Whether `name` is Nitsum's pool (PolicyTraits::runs_pool); false for an unknown name.
bool policy_runs_pool(const std::string& name);
// The threshold policy `name` takes (None for an unknown name).
PolicyThreshold policy_threshold(const std::string& name);

// --policy's help: "Layout policy: fixed (...); shift (...); ...", with loom serve's pool
// (nitsum) when `with_pool`.
std::string policy_help(bool with_pool = true);

}  // namespace loom
