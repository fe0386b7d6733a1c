// Unit tests of the pieces under the HTTP layer: stop strings over streamed text (against a
// naive whole-text reference), request validation, Prometheus rendering, SSE parsing and the
// bench summary arithmetic.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "server/bench_serve.h"
#include "server/http_server.h"
#include "server/serving_engine.h"
#include "server/openai_api.h"
#include "server/prometheus.h"
#include "server/stop_filter.h"

namespace loom::server {
namespace {

// Naive reference: after each chunk arrives (a token's text), search the whole text so far;
// the first time any stop string occurs, the final text ends at the earliest such occurrence.
// (Like vLLM, stops are checked per token, so which of two overlapping stops wins can depend
// on where the token boundaries fall.)
std::string reference_stop(const std::vector<std::string>& chunks, const std::vector<std::string>& stops,
                           bool* stopped) {
  std::string text;
  *stopped = false;
  for (const std::string& c : chunks) {
    text += c;
    size_t best = std::string::npos;
    for (const auto& s : stops) best = std::min(best, text.find(s));
    if (best != std::string::npos) {
      *stopped = true;
      return text.substr(0, best);
    }
  }
  return text;
}

TEST(StopFilter, RandomTextsAndChunkingsMatchTheNaiveReference) {
  Rng rng(17);
  const char alphabet[] = "ab c";
  for (int trial = 0; trial < 3000; ++trial) {
    const int len = 1 + int(rng.below(40));
    std::string full;
    for (int i = 0; i < len; ++i) full += alphabet[rng.below(4)];
    std::vector<std::string> stops;
    const int n_stops = 1 + int(rng.below(3));
    for (int s = 0; s < n_stops; ++s) {
      std::string st;
      const int sl = 1 + int(rng.below(4));
      for (int i = 0; i < sl; ++i) st += alphabet[rng.below(4)];
      stops.push_back(st);
    }
    std::vector<std::string> chunks;
    for (size_t pos = 0; pos < full.size();) {
      const size_t n = std::min(full.size() - pos, size_t(1 + rng.below(3)));
      chunks.push_back(full.substr(pos, n));
      pos += n;
    }
    bool ref_stopped = false;
    const std::string expected = reference_stop(chunks, stops, &ref_stopped);
    const std::string ctx = "full '" + full + "' stops " + ::testing::PrintToString(stops) + " expected '" + expected + "'";

    StopFilter f(stops);
    std::string streamed;
    for (const std::string& c : chunks) {
      const bool stopped = f.append(c);
      streamed += f.take_ready();
      // Nothing sent may ever go past the final text (no stop string leaks, not even a part).
      ASSERT_EQ(expected.compare(0, streamed.size(), streamed), 0) << ctx << " streamed '" << streamed << "'";
      if (stopped) break;
    }
    streamed += f.take_all();
    EXPECT_EQ(streamed, expected) << ctx;
    EXPECT_EQ(f.stopped(), ref_stopped) << ctx;
  }
}

TEST(StopFilter, HoldsBackOnlyWhatCouldStartAStop) {
  StopFilter f({"STOP"});
  f.append("abc ST");
  EXPECT_EQ(f.take_ready(), "abc ");  // "ST" may be the start of STOP
  f.append("x");
  EXPECT_EQ(f.take_ready(), "STx");
  f.append("yST");
  f.append("OP and more");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched(), "STOP");
  EXPECT_EQ(f.take_all(), "y");
}

// Issue 36: 480k stop strings took 186 s on the engine thread. The filter's work per appended
// byte is bounded by the stop strings' count, whatever their length and however adversarial the
// text (the KMP bound: at most 2 automaton steps per byte per string, amortised). Counted in
// steps, not time.
TEST(StopFilter, WorkIsLinearInTheTextTimesTheStopCount) {
  // Worst case for a naive search: stops "aaa...ab" (1024 bytes) over a text of 'a's.
  const std::vector<std::string> stops = {std::string(1023, 'a') + "b", std::string(1023, 'a') + "c",
                                          std::string(511, 'a') + "ab", "a" + std::string(1023, 'b')};
  StopFilter f(stops);
  int64_t appended = 0;
  std::string streamed;
  for (int t = 0; t < 20000; ++t) {
    const std::string piece = t % 7 == 6 ? "aab" : "aaa";  // never a whole stop string
    f.append(piece);
    appended += int64_t(piece.size());
    streamed += f.take_ready();
  }
  EXPECT_FALSE(f.stopped());
  EXPECT_LE(f.work(), 2 * appended * int64_t(stops.size()));
  // Held back: at most the longest proper prefix (1023 bytes), never more.
  EXPECT_GE(int64_t(streamed.size()), appended - 1023);
  f.append(std::string(1023, 'a') + "c");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched(), stops[1]);
}

