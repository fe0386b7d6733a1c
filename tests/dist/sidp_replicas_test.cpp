// SiDP replicas stepping on their own under WaS (engine/sidp_replicas.h; ../shared/papers/001 §4.2:
// the owner is oblivious, so replicas need no lockstep) and in lockstep under CaS (§4.3), with the
// orchestrated switch between the two (S11). What each rank did is read from that rank's own
// RankEngine::after_step calls (its thread, its clock), not from rank 0's bookkeeping.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "engine/dist_engine.h"
#include "engine/policy.h"
#include "engine/sidp_replicas.h"
#include "model/loader.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

using test::alone;
using test::expect_tokens;
using test::greedy_requests;
using test::random_prompts;

using SteadyClock = std::chrono::steady_clock;

// One step as the rank that ran it saw it.
struct RankStep {
  SteadyClock::time_point start, end;
  std::vector<int64_t> seqs;
  int plan = 0;
};

struct Recorded {
  std::mutex mu;
  std::vector<std::vector<RankStep>> steps;  // per world rank, in order
  std::vector<SteadyClock::time_point> began;  // per world rank: when its current step began
};

DistOptions options(int D, const std::string& plan, const std::string& policy, const std::shared_ptr<Model>& model,
                    Recorded* rec) {
  DistOptions o;
  o.comm = "local";
  o.plans = {plan};
  o.policy = policy;
  o.ranks = D;
  o.engine.max_tokens_per_step = 16;
  o.engine.max_num_seqs = 64;
  o.engine.kv_cache_bytes = int64_t(8) << 20;
  o.comm_options.timeout_s = 30;
  o.load_model = [model](int) { return model; };
  if (rec) {
    rec->steps.assign(size_t(D), {});
    rec->began.assign(size_t(D), SteadyClock::now());
    // A step's start is when its descriptor reached the rank (before_step, followers only; not
    // recorded on rank 0), its end the rank's after_step.
    o.after_step = [rec](int r, RankEngine& e, const StepBatch& b, const std::vector<RequestId>&) {
      if (b.seqs.empty()) return;
      RankStep s;
      s.end = SteadyClock::now();
      for (const ScheduledSeq& q : b.seqs) s.seqs.push_back(q.seq_id);
      s.plan = e.current();
      std::lock_guard<std::mutex> lk(rec->mu);
      s.start = rec->began[size_t(r)];
      rec->steps[size_t(r)].push_back(std::move(s));
    };
  }
  return o;
}

class SidpReplicasStories : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_SHARED();
    model_ = load_model(test::stories_dir() + "/stories260K.bin");
    prompts_ = random_prompts(7, 30, 512, 5);
  }
  std::map<int64_t, std::vector<int32_t>> run(const DistOptions& o, std::vector<Request> rs,
                                               std::vector<int64_t>* own = nullptr, int64_t* group = nullptr) {
    std::map<int64_t, std::vector<int32_t>> out;
    run_distributed(o, [&](DistEngine& e) {
      for (const Sequence& s : e.run(rs)) out[s.id()] = s.output;
      if (own) {
        ASSERT_NE(e.sidp_replicas(), nullptr);
        *own = e.sidp_replicas()->own_steps();
        *group = e.sidp_replicas()->group_steps();
      }
    });
    return out;
  }
  std::shared_ptr<Model> model_;
  std::vector<std::vector<int32_t>> prompts_;
};

