// Byte-level BPE: the pre-tokenizers on hand-checked splits, a hand-built vocabulary whose
// encodings are worked out by hand, special tokens in text, and the heap-based encoder against
// the naive merge loop (test_tokenizer_ref.h) plus decode(encode(s)) == s on random UTF-8.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/bpe_pretokenize.h"
#include "model/tokenizer.h"
#include "model/vocab_io.h"
#include "test_tokenizer_ref.h"

namespace loom {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(const std::string& s, PreTokenizer p) {
  Pieces out;
  for (auto v : pretokenize(s, p)) out.emplace_back(v);
  return out;
}

// Expected splits derived by hand from the regexes quoted in bpe_pretokenize.h (alternatives
// tried in order at each position).
TEST(BpePretokenize, Llama3HandChecked) {
  const auto L = PreTokenizer::Llama3;
  EXPECT_EQ(split("Hello world", L), (Pieces{"Hello", " world"}));
  // Contractions are their own pre-token, case-insensitively.
  EXPECT_EQ(split("I'm here", L), (Pieces{"I", "'m", " here"}));
  EXPECT_EQ(split("THEY'RE we'll", L), (Pieces{"THEY", "'RE", " we", "'ll"}));
  // Digits in groups of at most three, never joined to letters or a space.
  EXPECT_EQ(split("12345", L), (Pieces{"123", "45"}));
  EXPECT_EQ(split("a1234 56", L), (Pieces{"a", "123", "4", " ", "56"}));
  // A space run before a word: all but the last space, then " word" (\s+(?!\S)).
  EXPECT_EQ(split("a   b", L), (Pieces{"a", "  ", " b"}));
  // Trailing whitespace stays one piece.
  EXPECT_EQ(split("hi  ", L), (Pieces{"hi", "  "}));
  // Newline runs: \s*[\r\n]+ takes spaces up to the last newline of the run.
  EXPECT_EQ(split("a\n\nb", L), (Pieces{"a", "\n\n", "b"}));
  EXPECT_EQ(split("a \n b", L), (Pieces{"a", " \n", " b"}));
  // Punctuation takes one optional leading space and trailing newlines.
  EXPECT_EQ(split("Hi!!! ok", L), (Pieces{"Hi", "!!!", " ok"}));
  EXPECT_EQ(split("x?\n\ny", L), (Pieces{"x", "?\n\n", "y"}));
  // One non-letter, non-digit, non-newline char may lead a word.
  EXPECT_EQ(split("!hello", L), (Pieces{"!hello"}));
  // Other scripts: Cyrillic, CJK, Latin with diacritics are letters.
  EXPECT_EQ(split("Привет мир", L), (Pieces{"Привет", " мир"}));
  EXPECT_EQ(split("日本語テキスト", L), (Pieces{"日本語テキスト"}));
  EXPECT_EQ(split("naïve café", L), (Pieces{"naïve", " café"}));
  // Devanagari vowel signs and virama are marks (\p{M}), not letters: न म स | ्त | े
  EXPECT_EQ(split("नमस्ते", L), (Pieces{"नमस", "्त", "े"}));
  // Emoji are "other": a space joins them.
  EXPECT_EQ(split("hi 👋👋", L), (Pieces{"hi", " 👋👋"}));
  // ½ and Ⅻ are \p{N} (No, Nl).
  EXPECT_EQ(split("½Ⅻ7", L), (Pieces{"½Ⅻ7"}));
  EXPECT_EQ(split("", L), (Pieces{}));
}

TEST(BpePretokenize, Qwen2SingleDigits) {
  const auto Q = PreTokenizer::Qwen2;
  EXPECT_EQ(split("12345", Q), (Pieces{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("I'M 42", Q), (Pieces{"I", "'M", " ", "4", "2"}));
}

TEST(BpePretokenize, Gpt2HandChecked) {
  const auto G = PreTokenizer::Gpt2;
  EXPECT_EQ(split("Hello world", G), (Pieces{"Hello", " world"}));
  // Contractions are case-sensitive: "'RE" is "'" then "RE".
  EXPECT_EQ(split("they're THEY'RE", G), (Pieces{"they", "'re", " THEY", "'", "RE"}));
  // Digits are one run, with an optional leading space.
  EXPECT_EQ(split("12345 678", G), (Pieces{"12345", " 678"}));
  // Only a space (not other punctuation) joins a word.
  EXPECT_EQ(split("!hello", G), (Pieces{"!", "hello"}));
  EXPECT_EQ(split("a   b", G), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(split("a\n\nb", G), (Pieces{"a", "\n", "\n", "b"}));  // \s+(?!\S) then \s+
  EXPECT_EQ(split("hi  ", G), (Pieces{"hi", "  "}));
}

TEST(BpePretokenize, PiecesConcatenateToInput) {
  Rng rng(3);
  for (PreTokenizer p : {PreTokenizer::Gpt2, PreTokenizer::Llama3, PreTokenizer::Qwen2})
    for (int n : {1, 7, 97, 1000}) {
      std::string s = test::random_text(rng, n);
      s += "\xFF\xC3";  // invalid UTF-8 bytes also land in exactly one piece each
      std::string joined;
      for (auto v : pretokenize(s, p)) {
        EXPECT_FALSE(v.empty());
        joined += v;
      }
      EXPECT_EQ(joined, s);
    }
}

TEST(BpePretokenize, ByteAlphabet) {
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_unicode('A'), uint32_t('A'));
  EXPECT_EQ(byte_to_unicode(0xAD), 0x143u);  // the last of the 68 remapped bytes
  for (int b = 0; b < 256; ++b) EXPECT_EQ(unicode_to_byte(byte_to_unicode(uint8_t(b))), b);
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  EXPECT_EQ(bpe_alphabet_to_bytes(bytes_to_bpe_alphabet(all)), all);
}

// Hand-built byte-level vocabulary (GPT-2 pre-tokenizer): ids 0..255 are the bytes (id = byte
// value), then merges in rank order, each result a new token:
//   r0 "h e"->256 "he"   r1 "l l"->257 "ll"   r2 "Ġ h"->258 "Ġh"   r3 "he ll"->259 "hell"
//   r4 "Ġh e"->260 "Ġhe" r5 "hell o"->261 "hello"  r6 "Ġhe ll"->262 "Ġhell"
//   r7 "Ġhell o"->263 "Ġhello"  r8 "b c"->264 "bc"  r9 "a b"->265 "ab"
// and 266 "<|eot_id|>" (special).
Vocab hand_bpe() {
  Vocab v;
  v.kind = VocabKind::Bpe;
  v.pre = "gpt2";
  for (int b = 0; b < 256; ++b) {
    std::string c;
    utf8_append(c, byte_to_unicode(uint8_t(b)));
    v.tokens.push_back(c);
  }
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"Ġ", "h"}, {"he", "ll"}, {"Ġh", "e"}, {"hell", "o"},
      {"Ġhe", "ll"}, {"Ġhell", "o"}, {"b", "c"}, {"a", "b"}};
  for (const auto& [a, b] : merges) {
    v.merges.push_back(a + " " + b);
    v.tokens.push_back(a + b);
  }
  v.tokens.push_back("<|eot_id|>");
  v.types.assign(v.tokens.size(), TokenType::Normal);
  v.types.back() = TokenType::Control;
  v.eos_id = 266;
  v.add_bos = false;
  return v;
}

TEST(TokenizerBpe, HandBuiltVocabByRank) {
  auto tok = Tokenizer::create(hand_bpe());
  // "hello hello" -> pre-tokens "hello", " hello".
  // "hello": h e l l o; lowest rank r0 "he" -> he l l o; r1 "ll" -> he ll o; r3 "hell" ->
  //   hell o; r5 -> "hello" (261).
  // " hello": Ġ h e l l o; r0 "he" beats r2 "Ġh" -> Ġ he l l o; "Ġ he" is no merge, so "Ġhe"
  //   (r4) can never form; r1, r3, r5 as before -> Ġ hello -> ids 32 (' '), 261.
  EXPECT_EQ(tok->encode("hello hello", false), (std::vector<int32_t>{261, 32, 261}));
  // "abc": r8 "bc" ranks before r9 "ab" -> a bc -> ids 97, 264.
  EXPECT_EQ(tok->encode("abc", false), (std::vector<int32_t>{97, 264}));
  // Bytes with no merges stay byte tokens: "é" = C3 A9.
  EXPECT_EQ(tok->encode("\xC3\xA9", false), (std::vector<int32_t>{0xC3, 0xA9}));
  // The special token in text is matched before pre-tokenisation.
  EXPECT_EQ(tok->encode("hello<|eot_id|>abc", false), (std::vector<int32_t>{261, 266, 97, 264}));
  // Without special parsing: "hello", then pre-tokens "<|", "eot", "_", "id", "|>" whose bytes
  // have no merges.
  EXPECT_EQ(tok->encode("hello<|eot_id|>", false, /*parse_special=*/false),
            (std::vector<int32_t>{261, '<', '|', 'e', 'o', 't', '_', 'i', 'd', '|', '>'}));
  EXPECT_TRUE(tok->is_eog(266));
  EXPECT_EQ(tok->decode({261, 32, 261, 266, 97, 264}), "hello helloabc");  // control -> ""
  EXPECT_EQ(tok->token_id("Ġhello"), 263);

  // ignore_merges (Llama-3): a pre-token that is a whole token is emitted as it is.
  Vocab im = hand_bpe();
  im.ignore_merges = true;
  auto tok2 = Tokenizer::create(im);
  EXPECT_EQ(tok2->encode("hello hello", false), (std::vector<int32_t>{261, 263}));
}

TEST(TokenizerBpe, InvalidMergesAreUserErrors) {
  Vocab v = hand_bpe();
  v.merges.push_back("x yz");  // "yz" is no token
  EXPECT_THROW(Tokenizer::create(v), Error);
  Vocab w = hand_bpe();
  w.bos_id = 1000;
  EXPECT_THROW(Tokenizer::create(w), Error);
  Vocab u = hand_bpe();
  u.pre = "bloom";
  EXPECT_THROW(Tokenizer::create(u), Error);
}

TEST(TokenizerBpe, MatchesNaiveAndRoundTripsRandomUtf8) {
  for (const char* pre : {"llama3", "qwen2", "gpt2"}) {
    const Vocab v = synth_bpe_vocab(3000, 17, pre);
    auto tok = Tokenizer::create(v);
    Rng rng(101);
    for (int n : {0, 1, 7, 17, 97, 500}) {
      for (int rep = 0; rep < 4; ++rep) {
        const std::string s = test::random_text(rng, n);
        const auto ids = tok->encode(s, false, /*parse_special=*/false);
        EXPECT_EQ(ids, test::naive_bpe_encode(v, s)) << pre << " n=" << n;
        EXPECT_EQ(tok->decode(ids), s) << pre;
        // With BOS (Llama-3 adds one), decoding still gives the text: BOS decodes to "".
        EXPECT_EQ(tok->decode(tok->encode(s, true)), s) << pre;
      }
    }
    // Invalid UTF-8 survives the byte-level round trip too.
    const std::string bad = "ok\xFF\xC3(\xE2\x82";
    EXPECT_EQ(tok->decode(tok->encode(bad, false)), bad);
  }
}

TEST(TokenizerBpe, SpecialTokensInText) {
  const Vocab v = synth_bpe_vocab(1000, 1, "llama3");
  auto tok = Tokenizer::create(v);
  const int32_t bot = tok->token_id("<|begin_of_text|>");
  const int32_t eot = tok->token_id("<|eot_id|>");
  const int32_t sh = tok->token_id("<|start_header_id|>");
  const int32_t eh = tok->token_id("<|end_header_id|>");
  ASSERT_GE(bot, 0);
  ASSERT_EQ(tok->bos_id(), bot);
  EXPECT_TRUE(tok->is_eog(eot));
  EXPECT_TRUE(tok->is_eog(tok->eos_id()));
  std::vector<int32_t> want = {bot, sh};
  for (int32_t t : tok->encode("user", false)) want.push_back(t);
  want.push_back(eh);
  for (int32_t t : tok->encode("\n\nHi there", false)) want.push_back(t);
  want.push_back(eot);
  EXPECT_EQ(tok->encode("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>", false), want);
  // add_bos puts BOS in front; a BOS written in the text stays a second BOS (as HF does).
  EXPECT_EQ(tok->encode("<|begin_of_text|>", true), (std::vector<int32_t>{bot, bot}));
  // Specials decode to "" (they are control tokens).
  EXPECT_EQ(tok->decode(want), "user\n\nHi there");
  // Without special parsing none of their ids appears.
  for (int32_t id : tok->encode("<|begin_of_text|><|eot_id|>", false, false)) {
    EXPECT_NE(id, bot);
    EXPECT_NE(id, eot);
  }
}

TEST(TokenizerBpe, LongInputIsNotQuadratic) {
  const Vocab v = synth_bpe_vocab(5000, 2, "llama3");
  auto tok = Tokenizer::create(v);
  // One 200 KB pre-token (a run of letters with no space) and a long mixed text.
  const std::string word(200000, 'e');
  EXPECT_TRUE(tok->decode(tok->encode(word, false)) == word);
  Rng rng(9);
  std::string s;
  while (s.size() < 300000) s += test::random_text(rng, 64);
  EXPECT_TRUE(tok->decode(tok->encode(s, false)) == s);
}

}  // namespace
}  // namespace loom
