// The specs of engine/policies/*.cpp, one add_* per file (policy_registry.cpp lists them in the
// order of --policy's help), and what several of them share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/policy_registry.h"

namespace loom::policies {

using Specs = std::vector<std::unique_ptr<PolicySpec>>;

void add_fixed(Specs& out);   // fixed
void add_shift(Specs& out);   // shift
void add_cycle(Specs& out);   // cycle:N, alternate, random:SEED
void add_sidp(Specs& out);    // sidp, sidp:was, sidp:cas
void add_seesaw(Specs& out);  // seesaw, prefill-first, decode-first
void add_nitsum(Specs& out);  // nitsum (loom serve's pool)

// A whole non-negative decimal number (no sign, no trailing characters).
bool parse_u64(const std::string& v, uint64_t* out);

// Whether every plan of `set` is SiDP (weights=owner) with one DP degree, the first's: the set the
// replicas may step on their own (sidp_replicas.h), under a policy that keeps a WaS plan.
bool sidp_set(const PlanSet& set);

// "PLAN" or "PLAN and more plans", "no plan": a plan list in an error line.
std::string plans_text(const std::vector<Plan>& plans);

// Shift's plans (Shift, alternate and random over a single sp x tp plan run it with its shift
// config, as `--plan sp=2,tp=2 --policy shift` always has).
std::vector<Plan> with_shift_config(std::vector<Plan> plans);

}  // namespace loom::policies
