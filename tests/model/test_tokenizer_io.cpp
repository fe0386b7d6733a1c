// Vocabulary files: tokenizer.json write -> read round trips, reading the forms real files use
// (merges as "a b" and [a, b], TemplateProcessing BOS, tokenizer_config.json), and the
// synthetic vocabularies' invariants.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "model/tokenizer.h"
#include "model/vocab_io.h"
#include "test_tokenizer_ref.h"
#include "test_util.h"

namespace loom {
namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

TEST(VocabIo, TokenizerJsonRoundTripGivesIdenticalEncodings) {
  for (const char* pre : {"llama3", "qwen2", "gpt2"}) {
    const Vocab v = synth_bpe_vocab(4000, 5, pre);
    const std::string dir = test::temp_dir();
    write_text(dir + "/tokenizer.json", vocab_to_tokenizer_json(v));
    write_text(dir + "/tokenizer_config.json", vocab_to_tokenizer_config_json(v));
    const Vocab back = load_tokenizer_json(dir + "/tokenizer.json");
    EXPECT_EQ(back.kind, VocabKind::Bpe);
    EXPECT_EQ(back.pre, v.pre);
    EXPECT_EQ(back.tokens, v.tokens);
    EXPECT_EQ(back.merges, v.merges);
    EXPECT_EQ(back.types, v.types);
    EXPECT_EQ(back.bos_id, v.bos_id);
    EXPECT_EQ(back.eos_id, v.eos_id);
    EXPECT_EQ(back.add_bos, v.add_bos);
    EXPECT_EQ(back.ignore_merges, v.ignore_merges);
    auto a = Tokenizer::create(v);
    auto b = Tokenizer::create(back);
    Rng rng(77);
    for (int n : {1, 17, 97, 400}) {
      const std::string s = test::random_text(rng, n) + "<|im_start|><|eot_id|>";
      EXPECT_EQ(a->encode(s, true), b->encode(s, true)) << pre;
    }
    // Without tokenizer_config.json BOS comes from the post-processor template.
    const std::string dir2 = test::temp_dir();
    write_text(dir2 + "/tokenizer.json", vocab_to_tokenizer_json(v));
    const Vocab bare = load_tokenizer_json(dir2 + "/tokenizer.json");
    EXPECT_EQ(bare.add_bos, v.add_bos) << pre;
    if (v.add_bos) {
      EXPECT_EQ(bare.bos_id, v.bos_id) << pre;
    }
  }
}

TEST(VocabIo, TokenizerJsonWrittenIsWellFormedJson) {
  const Vocab v = synth_bpe_vocab(600, 9, "llama3");
  const auto j = nlohmann::json::parse(vocab_to_tokenizer_json(v));
  EXPECT_EQ(j["version"], "1.0");
  EXPECT_TRUE(j["truncation"].is_null());
  EXPECT_TRUE(j["padding"].is_null());
  EXPECT_TRUE(j["normalizer"].is_null());
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["type"], "Sequence");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"],
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  EXPECT_EQ(j["added_tokens"].size(), 5u);
  EXPECT_EQ(j["model"]["vocab"].size() + j["added_tokens"].size(), 600u);
  EXPECT_EQ(j["model"]["merges"].size(), v.merges.size());
  EXPECT_EQ(j["post_processor"]["type"], "TemplateProcessing");
  // Spm pieces are written with U+2581: a vocabulary holding both " a" and "\u2581a" cannot be.
  Vocab spm = synth_vocab(VocabKind::Spm, 300, 1);
  spm.tokens.push_back(" a");
  spm.tokens.push_back("\xE2\x96\x81" "a");
  spm.scores.resize(spm.tokens.size(), -1.0f);
  spm.types.resize(spm.tokens.size(), TokenType::Normal);
  EXPECT_THROW(vocab_to_tokenizer_json(spm), Error);
}

// A tokenizer.json in the shape of Llama-3's (trimmed to a few tokens by hand): array-form
// merges, BOS from TemplateProcessing inside a Sequence post-processor, ids of added tokens after
// the model vocab, and a tokenizer_config.json with the chat template.
TEST(VocabIo, ReadsRealFileShapes) {
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    std::string c;
    utf8_append(c, byte_to_unicode(uint8_t(b)));
    vocab += nlohmann::json(c).dump() + ": " + std::to_string(b) + ",";
  }
  vocab += "\"he\": 256, \"hel\": 257}";
  const std::string tj = R"({"version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [
      {"id": 258, "content": "<|begin_of_text|>", "special": true},
      {"id": 259, "content": "<|eot_id|>", "special": true},
      {"id": 260, "content": "<tool>", "special": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "post_processor": {"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [], "special_tokens": {}}]},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "ignore_merges": true, "byte_fallback": false,
      "vocab": )" + vocab + R"(, "merges": [["h", "e"], "he l"]}})";
  const std::string cfg = R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"},
    "chat_template": "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{% endfor %}"})";
  const Vocab v = parse_tokenizer_json(tj, cfg);
  EXPECT_EQ(v.size(), 261);
  EXPECT_EQ(v.pre, "llama3");
  EXPECT_EQ(v.merges, (std::vector<std::string>{"h e", "he l"}));
  EXPECT_EQ(v.bos_id, 258);
  EXPECT_EQ(v.eos_id, 259);
  EXPECT_TRUE(v.add_bos);
  EXPECT_TRUE(v.ignore_merges);
  EXPECT_EQ(v.types[258], TokenType::Control);
  EXPECT_EQ(v.types[260], TokenType::UserDefined);
  EXPECT_NE(v.chat_template.find("<|start_header_id|>"), std::string::npos);
  auto tok = Tokenizer::create(v);
  // "help": h e l p -> "he" (r0) -> "hel" (r1) -> hel p.
  EXPECT_EQ(tok->encode("help<tool>", true), (std::vector<int32_t>{258, 257, 'p', 260}));
  // A non-special added token decodes to its text; a special one to "".
  EXPECT_EQ(tok->decode({258, 257, 'p', 260, 259}), "help<tool>");
  EXPECT_TRUE(tok->is_eog(259));

  // Malformed input is a loom::Error naming the problem, never a crash.
  EXPECT_THROW(parse_tokenizer_json("{not json"), Error);
  EXPECT_THROW(parse_tokenizer_json(R"({"model": {"type": "Unigram", "vocab": []}})"), Error);
  std::string bad_re = tj;
  bad_re.replace(bad_re.find("\\\\p{N}{1,3}"), 11, "\\\\d+");
  EXPECT_THROW(parse_tokenizer_json(bad_re), Error);
  EXPECT_THROW(load_tokenizer_json(test::temp_dir() + "/nope.json"), Error);
}

