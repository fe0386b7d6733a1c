// loom serve over real HTTP (cpp-httplib's client on 127.0.0.1): outputs, streaming, every
// bad-input case, overload (429), disconnects (cancel + KV blocks freed), engine faults (500,
// then serving goes on), and priority/SLO reaching the scheduler.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <sstream>

#include "model/chat_template.h"
#include "server/bench_serve.h"
#include "server_fixture.h"

namespace loom::server::test {
namespace {

using nlohmann::json;

struct StreamResult {
  int status = 0;
  std::vector<json> chunks;
  bool done = false;
  std::string raw;
};

// POST with stream: true, parsed as SSE; stop_after_chunks > 0 drops the connection after that
// many data events.
StreamResult post_stream(httplib::Client& c, const std::string& path, const json& body, int stop_after_chunks = 0) {
  StreamResult r;
  SseParser parser;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    r.raw.append(d, n);
    bool keep = true;
    parser.feed(d, n, [&](const std::string& payload) {
      if (payload == "[DONE]") {
        r.done = true;
        return;
      }
      r.chunks.push_back(json::parse(payload, nullptr, false));
      if (stop_after_chunks > 0 && int(r.chunks.size()) >= stop_after_chunks) keep = false;
    });
    return keep;
  };
  httplib::Response res;
  httplib::Error err;
  c.send(req, res, err);
  return r;
}

std::string completion_text(const StreamResult& s) {
  std::string t;
  for (const json& c : s.chunks)
    if (c.contains("choices") && !c["choices"].empty()) {
      const json& ch = c["choices"][0];
      if (ch.contains("text")) t += ch["text"].get<std::string>();
      if (ch.contains("delta") && ch["delta"].contains("content")) t += ch["delta"]["content"].get<std::string>();
    }
  return t;
}

void expect_error(int status, const json& body, int want_status, const std::string& want_param, const std::string& ctx) {
  EXPECT_EQ(status, want_status) << ctx << " -> " << body.dump();
  ASSERT_TRUE(body.is_object() && body.contains("error")) << ctx << " -> " << body.dump();
  const json& e = body["error"];
  EXPECT_TRUE(e.contains("message") && e["message"].is_string() && !e["message"].get<std::string>().empty()) << ctx;
  EXPECT_TRUE(e.contains("type") && e["type"].is_string()) << ctx;
  EXPECT_TRUE(e.contains("param")) << ctx;
  EXPECT_TRUE(e.contains("code")) << ctx;
  if (want_status < 500 && want_status != 429) {
    EXPECT_EQ(e["type"], "invalid_request_error") << ctx;
  }
  if (!want_param.empty()) {
    EXPECT_EQ(e["param"], want_param) << ctx << " -> " << body.dump();
  }
}

TEST(ServeHttp, EveryBadInputGetsAnOpenAiError) {
  Stack s;
  auto c = s.client();
  struct Case {
    const char* path;
    std::string body;
    int status;
    const char* param;
  };
  const int max_len = s.serving().max_model_len();
  const std::vector<Case> cases = {
      {"/v1/completions", "{oops", 400, ""},
      {"/v1/completions", R"({"prompt":"hi","model":"no-such-model"})", 404, "model"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"model":"gpt-4"})", 404, "model"},
      {"/v1/completions", R"({"prompt":"hi","temperature":-1})", 400, "temperature"},
      {"/v1/completions", R"({"prompt":"hi","temperature":"warm"})", 400, "temperature"},
      {"/v1/completions", R"({"prompt":"hi","top_p":0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt":"hi","top_p":1.01})", 400, "top_p"},
      {"/v1/completions", R"({"prompt":"hi","max_tokens":0})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"hi","max_tokens":-5})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"hi","max_tokens":"ten"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"hi","n":3})", 400, "n"},
      {"/v1/completions", R"({"prompt":"hi","stop":{"a":1}})", 400, "stop"},
      {"/v1/completions", R"({"max_tokens":4})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":[100000]})", 400, "prompt"},
      {"/v1/chat/completions", R"({"max_tokens":4})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages":[]})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"n":2})", 400, "n"},
      {"/v1/completions", R"({"prompt":"hi","slo":{"tpot_ms":"fast"}})", 400, "slo.tpot_ms"},
      // Over the context: prompt + max_tokens > max_model_len.
      {"/v1/completions", json{{"prompt", "hi"}, {"max_tokens", max_len}}.dump(), 400, "max_tokens"},
  };
  for (const Case& k : cases) {
    int status = 0;
    auto res = c.Post(k.path, k.body, "application/json");
    ASSERT_TRUE(res) << k.body;
    const json body = json::parse(res->body, nullptr, false);
    expect_error(res->status, body, k.status, k.param, k.body);
    (void)status;
  }
  // The context error names both numbers.
  auto res = c.Post("/v1/completions", json{{"prompt", "hi"}, {"max_tokens", max_len}}.dump(), "application/json");
  ASSERT_TRUE(res);
  const std::string msg = json::parse(res->body)["error"]["message"];
  EXPECT_NE(msg.find(std::to_string(max_len)), std::string::npos) << msg;
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "context_length_exceeded");
  // Unknown route.
  auto nf = c.Get("/v1/nothing-here");
  ASSERT_TRUE(nf);
  expect_error(nf->status, json::parse(nf->body, nullptr, false), 404, "", "GET /v1/nothing-here");
  // The server still serves.
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

