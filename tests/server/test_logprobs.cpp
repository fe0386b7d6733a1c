// Issue 19, defect 10: OpenAI's logprobs. /v1/completions `logprobs: N` and /v1/chat/completions
// `logprobs: true` + `top_logprobs: N` return the sampled tokens' log-probabilities and the N most
// likely alternatives, streaming too, on every plan. The reference: the single-rank model's logits
// (SingleRankModel, the same forward the engine runs: one prefill of the prompt, then one decode per
// token) and a log-softmax computed here in double precision. Real HTTP (cpp-httplib's client).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "core/rng.h"
#include "engine/dist_engine.h"
#include "engine/rank_engine.h"
#include "engine/step_codec.h"
#include "model/bpe_pretokenize.h"
#include "model/chat_template.h"
#include "server/bench_serve.h"
#include "server/openai_api.h"
#include "server_fixture.h"

namespace loom::server::test {
namespace {

using nlohmann::json;

// The engine's logprob vs this file's double-precision log-softmax of the same single-rank logits:
// the engine rounds to float (|logprob| < 16 here: a float ulp is < 2e-6); measured: 2.4e-7.
constexpr double kSameLogits = 1e-5;
// A distributed plan's logits differ from one rank's by the summation order of the sharded matmuls
// (tp=2); measured on the tiny model: 7.2e-7 under tp=2, 2.4e-7 (the float rounding alone) under
// dp=2 and pp=2.
constexpr double kDistBound = 1e-4;

std::vector<double> log_softmax(const std::vector<float>& logits) {
  double m = -1e300;
  for (float x : logits) m = std::max(m, double(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - m);
  const double lse = m + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - lse;
  return out;
}

// Greedy continuation of `prompt` by the single-rank model: per generated token its log-softmax
// (over the raw logits) and the chosen id (the argmax, lowest id on ties), `n` tokens; bias: a
// logit bias on the choice only (the reported distribution stays the raw one).
struct Reference {
  std::vector<std::vector<double>> lsm;  // [n][vocab]
  std::vector<int32_t> ids;
};
Reference reference(const Model& model, const std::vector<int32_t>& prompt, int n,
                    const std::map<int32_t, float>& bias = {}) {
  ThreadPool pool(1);
  std::shared_ptr<const Model> m(&model, [](const Model*) {});
  SingleRankModel tf(m, &pool, int64_t(prompt.size()) + n + 1);
  Reference r;
  ForwardBatch fb;
  fb.tokens = prompt;
  fb.seqs = {ForwardSeq{0, 0, int(prompt.size()), true}};
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    tf.forward(fb, logits);
    logits.resize(size_t(model.config.vocab_size));
    r.lsm.push_back(log_softmax(logits));
    std::vector<float> chosen = logits;
    for (const auto& [id, b] : bias) chosen[size_t(id)] += b;
    const int32_t id = int32_t(std::max_element(chosen.begin(), chosen.end()) - chosen.begin());
    r.ids.push_back(id);
    fb.tokens = {id};
    fb.seqs = {ForwardSeq{0, int64_t(prompt.size()) + i, 1, true}};
  }
  return r;
}

// The `n` most likely ids of a log-softmax row (descending; ties: lower id first).
std::vector<int32_t> top_ids(const std::vector<double>& lsm, int n) {
  std::vector<int32_t> ids(lsm.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return lsm[size_t(a)] > lsm[size_t(b)]; });
  ids.resize(size_t(n));
  return ids;
}

std::string lossy(const std::string& b) {
  std::string out;
  for (size_t i = 0; i < b.size();) {
    int len = 1;
    utf8_append(out, utf8_decode(b, i, &len));
    i += size_t(len);
  }
  return out;
}

std::vector<int> bytes_of_u(const std::string& s) {
  std::vector<int> v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}

// Checks chat's logprobs.content against the reference (top_n alternatives asked).
void check_chat_content(const json& content, const Reference& ref, const Tokenizer& tok, int top_n, double bound,
                        const std::string& label) {
  ASSERT_TRUE(content.is_array()) << label;
  ASSERT_EQ(content.size(), ref.ids.size()) << label << ": " << content.dump();
  int32_t prev = -1;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& e = content[i];
    const std::string want_bytes = tok.token_piece_bytes(prev, ref.ids[i]);
    EXPECT_EQ(e["token"].get<std::string>(), lossy(want_bytes)) << label << " token " << i;
    EXPECT_EQ(e["bytes"].get<std::vector<int>>(), bytes_of_u(want_bytes)) << label << " token " << i;
    EXPECT_NEAR(e["logprob"].get<double>(), ref.lsm[i][size_t(ref.ids[i])], bound) << label << " token " << i;
    const json& top = e["top_logprobs"];
    ASSERT_EQ(int(top.size()), top_n) << label << " token " << i;
    const std::vector<int32_t> want = top_ids(ref.lsm[i], top_n);
    for (int k = 0; k < top_n; ++k) {
      const std::string b = tok.token_piece_bytes(prev, want[size_t(k)]);
      EXPECT_EQ(top[k]["token"].get<std::string>(), lossy(b)) << label << " token " << i << " top " << k;
      EXPECT_EQ(top[k]["bytes"].get<std::vector<int>>(), bytes_of_u(b)) << label << " token " << i << " top " << k;
      EXPECT_NEAR(top[k]["logprob"].get<double>(), ref.lsm[i][size_t(want[size_t(k)])], bound) << label;
      if (k > 0) {
        EXPECT_GE(top[k - 1]["logprob"].get<double>(), top[k]["logprob"].get<double>()) << label;
      }
    }
    prev = ref.ids[i];
  }
}

