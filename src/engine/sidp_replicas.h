// SiDP replicas stepping on their own (../shared/papers/001 §4.2-§4.3; PAPERS-NOTES.md S4, S8,
// S11, S13): under weight-as-a-service every DP replica (one rank each, plan_set.cpp) schedules and
// steps independently, at its own pace and step count; under compute-as-a-service the replicas step
// in lockstep on one descriptor, as CaS needs (the owner's fused GEMM takes every replica's rows of
// the same layer, dummies included).
//
// Why (S4, S13): WaS fetches with one-sided gets; the owner is oblivious ("no collective and no
// owner participation"), so nothing in a WaS forward couples the replicas. The paper's point
// against FSDP is exactly that a group collective "breaks the independence of desynchronized
// continuous-batching replicas". A replica with a long tail keeps stepping; a replica with no work
// does not step at all, and a fast replica never waits for a slow one.
//
// Who does what. World rank 0 is the orchestrator (S11's "job orchestrator") and replica 0:
//   - one Scheduler + EngineLoop per replica (each with the per-replica limits: max_num_seqs,
//     max_tokens_per_step, and the replica's KV pool), one Metrics and one WallClock for all;
//   - routing: request `id` goes to replica id mod D (replica_of, parallel/plan.h), the rule every
//     DP stage already uses to pick a replica's rows (plan.h TokenShare), so a sequence's KV lives on
//     one rank whichever mode steps it;
//   - one worker thread per replica: replica 0's runs rank 0's RankEngine, replica j's (j >= 1)
//     talks to rank j over channel j, a two-rank communicator {0, j} split from the world at
//     start-up. A replica's own step: the descriptor (step_codec.h) goes down channel j, rank j runs
//     RankEngine::step_replica (no collective: forward with WaS fetches, its own sampling) and sends
//     its tokens back on the same channel. The control thread (the driver's: run(), or the server's
//     engine thread through LiveLoop::step) launches a step on every replica that has none in flight
//     and applies each result (EngineLoop::end_step) as it arrives: tokens stream and finished
//     requests leave per replica, at that replica's pace.
//   - a replica whose channel was idle for a while gets a keep-alive (so no follower waits past
//     the communicator's timeout), and sequences that finished on a replica with nothing more to run
//     leave its KV store by a release-only command.
//
// The orchestrated switch (S11: "all engines switch", "a single global decision avoids inconsistent
// mode choices that could lead to deadlocks", "at coarse-grained boundaries ... with hysteresis").
// Rank 0 alone decides, with the same LayoutPolicy hysteresis as the lockstep engine
// (policy.h sidp: B_th, kSidpWindow, kSidpHysteresis):
//   - WaS (replicas independent): one observation per round of D replica steps (any replicas'),
//     effective batch = the running sequences of every replica / D ("how many sequences remain
//     active per engine"); a round in which some replica's step carried prompt chunks does not
//     count. So the window is kSidpWindow rounds of D replica steps (kSidpWindow steps of each
//     replica when all are busy; kSidpWindow x D steps of the last busy one in a one-replica tail).
//     When the policy says CaS, rank 0 launches no more replica steps; once the last one in flight
//     has come back, every replica is at a step boundary and the group steps in lockstep.
//   - CaS (lockstep): every step, each replica's scheduler builds its part (a replica with nothing
//     is a dummy, S10); the parts are one descriptor, sent down every channel, executed by
//     RankEngine::step on every rank (collective: CaS exchanges, tokens gathered to rank 0), and
//     the policy chooses on the whole batch as before. A step it gives back to WaS runs in lockstep
//     under the WaS plan; the replicas are independent again from the next step.
// Modes of every step are in the metrics: one StepMetrics per replica and step (a lockstep step: one
// per replica with a part in it), with its plan (the mode), its replica and whether it was lockstep.
// The plan statistics count a replica's own step or a lockstep step of the group as one step of its
// plan (PlanStats: WaS = own steps + lockstep WaS steps, CaS = group steps).
//
// Used when the plan set is SiDP with a WaS plan (sidp_independent): `--plan dp=D,weights=owner`
// with --policy fixed, sidp:was or sidp. A CaS-only set (sidp:cas) keeps the lockstep engine.
// Shutdown: rank 0 waits for the steps in flight, releases what finished, sends stop down every
// channel; a follower returns on it.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "engine/engine.h"
#include "engine/engine_loop.h"
#include "engine/plan_executor.h"
#include "engine/policy.h"
#include "engine/rank_engine.h"

