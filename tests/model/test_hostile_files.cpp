// Hostile model, config and tokenizer files (issue 19, defects 2, 5, 6, 7, 13): JSON nested tens
// of thousands deep in any key, products that overflow, misaligned tensor data, ids far past the
// vocabulary. Each must end in one short loom::Error line naming the value and the limit (or,
// for misaligned data, load with the same values), never a crash, a hang or a huge allocation.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "model/loader.h"
#include "model/synth.h"
#include "model/vocab_io.h"
#include "test_formats_util.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::get_le;
using test::put_le;
using test::read_bytes;
using test::write_bytes;

std::string deep(int depth) { return std::string(size_t(depth), '[') + "1" + std::string(size_t(depth), ']'); }

// One line, short, naming every part.
void expect_short_error(const std::function<void()>& fn, std::initializer_list<std::string> parts,
                        size_t max_len = 400) {
  const std::string e = test::error_of<Error>(fn);  // another exception type fails the test
  ASSERT_NE(e, test::kNoError) << "expected a loom::Error mentioning '" << *parts.begin() << "'";
  for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "message: " << e << "\nmissing: " << p;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_LE(e.size(), max_len) << e.substr(0, 600);
}

// Replaces the first occurrence of `from` in s (which must occur).
std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// A tiny bf16 safetensors model folder (config.json, tokenizer.json beside it).
struct StModel {
  std::string dir, bytes, header_text;
  uint64_t header_len = 0;
  StModel() {
    dir = test::temp_dir() + "/m";
    SynthOptions o;
    o.shape = synth_shape("tiny");
    o.dtype = DType::BF16;
    o.format = "safetensors";
    write_synth_model(o, dir);
    bytes = read_bytes(dir + "/model.safetensors");
    header_len = get_le<uint64_t>(bytes, 0);
    header_text = bytes.substr(8, size_t(header_len));
  }
  // The model with header text `h` (no padding added) in front of the same data.
  std::string with_header_text(const std::string& h) const {
    std::string b(8, '\0');
    put_le<uint64_t>(b, 0, h.size());
    b += h + bytes.substr(8 + size_t(header_len));
    write_bytes(dir + "/model.safetensors", b);
    return dir;
  }
  json config() const { return json::parse(read_bytes(dir + "/config.json")); }
};

TEST(HostileFiles, SafetensorsHeaderNestedDeepIsOneLine) {
  StModel m;
  // ~52k levels in a tensor entry, in a shape, and in __metadata__ (each crashed the loader).
  const std::string d = deep(52000);
  const std::string entry = "\"model.norm.weight\":";
  for (const std::string& h :
       {replaced(m.header_text, entry, "\"zz.nested\":" + d + "," + entry),
        replaced(m.header_text, "\"shape\":[64]", "\"shape\":[" + d + "]"),
        replaced(m.header_text, "\"format\":\"pt\"", "\"format\":" + d)}) {
    expect_short_error([&] { load_model(m.with_header_text(h)); },
                       {"model.safetensors", "header", "nested more than 8 levels deep"});
  }
  // Within the depth limit (3 + 4 levels), a nested shape dimension is quoted.
  expect_short_error([&] { load_model(m.with_header_text(replaced(m.header_text, "\"shape\":[64]",
                                                                    "\"shape\":[" + deep(4) + "]"))); },
                     {"layernorm.weight", "bad dimension [[[[1]]]]"});
}

TEST(HostileFiles, SafetensorsShapeProductIsBoundedBeforeMultiplying) {
  StModel m;
  // [2^40, 2^40]: each dimension is allowed, the product (2^80) is not; it overflowed int64.
  const std::string h = replaced(m.header_text, "\"shape\":[64]", "\"shape\":[1099511627776,1099511627776]");
  expect_short_error([&] { load_model(m.with_header_text(h)); }, {"layernorm.weight", "more than 2^48 elements"});
  const std::string h2 = replaced(m.header_text, "\"shape\":[64]", "\"shape\":[1099511627777]");
  expect_short_error([&] { load_model(m.with_header_text(h2)); }, {"bad dimension 1099511627777", "at most 2^40"});
}

