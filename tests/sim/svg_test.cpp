// The simulator's plots (sim/svg.h, experiments.h vs_paper_svg): round ticks worked by hand, and
// the simulated-vs-paper figure draws one bar per row that has a paper number.
#include <gtest/gtest.h>

#include "sim/experiments.h"
#include "sim/svg.h"

namespace loom::sim {
namespace {

void expect_ticks(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << i;
}

TEST(SvgTicks, RoundStepsOfOneTwoOrFive) {
  expect_ticks(nice_ticks(0, 1), {0, 0.2, 0.4, 0.6, 0.8, 1});          // raw 0.2: step 0.2
  expect_ticks(nice_ticks(0, 37), {0, 10, 20, 30});                      // raw 7.4: step 10
  expect_ticks(nice_ticks(3, 3.5), {3, 3.1, 3.2, 3.3, 3.4, 3.5});        // raw 0.1: step 0.1
  expect_ticks(nice_ticks(12.3, 987), {200, 400, 600, 800});             // raw 195: step 200
  expect_ticks(nice_ticks(-1, 1), {-1, -0.5, 0, 0.5, 1});                // raw 0.4: step 0.5
  expect_ticks(log_ticks(1, 1000), {1, 10, 100, 1000});
  expect_ticks(log_ticks(0.5, 20), {0.5, 1, 2, 5, 10, 20});              // under two decades: 1-2-5
}

TEST(SvgVsPaper, OneBarPerRowWithAPaperNumber) {
  ExperimentResult r;
  r.name = "x";
  r.rows = {{"ttft_ms", "tp", 12, 10.0, ""}, {"tpot_ms", "tp", 5, std::nullopt, ""}, {"tok_s", "sp", 90, 200.0, ""}};
  const std::string svg = vs_paper_svg(r);
  size_t bars = 0;
  for (size_t at = svg.find("class=\"bar\""); at != std::string::npos; at = svg.find("class=\"bar\"", at + 1)) ++bars;
  EXPECT_EQ(bars, 2u);
  EXPECT_NE(svg.find("ttft_ms  tp"), std::string::npos);
  EXPECT_EQ(svg.find("tpot_ms"), std::string::npos);
  // 12/10 is within 25% (green), 90/200 is not (orange).
  EXPECT_NE(svg.find("#2ca02c"), std::string::npos);
  EXPECT_NE(svg.find("#ff7f0e"), std::string::npos);
  r.rows = {{"tpot_ms", "tp", 5, std::nullopt, ""}};
  EXPECT_EQ(vs_paper_svg(r), "");
}

}  // namespace
}  // namespace loom::sim