TEST(StopFilter, NoStopsPassesEverything) {
  StopFilter f;
  f.append("hello");
  EXPECT_EQ(f.take_ready(), "hello");
  EXPECT_FALSE(f.stopped());
}

ApiError parse_error(Endpoint ep, const std::string& body) {
  try {
    parse_api_request(ep, body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return {};
}

// Issue 36: 'stop' is bounded as OpenAI bounds it (4 strings), and each string's bytes.
TEST(OpenAiApi, StopStringsAreBoundedInCountAndBytes) {
  const ApiRequest ok = parse_api_request(
      Endpoint::kCompletions,
      nlohmann::json{{"prompt", "hi"}, {"stop", {"a", "b", "c", std::string(ApiRequest::kMaxStopBytes, 'd')}}}.dump());
  EXPECT_EQ(ok.stop.size(), 4u);
  const ApiError many = parse_error(Endpoint::kCompletions,
                                    nlohmann::json{{"prompt", "hi"}, {"stop", {"a", "b", "c", "d", "e"}}}.dump());
  EXPECT_EQ(many.param, "stop");
  EXPECT_NE(many.message.find("at most 4"), std::string::npos) << many.message;
  const ApiError big = parse_error(
      Endpoint::kChat, nlohmann::json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                      {"stop", std::string(ApiRequest::kMaxStopBytes + 1, 'x')}}
                           .dump());
  EXPECT_EQ(big.param, "stop");
  EXPECT_NE(big.message.find("1025 bytes"), std::string::npos) << big.message;
  EXPECT_NE(big.message.find("at most 1024"), std::string::npos) << big.message;
  EXPECT_LT(big.message.size(), 200u);
  // A huge list is refused by its count before any string is copied.
  nlohmann::json lots = nlohmann::json::array();
  for (int i = 0; i < 480000; ++i) lots.push_back("s");
  const ApiError huge = parse_error(Endpoint::kCompletions, nlohmann::json{{"prompt", "hi"}, {"stop", lots}}.dump());
  EXPECT_NE(huge.message.find("480000 strings"), std::string::npos) << huge.message;
  // A 1 MB tier name is quoted as a short excerpt (it was echoed whole).
  const ApiError tier =
      parse_error(Endpoint::kCompletions, nlohmann::json{{"prompt", "hi"}, {"tier", std::string(1 << 20, 't')}}.dump());
  EXPECT_EQ(tier.param, "tier");
  EXPECT_LT(tier.message.size(), 200u);
}

TEST(OpenAiApi, ParsesTheSupportedFields) {
  const ApiRequest r = parse_api_request(
      Endpoint::kCompletions,
      R"({"model":"m","prompt":[5,6,7],"max_tokens":9,"temperature":0.5,"top_p":0.9,"top_k":-1,"seed":42,)"
      R"("n":1,"stop":["a","bc"],"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,)"
      R"("priority":-3,"slo":{"ttft_ms":250,"tpot_ms":20},"user":"ignored"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<TokenId>{5, 6, 7}));
  EXPECT_EQ(*r.max_tokens, 9);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.ignore_eos);
  EXPECT_EQ(r.priority, -3);
  ASSERT_TRUE(r.slo);
  EXPECT_EQ(r.slo->ttft_ms, 250);
  EXPECT_EQ(r.slo->tpot_ms, 20);

  const ApiRequest c = parse_api_request(
      Endpoint::kChat,
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],)"
      R"("max_tokens":5,"max_completion_tokens":7,"stop":"x"})");
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[1].content, "ab");
  EXPECT_EQ(*c.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_EQ(c.stop, (std::vector<std::string>{"x"}));
}

