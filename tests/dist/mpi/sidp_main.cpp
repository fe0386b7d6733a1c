// SiDP replicas under mpirun (engine/sidp_replicas.h; ../shared/papers/001 §4.2-§4.3): one process
// per replica, WaS fetches by MPI_Get from the owners' RMA windows (the owner takes no part), each
// replica stepping on its own under WaS, in lockstep under CaS. Run by ctest as
// `mpirun -np D test_sidp_mpi --gtest_filter=...` (D = 2, 3), one test per mpirun (MPI is
// initialized once per process). Every process checks what it did itself (its own after_step
// calls, its own clock); world rank 0 also checks the tokens against the single-rank engine. The
// model is a 6-layer synthetic GQA model written by each process (no ../shared needed).
#include <algorithm>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/dist_engine.h"
#include "engine/sidp_replicas.h"
#include "model/loader.h"
#include "model/synth.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct Step {
  SteadyClock::time_point end;
  std::vector<int64_t> seqs;
  int plan = 0;
};

std::shared_ptr<Model> write_model(const std::string& tag) {
  SynthOptions so;
  so.shape = synth_shape("gqa-24x6");
  so.shape.config.n_layers = 6;
  so.dtype = DType::F32;
  so.seed = 9;
  so.threads = 1;
  const std::string path = cat(test::temp_dir(), "/sidp-mpi-", tag, "-", getpid(), ".gguf");
  write_synth_model(so, path);
  std::shared_ptr<Model> m = load_model(path);
  std::remove(path.c_str());  // mapped: the file is not needed by name any more
  return m;
}

DistOptions mpi_options(const std::shared_ptr<Model>& model, const std::string& policy, int* rank,
                        std::vector<Step>* steps) {
  DistOptions o;
  o.comm = "mpi";
  o.ranks = 0;
  o.policy = policy;
  o.load_model = [model](int) { return model; };
  o.engine.threads = 1;
  o.engine.max_tokens_per_step = 16;
  o.engine.max_num_seqs = 64;
  o.engine.max_model_len = 128;
  o.engine.kv_cache_bytes = int64_t(8) << 20;
  o.after_step = [rank, steps](int r, RankEngine& e, const StepBatch& b, const std::vector<RequestId>&) {
    *rank = r;
    Step s;
    s.end = SteadyClock::now();
    for (const ScheduledSeq& q : b.seqs) s.seqs.push_back(q.seq_id);
    s.plan = e.current();
    steps->push_back(std::move(s));
  };
  return o;
}

int world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 1;
}

// Uneven load under WaS: replica 1 gets one long request and its process is slow (100 ms before
// each step), the others short requests. Each process, from its own record: the slow one stepped
// for the whole tail; a fast one took only the steps its requests need, their ends closer than one
// slow step apart on average (in lockstep each of its steps would wait for the slow one), then
// idled past the communicator's timeout (rank 0 keeps its channel alive).
TEST(SidpMpi, UnevenReplicasStepAtTheirOwnPace) {
  constexpr int kLong = 40, kShort = 4;
  constexpr auto kSlow = std::chrono::milliseconds(100);
  const int D = world_size();
  ASSERT_GE(D, 2);
  std::shared_ptr<Model> model = write_model("uneven");
  const auto all_prompts = test::random_prompts(2 * D, 30, model->config.vocab_size, 3);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> lengths;
  bool long_given = false;
  for (int i = 0; i < 2 * D; ++i) {
    const bool is_long = replica_of(i + 1, D) == 1 && !long_given;
    long_given = long_given || is_long;
    prompts.push_back(all_prompts[size_t(i)]);
    lengths.push_back(is_long ? kLong : kShort);
  }
  int rank = -1;
  std::vector<Step> steps;
  DistOptions o = mpi_options(model, "sidp:was", &rank, &steps);
  o.plans = {cat("dp=", D, ",weights=owner")};
  o.comm_options.timeout_s = 1;
  o.follower_before_step = [kSlow](int r, const StepBatch&) {
    if (r == 1) std::this_thread::sleep_for(kSlow);
  };
  std::map<int64_t, std::vector<int32_t>> got;
  std::vector<int64_t> own;
  int64_t group = -1;
  run_distributed(o, [&](DistEngine& e) {
    for (const Sequence& s : e.run(test::greedy_requests(prompts, lengths))) got[s.id()] = s.output;
    ASSERT_NE(e.sidp_replicas(), nullptr);
    own = e.sidp_replicas()->own_steps();
    group = e.sidp_replicas()->group_steps();
  });
  ASSERT_GE(rank, 0) << "this process ran no step";
  for (const Step& s : steps)
    for (int64_t id : s.seqs) EXPECT_EQ(replica_of(id, D), rank) << "rank " << rank << " stepped sequence " << id;
  if (rank == 1) {
    EXPECT_GE(int(steps.size()), kLong - 1) << "the slow replica's steps";
  } else {
    ASSERT_FALSE(steps.empty());
    EXPECT_LE(int(steps.size()), 2 * 2 + kShort) << "rank " << rank << " stepped for the long tail";
    // In lockstep every one of its steps would wait for a slow one: its step ends at least kSlow
    // apart. Bound by that (at least two slow steps), not by a fixed time: a sanitized run of
    // three processes on two cores beside another test took 223 ms for these few steps.
    const int gaps = std::max(2, int(steps.size()) - 1);
    EXPECT_LT(steps.back().end - steps.front().end, gaps * kSlow)
        << "rank " << rank << " waited for the slow replica (" << steps.size() << " steps)";
  }
  if (rank == 0) {
    std::vector<std::vector<int32_t>> want;
    for (size_t i = 0; i < prompts.size(); ++i) want.push_back(test::alone(model, prompts[i], lengths[i]));
    test::expect_tokens(cat("sidp:was D=", D), model, prompts, want, got);
    EXPECT_EQ(group, 0);
    ASSERT_EQ(int(own.size()), D);
    EXPECT_EQ(own[0], int64_t(steps.size()));
  }
}

