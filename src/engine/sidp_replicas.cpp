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

// The ranks' binding of the coordinator (sidp_replicas.h): one worker thread per replica, jobs in
// order per replica, completions posted in the order they arrive; a group step comes back once
// every worker is done with it (replica 0's worker holds the gathered tokens).
class SidpReplicas::Channels final : public SidpBackend {
 public:
  Channels(RankEngine& rank, std::vector<std::unique_ptr<Communicator>> channels, int block_size, double keepalive_s)
      : rank_(rank), channels_(std::move(channels)), block_size_(block_size), keepalive_s_(keepalive_s) {
    for (size_t j = 0; j < channels_.size(); ++j) {
      auto w = std::make_unique<Worker>();
      w->index = int(j);
      w->channel = channels_[j].get();
      LOOM_CHECK((j == 0) == (w->channel == nullptr), "replica ", j, "'s channel");
      workers_.push_back(std::move(w));
    }
    for (auto& w : workers_) {
      Worker* p = w.get();
      p->thread = std::thread([this, p] { work(*p); });
    }
  }
  ~Channels() override { stop(); }

  Clock& clock() override { return clock_; }

  void launch_own(int replica, const StepBatch& batch, std::vector<RequestId> released) override {
    Worker& w = *workers_.at(size_t(replica));
    Job j;
    j.kind = Kind::kOwn;
    j.released = std::move(released);
    if (w.channel) j.wire = wire_of(kWireOwn, &batch, j.released);
    else j.batch = batch;
    enqueue(w, std::move(j));
  }

  void launch_group(const StepBatch& all, const std::vector<const StepBatch*>&,
                    std::vector<std::vector<RequestId>> released) override {
    LOOM_CHECK(group_left_ == 0, "a group step while one is in flight");
    group_left_ = int(workers_.size());
    group_error_.clear();
    group_result_ = StepResult{};
    for (auto& wp : workers_) {
      Worker& w = *wp;
      Job j;
      j.kind = Kind::kGroup;
      j.released = std::move(released.at(size_t(w.index)));
      if (w.channel) j.wire = wire_of(kWireGroup, &all, j.released);
      else j.batch = all;
      enqueue(w, std::move(j));
    }
  }

  void release(int replica, std::vector<RequestId> released) override {
    Worker& w = *workers_.at(size_t(replica));
    Job j;
    j.kind = Kind::kRelease;
    j.released = std::move(released);
    if (w.channel) {
      StepBatch empty;
      empty.block_size = block_size_;
      j.wire = wire_of(kWireRelease, &empty, j.released);
    }
    ++releases_in_flight_;
    enqueue(w, std::move(j));
  }