TEST(ServeHttp, CompletionChatAndModels) {
  Stack s;
  auto c = s.client();
  int st = 0;
  json r = post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 7}, {"temperature", 0}, {"ignore_eos", true}}, &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["model"], "test-model");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 7);
  const int prompt_tokens = int(s.tok().encode("Hello", s.tok().vocab().add_bos).size());
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(r["usage"]["total_tokens"], prompt_tokens + 7);

  // Token-id prompts give the same output as the text they encode (greedy).
  json ids = post_json(c, "/v1/completions",
                       {{"prompt", s.tok().encode("Hello", s.tok().vocab().add_bos)}, {"max_tokens", 7},
                        {"temperature", 0}, {"ignore_eos", true}},
                       &st);
  ASSERT_EQ(st, 200) << ids.dump();
  EXPECT_EQ(ids["choices"][0]["text"], r["choices"][0]["text"]);

  json chat = post_json(c, "/v1/chat/completions",
                        {{"messages", {{{"role", "user"}, {"content", "Hi there"}}}},
                         {"max_completion_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}},
                        &st);
  ASSERT_EQ(st, 200) << chat.dump();
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["usage"]["completion_tokens"], 5);
  const std::string tmpl = apply_chat_template(s.tok().vocab(), std::vector<ChatMessage>{{"user", "Hi there"}}, true);
  EXPECT_EQ(chat["usage"]["prompt_tokens"], int(s.tok().encode(tmpl, false).size()));

  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  const json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "test-model");
  EXPECT_EQ(models["data"][0]["max_model_len"], s.serving().max_model_len());

  // Same seed, temperature > 0: same text; the seed is what makes it repeat.
  json a1 = post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 7}, {"ignore_eos", true}}, &st);
  json a2 = post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 7}, {"ignore_eos", true}}, &st);
  EXPECT_EQ(a1["choices"][0]["text"], a2["choices"][0]["text"]);
}

