// The single and local backends against naive expectations (checks.h), and the local backend's
// fault behaviour: failures, timeouts and disagreements end in a loom::Error, never a hang.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "checks.h"
#include "comm/local.h"
#include "comm/single.h"
#include "comm/world.h"
#include "core/clock.h"
#include "core/error.h"

namespace loom {
namespace {

using test::comm_sizes;
using test::per_rank_count;

// Runs check on n ranks of the local backend; returns every rank's mismatches.
std::string run_local(int n, const std::function<std::string(Communicator&)>& check,
                      double timeout_s = 20) {
  std::mutex mu;
  std::string errors;
  LocalWorld::run(
      n,
      [&](Communicator& c) {
        EXPECT_EQ(c.size(), n);
        EXPECT_EQ(c.backend(), "local");
        const std::string e = check(c);
        if (!e.empty()) {
          std::lock_guard<std::mutex> lk(mu);
          errors += cat("rank ", c.rank(), ": ", e, "\n");
        }
      },
      CommOptions{timeout_s});
  return errors;
}

// Calls check for every awkward size and joins the results.
std::function<std::string(Communicator&)> for_sizes(
    std::string (*check)(Communicator&, std::size_t), bool per_rank) {
  return [check, per_rank](Communicator& c) {
    std::string all;
    for (std::size_t n : comm_sizes()) {
      const std::string e = check(c, per_rank ? per_rank_count(n, c.size()) : n);
      if (!e.empty()) all += e + "\n";
    }
    return all;
  };
}

TEST(CommSingle, EveryCollectiveMatchesNaive) {
  SingleCommunicator c;
  EXPECT_EQ(test::check_everything(c), "");
  EXPECT_THROW(c.send(0, 1, nullptr, 0), Error);
  EXPECT_THROW(c.broadcast(nullptr, 0, 1), Error);
}

class CommLocal : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Ranks, CommLocal, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return cat(info.param, "ranks"); });

TEST_P(CommLocal, AllReduceIsTheRankOrderSumOnEveryRank) {
  EXPECT_EQ(run_local(GetParam(), for_sizes(test::check_all_reduce, false)), "");
}

TEST_P(CommLocal, ReduceScatter) {
  EXPECT_EQ(run_local(GetParam(), for_sizes(test::check_reduce_scatter, true)), "");
  EXPECT_EQ(run_local(GetParam(), for_sizes(test::check_reduce_scatter_v, true)), "");
}

TEST_P(CommLocal, AllGather) {
  EXPECT_EQ(run_local(GetParam(), for_sizes(test::check_all_gather, true)), "");
  EXPECT_EQ(run_local(GetParam(), for_sizes(test::check_all_gather_in_place, true)), "");
  EXPECT_EQ(run_local(GetParam(), for_sizes(test::check_all_gather_v, true)), "");
}

TEST_P(CommLocal, AllToAll) {
  EXPECT_EQ(run_local(GetParam(), for_sizes(test::check_all_to_all, true)), "");
  EXPECT_EQ(run_local(GetParam(), for_sizes(test::check_all_to_all_v, true)), "");
}

TEST_P(CommLocal, BroadcastFromEveryRoot) {
  EXPECT_EQ(run_local(GetParam(),
                      [](Communicator& c) {
                        std::string all;
                        for (std::size_t n : comm_sizes()) {
                          for (int root = 0; root < c.size(); ++root) {
                            all += test::check_broadcast(c, n, root);
                          }
                        }
                        return all;
                      }),
            "");
}

TEST_P(CommLocal, SendRecv) {
  EXPECT_EQ(run_local(GetParam(), for_sizes(test::check_send_recv, false)), "");
}

TEST_P(CommLocal, OneSidedGet) {
  EXPECT_EQ(run_local(GetParam(), for_sizes(test::check_get, false)), "");
}

TEST_P(CommLocal, SplitOrdersByKey) {
  EXPECT_EQ(run_local(GetParam(), [](Communicator& c) { return test::check_split(c, 1000); }), "");
}

