// SiDP replicas stepping on their own under WaS, in lockstep under CaS (sidp_replicas.h).
#include "engine/sidp_replicas.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "comm/byte_message.h"
#include "core/clock.h"
#include "core/error.h"
#include "engine/dist_engine.h"
#include "engine/policy_registry.h"
#include "engine/step_codec.h"

namespace loom {

namespace {

// The first byte of every message down a channel; an own or group step's descriptor follows it.
enum Wire : uint8_t { kWireStop = 0, kWireKeepAlive = 1, kWireOwn = 2, kWireGroup = 3, kWireRelease = 4 };
constexpr int kTagTokens = 143;  // an own step's tokens, rank j -> rank 0 on channel j


std::vector<uint8_t> wire_of(uint8_t kind, const StepBatch* batch, const std::vector<RequestId>& released) {
  std::vector<uint8_t> body;
  if (batch) encode_step(*batch, released, body);
  std::vector<uint8_t> w;
  w.reserve(body.size() + 1);
  w.push_back(kind);
  w.insert(w.end(), body.begin(), body.end());
  return w;
}

}  // namespace

// The policy's trait (PolicySpec::replicas_on_their_own: policies/fixed.cpp, policies/sidp.cpp).
bool sidp_independent(const PlanSet& plans, const std::string& policy) {
  return policy_spec(policy).replicas_on_their_own(plans);
}

std::vector<std::unique_ptr<Communicator>> split_replica_channels(Communicator& world) {
  std::vector<std::unique_ptr<Communicator>> out(size_t(world.size()));
  for (int j = 1; j < world.size(); ++j) {
    const bool in = world.rank() == 0 || world.rank() == j;
    std::unique_ptr<Communicator> c = world.split(in ? 0 : -1, world.rank() == 0 ? 0 : 1);
    if (in) out[size_t(j)] = std::move(c);
  }
  return out;
}

int64_t follow_replica(Communicator& ctl, RankEngine& rank, const std::function<void(const StepBatch&)>& before_step) {
  LOOM_CHECK(ctl.size() == 2 && ctl.rank() == 1, "a replica channel joins rank 0 and one follower");
  std::vector<uint8_t> wire, inl;
  int64_t steps = 0;
  for (;;) {
    broadcast_descriptor(ctl, wire, inl);
    LOOM_CHECK(!wire.empty(), "an empty message on a replica channel");
    const uint8_t kind = wire[0];
    if (kind == kWireStop) return steps;
    if (kind == kWireKeepAlive) continue;
    LOOM_CHECK(kind == kWireOwn || kind == kWireGroup || kind == kWireRelease, "message kind ", int(kind),
               " on a replica channel");
    DecodedStep d = decode_step(wire.data() + 1, wire.size() - 1);
    LOOM_CHECK(d.command == StepCommand::kStep, "a replica channel carries steps");
    if (kind == kWireRelease) {
      rank.release(d.released);
      continue;
    }
    if (before_step) before_step(d.batch);
    if (kind == kWireOwn) {
      const StepResult r = rank.step_replica(d.batch, d.released);
      send_message(ctl, 0, kTagTokens, encode_sampled(r));
    } else {
      rank.step(d.batch, d.released);
    }
    ++steps;
  }
}

// A replica's executor: its steps run through the worker thread (EngineLoop::begin_step /
// end_step), so execute() is never called; release() collects what the next command drops.
class SidpReplicas::Executor final : public StepExecutor {
 public:
  StepResult execute(const StepBatch&) override {
    fail("SiDP replica steps run through EngineLoop::begin_step / end_step (sidp_replicas.h)");
  }
  void release(RequestId id) override { released.push_back(id); }
  std::vector<RequestId> released;
};

struct SidpReplicas::Replica {
  int index = 0;
  Communicator* channel = nullptr;  // null for replica 0 (rank 0 itself)
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<Executor> exec;
  std::unique_ptr<EngineLoop> loop;
  std::optional<EngineLoop::Pending> inflight;  // its own step, on the worker
  int64_t own_steps = 0;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  bool quit = false;
};

SidpReplicas::SidpReplicas(RankEngine& rank, std::vector<std::unique_ptr<Communicator>> channels,
                           const EngineConfig& config, std::unique_ptr<LayoutPolicy> policy, double keepalive_s)
    : rank_(rank), channels_(std::move(channels)), config_(config), policy_(std::move(policy)),
      keepalive_s_(keepalive_s) {
  const PlanSet& plans = rank.plans();
  const int D = plans.plan(0).dp;
  LOOM_CHECK(int(channels_.size()) == D, "channels for ", channels_.size(), " of ", D, " replicas");
  was_ = cas_ = -1;
  for (int id = 0; id < plans.size(); ++id) {
    (plans.plan(id).sidp_cas ? cas_ : was_) = id;
    stats_.push_back(PlanStats{plans.name(id)});
  }
  LOOM_CHECK(was_ >= 0, "SiDP replicas need a WaS plan in ", plans.to_string());
  mode_plan_ = 0;
  lockstep_ = plans.plan(0).sidp_cas;
  // Every replica's pool: the blocks one replica holds under the plan (every plan of the set has
  // one placement, plan_set.h).
  const KvPoolShape pool = rank.pools(0);
  if (pool.blocks_per_pool < 1)
    fail("plan ", plans.name(0), ": the KV budget of some rank holds no block of ", config.block_size,
         " tokens for its layers and KV heads; raise --kv-cache-bytes");
  for (int j = 0; j < D; ++j) {
    auto r = std::make_unique<Replica>();
    r->index = j;
    r->channel = channels_[size_t(j)].get();
    LOOM_CHECK((j == 0) == (r->channel == nullptr), "replica ", j, "'s channel");
    SchedulerConfig sc;
    sc.max_num_seqs = config.max_num_seqs;
    sc.max_tokens_per_step = config.max_tokens_per_step;
    sc.block_size = config.block_size;
    sc.max_model_len = config.max_model_len;
    sc.enable_chunked_prefill = config.enable_chunked_prefill;
    sc.pool_shapes = {KvPoolShape{1, 1, pool.blocks_per_pool, 1}};
    sc.num_blocks = pool.blocks_per_pool;
    r->sched = std::make_unique<Scheduler>(sc);
    r->exec = std::make_unique<Executor>();
    r->loop = std::make_unique<EngineLoop>(*r->sched, *r->exec, clock_, metrics_, static_cast<StepPlanner*>(this));
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
  for (auto& r : replicas_) {
    Replica* p = r.get();
    p->thread = std::thread([this, p] { work(*p); });
  }
}

void SidpReplicas::choose_plan(StepBatch& b) {
  b.plan_id = lockstep_ ? mode_plan_ : was_;
  b.plan = rank_.plans().name(b.plan_id);
}

SidpReplicas::~SidpReplicas() {
  try {
    shut_down();
  } catch (const std::exception&) {
  }
}

// ---- the worker thread of one replica ----

void SidpReplicas::work(Replica& r) {
  std::vector<uint8_t> inl;
  const auto period = std::chrono::duration<double>(keepalive_s_);
  for (;;) {
    Job job;
    bool keepalive = false;
    {
      std::unique_lock<std::mutex> lk(r.mu);
      r.cv.wait_for(lk, period, [&] { return !r.jobs.empty() || r.quit; });
      if (r.jobs.empty()) {
        if (r.quit) return;
        if (!r.channel || !fault().empty()) continue;
        keepalive = true;
      } else {
        job = std::move(r.jobs.front());
        r.jobs.pop_front();
      }
    }
    if (keepalive) {
      try {
        std::vector<uint8_t> w{kWireKeepAlive};
        broadcast_descriptor(*r.channel, w, inl);
      } catch (const std::exception& e) {
        set_fault(cat("SiDP replica ", r.index, ": ", e.what()));
      }
      continue;
    }
    Done d;
    d.replica = r.index;
    d.kind = job.kind;
    try {
      if (job.kind == Kind::kStop) {
        if (r.channel && fault().empty()) {
          std::vector<uint8_t> w{kWireStop};
          broadcast_descriptor(*r.channel, w, inl);
        }
        return;
      }
      if (!fault().empty()) fail(fault());
      if (!r.channel) {
        if (job.kind == Kind::kOwn) d.result = rank_.step_replica(job.batch, job.released);
        else if (job.kind == Kind::kGroup) d.result = rank_.step(job.batch, job.released);
        else rank_.release(job.released);
      } else {
        broadcast_descriptor(*r.channel, job.wire, inl);
        if (job.kind == Kind::kOwn) {
          const std::vector<uint8_t> tokens = recv_message(*r.channel, 1, kTagTokens, "a replica's tokens");
          d.result = decode_sampled(tokens.data(), tokens.size());
        }
      }
    } catch (const std::exception& e) {
      d.error = cat("SiDP replica ", r.index, ": ", e.what());
      if (job.kind == Kind::kStop) return;
    }
    post(std::move(d));
  }
}

void SidpReplicas::enqueue(Replica& r, Job j) {
  {
    std::lock_guard<std::mutex> lk(r.mu);
    r.jobs.push_back(std::move(j));
  }
  r.cv.notify_all();
}

void SidpReplicas::post(Done d) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!d.error.empty() && fault_.empty()) fault_ = d.error;
    done_.push_back(std::move(d));
  }
  done_cv_.notify_all();
}