// A known path with the wrong method gets 405 and the method it takes (RFC 9110 15.5.6), an
// unknown one 404; every answered request leaves one access-log line (method, path, version and
// the status the client saw), the stats snapshot counts the tokens the request produced.
TEST(ServeHttp, WrongMethodIs405AndEveryRequestIsLogged) {
  std::mutex mu;
  std::vector<std::string> lines;
  StackOptions o;
  o.access_log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lk(mu);
    lines.push_back(line);
  };
  Stack s(o);
  auto c = s.client();
  struct Case {
    std::string method, path;
    int status;
    std::string allow;
  };
  const std::vector<Case> cases = {{"GET", "/v1/completions", 405, "POST"},
                                   {"GET", "/v1/chat/completions", 405, "POST"},
                                   {"POST", "/v1/models", 405, "GET"},
                                   {"DELETE", "/health", 405, "GET"},
                                   {"PUT", "/metrics", 405, "GET"},
                                   {"GET", "/v1/nothing", 404, ""}};
  for (const Case& k : cases) {
    httplib::Result res = k.method == "GET"    ? c.Get(k.path)
                          : k.method == "POST" ? c.Post(k.path, "{}", "application/json")
                          : k.method == "PUT"  ? c.Put(k.path, "{}", "application/json")
                                               : c.Delete(k.path);
    ASSERT_TRUE(res) << k.method << " " << k.path;
    EXPECT_EQ(res->status, k.status) << k.method << " " << k.path;
    EXPECT_EQ(res->get_header_value("Allow"), k.allow) << k.method << " " << k.path;
    const json body = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(body.contains("error")) << res->body;
    if (k.status == 405) {
      EXPECT_EQ(body["error"]["code"], "method_not_allowed");
    }
  }
  const int64_t gen_before = s.serving().stats().generation_tokens_total;
  int st = 0;
  post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}, {"temperature", 0}, {"ignore_eos", true}}, &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(s.serving().stats().generation_tokens_total - gen_before, 3);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  // The logger runs after the response is written: wait for the last line (bounded).
  for (int i = 0; i < 2000; ++i) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (lines.size() >= cases.size() + 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::lock_guard<std::mutex> lk(mu);
  ASSERT_EQ(lines.size(), cases.size() + 2);
  // Handler threads log after writing, so the lines of consecutive requests may come in either
  // order: each request's line exactly once.
  std::vector<std::string> want;
  for (const Case& k : cases) want.push_back("\"" + k.method + " " + k.path + " HTTP/1.1\" " + std::to_string(k.status));
  want.push_back("\"POST /v1/completions HTTP/1.1\" 200");
  want.push_back("\"GET /health HTTP/1.1\" 200");
  for (const std::string& w : want) {
    int n = 0;
    for (const std::string& line : lines) {
      if (line.size() >= w.size() && line.compare(line.size() - w.size(), w.size(), w) == 0) ++n;
    }
    EXPECT_EQ(n, 1) << w;
  }
  for (const std::string& line : lines) EXPECT_EQ(line.rfind("127.0.0.1:", 0), 0u) << line;
}

