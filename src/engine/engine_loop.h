// The step loop shared by the engine and the simulator:
//   inject arrivals due by clock.now() -> schedule -> execute -> on_step_done -> metrics.
// Engine: WallClock + kernel executor (and submit()/cancel() from server threads).
// Simulator: ManualClock (or its own) + cost-model executor that advances the clock by the
// priced step time inside execute(); when idle the clock jumps to the next arrival.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "engine/metrics.h"
#include "engine/scheduler.h"
#include "engine/step.h"

namespace loom {

class EngineLoop {
 public:
  EngineLoop(Scheduler& scheduler, StepExecutor& executor, Clock& clock, Metrics& metrics);

  // Hooks (optional). on_batch runs between schedule() and execute() (layout policies set
  // batch.plan_id there, PlanControl); on_token after each token (streaming); on_finish for every finished
  // sequence (including rejected and cancelled).
  std::function<void(StepBatch&)> on_batch;
  std::function<void(const TokenEvent&)> on_token;
  std::function<void(const Sequence&)> on_finish;

  // Thread-safe: queue a request / a cancellation, applied at the start of the next step.
  // A submitted request's arrival_s is its given value (use clock.now() for live traffic).
  void submit(Request r);
  void cancel(RequestId id);

  // Adds a timed arrival (not thread-safe; before or between run calls). Arrivals are injected
  // when clock.now() >= arrival_s, in (arrival_s, insertion order) order.
  void add_arrival(Request r);

  // One iteration: inject due arrivals, schedule, execute (if non-empty), apply. Returns false
  // when nothing was executed (idle or nothing fits).
  bool step();
  // Steps until no request is pending, waiting or running; when idle, waits (clock.wait_until)
  // for the next arrival. Returns the number of steps executed.
  int64_t run_until_idle();

  bool idle() const;  // no pending arrival, no unfinished sequence, empty inbox

 private:
  void inject_due();
  void collect_finished();

  Scheduler& sched_;
  StepExecutor& exec_;
  Clock& clock_;
  Metrics& metrics_;
  std::multimap<double, Request> pending_;  // timed arrivals; equal times keep insertion order
  mutable std::mutex inbox_mu_;
  std::vector<Request> inbox_;
  std::vector<RequestId> cancels_;
};

// Convenience: EngineLoop over `arrivals`, run until idle.
int64_t run_until_idle(Scheduler& scheduler, StepExecutor& executor, Clock& clock,
                       Metrics& metrics, std::vector<Request> arrivals);

}  // namespace loom