// Checks completions' logprobs object against the reference.
void check_completion_logprobs(const json& lp, const Reference& ref, const Tokenizer& tok, int top_n, double bound,
                               const std::string& label) {
  ASSERT_TRUE(lp.is_object()) << label << ": " << lp.dump();
  const size_t n = ref.ids.size();
  ASSERT_EQ(lp["tokens"].size(), n) << label << ": " << lp.dump();
  ASSERT_EQ(lp["token_logprobs"].size(), n) << label;
  ASSERT_EQ(lp["top_logprobs"].size(), n) << label;
  ASSERT_EQ(lp["text_offset"].size(), n) << label;
  int32_t prev = -1;
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string s = lossy(tok.token_piece_bytes(prev, ref.ids[i]));
    EXPECT_EQ(lp["tokens"][i].get<std::string>(), s) << label << " token " << i;
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), ref.lsm[i][size_t(ref.ids[i])], bound) << label << " " << i;
    // Keyed by token string: the first (most likely) of equal strings counts.
    std::map<std::string, double> want;
    for (int32_t id : top_ids(ref.lsm[i], top_n))
      want.emplace(lossy(tok.token_piece_bytes(prev, id)), ref.lsm[i][size_t(id)]);
    const json& top = lp["top_logprobs"][i];
    ASSERT_EQ(top.size(), want.size()) << label << " token " << i << ": " << top.dump();
    for (const auto& [k, v] : want) {
      ASSERT_TRUE(top.contains(k)) << label << " token " << i << " lacks '" << k << "': " << top.dump();
      EXPECT_NEAR(top[k].get<double>(), v, bound) << label << " token " << i;
    }
    // text_offset: code points before the token (these tokens are whole characters).
    EXPECT_EQ(lp["text_offset"][i].get<int64_t>(), offset) << label << " token " << i;
    for (size_t k = 0; k < s.size(); ++k) offset += (static_cast<unsigned char>(s[k]) & 0xc0) != 0x80;
    prev = ref.ids[i];
  }
}

std::vector<json> sse_chunks(const std::string& body) {
  std::vector<json> out;
  SseParser p;
  p.feed(body.data(), body.size(), [&](const std::string& payload) {
    if (payload != "[DONE]") out.push_back(json::parse(payload, nullptr, false));
  });
  return out;
}