TEST(ServeHttp, StreamingChunksConcatenateToTheNonStreamingText) {
  Stack s;
  auto c = s.client();
  const json base = {{"prompt", "Once"}, {"max_tokens", 20}, {"temperature", 0}, {"ignore_eos", true}};
  int st = 0;
  const json full = post_json(c, "/v1/completions", base, &st);
  ASSERT_EQ(st, 200);
  json sb = base;
  sb["stream"] = true;
  sb["stream_options"] = {{"include_usage", true}};
  const StreamResult sr = post_stream(c, "/v1/completions", sb);
  EXPECT_EQ(sr.status, 200);
  EXPECT_TRUE(sr.done) << sr.raw;
  ASSERT_GE(sr.chunks.size(), 2u);
  EXPECT_EQ(completion_text(sr), full["choices"][0]["text"].get<std::string>());
  // Last chunk: usage with empty choices; the one before carries the finish reason.
  const json& last = sr.chunks.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 20);
  EXPECT_EQ(sr.chunks[sr.chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  for (size_t i = 0; i + 2 < sr.chunks.size(); ++i) {
    EXPECT_TRUE(sr.chunks[i]["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(sr.chunks[i]["usage"].is_null());
  }
  // Raw framing: every event is "data: ...\n\n" and the stream ends with [DONE].
  EXPECT_EQ(sr.raw.rfind("data: ", 0), 0u);
  EXPECT_EQ(sr.raw.substr(sr.raw.size() - 14), "data: [DONE]\n\n");

  // Chat streaming: the first chunk carries the role.
  const StreamResult cs = post_stream(c, "/v1/chat/completions",
                                      {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 6},
                                       {"stream", true}, {"ignore_eos", true}});
  ASSERT_GE(cs.chunks.size(), 2u);
  EXPECT_EQ(cs.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(cs.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(cs.chunks.back()["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(cs.done);
}

TEST(ServeHttp, StopStringsCutTheTextAndNeverLeakWhenStreaming) {
  Stack s;
  auto c = s.client();
  int st = 0;
  const json full = post_json(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}}, &st);
  ASSERT_EQ(st, 200);
  const std::string text = full["choices"][0]["text"];
  // A stop string taken from the middle of the unstopped output (ASCII if there is any).
  size_t at = std::string::npos;
  for (size_t i = text.size() / 3; i + 2 < text.size(); ++i)
    if (std::isalnum((unsigned char)text[i]) && std::isalnum((unsigned char)text[i + 1])) {
      at = i;
      break;
    }
  if (at == std::string::npos) GTEST_SKIP() << "the tiny model's output has no two ASCII letters in a row: '" << text << "'";
  const std::string stop = text.substr(at, 2);
  const std::string expected = text.substr(0, text.find(stop));
  const json stopped = post_json(c, "/v1/completions",
                                 {{"prompt", "Once"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}, {"stop", {"zzzzqq", stop}}},
                                 &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(stopped["choices"][0]["text"], expected) << "stop '" << stop << "' in '" << text << "'";
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  const StreamResult sr = post_stream(c, "/v1/completions",
                                      {{"prompt", "Once"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true},
                                       {"stop", stop}, {"stream", true}});
  EXPECT_EQ(completion_text(sr), expected);
  for (const json& ch : sr.chunks) {
    if (!ch["choices"].empty()) {
      EXPECT_EQ(ch["choices"][0]["text"].get<std::string>().find(stop), std::string::npos) << "the stop string leaked";
    }
  }
}

// Greedy text equals `loom generate`'s for the same prompt.
void expect_same_as_generate(const std::string& model, const std::string& tokenizer, const std::string& prompt, int n) {
  StackOptions o;
  o.model_path = model;
  o.tokenizer_path = tokenizer;
  Stack s(o);
  auto c = s.client();
  int st = 0;
  const json r = post_json(c, "/v1/completions", {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200) << r.dump();
  std::string out;
  std::string cmd = loom::test::loom_bin() + " generate -m " + model + (tokenizer.empty() ? "" : " -t " + tokenizer) +
                    " -p '" + prompt + "' -n " + std::to_string(n) + " --threads 1";
  cmd = "(" + cmd + " 2>/dev/null)";
  ASSERT_EQ(loom::test::run_command(cmd, &out), 0) << out;
  // generate prints the decoded prompt, then the continuation, then a newline.
  StreamDecoder dec(s.tok());
  std::string shown;
  for (TokenId id : s.tok().encode(prompt, s.tok().vocab().add_bos)) shown += dec.push(id);
  EXPECT_EQ(out, shown + r["choices"][0]["text"].get<std::string>() + "\n");
}

TEST(ServeHttp, GreedyTextEqualsLoomGenerateStories260K) {
  LOOM_REQUIRE_SHARED();
  const std::string d = loom::test::stories_dir();
  expect_same_as_generate(d + "/stories260K.bin", d + "/tok512.bin", "Once upon a time", 60);
}

TEST(ServeHttp, GreedyTextEqualsLoomGenerateTinySynth) {
  expect_same_as_generate(tiny_model_path(), "", "The cat", 30);
}

TEST(ServeHttp, QueueBoundAnswers429) {
  StackOptions o;
  o.max_num_seqs = 1;
  o.max_queue = 1;
  o.step_delay_ms = 3;  // ~0.3 s for the running request
  Stack s(o);
  // A runs (streaming, we wait for its first chunk), B waits, C finds the queue full.
  std::atomic<bool> a_started{false};
  std::thread a([&] {
    auto c = s.client();
    SseParser p;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", "A"}, {"max_tokens", 100}, {"ignore_eos", true}, {"stream", true}}.dump();
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      a_started = true;
      return true;
    };
    httplib::Response res;
    httplib::Error err;
    c.send(req, res, err);
  });
  ASSERT_TRUE(s.wait_stats([&](const EngineStats& st) { return a_started && st.num_running == 1; }));
  std::atomic<int> b_status{0};
  std::thread b([&] {
    auto c = s.client();
    int st = 0;
    post_json(c, "/v1/completions", {{"prompt", "B"}, {"max_tokens", 3}}, &st);
    b_status = st;
  });
  ASSERT_TRUE(s.wait_stats([](const EngineStats& st) { return st.num_waiting == 1; }));
  auto c = s.client();
  int st = 0;
  const json r = post_json(c, "/v1/completions", {{"prompt", "C"}, {"max_tokens", 3}}, &st);
  expect_error(st, r, 429, "", "third request");
  EXPECT_EQ(r["error"]["type"], "rate_limit_error");
  a.join();
  b.join();
  EXPECT_EQ(b_status.load(), 200);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric_value(m->body, "loom:requests_rejected_overload_total"), 1.0);
}

TEST(ServeHttp, StreamingDisconnectCancelsAndFreesKvBlocks) {
  StackOptions o;
  o.step_delay_ms = 2;  // 200 tokens would take >= 0.4 s
  Stack s(o);
  auto c = s.client();
  const StreamResult sr = post_stream(c, "/v1/completions",
                                      {{"prompt", "Hello"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}},
                                      /*stop_after_chunks=*/1);
  ASSERT_EQ(sr.chunks.size(), 1u);
  EXPECT_FALSE(sr.done);
  ASSERT_TRUE(s.wait_stats([](const EngineStats& st) { return st.num_live == 0 && st.kv_blocks_used == 0; }, 5));
  auto m = s.client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric_value(m->body, "vllm:request_success_total{model_name=\"test-model\",finished_reason=\"abort\"}"), 1);
  EXPECT_EQ(metric_value(m->body, "vllm:kv_cache_usage_perc"), 0);
  EXPECT_LT(metric_value(m->body, "vllm:generation_tokens_total"), 200) << "the request ran to the end";
}

TEST(ServeHttp, NonStreamingDisconnectCancelsAndFreesKvBlocks) {
  StackOptions o;
  o.step_delay_ms = 3;  // 200 tokens would take >= 0.6 s
  Stack s(o);
  {
    auto c = s.client(/*read_timeout_s=*/0.15);  // the client gives up...
    int st = 0;
    post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 200}, {"ignore_eos", true}}, &st);
    EXPECT_EQ(st, -1);  // read timeout
  }  // ... and closes the connection
  ASSERT_TRUE(s.wait_stats([](const EngineStats& st) { return st.num_live == 0 && st.kv_blocks_used == 0; }, 5));
  auto m = s.client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric_value(m->body, "vllm:request_success_total{model_name=\"test-model\",finished_reason=\"abort\"}"), 1);
  EXPECT_LT(metric_value(m->body, "vllm:generation_tokens_total"), 200) << "the request ran to the end";
}

