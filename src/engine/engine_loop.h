// The step loop shared by the engine and the simulator:
//   inject arrivals due by clock.now() -> schedule -> execute -> on_step_done -> metrics.
// Engine: WallClock + kernel executor (and submit()/cancel() from server threads).
// Simulator: ManualClock (or its own) + cost-model executor that advances the clock by the
// priced step time inside execute(); when idle the clock jumps to the next arrival.
// step() is begin_step() + executor + end_step(); a Nitsum pool (cluster/pool.h) calls the two
// halves itself, running each instance's step on that instance's ranks while it schedules others.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/metrics.h"
#include "engine/scheduler.h"
#include "engine/step.h"

namespace loom {

// A snapshot of a live loop for a front end's /metrics and /health.
// The step record of `batch` (metrics.h StepMetrics) without its times: what EngineLoop records
// at the start of a step, and the simulator for the steps it prices (sim/simulator.cpp), with the
// KV blocks in use that the caller read.
StepMetrics step_record(const StepBatch& batch, int kv_blocks_used);

struct LoopStats {
  int num_running = 0;
  int num_waiting = 0;  // the schedulers' waiting queues (preempted included)
  int kv_blocks_used = 0;
  int64_t num_preemptions = 0;
  int64_t num_steps = 0;

  // Sums another loop's (several loops behind one front end: SiDP replicas, a pool's instances).
  LoopStats& operator+=(const LoopStats& o) {
    num_running += o.num_running;
    num_waiting += o.num_waiting;
    kv_blocks_used += o.kv_blocks_used;
    num_preemptions += o.num_preemptions;
    num_steps += o.num_steps;
    return *this;
  }
};

// What names each step's plan: the loop's plan control, given to EngineLoop at construction (the
// layout policy's PlanControl, engine/plan_executor.h; SiDP's replicas and Nitsum's instances name
// their own). choose_plan runs between schedule() and execute(): it sets batch.plan_id / plan and
// may change the batch (a switch to another KV placement preempts sequences that no longer fit,
// which join batch.preempted, and may leave the batch empty: the step then only switches).
class StepPlanner {
 public:
  virtual ~StepPlanner() = default;
  virtual void choose_plan(StepBatch& batch) = 0;
};

// What a live front end (server/serving_engine.h) drives: the EngineLoop of one scheduler, or a
// pool of instances stepping on their own (cluster/pool.h). One driving thread calls step(),
// idle(), stats() and sets the hooks and the stop check; submit() and cancel() are thread-safe.
class LiveLoop {
 public:
  virtual ~LiveLoop() = default;
  // Hooks (optional), called on the driving thread; they observe, the plan is chosen by the
  // loop's StepPlanner (given at construction). on_batch sees each step's batch before it runs
  // (its plan chosen); on_token after each token (streaming); on_finish for every finished
  // sequence (including rejected and cancelled).
  std::function<void(const StepBatch&)> on_batch;
  std::function<void(const TokenEvent&)> on_token;
  std::function<void(const Sequence&)> on_finish;

  // Thread-safe: queue a request / a cancellation, applied at the start of the next step.
  // A submitted request's arrival_s is its given value (use clock.now() for live traffic).
  virtual void submit(Request r) = 0;
  virtual void cancel(RequestId id) = 0;
  // One iteration; false when nothing ran (idle, or nothing fits / nothing finished yet).
  virtual bool step() = 0;
  virtual bool idle() const = 0;  // nothing pending, waiting, running or queued
  virtual void set_stop_check(StopCheck check) = 0;
  virtual LoopStats stats() const = 0;
};

class EngineLoop : public LiveLoop {
 public:
  // `planner` (optional, not owned, outlives the loop) names each step's plan; without one every
  // step runs plan 0.
  EngineLoop(Scheduler& scheduler, StepExecutor& executor, Clock& clock, Metrics& metrics,
             StepPlanner* planner = nullptr);

  void submit(Request r) override;
  void cancel(RequestId id) override;
  void set_stop_check(StopCheck check) override { sched_.set_stop_check(std::move(check)); }
  LoopStats stats() const override;

  // Adds a timed arrival (not thread-safe; before or between run calls). Arrivals are injected
  // when clock.now() >= arrival_s, in (arrival_s, insertion order) order.
  void add_arrival(Request r);

  // One iteration: inject due arrivals, schedule, execute (if non-empty), apply. Returns false
  // when nothing was executed (idle or nothing fits).
  bool step() override;
  // Steps until no request is pending, waiting or running; when idle, waits (clock.wait_until)
  // for the next arrival. Returns the number of steps executed.
  int64_t run_until_idle();

  bool idle() const override;  // no pending arrival, no unfinished sequence, empty inbox

  // step() in two halves, for a caller that runs the batch elsewhere (and the executor's
  // release() still receives every sequence that leaves). begin_step: inject due arrivals,
  // schedule, choose_plan, on_batch; nullopt when there is nothing to run. end_step: applies
  // `result` (or the failure `error` when result is null), records the step's metrics, fires
  // on_token / on_finish.
  struct Pending {
    StepBatch batch;
    StepMetrics metrics;
  };
  std::optional<Pending> begin_step();
  // Applies queued submissions and cancellations and hands finished sequences to on_finish,
  // without scheduling a step (a pool keeps its view of every request current between steps).
  void poll() { inject_due(); }
  void end_step(Pending& pending, const StepResult* result, const std::string& error = {});

 private:
  void inject_due();
  void collect_finished();

  Scheduler& sched_;
  StepExecutor& exec_;
  Clock& clock_;
  Metrics& metrics_;
  StepPlanner* planner_ = nullptr;
  std::multimap<double, Request> pending_;  // timed arrivals; equal times keep insertion order
  mutable std::mutex inbox_mu_;
  std::vector<Request> inbox_;
  std::vector<RequestId> cancels_;
};

// Convenience: EngineLoop over `arrivals`, run until idle.
int64_t run_until_idle(Scheduler& scheduler, StepExecutor& executor, Clock& clock,
                       Metrics& metrics, std::vector<Request> arrivals);

}  // namespace loom
