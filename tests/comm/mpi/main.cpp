// The MPI test program: the same collective checks as test_comm (checks.h) on the mpi backend,
// run by ctest under `mpirun -np N` (tests/comm/tests.cmake), plus fault modes that must end
// the job with a non-zero exit and a clear message, never a hang:
//   --fault=die       rank 2 exits abnormally while the others are in collectives
//   --fault=stuck     the last rank never arrives; the others time out (2 s) and abort the job
//   --fault=disagree  check_agreement with rank 1 different: every rank reports the values
//   --fault=size      rank 0 all-reduces 7 elements, the others 8
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "checks.h"
#include "comm/mpi/mpi_world.h"
#include "comm/world.h"
#include "core/error.h"

namespace loom {
namespace {

Communicator* g_comm = nullptr;

Communicator& comm() { return *g_comm; }

std::string for_sizes(std::string (*check)(Communicator&, std::size_t), bool per_rank) {
  std::string all;
  for (std::size_t n : test::comm_sizes()) {
    const std::string e = check(comm(), per_rank ? test::per_rank_count(n, comm().size()) : n);
    if (!e.empty()) all += e + "\n";
  }
  return all;
}

TEST(CommMpi, Backend) {
  EXPECT_EQ(comm().backend(), "mpi");
  EXPECT_GE(comm().rank(), 0);
  EXPECT_LT(comm().rank(), comm().size());
}

TEST(CommMpi, AllReduceIsTheRankOrderSumOnEveryRank) {
  EXPECT_EQ(for_sizes(test::check_all_reduce, false), "");
}

TEST(CommMpi, ReduceScatter) {
  EXPECT_EQ(for_sizes(test::check_reduce_scatter, true), "");
  EXPECT_EQ(for_sizes(test::check_reduce_scatter_v, true), "");
}

TEST(CommMpi, AllGather) {
  EXPECT_EQ(for_sizes(test::check_all_gather, true), "");
  EXPECT_EQ(for_sizes(test::check_all_gather_in_place, true), "");
  EXPECT_EQ(for_sizes(test::check_all_gather_v, true), "");
}

TEST(CommMpi, AllToAll) {
  EXPECT_EQ(for_sizes(test::check_all_to_all, true), "");
  EXPECT_EQ(for_sizes(test::check_all_to_all_v, true), "");
}

TEST(CommMpi, BroadcastFromEveryRoot) {
  std::string all;
  for (std::size_t n : test::comm_sizes()) {
    for (int root = 0; root < comm().size(); ++root) all += test::check_broadcast(comm(), n, root);
  }
  EXPECT_EQ(all, "");
}

TEST(CommMpi, SendRecv) { EXPECT_EQ(for_sizes(test::check_send_recv, false), ""); }

TEST(CommMpi, OneSidedGet) { EXPECT_EQ(for_sizes(test::check_get, false), ""); }

TEST(CommMpi, SplitOrdersByKey) { EXPECT_EQ(test::check_split(comm(), 1000), ""); }

TEST(CommMpi, CheckAgreementNamesRanksAndValues) {
  EXPECT_EQ(test::check_agreement_detects(comm()), "");
}

TEST(CommMpi, MakeWorldRunsOnThisProcessRank) {
  // MPI is already initialised by main's MpiWorld, so this one neither initialises nor
  // finalises it.
  auto world = make_world("mpi", 0, CommOptions{30});
  EXPECT_EQ(world->backend(), "mpi");
  EXPECT_EQ(world->size(), comm().size());
  int calls = 0;
  world->run([&](Communicator& c) {
    EXPECT_EQ(c.rank(), comm().rank());
    std::vector<float> v(5, 2.0f);
    c.all_reduce_sum(v.data(), v.size());
    EXPECT_EQ(v[4], 2.0f * static_cast<float>(c.size()));
    ++calls;
  });
  EXPECT_EQ(calls, 1);
  try {
    make_world("mpi", comm().size() + 1);
    ADD_FAILURE() << "make_world(mpi) with the wrong rank count did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("but mpirun started"), std::string::npos) << e.what();
  }
}

// On ranks other than 0: print only failures, prefixed with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
    }
  }

 private:
  int rank_;
};

void run_fault(const std::string& fault, Communicator& c) {
  std::vector<float> v(1000, 1.0f);
  c.barrier();
  if (fault == "die") {
    if (c.rank() == 2) {
      std::fprintf(stderr, "test: rank 2 exits abnormally now\n");
      std::fflush(stderr);
      _exit(3);
    }
    for (int i = 0; i < 100000; ++i) c.all_reduce_sum(v.data(), v.size());
  } else if (fault == "stuck") {
    if (c.rank() == c.size() - 1) std::this_thread::sleep_for(std::chrono::seconds(60));
    c.barrier();
  } else if (fault == "disagree") {
    c.check_agreement("plan", c.rank() == 1 ? 0xbadull : 0x600dull);
  } else if (fault == "size") {
    c.all_reduce_sum(v.data(), c.rank() == 0 ? 7 : 8);
    c.barrier();
  } else {
    fail("unknown --fault=", fault);
  }
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string fault;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--fault=", 0) == 0) fault = a.substr(8);
  }
  loom::CommOptions options;
  options.timeout_s = fault.empty() ? 30.0 : 2.0;
  loom::MpiWorld world(options);
  if (!fault.empty()) {
    world.run([&](loom::Communicator& c) { loom::run_fault(fault, c); });
    return 0;
  }
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new loom::FailurePrinter(world.rank()));
  }
  int rc = 0;
  {
    auto c = world.world_communicator();
    loom::g_comm = c.get();
    rc = RUN_ALL_TESTS();
    loom::g_comm = nullptr;
  }
  return rc;
}