TEST(SynthVocab, BpeInvariants) {
  for (int size : {261, 262, 300, 1000, 32000}) {
    for (const char* pre : {"llama3", "qwen2", "gpt2"}) {
      const Vocab v = synth_bpe_vocab(size, 42, pre);
      ASSERT_EQ(v.size(), size) << pre;
      std::set<std::string> uniq(v.tokens.begin(), v.tokens.end());
      EXPECT_EQ(int(uniq.size()), size) << "pieces must be unique";
      int n_control = 0;
      for (auto t : v.types) n_control += t == TokenType::Control;
      EXPECT_EQ(int(v.merges.size()), size - 256 - n_control) << "one merge per non-byte, non-special token";
      std::set<std::string> seen;
      for (int b = 0; b < 256; ++b) seen.insert(v.tokens[size_t(b)]);
      for (size_t r = 0; r < v.merges.size(); ++r) {
        const std::string& m = v.merges[r];
        const size_t sp = m.find(' ');
        ASSERT_NE(sp, std::string::npos);
        const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
        // Parts exist before the merge, and the result is the next token.
        EXPECT_TRUE(seen.count(a) && seen.count(b)) << m;
        EXPECT_EQ(v.tokens[256 + r], a + b);
        seen.insert(a + b);
      }
      EXPECT_GE(v.bos_id, 0);
      EXPECT_GE(v.eos_id, 0);
      EXPECT_EQ(v.types[size_t(v.eos_id)], TokenType::Control);
    }
  }
  EXPECT_THROW(synth_bpe_vocab(260, 1, "llama3"), Error);
  EXPECT_THROW(synth_vocab(VocabKind::Spm, 258, 1), Error);
}

TEST(SynthVocab, DeterministicAndSeeded) {
  EXPECT_EQ(synth_vocab(VocabKind::Bpe, 5000, 3).tokens, synth_vocab(VocabKind::Bpe, 5000, 3).tokens);
  EXPECT_EQ(synth_vocab(VocabKind::Bpe, 5000, 3).merges, synth_vocab(VocabKind::Bpe, 5000, 3).merges);
  EXPECT_NE(synth_vocab(VocabKind::Bpe, 5000, 3).tokens, synth_vocab(VocabKind::Bpe, 5000, 4).tokens);
  const Vocab a = synth_vocab(VocabKind::Spm, 3000, 8), b = synth_vocab(VocabKind::Spm, 3000, 8);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.scores, b.scores);
  EXPECT_NE(a.tokens, synth_vocab(VocabKind::Spm, 3000, 9).tokens);
  // Spm layout: <unk>, <s>, </s>, <0x00>..<0xFF>, then unique pieces.
  EXPECT_EQ(a.tokens[0], "<unk>");
  EXPECT_EQ(a.tokens[1], "<s>");
  EXPECT_EQ(a.tokens[2], "</s>");
  EXPECT_EQ(a.tokens[3], "<0x00>");
  EXPECT_EQ(a.tokens[258], "<0xFF>");
  EXPECT_EQ(std::set<std::string>(a.tokens.begin(), a.tokens.end()).size(), a.tokens.size());
  EXPECT_EQ(a.size(), 3000);
}

TEST(SynthVocab, Qwen2SizedVocabIsFast) {
  const auto t0 = std::chrono::steady_clock::now();
  const Vocab v = synth_bpe_vocab(151936, 1, "qwen2");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(v.size(), 151936);
  EXPECT_EQ(v.tokens[size_t(v.eos_id)], "<|im_end|>");
  auto tok = Tokenizer::create(v);
  const std::string s = "Hello, world! 12345 \xF0\x9F\x91\x8B";
  EXPECT_EQ(tok->decode(tok->encode(s, false)), s);
  RecordProperty("synth_151936_ms", int(ms));
  std::printf("synth_bpe_vocab(151936): %.0f ms\n", ms);
}

}  // namespace
}  // namespace loom
