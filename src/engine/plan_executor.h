// SPMD execution of the engine's steps over the world (ARCHITECTURE.md "Ranks and the step
// loop"): world rank 0 owns the Scheduler and the EngineLoop, whose StepExecutor is a
// PlanExecutor; every other rank runs follow_steps(). Both run RankEngine::step on each decoded
// step, so there is one step path for every plan and every switch.
//
//   PlanExecutor::execute(batch): 1. broadcast the step descriptor (step_codec.h: plan id, the
//                                    sequences to release, the KV extents of a switch) to the world;
//                                 2. RankEngine::step: releases, switch (+ migration), forward,
//                                    sampling, tokens to rank 0.
// Descriptor transport: one broadcast of a fixed kInlineBytes buffer per step (size word +
// payload); a descriptor larger than that (long prefill chunks) follows in a second broadcast.
//
// Per-plan statistics (steps, tokens, switches into the plan, KV bytes those switches moved, time
// spent switching) are kept here, on world rank 0.
//
// Failures: a communicator error (a peer failed or timed out) makes the group unusable; the
// executor remembers the first one (broken()) and fails every later step at once without touching
// the communicator, so the loop drains quickly and the caller can rethrow error().
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/rank_engine.h"
#include "engine/step.h"

namespace loom {

// Rank 0's side of the SPMD step loop: sends each step's descriptor (or, once, the stop command)
// and remembers a failure. A step that fails midway leaves the followers inside it, so the group is
// unusable afterwards: every later step fails at once with the first error, and stop() sends
// nothing.
class StepLeader {
 public:
  static constexpr std::size_t kInlineBytes = 4096;
  explicit StepLeader(Communicator& group) : group_(group) {}
  void check_usable() const;  // throws the first failure's error when broken
  // Broadcasts (batch, released), then runs `step()`; any exception marks the group broken.
  template <typename F>
  StepResult run(const StepBatch& batch, const std::vector<RequestId>& released, F&& step) {
    check_usable();
    try {
      send(batch, released);
      return step();
    } catch (const std::exception& e) {
      broken_ = true;
      error_ = e.what();
      throw;
    }
  }
  void stop();
  // A no-work round trip with every follower (kHeartbeat + barrier): returns once all of them
  // answered; throws (and marks the group broken) when the communicator times out or fails.
  void heartbeat();
  bool broken() const { return broken_; }
  const std::string& error() const { return error_; }

 private:
  void send(const StepBatch& batch, const std::vector<RequestId>& released);
  Communicator& group_;
  std::vector<uint8_t> wire_, inline_;
  bool stopped_ = false;
  bool broken_ = false;
  std::string error_;
};

struct PlanStats {
  std::string name;
  int64_t steps = 0, tokens = 0;
  int64_t switches = 0;        // switches into this plan
  int64_t kv_bytes_moved = 0;  // by those switches (all ranks)
  double switch_s = 0;         // time rank 0 spent in them (the KV migration)
  // Lazy re-shard at those switches (RankEngineOptions::lazy_weights): rank 0's weight bytes built
  // for this plan and the time it took.
  int64_t weight_bytes_built = 0;
  double reshard_s = 0;
};

class PlanExecutor : public StepExecutor {
 public:
  PlanExecutor(Communicator& world, RankEngine& rank);

  StepResult execute(const StepBatch& batch) override;
  // The sequence's KV is dropped on every rank before the next step (carried by its descriptor).
  void release(RequestId seq_id) override { pending_release_.push_back(seq_id); }

  // Sends the stop command to the followers (once; nothing on a broken group).
  void stop() { leader_.stop(); }
  void heartbeat() { leader_.heartbeat(); }
  bool broken() const { return leader_.broken(); }
  const std::string& error() const { return leader_.error(); }
  int64_t num_steps() const { return num_steps_; }
  const std::vector<PlanStats>& stats() const { return stats_; }
  RankEngine& rank() { return rank_; }

 private:
  StepLeader leader_;
  RankEngine& rank_;
  std::vector<RequestId> pending_release_;
  std::vector<PlanStats> stats_;
  int64_t num_steps_ = 0;
};

// World ranks != 0: executes the broadcast steps with `rank` until the stop command; returns the
// steps run. `before_step` (optional) sees each decoded batch first (tracing; tests inject faults);
// `on_heartbeat` (optional) runs before each heartbeat is answered (tests stall a follower there).
int64_t follow_steps(Communicator& world, RankEngine& rank,
                     const std::function<void(const StepBatch&)>& before_step = nullptr,
                     const std::function<void()>& on_heartbeat = nullptr);

// One descriptor from `group` rank 0 to the others: on rank 0 `wire` holds it, on the others it
// receives it; `inline_buf` is scratch.
void broadcast_descriptor(Communicator& group, std::vector<uint8_t>& wire, std::vector<uint8_t>& inline_buf);

}  // namespace loom

#include <memory>

#include "engine/engine_loop.h"
#include "engine/policy.h"
#include "engine/scheduler.h"

namespace loom {

// The layout policy on world rank 0's loop (its StepPlanner, engine_loop.h): picks each step's plan; when
// the pick changes the KV placement, re-homes the scheduler's block pools (a sequence that no
// longer fits is preempted) and puts the KV extents of every sequence into the step, for the
// migration every rank runs before it (kv_transfer.h). Under Seesaw's phases
// (Scheduler::keeps_kv_resident) a switch moves nothing: the step says so (kv_resident, no
// extents), and the scheduler's pools already account both plans (seesaw_tier.h "Resident sequences").
class PlanControl final : public StepPlanner {
 public:
  PlanControl(const PlanSet& plans, std::vector<KvPoolShape> pools, std::unique_ptr<LayoutPolicy> policy,
              Scheduler& scheduler);
  void choose_plan(StepBatch& batch) override;
  int current() const { return current_; }
  const LayoutPolicy& policy() const { return *policy_; }

 private:
  const PlanSet& plans_;
  std::vector<KvPoolShape> pools_;
  std::unique_ptr<LayoutPolicy> policy_;
  Scheduler& sched_;
  int current_ = 0;
};

}  // namespace loom