// sidp:was: the single-rank engine's greedy tokens and plain DP's, while every rank steps alone:
// its batches hold only its replica's sequences, and no step ran in lockstep.
TEST_F(SidpReplicasStories, WasTokensOfTheSingleRankEngineAndPlainDpWithOwnSteps) {
  const int n = 10;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts_) want.push_back(alone(model_, p, n));
  for (int D : {2, 3}) {
    SCOPED_TRACE(cat("D=", D));
    Recorded rec;
    std::vector<int64_t> own;
    int64_t group = -1;
    const auto got = run(options(D, cat("dp=", D, ",weights=owner"), "sidp:was", model_, &rec),
                         greedy_requests(prompts_, n), &own, &group);
    expect_tokens("sidp:was", model_, prompts_, want, got);
    const auto plain = run(options(D, cat("dp=", D), "fixed", model_, nullptr), greedy_requests(prompts_, n));
    EXPECT_EQ(got, plain) << "plain dp=" << D;
    EXPECT_EQ(group, 0);
    ASSERT_EQ(int(own.size()), D);
    for (int r = 0; r < D; ++r) {
      EXPECT_EQ(int64_t(rec.steps[size_t(r)].size()), own[size_t(r)]) << "rank " << r;
      EXPECT_GT(rec.steps[size_t(r)].size(), 0u) << "rank " << r;
      for (const RankStep& s : rec.steps[size_t(r)])
        for (int64_t id : s.seqs) EXPECT_EQ(replica_of(id, D), r) << "rank " << r << " stepped sequence " << id;
    }
  }
}

// Uneven load: replica 1 gets one long request and its rank is slow (50 ms before each step);
// the others get short ones (and then idle for longer than the communicator's timeout). Each rank's own record: the step counts differ, the short replicas
// take only the steps their requests need, and they are done before the slow replica has run
// three steps (in lockstep every rank would run every step, each waiting for the slow one).
TEST_F(SidpReplicasStories, UnevenReplicasStepAtTheirOwnPace) {
  constexpr int kLong = 40, kShort = 4;
  constexpr auto kSlow = std::chrono::milliseconds(50);
  for (int D : {2, 3}) {
    SCOPED_TRACE(cat("D=", D));
    // Ids 1..2D (replica id mod D): the first request of replica 1 is long, every other short.
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int> lengths;
    bool long_given = false;
    for (int i = 0; i < 2 * D; ++i) {
      const bool is_long = replica_of(i + 1, D) == 1 && !long_given;
      long_given = long_given || is_long;
      prompts.push_back(prompts_[size_t(i) % prompts_.size()]);
      lengths.push_back(is_long ? kLong : kShort);
    }
    const std::vector<Request> rs = greedy_requests(prompts, lengths);
    std::vector<std::vector<int32_t>> want;
    for (const Request& r : rs) want.push_back(alone(model_, r.prompt, r.max_tokens));
    Recorded rec;
    DistOptions o = options(D, cat("dp=", D, ",weights=owner"), "sidp:was", model_, &rec);
    // The fast replicas then wait about 2 s for their next command, twice the communicator's
    // timeout: rank 0 keeps their channels alive.
    o.comm_options.timeout_s = 1;
    o.follower_before_step = [&rec, kSlow](int r, const StepBatch&) {
      if (r == 1) std::this_thread::sleep_for(kSlow);
      std::lock_guard<std::mutex> lk(rec.mu);
      rec.began[size_t(r)] = SteadyClock::now();
    };
    std::vector<int64_t> own;
    int64_t group = -1;
    const auto got = run(o, rs, &own, &group);
    expect_tokens("uneven", model_, prompts, want, got);
    EXPECT_EQ(group, 0);
    const std::vector<RankStep>& slow = rec.steps[1];
    // The slow replica decodes its long request to the end: at least kLong - 1 decode steps.
    ASSERT_GE(int(slow.size()), kLong - 1);
    for (int r = 0; r < D; ++r) {
      if (r == 1) continue;
      const std::vector<RankStep>& fast = rec.steps[size_t(r)];
      ASSERT_GT(fast.size(), 0u) << "rank " << r;
      // Its (at most 2) requests need at most 3 prompt chunks each (16-token budget, prompts of
      // at most 40 tokens) and kShort - 1 decodes: it never stepped for the long tail.
      EXPECT_LE(int(fast.size()), 2 * 3 + kShort) << "rank " << r;
      EXPECT_LT(fast.size() + 20, slow.size()) << "rank " << r << " vs the slow replica";
      // Done before the slow replica began its third step (>= 3 x 50 ms after the start).
      EXPECT_LT(fast.back().end, slow[2].start) << "rank " << r << " waited for the slow replica";
    }
  }
}

