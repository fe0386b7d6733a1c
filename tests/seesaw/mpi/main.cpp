// Seesaw's asynchronous swaps under mpirun (issue 13): the CPU KV tier in an MPI shared-memory
// window (one per host), the copies on every rank's swap-out and prefetcher threads, their
// completion reported through the step's gather and ordered by MPI_Win_sync (kv/kv_tier.h
// "Ordering"). Copies are slowed by a delay before each task so that they stay in flight across
// steps. Run by ctest as `mpirun -np 2 test_seesaw_mpi pp=2 tp=2 --gtest_filter=...` and -np 4
// (pp=4 -> tp=2,pp=2), one test per mpirun (MPI is initialized once per process).
// Exactness class: pp moves activations, tp changes the all-reduce's summation order: the criterion
// is the single-rank greedy tokens (computed on world rank 0 by the single-rank generator). Every
// rank also checks its own copies: some prefill step ran while a swap-out was in flight, some decode
// step while a prefetch was, and no step decoded a sequence whose swap-in was not complete.
// SeesawMpi.ResidentDecodersStayInPlace: sequences decoding when the scheduler turns to prefill keep
// their pages in c_d's placement through the c_p phase (seesaw/resident_check.h, every rank its own
// store), the tokens the single rank's, every request once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/dist_engine.h"
#include "kv/kv_tier.h"
#include "model/loader.h"
#include "seesaw/four_layer.h"
#include "seesaw/resident_check.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

std::vector<std::string> g_plans;

TEST(SeesawMpi, AsyncSwapsInASharedWindowMatchSingleRank) {
  // The 4-layer model of the thread tests (four_layer.h), written by this process (one file per rank).
  const std::string path = cat(test::temp_dir(), "/seesaw-mpi-", getpid(), ".gguf");
  test::write_four_layer_model(path);
  std::shared_ptr<Model> model = load_model(path);
  const ModelConfig& c = model->config;
  const auto prompts = test::random_prompts(9, 40, c.vocab_size, 37);
  std::vector<int> n;  // different lengths: a freed decode slot's prefetch runs beside other decodes
  for (size_t i = 0; i < prompts.size(); ++i) n.push_back(5 + 3 * int(i % 4));

  DistOptions o;
  o.comm = "mpi";
  o.ranks = 0;
  o.plans = g_plans;
  o.policy = "seesaw";
  o.load_model = [model](int) { return model; };
  o.engine.threads = 1;
  o.engine.max_tokens_per_step = 16;
  o.engine.max_num_seqs = 2;
  o.engine.max_model_len = 64;
  o.engine.kv_cache_bytes = int64_t(8) << 20;
  o.engine.cpu_kv_bytes = 150 * tier_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_dim);
  o.comm_options.timeout_s = 60;
  o.rank_options = [](int, RankEngineOptions& ro) {
    ro.tier_copy_hook = [] { std::this_thread::sleep_for(std::chrono::milliseconds(4)); };
  };
  int64_t out_during_prefill = 0, in_during_decode = 0, unready = 0;
  o.after_step = [&](int, RankEngine& e, const StepBatch& b, const std::vector<RequestId>&) {
    const SwapOverlap& ov = e.last_overlap();
    if (ov.out > 0 && b.num_prefill_tokens > 0) ++out_during_prefill;
    if (ov.in > 0 && b.num_decode_tokens > 0) ++in_during_decode;
    unready = std::max(unready, e.tier_stats().unready_decodes);
  };
  int rank = -1;
  std::map<int64_t, std::vector<int32_t>> got;
  int64_t swapped_out = 0, swapped_in = 0, transitions = 0;
  run_distributed(o, [&](DistEngine& e) {
    rank = 0;
    for (const Sequence& s : e.run(test::greedy_requests(prompts, n))) got[s.id()] = s.output;
    swapped_out = e.scheduler().num_swapped_out();
    swapped_in = e.scheduler().num_swapped_in();
    transitions = e.scheduler().phase_switches();
    EXPECT_EQ(e.scheduler().num_swapped(), 0);
  });
  EXPECT_GT(out_during_prefill, 0) << "no prefill step ran while a swap-out was in flight";
  EXPECT_GT(in_during_decode, 0) << "no decode step ran while a prefetch was in flight";
  EXPECT_EQ(unready, 0) << "a step decoded a sequence whose swap-in was not complete";
  if (rank == 0) {
    std::vector<std::vector<int32_t>> want;
    for (size_t i = 0; i < prompts.size(); ++i) want.push_back(test::alone(model, prompts[i], n[i]));
    test::expect_tokens(cat(g_plans[0], " -> ", g_plans[1]), model, prompts, want, got);
    EXPECT_EQ(swapped_out, swapped_in);
    EXPECT_GE(swapped_out, int64_t(prompts.size()));
    EXPECT_GE(transitions, 3);
  }
  std::remove(path.c_str());
}

