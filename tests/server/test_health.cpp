// Issue 36: /health sees a stalled engine, and stop strings stay off the engine thread.
//  - a step that does not end turns /health 503 once it has run past step_timeout_s, and 200
//    again when it ends;
//  - a follower rank that stops answering (blocked in its heartbeat) turns /health 503 once a
//    heartbeat has been out past heartbeat_timeout_s, and 200 when it answers again;
//  - an idle distributed engine's heartbeats keep its followers from timing out;
//  - a stop-string load beside a latency-bound request: the engine finishes every request while
//    the output thread (which runs the stop filter) is held, so no stop string can stall a step.
// The health clock is a manual one the test advances: a stall is counted in the test's steps,
// never in a wall-clock window; the only waits are for conditions (bounded generously).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>

#include "engine/dist_engine.h"
#include "server_fixture.h"

namespace loom::server::test {
namespace {

using nlohmann::json;

// A manual clock for ServingOptions::health_clock.
struct ManualHealthClock {
  std::atomic<double> t{1000.0};
  std::function<double()> fn() {
    return [this] { return t.load(); };
  }
  void advance(double s) { t.store(t.load() + s); }
};

// A gate a hook waits at while it is closed.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;
  int waiting = 0;
  void close() {
    std::lock_guard<std::mutex> l(mu);
    closed = true;
  }
  void open() {
    {
      std::lock_guard<std::mutex> l(mu);
      closed = false;
    }
    cv.notify_all();
  }
  void pass() {
    std::unique_lock<std::mutex> l(mu);
    if (!closed) return;
    ++waiting;
    cv.notify_all();
    cv.wait(l, [&] { return !closed; });
    --waiting;
  }
  bool wait_for_waiter(double timeout_s) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::duration<double>(timeout_s), [&] { return waiting > 0; });
  }
};

json health_of(httplib::Client& c, int* status) {
  auto h = c.Get("/health");
  if (!h) {
    *status = -1;
    return {};
  }
  *status = h->status;
  return json::parse(h->body, nullptr, false);
}

bool wait_until(const std::function<bool()>& pred, double timeout_s = 20) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

TEST(ServeHealth, StalledStepTurnsHealth503UntilItEnds) {
  ManualHealthClock clock;
  Gate gate;
  StackOptions o;
  o.health_clock = clock.fn();
  o.step_timeout_s = 30;
  o.hook = [&](Engine&, const StepBatch&) { gate.pass(); };
  Stack s(o);
  auto c = s.client();
  int st = 0;
  EXPECT_EQ(health_of(c, &st)["status"], "ok");
  EXPECT_EQ(st, 200);

  gate.close();
  auto done = std::async(std::launch::async, [&] {
    auto cc = s.client();
    int rs = 0;
    const json r = post_json(cc, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}, {"ignore_eos", true}}, &rs);
    return std::make_pair(rs, r);
  });
  ASSERT_TRUE(gate.wait_for_waiter(20)) << "the step never started";
  // Inside a step, not yet past its limit.
  clock.advance(29);
  health_of(c, &st);
  EXPECT_EQ(st, 200);
  // Past it: 503 naming the stall and the limit.
  clock.advance(2);
  const json h = health_of(c, &st);
  EXPECT_EQ(st, 503) << h.dump();
  EXPECT_EQ(h["status"], "unhealthy");
  const std::string why = h.value("error", "");
  EXPECT_NE(why.find("one step has run for 31 s"), std::string::npos) << why;
  EXPECT_NE(why.find("limit 30 s"), std::string::npos) << why;
  // The step ends: healthy again, and the request is served.
  gate.open();
  const auto [rs, r] = done.get();
  EXPECT_EQ(rs, 200) << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], 3);
  ASSERT_TRUE(wait_until([&] { return s.serving().stats().num_live == 0; }));
  health_of(c, &st);
  EXPECT_EQ(st, 200);
}

struct DistServe {
  DistOptions o;
  ManualHealthClock clock;
  Gate follower;  // rank 1 waits here in its heartbeat while closed
  DistServe(double comm_timeout_s) {
    o.comm = "local";
    o.ranks = 2;
    o.plan = "tp=2";
    o.model_path = tiny_model_path();
    o.engine.threads = 1;
    o.engine.max_num_seqs = 4;
    o.engine.kv_cache_bytes = 4 << 20;
    o.comm_options.timeout_s = comm_timeout_s;
    o.follower_heartbeat = [this](int rank) {
      if (rank == 1) follower.pass();
    };
  }
};

