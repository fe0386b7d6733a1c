#include "parallel/plan_set.h"

#include <algorithm>

#include "core/error.h"

namespace loom {

void check_executable(const Plan& p) {
  // SiDP (issue 14) executes over DP replicas of one rank each (owner groups of TP ranks,
  // PAPERS-NOTES 1.4.7, are not executed).
  if (p.weights == WeightSource::FetchFromOwner && (p.tp > 1 || p.pp > 1 || p.sp > 1 || p.kvp > 1))
    fail("plan ", p.to_string(), ": weights=owner (SiDP) runs on DP replicas of one rank each; tp, pp, sp and kvp ",
         "must be 1 (e.g. dp=4,weights=owner)");
}

std::vector<Plan> PlanSet::parse(const std::vector<std::string>& texts) {
  if (texts.empty()) fail("no plan given (e.g. --plan tp=2)");
  std::vector<Plan> plans;
  for (const std::string& t : texts) {
    Plan p = Plan::parse(t);
    check_executable(p);
    if (!plans.empty() && p.size() != plans[0].size())
      fail("the plans of a set must use the same ranks: ", plans[0].to_string(), " runs on ", plans[0].size(),
           " ranks, ", p.to_string(), " on ", p.size());
    for (const Plan& q : plans)
      if (q == p) fail("plan ", p.to_string(), " is given twice");
    plans.push_back(std::move(p));
  }
  return plans;
}

PlanSet PlanSet::make(const std::vector<Plan>& plans, const ModelShape& shape) {
  if (plans.empty()) fail("no plan given (e.g. --plan tp=2)");
  PlanSet s;
  s.shape_ = shape;
  for (const Plan& p : plans) {
    validate(p, shape);
    s.plans_.push_back(p.normalized());
    s.names_.push_back(p.to_string());
    s.placements_.push_back(kv_placement(p, shape));
  }
  const size_t n = s.plans_.size();
  s.same_.assign(n, std::vector<char>(n, 0));
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b) s.same_[a][b] = s.placements_[a] == s.placements_[b];
  return s;
}

int PlanSet::id_of(const Plan& p) const {
  for (size_t i = 0; i < plans_.size(); ++i)
    if (plans_[i] == p) return int(i);
  return -1;
}

int PlanSet::max_dp() const {
  int d = 1;
  for (const Plan& p : plans_) d = std::max(d, p.dp);
  return d;
}

std::string PlanSet::to_string() const {
  std::string s;
  for (size_t i = 0; i < names_.size(); ++i) s += cat(i ? " | " : "", names_[i]);
  return s;
}

}  // namespace loom