// --policy sidp across WaS -> CaS -> WaS: a first wave whose tail (one long request per replica)
// drops the effective batch below B_th = 2 (CaS, lockstep), then a second wave of 4 requests per
// replica lifts it above (1 + h) * B_th = 3 (back to WaS, replicas on their own again). Tokens
// are the single-rank engine's throughout.
TEST_F(SidpReplicasStories, PolicyWasCasWasKeepsTheSingleRankTokens) {
  for (int D : {2, 3}) {
    SCOPED_TRACE(cat("D=", D));
    std::vector<std::vector<int32_t>> prompts;
    std::vector<Request> wave1, wave2;
    int64_t id = 1;
    auto add = [&](std::vector<Request>& wave, int max_tokens) {
      Request r;
      r.id = id;
      r.prompt = prompts_[size_t((id - 1) % int64_t(prompts_.size()))];
      r.max_tokens = max_tokens;
      r.sampling.temperature = 0;
      r.stop.ignore_eos = true;
      prompts.push_back(r.prompt);
      wave.push_back(r);
      ++id;
    };
    for (int i = 0; i < 2 * D; ++i) add(wave1, i < D ? 60 : 3);  // per replica: one long, one short
    for (int i = 0; i < 4 * D; ++i) add(wave2, 24);
    std::vector<std::vector<int32_t>> want;
    for (const Request& r : wave1) want.push_back(alone(model_, r.prompt, r.max_tokens));
    for (const Request& r : wave2) want.push_back(alone(model_, r.prompt, r.max_tokens));

    Recorded rec;
    DistOptions o = options(D, cat("dp=", D, ",weights=owner"), "sidp", model_, &rec);
    o.sidp_threshold = 2;
    std::map<int64_t, std::vector<int32_t>> got;
    std::vector<PlanStats> stats;
    std::vector<StepMetrics> steps;
    run_distributed(o, [&](DistEngine& e) {
      SidpReplicas* rep = e.sidp_replicas();
      ASSERT_NE(rep, nullptr);
      LiveLoop& loop = e.loop();
      loop.on_finish = [&](const Sequence& s) { got[s.id()] = s.output; };
      for (Request r : wave1) {
        r.arrival_s = e.clock().now();
        loop.submit(r);
      }
      // Until the group has switched to CaS (lockstep).
      for (int i = 0; i < 100000 && !rep->lockstep(); ++i) loop.step();
      ASSERT_TRUE(rep->lockstep()) << "never entered CaS";
      ASSERT_FALSE(loop.idle()) << "the first wave ended before CaS";
      for (Request r : wave2) {
        r.arrival_s = e.clock().now();
        loop.submit(r);
      }
      for (int i = 0; i < 100000 && !loop.idle(); ++i) loop.step();
      ASSERT_TRUE(loop.idle());
      stats = e.plan_stats();
      steps = e.metrics().steps();
      loop.on_finish = nullptr;
    });
    expect_tokens("sidp WaS->CaS->WaS", model_, prompts, want, got);
    ASSERT_EQ(stats.size(), 2u);
    EXPECT_GT(stats[1].steps, 0) << "CaS steps";
    EXPECT_GE(stats[1].switches, 1) << "switches into CaS";
    EXPECT_GE(stats[0].switches, 1) << "switches back into WaS";
    // In the metrics: an own (replica) WaS step, later a CaS group step, later an own WaS step again.
    const std::string was = stats[0].name, cas = stats[1].name;
    size_t i = 0;
    auto own_was = [&](const StepMetrics& m) { return m.plan == was && m.replica >= 0 && !m.lockstep; };
    while (i < steps.size() && !own_was(steps[i])) ++i;
    while (i < steps.size() && !(steps[i].plan == cas && steps[i].lockstep)) ++i;
    ASSERT_LT(i, steps.size()) << "no CaS group step after a WaS replica step";
    while (i < steps.size() && !own_was(steps[i])) ++i;
    EXPECT_LT(i, steps.size()) << "no WaS replica step after CaS";
    // Each rank's own record: it ran CaS steps (plan 1) and, after them, WaS steps again.
    for (int r = 0; r < D; ++r) {
      const std::vector<RankStep>& s = rec.steps[size_t(r)];
      size_t k = 0;
      while (k < s.size() && s[k].plan != 1) ++k;
      EXPECT_LT(k, s.size()) << "rank " << r << " ran no CaS step";
      while (k < s.size() && s[k].plan != 0) ++k;
      EXPECT_LT(k, s.size()) << "rank " << r << " ran no WaS step after CaS";
    }
  }
}

