// Nitsum's pool under `serve` (cluster/pool.h, issue 15): one model served by N ranks as several
// instances that step independently, with forced TP switches (regroupings at window boundaries),
// P/D hand-offs, real HTTP clients, and the single-rank engine (test Stack) as the reference.
//
// Exactness classes: a regrouping or hand-off moves K/V (pure data movement: every rank must hold
// exactly its instance's cells after it, checked on every rank after every step); TP(2) / TP(4)
// instances change the summation order of the row-parallel matmuls (all-reduce), so the assertion
// is the single-rank engine's greedy TEXT, token for token, not the logits' bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "core/rng.h"
#include "kv/kv_oracle.h"
#include "kv/kv_store.h"
#include "server/bench_serve.h"
#include "pool_fixture.h"

namespace loom::server::test {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string stories_path() { return std::string(LOOM_SHARED_DIR) + "/models/stories260K/stories260K.bin"; }
std::string stories_tok() { return std::string(LOOM_SHARED_DIR) + "/models/stories260K/tok512.bin"; }
bool have_stories() { return std::ifstream(stories_path()).good() && std::ifstream(stories_tok()).good(); }

// The synthetic GQA model (24 query heads, 6 KV heads, f32), written once per process.
std::string gqa_model_path() {
  static std::string path = [] {
    SynthOptions o;
    o.shape = synth_shape("gqa-24x6");
    o.dtype = DType::F32;
    o.seed = 7;
    o.threads = 1;
    const std::string p = loom::test::temp_dir() + "/gqa_24x6.gguf";
    write_synth_model(o, p);
    return p;
  }();
  return path;
}

// `n` greedy completions (token-id prompts, ignore_eos) of lengths [1, max_prompt] and outputs
// [min_out, max_out], vocabulary ids [3, vocab).
std::vector<json> greedy_bodies(int n, uint64_t seed, int max_prompt, int min_out, int max_out, int vocab) {
  Rng rng(seed);
  std::vector<json> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int> prompt(1 + rng.below(uint64_t(max_prompt)));
    for (int& id : prompt) id = 3 + int(rng.below(uint64_t(vocab - 3)));
    const int max_tokens = min_out + int(rng.below(uint64_t(max_out - min_out + 1)));
    out.push_back({{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}});
  }
  return out;
}

// POSTs every body at once (one client thread each); the text of each, or "ERROR ...".
std::vector<std::string> complete_all(int port, const std::vector<json>& bodies) {
  std::vector<std::string> texts(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i)
    threads.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(120, 0);
      int status = 0;
      const json j = post_json(c, "/v1/completions", bodies[i], &status);
      if (status != 200) {
        texts[i] = "ERROR " + std::to_string(status) + " " + j.dump();
        return;
      }
      texts[i] = j["choices"][0]["text"].get<std::string>() + "|" + j["usage"].dump();
    });
  for (auto& t : threads) t.join();
  return texts;
}

// The single-rank engine's answers (the reference).
std::vector<std::string> single_rank_texts(const std::string& model, const std::string& tok, const std::vector<json>& bodies,
                                           const std::string& tiers = "") {
  StackOptions o;
  o.tiers = tiers;
  o.model_path = model;
  o.tokenizer_path = tok;
  o.max_num_seqs = 32;
  Stack s(o);
  return complete_all(s.port(), bodies);
}

// After every step, on every pool rank: the rank's store holds exactly what the instance's plan
// gives it for the step's sequences (the naive oracle, kv/kv_oracle.h), nothing else of them.
struct HoldingsCheck {
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int64_t> steps{0};
  std::function<void(int, RankEngine&, const StepBatch&)> hook() {
    return [this](int r, RankEngine& e, const StepBatch& b) {
      std::vector<SeqExtent> seqs;
      for (const ScheduledSeq& s : b.seqs) seqs.push_back({s.seq_id, s.context_len()});
      const std::string bad =
          loom::test::naive_holdings_diff(e.kv(), e.plans().plan(0), e.plans().shape(), e.world_rank(), seqs);
      ++steps;
      if (bad.empty()) return;
      std::lock_guard<std::mutex> lk(mu);
      if (failures.size() < 5) failures.push_back("pool rank " + std::to_string(r) + ": " + bad);
    };
  }
};

