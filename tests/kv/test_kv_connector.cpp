// The rank's KV connectors runner (kv/kv_connector.h): a step's operations run in list order, each by
// the connectors of its kind, after every connector's begin(); an operation with sequences that no
// connector runs is refused with the step and the kind named; Await needs no connector. The real
// connectors' effect on the KV (the migration, the CPU tier's swaps) is checked where they run: the
// migration in test_kv_transfer.cpp, the tier in tests/seesaw (bits and greedy tokens).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "kv/kv_connector.h"
#include "kv/kv_store.h"

namespace loom {
namespace {

// Appends what it is asked to do to a shared log (the runner's order is what is under test).
class Recorder final : public KvConnector {
 public:
  Recorder(std::string name, std::vector<KvOpKind> kinds, std::vector<std::string>* log)
      : name_(std::move(name)), kinds_(std::move(kinds)), log_(log) {}
  bool runs(KvOpKind k) const override {
    for (KvOpKind x : kinds_)
      if (x == k) return true;
    return false;
  }
  void begin(const std::vector<KvOp>& ops, KvOpContext&) override {
    log_->push_back(name_ + " begin " + std::to_string(ops.size()));
  }
  void run(const KvOp& op, KvOpContext&) override {
    std::string s = name_;
    s += ' ';
    s += kv_op_name(op.kind);
    for (const SeqExtent& e : op.seqs) {
      s += ' ';
      s += std::to_string(e.id);
    }
    log_->push_back(s);
  }
  std::vector<int64_t> prepare_migration(int64_t pages, KvStore&) override {
    log_->push_back(name_ + " room " + std::to_string(pages));
    return {int64_t(name_.size())};
  }

 private:
  std::string name_;
  std::vector<KvOpKind> kinds_;
  std::vector<std::string>* log_;
};

TEST(KvConnectors, RunTheStepsOperationsInListOrderByKind) {
  std::vector<std::string> log;
  KvConnectors c;
  c.add(std::make_unique<Recorder>("mig", std::vector<KvOpKind>{KvOpKind::Migrate}, &log));
  c.add(std::make_unique<Recorder>("tier", std::vector<KvOpKind>{KvOpKind::SwapOut, KvOpKind::SwapIn, KvOpKind::Await},
                                   &log));
  const std::vector<KvOp> ops = {{KvOpKind::SwapOut, {{7, 30}}, false},
                                 {KvOpKind::Migrate, {{1, 5}, {2, 9}}, true},
                                 {KvOpKind::SwapIn, {{3, 12}}, false},
                                 {KvOpKind::Await, {{1, 6}}, false}};
  KvOpContext ctx;
  c.check(ops, 4);
  c.run(ops, ctx);
  // The list's order, not the connectors' order: the swap-out before the migration.
  EXPECT_EQ(log, (std::vector<std::string>{"mig begin 4", "tier begin 4", "tier swap-out 7", "mig migrate 1 2",
                                           "tier swap-in 3", "tier await 1"}));
  log.clear();
  KvStore store(1, 1, 4, 16, 2);
  EXPECT_EQ(c.prepare_migration(11, store), (std::vector<int64_t>{3, 4}));  // every connector's held pages
  EXPECT_EQ(log, (std::vector<std::string>{"mig room 11", "tier room 11"}));
}

TEST(KvConnectors, RefuseAnOperationNoConnectorRuns) {
  std::vector<std::string> log;
  KvConnectors c;
  c.add(std::make_unique<Recorder>("mig", std::vector<KvOpKind>{KvOpKind::Migrate}, &log));
  // Await (the step's sequences) and empty operations need no connector: a rank without a tier.
  EXPECT_NO_THROW(c.check({{KvOpKind::Await, {{1, 6}}, false}, {KvOpKind::SwapIn, {}, false}}, 3));
  try {
    c.check({{KvOpKind::SwapOut, {{7, 30}, {8, 2}}, false}}, 12);
    FAIL() << "a swap-out without a CPU tier was accepted";
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("step 12: swap-out of 2 sequences"), std::string::npos) << what;
    EXPECT_NE(what.find("no CPU KV tier"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace loom