  std::vector<SidpDone> collect(bool may_wait, double) override {
    std::deque<Done> got;
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (done_.empty() && may_wait)
        done_cv_.wait_for(lk, std::chrono::milliseconds(50), [&] { return !done_.empty(); });
      got.swap(done_);
    }
    std::vector<SidpDone> out;
    for (Done& d : got) {
      if (d.kind == Kind::kRelease) {
        --releases_in_flight_;
        continue;
      }
      if (d.kind == Kind::kOwn) {
        out.push_back(SidpDone{d.replica, std::move(d.result), std::move(d.error)});
        continue;
      }
      LOOM_CHECK(d.kind == Kind::kGroup && group_left_ > 0, "replica ", d.replica, ": a group step came back twice");
      if (!d.error.empty() && group_error_.empty()) group_error_ = d.error;
      if (d.replica == 0) group_result_ = std::move(d.result);
      if (--group_left_ == 0) out.push_back(SidpDone{-1, std::move(group_result_), group_error_});
    }
    return out;
  }

  bool pending() const override {
    if (releases_in_flight_ > 0) return true;
    std::lock_guard<std::mutex> lk(mu_);
    return !done_.empty();
  }

  std::string fault() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return fault_;
  }

  // Sends stop down every channel (after the last step) and joins the workers (once).
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    for (auto& w : workers_) {
      enqueue(*w, Job{Kind::kStop, {}, {}, {}});
      {
        std::lock_guard<std::mutex> lk(w->mu);
        w->quit = true;
      }
      w->cv.notify_all();
    }
    for (auto& w : workers_)
      if (w->thread.joinable()) w->thread.join();
  }

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
  struct Worker {
    int index = 0;
    Communicator* channel = nullptr;  // null for replica 0 (rank 0 itself)
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Job> jobs;
    bool quit = false;
  };

  void work(Worker& r);
  void enqueue(Worker& r, Job j) {
    {
      std::lock_guard<std::mutex> lk(r.mu);
      r.jobs.push_back(std::move(j));
    }
    r.cv.notify_all();
  }
  void post(Done d) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!d.error.empty() && fault_.empty()) fault_ = d.error;
      done_.push_back(std::move(d));
    }
    done_cv_.notify_all();
  }
  void set_fault(const std::string& e) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (fault_.empty()) fault_ = e;
    }
    done_cv_.notify_all();
  }

  RankEngine& rank_;
  std::vector<std::unique_ptr<Communicator>> channels_;
  int block_size_;
  double keepalive_s_;
  WallClock clock_;
  std::vector<std::unique_ptr<Worker>> workers_;
  int releases_in_flight_ = 0;  // control thread only
  int group_left_ = 0;          // workers still running the group step (control thread only)
  std::string group_error_;
  StepResult group_result_;
  bool stopped_ = false;

  mutable std::mutex mu_;  // done_, fault_
  std::condition_variable done_cv_;
  std::deque<Done> done_;
  std::string fault_;
};

void SidpReplicas::Channels::work(Worker& r) {
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

SidpReplicas::SidpReplicas(RankEngine& rank, std::vector<std::unique_ptr<Communicator>> channels,
                           const EngineConfig& config, std::unique_ptr<LayoutPolicy> policy, double keepalive_s,
                           PricedSidpBackend::Pricer pricer)
    : rank_(rank) {
  const PlanSet& plans = rank.plans();
  const int D = plans.plan(0).dp;
  LOOM_CHECK(int(channels.size()) == D, "channels for ", channels.size(), " of ", D, " replicas");
  // Every replica's pool: the blocks one replica holds under the plan (every plan of the set has
  // one placement, plan_set.h).
  const KvPoolShape pool = rank.pools(0);
  const SchedulerConfig sc =
      scheduler_config(config, 1, KvPoolShape{1, 1, pool.blocks_per_pool, 1}, plans.name(0));
  channels_ = std::make_unique<Channels>(rank, std::move(channels), config.block_size, keepalive_s);
  SidpBackend* backend = channels_.get();
  if (pricer) {
    priced_ = std::make_unique<PricedSidpBackend>(D, std::move(pricer), channels_.get());
    backend = priced_.get();
  }
  coord_ = std::make_unique<SidpCoordinator>(plans, sc, std::move(policy), *backend);
}

SidpReplicas::~SidpReplicas() {
  try {
    shut_down();
  } catch (const std::exception&) {
  }
}

Clock& SidpReplicas::clock() { return priced_ ? priced_->clock() : channels_->clock(); }
std::string SidpReplicas::fault() const { return channels_->fault(); }
std::vector<Sequence> SidpReplicas::run(std::vector<Request> requests) {
  const int vocab = rank_.model().config.vocab_size;
  for (const Request& r : requests)
    for (TokenId t : r.prompt)
      if (t < 0 || t >= vocab) fail("request ", r.id, ": token id ", t, " is outside the vocabulary [0, ", vocab, ")");
  std::vector<Sequence> done = coord_->run(std::move(requests));
  const std::string broken = fault();
  if (!broken.empty()) fail(broken);
  return done;
}

void SidpReplicas::shut_down() {
  if (shut_) return;
  shut_ = true;
  // The steps in flight come back first (their results are dropped if nobody collects them).
  coord_->drain();
  channels_->stop();
}

}  // namespace loom