// The streamed chunks' logprobs joined into one object of the non-streaming shape.
json join_stream_logprobs(const std::vector<json>& chunks, Endpoint ep, int* chunks_with_logprobs) {
  json joined = ep == Endpoint::kChat ? json{{"content", json::array()}}
                                      : json{{"tokens", json::array()},
                                             {"token_logprobs", json::array()},
                                             {"top_logprobs", json::array()},
                                             {"text_offset", json::array()}};
  *chunks_with_logprobs = 0;
  for (const json& c : chunks) {
    if (!c.contains("choices") || c["choices"].empty()) continue;
    const json& lp = c["choices"][0]["logprobs"];
    if (lp.is_null()) continue;
    ++*chunks_with_logprobs;
    for (auto it = joined.begin(); it != joined.end(); ++it)
      for (const json& x : lp[it.key()]) it.value().push_back(x);
  }
  return joined;
}

const std::vector<int32_t> kPrompt = {1, 45, 293, 90, 285, 114};  // ids < the tiny vocabulary (512)

TEST(Logprobs, TokenLogprobsMatchesNaiveLogSoftmax) {
  Rng rng(7);
  const int vocab = 131;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(vocab);
    for (float& x : logits) x = float(rng.uniform() * 20 - 10);
    logits[size_t(rng.below(vocab))] = logits[3];  // a tie
    const std::vector<double> ref = log_softmax(logits);
    const int32_t chosen = int32_t(rng.below(vocab));
    for (int n : {0, 1, 5, 20}) {
      TokenLogprobs l;
      token_logprobs(logits.data(), vocab, chosen, n, &l);
      EXPECT_EQ(l.token, chosen);
      EXPECT_NEAR(l.logprob, ref[size_t(chosen)], 1e-5);
      ASSERT_EQ(int(l.top.size()), n);
      const std::vector<int32_t> want = top_ids(ref, n);
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(l.top[size_t(k)].first, want[size_t(k)]) << "trial " << trial << " k " << k;
        EXPECT_NEAR(l.top[size_t(k)].second, ref[size_t(want[size_t(k)])], 1e-5);
      }
    }
  }
}

TEST(Logprobs, StepCodecAndSampledCodecCarryThem) {
  StepBatch b;
  ScheduledSeq s;
  s.seq_id = 5;
  s.num_tokens = 1;
  s.sample = true;
  s.token_ids = {3};
  s.sampling.logprobs = 7;
  b.seqs.push_back(s);
  s.seq_id = 6;
  s.sampling.logprobs = -1;
  b.seqs.push_back(s);
  std::vector<uint8_t> wire;
  encode_step(b, {}, wire);
  const DecodedStep d = decode_step(wire.data(), wire.size());
  EXPECT_EQ(d.batch.seqs[0].sampling.logprobs, 7);
  EXPECT_EQ(d.batch.seqs[1].sampling.logprobs, -1);

  StepResult r;
  r.sampled = {{5, 11}, {6, 12}};
  r.logprobs.push_back(TokenLogprobs{5, 11, -0.5f, {{11, -0.5f}, {2, -1.25f}}});
  const std::vector<uint8_t> bytes = encode_sampled(r);
  const StepResult g = decode_sampled(bytes.data(), bytes.size());
  ASSERT_EQ(g.sampled.size(), 2u);
  EXPECT_EQ(g.sampled[1].token, 12);
  ASSERT_EQ(g.logprobs.size(), 1u);
  EXPECT_EQ(g.logprobs[0].seq_id, 5);
  EXPECT_EQ(g.logprobs[0].token, 11);
  EXPECT_EQ(g.logprobs[0].logprob, -0.5f);
  EXPECT_EQ(g.logprobs[0].top, r.logprobs[0].top);
  for (size_t cut = 1; cut < bytes.size(); ++cut)
    EXPECT_THROW(decode_sampled(bytes.data(), bytes.size() - cut), loom::Error) << cut;
}

