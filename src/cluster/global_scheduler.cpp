#include "cluster/global_scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace loom::cluster {

const char* queue_name(QueueKind q) {
  switch (q) {
    case QueueKind::Feasible: return "feasible";
    case QueueKind::Infeasible: return "infeasible";
    case QueueKind::Background: return "background";
  }
  return "?";
}

GlobalScheduler::GlobalScheduler(SloTiers tiers, ProfileTable table, int num_ranks, SchedulerOptions options)
    : tiers_(std::move(tiers)), table_(std::move(table)), num_ranks_(num_ranks), opt_(std::move(options)) {
  if (!(opt_.window_s > 0)) fail("control window ", opt_.window_s, " s must be positive");
  if (table_.num_tiers() != int(tiers_.size()))
    fail("profile table has ", table_.num_tiers(), " tiers, the cluster ", tiers_.size());
  arrivals_.assign(tiers_.size(), 0);
  rates_.assign(tiers_.size(), 0.0);
}

void GlobalScheduler::derive_limits(InstanceState* s) const {
  const InstanceSpec& x = s->spec;
  if (!opt_.slo_aware || x.tier < 0 || tiers_[size_t(x.tier)].background) {
    s->inflight_limit = opt_.agnostic_batch;
    s->batch_cap = opt_.agnostic_batch;
    return;
  }
  const SloTier& t = tiers_[size_t(x.tier)];
  const StageProfile& p = table_.at(x.tier, x.tp);
  switch (x.role) {
    case Role::Prefill:
      s->inflight_limit = std::max(1, int(std::floor(p.prefill_rps * t.ttft_s)));
      s->batch_cap = std::max(1, p.prefill_batch);
      break;
    case Role::Decode:
      s->inflight_limit = std::max(1, p.decode_batch);
      s->batch_cap = std::max(1, p.decode_batch);
      break;
    case Role::Both:
      s->inflight_limit = std::max(1, p.both_batch);
      s->batch_cap = std::max(1, p.both_batch);
      break;
  }
}

void GlobalScheduler::install(const ClusterPlan& plan) {
  std::vector<InstanceState> next;
  for (const auto& spec : plan.instances) {
    InstanceState s;
    s.spec = spec;
    s.generation = windows_;
    for (const auto& old : inst_)
      if (old.spec == spec) {
        s.outstanding = old.outstanding;
        s.feasible_outstanding = old.feasible_outstanding;
        s.generation = old.generation;
      }
    derive_limits(&s);
    next.push_back(s);
  }
  inst_ = std::move(next);
  plan_ = plan;
  rr_spill_ = rr_background_ = 0;
}

void GlobalScheduler::record_arrival(int tier) {
  LOOM_CHECK(tier >= 0 && size_t(tier) < arrivals_.size());
  ++arrivals_[size_t(tier)];
}

std::optional<ClusterPlan> GlobalScheduler::next_window(double window_s) {
  LOOM_CHECK(window_s > 0);
  for (size_t i = 0; i < rates_.size(); ++i) rates_[i] = double(arrivals_[i]) / window_s;
  std::fill(arrivals_.begin(), arrivals_.end(), 0);
  ++windows_;
  if (!opt_.dynamic && !inst_.empty()) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  ClusterPlan next = plan_cluster(table_, tiers_, rates_, num_ranks_, opt_.planner, plan_.instances);
  last_plan_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!inst_.empty() && plan_.capacity_rps.size() == rates_.size()) {
    double keep = 0, take = 0;
    for (size_t i = 0; i < rates_.size(); ++i) {
      keep += std::min(plan_.capacity_rps[i], rates_[i]);
      take += next.provisioned_rps[i];
    }
    if (take <= keep * (1 + opt_.switch_gain)) {
      plan_.demand_rps = rates_;
      for (size_t i = 0; i < rates_.size(); ++i) plan_.provisioned_rps[i] = std::min(plan_.capacity_rps[i], rates_[i]);
      return std::nullopt;
    }
  }
  return next;
}

std::vector<int> GlobalScheduler::end_window(double window_s) {
  std::optional<ClusterPlan> next = next_window(window_s);
  if (!next) return {};
  std::vector<int> moved = ranks_regrouped(plan_.instances, next->instances, num_ranks_);
  install(*next);
  return moved;
}