TEST(OpenAiApi, RejectsBadInputNamingTheParam) {
  struct Case {
    Endpoint ep;
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {Endpoint::kCompletions, "{not json", ""},
      {Endpoint::kCompletions, "[1,2]", ""},
      {Endpoint::kCompletions, R"({"max_tokens":3})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt":[]})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt":["a","b"]})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt":7})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt":[1,-2]})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt":"x","temperature":-0.1})", "temperature"},
      {Endpoint::kCompletions, R"({"prompt":"x","temperature":"hot"})", "temperature"},
      {Endpoint::kCompletions, R"({"prompt":"x","top_p":0})", "top_p"},
      {Endpoint::kCompletions, R"({"prompt":"x","top_p":1.5})", "top_p"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_tokens":2.5})", "max_tokens"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_tokens":"7"})", "max_tokens"},
      {Endpoint::kCompletions, R"({"prompt":"x","n":2})", "n"},
      {Endpoint::kCompletions, R"({"prompt":"x","stop":5})", "stop"},
      {Endpoint::kCompletions, R"({"prompt":"x","stop":[""]})", "stop"},
      {Endpoint::kCompletions, R"({"prompt":"x","stream":"yes"})", "stream"},
      {Endpoint::kCompletions, R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options"},
      {Endpoint::kCompletions, R"({"prompt":"x","seed":"s"})", "seed"},
      {Endpoint::kCompletions, R"({"prompt":"x","priority":1.5})", "priority"},
      {Endpoint::kCompletions, R"({"prompt":"x","slo":{"ttft_ms":-1}})", "slo.ttft_ms"},
      {Endpoint::kCompletions, R"({"prompt":"x","slo":3})", "slo"},
      {Endpoint::kCompletions, R"({"prompt":"x","echo":true})", "echo"},
      {Endpoint::kCompletions, R"({"prompt":"x","model":3})", "model"},
      {Endpoint::kChat, R"({"max_tokens":3})", "messages"},
      {Endpoint::kChat, R"({"messages":[]})", "messages"},
      {Endpoint::kChat, R"({"messages":"hi"})", "messages"},
      {Endpoint::kChat, R"({"messages":[{"content":"hi"}]})", "messages[0].role"},
      {Endpoint::kChat, R"({"messages":[{"role":"wizard","content":"hi"}]})", "messages[0].role"},
      {Endpoint::kChat, R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0})",
       "max_completion_tokens"},
  };
  for (const Case& c : cases) {
    const ApiError e = parse_error(c.ep, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_FALSE(e.message.empty()) << c.body;
    const nlohmann::json j = error_json(e);
    ASSERT_TRUE(j.contains("error"));
    for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k;
  }
}

// The periodic stats line from two snapshots 10 s apart, worked by hand: 1200 prompt tokens and
// 345 generated over 10 s, 3 running + 1 waiting, 25 of 200 blocks; an idle interval says nothing.
TEST(ServeStatsLine, RatesOverTheIntervalAndQuietWhenIdle) {
  EngineStats a, b;
  a.prompt_tokens_total = 800;
  a.generation_tokens_total = 55;
  b.prompt_tokens_total = 2000;
  b.generation_tokens_total = 400;
  b.num_running = 3;
  b.num_waiting = 1;
  b.num_live = 4;
  b.kv_blocks_used = 25;
  b.kv_blocks_total = 200;
  b.last_plan = "tp=2";
  EXPECT_EQ(stats_log_line(a, b, 10),
            "avg prompt throughput: 120.0 tokens/s, avg generation throughput: 34.5 tokens/s, running: 3 reqs, "
            "waiting: 1 reqs, KV cache usage: 12.5%, plan: tp=2");
  EngineStats idle = b;
  idle.num_running = idle.num_waiting = idle.num_live = 0;
  EXPECT_EQ(stats_log_line(idle, idle, 10), "");
  // Nothing produced but a request still live (a long prefill): the line still comes.
  EXPECT_NE(stats_log_line(b, b, 10), "");
}

// The access-log line: client, quoted request line (excerpts), status.
TEST(ServeAccessLog, LineNamesClientRequestAndStatus) {
  EXPECT_EQ(access_log_line("127.0.0.1", 5555, "POST", "/v1/completions", "HTTP/1.1", 200),
            "127.0.0.1:5555 - \"POST /v1/completions HTTP/1.1\" 200");
  const std::string long_path = "/" + std::string(100000, 'a');
  EXPECT_LT(access_log_line("::1", 1, "GET", long_path, "HTTP/1.1", 404).size(), 400u);
  EXPECT_EQ(route_method("/v1/completions"), "POST");
  EXPECT_EQ(route_method("/health"), "GET");
  EXPECT_EQ(route_method("/v1/completion"), "");
}