TEST(ServeHttp, EngineFaultFailsTheRequestWith500AndServingGoesOn) {
  std::atomic<bool> fail_next{false};
  StackOptions o;
  o.hook = [&](Engine&, const StepBatch&) {
    if (fail_next.exchange(false)) throw std::runtime_error("injected fault");
  };
  Stack s(o);
  auto c = s.client();
  fail_next = true;
  int st = 0;
  const json r = post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 5}}, &st);
  expect_error(st, r, 500, "", "faulted request");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("injected fault"), std::string::npos) << r.dump();
  // Streaming: an error event, then [DONE].
  fail_next = true;
  const StreamResult sr = post_stream(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 5}, {"stream", true}});
  ASSERT_FALSE(sr.chunks.empty()) << sr.raw;
  EXPECT_TRUE(sr.chunks.back().contains("error")) << sr.raw;
  EXPECT_TRUE(sr.done);
  // Then everything works again and no block leaked.
  const json ok = post_json(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 5}, {"ignore_eos", true}}, &st);
  EXPECT_EQ(st, 200) << ok.dump();
  EXPECT_EQ(ok["usage"]["completion_tokens"], 5);
  ASSERT_TRUE(s.wait_stats([](const EngineStats& st) { return st.num_live == 0 && st.kv_blocks_used == 0; }, 5));
}

