// Soak: 200 concurrent streaming requests on the tiny model with a small KV cache (so the
// scheduler preempts), a third of the clients going away at random moments (after some chunks,
// right after sending, or with a TCP reset). Every request must end (completed or cancelled),
// every KV block must come back, /health must still answer; bounded in time.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/rng.h"
#include "server/bench_serve.h"
#include "server_fixture.h"

namespace loom::server::test {
namespace {

using nlohmann::json;

// Sends one HTTP request on a raw socket; reads `read_bytes` bytes of the answer (0: none);
// closes, with a TCP reset when `reset`.
void raw_request_then_close(int port, const std::string& body, int read_bytes, bool reset) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), ssize_t(req.size()));
  char buf[256];
  int got = 0;
  while (got < read_bytes) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got += int(n);
  }
  if (reset) {
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  ::close(fd);
}

TEST(ServeSoak, TwoHundredConcurrentStreamsWithRandomDisconnects) {
  const auto t_start = std::chrono::steady_clock::now();
  StackOptions o;
  o.max_num_seqs = 32;
  o.max_queue = 256;
  o.kv_cache_bytes = 64 * 8192;  // 64 blocks of 16 tokens for the tiny model: preemptions happen
  Stack s(o);
  const int n = 200;
  Rng rng(99);
  enum Kind { kComplete, kDropAfterChunks, kCloseAtOnce, kResetAfterBytes };
  struct Plan {
    Kind kind;
    json body;
    int k;
  };
  std::vector<Plan> plans;
  for (int i = 0; i < n; ++i) {
    std::vector<int> prompt(1 + rng.below(40));
    for (int& id : prompt) id = 3 + int(rng.below(500));
    const int max_tokens = 4 + int(rng.below(45));
    const json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"ignore_eos", true},
                       {"temperature", 0.8}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
    const uint64_t u = rng.below(100);
    const Kind kind = u < 60 ? kComplete : u < 80 ? kDropAfterChunks : u < 90 ? kCloseAtOnce : kResetAfterBytes;
    plans.push_back({kind, body, 1 + int(rng.below(3))});
  }
  std::vector<int> completed_tokens(n, -1);
  std::vector<int> done(n, 0);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      const Plan& p = plans[size_t(i)];
      if (p.kind == kCloseAtOnce || p.kind == kResetAfterBytes) {
        raw_request_then_close(s.port(), p.body.dump(), p.kind == kCloseAtOnce ? 0 : 1, p.kind == kResetAfterBytes);
        return;
      }
      auto c = s.client(60);
      SseParser parser;
      int chunks = 0;
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = p.body.dump();
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&](const char* d, size_t len, uint64_t, uint64_t) {
        bool keep = true;
        parser.feed(d, len, [&](const std::string& payload) {
          if (payload == "[DONE]") {
            done[size_t(i)] = 1;
            return;
          }
          const json j = json::parse(payload, nullptr, false);
          if (j.contains("usage") && j["usage"].is_object()) completed_tokens[size_t(i)] = j["usage"]["completion_tokens"];
          if (++chunks >= p.k && p.kind == kDropAfterChunks) keep = false;
        });
        return keep;
      };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      if (!c.send(req, res, err) && p.kind == kComplete)
        errors[size_t(i)] = httplib::to_string(err) + " status " + std::to_string(res.status);
    });
  }
  for (auto& t : threads) t.join();

  int n_complete = 0;
  for (int i = 0; i < n; ++i) {
    if (plans[size_t(i)].kind != kComplete) continue;
    ++n_complete;
    EXPECT_TRUE(done[size_t(i)]) << "request " << i << " did not end with [DONE]: " << errors[size_t(i)];
    EXPECT_EQ(completed_tokens[size_t(i)], plans[size_t(i)].body["max_tokens"].get<int>()) << "request " << i;
  }
  EXPECT_GT(n_complete, 80);
  // Every request ended (completed or cancelled) and every block is back.
  ASSERT_TRUE(s.wait_stats([](const EngineStats& st) { return st.num_live == 0 && st.kv_blocks_used == 0; }, 20))
      << "live " << s.serving().stats().num_live << ", blocks " << s.serving().stats().kv_blocks_used;
  auto c = s.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  const auto v = [&](const std::string& reason) {
    return metric_value(m->body, "vllm:request_success_total{model_name=\"test-model\",finished_reason=\"" + reason + "\"}");
  };
  EXPECT_EQ(v("stop") + v("length") + v("abort"), double(n));
  EXPECT_GE(v("length"), double(n_complete));
  EXPECT_EQ(metric_value(m->body, "loom:requests_failed_total{model_name=\"test-model\",reason=\"error\"}"), 0);
  EXPECT_EQ(metric_value(m->body, "vllm:kv_cache_usage_perc"), 0);
  std::printf("soak: %d completed by plan, aborted %g, preemptions %g\n", n_complete, v("abort"),
              metric_value(m->body, "vllm:num_preemptions_total"));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  EXPECT_LT(secs, 60.0);
}

}  // namespace
}  // namespace loom::server::test