TEST(SeesawMpi, ResidentDecodersStayInPlace) {
  const std::string path = cat(test::temp_dir(), "/seesaw-mpi-res-", getpid(), ".gguf");
  test::write_four_layer_model(path);
  std::shared_ptr<Model> model = load_model(path);
  const ModelConfig& c = model->config;
  const auto prompts = test::random_prompts(12, 40, c.vocab_size, 43);
  std::vector<int> n;  // different lengths: some sequences are mid-decode at each turn to prefill
  for (size_t i = 0; i < prompts.size(); ++i) n.push_back(6 + 4 * int(i % 3));
  DistOptions o;
  o.comm = "mpi";
  o.ranks = 0;
  o.plans = g_plans;
  o.policy = "seesaw";
  o.load_model = [model](int) { return model; };
  o.engine.threads = 1;
  o.engine.max_tokens_per_step = 16;
  o.engine.max_num_seqs = 64;
  o.engine.max_model_len = 64;
  o.engine.kv_cache_bytes = int64_t(8) << 20;
  o.engine.cpu_kv_bytes = 64 * tier_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_dim);
  o.comm_options.timeout_s = 60;
  test::ResidentCheck check;  // this process's rank
  std::string error;
  o.after_step = [&](int, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
    const std::string bad = check.after_step(e, b, rel);
    if (error.empty()) error = bad;
  };
  int rank = -1;
  std::map<int64_t, std::vector<int32_t>> got;
  int64_t transitions = 0, finished = 0;
  std::vector<PlanStats> stats;
  run_distributed(o, [&](DistEngine& e) {
    rank = 0;
    for (const Sequence& s : e.run(test::greedy_requests(prompts, n))) {
      EXPECT_EQ(got.count(s.id()), 0u) << "request " << s.id() << " finished twice";
      got[s.id()] = s.output;
      ++finished;
    }
    transitions = e.scheduler().phase_switches();
    stats = e.plan_stats();
  });
  EXPECT_EQ(error, "");
  EXPECT_GT(check.checks, 0) << "no resident sequence was checked during a prefill phase";
  if (rank == 0) {
    std::vector<std::vector<int32_t>> want;
    for (size_t i = 0; i < prompts.size(); ++i) want.push_back(test::alone(model, prompts[i], n[i]));
    test::expect_tokens(cat(g_plans[0], " -> ", g_plans[1], " resident"), model, prompts, want, got);
    EXPECT_EQ(finished, int64_t(prompts.size()));
    EXPECT_GE(transitions, 6);
    EXPECT_GE(check.turns, 3);
    EXPECT_GT(check.resumed, 0);
    for (const PlanStats& p : stats) EXPECT_EQ(p.kv_bytes_moved, 0) << p.name;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace loom

// Usage: test_seesaw_mpi PREFILL_PLAN DECODE_PLAN (under mpirun with their rank count).
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PREFILL_PLAN DECODE_PLAN\n", argv[0]);
    return 2;
  }
  loom::g_plans = {argv[1], argv[2]};
  return RUN_ALL_TESTS();
}