void expect_same(const std::vector<std::string>& got, const std::vector<std::string>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(want[i].rfind("ERROR", 0), std::string::npos) << want[i];
    EXPECT_EQ(got[i], want[i]) << "request " << i;
  }
}

void expect_every_page_back(PoolStack& p) {
  const std::vector<int64_t> pages = p.exit_pages();
  for (size_t r = 0; r < pages.size(); ++r) EXPECT_EQ(pages[r], 0) << "pool rank " << r << " still holds K/V pages";
}

// `bodies` through a pool of `ranks` cycling `layouts` every `window_steps` steps of its instances
// (counted, not timed: a sanitized build's slower steps change nothing), against the single-rank
// engine: the same text for every request, every rank's holdings right after every step, every
// page back at the end. Returns what the pool did (and its per-group stats in *plans).
cluster::PoolStats same_text_as_single_rank(const std::string& model, const std::string& tok, int ranks,
                                            std::vector<std::string> layouts, int64_t window_steps,
                                            const std::vector<json>& bodies, std::vector<PlanStats>* plans = nullptr) {
  const std::vector<std::string> want = single_rank_texts(model, tok, bodies);
  HoldingsCheck check;
  PoolStackOptions o;
  o.model_path = model;
  o.tokenizer_path = tok;
  o.ranks = ranks;
  o.layouts = std::move(layouts);
  o.window_steps = window_steps;
  std::printf("control window %lld steps\n", (long long)window_steps);
  o.after_step = check.hook();
  PoolStack p(o);
  EXPECT_EQ(p.error(), "");
  const std::vector<std::string> got = complete_all(p.port(), bodies);
  p.stop();
  expect_same(got, want);
  EXPECT_GT(check.steps.load(), 0);
  EXPECT_TRUE(check.failures.empty()) << check.failures.front();
  expect_every_page_back(p);
  if (plans) *plans = p.final_plans();
  return p.final_stats();
}

TEST(NitsumPool, StoriesTextAcrossForcedTpSwitchesEqualsSingleRank) {
  if (!have_stories()) GTEST_SKIP() << "needs ../shared/models/stories260K";
  // DP(2) <-> TP(2) every 8 steps, the running requests' K/V re-partitioned by KV heads.
  const cluster::PoolStats st = same_text_as_single_rank(stories_path(), stories_tok(), 2, {"both:tp1,both:tp1", "both:tp2"},
                                                         8, greedy_bodies(8, 11, 40, 80, 140, 512));
  std::printf("switches: %lld reconfigurations, %lld requests moved, %lld KV bytes, %.3f ms stop+migrate max\n",
              (long long)st.reconfigurations, (long long)st.moved, (long long)st.regroup_bytes, st.switch_s_max * 1e3);
  EXPECT_GE(st.reconfigurations, 2);
  EXPECT_GT(st.moved, 0);
  EXPECT_GT(st.regroup_bytes, 0) << "no switch happened while a request held K/V";
}

TEST(NitsumPool, StoriesTextWithPdHandoffsEqualsSingleRank) {
  if (!have_stories()) GTEST_SKIP() << "needs ../shared/models/stories260K";
  const std::vector<json> bodies = greedy_bodies(8, 12, 60, 20, 60, 512);
  std::vector<PlanStats> plans;
  const cluster::PoolStats st =
      same_text_as_single_rank(stories_path(), stories_tok(), 2, {"prefill:tp1,decode:tp1"}, 16, bodies, &plans);
  // Every request prefilled on rank 0's instance and decoded on rank 1's: one hand-off each.
  EXPECT_EQ(st.handoffs, int64_t(bodies.size()));
  EXPECT_EQ(st.recomputed, 0);
  EXPECT_GT(st.handoff_bytes, 0);
  for (const PlanStats& g : plans) {
    if (g.name == "tp1@1") {
      EXPECT_GT(g.steps, 0) << "the decode instance never stepped";
    }
  }
}

