// Seesaw in the simulator (issue 13 item 5; ../shared/papers/004 §6.2 and §6.5, PAPERS-NOTES.md
// section 4): the seesaw-fig10 / fig13 / fig14 experiments against the bands of seesaw_bands.h
// (fixed before the pricing was changed). The experiments' row names are their interface:
//   seesaw-fig10: "speedup" per case, "speedup_geomean" for "a10" / "l4" / "all", "speedup_max"
//                 for "a10" / "l4";
//   seesaw-fig13: "throughput_tok_s" for "out=N <plan>" and "out=N seesaw";
//   seesaw-fig14: "throughput_tok_s" for "<scale>x <plan>" and "<scale>x seesaw".
// Each test runs its experiment (ctest runs every test in its own process).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "parallel/plan.h"
#include "seesaw_bands.h"
#include "sim/experiments.h"

namespace loom::sim {
namespace {

using namespace seesaw_bands;

ExperimentResult run(const std::string& name) {
  // The arXiv-summarization lengths are read at run time from ../shared (LOOM_SHARED_DIR).
  setenv("LOOM_SHARED_DIR", LOOM_SHARED_DIR, 0);
  return find_experiment(name).run();
}

const ExperimentRow* row(const ExperimentResult& r, const std::string& metric, const std::string& config) {
  for (const ExperimentRow& x : r.rows)
    if (x.metric == metric && x.config == config) return &x;
  return nullptr;
}

double value(const ExperimentResult& r, const std::string& metric, const std::string& config) {
  const ExperimentRow* x = row(r, metric, config);
  EXPECT_NE(x, nullptr) << r.name << ": no row " << metric << " / " << config;
  return x ? x->simulated : 0.0;
}

// "out=16 tp=2,pp=4" -> {"out=16", "tp=2,pp=4"}: throughput rows grouped by their first word, in
// the order the experiment printed them.
struct Sweep {
  std::vector<std::string> points;
  std::map<std::string, std::map<std::string, double>> tok_s;  // point -> plan or "seesaw" -> tok/s
};
Sweep sweep(const ExperimentResult& r) {
  Sweep s;
  for (const ExperimentRow& x : r.rows) {
    if (x.metric != "throughput_tok_s") continue;
    const size_t sp = x.config.find(' ');
    if (sp == std::string::npos) continue;
    const std::string point = x.config.substr(0, sp), what = x.config.substr(sp + 1);
    if (!s.tok_s.count(point)) s.points.push_back(point);
    s.tok_s[point][what] = x.simulated;
  }
  return s;
}

void expect_band(double simulated, double paper, const std::string& what) {
  EXPECT_TRUE(in_band(simulated, paper)) << what << ": simulated " << simulated << ", paper " << paper << ", band ["
                                         << kLow * paper << ", " << kHigh * paper << "]";
}

// ---- Fig. 10 (§6.2) ----

TEST(SeesawFig10, A10GeomeanSpeedup) { expect_band(value(run("seesaw-fig10"), "speedup_geomean", "a10"), kA10Geomean, "A10 geomean"); }
TEST(SeesawFig10, A10MaxSpeedup) { expect_band(value(run("seesaw-fig10"), "speedup_max", "a10"), kA10Max, "A10 max"); }
TEST(SeesawFig10, L4GeomeanSpeedup) { expect_band(value(run("seesaw-fig10"), "speedup_geomean", "l4"), kL4Geomean, "L4 geomean"); }
TEST(SeesawFig10, L4MaxSpeedup) { expect_band(value(run("seesaw-fig10"), "speedup_max", "l4"), kL4Max, "L4 max"); }
TEST(SeesawFig10, OverallGeomeanSpeedup) { expect_band(value(run("seesaw-fig10"), "speedup_geomean", "all"), kAllGeomean, "all geomean"); }

TEST(SeesawFig10, SeesawAboveTheBestFixedPlanEverywhereAndMoreOnA10) {
  const ExperimentResult r = run("seesaw-fig10");
  int cases = 0;
  for (const ExperimentRow& x : r.rows) {
    if (x.metric != "speedup") continue;
    ++cases;
    EXPECT_GT(x.simulated, 1.0) << x.config;  // §8: 1.06x at the least
  }
  EXPECT_EQ(cases, 12);  // {15B x4, 34B x8, 70B x8} x {arxiv, sharegpt} x {A10, L4}
  EXPECT_GT(value(r, "speedup_geomean", "a10"), value(r, "speedup_geomean", "l4"));
}

// ---- Fig. 13 (§6.5) ----

const char* const kFig13Plans[] = {"pp=8", "tp=2,pp=4", "tp=4,pp=2"};

std::string best_of_three(const std::map<std::string, double>& at) {
  std::string best;
  for (const char* p : kFig13Plans) {
    EXPECT_TRUE(at.count(p)) << p;
    if (best.empty() || at.at(p) > at.at(best)) best = p;
  }
  return best;
}

TEST(SeesawFig13, BestFixedPlanMovesFromPp8ToTp2Pp4ToTp4Pp2AsOutputsGrow) {
  const Sweep s = sweep(run("seesaw-fig13"));
  ASSERT_GE(s.points.size(), 3u);
  std::vector<std::string> best;
  for (const std::string& p : s.points) best.push_back(best_of_three(s.tok_s.at(p)));
  std::string seq;
  for (size_t i = 0; i < best.size(); ++i) seq += s.points[i] + ":" + best[i] + " ";
  EXPECT_EQ(best.front(), "pp=8") << seq;      // output 1: prefill only
  EXPECT_EQ(best.back(), "tp=4,pp=2") << seq;  // decode-heavy
  // PP8, then TP2PP4 in an intermediate range, then TP4PP2: never back to an earlier one.
  int rank_prev = 0;
  bool mid = false;
  for (const std::string& b : best) {
    const int rank = b == "pp=8" ? 0 : b == "tp=2,pp=4" ? 1 : 2;
    EXPECT_GE(rank, rank_prev) << seq;
    rank_prev = rank;
    mid = mid || rank == 1;
  }
  EXPECT_TRUE(mid) << "TP2PP4 is never the best: " << seq;
}

TEST(SeesawFig13, SeesawAtOrAboveEveryPlottedPlanAtEveryOutput) {
  const Sweep s = sweep(run("seesaw-fig13"));
  ASSERT_FALSE(s.points.empty());
  for (const std::string& p : s.points) {
    const auto& at = s.tok_s.at(p);
    ASSERT_TRUE(at.count("seesaw")) << p;
    for (const char* plan : kFig13Plans) EXPECT_GE(at.at("seesaw"), at.at(plan)) << p << " " << plan;
  }
}

// TP8 is not among Fig. 13's named curves, but §6.2 compares against the best plan of a full
// sweep, which includes it.
TEST(SeesawFig13, SeesawAtOrAboveTp8AtEveryOutput) {
  const Sweep s = sweep(run("seesaw-fig13"));
  for (const std::string& p : s.points) {
    const auto& at = s.tok_s.at(p);
    ASSERT_TRUE(at.count("tp=8") && at.count("seesaw")) << p;
    EXPECT_GE(at.at("seesaw"), at.at("tp=8")) << p;
  }
}

TEST(SeesawFig13, SeesawMatchesPp8WhenOnlyPrefilling) {
  const Sweep s = sweep(run("seesaw-fig13"));
  ASSERT_FALSE(s.points.empty());
  const auto& at = s.tok_s.at(s.points.front());
  ASSERT_EQ(s.points.front(), "out=1");
  expect_band(at.at("seesaw") / at.at("pp=8"), kFig13SeesawOverPp8AtOne, "out=1 seesaw / pp=8");
}

// ---- Fig. 14 (§6.5) ----

TEST(SeesawFig14, SeesawAtOrAboveEveryFixedPlanFromTenthToFiftyTimesPcie) {
  const Sweep s = sweep(run("seesaw-fig14"));
  ASSERT_GE(s.points.size(), 2u);
  EXPECT_EQ(s.points.front(), "0.1x");
  EXPECT_EQ(s.points.back(), "50x");
  for (const std::string& p : s.points) {
    const auto& at = s.tok_s.at(p);
    ASSERT_TRUE(at.count("seesaw")) << p;
    ASSERT_GE(at.size(), 3u) << p;
    for (const auto& [plan, tok] : at)
      if (plan != "seesaw") EXPECT_GE(at.at("seesaw"), tok) << p << " " << plan;
  }
}

TEST(SeesawFig14, SlowLinksFavourPipelineFastLinksTensorParallelism) {
  const Sweep s = sweep(run("seesaw-fig14"));
  ASSERT_GE(s.points.size(), 2u);
  auto best_fixed = [&](const std::string& point) {
    std::string best;
    double tok = -1;
    for (const auto& [plan, t] : s.tok_s.at(point))
      if (plan != "seesaw" && t > tok) tok = t, best = plan;
    return Plan::parse(best);
  };
  const Plan slow = best_fixed(s.points.front()), fast = best_fixed(s.points.back());
  EXPECT_EQ(slow.tp, 1) << s.points.front() << ": " << slow.to_string();
  EXPECT_EQ(fast.pp, 1) << s.points.back() << ": " << fast.to_string();
}

}  // namespace
}  // namespace loom::sim