void SidpReplicas::set_fault(const std::string& e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (fault_.empty()) fault_ = e;
  }
  done_cv_.notify_all();
}

std::string SidpReplicas::fault() const {
  std::lock_guard<std::mutex> lk(mu_);
  return fault_;
}

// ---- LiveLoop ----

void SidpReplicas::submit(Request r) {
  replicas_[size_t(replica_of(r.id, num_replicas()))]->loop->submit(std::move(r));
  done_cv_.notify_all();
}

void SidpReplicas::cancel(RequestId id) {
  replicas_[size_t(replica_of(id, num_replicas()))]->loop->cancel(id);
  done_cv_.notify_all();
}

void SidpReplicas::set_stop_check(StopCheck check) {
  for (auto& r : replicas_) r->loop->set_stop_check(check);
}

LoopStats SidpReplicas::stats() const {
  LoopStats s;
  for (const auto& r : replicas_) {
    const LoopStats x = r->loop->stats();
    s.num_running += x.num_running;
    s.num_waiting += x.num_waiting;
    s.kv_blocks_used += x.kv_blocks_used;
    s.num_preemptions += x.num_preemptions;
    s.num_steps += x.num_steps;
  }
  return s;
}

Scheduler& SidpReplicas::scheduler(int replica) { return *replicas_.at(size_t(replica))->sched; }