Dispatch GlobalScheduler::route(int tier) {
  LOOM_CHECK(!inst_.empty(), "route before a plan is installed");
  LOOM_CHECK(tier >= 0 && size_t(tier) < tiers_.size());
  const int n = int(inst_.size());
  auto load = [&](int i) { return double(inst_[size_t(i)].outstanding) / inst_[size_t(i)].inflight_limit; };
  if (!opt_.slo_aware) {
    int best = -1;
    for (int i = 0; i < n; ++i)
      if (prefill_capable(i) && (best < 0 || load(i) < load(best))) best = i;
    LOOM_CHECK(best >= 0, "no prefill-capable instance");
    ++inst_[size_t(best)].outstanding;
    ++inst_[size_t(best)].feasible_outstanding;
    return {best, QueueKind::Feasible};
  }
  if (tiers_[size_t(tier)].background) {
    // Round-robin over the instances taking background work: spares / the background tier's,
    // else every prefill-capable instance (whose batches fill background work last).
    std::vector<int> takers;
    for (int i = 0; i < n; ++i)
      if (prefill_capable(i) && (inst_[size_t(i)].spec.tier < 0 || inst_[size_t(i)].spec.tier == tier))
        takers.push_back(i);
    if (takers.empty())
      for (int i = 0; i < n; ++i)
        if (prefill_capable(i)) takers.push_back(i);
    const int pick = takers[rr_background_++ % takers.size()];
    ++inst_[size_t(pick)].outstanding;
    return {pick, QueueKind::Background};
  }
  int best = -1;
  for (int i = 0; i < n; ++i) {
    const auto& s = inst_[size_t(i)];
    if (s.spec.tier != tier || !prefill_capable(i) || s.feasible_outstanding + 1 > s.inflight_limit) continue;
    if (best < 0 || load(i) < load(best)) best = i;
  }
  if (best >= 0) {
    ++inst_[size_t(best)].outstanding;
    ++inst_[size_t(best)].feasible_outstanding;
    return {best, QueueKind::Feasible};
  }
  std::vector<int> any;
  for (int i = 0; i < n; ++i)
    if (prefill_capable(i)) any.push_back(i);
  LOOM_CHECK(!any.empty(), "no prefill-capable instance");
  const int pick = any[rr_spill_++ % any.size()];
  ++inst_[size_t(pick)].outstanding;
  return {pick, QueueKind::Infeasible};
}

int GlobalScheduler::route_decode(int tier, QueueKind queue) {
  const int n = int(inst_.size());
  auto load = [&](int i) { return double(inst_[size_t(i)].outstanding) / inst_[size_t(i)].inflight_limit; };
  int best = -1;
  for (int pass = 0; pass < 2 && best < 0; ++pass)
    for (int i = 0; i < n; ++i) {
      const auto& s = inst_[size_t(i)];
      if (s.spec.role != Role::Decode || (pass == 0 && s.spec.tier != tier)) continue;
      if (best < 0 || load(i) < load(best)) best = i;
    }
  if (best >= 0) {
    ++inst_[size_t(best)].outstanding;
    if (queue == QueueKind::Feasible) ++inst_[size_t(best)].feasible_outstanding;
  }
  return best;  // -1: no decode instance (colocated cluster): decode where it prefilled
}

void GlobalScheduler::assign(int instance, QueueKind queue) {
  auto& s = inst_.at(size_t(instance));
  ++s.outstanding;
  if (queue == QueueKind::Feasible) ++s.feasible_outstanding;
}

void GlobalScheduler::complete(int instance, QueueKind queue) {
  auto& s = inst_.at(size_t(instance));
  if (s.outstanding > 0) --s.outstanding;
  if (queue == QueueKind::Feasible && s.feasible_outstanding > 0) --s.feasible_outstanding;
}

std::vector<size_t> compose_batch(const std::vector<QueueKind>& running, int cap) {
  std::vector<size_t> out;
  for (int k = 0; k < 3; ++k)
    for (size_t i = 0; i < running.size() && int(out.size()) < cap; ++i)
      if (int(running[i]) == k) out.push_back(i);
  return out;
}

void LocalQueues::push(int64_t id, QueueKind q) { q_[int(q)].push_back(id); }

std::vector<int64_t> LocalQueues::admit(int running, int cap) {
  std::vector<int64_t> out;
  for (auto& q : q_)
    while (running + int(out.size()) < cap && !q.empty()) {
      out.push_back(q.front());
      q.pop_front();
    }
  return out;
}

int64_t LocalQueues::peek() const {
  for (const auto& q : q_)
    if (!q.empty()) return q.front();
  return -1;
}

int64_t LocalQueues::pop() {
  for (auto& q : q_)
    if (!q.empty()) {
      const int64_t id = q.front();
      q.pop_front();
      return id;
    }
  return -1;
}

std::vector<std::pair<int64_t, QueueKind>> LocalQueues::drain() {
  std::vector<std::pair<int64_t, QueueKind>> out;
  for (int k = 0; k < 3; ++k) {
    for (auto id : q_[k]) out.push_back({id, QueueKind(k)});
    q_[k].clear();
  }
  return out;
}

}  // namespace loom::cluster
