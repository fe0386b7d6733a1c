// SiDP's coordinator: the one implementation of who steps when among D replica schedulers
// (../shared/papers/001 §4.2-§4.3; PAPERS-NOTES.md S4, S11, S13), run by the engine and by the
// simulator alike. The engine binds it to its ranks (sidp_replicas.h: worker threads and channels
// {0, j}, the wall clock); the simulator to the cost model and an event clock (PricedSidpBackend
// below, sim/simulator.cpp); `loom sim validate-engine` to both at once (PricedSidpBackend
// executing every step on the engine's ranks), so the engine's step records and the simulator's
// are the same by construction.
//
// Shapes.
//   SidpCoordinator  D replicas, each a Scheduler (the per-replica limits and KV pool) and an
//                    EngineLoop over it; the layout policy; the arrivals not yet due; the mode
//                    (independent / draining / lockstep); the plan statistics; one Metrics.
//   SidpBackend      where a step runs and when it comes back: launch_own (replica j's batch),
//                    launch_group (one descriptor of every replica's part), release (KV of
//                    finished sequences on an idle replica), collect (the completions, in the
//                    order they apply), and the clock every record and the policy read.
//   PricedSidpBackend  the event clock: a step ends at its start + the pricer's seconds;
//                    completions come back in (end time, launch order) order; with an executing
//                    backend attached, every step also runs there (real tokens) before it is
//                    priced.
//
// Decisions (all here, none in a backend; one decision for the whole group, S11: "a single global
// decision avoids inconsistent mode choices that could lead to deadlocks"):
//   - routing: request `id` runs on replica replica_of(id, D) (parallel/plan.h), so a sequence's KV
//     lives on one rank whichever mode steps it;
//   - arrivals: a timed request joins its replica's scheduler once clock.now() >= its arrival;
//   - independent (WaS, S4/S13): every replica with work and no step in flight launches an own
//     step under the WaS plan; a replica with no work does not step;
//   - observation: one per round of D own steps (any replicas'), effective batch = running
//     sequences of every replica / D, a round with prompt chunks not counting
//     (LayoutPolicy::choose_effective; S11 "how many sequences remain active per engine");
//   - draining: once the policy says CaS no own step launches; when none is in flight every
//     replica is at a step boundary and the group goes lockstep (S11 "all engines switch");
//   - lockstep (CaS): every replica's scheduler builds its part (none: a dummy, S10), the parts
//     are one batch in replica order, LayoutPolicy::choose picks its plan; a step it gives back
//     to WaS runs lockstep under WaS, and the replicas are independent again from the next step;
//   - records: one StepMetrics per replica and step (a group step: one per replica with a part),
//     with its replica and lockstep flag; PlanStats count an own step or a group step as one step
//     of its plan, switches against the plan of the step before.
//
// Invariants: at most one step in flight per replica; own steps only when neither lockstep nor
// draining; a group step only in lockstep, with no own step in flight, one at a time.
//
// The order of events at one time, for every binding (a backend's collect implements it):
// completions first (in launch order), then the arrivals due, then the new steps. The wall clock
// gets it from the driving loop (step(): inject arrivals, launch, collect); the event clock by
// advancing only to the next completion or arrival and returning every completion at that time.
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "engine/engine_loop.h"
#include "engine/metrics.h"
#include "engine/plan_executor.h"  // PlanStats
#include "engine/policy.h"
#include "engine/step.h"
#include "parallel/plan_set.h"

namespace loom {

// A step that came back: replica j's own step, or (replica -1) the group step with every
// replica's tokens.
struct SidpDone {
  int replica = -1;
  StepResult result;
  std::string error;  // non-empty: the step failed
};

class SidpBackend {
 public:
  virtual ~SidpBackend() = default;
  virtual Clock& clock() = 0;
  // Replica `replica`'s own step; `released` leave its KV store first.
  virtual void launch_own(int replica, const StepBatch& batch, std::vector<RequestId> released) = 0;
  // The group step: `all` (every part in replica order) on every replica; parts[j] is replica
  // j's part or null; released[j] leave replica j's KV store first.
  virtual void launch_group(const StepBatch& all, const std::vector<const StepBatch*>& parts,
                            std::vector<std::vector<RequestId>> released) = 0;
  // Release-only on an idle replica (nothing comes back to the coordinator).
  virtual void release(int replica, std::vector<RequestId> released) = 0;
  // The steps that came back, in the order they apply. may_wait: something is in flight and the
  // caller has nothing else to do (the wall clock waits a while; the event clock advances to the
  // next completion, or to `next_arrival_s` when that comes first, and returns what ends then).
  virtual std::vector<SidpDone> collect(bool may_wait, double next_arrival_s) = 0;
  // Completions not yet collected, or releases still running.
  virtual bool pending() const = 0;
  // The first failure of a rank or channel ("" when none); every later step fails with it.
  virtual std::string fault() const = 0;
};

class SidpCoordinator final : public LiveLoop, private StepPlanner {
 public:
  // `plans`: SiDP plans (weights=owner, one DP degree, a WaS plan among them); `replica`: one
  // replica's scheduler limits and KV pool.
  SidpCoordinator(const PlanSet& plans, const SchedulerConfig& replica, std::unique_ptr<LayoutPolicy> policy,
                  SidpBackend& backend);
  ~SidpCoordinator() override;

