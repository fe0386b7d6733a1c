// SentencePiece vocabularies as HF tokenizer.json (the layout HF's LlamaConverter writes for
// Llama-2): Spm vocab -> tokenizer.json -> Vocab encodes identically; the file's BPE, run the
// way HF's BPE model runs it (naive reference below: lowest merge rank first, byte fallback),
// gives loom's ids; stories260K's tok512 converted and read back encodes the reference prompts;
// a hand-written Llama-2-style file parses as worked out by hand.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/tokenizer.h"
#include "model/vocab_io.h"
#include "test_tokenizer_ref.h"
#include "test_util.h"

namespace loom {
namespace {

const std::string kMarker = "\xE2\x96\x81";  // U+2581

// HF tokenizers' BPE model with byte_fallback over one normalised string, transcribed as the
// textbook algorithm from the tokenizer.json alone: the normaliser (Prepend "▁" when
// prepend, ' ' -> "▁"), one symbol per code point (its vocab id, else "<0xAB>" per byte, else
// unk), then repeatedly apply the merge of lowest rank among adjacent pairs, leftmost on ties.
// BOS from the post-processor template when add_bos. No added-token matching (texts here hold
// none).
std::vector<int32_t> naive_hf_bpe_encode(const nlohmann::json& j, const std::string& text, bool add_bos) {
  const auto& model = j["model"];
  std::map<std::string, int32_t> vocab;
  for (const auto& [k, v] : model["vocab"].items()) vocab[k] = v.get<int32_t>();
  std::map<std::pair<int32_t, int32_t>, int> rank;
  int r = 0;
  for (const auto& m : model["merges"]) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    rank.emplace(std::make_pair(vocab.at(s.substr(0, sp)), vocab.at(s.substr(sp + 1))), r++);
  }
  bool prepend = false;
  for (const auto& n : j["normalizer"]["normalizers"])
    if (n["type"] == "Prepend") prepend = true;
  std::vector<int32_t> out;
  if (add_bos && j["post_processor"].is_object())
    out.push_back(vocab.at(j["post_processor"]["single"][0]["SpecialToken"]["id"].get<std::string>()));
  if (text.empty()) return out;
  std::string s = prepend ? kMarker : "";
  for (char c : text) s += c == ' ' ? kMarker : std::string(1, c);
  std::vector<int32_t> sym;
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    utf8_decode(s, i, &len);
    auto it = vocab.find(s.substr(i, size_t(len)));
    if (it != vocab.end()) {
      sym.push_back(it->second);
    } else {
      for (int k = 0; k < len; ++k) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", unsigned(static_cast<unsigned char>(s[i + size_t(k)])));
        sym.push_back(vocab.at(name));
      }
    }
    i += size_t(len);
  }
  std::map<int32_t, std::string> piece;
  for (const auto& [k, v] : vocab) piece[v] = k;
  for (;;) {
    int best = -1, best_rank = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = rank.find({sym[i], sym[i + 1]});
      if (it != rank.end() && (best < 0 || it->second < best_rank)) {
        best = int(i);
        best_rank = it->second;
      }
    }
    if (best < 0) break;
    sym[size_t(best)] = vocab.at(piece[sym[size_t(best)]] + piece[sym[size_t(best) + 1]]);
    sym.erase(sym.begin() + best + 1);
  }
  out.insert(out.end(), sym.begin(), sym.end());
  return out;
}

// Texts with spaces (leading, runs), newlines, tabs and code points the vocabulary lacks
// (byte fallback): random ones plus fixed awkward cases.
std::vector<std::string> texts(uint64_t seed, int n_random) {
  std::vector<std::string> t = {"", " ", "  ", "a", "\n", "Once upon a time", " leading space",
                                "trailing  ", "tabs\tand\nnewlines\n\n", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80",
                                "The total was 42.50 dollars."};
  Rng rng(seed);
  for (int i = 0; i < n_random; ++i) t.push_back(test::random_text(rng, 1 + int(rng.below(97))));
  return t;
}

TEST(TokenizerSpmJson, SynthSpmRoundTripEncodesIdentically) {
  for (int size : {259, 300, 512, 2048}) {
    const Vocab v = synth_vocab(VocabKind::Spm, size, 11);
    const std::string tj = vocab_to_tokenizer_json(v);
    const Vocab back = parse_tokenizer_json(tj, vocab_to_tokenizer_config_json(v));
    EXPECT_EQ(back.kind, VocabKind::Spm);
    EXPECT_EQ(back.tokens, v.tokens) << size;
    EXPECT_EQ(back.types, v.types) << size;
    EXPECT_EQ(back.bos_id, v.bos_id);
    EXPECT_EQ(back.eos_id, v.eos_id);
    EXPECT_EQ(back.unk_id, v.unk_id);
    EXPECT_TRUE(back.add_bos);
    EXPECT_TRUE(back.add_space_prefix);
    auto a = Tokenizer::create(v);
    auto b = Tokenizer::create(back);
    for (const std::string& s : texts(uint64_t(size), 60)) {
      EXPECT_EQ(b->encode(s, true), a->encode(s, true)) << "size " << size << " text '" << s << "'";
      EXPECT_EQ(b->decode(b->encode(s, false)), a->decode(a->encode(s, false)));
    }
    // Written again from the read-back vocabulary: the same merges in the same order.
    EXPECT_EQ(nlohmann::json::parse(vocab_to_tokenizer_json(back))["model"]["merges"],
              nlohmann::json::parse(tj)["model"]["merges"]);
  }
}

