// SiDP's coordinator and its event-clock backend (sidp_coordinator.h).
#include "engine/sidp_coordinator.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/plan.h"

namespace loom {

// A replica's executor: its steps run through the backend (EngineLoop::begin_step / end_step), so
// execute() is never called; release() collects what the next command drops.
class SidpCoordinator::Releases final : public StepExecutor {
 public:
  StepResult execute(const StepBatch&) override {
    fail("SiDP replica steps run through EngineLoop::begin_step / end_step (sidp_coordinator.h)");
  }
  void release(RequestId id) override { ids.push_back(id); }
  std::vector<RequestId> take() {
    std::vector<RequestId> out;
    out.swap(ids);
    return out;
  }
  std::vector<RequestId> ids;
};

struct SidpCoordinator::Replica {
  int index = 0;
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<Releases> exec;
  std::unique_ptr<EngineLoop> loop;
  std::optional<EngineLoop::Pending> inflight;  // its own step
  std::optional<EngineLoop::Pending> part;      // its part of the group step in flight
  int64_t own_steps = 0;
};

SidpCoordinator::SidpCoordinator(const PlanSet& plans, const SchedulerConfig& replica,
                                 std::unique_ptr<LayoutPolicy> policy, SidpBackend& backend)
    : plans_(plans), policy_(std::move(policy)), backend_(backend), block_size_(replica.block_size) {
  const int D = plans.plan(0).dp;
  LOOM_CHECK(D >= 1, "SiDP replicas: dp ", D);
  for (int id = 0; id < plans.size(); ++id) {
    (plans.plan(id).sidp_cas ? cas_ : was_) = id;
    stats_.push_back(PlanStats{plans.name(id)});
  }
  LOOM_CHECK(was_ >= 0, "SiDP replicas need a WaS plan in ", plans.to_string());
  lockstep_ = plans.plan(0).sidp_cas;
  for (int j = 0; j < D; ++j) {
    auto r = std::make_unique<Replica>();
    r->index = j;
    r->sched = std::make_unique<Scheduler>(replica);
    r->exec = std::make_unique<Releases>();
    r->loop = std::make_unique<EngineLoop>(*r->sched, *r->exec, backend_.clock(), metrics_,
                                           static_cast<StepPlanner*>(this));
    r->loop->on_batch = [this](const StepBatch& b) {
      if (on_batch) on_batch(b);
    };
    r->loop->on_token = [this](const TokenEvent& ev) {
      if (on_token) on_token(ev);
    };
    r->loop->on_finish = [this](const Sequence& s) {
      if (on_finish) on_finish(s);
    };
    replicas_.push_back(std::move(r));
  }
}

SidpCoordinator::~SidpCoordinator() = default;

// Every replica loop's plan control: the WaS plan for an own step; in lockstep the group's mode
// until the policy chooses on the whole batch (launch_group).
void SidpCoordinator::choose_plan(StepBatch& b) {
  b.plan_id = lockstep_ ? mode_plan_ : was_;
  b.plan = plans_.name(b.plan_id);
}

// ---- LiveLoop ----

void SidpCoordinator::submit(Request r) { replicas_[size_t(replica_of(r.id, num_replicas()))]->loop->submit(std::move(r)); }

void SidpCoordinator::cancel(RequestId id) { replicas_[size_t(replica_of(id, num_replicas()))]->loop->cancel(id); }

void SidpCoordinator::set_stop_check(StopCheck check) {
  for (auto& r : replicas_) r->loop->set_stop_check(check);
}

LoopStats SidpCoordinator::stats() const {
  LoopStats s;
  for (const auto& r : replicas_) s += r->loop->stats();
  return s;
}

Scheduler& SidpCoordinator::scheduler(int replica) { return *replicas_.at(size_t(replica))->sched; }

int SidpCoordinator::num_blocks() const {
  int n = 0;
  for (const auto& r : replicas_) n += r->sched->num_blocks();
  return n;
}

std::vector<int64_t> SidpCoordinator::own_steps() const {
  std::vector<int64_t> out;
  for (const auto& r : replicas_) out.push_back(r->own_steps);
  return out;
}

bool SidpCoordinator::anything_in_flight() const {
  if (group_in_flight_ || backend_.pending()) return true;
  for (const auto& r : replicas_)
    if (r->inflight) return true;
  return false;
}

bool SidpCoordinator::idle() const {
  if (!arrivals_.empty() || anything_in_flight()) return false;
  for (const auto& r : replicas_)
    if (!r->loop->idle() || !r->exec->ids.empty()) return false;
  return true;
}

// Arrivals due join their replica's scheduler now (EngineLoop::poll), before any step launches.
void SidpCoordinator::inject_due() {
  const double now = backend_.clock().now();
  while (!arrivals_.empty() && arrivals_.begin()->first <= now) {
    Request r = std::move(arrivals_.begin()->second);
    arrivals_.erase(arrivals_.begin());
    EngineLoop& loop = *replicas_[size_t(replica_of(r.id, num_replicas()))]->loop;
    loop.submit(std::move(r));
    loop.poll();
  }
}

bool SidpCoordinator::step() {
  inject_due();
  if (lockstep_) {
    const bool launched = !group_in_flight_ && launch_group();
    if (!launched && !group_in_flight_) release_idle();
    const bool collected = collect(!launched);
    return launched || collected;
  }
  const bool launched = launch_own();
  const bool collected = collect(!launched);
  if (draining_ && !anything_in_flight()) {
    // Every replica is at a step boundary: the group steps in lockstep from here (S11).
    draining_ = false;
    lockstep_ = true;
  }
  return launched || collected;
}

// Sequences that finished on a replica with nothing more to run leave its KV store now (no later
// step of that replica would carry them).
void SidpCoordinator::release_idle() {
  if (!backend_.fault().empty()) return;
  for (auto& r : replicas_)
    if (!r->inflight && !r->exec->ids.empty()) backend_.release(r->index, r->exec->take());
}

bool SidpCoordinator::launch_own() {
  if (draining_) return false;
  bool launched = false;
  const std::string broken = backend_.fault();
  for (auto& rp : replicas_) {
    Replica& r = *rp;
    if (r.inflight) continue;
    std::optional<EngineLoop::Pending> p = r.loop->begin_step();
    if (!p) continue;
    launched = true;
    p->metrics.replica = r.index;
    if (!broken.empty()) {
      r.loop->end_step(*p, nullptr, broken);
      continue;
    }
    r.inflight = std::move(p);
    backend_.launch_own(r.index, r.inflight->batch, r.exec->take());
  }
  if (!launched) release_idle();
  return launched;
}

bool SidpCoordinator::launch_group() {
  const int D = num_replicas();
  bool any = false;
  for (auto& r : replicas_) {
    r->part = r->loop->begin_step();
    any = any || r->part.has_value();
  }
  if (!any) return false;
  const std::string broken = backend_.fault();
  if (!broken.empty()) {
    for (auto& r : replicas_)
      if (r->part) r->loop->end_step(*r->part, nullptr, broken), r->part.reset();
    return true;
  }
  // One batch: every replica's part in replica order (a replica without one is a dummy, S10).
  StepBatch all;
  all.step_index = group_index_++;
  all.block_size = block_size_;
  std::vector<const StepBatch*> parts(size_t(D), nullptr);
  for (auto& r : replicas_) {
    if (!r->part) continue;
    const StepBatch& b = r->part->batch;
    all.seqs.insert(all.seqs.end(), b.seqs.begin(), b.seqs.end());
    all.num_tokens += b.num_tokens;
    all.num_prefill_tokens += b.num_prefill_tokens;
    all.num_decode_tokens += b.num_decode_tokens;
    all.num_sampled += b.num_sampled;
  }
  policy_->advance(backend_.clock().now());
  const int plan = policy_->choose(all);
  LOOM_CHECK(plan >= 0 && plan < plans_.size(), "policy ", policy_->describe(), " chose plan ", plan);
  all.plan_id = plan;
  all.plan = plans_.name(plan);
  std::vector<std::vector<RequestId>> released(static_cast<size_t>(D));
  for (auto& r : replicas_) {
    released[size_t(r->index)] = r->exec->take();
    if (!r->part) continue;
    EngineLoop::Pending& p = *r->part;
    p.batch.plan_id = plan;
    p.batch.plan = all.plan;
    p.metrics.plan = all.plan;
    p.metrics.replica = r->index;
    p.metrics.lockstep = true;
    parts[size_t(r->index)] = &p.batch;
  }
  group_in_flight_ = true;
  group_plan_ = plan;
  group_tokens_ = all.num_tokens;
  backend_.launch_group(all, parts, std::move(released));
  return true;
}

void SidpCoordinator::count(int plan, int64_t tokens) {
  PlanStats& st = stats_[size_t(plan)];
  if (plan != mode_plan_) {
    ++st.switches;
    mode_plan_ = plan;
  }
  ++st.steps;
  st.tokens += tokens;
}

// One observation per round of D own steps (see the top).
void SidpCoordinator::observe(const StepBatch& b) {
  round_prompts_ = round_prompts_ || b.num_prefill_tokens > 0;
  if (++round_steps_ < num_replicas()) return;
  int64_t running = 0;
  for (const auto& r : replicas_) running += r->sched->num_running();
  policy_->advance(backend_.clock().now());  // the policy's window in seconds reads this clock (policy.h)
  const int id = policy_->choose_effective(double(running) / double(num_replicas()), round_prompts_);
  round_steps_ = 0;
  round_prompts_ = false;
  if (id == cas_ && cas_ >= 0) draining_ = true;
}

void SidpCoordinator::apply_own(Replica& r, SidpDone& d) {
  LOOM_CHECK(r.inflight.has_value(), "replica ", r.index, ": a step came back twice");
  EngineLoop::Pending p = std::move(*r.inflight);
  r.inflight.reset();
  if (!d.error.empty()) {
    r.loop->end_step(p, nullptr, d.error);
    return;
  }
  ++r.own_steps;
  count(p.batch.plan_id, p.batch.num_tokens);
  r.loop->end_step(p, &d.result);
  if (on_step) on_step();
  observe(p.batch);
}

void SidpCoordinator::apply_group(SidpDone& d) {
  LOOM_CHECK(group_in_flight_, "a group step came back twice");
  group_in_flight_ = false;
  ++group_steps_;
  const int D = num_replicas();
  if (d.error.empty()) count(group_plan_, group_tokens_);
  for (auto& r : replicas_) {
    if (!r->part) continue;
    EngineLoop::Pending p = std::move(*r->part);
    r->part.reset();
    if (!d.error.empty()) {
      r->loop->end_step(p, nullptr, d.error);
      continue;
    }
    StepResult mine;
    for (const SampledToken& t : d.result.sampled)
      if (replica_of(t.seq_id, D) == r->index) mine.sampled.push_back(t);
    for (const TokenLogprobs& l : d.result.logprobs)
      if (replica_of(l.seq_id, D) == r->index) mine.logprobs.push_back(l);
    r->loop->end_step(p, &mine);
    if (on_step) on_step();
  }
  // A step the policy gave back to WaS ran in lockstep under the WaS plan; from the next step the
  // replicas are independent again.
  if (group_plan_ != cas_) lockstep_ = false;
}

bool SidpCoordinator::collect(bool may_wait) {
  may_wait = may_wait && anything_in_flight();
  const double next = arrivals_.empty() ? std::numeric_limits<double>::infinity() : arrivals_.begin()->first;
  std::vector<SidpDone> got = backend_.collect(may_wait, next);
  for (SidpDone& d : got) {
    if (d.replica < 0) apply_group(d);
    else apply_own(*replicas_.at(size_t(d.replica)), d);
  }
  return !got.empty();
}

std::vector<Sequence> SidpCoordinator::run(std::vector<Request> requests) {
  std::vector<Sequence> done;
  auto prev = on_finish;
  on_finish = [&](const Sequence& s) {
    done.push_back(s);
    if (prev) prev(s);
  };
  Clock& clock = backend_.clock();
  const double t0 = clock.now();
  for (Request& r : requests) {
    r.arrival_s += t0;
    const double t = r.arrival_s;
    arrivals_.emplace(t, std::move(r));
  }
  try {
    int idle_rounds = 0;
    while (!idle()) {
      if (step()) {
        idle_rounds = 0;
        continue;
      }
      if (anything_in_flight()) continue;
      bool busy = false;
      for (const auto& r : replicas_) busy = busy || r->sched->has_unfinished();
      if (!busy && !arrivals_.empty()) {
        clock.wait_until(arrivals_.begin()->first);
        continue;
      }
      // Submitted requests are taken in by the next step; a scheduler with work that runs nothing
      // twice in a row is a bug (it always makes progress when the cache holds one maximal request).
      if (++idle_rounds < 3) continue;
      for (const auto& r : replicas_)
        if (r->sched->has_unfinished())
          fail("SiDP replicas made no progress: replica ", r->index, " holds requests that never fit (",
               r->sched->num_waiting(), " waiting with ", r->sched->num_free_blocks(), " free KV blocks)");
      fail("SiDP replicas made no progress");
    }
  } catch (...) {
    on_finish = prev;
    throw;
  }
  on_finish = prev;
  return done;
}

void SidpCoordinator::drain() {
  while (anything_in_flight()) collect(true);
  release_idle();
  while (anything_in_flight()) collect(true);
}

// ---- the event clock ----

PricedSidpBackend::PricedSidpBackend(int replicas, Pricer pricer, SidpBackend* execute)
    : replicas_(replicas), pricer_(std::move(pricer)), execute_(execute) {
  LOOM_CHECK(pricer_, "a priced SiDP backend needs a pricer");
}

SidpDone PricedSidpBackend::run_there(int replica) {
  for (;;) {
    std::vector<SidpDone> got = execute_->collect(true, std::numeric_limits<double>::infinity());
    if (got.empty()) continue;
    LOOM_CHECK(got.size() == 1 && got.front().replica == replica, "the executing backend returned ", got.size(),
               " steps for one");
    return std::move(got.front());
  }
}

void PricedSidpBackend::push(double seconds, SidpDone d) {
  LOOM_CHECK(seconds >= 0, "a step priced at ", seconds, " s");
  q_.push(Event{clock_.now() + seconds, seq_++, std::move(d)});
}

void PricedSidpBackend::launch_own(int replica, const StepBatch& batch, std::vector<RequestId> released) {
  std::vector<const StepBatch*> parts(size_t(replicas_), nullptr);
  parts.at(size_t(replica)) = &batch;
  const double dt = pricer_(batch.plan_id, parts);
  SidpDone d;
  d.replica = replica;
  if (execute_) {
    execute_->launch_own(replica, batch, std::move(released));
    d = run_there(replica);
  } else {
    for (const ScheduledSeq& s : batch.seqs)
      if (s.sample) d.result.sampled.push_back(SampledToken{s.seq_id, 0});
  }
  push(dt, std::move(d));
}

void PricedSidpBackend::launch_group(const StepBatch& all, const std::vector<const StepBatch*>& parts,
                                     std::vector<std::vector<RequestId>> released) {
  const double dt = pricer_(all.plan_id, parts);
  SidpDone d;
  d.replica = -1;
  if (execute_) {
    execute_->launch_group(all, parts, std::move(released));
    d = run_there(-1);
  } else {
    for (const ScheduledSeq& s : all.seqs)
      if (s.sample) d.result.sampled.push_back(SampledToken{s.seq_id, 0});
  }
  push(dt, std::move(d));
}

void PricedSidpBackend::release(int replica, std::vector<RequestId> released) {
  if (!execute_) return;
  execute_->release(replica, std::move(released));
  while (execute_->pending()) execute_->collect(true, std::numeric_limits<double>::infinity());
}

std::vector<SidpDone> PricedSidpBackend::collect(bool may_wait, double next_arrival_s) {
  std::vector<SidpDone> out;
  if (q_.empty()) return out;
  if (q_.top().t > clock_.now()) {
    if (!may_wait) return out;
    clock_.wait_until(std::min(q_.top().t, next_arrival_s));
  }
  while (!q_.empty() && q_.top().t <= clock_.now()) {
    out.push_back(q_.top().done);
    q_.pop();
  }
  return out;
}

}  // namespace loom