  // ---- LiveLoop (one driving thread; submit and cancel thread-safe) ----
  void submit(Request r) override;
  void cancel(RequestId id) override;
  // Arrivals due, new steps (see the top), then what came back. True when a step launched or
  // came back.
  bool step() override;
  bool idle() const override;
  void set_stop_check(StopCheck check) override;
  LoopStats stats() const override;

  // Runs `requests` (arrival_s relative to the clock's now) to completion; the finished sequences
  // in finishing order. Throws loom::Error when no replica can make progress.
  std::vector<Sequence> run(std::vector<Request> requests);
  // Waits for the steps in flight and releases what finished (before the backend stops).
  void drain();
  // Called after every step record (progress reports).
  std::function<void()> on_step;

  int num_replicas() const { return int(replicas_.size()); }
  Scheduler& scheduler(int replica);
  int num_blocks() const;  // all replicas' KV blocks
  Metrics& metrics() { return metrics_; }
  const LayoutPolicy& policy() const { return *policy_; }
  std::vector<PlanStats> plan_stats() const { return stats_; }
  bool lockstep() const { return lockstep_; }
  std::vector<int64_t> own_steps() const;  // steps each replica ran on its own (WaS)
  int64_t group_steps() const { return group_steps_; }

 private:
  struct Replica;
  class Releases;

  void choose_plan(StepBatch& b) override;  // the replica loops' plan control
  void inject_due();
  bool launch_own();
  bool launch_group();
  bool collect(bool may_wait);
  void apply_own(Replica& r, SidpDone& d);
  void apply_group(SidpDone& d);
  void release_idle();
  void observe(const StepBatch& b);
  void count(int plan, int64_t tokens);
  bool anything_in_flight() const;

  const PlanSet& plans_;
  std::unique_ptr<LayoutPolicy> policy_;
  SidpBackend& backend_;
  int block_size_ = 16;
  int was_ = -1, cas_ = -1;
  Metrics metrics_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::multimap<double, Request> arrivals_;  // run(): timed arrivals not yet due
  std::vector<PlanStats> stats_;
  int mode_plan_ = 0;      // the plan of the last step (switches counted against it)
  bool lockstep_ = false;  // CaS: the group steps on one descriptor
  bool draining_ = false;  // WaS -> CaS decided: no new own step; lockstep once none is in flight
  int round_steps_ = 0;    // own steps since the last observation
  bool round_prompts_ = false;
  bool group_in_flight_ = false;
  int group_plan_ = 0;
  int64_t group_tokens_ = 0;
  int64_t group_steps_ = 0, group_index_ = 0;
};

// The event clock (see the top): a step launched at t ends at t + pricer(plan, parts) seconds.
// Without an executing backend every sampled row gets token 0 (the simulator: requests run with
// ignore_eos, lengths from the trace); with one, the step runs there first (launch, then wait for
// it) and its tokens are the ranks'.
class PricedSidpBackend final : public SidpBackend {
 public:
  // parts[j]: replica j's rows in the step (null: none); the plan is parts' plan_id.
  using Pricer = std::function<double(int plan, const std::vector<const StepBatch*>& parts)>;
  PricedSidpBackend(int replicas, Pricer pricer, SidpBackend* execute = nullptr);

  Clock& clock() override { return clock_; }
  void launch_own(int replica, const StepBatch& batch, std::vector<RequestId> released) override;
  void launch_group(const StepBatch& all, const std::vector<const StepBatch*>& parts,
                    std::vector<std::vector<RequestId>> released) override;
  void release(int replica, std::vector<RequestId> released) override;
  std::vector<SidpDone> collect(bool may_wait, double next_arrival_s) override;
  bool pending() const override { return false; }
  std::string fault() const override { return execute_ ? execute_->fault() : std::string(); }

 private:
  struct Event {
    double t = 0;
    int64_t seq = 0;
    SidpDone done;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
  };
  SidpDone run_there(int replica);  // waits for the executing backend's step
  void push(double seconds, SidpDone d);

  int replicas_;
  Pricer pricer_;
  SidpBackend* execute_;
  ManualClock clock_;
  std::priority_queue<Event, std::vector<Event>, Later> q_;
  int64_t seq_ = 0;
};

}  // namespace loom
