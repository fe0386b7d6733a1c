// The local backend over a RankMemory that behaves like a GPU stream (comm/rank_memory.h): the
// thread-sharing layer that ranks sharing one GPU use, tested on host buffers. DeferredMemory
// queues every copy and sum and runs them only at fence(), in issue order, reading their sources
// when they run (as cudaMemcpyAsync does), so a fence the backend forgot would leave a result
// incomplete when a call returns or let a peer read a buffer before its owner's pending writes
// landed; the naive checks (checks.h, bitwise) would see it. A memory that never fences is the
// negative control: the same checks must fail with it.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <mutex>
#include <vector>

#include "checks.h"
#include "comm/local.h"
#include "comm/rank_memory.h"
#include "core/error.h"

namespace loom {
namespace {

class DeferredMemory final : public RankMemory {
 public:
  explicit DeferredMemory(bool fences = true) : fences_(fences) {}
  std::string_view name() const override { return "deferred"; }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    queue_.push_back([=] { std::memmove(dst, src, bytes); });
  }
  void reduce_sum(float* out, const float* const* in, int n, std::size_t count) override {
    std::vector<const float*> ins(in, in + n);
    queue_.push_back([=] { reduce_sum_rank_order(out, ins.data(), n, count); });
  }
  void fence() override {
    ++fences_seen;
    if (!fences_) return;
    for (auto& f : queue_) f();
    queue_.clear();
  }
  std::size_t pending() const { return queue_.size(); }
  int fences_seen = 0;

 private:
  bool fences_;
  std::vector<std::function<void()>> queue_;
};

std::string run_deferred(int n, const std::function<std::string(Communicator&)>& check, bool fences = true) {
  std::mutex mu;
  std::string errors;
  LocalWorld::run(
      n,
      [&](Communicator& c) {
        EXPECT_EQ(c.backend(), "local+deferred");
        const std::string e = check(c);
        if (!e.empty()) {
          std::lock_guard<std::mutex> lk(mu);
          errors += cat("rank ", c.rank(), ": ", e, "\n");
        }
      },
      CommOptions{20}, [fences](int) { return std::make_unique<DeferredMemory>(fences); });
  return errors;
}

class CommDeferredMemory : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Ranks, CommDeferredMemory, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return cat(info.param, "ranks"); });

// Every collective, send/recv, get, split and agreement check, bitwise against the naive result.
TEST_P(CommDeferredMemory, EveryOperationMatchesNaive) {
  EXPECT_EQ(run_deferred(GetParam(), test::check_everything), "");
}

// A rank's own writes still pending on its "stream" when it enters a collective (the kernels
// that produced its send buffer) must land before peers read the buffer.
TEST_P(CommDeferredMemory, EnteringACollectiveCompletesTheRanksPendingWrites) {
  const int n = GetParam();
  std::vector<DeferredMemory*> mems(static_cast<std::size_t>(n));
  std::mutex mu;
  std::string errors;
  LocalWorld::run(
      n,
      [&](Communicator& c) {
        const int r = c.rank();
        const std::size_t count = 1001;
        std::vector<float> staging(count), data(count, -1.0f), expect(count);
        for (std::size_t i = 0; i < count; ++i) staging[i] = test::comm_value(r, i);
        mems[std::size_t(r)]->copy(data.data(), staging.data(), count * sizeof(float));  // pending
        c.all_reduce_sum(data.data(), count);
        for (std::size_t i = 0; i < count; ++i) {
          float acc = test::comm_value(0, i);
          for (int q = 1; q < n; ++q) acc += test::comm_value(q, i);
          expect[i] = acc;
        }
        if (std::memcmp(data.data(), expect.data(), count * sizeof(float)) != 0 ||
            mems[std::size_t(r)]->pending() != 0) {
          std::lock_guard<std::mutex> lk(mu);
          errors += cat("rank ", r, ": all_reduce_sum did not see the pending write or left work pending\n");
        }
      },
      CommOptions{20},
      [&](int r) {
        auto m = std::make_unique<DeferredMemory>();
        mems[std::size_t(r)] = m.get();
        return m;
      });
  EXPECT_EQ(errors, "");
}

// The negative control: a memory whose fence does nothing leaves the results unwritten, and the
// same checks report it (so the tests above can fail).
TEST(CommDeferredMemoryControl, WithoutFencesTheChecksFail) {
  EXPECT_NE(run_deferred(2, [](Communicator& c) { return test::check_all_reduce(c, 1000); }, /*fences=*/false), "");
  EXPECT_NE(run_deferred(3, [](Communicator& c) { return test::check_all_gather(c, 333); }, false), "");
  EXPECT_NE(run_deferred(2, [](Communicator& c) { return test::check_send_recv(c, 4096); }, false), "");
}

// The default host memory keeps the backend name the other tests and the CLI know.
TEST(CommRankMemory, HostMemoryIsThePlainLocalBackend) {
  LocalWorld::run(2, [](Communicator& c) { EXPECT_EQ(c.backend(), "local"); });
  LocalWorld::run(
      2, [](Communicator& c) { EXPECT_EQ(c.backend(), "local"); }, CommOptions{5},
      [](int) { return std::make_unique<HostRankMemory>(); });
}

TEST(CommRankMemory, FactoryReturningNothingIsAnError) {
  EXPECT_THROW(LocalWorld::run(2, [](Communicator&) {}, CommOptions{5}, [](int) { return nullptr; }), Error);
}

}  // namespace
}  // namespace loom
