// Defect 4 of issue 19: /health reflects the engine. A follower rank of a distributed engine
// (two thread ranks, tp=2, over the local communicator) fails under serve: the request in
// flight fails, /health answers 503 naming the failure, later completions get 503 (not 500
// forever), and on_dead fires so the server shuts down. Real HTTP (cpp-httplib's client).
#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "core/error.h"
#include "engine/dist_engine.h"
#include "server_fixture.h"

namespace loom::server::test {
namespace {

using nlohmann::json;

TEST(ServeEngineDead, FollowerRankFailureMakesHealth503AndShutsDown) {
  const std::string path = tiny_model_path();
  auto tok = Tokenizer::create(load_vocab(path, ""));
  std::atomic<bool> kill_follower{false};
  DistOptions o;
  o.comm = "local";
  o.ranks = 2;
  o.plan = "tp=2";
  o.model_path = path;
  o.engine.threads = 1;
  o.engine.max_num_seqs = 4;
  o.engine.kv_cache_bytes = 4 << 20;
  o.comm_options.timeout_s = 20;
  o.follower_before_step = [&](int rank, const StepBatch&) {
    if (rank == 1 && kill_follower) throw loom::Error("injected: follower rank 1 died");
  };
  std::string run_error;
  try {
    run_distributed(o, [&](DistEngine& engine) {
      std::promise<std::string> dead;
      std::atomic<int> dead_calls{0};
      ServingOptions so;
      so.model_name = "test-model";
      so.on_dead = [&](const std::string& why) {
        if (dead_calls.fetch_add(1) == 0) dead.set_value(why);
      };
      ServingEngine serving(engine, *tok, serving_eos_ids(*tok, "gguf", -1), so);
      HttpServerOptions ho;
      ho.port = 0;
      ho.model_name = "test-model";
      HttpServer http(serving, *tok, ho);
      const int port = http.start();
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(30, 0);
      int st = 0;
      json r = post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 4}, {"ignore_eos", true}}, &st);
      ASSERT_EQ(st, 200) << r.dump();
      auto h = c.Get("/health");
      ASSERT_TRUE(h);
      EXPECT_EQ(h->status, 200);

      kill_follower = true;
      const auto t0 = std::chrono::steady_clock::now();
      r = post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 4}, {"ignore_eos", true}}, &st);
      EXPECT_EQ(st, 500) << r.dump();
      auto fut = dead.get_future();
      ASSERT_EQ(fut.wait_for(std::chrono::seconds(25)), std::future_status::ready) << "on_dead never ran";
      const std::string why = fut.get();
      EXPECT_NE(why.find("injected: follower rank 1 died"), std::string::npos) << why;
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 25.0);

      h = c.Get("/health");
      ASSERT_TRUE(h);
      EXPECT_EQ(h->status, 503) << h->body;
      const json hb = json::parse(h->body, nullptr, false);
      EXPECT_EQ(hb["status"], "unhealthy") << h->body;
      EXPECT_NE(hb["error"].get<std::string>().find("follower rank 1 died"), std::string::npos) << h->body;
      // Later completions: 503, not an endless series of 500s.
      r = post_json(c, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}}, &st);
      EXPECT_EQ(st, 503) << r.dump();
      EXPECT_EQ(dead_calls.load(), 1);
      // What serve does on on_dead: stop; nothing answers afterwards.
      serving.shutdown();
      http.stop();
      httplib::Client after("127.0.0.1", port);
      after.set_connection_timeout(1, 0);
      EXPECT_FALSE(after.Get("/health")) << "the server still answers after shutting down";
    });
  } catch (const std::exception& e) {
    run_error = e.what();
  }
  // The job ends with the follower's own error (run_distributed rethrows it).
  EXPECT_NE(run_error.find("follower rank 1 died"), std::string::npos) << run_error;
}

// One transient fault (not the step group breaking) does not kill the engine; three steps in a
// row do.
TEST(ServeEngineDead, ConsecutiveFaultsMakeTheEngineDead) {
  std::atomic<int> faults_left{0};
  StackOptions o;
  o.hook = [&](Engine&, const StepBatch&) {
    if (faults_left.load() > 0) {
      faults_left.fetch_sub(1);
      throw std::runtime_error("injected fault");
    }
  };
  Stack s(o);
  auto c = s.client();
  int st = 0;
  faults_left = 1;
  post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}}, &st);
  EXPECT_EQ(st, 500);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200) << "one fault must not kill the engine";
  // A clean step ends the series.
  post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}}, &st);
  EXPECT_EQ(st, 200);
  // Three failing steps in a row (each request's first step throws): alive after two, dead
  // after the third.
  faults_left = 3;
  for (int i = 0; i < 2; ++i) {
    post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}}, &st);
    EXPECT_EQ(st, 500);
    h = c.Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200) << "after " << i + 1 << " faults in a row";
  }
  post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}}, &st);
  EXPECT_EQ(st, 500);
  ASSERT_TRUE(s.wait_stats([&](const EngineStats&) { return !s.serving().dead_reason().empty(); }, 5));
  h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503) << h->body;
  post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}}, &st);
  EXPECT_EQ(st, 503);
}

}  // namespace
}  // namespace loom::server::test