int SidpReplicas::num_blocks() const {
  int n = 0;
  for (const auto& r : replicas_) n += r->sched->num_blocks();
  return n;
}

std::vector<int64_t> SidpReplicas::own_steps() const {
  std::vector<int64_t> out;
  for (const auto& r : replicas_) out.push_back(r->own_steps);
  return out;
}

bool SidpReplicas::anything_in_flight() const {
  if (releases_in_flight_ > 0) return true;
  for (const auto& r : replicas_)
    if (r->inflight) return true;
  return false;
}

bool SidpReplicas::idle() const {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!done_.empty()) return false;
  }
  if (!arrivals_.empty() || anything_in_flight()) return false;
  for (const auto& r : replicas_)
    if (!r->loop->idle() || !r->exec->released.empty()) return false;
  return true;
}

void SidpReplicas::inject_due() {
  const double now = clock_.now();
  while (!arrivals_.empty() && arrivals_.begin()->first <= now) {
    Request r = std::move(arrivals_.begin()->second);
    arrivals_.erase(arrivals_.begin());
    replicas_[size_t(replica_of(r.id, num_replicas()))]->loop->submit(std::move(r));
  }
}

bool SidpReplicas::step() {
  inject_due();
  if (lockstep_) {
    const bool stepped = group_step();
    if (!stepped) release_idle();
    const bool collected = collect(!stepped && anything_in_flight());
    return stepped || collected;
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
void SidpReplicas::release_idle() {
  if (!fault().empty()) return;
  for (auto& r : replicas_) {
    if (r->inflight || r->exec->released.empty()) continue;
    Job j;
    j.kind = Kind::kRelease;
    j.released.swap(r->exec->released);
    if (r->channel) {
      StepBatch empty;
      empty.block_size = config_.block_size;
      j.wire = wire_of(kWireRelease, &empty, j.released);
    }
    ++releases_in_flight_;
    enqueue(*r, std::move(j));
  }
}

bool SidpReplicas::launch_own() {
  bool launched = false;
  if (draining_) return false;
  const std::string broken = fault();
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
    Job j;
    j.kind = Kind::kOwn;
    j.released.swap(r.exec->released);
    if (r.channel) j.wire = wire_of(kWireOwn, &p->batch, j.released);
    else j.batch = p->batch;
    r.inflight = std::move(p);
    enqueue(r, std::move(j));
  }
  if (!launched) release_idle();
  return launched;
}

void SidpReplicas::count(int plan, const StepBatch& b) {
  PlanStats& st = stats_[size_t(plan)];
  if (plan != mode_plan_) {
    ++st.switches;
    mode_plan_ = plan;
  }
  ++st.steps;
  st.tokens += b.num_tokens;
}

// One observation per round of D own steps (see the top).
void SidpReplicas::observe(const StepBatch& b) {
  round_prompts_ = round_prompts_ || b.num_prefill_tokens > 0;
  if (++round_steps_ < num_replicas()) return;
  int64_t running = 0;
  for (const auto& r : replicas_) running += r->sched->num_running();
  policy_->advance(now_seconds());  // the policy's window in seconds reads this clock (policy.h)
  const int id = policy_->choose_effective(double(running) / double(num_replicas()), round_prompts_);
  round_steps_ = 0;
  round_prompts_ = false;
  if (id == cas_ && cas_ >= 0) draining_ = true;
}

bool SidpReplicas::collect(bool may_wait) {
  std::deque<Done> got;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (done_.empty() && may_wait && anything_in_flight())
      done_cv_.wait_for(lk, std::chrono::milliseconds(50), [&] { return !done_.empty(); });
    got.swap(done_);
  }
  bool stepped = false;
  for (Done& d : got) {
    Replica& r = *replicas_[size_t(d.replica)];
    if (d.kind == Kind::kRelease) {
      --releases_in_flight_;
      continue;
    }
    LOOM_CHECK(d.kind == Kind::kOwn && r.inflight.has_value(), "replica ", d.replica, ": a step came back twice");
    EngineLoop::Pending p = std::move(*r.inflight);
    r.inflight.reset();
    stepped = true;
    if (!d.error.empty()) {
      r.loop->end_step(p, nullptr, d.error);
      continue;
    }
    ++r.own_steps;
    count(p.batch.plan_id, p.batch);
    r.loop->end_step(p, &d.result);
    observe(p.batch);
  }
  return stepped;
}

