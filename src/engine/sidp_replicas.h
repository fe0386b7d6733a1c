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
// Who does what. World rank 0 is the orchestrator (S11's "job orchestrator") and replica 0. The
// decisions (routing, own steps, the policy's observations, draining, the group step, records)
// are SidpCoordinator's (sidp_coordinator.h), the code the simulator runs too; this file binds it
// to the ranks:
//   - one worker thread per replica: replica 0's runs rank 0's RankEngine, replica j's (j >= 1)
//     talks to rank j over channel j, a two-rank communicator {0, j} split from the world at
//     start-up. A replica's own step: the descriptor (step_codec.h) goes down channel j, rank j runs
//     RankEngine::step_replica (no collective: forward with WaS fetches, its own sampling) and sends
//     its tokens back on the same channel. A group step: one descriptor down every channel,
//     RankEngine::step on every rank (collective: CaS exchanges, tokens gathered to rank 0).
//   - the control thread (the driver's: run(), or the server's engine thread through
//     LiveLoop::step) drives the coordinator, which launches and applies steps as they come back
//     (wall clock, completions in arrival order): tokens stream and finished requests leave per
//     replica, at that replica's pace.
//   - a replica whose channel was idle for a while gets a keep-alive (so no follower waits past
//     the communicator's timeout), and sequences that finished on a replica with nothing more to run
//     leave its KV store by a release-only command.
//   - priced mode (`loom sim validate-engine`): the same steps run on the same ranks, but the
//     coordinator's clock and completion order come from a pricer (PricedSidpBackend executing
//     here), so its step records are the simulator's by construction.
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
#include "engine/sidp_coordinator.h"

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

// World rank 0's side (see the top): the coordinator bound to the ranks. One control thread (the
// driver's, or the server's engine thread) drives coordinator() (a LiveLoop); its submit() and
// cancel() are thread-safe.
class SidpReplicas final {
 public:
  // `channels` from split_replica_channels; `keepalive_s`: the longest a channel stays silent.
  // `pricer` (optional): priced mode (see the top).
  SidpReplicas(RankEngine& rank, std::vector<std::unique_ptr<Communicator>> channels, const EngineConfig& config,
               std::unique_ptr<LayoutPolicy> policy, double keepalive_s, PricedSidpBackend::Pricer pricer = nullptr);
  ~SidpReplicas();

  // The loop, its schedulers, metrics, policy and plan statistics.
  SidpCoordinator& coordinator() { return *coord_; }
  const SidpCoordinator& coordinator() const { return *coord_; }
  // Runs `requests` (arrival_s relative to now) to completion; the finished sequences in finishing
  // order. Throws loom::Error when a step failed.
  std::vector<Sequence> run(std::vector<Request> requests);
  // Waits for the steps in flight, releases what finished, stops the followers (once).
  void shut_down();

  Clock& clock();
  std::string fault() const;
  bool lockstep() const { return coord_->lockstep(); }
  // Steps each replica ran on its own (WaS), and group steps (lockstep).
  std::vector<int64_t> own_steps() const { return coord_->own_steps(); }
  int64_t group_steps() const { return coord_->group_steps(); }

 private:
  class Channels;

  RankEngine& rank_;
  std::unique_ptr<Channels> channels_;         // the ranks
  std::unique_ptr<PricedSidpBackend> priced_;  // priced mode: executing on channels_
  std::unique_ptr<SidpCoordinator> coord_;
  bool shut_ = false;
};

}  // namespace loom
