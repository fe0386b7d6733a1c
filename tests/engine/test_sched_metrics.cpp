// Metrics definitions and the shared step loop, on a clock that the executor advances by 1 s per
// step, so every latency is known by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "engine/engine_loop.h"
#include "engine/metrics.h"

namespace loom {
namespace {

// numpy.percentile(..., method="linear") values, computed by hand from the definition.
TEST(Percentile, MatchesNumpyLinear) {
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({15, 20, 35, 40, 50}, 40), 29);  // numpy docs example
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
  EXPECT_THROW(percentile(v, 101), InternalError);
  const Distribution d = summarize({1000, 1500, 1000});
  EXPECT_EQ(d.count, 3);
  EXPECT_NEAR(d.mean, 3500.0 / 3, 1e-9);
  EXPECT_DOUBLE_EQ(d.p50, 1000);
  EXPECT_DOUBLE_EQ(d.p90, 1400);
  EXPECT_DOUBLE_EQ(d.max, 1500);
}

// summarize() selects order statistics instead of sorting: its percentiles are exactly (bit for
// bit) percentile()'s, on shuffled vectors with repeats, of every length up to 300.
TEST(Percentile, SummarizeEqualsPercentileExactly) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  for (size_t n = 1; n <= 300; ++n) {
    std::vector<double> v(n);
    for (double& e : v) e = double(next() % 97) * 0.37 + (next() % 3 == 0 ? 1e-3 * double(next() % 1000) : 0.0);
    const Distribution d = summarize(v);
    EXPECT_EQ(d.p50, percentile(v, 50)) << n;
    EXPECT_EQ(d.p90, percentile(v, 90)) << n;
    EXPECT_EQ(d.p99, percentile(v, 99)) << n;
  }
}

// Fake forward pass: one second per step, token 7 for every sample; throws on a chosen step.
class OneSecondExecutor : public StepExecutor {
 public:
  explicit OneSecondExecutor(ManualClock& c) : clock_(c) {}
  int64_t fail_step = -1;
  std::vector<RequestId> released;
  StepResult execute(const StepBatch& b) override {
    clock_.advance(1.0);
    if (b.step_index == fail_step) throw std::runtime_error("device lost");
    StepResult r;
    for (const ScheduledSeq& e : b.seqs)
      if (e.sample) r.sampled.push_back({e.seq_id, 7});
    return r;
  }
  void release(RequestId id) override { released.push_back(id); }

 private:
  ManualClock& clock_;
};

Request req(RequestId id, int prompt, int max_tokens, double arrival) {
  Request r;
  r.id = id;
  r.synthetic_prompt_len = prompt;  // length-only, as the simulator uses
  r.max_tokens = max_tokens;
  r.arrival_s = arrival;
  return r;
}

SchedulerConfig small_config() {
  SchedulerConfig c;
  c.block_size = 4;
  c.num_blocks = 32;
  c.max_tokens_per_step = 64;
  c.max_num_seqs = 8;
  c.max_model_len = 128;
  c.watermark = 0;
  return c;
}