bool SidpReplicas::group_step() {
  const int D = num_replicas();
  std::vector<std::optional<EngineLoop::Pending>> parts(static_cast<size_t>(D));
  bool any = false;
  for (int j = 0; j < D; ++j) {
    parts[size_t(j)] = replicas_[size_t(j)]->loop->begin_step();
    any = any || parts[size_t(j)].has_value();
  }
  if (!any) return false;
  const std::string broken = fault();
  if (!broken.empty()) {
    for (auto& p : parts)
      if (p) replicas_[size_t(&p - parts.data())]->loop->end_step(*p, nullptr, broken);
    return true;
  }
  // One descriptor: every replica's part in replica order (a replica without one is a dummy, S10).
  StepBatch all;
  all.step_index = group_index_++;
  all.block_size = config_.block_size;
  for (auto& p : parts) {
    if (!p) continue;
    const StepBatch& b = p->batch;
    all.seqs.insert(all.seqs.end(), b.seqs.begin(), b.seqs.end());
    all.num_tokens += b.num_tokens;
    all.num_prefill_tokens += b.num_prefill_tokens;
    all.num_decode_tokens += b.num_decode_tokens;
    all.num_sampled += b.num_sampled;
  }
  policy_->advance(now_seconds());
  const int plan = policy_->choose(all);
  LOOM_CHECK(plan >= 0 && plan < rank_.plans().size(), "policy ", policy_->describe(), " chose plan ", plan);
  all.plan_id = plan;
  all.plan = rank_.plans().name(plan);
  for (auto& p : parts)
    if (p) {
      p->batch.plan_id = plan;
      p->batch.plan = all.plan;
      p->metrics.plan = all.plan;
      p->metrics.replica = int(&p - parts.data());
      p->metrics.lockstep = true;
    }
  for (int j = 0; j < D; ++j) {
    Replica& r = *replicas_[size_t(j)];
    Job job;
    job.kind = Kind::kGroup;
    job.released.swap(r.exec->released);
    if (r.channel) job.wire = wire_of(kWireGroup, &all, job.released);
    else job.batch = all;
    enqueue(r, std::move(job));
  }
  // Wait for every worker (replica 0's holds the gathered tokens; the others only sent).
  StepResult result;
  std::string error;
  int left = D;
  while (left > 0) {
    std::deque<Done> got;
    {
      std::unique_lock<std::mutex> lk(mu_);
      done_cv_.wait(lk, [&] { return !done_.empty(); });
      got.swap(done_);
    }
    for (Done& d : got) {
      if (d.kind == Kind::kRelease) {
        --releases_in_flight_;
        continue;
      }
      LOOM_CHECK(d.kind == Kind::kGroup, "replica ", d.replica, ": an own step came back during a group step");
      --left;
      if (!d.error.empty() && error.empty()) error = d.error;
      if (d.replica == 0) result = std::move(d.result);
    }
  }
  ++group_steps_;
  if (error.empty()) count(plan, all);
  for (int j = 0; j < D; ++j) {
    auto& p = parts[size_t(j)];
    if (!p) continue;
    EngineLoop& loop = *replicas_[size_t(j)]->loop;
    if (!error.empty()) {
      loop.end_step(*p, nullptr, error);
      continue;
    }
    StepResult mine;
    for (const SampledToken& t : result.sampled)
      if (replica_of(t.seq_id, D) == j) mine.sampled.push_back(t);
    for (const TokenLogprobs& l : result.logprobs)
      if (replica_of(l.seq_id, D) == j) mine.logprobs.push_back(l);
    loop.end_step(*p, &mine);
  }
  // A step the policy gave back to WaS ran in lockstep under the WaS plan; from the next step the
  // replicas are independent again.
  if (plan != cas_) lockstep_ = false;
  return true;
}