TEST(ServeHttp, PriorityAndSloReachTheScheduler) {
  std::mutex mu;
  std::vector<std::pair<int, std::optional<Slo>>> seen;
  StackOptions o;
  o.hook = [&](Engine& e, const StepBatch& b) {
    std::lock_guard<std::mutex> lock(mu);
    for (const ScheduledSeq& q : b.seqs) {
      const Sequence* seq = e.scheduler().find(q.seq_id);
      seen.emplace_back(q.priority, seq ? seq->request.slo : std::nullopt);
    }
  };
  Stack s(o);
  auto c = s.client();
  int st = 0;
  post_json(c, "/v1/completions",
            {{"prompt", "Hi"}, {"max_tokens", 2}, {"priority", -7}, {"slo", {{"ttft_ms", 250}, {"tpot_ms", 20.5}}}}, &st);
  ASSERT_EQ(st, 200);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().first, -7);
  ASSERT_TRUE(seen.front().second);
  EXPECT_EQ(seen.front().second->ttft_ms, 250);
  EXPECT_EQ(seen.front().second->tpot_ms, 20.5);
}

// SLO tiers (Nitsum, issue 15): a request names its tier (default: the first), an unknown tier is
// a 400 naming the known ones, the tier's targets become the request's SLO, and /metrics counts
// per tier the finished requests and those meeting both targets. "easy" (60 s / 60 s) is met by
// every request here; "hard" (1 us / 1 us) by none.
TEST(ServeHttp, SloTiersRouteRequestsAndReportGoodput) {
  std::mutex mu;
  std::vector<std::optional<Slo>> seen;
  StackOptions o;
  o.tiers = "easy=60000/60000,hard=0.001/0.001";
  o.hook = [&](Engine& e, const StepBatch& b) {
    std::lock_guard<std::mutex> lock(mu);
    for (const ScheduledSeq& q : b.seqs)
      if (const Sequence* seq = e.scheduler().find(q.seq_id)) seen.push_back(seq->request.slo);
  };
  Stack s(o);
  auto c = s.client();
  int st = 0;
  post_json(c, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 3}, {"ignore_eos", true}}, &st);
  ASSERT_EQ(st, 200);
  post_json(c, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 3}, {"ignore_eos", true}, {"tier", "easy"}}, &st);
  ASSERT_EQ(st, 200);
  post_json(c, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 3}, {"ignore_eos", true}, {"tier", "hard"}}, &st);
  ASSERT_EQ(st, 200);
  const auto bad = post_json(c, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 3}, {"tier", "gold"}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_NE(bad.dump().find("unknown tier 'gold' (known: easy, hard)"), std::string::npos) << bad.dump();
  EXPECT_NE(bad.dump().find("\"param\":\"tier\""), std::string::npos) << bad.dump();
  post_json(c, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 3}, {"tier", 7}}, &st);
  EXPECT_EQ(st, 400);
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_FALSE(seen.empty());
    ASSERT_TRUE(seen.front());
    EXPECT_EQ(seen.front()->ttft_ms, 60000);
    ASSERT_TRUE(seen.back());
    EXPECT_DOUBLE_EQ(seen.back()->tpot_ms, 0.001);
  }
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  const std::string& t = m->body;
  EXPECT_EQ(metric_value(t, "loom:tier_requests_finished_total{model_name=\"test-model\",tier=\"easy\"}"), 2);
  EXPECT_EQ(metric_value(t, "loom:tier_requests_slo_met_total{model_name=\"test-model\",tier=\"easy\"}"), 2);
  EXPECT_EQ(metric_value(t, "loom:tier_requests_finished_total{model_name=\"test-model\",tier=\"hard\"}"), 1);
  EXPECT_EQ(metric_value(t, "loom:tier_requests_slo_met_total{model_name=\"test-model\",tier=\"hard\"}"), 0);
  EXPECT_GT(metric_value(t, "loom:tier_goodput_requests_per_second{model_name=\"test-model\",tier=\"easy\"}"), 0);
}