// Exactness: pure data movement. A data section at an odd address (the header length is odd,
// which the format allows) loads, and every bf16 value reads back with the same bits as from
// the aligned file.
TEST(HostileFiles, SafetensorsDataAtOddAddressesReadsTheSameValues) {
  StModel m;
  auto aligned = load_model(m.dir);
  std::string odd_header = m.header_text;
  while (odd_header.size() % 2 == 0) odd_header += ' ';
  // In another folder: rewriting the file under the aligned model's mapping would change it.
  const std::string odd_dir = m.dir + "-odd";
  fs::create_directories(odd_dir);
  fs::copy_file(m.dir + "/config.json", odd_dir + "/config.json", fs::copy_options::overwrite_existing);
  std::string b(8, '\0');
  put_le<uint64_t>(b, 0, odd_header.size());
  write_bytes(odd_dir + "/model.safetensors", b + odd_header + m.bytes.substr(8 + size_t(m.header_len)));
  auto odd = load_model(odd_dir);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(odd->tok_embd.data) % 2, 1u) << "the test needs an odd address";
  ASSERT_EQ(odd->tok_embd.dtype, DType::BF16);
  const int64_t d = aligned->config.d_model;
  std::vector<float> a(static_cast<size_t>(d)), o(static_cast<size_t>(d));
  for (int64_t r = 0; r < aligned->tok_embd.rows; r += 37) {
    dequantize_row(DType::BF16, aligned->tok_embd.row(r), a.data(), d);
    dequantize_row(DType::BF16, odd->tok_embd.row(r), o.data(), d);
    ASSERT_EQ(std::memcmp(a.data(), o.data(), size_t(d) * 4), 0) << "row " << r;
  }
  // Norm vectors were dequantized at load time from odd addresses too.
  ASSERT_EQ(odd->layers[0].attn_norm.dtype, DType::F32);
  EXPECT_EQ(std::memcmp(aligned->layers[0].attn_norm.data, odd->layers[0].attn_norm.data, size_t(d) * 4), 0);
}

TEST(HostileFiles, ConfigJsonNestedDeepAnyKeyIsOneLine) {
  StModel m;
  json base = m.config();
  base.erase("hidden_size");
  const std::string good = base.dump();
  // A known key and an unknown one: the parse refuses both before any key is read.
  for (const std::string& c : {replaced(good, "{", "{\"hidden_size\": " + deep(52000) + ", "),
                               replaced(good, "{", "{\"hidden_size\": 64, \"some_future_key\": " + deep(52000) + ", ")}) {
    write_bytes(m.dir + "/config.json", c);
    expect_short_error([&] { load_model(m.dir); }, {"config.json", "nested more than 32 levels deep"});
  }
  // Within the limit, a long bad value is quoted capped.
  std::string wide = "[";
  for (int i = 0; i < 100000; ++i) wide += i ? ",[1]" : "[1]";
  wide += "]";
  write_bytes(m.dir + "/config.json", replaced(good, "{", "{\"hidden_size\": " + wide + ", "));
  expect_short_error([&] { load_model(m.dir); },
                     {"config.json", "hidden_size", "expected an integer", "(an array of 100000 entries)"});
}

TEST(HostileFiles, OversizedConfigIsRefusedBeforeReading) {
  StModel m;
  write_bytes(m.dir + "/config.json", std::string(size_t(5) << 20, ' '));
  expect_short_error([&] { load_model(m.dir); }, {"config.json", "5242880 bytes, more than the limit of 4194304 bytes"});
}

TEST(HostileFiles, ConfigProductsAndHugeValuesAreReportedTruly) {
  StModel m;
  const json good = m.config();
  auto load_with = [&](const std::function<void(json&)>& edit) {
    json c = good;
    edit(c);
    write_bytes(m.dir + "/config.json", c.dump());
    return [&] { load_model(m.dir); };
  };
  // heads x head_dim above 2^31 (it overflowed int in q_dim()).
  expect_short_error(load_with([](json& c) {
                       c["num_attention_heads"] = 65536;
                       c["num_key_value_heads"] = 65536;
                       c["head_dim"] = 65536;
                     }),
                     {"num_attention_heads x head_dim = 65536 x 65536 = 4294967296", "exceeds 2^31-1"});
  expect_short_error(load_with([](json& c) {
                       c["hidden_size"] = 2000000000;
                       c["intermediate_size"] = 2000000000;
                     }),
                     {"more than 2^48"});
  // A value of 2^63 is printed as 2^63, not as a negative number.
  expect_short_error(load_with([](json& c) { c["hidden_size"] = uint64_t(1) << 63; }),
                     {"hidden_size' = 9223372036854775808", "out of range"});
  expect_short_error(load_with([](json& c) { c["eos_token_id"] = uint64_t(1) << 63; }),
                     {"eos_token_id' = 9223372036854775808"});
  // A float key beyond float's range (converting it was UB).
  expect_short_error(load_with([](json& c) { c["rms_norm_eps"] = 1e300; }), {"rms_norm_eps", "float range"});
}

// ---- tokenizer.json ----

std::string tiny_tokenizer_json(const std::string& pre_tokenizer) {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "pre_tokenizer": )" +
         pre_tokenizer + "}";
}