TEST(Prometheus, HistogramBucketsAreCumulativeWithLeInclusive) {
  Histogram h({0.1, 1.0});
  for (double v : {0.05, 0.1, 0.5, 1.0, 7.0}) h.observe(v);
  std::string out;
  h.render(&out, "x_seconds", "help", "m=\"a\"");
  EXPECT_NE(out.find("x_seconds_bucket{m=\"a\",le=\"0.1\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{m=\"a\",le=\"1\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{m=\"a\",le=\"+Inf\"} 5\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_count{m=\"a\"} 5\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_sum{m=\"a\"} 8.65\n"), std::string::npos) << out;
  EXPECT_EQ(prom_escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(SseParser, SplitsEventsAcrossArbitraryFeeds) {
  const std::string stream =
      "data: {\"a\":1}\n\n: comment\n\ndata: two\r\n\r\nevent: x\ndata: l1\ndata: l2\n\ndata: [DONE]\n\n";
  for (size_t piece : {size_t(1), size_t(2), size_t(7), stream.size()}) {
    SseParser p;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += piece)
      p.feed(stream.data() + i, std::min(piece, stream.size() - i), [&](const std::string& d) { got.push_back(d); });
    EXPECT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "two", "l1\nl2", "[DONE]"})) << "piece " << piece;
  }
}

// bench serve says what it did to the workload: requests clipped to the server's context are
// counted in the summary (none: no line).
TEST(BenchSummary, ClippedRequestsAreReported) {
  std::vector<BenchRequestResult> rs(3);
  for (auto& r : rs) r.success = true, r.prompt_len = 4, r.output_tokens = 2, r.ttft_s = 0.1, r.latency_s = 0.2;
  EXPECT_EQ(summarize_bench(rs, 1.0, 0, 0).summary_text().find("Clipped"), std::string::npos);
  rs[0].clipped = rs[2].clipped = true;
  const BenchServeReport r = summarize_bench(rs, 1.0, 0, 0);
  EXPECT_EQ(r.clipped, 2);
  const std::string text = r.summary_text();
  const size_t at = text.find("Clipped requests (prompts cut):");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string line = text.substr(at, text.find('\n', at) - at);
  EXPECT_EQ(line.substr(line.find_last_of(' ') + 1), "2") << line;
}

TEST(BenchSummary, VllmDefinitions) {
  std::vector<BenchRequestResult> rs(3);
  // Request 0: 5 tokens, TTFT 0.1 s, latency 0.5 s -> TPOT 0.1 s.
  rs[0].success = true, rs[0].prompt_len = 10, rs[0].output_tokens = 5, rs[0].ttft_s = 0.1, rs[0].latency_s = 0.5;
  rs[0].itl_s = {0.1, 0.1, 0.1, 0.1};
  // Request 1: 1 token (no TPOT), TTFT 0.3 s.
  rs[1].success = true, rs[1].prompt_len = 7, rs[1].output_tokens = 1, rs[1].ttft_s = 0.3, rs[1].latency_s = 0.3;
  // Request 2 failed.
  rs[2].success = false, rs[2].prompt_len = 99;
  const BenchServeReport r = summarize_bench(rs, 2.0, /*slo_ttft_ms=*/200, /*slo_tpot_ms=*/150);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.total_input_tokens, 17);
  EXPECT_EQ(r.total_output_tokens, 6);
  EXPECT_DOUBLE_EQ(r.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(r.output_throughput, 3.0);
  EXPECT_DOUBLE_EQ(r.total_token_throughput, 11.5);
  ASSERT_TRUE(r.goodput);
  EXPECT_EQ(*r.good, 1);  // request 1 misses the TTFT objective
  EXPECT_DOUBLE_EQ(*r.goodput, 0.5);
  EXPECT_EQ(r.tpot_ms.count, 1);
  EXPECT_NEAR(r.tpot_ms.mean, 100.0, 1e-9);
  EXPECT_EQ(r.itl_ms.count, 4);
  EXPECT_NEAR(r.ttft_ms.p50, 200.0, 1e-9);  // median of 100 and 300
  EXPECT_NEAR(r.e2e_ms.mean, 400.0, 1e-9);
}

}  // namespace
}  // namespace loom::server