std::vector<Sequence> SidpReplicas::run(std::vector<Request> requests) {
  const int vocab = rank_.model().config.vocab_size;
  for (const Request& r : requests)
    for (TokenId t : r.prompt)
      if (t < 0 || t >= vocab) fail("request ", r.id, ": token id ", t, " is outside the vocabulary [0, ", vocab, ")");
  std::vector<Sequence> done;
  auto prev = on_finish;
  on_finish = [&](const Sequence& s) {
    done.push_back(s);
    if (prev) prev(s);
  };
  const double t0 = clock_.now();
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
        clock_.wait_until(arrivals_.begin()->first);
        continue;
      }
      // Submitted requests are taken in by the next step; a scheduler with work that runs nothing
      // twice in a row is a bug (it always makes progress when the cache holds one maximal request).
      LOOM_CHECK(++idle_rounds < 3, "SiDP replicas made no progress");
    }
  } catch (...) {
    on_finish = prev;
    throw;
  }
  on_finish = prev;
  const std::string broken = fault();
  if (!broken.empty()) fail(broken);
  return done;
}

void SidpReplicas::shut_down() {
  if (shut_) return;
  shut_ = true;
  // The steps in flight come back first (their results are dropped if nobody collects them).
  while (anything_in_flight()) collect(true);
  release_idle();
  while (anything_in_flight()) collect(true);
  for (auto& r : replicas_) {
    enqueue(*r, Job{Kind::kStop, {}, {}, {}});
    {
      std::lock_guard<std::mutex> lk(r->mu);
      r->quit = true;
    }
    r->cv.notify_all();
  }
  for (auto& r : replicas_)
    if (r->thread.joinable()) r->thread.join();
}

}  // namespace loom