TEST(HostileFiles, TokenizerJsonNestedDeepIsOneLine) {
  const std::string byte_level = R"({"type": "ByteLevel"})";
  EXPECT_EQ(parse_tokenizer_json(tiny_tokenizer_json(byte_level)).size(), 3);
  // The probe's files: pre_tokenizer, post_processor and normalizer Sequences nested ~26k deep
  // (two brackets per level).
  auto seq = [](const char* type, const char* list, int depth, const std::string& leaf) {
    std::string s;
    for (int i = 0; i < depth; ++i) s += cat("{\"type\": \"", type, "\", \"", list, "\": [");
    s += leaf;
    for (int i = 0; i < depth; ++i) s += "]}";
    return s;
  };
  const std::string t = tiny_tokenizer_json(byte_level);
  for (const std::string& j : {tiny_tokenizer_json(seq("Sequence", "pretokenizers", 26000, byte_level)),
                               replaced(t, "\"pre_tokenizer\"", "\"post_processor\": " +
                                        seq("Sequence", "processors", 26000, "{}") + ", \"pre_tokenizer\""),
                               replaced(t, "\"pre_tokenizer\"", "\"normalizer\": " +
                                        seq("Sequence", "normalizers", 26000, "{}") + ", \"pre_tokenizer\"")})
    expect_short_error([&] { parse_tokenizer_json(j); }, {"tokenizer.json", "nested more than 64 levels deep"});
  // Within the parse limit, the walkers stop at their own depth with the field's name.
  expect_short_error([&] { parse_tokenizer_json(tiny_tokenizer_json(seq("Sequence", "pretokenizers", 20, byte_level))); },
                     {"pre_tokenizer Sequences nested more than 8 deep"});
  EXPECT_EQ(parse_tokenizer_json(tiny_tokenizer_json(seq("Sequence", "pretokenizers", 3, byte_level))).size(), 3);
  expect_short_error(
      [&] {
        parse_tokenizer_json(replaced(t, "\"pre_tokenizer\"", "\"post_processor\": " +
                                      seq("Sequence", "processors", 20, "{}") + ", \"pre_tokenizer\""));
      },
      {"post_processor Sequences nested more than 8 deep"});
  // A tokenizer_config.json nested deep is refused the same way.
  expect_short_error([&] { parse_tokenizer_json(t, "{\"bos_token\": " + deep(52000) + "}"); },
                     {"tokenizer_config.json", "nested more than 64 levels deep"});
}

TEST(HostileFiles, TokenizerErrorsQuoteCappedValues) {
  // An unsupported Spm normalizer holding a 1 MB value: the message was the whole value.
  std::string big = "[";
  for (int i = 0; i < 100000; ++i) big += i ? ",12345678" : "12345678";
  big += "]";
  const std::string spm = R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []},
      "normalizer": {"type": "Bogus", "payload": )" + big + "}}";
  expect_short_error([&] { parse_tokenizer_json(spm); }, {"unsupported normalizer", "(an object of 2 keys)"});
  const std::string re(300000, 'x');
  expect_short_error([&] {
    parse_tokenizer_json(tiny_tokenizer_json(R"({"type": "Split", "pattern": {"Regex": ")" + re + "\"}}"));
  }, {"unsupported pre_tokenizer Split regex", "300000 bytes"});
}

TEST(HostileFiles, TokenizerIdsAreBoundedBeforeSizing) {
  auto with_id = [](const std::string& id) {
    return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": )" + id +
           R"(}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})";
  };
  // The largest ids: reported with their true value (id + 1 overflowed for 2^63-1).
  expect_short_error([&] { parse_tokenizer_json(with_id("9223372036854775807")); },
                     {"model.vocab['b'] = 9223372036854775807", "outside [0, 16777216)"});
  expect_short_error([&] { parse_tokenizer_json(with_id("18446744073709551615")); },
                     {"= 18446744073709551615", "outside"});
  expect_short_error([&] { parse_tokenizer_json(with_id("-1")); }, {"= -1", "outside"});
  expect_short_error([&] { parse_tokenizer_json(with_id("1.5")); }, {"not an integer id: 1.5"});
  // With the model's vocabulary size, an id past it fails before anything is sized from it
  // (16,777,215 once cost 3.4 GB and 34 s before the vocabulary-size error).
  expect_short_error([&] { parse_tokenizer_json(with_id("16777215"), "", "tok.json", 512); },
                     {"tok.json", "= 16777215", "outside [0, 512)", "the model's vocab_size 512"});
  const std::string added = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "added_tokens": [{"id": 16777215, "content": "<x>"}], "pre_tokenizer": {"type": "ByteLevel"}})";
  expect_short_error([&] { parse_tokenizer_json(added, "", "tok.json", 512); },
                     {"added_tokens[0].id = 16777215", "outside [0, 512)"});
  expect_short_error([&] { parse_tokenizer_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}},
      "added_tokens": [{"id": [1]}], "pre_tokenizer": {"type": "ByteLevel"}})"); },
                     {"added_tokens[0]"});
}

TEST(HostileFiles, TokenizerJsonBesideAModelIsBoundedByItsVocabulary) {
  StModel m;  // vocab_size 512
  const std::string tj = read_bytes(m.dir + "/tokenizer.json");
  // One token with id 16,777,215 added to the model's own tokenizer.json.
  write_bytes(m.dir + "/tokenizer.json", replaced(tj, "\"added_tokens\": [", R"("added_tokens": [
    {"id": 16777215, "content": "<big>", "special": true}, )"));
  expect_short_error([&] { load_vocab(m.dir, ""); }, {"tokenizer.json", "16777215", "outside [0, 512)"});
}

}  // namespace
}  // namespace loom