// Timeline (by hand):
//   t=0 r1 arrives (prompt 3, 3 tokens); step 0 [0,1): P1 -> r1 token at 1
//   r2 arrives at 0.5, injected at t=1; step 1 [1,2): D1 P2 -> r1, r2 tokens at 2
//   step 2 [2,3): D1 D2 -> r1 (3rd, length) and r2 (2nd, length) at 3
//   idle until r3 at 10; step 3 [10,11): P3 -> r3 token and finish at 11
TEST(EngineLoop, LatenciesOnAManualClock) {
  Scheduler s(small_config());
  ManualClock clock;
  OneSecondExecutor exec(clock);
  Metrics m;
  std::vector<Request> arrivals = {req(1, 3, 3, 0), req(2, 2, 2, 0.5), req(3, 4, 1, 10)};
  arrivals[0].slo = Slo{1200, 0};
  arrivals[1].slo = Slo{1200, 0};
  EXPECT_EQ(run_until_idle(s, exec, clock, m, arrivals), 4);
  EXPECT_DOUBLE_EQ(clock.now(), 11);

  const RequestMetrics* r1 = m.find(1);
  const RequestMetrics* r2 = m.find(2);
  const RequestMetrics* r3 = m.find(3);
  ASSERT_TRUE(r1 && r2 && r3);
  EXPECT_DOUBLE_EQ(r1->ttft_s(), 1);
  EXPECT_EQ(r1->itl_s(), (std::vector<double>{1, 1}));
  EXPECT_DOUBLE_EQ(*r1->tpot_s(), 1);
  EXPECT_DOUBLE_EQ(r1->e2e_s(), 3);
  EXPECT_EQ(r1->finish_reason, FinishReason::kLength);
  EXPECT_DOUBLE_EQ(r2->ttft_s(), 1.5);
  EXPECT_DOUBLE_EQ(*r2->tpot_s(), 1);
  EXPECT_DOUBLE_EQ(r2->e2e_s(), 2.5);
  EXPECT_DOUBLE_EQ(r3->ttft_s(), 1);
  EXPECT_FALSE(r3->tpot_s().has_value());  // one output token
  EXPECT_EQ(*r1->slo_met(), true);
  EXPECT_EQ(*r2->slo_met(), false);
  EXPECT_FALSE(r3->slo_met().has_value());

  const MetricsSummary sum = m.summary();
  EXPECT_EQ(sum.num_completed, 3);
  EXPECT_EQ(sum.num_output_tokens, 6);
  EXPECT_EQ(sum.num_steps, 4);
  EXPECT_DOUBLE_EQ(sum.duration_s, 11);
  EXPECT_DOUBLE_EQ(sum.output_tokens_per_s, 6.0 / 11);
  EXPECT_DOUBLE_EQ(sum.ttft_ms.p90, 1400);
  EXPECT_DOUBLE_EQ(*sum.slo_attainment, 0.5);

  ASSERT_EQ(m.steps().size(), 4u);
  EXPECT_EQ(m.steps()[0].num_prefill_tokens, 3);
  EXPECT_EQ(m.steps()[0].kv_blocks_used, 1);
  EXPECT_EQ(m.steps()[1].num_decode_tokens, 1);
  EXPECT_EQ(m.steps()[1].num_prefill_tokens, 2);
  EXPECT_EQ(m.steps()[1].kv_blocks_used, 2);
  EXPECT_DOUBLE_EQ(m.steps()[3].start_s, 10);
  EXPECT_DOUBLE_EQ(m.steps()[3].end_s, 11);

  const nlohmann::json j = m.to_json(true, true);
  EXPECT_EQ(j["summary"]["num_completed"], 3);
  EXPECT_EQ(j["requests"].size(), 3u);
  EXPECT_EQ(j["steps"].size(), 4u);
  EXPECT_DOUBLE_EQ(j["requests"][1]["ttft_ms"].get<double>(), 1500);
  std::ostringstream rc, sc;
  m.write_requests_csv(rc);
  m.write_steps_csv(sc);
  const std::string rcsv = rc.str(), scsv = sc.str();
  EXPECT_EQ(std::count(rcsv.begin(), rcsv.end(), '\n'), 4);  // header + 3
  EXPECT_EQ(std::count(scsv.begin(), scsv.end(), '\n'), 5);  // header + 4
  EXPECT_EQ(rcsv.substr(0, 3), "id,");
  EXPECT_EQ(exec.released, (std::vector<RequestId>{1, 2, 3}));
}

// The steps CSV is RFC 4180: a plan name with commas (or quotes) is one quoted field, so every
// row has the header's 12 fields for a CSV reader.
TEST(Metrics, StepsCsvQuotesPlanNamesWithCommas) {
  Metrics m;
  for (const char* plan : {"tp=2", "dp=2,weights=owner", "odd \"name\""}) {
    StepMetrics s;
    s.plan = plan;
    m.on_step(s);
  }
  std::ostringstream os;
  m.write_steps_csv(os);
  std::istringstream in(os.str());
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1].substr(lines[1].rfind(',') + 1), "tp=2");
  EXPECT_EQ(lines[2].substr(lines[2].size() - 21), ",\"dp=2,weights=owner\"");
  EXPECT_EQ(lines[3].substr(lines[3].size() - 15), ",\"odd \"\"name\"\"\"");
  // Fields outside quotes: 12 on every line.
  for (const std::string& l : lines) {
    int fields = 1;
    bool quoted = false;
    for (char c : l) {
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) ++fields;
    }
    EXPECT_EQ(fields, 12) << l;
  }
}

TEST(EngineLoop, ExecutorFailureFinishesBatchWithErrorAndContinues) {
  Scheduler s(small_config());
  ManualClock clock;
  OneSecondExecutor exec(clock);
  exec.fail_step = 1;
  Metrics m;
  EngineLoop loop(s, exec, clock, m);
  std::vector<FinishReason> reasons;
  loop.on_finish = [&](const Sequence& q) { reasons.push_back(q.finish_reason); };
  loop.add_arrival(req(1, 5, 4, 0));
  loop.add_arrival(req(2, 5, 1, 3));  // arrives after the failure
  loop.run_until_idle();
  EXPECT_EQ(reasons, (std::vector<FinishReason>{FinishReason::kError, FinishReason::kLength}));
  EXPECT_EQ(s.num_free_blocks(), 32);
  EXPECT_EQ(m.summary().num_errors, 1);
}

TEST(EngineLoop, SubmitCancelAndRejectThroughTheInbox) {
  Scheduler s(small_config());
  ManualClock clock;
  OneSecondExecutor exec(clock);
  Metrics m;
  EngineLoop loop(s, exec, clock, m);
  std::vector<TokenEvent> tokens;
  loop.on_token = [&](const TokenEvent& e) { tokens.push_back(e); };
  loop.submit(req(1, 3, 10, 0));
  loop.submit(req(2, 200, 10, 0));  // over max_model_len: rejected alone
  EXPECT_TRUE(loop.step());
  loop.cancel(1);
  EXPECT_FALSE(loop.step());  // cancelled before scheduling: nothing left to run
  EXPECT_TRUE(loop.idle());
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0].seq_id, 1);
  const MetricsSummary sum = m.summary();
  EXPECT_EQ(sum.num_rejected, 1);
  EXPECT_EQ(sum.num_aborted, 1);
  EXPECT_EQ(s.num_free_blocks(), 32);
}

}  // namespace
}  // namespace loom