TEST(Logprobs, CompletionsMatchTheSingleRankModel) {
  Stack s;
  auto c = s.client();
  const int n = 8;
  for (int top_n : {0, 1, 5, 20}) {
    int st = 0;
    const json r = post_json(c, "/v1/completions",
                             {{"prompt", kPrompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true},
                              {"logprobs", top_n}},
                             &st);
    ASSERT_EQ(st, 200) << r.dump();
    const Reference ref = reference(s.model(), kPrompt, n);
    const json& lp = r["choices"][0]["logprobs"];
    check_completion_logprobs(lp, ref, s.tok(), top_n, kSameLogits, cat("logprobs=", top_n));
    // The greedy token is the most likely one.
    for (size_t i = 0; i < size_t(n) && top_n > 0; ++i) {
      double best = -1e30;
      std::string best_tok;
      for (auto it = lp["top_logprobs"][i].begin(); it != lp["top_logprobs"][i].end(); ++it)
        if (it.value().get<double>() > best) best = it.value().get<double>(), best_tok = it.key();
      EXPECT_EQ(best_tok, lp["tokens"][i].get<std::string>()) << "token " << i;
      EXPECT_EQ(best, lp["token_logprobs"][i].get<double>()) << "token " << i;
    }
    // The text is the tokens' (no stop string, no eos).
    std::string joined;
    for (const json& t : lp["tokens"]) joined += t.get<std::string>();
    EXPECT_EQ(r["choices"][0]["text"].get<std::string>(), joined);
  }
  // Without logprobs: null, as before.
  int st = 0;
  json r = post_json(c, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 2}}, &st);
  ASSERT_EQ(st, 200);
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null()) << r.dump();
  // The reported distribution is the raw one: a token forced by logit_bias has its unbiased
  // log-probability (below the top-1's).
  const int32_t x = 300;
  r = post_json(c, "/v1/completions",
                {{"prompt", kPrompt}, {"max_tokens", 3}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2},
                 {"logit_bias", {{std::to_string(x), 100}}}},
                &st);
  ASSERT_EQ(st, 200) << r.dump();
  const Reference biased = reference(s.model(), kPrompt, 3, {{x, 100.0f}});
  ASSERT_EQ(biased.ids, std::vector<int32_t>(3, x));
  check_completion_logprobs(r["choices"][0]["logprobs"], biased, s.tok(), 2, kSameLogits, "logit_bias");
  EXPECT_LT(biased.lsm[0][size_t(x)], *std::max_element(biased.lsm[0].begin(), biased.lsm[0].end()));
}

json chat_body(int n, bool stream) {
  return {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
          {"max_tokens", n},
          {"temperature", 0},
          {"ignore_eos", true},
          {"stream", stream}};
}

std::vector<int32_t> chat_prompt(const Tokenizer& tok) {
  return tok.encode(apply_chat_template(tok.vocab(), {ChatMessage{"user", "Tell me a story"}}, true), false);
}

TEST(Logprobs, ChatMatchesTheSingleRankModel) {
  Stack s;
  auto c = s.client();
  const int n = 6;
  const Reference ref = reference(s.model(), chat_prompt(s.tok()), n);
  for (int top_n : {-1, 0, 3, 20}) {  // -1: logprobs true without top_logprobs
    json body = chat_body(n, false);
    body["logprobs"] = true;
    if (top_n >= 0) body["top_logprobs"] = top_n;
    int st = 0;
    const json r = post_json(c, "/v1/chat/completions", body, &st);
    ASSERT_EQ(st, 200) << r.dump();
    EXPECT_EQ(r["usage"]["prompt_tokens"].get<size_t>(), chat_prompt(s.tok()).size());
    const json& content = r["choices"][0]["logprobs"]["content"];
    check_chat_content(content, ref, s.tok(), std::max(top_n, 0), kSameLogits, cat("top_logprobs=", top_n));
    for (size_t i = 0; i < content.size() && top_n > 0; ++i) {  // the greedy token is top-1
      EXPECT_EQ(content[i]["top_logprobs"][0]["token"], content[i]["token"]) << i;
      EXPECT_EQ(content[i]["top_logprobs"][0]["logprob"], content[i]["logprob"]) << i;
    }
  }
  int st = 0;
  const json r = post_json(c, "/v1/chat/completions", chat_body(2, false), &st);
  ASSERT_EQ(st, 200);
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null()) << r.dump();
}

