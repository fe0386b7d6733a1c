// Nitsum's global and local request scheduling (Nitsum 3.3.2; paper file 002), as pure logic the
// engine and the simulator (src/sim/exp_nitsum.cpp) both drive:
//  - every control window (default 1 s) reconfigure(): each tier's arrival rate over the past
//    window, plan_cluster (planner.h), placement on aligned groups keeping surviving groups;
//  - route(): requests in FCFS order; a background request goes to the background queue of the
//    instances that take background work, round-robin; any other is FEASIBLE when a prefill
//    instance of its tier has SLO-compliant bandwidth left (its in-flight limit minus the feasible
//    requests assigned and not finished: spilled best-effort work does not use up a tier's SLO
//    bandwidth), and goes to the least-loaded such instance; otherwise it is
//    INFEASIBLE and spills round-robin to any prefill-capable instance of the pool;
//  - route_decode(): the P/D hand-off, the least-loaded decode instance of the tier (any decode
//    instance when the tier has none left);
//  - complete(): the local scheduler's completion notice, freeing that bandwidth;
//  - LocalQueues: per instance the feasible, infeasible (best-effort) and background queues and
//    iteration-level batch formation capped at the instance's per-tier batch limit (B_P / B_D),
//    feasible requests first.
// In-flight limit of an instance (the paper's "maximum throughput" minus assigned requests, in
// requests): prefill P_max * TTFT (Little's law: what can be in the prefill stage and still meet
// TTFT), decode B_D, colocated the both_batch; at least 1. SloAware = false is the SLO-agnostic
// baseline: least-loaded dispatch over every prefill-capable instance, everything feasible, batch
// cap `agnostic_batch`.
// Not thread-safe: one owner (the engine's front thread, or the simulator).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "cluster/planner.h"

namespace loom::cluster {

enum class QueueKind { Feasible, Infeasible, Background };
const char* queue_name(QueueKind q);

struct Dispatch {
  int instance = -1;
  QueueKind queue = QueueKind::Feasible;
};

struct InstanceState {
  InstanceSpec spec;
  int inflight_limit = 1;  // SLO-compliant requests it may hold
  int batch_cap = 1;       // local batch limit for its tier
  int outstanding = 0;     // assigned, not finished (its stage): its load
  int feasible_outstanding = 0;  // of those, dispatched as feasible: what its SLO bandwidth holds
  int64_t generation = 0;  // the window it was (re)created in; unchanged while it survives
};

struct SchedulerOptions {
  double window_s = 1.0;  // control window (Nitsum 3.1: default one second)
  bool slo_aware = true;
  bool dynamic = true;    // false: keep the first plan (static baselines)
  int agnostic_batch = 256;
  // Hysteresis (OUR ASSUMPTION, not in the paper): the new window's plan replaces the installed
  // one only when it provisions more than (1 + switch_gain) times the goodput the installed
  // plan still provisions at the new rates; per-window rate estimates are noisy, and every
  // regrouping stops its ranks. 0: re-plan freely.
  double switch_gain = 0.05;
  PlannerOptions planner;
};

class GlobalScheduler {
 public:
  GlobalScheduler(SloTiers tiers, ProfileTable table, int num_ranks, SchedulerOptions options);

  const SloTiers& tiers() const { return tiers_; }
  const ProfileTable& table() const { return table_; }
  const SchedulerOptions& options() const { return opt_; }
  int num_ranks() const { return num_ranks_; }

  // Installs a plan (the first window, or a static baseline); instances whose spec (tier, role,
  // tp, first rank) survives keep their outstanding counts.
  void install(const ClusterPlan& plan);
  const ClusterPlan& plan() const { return plan_; }
  const std::vector<InstanceState>& instances() const { return inst_; }

  // Counts an arrival for the rate estimate of the current window.
  void record_arrival(int tier);
  // Ends the window at `now_s`: rates = arrivals / window, plan, install. Returns the ranks whose
  // group changed (what a TP switch stops and migrates). Static (dynamic = false): no change.
  std::vector<int> end_window(double window_s);
  // end_window without the install: the plan to install, or nullopt when the installed one stays
  // (static, or not worth a switch). A pool that must first stop the affected instances
  // (cluster/pool.h) installs it when they have stopped.
  std::optional<ClusterPlan> next_window(double window_s);
  const std::vector<double>& last_rates() const { return rates_; }
  int64_t windows() const { return windows_; }
  double last_plan_s() const { return last_plan_s_; }  // host seconds the last plan_cluster took

  Dispatch route(int tier);
  // `queue`: how the request was dispatched (a feasible request keeps its SLO bandwidth reserved
  // on the decode instance too).
  int route_decode(int tier, QueueKind queue = QueueKind::Feasible);
  // Completion notice for a request dispatched to `instance` through `queue`.
  void complete(int instance, QueueKind queue = QueueKind::Feasible);
  // Counts a request that is moved to `instance` without a routing decision (a pool re-homing a
  // request whose K/V stays inside its group at a reconfiguration), as route() would.
  void assign(int instance, QueueKind queue);

  // Instances of a role (prefill-capable: Prefill or Both).
  bool prefill_capable(int i) const { return inst_[size_t(i)].spec.role != Role::Decode; }

 private:
  void derive_limits(InstanceState* s) const;

  SloTiers tiers_;
  ProfileTable table_;
  int num_ranks_;
  SchedulerOptions opt_;
  ClusterPlan plan_;
  std::vector<InstanceState> inst_;
  std::vector<int64_t> arrivals_;
  std::vector<double> rates_;
  int64_t windows_ = 0;
  double last_plan_s_ = 0;
  size_t rr_spill_ = 0, rr_background_ = 0;
};

// Goodput-aware batch composition (Nitsum 3.3.2, 4.2.1): of the running requests (admission
// order, each with the queue it came through), the indices a step of at most `cap` sequences
// computes: feasible first, then best-effort, then background, in admission order within each;
// the others keep their KV and wait for a later step.
std::vector<size_t> compose_batch(const std::vector<QueueKind>& running, int cap);

// The local scheduler's three queues of one instance (request ids) and its batch formation.
class LocalQueues {
 public:
  void push(int64_t id, QueueKind q);
  bool empty() const { return q_[0].empty() && q_[1].empty() && q_[2].empty(); }
  size_t size() const { return q_[0].size() + q_[1].size() + q_[2].size(); }
  // Admits up to cap - running requests: feasible first, then best-effort, then background
  // (Nitsum 3.3.2 "fills the batch with feasible requests ... the remaining slot with best-effort").
  std::vector<int64_t> admit(int running, int cap);
  // The request admit() would take next, without taking it; -1 when empty.
  int64_t peek() const;
  // Takes that request (after peek()).
  int64_t pop();
  // Removes and returns everything queued (a reconfiguration hands waiting requests over).
  std::vector<std::pair<int64_t, QueueKind>> drain();

 private:
  std::deque<int64_t> q_[3];
};

}  // namespace loom::cluster
