// PlanSet: every plan a layout policy may choose for one group of ranks, as values, parsed once
// per process (ARCHITECTURE.md "plans cross the step path as small ids, decided once at set-up").
// A plan's id is its index; the first plan is the initial one. Which pairs of plans have equal KV
// placements (a switch between them moves nothing, Shift 3.3.1) is computed once, in make().
//
// What a set accepts (checked before any weight loads, each failure one line naming the values):
// at least one plan, every plan over the same number of ranks, no plan twice, and only what the
// engine executes today (see executable()).
#pragma once

#include <string>
#include <vector>

#include "parallel/kv_placement.h"
#include "parallel/plan.h"

namespace loom {

class PlanSet {
 public:
  PlanSet() = default;

  // Parses each text (Plan::parse) and checks the set (sizes agree, no duplicates, executable).
  // No model is needed: call it before loading one.
  static std::vector<Plan> parse(const std::vector<std::string>& texts);
  // Validates every plan against the model (validate()) and computes the placement pairs.
  static PlanSet make(const std::vector<Plan>& plans, const ModelShape& shape);

  int size() const { return int(plans_.size()); }
  int n_ranks() const { return plans_.empty() ? 0 : plans_[0].size(); }
  const Plan& plan(int id) const { return plans_.at(size_t(id)); }
  const std::vector<Plan>& plans() const { return plans_; }
  const std::string& name(int id) const { return names_.at(size_t(id)); }
  int id_of(const Plan& p) const;  // -1 when absent
  const KvPlacement& placement(int id) const { return placements_.at(size_t(id)); }
  bool same_placement(int a, int b) const { return same_[size_t(a)][size_t(b)] != 0; }
  int max_dp() const;
  const ModelShape& shape() const { return shape_; }
  // "tp=4 | tp=2,dp=2 | dp=4"
  std::string to_string() const;

 private:
  std::vector<Plan> plans_;
  std::vector<std::string> names_;
  std::vector<KvPlacement> placements_;
  std::vector<std::vector<char>> same_;
  ModelShape shape_;
};

// Throws loom::Error for a plan the engine parses but does not execute, naming the key (SiDP's
// weights=owner combined with tp, pp, sp or kvp > 1). Everything else it executes.
void check_executable(const Plan& plan);

}  // namespace loom
