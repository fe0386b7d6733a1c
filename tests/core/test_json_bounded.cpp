// Bounded JSON parsing of untrusted input (core/json_bounded.h): depth and size limits hold
// before nlohmann allocates, and error messages stay one short, valid UTF-8 line.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/json_bounded.h"

namespace loom {
namespace {

using nlohmann::json;

std::string nested_array(int depth, const std::string& inner = "1") {
  return std::string(size_t(depth), '[') + inner + std::string(size_t(depth), ']');
}

std::string error_of(std::string_view text, const JsonLimits& lim) {
  try {
    parse_json_bounded(text, "input.json", lim);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A message is fit for a JSON error body: no exception when dumped strictly.
bool dumps_strictly(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

TEST(JsonBounded, DepthLimitIsExactAndStringsDoNotCount) {
  const JsonLimits lim{1 << 20, 8};
  EXPECT_EQ(parse_json_bounded(nested_array(8), "x", lim).dump(), nested_array(8));
  const std::string e = error_of(nested_array(9), lim);
  EXPECT_NE(e.find("input.json: JSON nested more than 8 levels deep (at byte 8)"), std::string::npos) << e;
  // Brackets inside strings (escaped quotes included) are text, not nesting.
  const std::string s = R"({"a": "[[[[[[[[[[\"{{{{{{{{{{", "b": [1]})";
  EXPECT_EQ(parse_json_bounded(s, "x", lim)["b"][0], 1);
  EXPECT_EQ(json_text_depth(s, 100), 2);
}

TEST(JsonBounded, FiftyThousandLevelsGiveOneShortLine) {
  // The probe's request: ~52k levels in ~104 KB.
  const std::string deep = nested_array(52000);
  const std::string e = error_of(deep, kRequestJsonLimits);
  EXPECT_NE(e.find("nested more than 64 levels deep"), std::string::npos) << e;
  EXPECT_LT(e.size(), 200u);
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST(JsonBounded, SizeLimitBeforeParsing) {
  const std::string big = "[" + std::string(1000, ' ') + "]";
  const std::string e = error_of(big, JsonLimits{100, 8});
  EXPECT_NE(e.find("1002 bytes of JSON, more than the limit of 100 bytes"), std::string::npos) << e;
  EXPECT_TRUE(parse_json_bounded(big, "x", JsonLimits{1002, 8}).is_array());
}

TEST(JsonBounded, InvalidUtf8AndHugeNumbersAreCleanErrors) {
  // Raw invalid UTF-8 in a string: nlohmann's message quotes the bytes; ours escapes them.
  const std::string bad = std::string("{\"model\": \"ab\xff\xfe") + "cd\"}";
  const std::string e = error_of(bad, kRequestJsonLimits);
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
  EXPECT_NE(e.find("\\xff"), std::string::npos) << e;
  EXPECT_TRUE(dumps_strictly(e));
  // A number outside the double range is an error, not infinity.
  const std::string e2 = error_of(R"({"temperature": 1e400})", kRequestJsonLimits);
  EXPECT_NE(e2.find("1e400"), std::string::npos) << e2;
  // A parse error inside a megabyte string quotes at most a few dozen bytes of it.
  const std::string longbad = "[\"" + std::string(1 << 20, 'a') + "\x01\"]";
  const std::string e3 = error_of(longbad, kRequestJsonLimits);
  EXPECT_LT(e3.size(), 400u) << e3.size();
  EXPECT_TRUE(dumps_strictly(e3));
}

TEST(JsonBounded, ExcerptIsShortOnAnyValue) {
  // A value far deeper than any limit (nlohmann parses and destroys it without recursion).
  const json deep = json::parse(nested_array(100000));
  const std::string d = json_excerpt(deep, 64);
  EXPECT_LT(d.size(), 140u) << d;
  EXPECT_NE(d.find("... (an array of 1 entry)"), std::string::npos) << d;
  EXPECT_EQ(json_excerpt(json::parse("[1,2,{\"a\":[true,null]}]")), "[1,2,{\"a\":[true,null]}]");
  EXPECT_EQ(json_excerpt(json(12)), "12");
  EXPECT_EQ(json_excerpt(json("hi")), "\"hi\"");
  const std::string longs = json_excerpt(json(std::string(10000, 'x')), 16);
  EXPECT_EQ(longs, std::string("\"").append(16, 'x').append("... (10000 bytes)\""));
  json wide = json::array();
  for (int i = 0; i < 10000; ++i) wide.push_back(i);
  const std::string w = json_excerpt(wide, 32);
  EXPECT_LT(w.size(), 80u) << w;
  EXPECT_NE(w.find("(an array of 10000 entries)"), std::string::npos) << w;
}

TEST(JsonBounded, TextExcerptKeepsUtf8AndEscapesTheRest) {
  EXPECT_EQ(text_excerpt("h\xc3\xa9llo"), "h\xc3\xa9llo");
  EXPECT_EQ(text_excerpt("a\nb\xff"), "a\\x0ab\\xff");
  EXPECT_EQ(text_excerpt("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a UTF-16 surrogate is not UTF-8
  // Cut at a code point boundary, never inside "é".
  EXPECT_EQ(text_excerpt("abc\xc3\xa9xyz", 4), "abc\xc3\xa9... (8 bytes)");
}

}  // namespace
}  // namespace loom