namespace loom {

// Whether the engine of `plans` under `policy` runs SiDP replicas stepping on their own: every plan
// is weights=owner, one of them WaS, and the policy is fixed, sidp or sidp:was.
bool sidp_independent(const PlanSet& plans, const std::string& policy);

// Collective over `world`: channel j joins world ranks 0 and j (j >= 1). World rank 0 gets every
// channel at index j (index 0 null); rank j >= 1 gets its channel at index j, the others null.
std::vector<std::unique_ptr<Communicator>> split_replica_channels(Communicator& world);

// World rank j >= 1: runs rank 0's commands from channel `ctl` (own steps, group steps,
// keep-alives) until the stop; returns the steps this rank ran (own + group). `before_step`
// (optional) sees each step's batch first.
int64_t follow_replica(Communicator& ctl, RankEngine& rank,
                       const std::function<void(const StepBatch&)>& before_step = nullptr);

// World rank 0's side (see the top). One control thread (the LiveLoop's driving thread) calls
// step(), idle(), stats(), run(); submit() and cancel() are thread-safe.
class SidpReplicas final : public LiveLoop, private StepPlanner {
 public:
  // `channels` from split_replica_channels; `keepalive_s`: the longest a channel stays silent.
  SidpReplicas(RankEngine& rank, std::vector<std::unique_ptr<Communicator>> channels, const EngineConfig& config,
               std::unique_ptr<LayoutPolicy> policy, double keepalive_s);
  ~SidpReplicas() override;

  // ---- LiveLoop ----
  void submit(Request r) override;
  void cancel(RequestId id) override;
  bool step() override;
  bool idle() const override;
  void set_stop_check(StopCheck check) override;
  LoopStats stats() const override;

  // Runs `requests` (arrival_s relative to now) to completion; the finished sequences in finishing
  // order. Throws loom::Error when a step failed.
  std::vector<Sequence> run(std::vector<Request> requests);
  // Waits for the steps in flight, releases what finished, stops the followers (once).
  void shut_down();

  int num_replicas() const { return int(replicas_.size()); }
  Scheduler& scheduler(int replica);
  int num_blocks() const;  // all replicas' KV blocks
  Clock& clock() { return clock_; }
  Metrics& metrics() { return metrics_; }
  const LayoutPolicy& policy() const { return *policy_; }
  std::vector<PlanStats> plan_stats() const { return stats_; }
  std::string fault() const;
  bool lockstep() const { return lockstep_; }
  // Steps each replica ran on its own (WaS), and group steps (lockstep).
  std::vector<int64_t> own_steps() const;
  int64_t group_steps() const { return group_steps_; }

 private:
  enum class Kind { kOwn, kGroup, kRelease, kStop };
  struct Job {
    Kind kind = Kind::kOwn;
    std::vector<uint8_t> wire;  // replicas j >= 1
    StepBatch batch;            // replica 0
    std::vector<RequestId> released;
  };
  struct Done {
    int replica = 0;
    Kind kind = Kind::kOwn;
    StepResult result;
    std::string error;
  };
  class Executor;
  struct Replica;

  // Every replica loop's plan control: the WaS plan, or the group's mode in lockstep.
  void choose_plan(StepBatch& b) override;
  void work(Replica& r);
  void enqueue(Replica& r, Job j);
  void post(Done d);
  void set_fault(const std::string& e);
  bool launch_own();
  bool collect(bool may_wait);
  bool group_step();
  void release_idle();
  void observe(const StepBatch& b);
  void count(int plan, const StepBatch& b);
  bool anything_in_flight() const;
  void inject_due();

  RankEngine& rank_;
  std::vector<std::unique_ptr<Communicator>> channels_;
  EngineConfig config_;
  std::unique_ptr<LayoutPolicy> policy_;
  double keepalive_s_;
  int was_ = 0, cas_ = -1;
  WallClock clock_;
  Metrics metrics_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::multimap<double, Request> arrivals_;  // run(): timed arrivals not yet submitted
  std::vector<PlanStats> stats_;
  int mode_plan_ = 0;        // the plan of the last step (switches counted against it)
  bool lockstep_ = false;    // CaS: the group steps on one descriptor
  bool draining_ = false;    // WaS -> CaS decided: no new own step; lockstep once none is in flight
  int round_steps_ = 0;      // own steps since the last observation
  bool round_prompts_ = false;
  int64_t group_steps_ = 0, group_index_ = 0;
  int releases_in_flight_ = 0;
  bool shut_ = false;

  mutable std::mutex mu_;  // done_, fault_
  std::condition_variable done_cv_;
  std::deque<Done> done_;
  std::string fault_;
};

}  // namespace loom