// --policy sidp across WaS -> CaS -> WaS (as SidpReplicasStories.PolicyWasCasWas*): every process
// ran CaS steps and WaS steps after them; rank 0 gets the single-rank tokens.
TEST(SidpMpi, PolicyWasCasWasKeepsTheSingleRankTokens) {
  const int D = world_size();
  ASSERT_GE(D, 2);
  std::shared_ptr<Model> model = write_model("policy");
  const auto pool = test::random_prompts(7, 30, model->config.vocab_size, 5);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Request> wave1, wave2;
  int64_t id = 1;
  auto add = [&](std::vector<Request>& wave, int max_tokens) {
    Request r;
    r.id = id;
    r.prompt = pool[size_t((id - 1) % int64_t(pool.size()))];
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.stop.ignore_eos = true;
    prompts.push_back(r.prompt);
    wave.push_back(r);
    ++id;
  };
  for (int i = 0; i < 2 * D; ++i) add(wave1, i < D ? 60 : 3);
  for (int i = 0; i < 4 * D; ++i) add(wave2, 24);
  int rank = -1;
  std::vector<Step> steps;
  DistOptions o = mpi_options(model, "sidp", &rank, &steps);
  o.plans = {cat("dp=", D, ",weights=owner")};
  o.sidp_threshold = 2;
  o.comm_options.timeout_s = 60;
  std::map<int64_t, std::vector<int32_t>> got;
  std::vector<PlanStats> stats;
  run_distributed(o, [&](DistEngine& e) {
    SidpReplicas* rep = e.sidp_replicas();
    ASSERT_NE(rep, nullptr);
    LiveLoop& loop = e.loop();
    loop.on_finish = [&](const Sequence& s) { got[s.id()] = s.output; };
    for (Request r : wave1) {
      r.arrival_s = e.clock().now();
      loop.submit(r);
    }
    for (int i = 0; i < 100000 && !rep->lockstep(); ++i) loop.step();
    ASSERT_TRUE(rep->lockstep()) << "never entered CaS";
    for (Request r : wave2) {
      r.arrival_s = e.clock().now();
      loop.submit(r);
    }
    for (int i = 0; i < 100000 && !loop.idle(); ++i) loop.step();
    ASSERT_TRUE(loop.idle());
    stats = e.plan_stats();
    loop.on_finish = nullptr;
  });
  ASSERT_GE(rank, 0);
  size_t k = 0;
  while (k < steps.size() && steps[k].plan != 1) ++k;
  EXPECT_LT(k, steps.size()) << "rank " << rank << " ran no CaS step";
  while (k < steps.size() && steps[k].plan != 0) ++k;
  EXPECT_LT(k, steps.size()) << "rank " << rank << " ran no WaS step after CaS";
  if (rank == 0) {
    std::vector<std::vector<int32_t>> want;
    for (const Request& r : wave1) want.push_back(test::alone(model, r.prompt, r.max_tokens));
    for (const Request& r : wave2) want.push_back(test::alone(model, r.prompt, r.max_tokens));
    test::expect_tokens(cat("sidp D=", D), model, prompts, want, got);
    ASSERT_EQ(stats.size(), 2u);
    EXPECT_GE(stats[0].switches, 1);
    EXPECT_GE(stats[1].switches, 1);
  }
}

}  // namespace
}  // namespace loom
