// Naive reference encoders for the tokenizer tests: the textbook quadratic algorithms, written
// for clarity, against which the O(n log n) priority-queue encoders of src/model/tokenizer.cpp
// are compared. Plus a random UTF-8 text generator.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/rng.h"
#include "model/bpe_pretokenize.h"
#include "model/vocab.h"

namespace loom::test {

// llama2.c's encode (run.c), transcribed as an algorithm: BOS, dummy-prefix " ", one token per
// code point or byte tokens "<0xAB>", then repeatedly merge the adjacent pair whose
// concatenation is a piece with the highest score (first such pair on ties, strict >).
// marker: the word marker the vocabulary spells (" " or U+2581).
inline std::vector<int32_t> naive_spm_encode(const Vocab& v, const std::string& text, bool add_bos,
                                             const std::string& marker = " ") {
  std::unordered_map<std::string, int32_t> id;
  for (int32_t i = int32_t(v.tokens.size()) - 1; i >= 0; --i) id[v.tokens[size_t(i)]] = i;
  auto lookup = [&](const std::string& s) {
    auto it = id.find(s);
    return it == id.end() ? -1 : it->second;
  };
  std::vector<int32_t> out;
  if (add_bos) out.push_back(v.bos_id);
  std::string s = text;
  if (!s.empty() && v.add_space_prefix) s = " " + s;
  std::string t;
  for (char c : s) t += c == ' ' ? marker : std::string(1, c);
  std::vector<int32_t> toks;
  for (size_t i = 0; i < t.size();) {
    int len = 1;
    utf8_decode(t, i, &len);
    const int32_t tok = lookup(t.substr(i, size_t(len)));
    if (tok >= 0) {
      toks.push_back(tok);
    } else {
      for (int k = 0; k < len; ++k) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(t[i + size_t(k)]));
        toks.push_back(lookup(name));
      }
    }
    i += size_t(len);
  }
  while (true) {
    float best_score = -1e10f;
    int best_id = -1, best_idx = -1;
    for (size_t i = 0; i + 1 < toks.size(); ++i) {
      const int32_t m = lookup(v.tokens[size_t(toks[i])] + v.tokens[size_t(toks[i + 1])]);
      if (m != -1 && v.scores[size_t(m)] > best_score) {
        best_score = v.scores[size_t(m)];
        best_id = m;
        best_idx = int(i);
      }
    }
    if (best_idx == -1) break;
    toks[size_t(best_idx)] = best_id;
    toks.erase(toks.begin() + best_idx + 1);
  }
  out.insert(out.end(), toks.begin(), toks.end());
  return out;
}

// Byte-level BPE by ranks: per pre-token, map bytes to the GPT-2 alphabet, then repeatedly merge
// the leftmost occurrence of the lowest-ranked adjacent pair (HF tokenizers' BPE::merge_word).
// No special-token parsing.
inline std::vector<int32_t> naive_bpe_encode(const Vocab& v, const std::string& text) {
  std::unordered_map<std::string, int32_t> id;
  for (int32_t i = int32_t(v.tokens.size()) - 1; i >= 0; --i) id[v.tokens[size_t(i)]] = i;
  std::unordered_map<std::string, size_t> rank;
  for (size_t r = 0; r < v.merges.size(); ++r) rank.emplace(v.merges[r], r);
  std::vector<int32_t> out;
  for (std::string_view w : pretokenize(text, pre_tokenizer_from_name(v.pre))) {
    const std::string mapped = bytes_to_bpe_alphabet(w);
    if (v.ignore_merges && id.count(mapped)) {
      out.push_back(id.at(mapped));
      continue;
    }
    std::vector<std::string> sym;
    for (size_t i = 0; i < mapped.size();) {
      int len = 1;
      utf8_decode(mapped, i, &len);
      sym.push_back(mapped.substr(i, size_t(len)));
      i += size_t(len);
    }
    while (sym.size() > 1) {
      size_t best = SIZE_MAX, at = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = rank.find(sym[i] + " " + sym[i + 1]);
        if (it != rank.end() && it->second < best) {
          best = it->second;
          at = i;
        }
      }
      if (best == SIZE_MAX) break;
      sym[at] += sym[at + 1];
      sym.erase(sym.begin() + long(at) + 1);
    }
    for (const auto& s : sym) out.push_back(id.at(s));
  }
  return out;
}

// Random text of n code points drawn from mixed scripts: ASCII words and punctuation, digits,
// spaces, tabs, CR/LF, Latin-1, Greek, Cyrillic, Devanagari (with combining marks), Arabic,
// CJK, Hiragana, emoji, U+00A0 and U+3000 spaces, contractions.
inline std::string random_text(Rng& rng, int n) {
  static const std::vector<std::pair<uint32_t, uint32_t>> kPools = {
      {'a', 'z'},       {'A', 'Z'},         {'0', '9'},         {' ', ' '},        {' ', ' '},
      {'!', '/'},       {':', '@'},         {'\n', '\n'},       {'\t', '\t'},      {'\r', '\r'},
      {0xE0, 0xFF},     {0x391, 0x3C9},     {0x410, 0x44F},     {0x915, 0x94D},    {0x627, 0x64A},
      {0x4E00, 0x4E80}, {0x3041, 0x3096},   {0x1F600, 0x1F64F}, {0x1F300, 0x1F320}, {0xA0, 0xA0},
      {0x3000, 0x3000}, {0x2160, 0x2168},   {0xBD, 0xBE}};
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (rng.below(20) == 0) {
      static const char* kBits[] = {"'s", "'RE", "'ll", " the", "  ", "\n\n", "123456", "'d"};
      s += kBits[rng.below(8)];
      continue;
    }
    const auto& p = kPools[rng.below(kPools.size())];
    utf8_append(s, p.first + uint32_t(rng.below(p.second - p.first + 1)));
  }
  return s;
}

}  // namespace loom::test