TEST(Logprobs, StreamingChunksCarryTheirTokens) {
  StackOptions so;
  so.step_delay_ms = 20;  // a step per token at least 20 ms apart: tokens reach the client in several chunks
  Stack s(so);
  auto c = s.client();
  const int n = 7;
  {
    const Reference ref = reference(s.model(), kPrompt, n);
    const json body = {{"prompt", kPrompt}, {"max_tokens", n},      {"temperature", 0},
                       {"ignore_eos", true}, {"logprobs", 4},       {"stream", true}};
    auto res = c.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const std::vector<json> chunks = sse_chunks(res->body);
    int with = 0;
    const json joined = join_stream_logprobs(chunks, Endpoint::kCompletions, &with);
    check_completion_logprobs(joined, ref, s.tok(), 4, kSameLogits, "stream completions");
    EXPECT_GE(with, 2) << "the logprobs came in one chunk, not with their tokens";
    // Each chunk's text is its tokens' text.
    for (const json& ch : chunks) {
      if (ch["choices"].empty() || ch["choices"][0]["logprobs"].is_null()) continue;
      std::string t;
      for (const json& x : ch["choices"][0]["logprobs"]["tokens"]) t += x.get<std::string>();
      EXPECT_EQ(ch["choices"][0]["text"].get<std::string>(), t) << ch.dump();
    }
  }
  {
    const Reference ref = reference(s.model(), chat_prompt(s.tok()), n);
    json body = chat_body(n, true);
    body["logprobs"] = true;
    body["top_logprobs"] = 2;
    auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    int with = 0;
    const json joined = join_stream_logprobs(sse_chunks(res->body), Endpoint::kChat, &with);
    check_chat_content(joined["content"], ref, s.tok(), 2, kSameLogits, "stream chat");
    EXPECT_GE(with, 2);
  }
}

// A distributed engine (two thread ranks over the local communicator) returns the single-rank
// model's tokens and logprobs within kDistBound: tp=2 (the sampler is rank 0), dp=2 (request ids
// alternate replicas; replica 1's sampler is rank 1, so its logprobs travel in the step's token
// gather to rank 0) and pp=2 (the last stage, rank 1, samples every request).
TEST(Logprobs, DistributedPlansMatchTheSingleRankModel) {
  const std::string path = tiny_model_path();
  auto tok = Tokenizer::create(load_vocab(path, ""));
  std::shared_ptr<Model> model = load_model(path);
  const int n = 6;
  const Reference ref = reference(*model, kPrompt, n);
  for (const char* plan : {"tp=2", "dp=2", "pp=2"}) {
    DistOptions o;
    o.comm = "local";
    o.ranks = 2;
    o.plan = plan;
    o.model_path = path;
    o.engine.threads = 1;
    o.engine.max_num_seqs = 4;
    o.engine.kv_cache_bytes = 4 << 20;
    run_distributed(o, [&](DistEngine& engine) {
      ServingOptions so;
      so.model_name = "test-model";
      ServingEngine serving(engine, *tok, serving_eos_ids(*tok, "gguf", -1), so);
      HttpServerOptions ho;
      ho.port = 0;
      ho.model_name = "test-model";
      HttpServer http(serving, *tok, ho);
      const int port = http.start();
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(60, 0);
      // Request 1 (replica 1 under dp=2), not streamed.
      int st = 0;
      const json r = post_json(c, "/v1/completions",
                               {{"prompt", kPrompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true},
                                {"logprobs", 3}},
                               &st);
      ASSERT_EQ(st, 200) << plan << ": " << r.dump();
      check_completion_logprobs(r["choices"][0]["logprobs"], ref, *tok, 3, kDistBound, cat(plan, " request 1"));
      // Request 2 (replica 0), streamed.
      auto res = c.Post("/v1/completions",
                        json{{"prompt", kPrompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true},
                             {"logprobs", 3}, {"stream", true}}
                            .dump(),
                        "application/json");
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 200) << res->body;
      int with = 0;
      const json joined = join_stream_logprobs(sse_chunks(res->body), Endpoint::kCompletions, &with);
      check_completion_logprobs(joined, ref, *tok, 3, kDistBound, cat(plan, " request 2, streamed"));
      serving.shutdown();
      http.stop();
    });
  }
}

