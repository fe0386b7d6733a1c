// Issue 19, defect 10: OpenAI fields loom used to accept and ignore. logit_bias, presence and
// frequency penalties are implemented (engine/request.h; sampler in rank_engine.cpp), user is
// accepted, and tools / response_format / suffix get a 400 naming the field (logprobs and
// top_logprobs: test_logprobs.cpp).
// The sampler's adjustment is checked against a naive reference (same bits: the same float
// operations in the same order), the step codec carries the new fields, and the HTTP tests run
// through a real client against the serve stack.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/rng.h"
#include "engine/rank_engine.h"
#include "engine/step_codec.h"
#include "server_fixture.h"

namespace loom::server::test {
namespace {

using nlohmann::json;

int naive_argmax(const std::vector<float>& x) {
  int best = 0;
  for (int i = 1; i < int(x.size()); ++i)
    if (x[size_t(i)] > x[size_t(best)]) best = i;
  return best;
}

TEST(LogitAdjust, SamplerMatchesNaiveReference) {
  Rng rng(19);
  const int vocab = 97;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(vocab);
    for (float& x : logits) x = float(rng.uniform() * 8 - 4);
    SamplingParams p;
    p.presence_penalty = float(rng.uniform() * 4 - 2);
    p.frequency_penalty = float(rng.uniform() * 4 - 2);
    std::map<TokenId, float> bias;
    for (int k = 0; k < 5; ++k) bias[TokenId(rng.below(vocab))] = float(rng.uniform() * 200 - 100);
    p.logit_bias.assign(bias.begin(), bias.end());
    std::vector<std::pair<TokenId, int32_t>> counts;
    std::map<TokenId, int32_t> c;
    for (int k = 0; k < 12; ++k) ++c[TokenId(rng.below(vocab))];
    counts.assign(c.begin(), c.end());
    // Naive reference: OpenAI's formula, written out.
    std::vector<float> ref = logits;
    for (const auto& [id, b] : bias) ref[size_t(id)] += b;
    for (const auto& [id, n] : c) ref[size_t(id)] -= p.frequency_penalty * float(n) + p.presence_penalty;
    p.temperature = 0;
    EXPECT_EQ(sample_token(logits.data(), vocab, p, 5, counts), naive_argmax(ref)) << "trial " << trial;
    // Sampling: the adjusted logits through the plain sampler, same seed and position.
    p.temperature = 0.9f;
    p.top_k = 20;
    p.seed = uint64_t(trial);
    SamplingParams plain = p;
    plain.logit_bias.clear();
    plain.presence_penalty = plain.frequency_penalty = 0;
    EXPECT_EQ(sample_token(logits.data(), vocab, p, 7, counts), sample_token(ref.data(), vocab, plain, 7))
        << "trial " << trial;
  }
}

TEST(LogitAdjust, StepCodecCarriesBiasPenaltiesAndCounts) {
  StepBatch b;
  ScheduledSeq s;
  s.seq_id = 42;
  s.start = 3;
  s.num_tokens = 1;
  s.sample = true;
  s.token_ids = {7};
  s.sampling.temperature = 0.5f;
  s.sampling.presence_penalty = 0.25f;
  s.sampling.frequency_penalty = -1.5f;
  s.sampling.logit_bias = {{3, 10.0f}, {9, -100.0f}};
  s.output_counts = {{5, 2}, {7, 1}};
  b.seqs.push_back(s);
  ScheduledSeq plain = s;
  plain.seq_id = 43;
  plain.sampling = SamplingParams{};
  plain.output_counts.clear();
  b.seqs.push_back(plain);
  b.num_tokens = 2;
  std::vector<uint8_t> wire;
  encode_step(b, {}, wire);
  const DecodedStep d = decode_step(wire.data(), wire.size());
  ASSERT_EQ(d.batch.seqs.size(), 2u);
  const ScheduledSeq& g = d.batch.seqs[0];
  EXPECT_EQ(g.sampling.presence_penalty, 0.25f);
  EXPECT_EQ(g.sampling.frequency_penalty, -1.5f);
  EXPECT_EQ(g.sampling.logit_bias, s.sampling.logit_bias);
  EXPECT_EQ(g.output_counts, s.output_counts);
  EXPECT_FALSE(d.batch.seqs[1].sampling.adjusts_logits());
  EXPECT_TRUE(d.batch.seqs[1].output_counts.empty());
  // A truncated descriptor is an error, never a read past the end.
  for (size_t cut = 1; cut < 40; ++cut)
    EXPECT_THROW(decode_step(wire.data(), wire.size() - cut), loom::Error) << cut;
}

std::string greedy_text(Stack& s, json extra, int max_tokens) {
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
  auto c = s.client();
  int st = 0;
  const json r = post_json(c, "/v1/completions", body, &st);
  EXPECT_EQ(st, 200) << r.dump();
  return st == 200 ? r["choices"][0]["text"].get<std::string>() : "";
}

TEST(OpenAiFields, LogitBiasForcesAndForbidsTokens) {
  Stack s;
  const int x = 300;  // an ordinary token of the tiny vocabulary
  ASSERT_LT(x, s.tok().vocab_size());
  // +100 on x: greedy picks x every time.
  StreamDecoder dec(s.tok());
  std::string want;
  for (int i = 0; i < 6; ++i) want += dec.push(x);
  want += dec.flush();
  EXPECT_EQ(greedy_text(s, {{"logit_bias", {{std::to_string(x), 100}}}}, 6), want);
  // -100 on the unbiased greedy first token: the first token changes.
  auto c = s.client();
  int st = 0;
  json r = post_json(c, "/v1/completions",
                     {{"prompt", "Once upon a time"}, {"max_tokens", 1}, {"temperature", 0}, {"ignore_eos", true}}, &st);
  ASSERT_EQ(st, 200);
  const std::string first = r["choices"][0]["text"];
  std::vector<int32_t> ids = s.tok().encode(first, false, false);
  ASSERT_FALSE(ids.empty());
  // Forbid every token that spells the first piece (the text may re-tokenize differently).
  json bias = json::object();
  for (int i = 0; i < s.tok().vocab_size(); ++i) {
    StreamDecoder d(s.tok());
    std::string t = d.push(i) + d.flush();
    if (!t.empty() && t == first) bias[std::to_string(i)] = -100;
  }
  ASSERT_FALSE(bias.empty());
  EXPECT_NE(greedy_text(s, {{"logit_bias", bias}}, 1), first);
}

// Penalties change greedy output the way they should: the unpenalized tiny model repeats
// itself; with both penalties at 2 the most frequent output token occurs less often.
TEST(OpenAiFields, PenaltiesReduceRepetition) {
  Stack s;
  auto max_repeat = [&](const json& extra) {
    json body = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
    for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
    auto c = s.client();
    int st = 0;
    const json r = post_json(c, "/v1/completions", body, &st);
    EXPECT_EQ(st, 200) << r.dump();
    const std::vector<int32_t> ids = s.tok().encode(r["choices"][0]["text"].get<std::string>(), false, false);
    std::map<int32_t, int> n;
    int most = 0;
    for (int32_t id : ids) most = std::max(most, ++n[id]);
    return most;
  };
  const int plain = max_repeat(json::object());
  const int penalized = max_repeat({{"presence_penalty", 2}, {"frequency_penalty", 2}});
  ASSERT_GT(plain, 3) << "the reference output does not repeat; the test cannot tell";
  EXPECT_LT(penalized, plain);
}

TEST(OpenAiFields, UnsupportedFieldsAre400NamingTheField) {
  Stack s;
  auto c = s.client();
  struct Case {
    const char* path;
    json extra;
    const char* param;
  };
  const json chat_msgs = {{{"role", "user"}, {"content", "hi"}}};
  const std::vector<Case> cases = {
      {"/v1/chat/completions", {{"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}}, "tools"},
      {"/v1/chat/completions", {{"tool_choice", "auto"}}, "tool_choice"},
      {"/v1/chat/completions", {{"response_format", {{"type", "json_object"}}}}, "response_format"},
      {"/v1/completions", {{"suffix", "tail"}}, "suffix"},
      {"/v1/completions", {{"top_logprobs", 3}}, "top_logprobs"},
      {"/v1/completions", {{"logit_bias", {{"abc", 1}}}}, "logit_bias"},
      {"/v1/completions", {{"logit_bias", {{"5", 101}}}}, "logit_bias"},
      {"/v1/completions", {{"logit_bias", {{"99999999", 1}}}}, "logit_bias"},
      {"/v1/completions", {{"logit_bias", "no"}}, "logit_bias"},
      {"/v1/completions", {{"presence_penalty", 2.5}}, "presence_penalty"},
      {"/v1/completions", {{"frequency_penalty", "x"}}, "frequency_penalty"},
      {"/v1/completions", {{"user", 5}}, "user"},
  };
  for (const Case& k : cases) {
    json body = std::string(k.path) == "/v1/completions" ? json{{"prompt", "hi"}, {"max_tokens", 2}}
                                                         : json{{"messages", chat_msgs}, {"max_tokens", 2}};
    for (auto it = k.extra.begin(); it != k.extra.end(); ++it) body[it.key()] = it.value();
    int st = 0;
    const json r = post_json(c, k.path, body, &st);
    EXPECT_EQ(st, 400) << body.dump() << " -> " << r.dump();
    EXPECT_EQ(r["error"]["param"], k.param) << body.dump() << " -> " << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find(k.param), std::string::npos) << r.dump();
  }
  // Accepted: user (a string), the no-op forms of the refused fields.
  int st = 0;
  json r = post_json(c, "/v1/chat/completions",
                     {{"messages", chat_msgs}, {"max_tokens", 2}, {"user", "u-1"}, {"tools", json::array()},
                      {"tool_choice", "none"}, {"response_format", {{"type", "text"}}}},
                     &st);
  EXPECT_EQ(st, 200) << r.dump();
  r = post_json(c, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}, {"suffix", ""}, {"user", "u"}}, &st);
  EXPECT_EQ(st, 200) << r.dump();
}

}  // namespace
}  // namespace loom::server::test