TEST_P(CommLocal, CheckAgreementNamesRanksAndValues) {
  EXPECT_EQ(run_local(GetParam(), test::check_agreement_detects), "");
}

// ---- faults ----

// Collects one message per rank.
struct Messages {
  std::mutex mu;
  std::vector<std::string> by_rank;
  explicit Messages(int n) : by_rank(static_cast<std::size_t>(n)) {}
  void set(int r, const std::string& m) {
    std::lock_guard<std::mutex> lk(mu);
    by_rank[r] = m;
  }
};

std::string run_expecting_error(int n, const std::function<void(Communicator&)>& fn,
                                double timeout_s) {
  try {
    LocalWorld::run(n, fn, CommOptions{timeout_s});
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CommLocalFaults, ThrowingRankFailsTheOthersPromptly) {
  Messages seen(4);
  const double t0 = now_seconds();
  const std::string first = run_expecting_error(
      4,
      [&](Communicator& c) {
        c.barrier();
        if (c.rank() == 2) throw Error("boom");
        std::vector<float> v(1000, 1.0f);
        try {
          for (int i = 0; i < 1000; ++i) c.all_reduce_sum(v.data(), v.size());
        } catch (const Error& e) {
          seen.set(c.rank(), e.what());
          throw;
        }
      },
      /*timeout_s=*/30);
  const double elapsed = now_seconds() - t0;
  EXPECT_EQ(first, "boom");  // the original, not an echo
  for (int r : {0, 1, 3}) EXPECT_EQ(seen.by_rank[r], "rank 2 failed: boom") << "rank " << r;
  // Far below the 30 s timeout: failure is signalled, not waited out.
  EXPECT_LT(elapsed, 5.0);
}

TEST(CommLocalFaults, FailureReachesRanksWaitingInAnotherGroup) {
  Messages seen(4);
  const std::string first = run_expecting_error(
      4,
      [&](Communicator& c) {
        auto sub = c.split(c.rank() / 2, c.rank());  // {0,1} and {2,3}
        if (c.rank() == 1) throw Error("rank one broke");
        try {
          sub->barrier();  // rank 0 waits for rank 1 here; 2 and 3 pass
          c.barrier();     // 2 and 3 wait for 0 and 1 here
        } catch (const Error& e) {
          seen.set(c.rank(), e.what());
          throw;
        }
      },
      30);
  EXPECT_EQ(first, "rank one broke");
  for (int r : {0, 2, 3}) EXPECT_EQ(seen.by_rank[r], "rank 1 failed: rank one broke");
}

TEST(CommLocalFaults, StuckRankTimesOutNamingIt) {
  const std::string msg = run_expecting_error(
      3,
      [&](Communicator& c) {
        if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        c.barrier();
      },
      /*timeout_s=*/0.4);
  EXPECT_NE(msg.find("barrier timed out after 0.4 s waiting for rank(s) 1 "), std::string::npos)
      << msg;
}

TEST(CommLocalFaults, RankThatReturnsEarlyFailsItsPeers) {
  const double t0 = now_seconds();
  const std::string msg = run_expecting_error(
      3,
      [&](Communicator& c) {
        if (c.rank() == 2) return;  // skips the collective
        std::vector<float> v(7, 1.0f);
        c.all_reduce_sum(v.data(), v.size());
      },
      30);
  EXPECT_NE(msg.find("rank 2 returned while rank "), std::string::npos) << msg;
  EXPECT_NE(msg.find("waits for it in all_reduce_sum"), std::string::npos) << msg;
  EXPECT_LT(now_seconds() - t0, 5.0);
}

TEST(CommLocalFaults, DifferentCollectivesOrSizesAreReported) {
  std::string msg = run_expecting_error(
      2,
      [&](Communicator& c) {
        std::vector<float> v(8, 1.0f);
        c.all_reduce_sum(v.data(), c.rank() == 0 ? 7 : 8);
      },
      30);
  EXPECT_NE(msg.find("ranks disagree on collective #1 of a group of 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("all_reduce_sum(7)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("all_reduce_sum(8)"), std::string::npos) << msg;

  msg = run_expecting_error(
      3,
      [&](Communicator& c) {
        char b[4] = {};
        if (c.rank() == 1) {
          c.broadcast(b, 4, 0);
        } else {
          c.barrier();
        }
      },
      30);
  EXPECT_NE(msg.find("ranks disagree on collective"), std::string::npos) << msg;
  EXPECT_NE(msg.find("broadcast(4 bytes, root 0)"), std::string::npos) << msg;
}

TEST(CommLocalFaults, SizeMismatchesInPointToPointAndAllToAllV) {
  Messages seen(2);
  run_expecting_error(
      2,
      [&](Communicator& c) {
        char b[8] = {};
        try {
          if (c.rank() == 0) {
            c.send(1, 3, b, 8);
          } else {
            c.recv(0, 3, b, 4);
          }
        } catch (const Error& e) {
          seen.set(c.rank(), e.what());
        }
      },
      30);
  for (int r : {0, 1}) {
    EXPECT_NE(seen.by_rank[r].find("send/recv size mismatch: rank 0 sends 8 bytes with tag 3, "
                                   "rank 1 receives 4"),
              std::string::npos)
        << "rank " << r << ": " << seen.by_rank[r];
  }

  const std::string msg = run_expecting_error(
      2,
      [&](Communicator& c) {
        char s[8] = {}, r[8] = {};
        // Rank 0 sends 3 bytes to rank 1, which expects 2; everything else agrees.
        std::vector<std::size_t> sb = {1, c.rank() == 0 ? 3u : 2u}, d = {0, 4};
        std::vector<std::size_t> rb = {1, 1};
        if (c.rank() == 1) rb = {2, 2};
        c.all_to_all_v_bytes(s, sb, d, r, rb, d);
      },
      30);
  EXPECT_NE(msg.find("all_to_all_v_bytes: rank 0 sends 3 bytes to rank 1, which expects "
                     "recv_bytes[0] = 2"),
            std::string::npos)
      << msg;
}

TEST(CommLocalFaults, BadArgumentsAreUserErrors) {
  EXPECT_THROW(LocalWorld::run(0, [](Communicator&) {}), Error);
  EXPECT_THROW(LocalWorld::run(2, [](Communicator&) {}, CommOptions{0.0}), Error);
  const std::string msg = run_expecting_error(
      2,
      [](Communicator& c) {
        if (c.rank() == 0) c.send(0, 1, nullptr, 0);
        c.barrier();
      },
      30);
  EXPECT_NE(msg.find("send: peer rank 0 is not another rank"), std::string::npos) << msg;
  EXPECT_NE(run_expecting_error(
                1, [](Communicator& c) { c.get(0, 42, 0, nullptr, 0); }, 30)
                .find("get: buffer id 42 is not registered"),
            std::string::npos);
  EXPECT_NE(run_expecting_error(
                2, [](Communicator& c) { c.recv(1 - c.rank(), 40000, nullptr, 0); }, 30)
                .find("tag 40000 is outside [0, 32767]"),
            std::string::npos);
}

TEST(CommWorld, MakeWorldChoosesTheBackend) {
  for (const char* kind : {"single", "local"}) {
    const int n = std::string(kind) == "single" ? 1 : 3;
    auto world = make_world(kind, n, CommOptions{20});
    EXPECT_EQ(world->backend(), kind);
    EXPECT_EQ(world->size(), n);
    std::atomic<int> calls{0};
    world->run([&](Communicator& c) {
      EXPECT_EQ(c.size(), n);
      EXPECT_EQ(c.backend(), kind);
      std::vector<float> v(3, 1.0f);
      c.all_reduce_sum(v.data(), v.size());
      EXPECT_EQ(v[2], static_cast<float>(n));
      ++calls;
    });
    EXPECT_EQ(calls.load(), n);
  }
  try {
    make_world("nccl", 2);
    ADD_FAILURE() << "make_world(nccl) did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--comm 'nccl' is not a backend; choose one of single|local"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_world("single", 2), Error);
  EXPECT_THROW(make_world("local", 0), Error);
}

}  // namespace
}  // namespace loom
