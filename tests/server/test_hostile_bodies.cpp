// Hostile request bodies (issue 19, defects 1, 9, 13): values nested ~52k deep in every typed
// field, raw invalid UTF-8, numbers beyond double and int64, and huge bad values. Each must be
// a 400 with a short OpenAI error body (the parser unit, then the same bodies over real HTTP
// against a live `loom serve` stack, which must keep answering).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/openai_api.h"
#include "server_fixture.h"

namespace loom::server {
namespace {

using nlohmann::json;

// An array nested `depth` deep around 1: "[[[...1...]]]" (~2 bytes per level).
std::string deep(int depth) { return std::string(size_t(depth), '[') + "1" + std::string(size_t(depth), ']'); }

struct Body {
  Endpoint ep;
  std::string body;
  std::string param;  // the param the 400 must name ("" for whole-body errors)
};

// The probe's bodies: one per typed field, with the 52k-deep array (~104 KB) as its value.
std::vector<Body> deep_bodies() {
  const std::string d = deep(52000);
  const std::string chat_head = R"({"messages":[{"role":"user","content":"hi"}],)";
  return {
      {Endpoint::kCompletions, R"({"prompt":"hi","max_tokens":)" + d + "}", ""},
      {Endpoint::kCompletions, R"({"prompt":"hi","temperature":)" + d + "}", ""},
      {Endpoint::kCompletions, R"({"prompt":"hi","model":)" + d + "}", ""},
      {Endpoint::kCompletions, R"({"prompt":"hi","stop":["a",)" + d + "]}", ""},
      {Endpoint::kCompletions, R"({"prompt":"hi","stream":)" + d + "}", ""},
      {Endpoint::kCompletions, R"({"prompt":[1,2,)" + d + "]}", ""},
      {Endpoint::kChat, R"({"messages":[{"role":)" + d + R"(,"content":"hi"}]})", ""},
      {Endpoint::kChat, chat_head + R"("max_completion_tokens":)" + d + "}", ""},
  };
}

// Bodies within the depth limit whose bad values are large: the message quotes a capped excerpt.
std::vector<Body> wide_bodies() {
  const std::string d = deep(40);  // within the limit: reaches the field check
  std::string long_array = "[";
  for (int i = 0; i < 20000; ++i) long_array += (i ? ",\"" : "\"") + std::string(8, 'x') + "\"";
  long_array += "]";
  const std::string long_role(200000, 'r');
  return {
      {Endpoint::kCompletions, R"({"prompt":"hi","max_tokens":)" + d + "}", "max_tokens"},
      {Endpoint::kCompletions, R"({"prompt":"hi","temperature":)" + long_array + "}", "temperature"},
      {Endpoint::kCompletions, R"({"prompt":"hi","model":)" + long_array + "}", "model"},
      {Endpoint::kCompletions, R"({"prompt":"hi","stop":["a",)" + d + "]}", "stop"},
      {Endpoint::kCompletions, R"({"prompt":"hi","stream":)" + long_array + "}", "stream"},
      {Endpoint::kCompletions, R"({"prompt":[1,2,)" + long_array + "]}", "prompt"},
      {Endpoint::kChat, R"({"messages":[{"role":")" + long_role + R"(","content":"hi"}]})", "messages[0].role"},
      {Endpoint::kChat, R"({"messages":[{"role":)" + d + R"(,"content":"hi"}]})", "messages[0].role"},
  };
}

ApiError error_of(const Body& b) {
  try {
    parse_api_request(b.ep, b.body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for a " << b.body.size() << "-byte body";
  return {};
}

TEST(HostileBodies, DeeplyNestedValuesInEveryTypedFieldAre400) {
  for (const Body& b : deep_bodies()) {
    const ApiError e = error_of(b);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, b.param);
    EXPECT_EQ(e.code, "invalid_json");
    EXPECT_NE(e.message.find("nested more than 64 levels"), std::string::npos) << e.message;
    EXPECT_LT(e.message.size(), 200u);
    EXPECT_NO_THROW((void)error_json(e).dump());
  }
}

TEST(HostileBodies, BadValuesAreQuotedCapped) {
  for (const Body& b : wide_bodies()) {
    const ApiError e = error_of(b);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, b.param) << e.message;
    EXPECT_LT(e.message.size(), 300u) << e.message.substr(0, 400);
    EXPECT_NO_THROW((void)error_json(e).dump());
  }
}

TEST(HostileBodies, InvalidUtf8AndOutOfRangeNumbersAre400WithTheTrueValue) {
  // Raw invalid UTF-8 inside a string: 400 whose body can be serialised (it was a 500).
  const ApiError u = error_of({Endpoint::kCompletions, std::string("{\"prompt\":\"a\xff\xfe\"}"), ""});
  EXPECT_EQ(u.status, 400);
  EXPECT_EQ(u.code, "invalid_json");
  EXPECT_NO_THROW((void)error_json(u).dump());
  EXPECT_NE(u.message.find("\\xff"), std::string::npos) << u.message;
  // Beyond double: 400 (was a 500 from an uncaught out_of_range).
  const ApiError f = error_of({Endpoint::kCompletions, R"({"prompt":"hi","temperature":1e400})", ""});
  EXPECT_EQ(f.status, 400);
  EXPECT_NE(f.message.find("1e400"), std::string::npos) << f.message;
  // Finite as a double but not as the float it is kept in.
  const ApiError tf = error_of({Endpoint::kCompletions, R"({"prompt":"hi","temperature":1e300})", "temperature"});
  EXPECT_EQ(tf.param, "temperature");
  EXPECT_NE(tf.message.find("float range"), std::string::npos) << tf.message;
  // max_tokens 1e12: reported as given (it read as 2147483652 in the context error).
  const ApiError m = error_of({Endpoint::kCompletions, R"({"prompt":"hi","max_tokens":1e12})", "max_tokens"});
  EXPECT_EQ(m.param, "max_tokens");
  EXPECT_NE(m.message.find("1000000000000"), std::string::npos) << m.message;
  const ApiError m2 = error_of({Endpoint::kCompletions, R"({"prompt":"hi","max_tokens":3000000000})", ""});
  EXPECT_NE(m2.message.find("3000000000"), std::string::npos) << m2.message;
  // A token id of 2^63 (and 2^64-1): the true value, not a negative one.
  const ApiError t = error_of({Endpoint::kCompletions, R"({"prompt":[1,9223372036854775808]})", "prompt"});
  EXPECT_EQ(t.param, "prompt");
  EXPECT_NE(t.message.find("9223372036854775808"), std::string::npos) << t.message;
  EXPECT_EQ(t.message.find('-'), std::string::npos) << t.message;
  const ApiError t2 = error_of({Endpoint::kCompletions, R"({"prompt":[18446744073709551615]})", "prompt"});
  EXPECT_NE(t2.message.find("18446744073709551615"), std::string::npos) << t2.message;
  const ApiError s = error_of({Endpoint::kCompletions, R"({"prompt":"hi","seed":18446744073709551615})", "seed"});
  EXPECT_EQ(s.param, "seed");
  EXPECT_NE(s.message.find("18446744073709551615"), std::string::npos) << s.message;
}

// The same bodies over HTTP: every one a 400 with an OpenAI error, and the server still serves.
TEST(HostileBodies, LiveServerAnswers400AndKeepsServing) {
  test::Stack s;
  auto c = s.client();
  std::vector<Body> all = deep_bodies();
  for (Body& b : wide_bodies()) all.push_back(std::move(b));
  all.push_back({Endpoint::kCompletions, std::string("{\"prompt\":\"a\xff\xfe\"}"), ""});
  all.push_back({Endpoint::kCompletions, R"({"prompt":"hi","temperature":1e400})", ""});
  for (const Body& b : all) {
    const char* path = b.ep == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
    auto res = c.Post(path, b.body, "application/json");
    ASSERT_TRUE(res) << "no answer to a " << b.body.size() << "-byte body";
    EXPECT_EQ(res->status, 400) << res->body.substr(0, 300);
    const json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << res->body.substr(0, 300);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["param"], b.param.empty() ? json(nullptr) : json(b.param));
    EXPECT_LT(res->body.size(), 600u);
  }
  // An unknown model with a 1 MB name: 404 quoting a capped excerpt.
  auto nf = c.Post("/v1/completions", json{{"prompt", "hi"}, {"model", std::string(1 << 20, 'm')}}.dump(),
                   "application/json");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_LT(nf->body.size(), 600u);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  int status = 0;
  const json ok = test::post_json(c, "/v1/completions", json{{"prompt", "hi"}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 200) << ok.dump();
}

}  // namespace
}  // namespace loom::server
