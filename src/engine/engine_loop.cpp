#include "engine/engine_loop.h"

#include <exception>

#include "core/error.h"
#include "core/op_timing.h"

namespace loom {

StepMetrics step_record(const StepBatch& batch, int kv_blocks_used) {
  StepMetrics sm;
  sm.index = batch.step_index;
  sm.num_tokens = batch.num_tokens;
  sm.num_seqs = int(batch.seqs.size());
  sm.num_prefill_tokens = batch.num_prefill_tokens;
  sm.num_decode_tokens = batch.num_decode_tokens;
  sm.kv_blocks_used = kv_blocks_used;
  sm.num_preempted = int(batch.preempted.size());
  sm.plan = batch.plan;
  return sm;
}

EngineLoop::EngineLoop(Scheduler& scheduler, StepExecutor& executor, Clock& clock,
                       Metrics& metrics, StepPlanner* planner)
    : sched_(scheduler), exec_(executor), clock_(clock), metrics_(metrics), planner_(planner) {}

void EngineLoop::submit(Request r) {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  inbox_.push_back(std::move(r));
}

void EngineLoop::cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  cancels_.push_back(id);
}

void EngineLoop::add_arrival(Request r) {
  const double t = r.arrival_s;
  pending_.emplace(t, std::move(r));
}

bool EngineLoop::idle() const {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  return pending_.empty() && inbox_.empty() && cancels_.empty() && !sched_.has_unfinished();
}

void EngineLoop::inject_due() {
  std::vector<Request> inbox;
  std::vector<RequestId> cancels;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  const double now = clock_.now();
  while (!pending_.empty() && pending_.begin()->first <= now) {
    inbox.push_back(std::move(pending_.begin()->second));
    pending_.erase(pending_.begin());
  }
  for (Request& r : inbox) {
    metrics_.on_arrival(r, r.arrival_s);
    sched_.add_request(std::move(r));
  }
  for (RequestId id : cancels) sched_.cancel(id);
  collect_finished();  // rejections and cancellations
}

void EngineLoop::collect_finished() {
  const double now = clock_.now();
  for (Sequence& s : sched_.drain_finished()) {
    exec_.release(s.id());
    metrics_.on_finish(s, now);
    if (on_finish) on_finish(s);
  }
}

LoopStats EngineLoop::stats() const {
  LoopStats st;
  st.num_running = sched_.num_running();
  st.num_waiting = sched_.num_waiting();
  st.kv_blocks_used = sched_.num_used_blocks();
  st.num_preemptions = sched_.num_preemptions();
  st.num_steps = sched_.num_steps();
  return st;
}

std::optional<EngineLoop::Pending> EngineLoop::begin_step() {
  optime::Scope timed(optime::Op::Schedule);
  inject_due();
  Pending p;
  p.batch = sched_.schedule();
  if (p.batch.empty()) {
    for (RequestId id : p.batch.preempted) exec_.release(id);
    return std::nullopt;
  }
  // The plan control names the step's plan; a switch to another KV placement may preempt
  // sequences that no longer fit (they join batch.preempted, and may leave the batch empty: the
  // step then only switches). Then the observers.
  if (planner_) planner_->choose_plan(p.batch);
  if (on_batch) on_batch(p.batch);
  for (RequestId id : p.batch.preempted) exec_.release(id);
  p.metrics = step_record(p.batch, sched_.num_used_blocks());
  p.metrics.start_s = clock_.now();
  return p;
}

void EngineLoop::end_step(Pending& p, const StepResult* result, const std::string& error) {
  optime::Scope timed(optime::Op::Schedule);
  StepMetrics& sm = p.metrics;
  sm.end_s = clock_.now();
  metrics_.on_step(sm);
  if (!result) {
    sched_.on_step_failed(p.batch, error);
    collect_finished();
    return;
  }
  const StepOutcome out = sched_.on_step_done(p.batch, *result);
  for (const TokenEvent& ev : out.tokens) {
    metrics_.on_token(ev.seq_id, sm.end_s);
    if (on_token) on_token(ev);
  }
  collect_finished();
}

bool EngineLoop::step() {
  std::optional<Pending> p = begin_step();
  if (!p) return false;
  StepResult result;
  try {
    result = exec_.execute(p->batch);
  } catch (const std::exception& e) {
    end_step(*p, nullptr, describe_exception(e));  // never a bare "std::bad_alloc" in a finish detail
    return true;
  }
  end_step(*p, &result);
  return true;
}

int64_t EngineLoop::run_until_idle() {
  int64_t steps = 0;
  while (!idle()) {
    if (step()) {
      ++steps;
      continue;
    }
    // Nothing ran. With unfinished work that is a scheduler bug (it always makes progress when
    // the cache holds one maximal request); otherwise wait for the next arrival.
    bool has_inbox;
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      has_inbox = !inbox_.empty() || !cancels_.empty();
    }
    if (has_inbox) continue;
    LOOM_CHECK(!sched_.has_unfinished(), "scheduler made no progress with ", sched_.num_waiting(),
               " waiting and ", sched_.num_running(), " running sequences");
    if (!pending_.empty()) clock_.wait_until(pending_.begin()->first);
  }
  return steps;
}

int64_t run_until_idle(Scheduler& scheduler, StepExecutor& executor, Clock& clock,
                       Metrics& metrics, std::vector<Request> arrivals) {
  EngineLoop loop(scheduler, executor, clock, metrics);
  for (Request& r : arrivals) loop.add_arrival(std::move(r));
  return loop.run_until_idle();
}

}  // namespace loom