TEST(TokenizerSpmJson, HfBpeOnTheWrittenFileGivesLoomIds) {
  const Vocab v = synth_vocab(VocabKind::Spm, 512, 3);
  const auto j = nlohmann::json::parse(vocab_to_tokenizer_json(v));
  auto tok = Tokenizer::create(v);
  for (const std::string& s : texts(5, 60))
    EXPECT_EQ(naive_hf_bpe_encode(j, s, true), tok->encode(s, true)) << "text '" << s << "'";
}

TEST(TokenizerSpmJson, WrittenLayoutIsLlama2s) {
  Vocab v = synth_vocab(VocabKind::Spm, 300, 1);
  const auto j = nlohmann::json::parse(vocab_to_tokenizer_json(v));
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["byte_fallback"], true);
  EXPECT_EQ(j["model"]["fuse_unk"], true);
  EXPECT_EQ(j["model"]["unk_token"], "<unk>");
  EXPECT_TRUE(j["model"]["dropout"].is_null());
  EXPECT_EQ(j["model"]["vocab"].size(), 300u);
  EXPECT_EQ(j["model"]["vocab"]["<0x41>"], 3 + 0x41);
  EXPECT_EQ(j["normalizer"]["normalizers"][0]["type"], "Prepend");
  EXPECT_EQ(j["normalizer"]["normalizers"][0]["prepend"], kMarker);
  EXPECT_EQ(j["normalizer"]["normalizers"][1]["type"], "Replace");
  EXPECT_EQ(j["normalizer"]["normalizers"][1]["pattern"]["String"], " ");
  EXPECT_TRUE(j["pre_tokenizer"].is_null());
  EXPECT_EQ(j["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");
  const auto& dec = j["decoder"]["decoders"];
  ASSERT_EQ(dec.size(), 4u);
  EXPECT_EQ(dec[1]["type"], "ByteFallback");
  EXPECT_EQ(dec[2]["type"], "Fuse");
  EXPECT_EQ(dec[3]["type"], "Strip");
  ASSERT_EQ(j["added_tokens"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["added_tokens"][i]["id"], i);
    EXPECT_EQ(j["added_tokens"][i]["special"], true);
  }
  // Every merge "a b": a, b and a+b are vocabulary pieces; scores never increase along them.
  float prev = 1e30f;
  const auto& voc = j["model"]["vocab"];
  for (const auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    ASSERT_NE(sp, std::string::npos);
    const std::string a = s.substr(0, sp), b = s.substr(sp + 1);
    ASSERT_TRUE(voc.contains(a) && voc.contains(b) && voc.contains(a + b)) << s;
    const float score = v.scores[voc[a + b].get<size_t>()];
    EXPECT_LE(score, prev) << s;
    prev = score;
  }
  // Without add_bos / add_space_prefix: no template, a Replace-only normaliser.
  v.add_bos = false;
  v.add_space_prefix = false;
  const auto k = nlohmann::json::parse(vocab_to_tokenizer_json(v));
  EXPECT_TRUE(k["post_processor"].is_null());
  EXPECT_EQ(k["normalizer"]["type"], "Replace");
  const Vocab back = parse_tokenizer_json(k.dump());
  EXPECT_FALSE(back.add_bos);
  EXPECT_FALSE(back.add_space_prefix);
}

TEST(TokenizerSpmJson, Stories260KTok512ThroughTokenizerJsonEncodesReferencePrompts) {
  LOOM_REQUIRE_SHARED();
  const Vocab v = load_llama2c_vocab(test::stories_dir() + "/tok512.bin", 512);
  const std::string dir = test::temp_dir();
  {
    std::ofstream(dir + "/tokenizer.json") << vocab_to_tokenizer_json(v);
    std::ofstream(dir + "/tokenizer_config.json") << vocab_to_tokenizer_config_json(v);
  }
  const Vocab back = load_tokenizer_json(dir + "/tokenizer.json");
  EXPECT_EQ(back.kind, VocabKind::Spm);
  ASSERT_EQ(back.size(), 512);
  EXPECT_EQ(back.bos_id, 1);
  EXPECT_EQ(back.eos_id, 2);
  EXPECT_EQ(back.tokens[1], v.tokens[1]);  // llama2.c's BOS piece is "\n<s>\n"
  for (int i = 0; i < 512; ++i) {  // pieces come back with ' ' spelled U+2581
    std::string want;
    for (char c : v.tokens[size_t(i)]) want += c == ' ' ? kMarker : std::string(1, c);
    EXPECT_EQ(back.tokens[size_t(i)], want) << i;
  }
  auto tok = Tokenizer::create(back);
  std::ifstream f(test::stories_dir() + "/reference_greedy.jsonl");
  ASSERT_TRUE(f.good());
  int lines = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    const auto r = nlohmann::json::parse(line);
    const std::string prompt = r["prompt"];
    EXPECT_EQ(tok->encode(prompt, true), r["prompt_tokens"].get<std::vector<int32_t>>()) << prompt;
    ++lines;
  }
  EXPECT_GE(lines, 3);
}

