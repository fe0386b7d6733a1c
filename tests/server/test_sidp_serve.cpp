// `loom serve` over SiDP replicas stepping on their own (engine/sidp_replicas.h): requests routed
// to replica id mod 2, each replica at its own pace, tokens streamed per replica as its steps come
// back. Concurrent completions (non-streaming and streaming) get the text the one-rank engine gives
// for the same requests. Real HTTP (cpp-httplib's client), the tiny synthetic model (2 layers).
#include <gtest/gtest.h>

#include <thread>

#include "engine/dist_engine.h"
#include "engine/sidp_replicas.h"
#include "server_fixture.h"

namespace loom::server::test {
namespace {

using nlohmann::json;

struct Served {
  std::vector<std::string> texts;  // per request, in request order
  json logprobs;                   // request 1's
  std::string streamed;            // the streaming request's text, chunk by chunk
  int stream_chunks = 0;
  bool stream_done = false;
  std::vector<int64_t> own_steps;
  int64_t group_steps = -1;
};

Served serve(const std::string& plan, int ranks, const std::string& policy) {
  const std::string path = tiny_model_path();
  auto tok = Tokenizer::create(load_vocab(path, ""));
  DistOptions o;
  o.comm = "local";
  o.ranks = ranks;
  o.plan = plan;
  o.policy = policy;
  o.model_path = path;
  o.engine.threads = 1;
  o.engine.max_num_seqs = 8;
  o.engine.kv_cache_bytes = 4 << 20;
  o.comm_options.timeout_s = 20;
  Served out;
  run_distributed(o, [&](DistEngine& engine) {
    ServingOptions so;
    so.model_name = "test-model";
    ServingEngine serving(engine, *tok, serving_eos_ids(*tok, "gguf", -1), so);
    HttpServerOptions ho;
    ho.port = 0;
    ho.model_name = "test-model";
    HttpServer http(serving, *tok, ho);
    const int port = http.start();
    const std::vector<std::string> prompts = {"Once", "Hello there", "A", "The cat sat", "Yes"};
    out.texts.assign(prompts.size(), "");
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i)
      clients.emplace_back([&, i] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(30, 0);
        int st = 0;
        json body = {{"prompt", prompts[i]}, {"max_tokens", 6 + 7 * int(i)}, {"temperature", 0}, {"ignore_eos", true}};
        if (i == 1) body["logprobs"] = 2;  // carried back from the replica's rank with its tokens
        const json r = post_json(c, "/v1/completions", body, &st);
        if (st == 200 && i == 1) out.logprobs = r["choices"][0]["logprobs"];
        if (st == 200) out.texts[i] = r["choices"][0]["text"].get<std::string>();
        else out.texts[i] = "status " + std::to_string(st) + ": " + r.dump();
      });
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(30, 0);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = json{{"prompt", "Twice"}, {"max_tokens", 20}, {"temperature", 0}, {"ignore_eos", true},
                      {"stream", true}}.dump();
      req.set_header("Content-Type", "application/json");
      std::string raw;
      req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
        raw.append(d, n);
        return true;
      };
      httplib::Response res;
      httplib::Error err;
      c.send(req, res, err);
      for (size_t at = 0; (at = raw.find("data: ", at)) != std::string::npos;) {
        const size_t end = raw.find("\n\n", at);
        const std::string payload = raw.substr(at + 6, end - at - 6);
        at = end;
        if (payload == "[DONE]") {
          out.stream_done = true;
          continue;
        }
        const json j = json::parse(payload, nullptr, false);
        if (j.is_object() && j.contains("choices") && !j["choices"].empty()) {
          out.streamed += j["choices"][0]["text"].get<std::string>();
          ++out.stream_chunks;
        }
      }
    });
    for (auto& t : clients) t.join();
    if (SidpReplicas* r = engine.sidp_replicas()) {
      out.own_steps = r->own_steps();
      out.group_steps = r->group_steps();
    }
    serving.shutdown();
    http.stop();
  });
  return out;
}

TEST(ServeSidp, ReplicasOnTheirOwnServeAndStreamTheOneRankText) {
  const Served one = serve("tp=1", 1, "fixed");
  const Served sidp = serve("dp=2,weights=owner", 2, "sidp:was");
  for (size_t i = 0; i < one.texts.size(); ++i) {
    EXPECT_FALSE(one.texts[i].empty()) << i;
    EXPECT_EQ(sidp.texts[i], one.texts[i]) << "request " << i;
  }
  // Logprobs of request 1 (served by replica 0 or 1 by its id): the same top tokens, values within
  // 1e-4 (the replicas' batches differ from the one rank's: the kernels' row blocking may round
  // differently).
  ASSERT_TRUE(one.logprobs.is_object()) << one.logprobs.dump();
  ASSERT_TRUE(sidp.logprobs.is_object()) << sidp.logprobs.dump();
  EXPECT_EQ(sidp.logprobs["tokens"], one.logprobs["tokens"]);
  const json &a = one.logprobs["token_logprobs"], &b = sidp.logprobs["token_logprobs"];
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 0u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i].get<double>(), b[i].get<double>(), 1e-4) << i;
  ASSERT_EQ(one.logprobs["top_logprobs"].size(), sidp.logprobs["top_logprobs"].size());
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<std::string> ka, kb;
    for (const auto& [k, v] : one.logprobs["top_logprobs"][i].items()) ka.push_back(k);
    for (const auto& [k, v] : sidp.logprobs["top_logprobs"][i].items()) kb.push_back(k);
    EXPECT_EQ(ka, kb) << "top tokens at " << i;
  }
  EXPECT_TRUE(sidp.stream_done);
  EXPECT_EQ(sidp.streamed, one.streamed);
  EXPECT_GE(sidp.stream_chunks, 2);
  // Both replicas stepped, each on its own; nothing in lockstep.
  ASSERT_EQ(sidp.own_steps.size(), 2u);
  EXPECT_GT(sidp.own_steps[0], 0);
  EXPECT_GT(sidp.own_steps[1], 0);
  EXPECT_EQ(sidp.group_steps, 0);
}

}  // namespace
}  // namespace loom::server::test