// The eos token that ends a request is not text: it has no logprobs entry (an eos forced first by
// logit_bias: one completion token, no entry, the empty forms).
TEST(Logprobs, TheEndingEosHasNoEntry) {
  Stack s;
  auto c = s.client();
  const int eos = s.tok().eos_id();
  ASSERT_GE(eos, 0);
  const json bias = {{std::to_string(eos), 100}};
  int st = 0;
  json r = post_json(c, "/v1/completions",
                     {{"prompt", kPrompt}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 2}, {"logit_bias", bias}},
                     &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], 1) << r.dump();
  EXPECT_EQ(r["choices"][0]["logprobs"], (json{{"tokens", json::array()},
                                               {"token_logprobs", json::array()},
                                               {"top_logprobs", json::array()},
                                               {"text_offset", json::array()}}))
      << r.dump();
  json body = chat_body(5, false);
  body.erase("ignore_eos");
  body["logprobs"] = true;
  body["logit_bias"] = bias;
  r = post_json(c, "/v1/chat/completions", body, &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], 1) << r.dump();
  EXPECT_EQ(r["choices"][0]["logprobs"], (json{{"content", json::array()}})) << r.dump();
  // With ignore_eos the eos is an ordinary token: it has its entry.
  body["ignore_eos"] = true;
  body["max_tokens"] = 2;
  r = post_json(c, "/v1/chat/completions", body, &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"].size(), 2u) << r.dump();
}

TEST(Logprobs, BadValuesAre400NamingTheField) {
  Stack s;
  auto c = s.client();
  struct Case {
    const char* path;
    json extra;
    const char* param;
    const char* says;  // in the message
  };
  const std::vector<Case> cases = {
      {"/v1/completions", {{"logprobs", 21}}, "logprobs", "[0, 20]"},
      {"/v1/completions", {{"logprobs", -1}}, "logprobs", "[0, 20]"},
      {"/v1/completions", {{"logprobs", "3"}}, "logprobs", "integer"},
      {"/v1/completions", {{"logprobs", true}}, "logprobs", "not true"},
      {"/v1/completions", {{"logprobs", 2.5}}, "logprobs", "integer"},
      {"/v1/completions", {{"top_logprobs", 3}}, "top_logprobs", "logprobs"},
      {"/v1/chat/completions", {{"top_logprobs", 3}}, "top_logprobs", "requires 'logprobs': true"},
      {"/v1/chat/completions", {{"logprobs", false}, {"top_logprobs", 3}}, "top_logprobs", "requires"},
      {"/v1/chat/completions", {{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs", "[0, 20]"},
      {"/v1/chat/completions", {{"logprobs", true}, {"top_logprobs", -2}}, "top_logprobs", "[0, 20]"},
      {"/v1/chat/completions", {{"logprobs", "yes"}}, "logprobs", "boolean"},
      {"/v1/chat/completions", {{"logprobs", 3}}, "logprobs", "boolean"},
  };
  for (const Case& k : cases) {
    json body = std::string(k.path) == "/v1/completions"
                    ? json{{"prompt", "hi"}, {"max_tokens", 2}}
                    : json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
    for (auto it = k.extra.begin(); it != k.extra.end(); ++it) body[it.key()] = it.value();
    int st = 0;
    const json r = post_json(c, k.path, body, &st);
    EXPECT_EQ(st, 400) << body.dump() << " -> " << r.dump();
    EXPECT_EQ(r["error"]["param"], k.param) << body.dump() << " -> " << r.dump();
    const std::string msg = r["error"]["message"].get<std::string>();
    EXPECT_NE(msg.find(k.param), std::string::npos) << msg;
    EXPECT_NE(msg.find(k.says), std::string::npos) << msg;
  }
  // Off forms: completions logprobs false / null, chat logprobs false: no logprobs.
  int st = 0;
  json r = post_json(c, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}, {"logprobs", false}}, &st);
  EXPECT_EQ(st, 200) << r.dump();
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  r = post_json(c, "/v1/chat/completions",
                {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}, {"logprobs", false}}, &st);
  EXPECT_EQ(st, 200) << r.dump();
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
}

}  // namespace
}  // namespace loom::server::test