TEST(ServeHttp, MetricsUseVllmNamesAndParse) {
  Stack s;
  auto c = s.client();
  int st = 0;
  post_json(c, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 4}, {"ignore_eos", true}}, &st);
  ASSERT_EQ(st, 200);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& t = m->body;
  for (const char* name :
       {"vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
        "vllm:time_per_output_token_seconds_bucket", "vllm:e2e_request_latency_seconds_count",
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:request_success_total", "vllm:num_preemptions_total", "loom:step_plan_info{model_name=\"test-model\",plan=\"tp=1\"} 1", "loom:plan_steps_total{model_name=\"test-model\",plan=\"tp=1\"}"})
    EXPECT_NE(t.find(name), std::string::npos) << name;
  EXPECT_EQ(metric_value(t, "vllm:generation_tokens_total"), 4);
  EXPECT_EQ(metric_value(t, "vllm:e2e_request_latency_seconds_count"), 1);
  EXPECT_EQ(metric_value(t, "vllm:inter_token_latency_seconds_count"), 3);
  // Every non-comment line is `name{labels} value` or `name value` with a numeric value.
  std::istringstream in(t);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    const std::string v = line.substr(sp + 1);
    if (v != "+Inf" && v != "NaN") {
      size_t used = 0;
      std::stod(v, &used);
      EXPECT_EQ(used, v.size()) << line;
    }
    ++samples;
  }
  EXPECT_GT(samples, 50);
}

TEST(ServeHttp, BenchServeAgainstTheServer) {
  Stack s;
  BenchServeOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(s.port());
  o.trace = synthesize_trace(13, ArrivalSpec::poisson(200), 1, LengthDist::uniform(3, 17), 2, LengthDist::uniform(1, 9), 3);
  o.slo_ttft_ms = 1e6;
  o.slo_tpot_ms = 1e6;
  const BenchServeReport r = run_bench_serve(o);
  EXPECT_EQ(r.model, "test-model");
  EXPECT_EQ(r.completed, 13);
  EXPECT_EQ(r.failed, 0);
  int64_t want_out = 0, want_in = 0;
  for (const auto& t : o.trace) want_out += t.output_len, want_in += t.prompt_len;
  EXPECT_EQ(r.total_output_tokens, want_out);  // ignore_eos: exactly max_tokens each
  EXPECT_EQ(r.total_input_tokens, want_in);
  EXPECT_EQ(*r.good, 13);
  EXPECT_GT(r.duration_s, 0);
  EXPECT_EQ(r.ttft_ms.count, 13);
  std::ostringstream csv;
  r.write_csv(csv);
  const std::string csv_text = csv.str();
  EXPECT_EQ(std::count(csv_text.begin(), csv_text.end(), '\n'), 14);
  const json j = r.to_json();
  EXPECT_EQ(j["summary"]["completed"], 13);
  EXPECT_EQ(j["requests"].size(), 13u);
  auto m = s.client().Get("/metrics");
  EXPECT_EQ(metric_value(m->body, "vllm:prompt_tokens_total"), double(want_in));
}

// bench serve with a tier mix against a server with the same tiers: every request carries its
// tier (2:1), the client and the server count the same per-tier finished and SLO-met requests.
TEST(ServeHttp, BenchServeTierMixMatchesTheServersTierCounts) {
  StackOptions so;
  so.tiers = "easy=60000/60000,hard=0.001/0.001";
  Stack s(so);
  BenchServeOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(s.port());
  o.trace = synthesize_trace(12, ArrivalSpec::poisson(200), 1, LengthDist::uniform(3, 17), 2, LengthDist::uniform(2, 9), 3);
  o.tiers = cluster::parse_tiers(so.tiers);
  o.tier_weights = cluster::parse_tier_mix(o.tiers, "easy:2,hard:1");
  const BenchServeReport r = run_bench_serve(o);
  ASSERT_EQ(r.completed, 12);
  ASSERT_EQ(r.tiers.size(), 2u);
  EXPECT_EQ(r.tiers[0].requests, 8);
  EXPECT_EQ(r.tiers[0].met, 8);
  EXPECT_EQ(r.tiers[1].requests, 4);
  EXPECT_EQ(r.tiers[1].met, 0);
  EXPECT_EQ(r.to_json()["tiers"][0]["slo_met"], 8);
  auto m = s.client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric_value(m->body, "loom:tier_requests_finished_total{model_name=\"test-model\",tier=\"easy\"}"), 8);
  EXPECT_EQ(metric_value(m->body, "loom:tier_requests_finished_total{model_name=\"test-model\",tier=\"hard\"}"), 4);
  EXPECT_EQ(metric_value(m->body, "loom:tier_requests_slo_met_total{model_name=\"test-model\",tier=\"easy\"}"), 8);
}


}  // namespace
}  // namespace loom::server::test