TEST(ServeHealth, StoppedFollowerTurnsHealth503WithinTheHeartbeatTimeout) {
  DistServe d(/*comm_timeout_s=*/120);  // far beyond the test: the follower is stalled, not dead
  auto tok = Tokenizer::create(load_vocab(d.o.model_path, ""));
  run_distributed(d.o, [&](DistEngine& engine) {
    ServingOptions so;
    so.model_name = "test-model";
    so.health_clock = d.clock.fn();
    so.heartbeat_period_s = 0.01;
    so.heartbeat_timeout_s = 5;
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
    // Heartbeats run while idle.
    const int64_t beats = serving.heartbeats();
    ASSERT_TRUE(wait_until([&] { return serving.heartbeats() >= beats + 3; })) << "no heartbeats while idle";
    health_of(c, &st);
    EXPECT_EQ(st, 200);

    // Rank 1 stops answering: the next heartbeat waits for it.
    d.follower.close();
    ASSERT_TRUE(d.follower.wait_for_waiter(20)) << "rank 1 never got a heartbeat";
    ASSERT_TRUE(wait_until([&] { return serving.in_heartbeat(); }));
    d.clock.advance(4.9);
    health_of(c, &st);
    EXPECT_EQ(st, 200) << "within the heartbeat timeout";
    d.clock.advance(0.2);
    const json h = health_of(c, &st);
    EXPECT_EQ(st, 503) << h.dump();
    const std::string why = h.value("error", "");
    EXPECT_NE(why.find("heartbeat"), std::string::npos) << why;
    EXPECT_NE(why.find("limit 5 s"), std::string::npos) << why;
    EXPECT_TRUE(serving.dead_reason().empty()) << "stalled, not dead";

    // It answers again: the heartbeat completes and /health is 200; requests are served.
    const int64_t before = serving.heartbeats();
    d.follower.open();
    ASSERT_TRUE(wait_until([&] { return serving.heartbeats() > before && !serving.in_heartbeat(); }));
    health_of(c, &st);
    EXPECT_EQ(st, 200);
    r = post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 4}, {"ignore_eos", true}}, &st);
    EXPECT_EQ(st, 200) << r.dump();
    serving.shutdown();
    http.stop();
  });
}

// Before the heartbeats an idle `serve --ranks 2` died once its followers had waited
// LOOM_COMM_TIMEOUT_S for the next step. Idle here for more heartbeats than fit in the
// communicator timeout (30 heartbeats of 0.1 s against 1 s), then serve.
TEST(ServeHealth, IdleDistributedEngineOutlivesTheCommTimeout) {
  DistServe d(/*comm_timeout_s=*/1);
  auto tok = Tokenizer::create(load_vocab(d.o.model_path, ""));
  run_distributed(d.o, [&](DistEngine& engine) {
    ServingOptions so;
    so.model_name = "test-model";
    so.heartbeat_period_s = 0.1;
    ServingEngine serving(engine, *tok, serving_eos_ids(*tok, "gguf", -1), so);
    HttpServerOptions ho;
    ho.port = 0;
    ho.model_name = "test-model";
    HttpServer http(serving, *tok, ho);
    const int port = http.start();
    ASSERT_TRUE(wait_until([&] { return serving.heartbeats() >= 30; }, 60));
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    int st = 0;
    const json r = post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 4}, {"ignore_eos", true}}, &st);
    EXPECT_EQ(st, 200) << r.dump();
    EXPECT_TRUE(serving.dead_reason().empty()) << serving.dead_reason();
    serving.shutdown();
    http.stop();
  });
}

// The probe's stop-string stall (one request's 480k stop strings took 186 s of engine time while
// other users' 20-token requests waited): requests with the largest stop strings allowed (4 x
// 1024 bytes, adversarial for a naive search) beside a latency-bound 20-token request. With the
// output thread (detokenising, stop filter) held, the engine still runs every request to its end:
// nothing on the engine's path waits for stop filtering. Released, every client gets its text.
TEST(ServeHealth, StopStringLoadBesideALatencyBoundRequest) {
  Gate out;
  StackOptions o;
  o.max_num_seqs = 16;
  o.output_hook = [&](const std::string& kind) {
    if (kind == "token") out.pass();
  };
  Stack s(o);
  const json stops = {std::string(1023, 'a') + "b", std::string(1023, ' ') + "x", std::string(1023, 'e') + "q",
                      std::string(1024, 't')};
  out.close();
  std::vector<std::future<std::pair<int, json>>> heavy;
  for (int i = 0; i < 8; ++i)
    heavy.push_back(std::async(std::launch::async, [&] {
      auto c = s.client(60);
      int st = 0;
      const json r = post_json(c, "/v1/completions",
                               {{"prompt", "Once upon a time"}, {"max_tokens", 48}, {"ignore_eos", true}, {"stop", stops}},
                               &st);
      return std::make_pair(st, r);
    }));
  auto light = std::async(std::launch::async, [&] {
    auto c = s.client(60);
    int st = 0;
    const json r = post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 20}, {"ignore_eos", true}}, &st);
    return std::make_pair(st, r);
  });
  ASSERT_TRUE(out.wait_for_waiter(20)) << "no token reached the output thread";
  // The engine finishes all 9 requests (and frees their KV) while the output thread is held.
  ASSERT_TRUE(s.wait_stats([](const EngineStats& st) { return st.num_live == 0 && st.kv_blocks_used == 0; }, 30))
      << "the engine waited for the output thread";
  const EngineStats st = s.serving().stats();
  EXPECT_GE(st.num_steps, 20);
  out.open();
  const auto [ls, lr] = light.get();
  EXPECT_EQ(ls, 200) << lr.dump();
  EXPECT_EQ(lr["usage"]["completion_tokens"], 20);
  for (auto& f : heavy) {
    const auto [hs, hr] = f.get();
    EXPECT_EQ(hs, 200) << hr.dump();
    EXPECT_EQ(hr["usage"]["completion_tokens"], 48) << hr.dump();
  }
}

}  // namespace
}  // namespace loom::server::test