TEST(NitsumPool, GqaTextAcrossTpSwitchesAndHandoffsOnFourRanksEqualsSingleRank) {
  const cluster::PoolStats st = same_text_as_single_rank(
      gqa_model_path(), "", 4,
      {"prefill:tp2,decode:tp2", "both:tp4", "prefill:tp1,decode:tp1,both:tp2", "both:tp1,both:tp1,decode:tp1,prefill:tp1"},
      8, greedy_bodies(10, 13, 50, 40, 90, 512));
  std::printf("gqa: %lld reconfigurations, %lld hand-offs, %lld moved (%lld recomputed), %lld + %lld KV bytes\n",
              (long long)st.reconfigurations, (long long)st.handoffs, (long long)st.moved, (long long)st.recomputed,
              (long long)st.regroup_bytes, (long long)st.handoff_bytes);
  EXPECT_GE(st.reconfigurations, 3);
  EXPECT_GT(st.handoffs, 0);
  EXPECT_GT(st.regroup_bytes, 0);
}

// The planner drives the pool (no forced layout): a synthetic profile table in which one tier is
// served best by P/D pairs of TP(1) and the other by TP(2), two tiers of requests; every window
// GlobalScheduler::next_window re-plans from the arrival rates. Whatever it chooses, the text is
// the single-rank engine's and nothing is lost.
TEST(NitsumPool, PlannerDrivenPoolServesBothTiersWithTheSingleRankText) {
  if (!have_stories()) GTEST_SKIP() << "needs ../shared/models/stories260K";
  cluster::ProfileTable table(2, {1, 2});
  table.at(0, 1) = {40, 4, 20, 8, 10, 8};   // chat: TP(1) prefill 40 rps, decode 20 rps
  table.at(0, 2) = {50, 4, 25, 8, 12, 8};
  table.at(1, 1) = {5, 2, 5, 4, 2, 4};      // code: TP(2) far better
  table.at(1, 2) = {60, 8, 60, 16, 30, 16};
  std::vector<json> bodies = greedy_bodies(12, 14, 40, 30, 60, 512);
  for (size_t i = 0; i < bodies.size(); ++i) bodies[i]["tier"] = i % 3 ? "chat" : "code";
  const std::string tier_spec = "chat=60000/60000,code=60000/60000";
  const std::vector<std::string> want = single_rank_texts(stories_path(), stories_tok(), bodies, tier_spec);
  PoolStackOptions o;
  o.model_path = stories_path();
  o.tokenizer_path = stories_tok();
  o.ranks = 2;
  o.tiers = tier_spec;
  o.table = table;
  o.window_steps = 6;  // windows counted in pool steps, not wall time (a loaded machine changes nothing)
  PoolStack p(o);
  ASSERT_EQ(p.error(), "");
  std::vector<std::string> got;
  for (int round = 0; round < 3; ++round) {  // bursts: the rates change from window to window
    got = complete_all(p.port(), bodies);
    expect_same(got, want);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto c = p.client();
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric_value(m->body, "loom:tier_requests_finished_total{model_name=\"test-model\",tier=\"code\"}"), 12);
  EXPECT_EQ(metric_value(m->body, "loom:tier_requests_finished_total{model_name=\"test-model\",tier=\"chat\"}"), 24);
  p.stop();
  const cluster::PoolStats st = p.final_stats();
  std::printf("planner: %lld windows, %lld reconfigurations, %lld hand-offs; last layout %s\n", (long long)st.windows,
              (long long)st.reconfigurations, (long long)st.handoffs, st.layout.c_str());
  EXPECT_GT(st.windows, 0);
  expect_every_page_back(p);
}