// A follower failing mid-run fails the job with its error (every replica's sequences finish,
// run() throws, the followers return), well inside the communicator's timeout.
TEST_F(SidpReplicasStories, FollowerFailingMidRunFailsTheJob) {
  DistOptions o = options(3, "dp=3,weights=owner", "sidp:was", model_, nullptr);
  o.comm_options.timeout_s = 20;
  o.follower_before_step = [](int rank, const StepBatch& b) {
    if (rank == 2 && b.step_index == 3) throw Error("rank 2 broke at its step 3");
  };
  const auto t0 = SteadyClock::now();
  const std::string err = test::error_of([&] {
    run_distributed(o, [&](DistEngine& e) {
      e.run(greedy_requests(prompts_, 20));
      ADD_FAILURE() << "run() returned although a rank failed";
    });
  });
  const double s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  EXPECT_NE(err.find("rank 2 broke at its step 3"), std::string::npos) << err;
  EXPECT_LT(s, 10.0);
}

// A request cancelled while its replica steps on its own finishes as aborted; the others of every
// replica keep the single-rank tokens.
TEST_F(SidpReplicasStories, CancelOnAReplicaSteppingAlone) {
  const int D = 2, n = 30;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts_) want.push_back(alone(model_, p, n));
  DistOptions o = options(D, "dp=2,weights=owner", "sidp:was", model_, nullptr);
  std::map<int64_t, Sequence> done;
  run_distributed(o, [&](DistEngine& e) {
    LiveLoop& loop = e.loop();
    int tokens_of_3 = 0;
    loop.on_token = [&](const TokenEvent& ev) {
      if (ev.seq_id == 3 && ++tokens_of_3 == 5) loop.cancel(3);
    };
    loop.on_finish = [&](const Sequence& s) { done.emplace(s.id(), s); };
    for (Request r : greedy_requests(prompts_, n)) {
      r.arrival_s = e.clock().now();
      loop.submit(r);
    }
    for (int i = 0; i < 100000 && !loop.idle(); ++i) loop.step();
    ASSERT_TRUE(loop.idle());
    loop.on_token = nullptr;
    loop.on_finish = nullptr;
  });
  ASSERT_EQ(done.size(), prompts_.size());
  for (size_t i = 0; i < prompts_.size(); ++i) {
    const Sequence& s = done.at(int64_t(i) + 1);
    if (s.id() == 3) {
      EXPECT_EQ(s.finish_reason, FinishReason::kAbort);
      EXPECT_GE(s.output.size(), 5u);
      EXPECT_LT(s.output.size(), size_t(n));
      EXPECT_TRUE(std::equal(s.output.begin(), s.output.end(), want[i].begin())) << "cancelled sequence's prefix";
    } else {
      EXPECT_EQ(s.output, want[i]) << "sequence " << s.id();
    }
  }
}

}  // namespace
}  // namespace loom