// A tokenizer.json shaped like Llama-2's (HF LlamaConverter), trimmed by hand to a few pieces.
// The merge order deliberately differs from piece-id order so the score mapping matters.
std::string llama2_style_json(const std::string& byte_pieces) {
  return R"({"version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [
      {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
      "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true,
      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, )" + byte_pieces + R"(
        "▁": 259, "h": 260, "e": 261, "l": 262, "o": 263, "▁h": 264, "ll": 265, "▁he": 266, "llo": 267, "▁hello": 268, "lo": 269},
      "merges": ["▁ h", "l l", "▁h e", "l o", "ll o", "▁he llo"]}})";
}

TEST(TokenizerSpmJson, ReadsHandWrittenLlama2StyleFile) {
  std::string bytes;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    bytes += cat("\"", name, "\": ", 3 + b, ", ");
  }
  const std::string tj = llama2_style_json(bytes);
  const Vocab v = parse_tokenizer_json(tj);
  EXPECT_EQ(v.kind, VocabKind::Spm);
  ASSERT_EQ(v.size(), 270);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.unk_id, 0);
  EXPECT_TRUE(v.add_bos);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.types[0], TokenType::Unknown);
  EXPECT_EQ(v.types[1], TokenType::Control);
  EXPECT_EQ(v.types[3 + 'A'], TokenType::Byte);
  EXPECT_EQ(v.types[264], TokenType::Normal);
  // Scores: -(rank of the first merge producing the piece).
  EXPECT_FLOAT_EQ(v.scores[264], 0.0f);   // ▁h
  EXPECT_FLOAT_EQ(v.scores[265], -1.0f);  // ll
  EXPECT_FLOAT_EQ(v.scores[266], -2.0f);  // ▁he
  EXPECT_FLOAT_EQ(v.scores[269], -3.0f);  // lo
  EXPECT_FLOAT_EQ(v.scores[267], -4.0f);  // llo
  EXPECT_FLOAT_EQ(v.scores[268], -5.0f);  // ▁hello
  EXPECT_LT(v.scores[260], -5.0f);        // h: no merge produces it
  auto tok = Tokenizer::create(v);
  // "hello": ▁ h e l l o -> ▁h (r0) -> ll (r1) -> ▁he (r2) -> llo (r4; "l o" never forms)
  // -> ▁hello (r5).
  EXPECT_EQ(tok->encode("hello", true), (std::vector<int32_t>{1, 268}));
  // "hel lo": ▁he l ▁ lo; "Hé": ▁ then H and é by byte fallback (0x48; 0xC3 0xA9).
  EXPECT_EQ(tok->encode("hel lo", false), (std::vector<int32_t>{266, 262, 259, 269}));
  EXPECT_EQ(tok->encode("H\xC3\xA9", false), (std::vector<int32_t>{259, 3 + 0x48, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->decode({1, 268, 259, 3 + 0xC3, 3 + 0xA9}), "hello \xC3\xA9");
  // The naive HF-BPE reference agrees on the same file.
  const auto j = nlohmann::json::parse(tj);
  for (const char* s : {"hello", "hel lo", "H\xC3\xA9", "ohell hello  llo"})
    EXPECT_EQ(tok->encode(s, true), naive_hf_bpe_encode(j, s, true)) << s;

  // A Metaspace pre-tokenizer (later converters) in place of the normaliser reads the same.
  auto k = j;
  k["normalizer"] = nullptr;
  k["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMarker}, {"prepend_scheme", "always"}, {"split", false}};
  const Vocab m = parse_tokenizer_json(k.dump());
  EXPECT_TRUE(m.add_space_prefix);
  EXPECT_EQ(Tokenizer::create(m)->encode("hel lo", false), (std::vector<int32_t>{266, 262, 259, 269}));

  // Unsupported shapes are errors naming them.
  auto bad = j;
  bad["normalizer"]["normalizers"][0] = {{"type", "NFKC"}};
  EXPECT_THROW(parse_tokenizer_json(bad.dump()), Error);
  bad = j;
  bad["normalizer"] = nullptr;
  EXPECT_THROW(parse_tokenizer_json(bad.dump()), Error);  // nothing maps ' ' to ▁
  bad = j;
  bad["model"]["merges"].push_back("▁hello x");
  EXPECT_THROW(parse_tokenizer_json(bad.dump()), Error);
  k["pre_tokenizer"]["split"] = true;
  EXPECT_THROW(parse_tokenizer_json(k.dump()), Error);
}

}  // namespace
}  // namespace loom