// A long prefill on one instance does not stall another instance's decodes (they step
// independently). Every decode step is slowed to 5 ms and a 150+-token prefill step to 600 ms
// (test hook); request A decodes on one instance while B's prefill runs on the other. A lockstep
// engine would give A no token during B's prefill.
TEST(NitsumPool, LongPrefillOnOneInstanceDoesNotStallAnothersDecodes) {
  std::mutex mu;
  Clock::time_point slow_begin{}, slow_end{};
  PoolStackOptions o;
  o.ranks = 2;
  o.layouts = {"both:tp1,both:tp1"};
  o.after_step = [&](int, RankEngine&, const StepBatch& b) {
    if (b.num_prefill_tokens >= 150) {
      const auto t0 = Clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      std::lock_guard<std::mutex> lk(mu);
      slow_begin = t0;
      slow_end = Clock::now();
    } else if (b.num_prefill_tokens == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  PoolStack p(o);
  ASSERT_EQ(p.error(), "");
  std::vector<Clock::time_point> a_tokens;
  std::atomic<int> a_chunks{0};
  std::thread a([&] {
    auto c = p.client();
    SseParser parser;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", {5, 6, 7, 8}}, {"max_tokens", 240}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}}.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* d, size_t len, uint64_t, uint64_t) {
      parser.feed(d, len, [&](const std::string& payload) {
        if (payload == "[DONE]") return;
        std::lock_guard<std::mutex> lk(mu);
        a_tokens.push_back(Clock::now());
        ++a_chunks;
      });
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    c.send(req, res, err);
  });
  // B once A streams (A's instance has a request outstanding: least-loaded routing sends B to
  // the other instance).
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (a_chunks.load() < 3 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GE(a_chunks.load(), 3);
  std::vector<int> long_prompt(160);
  for (size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = 3 + int(i % 400);
  auto c = p.client();
  int status = 0;
  post_json(c, "/v1/completions", json{{"prompt", long_prompt}, {"max_tokens", 2}, {"temperature", 0}}, &status);
  EXPECT_EQ(status, 200);
  a.join();
  p.stop();
  std::lock_guard<std::mutex> lk(mu);
  ASSERT_NE(slow_begin, Clock::time_point{}) << "B's prefill never ran as one 150+-token step";
  int during = 0;
  for (const auto& t : a_tokens) during += t > slow_begin && t < slow_end;
  std::printf("A streamed %d of its tokens during B's %.0f ms prefill\n", during,
              std::chrono::duration<double, std::milli>(slow_end - slow_begin).count());
  EXPECT_GE(during, 20);
}

TEST(NitsumPool, UnknownTierIs400AndKnownTiersServe) {
  PoolStackOptions o;
  o.ranks = 2;
  o.tiers = "strict=60000/60000,loose=60000/60000";
  o.layouts = {"both:tp1:strict,both:tp1:loose"};
  PoolStack p(o);
  ASSERT_EQ(p.error(), "");
  auto c = p.client();
  int status = 0;
  json j = post_json(c, "/v1/completions", json{{"prompt", "hi"}, {"max_tokens", 3}, {"tier", "gold"}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(j.dump().find("unknown tier 'gold'"), std::string::npos) << j.dump();
  for (const char* tier : {"strict", "loose"}) {
    j = post_json(c, "/v1/completions", json{{"prompt", "hi"}, {"max_tokens", 3}, {"tier", tier}}, &status);
    EXPECT_EQ(status, 200) << j.dump();
  }
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric_value(m->body, "loom:tier_requests_finished_total{model_name=\"test-model\",tier=\"loose\"}"), 1);
}

// A soak with switches under concurrent streaming load (a layout change every 4 pool steps): every
// request completes or is
// cancelled, none is lost or duplicated (each completed stream ends once, with exactly its
// max_tokens), and every KV block and page is back at the end.
TEST(NitsumPool, SoakWithSwitchesUnderStreamingLoad) {
  PoolStackOptions o;
  o.ranks = 4;
  o.layouts = {"prefill:tp1,decode:tp1,both:tp2", "both:tp4", "prefill:tp2,decode:tp1,decode:tp1",
               "both:tp1,both:tp1,both:tp1,both:tp1"};
  o.window_steps = 4;  // windows counted in steps: the reconfigurations and hand-offs below do not
                       // depend on how fast this machine runs (it failed with 0 hand-offs on a
                       // loaded one when windows were 15 ms)
  o.max_num_seqs = 24;
  o.kv_cache_bytes = 256 << 10;  // small: preemptions, and hand-offs that must recompute
  PoolStack p(o);
  ASSERT_EQ(p.error(), "");
  const int n = 100;
  Rng rng(5);
  struct Plan {
    json body;
    int drop_after = 0;  // 0: read to the end
  };
  std::vector<Plan> plans;
  for (int i = 0; i < n; ++i) {
    std::vector<int> prompt(1 + rng.below(40));
    for (int& id : prompt) id = 3 + int(rng.below(500));
    const json body = {{"prompt", prompt}, {"max_tokens", 4 + int(rng.below(45))}, {"ignore_eos", true},
                       {"temperature", 0.8}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
    plans.push_back({body, rng.below(100) < 25 ? 1 + int(rng.below(4)) : 0});
  }
  std::vector<int> usage_tokens(n, -1), done(n, 0), finish_chunks(n, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      auto c = p.client();
      SseParser parser;
      int chunks = 0;
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = plans[size_t(i)].body.dump();
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&](const char* d, size_t len, uint64_t, uint64_t) {
        bool keep = true;
        parser.feed(d, len, [&](const std::string& payload) {
          if (payload == "[DONE]") {
            ++done[size_t(i)];
            return;
          }
          const json j = json::parse(payload, nullptr, false);
          if (j.contains("usage") && j["usage"].is_object()) usage_tokens[size_t(i)] = j["usage"]["completion_tokens"];
          if (j.contains("choices") && !j["choices"].empty() && !j["choices"][0]["finish_reason"].is_null())
            ++finish_chunks[size_t(i)];
          if (plans[size_t(i)].drop_after && ++chunks >= plans[size_t(i)].drop_after) keep = false;
        });
        return keep;
      };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      c.send(req, res, err);
    });
  for (auto& t : threads) t.join();
  int completed = 0;
  for (int i = 0; i < n; ++i) {
    if (plans[size_t(i)].drop_after) continue;
    ++completed;
    EXPECT_EQ(done[size_t(i)], 1) << "request " << i;
    EXPECT_EQ(finish_chunks[size_t(i)], 1) << "request " << i;
    EXPECT_EQ(usage_tokens[size_t(i)], plans[size_t(i)].body["max_tokens"].get<int>()) << "request " << i;
  }
  ASSERT_TRUE(p.wait_stats([](const EngineStats& st) { return st.num_live == 0 && st.kv_blocks_used == 0; }, 30))
      << "live " << p.serving().stats().num_live << ", blocks " << p.serving().stats().kv_blocks_used;
  auto c = p.client();
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  const auto v = [&](const std::string& reason) {
    return metric_value(m->body, "vllm:request_success_total{model_name=\"test-model\",finished_reason=\"" + reason + "\"}");
  };
  EXPECT_EQ(v("stop") + v("length") + v("abort"), double(n));
  EXPECT_GE(v("length"), double(completed));
  EXPECT_EQ(metric_value(m->body, "loom:requests_failed_total{model_name=\"test-model\",reason=\"error\"}"), 0);
  p.stop();
  const cluster::PoolStats st = p.final_stats();
  std::printf("soak: %d completed, %g aborted; %lld reconfigurations, %lld hand-offs, %lld moved, %lld recomputed\n",
              completed, v("abort"), (long long)st.reconfigurations, (long long)st.handoffs, (long long)st.moved,
              (long long)st.recomputed);
  EXPECT_GE(st.reconfigurations, 3);
  EXPECT_GT(st.handoffs, 0);
  expect_every_page_back(p);
}

}  // namespace
}  // namespace loom::server::test
