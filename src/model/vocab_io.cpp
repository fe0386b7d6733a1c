#include "model/vocab_io.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/rng.h"
#include "core/mmap_file.h"
#include "model/bpe_pretokenize.h"

namespace loom {

namespace {

using nlohmann::json;

// max_bytes: larger files are refused before reading (untrusted sizes never size an allocation);
// what is not a regular file (a FIFO, /dev/zero behind a symlink) is refused before reading.
std::string read_file_or_fail(const std::string& path, const char* what, size_t max_bytes) {
  return read_text_file(path, max_bytes, what);
}


constexpr const char* kSpmMarker = "\xE2\x96\x81";  // U+2581

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  for (size_t k; (k = s.find(from, i)) != std::string::npos; i = k + from.size()) {
    out.append(s, i, k - i);
    out.append(to);
  }
  out.append(s, i, std::string::npos);
  return out;
}

bool is_byte_piece(std::string_view p) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return p.size() == 6 && p.substr(0, 3) == "<0x" && p[5] == '>' && hex(p[3]) && hex(p[4]);
}

// --- JSON text output (hand-written so a 150k-entry vocab map serialises in linear time) ---

void json_escape(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

std::string jstr(std::string_view s) {
  std::string out;
  json_escape(out, s);
  return out;
}

// --- tokenizer.json reading ---

// Known pre-tokenizer regexes (exact text as HF files carry them).
std::string classify_split_regex(const std::string& re) {
  for (PreTokenizer p : {PreTokenizer::Llama3, PreTokenizer::Qwen2, PreTokenizer::Gpt2})
    if (re == pre_tokenizer_regex(p))
      return p == PreTokenizer::Llama3 ? "llama3" : p == PreTokenizer::Qwen2 ? "qwen2" : "gpt2";
  // GPT-2's regex as some files spell it, with an explicit (?!\S) variant and the
  // "\s+(?!\S)|\s+" tail already covered above; nothing else is recognised.
  return "";
}

// The recursive walkers below follow Sequence nodes; published files nest them 1-2 deep. The
// parse already bounds the depth (kTokenizerJsonLimits), and each walker stops at this depth
// with an error naming it, so none recurses further than this whatever the file holds.
constexpr int kMaxSequenceDepth = 8;

[[noreturn]] void too_deep(const std::string& what, const char* field) {
  fail(what, ": ", field, " Sequences nested more than ", kMaxSequenceDepth, " deep");
}

// Walks the pre_tokenizer tree; returns "llama3"/"qwen2"/"gpt2" or fails naming the regex.
std::string detect_pre(const json& pt, const std::string& what) {
  std::string found;
  bool byte_level_regex = false;
  std::function<void(const json&, int)> walk = [&](const json& n, int depth) {
    if (depth > kMaxSequenceDepth) too_deep(what, "pre_tokenizer");
    if (!n.is_object()) return;
    const std::string type = n.value("type", "");
    if (type == "Sequence" && n.contains("pretokenizers")) {
      for (const auto& c : n["pretokenizers"]) walk(c, depth + 1);
    } else if (type == "Split") {
      std::string re;
      if (n.contains("pattern") && n["pattern"].is_object()) {
        const auto& pat = n["pattern"];
        if (pat.contains("Regex")) re = pat["Regex"].get<std::string>();
        else if (pat.contains("String")) re = pat["String"].get<std::string>();
      }
      const std::string c = classify_split_regex(re);
      if (c.empty())
        fail(what, ": unsupported pre_tokenizer Split regex '", text_excerpt(re, 120),
             "' (supported: the GPT-2, Llama-3 and Qwen2 regexes)");
      if (found.empty()) found = c;
    } else if (type == "ByteLevel") {
      if (n.value("use_regex", true)) byte_level_regex = true;
      if (n.value("add_prefix_space", false))
        fail(what, ": ByteLevel add_prefix_space true is not supported");
    } else {
      fail(what, ": unsupported pre_tokenizer type '", text_excerpt(type), "'");
    }
  };
  walk(pt, 0);
  if (!found.empty()) return found;
  if (byte_level_regex) return "gpt2";
  fail(what, ": pre_tokenizer has neither a Split regex nor ByteLevel with use_regex");
}

// Finds the BOS a TemplateProcessing post-processor prepends ("" if none).
std::string template_bos(const json& pp, const std::string& what, int depth = 0) {
  if (depth > kMaxSequenceDepth) too_deep(what, "post_processor");
  if (!pp.is_object()) return "";
  const std::string type = pp.value("type", "");
  if (type == "Sequence" && pp.contains("processors")) {
    for (const auto& c : pp["processors"]) {
      std::string b = template_bos(c, what, depth + 1);
      if (!b.empty()) return b;
    }
  } else if (type == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array() &&
             !pp["single"].empty()) {
    const auto& first = pp["single"][0];
    if (first.contains("SpecialToken")) return first["SpecialToken"].value("id", "");
  }
  return "";
}

// tokenizer_config.json token fields are a string, {"content": ...} or null.
std::string config_token(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// --- SentencePiece BPE in tokenizer.json (HF's LlamaConverter layout) ---

// Splits a merge "a b" (or the [a, b] form already joined by one space) at its single space.
// SentencePiece pieces spell the word marker U+2581, so they hold no ' '.
bool split_merge(const std::string& m, std::string* a, std::string* b) {
  const size_t sp = m.find(' ');
  if (sp == std::string::npos || m.find(' ', sp + 1) != std::string::npos) return false;
  *a = m.substr(0, sp);
  *b = m.substr(sp + 1);
  return true;
}

// Turns the ranked merges of v into Spm scores: a piece produced by merges scores -(rank of the
// first merge producing it), so the score order of pieces is the rank order of their first
// merges and loom's score-ordered merging (tokenizer.h) takes pairs in HF's order. Pieces no
// merge produces score below every merge result. Byte pieces "<0xAB>" become Byte tokens.
// Clears v.merges (Spm vocabularies carry scores, not merges).
void spm_scores_from_merges(Vocab& v, const std::unordered_map<std::string, int32_t>& id_of,
                            const std::string& what) {
  constexpr size_t kMaxExactRank = size_t(1) << 24;  // ranks stay exact as float
  if (v.merges.size() >= kMaxExactRank)
    fail(what, ": ", v.merges.size(), " merges; at most 2^24 fit SentencePiece scores exactly");
  const float no_merge = -float(v.merges.size()) - 1.0f;
  v.scores.assign(v.tokens.size(), no_merge);
  std::vector<uint8_t> produced(v.tokens.size(), 0);
  std::string a, b;
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    if (!split_merge(m, &a, &b))
      fail(what, ": merge ", r, " '", text_excerpt(m), "' does not split at exactly one space");
    const auto ia = id_of.find(a), ib = id_of.find(b), ic = id_of.find(a + b);
    if (ia == id_of.end() || ib == id_of.end() || ic == id_of.end())
      fail(what, ": merge ", r, " '", text_excerpt(m), "': its parts or their concatenation are not in the vocabulary");
    if (!produced[size_t(ic->second)]) {
      produced[size_t(ic->second)] = 1;
      v.scores[size_t(ic->second)] = -float(r);
    }
  }
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.types[i] == TokenType::Normal && is_byte_piece(v.tokens[i])) v.types[i] = TokenType::Byte;
  v.merges.clear();
}

// Whether the text gets a leading U+2581 (Spm add_space_prefix), from the normalizer
// (Llama-2: Sequence[Prepend("▁"), Replace(" ", "▁")]) or a Metaspace pre-tokenizer (later
// converters: prepend_scheme "always"/"first", split false). Anything that does not map ' ' to
// U+2581 or splits words is an error naming it.
bool detect_spm_space_prefix(const json& j, const std::string& what) {
  bool prepend = false, replace = false;
  std::function<void(const json&, int)> norm = [&](const json& n, int depth) {
    if (depth > kMaxSequenceDepth) too_deep(what, "normalizer");
    if (n.is_null()) return;
    const std::string type = n.value("type", "");
    if (type == "Sequence" && n.contains("normalizers")) {
      for (const auto& c : n["normalizers"]) norm(c, depth + 1);
    } else if (type == "Prepend" && n.value("prepend", "") == kSpmMarker) {
      prepend = true;
    } else if (type == "Replace" && n.contains("pattern") && n["pattern"].is_object() &&
               n["pattern"].value("String", "") == " " && n.value("content", "") == kSpmMarker) {
      replace = true;
    } else {
      fail(what, ": unsupported normalizer '", json_excerpt(n, 120), "' for SentencePiece BPE (supported: Prepend(\"",
           kSpmMarker, "\"), Replace(\" \", \"", kSpmMarker, "\"))");
    }
  };
  if (j.contains("normalizer")) norm(j["normalizer"], 0);
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
    const json& pt = j["pre_tokenizer"];
    if (pt.value("type", "") != "Metaspace" || pt.value("replacement", "") != kSpmMarker ||
        pt.value("split", true))
      fail(what, ": unsupported pre_tokenizer '", json_excerpt(pt, 120), "' for SentencePiece BPE (supported: null, ",
           "or Metaspace with replacement \"", kSpmMarker, "\" and split false)");
    replace = true;
    // prepend_scheme "first" only prefixes the text's first fragment; loom also prefixes the
    // text after a special token (llama.cpp's rule), which only differs for such texts.
    const std::string scheme = pt.contains("prepend_scheme") ? pt.value("prepend_scheme", "always")
                                                             : (pt.value("add_prefix_space", true) ? "always" : "never");
    if (scheme != "never") prepend = true;
  }
  if (!replace)
    fail(what, ": SentencePiece BPE (byte_fallback true) without a normalizer or Metaspace pre_tokenizer ",
         "turning ' ' into \"", kSpmMarker, "\" is not supported");
  return prepend;
}

// "post_processor" value: TemplateProcessing prepending BOS (single and pair), as HF writes it.
std::string bos_template_json(const Vocab& v) {
  const std::string b = jstr(v.tokens[size_t(v.bos_id)]);
  std::string o = "{\"type\": \"TemplateProcessing\",\n";
  o += "    \"single\": [{\"SpecialToken\": {\"id\": " + b + ", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}],\n";
  o += "    \"pair\": [{\"SpecialToken\": {\"id\": " + b + ", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
       "{\"SpecialToken\": {\"id\": " + b + ", \"type_id\": 1}}, {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}],\n";
  o += cat("    \"special_tokens\": {", b, ": {\"id\": ", b, ", \"ids\": [", v.bos_id, "], \"tokens\": [", b, "]}}}");
  return o;
}

// tokenizer.json of an Spm vocabulary in the layout of HF's LlamaConverter (Llama-2's file).
std::string spm_tokenizer_json(const Vocab& v) {
  const size_t n = v.tokens.size();
  auto type_at = [&](size_t i) {
    if (!v.types.empty()) return v.types[i];
    if (int(i) == v.unk_id) return TokenType::Unknown;
    if (int(i) == v.bos_id || int(i) == v.eos_id || int(i) == v.pad_id) return TokenType::Control;
    return is_byte_piece(v.tokens[i]) ? TokenType::Byte : TokenType::Normal;
  };
  // Pieces spell the word marker U+2581 (llama2.c's ' ' is converted).
  std::vector<std::string> pieces(n);
  std::unordered_map<std::string, int32_t> id_of;
  id_of.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    pieces[i] = type_at(i) == TokenType::Normal ? replace_all(v.tokens[i], " ", kSpmMarker) : v.tokens[i];
    if (!id_of.emplace(pieces[i], int32_t(i)).second)
      fail("tokenizer.json export: pieces ", id_of[pieces[i]], " and ", i, " are both '", pieces[i],
           "' once ' ' is spelled U+2581");
  }
  // Merges: every split p = a + b (at a code point boundary) of a Normal piece p into two
  // Normal pieces. Order: score of p, highest first; ties as HF's SentencePieceExtractor
  // leaves them after its stable sort by score: piece id, then (id of a, id of b).
  struct Merge {
    float score;
    int32_t piece, left, right;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < n; ++i) {
    if (type_at(i) != TokenType::Normal) continue;
    const std::string& p = pieces[i];
    int len = 1;
    for (size_t k = 0; k < p.size(); k += size_t(len)) {
      utf8_decode(p, k, &len);
      if (k == 0) continue;
      const auto a = id_of.find(p.substr(0, k)), b = id_of.find(p.substr(k));
      if (a == id_of.end() || b == id_of.end()) continue;
      if (type_at(size_t(a->second)) != TokenType::Normal || type_at(size_t(b->second)) != TokenType::Normal) continue;
      merges.push_back({v.scores.empty() ? 0.0f : v.scores[i], int32_t(i), a->second, b->second});
    }
  }
  std::sort(merges.begin(), merges.end(), [](const Merge& x, const Merge& y) {
    if (x.score != y.score) return x.score > y.score;
    if (x.piece != y.piece) return x.piece < y.piece;
    if (x.left != y.left) return x.left < y.left;
    return x.right < y.right;
  });

  std::string o;
  o.reserve(n * 24 + merges.size() * 16 + 4096);
  o += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
  bool first = true;
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = type_at(i);
    if (t != TokenType::Control && t != TokenType::Unknown && t != TokenType::UserDefined) continue;
    o += first ? "\n" : ",\n";
    first = false;
    o += cat("    {\"id\": ", i, ", \"content\": ", jstr(pieces[i]),
             ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": ",
             t != TokenType::UserDefined ? "true" : "false", "}");
  }
  o += "\n  ],\n";
  const std::string marker = jstr(kSpmMarker);
  const std::string replace = "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": " + marker + "}";
  if (v.add_space_prefix)
    o += "  \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": " + marker +
         "}, " + replace + "]},\n";
  else
    o += "  \"normalizer\": " + replace + ",\n";
  o += "  \"pre_tokenizer\": null,\n";
  o += "  \"post_processor\": " + (v.add_bos && v.bos_id >= 0 ? bos_template_json(v) : std::string("null")) + ",\n";
  o += "  \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": " + marker +
       "}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}";
  if (v.add_space_prefix) o += ", {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}";
  o += "]},\n";
  o += "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": ";
  o += v.unk_id >= 0 ? jstr(pieces[size_t(v.unk_id)]) : std::string("null");
  o += ", \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": true, "
       "\"byte_fallback\": true, \"ignore_merges\": false,\n    \"vocab\": {";
  first = true;
  for (size_t i = 0; i < n; ++i) {
    o += first ? "\n      " : ",\n      ";
    first = false;
    json_escape(o, pieces[i]);
    o += cat(": ", i);
  }
  o += "\n    },\n    \"merges\": [";
  first = true;
  for (const auto& m : merges) {
    o += first ? "\n      " : ",\n      ";
    first = false;
    json_escape(o, pieces[size_t(m.left)] + " " + pieces[size_t(m.right)]);
  }
  o += "\n    ]\n  }\n}\n";
  return o;
}

// --- synthetic vocabularies ---

// A short English text written for loom (not taken from any corpus), used to learn the first
// merges of synthetic vocabularies so common words become tokens.
constexpr const char* kSynthText = R"(Once upon a time, in a small town by the river, there lived an old clockmaker named Tomas.
Every morning he opened his shop at seven o'clock and wound all 128 clocks on the walls.
The children of the town liked to visit him. "Why do you keep so many clocks?" they asked.
He smiled and said, "Because each one tells a different story. This one was my father's, and
that one came from a ship that sailed across the sea in 1894." The children laughed; they didn't
believe him, but they loved the stories anyway. One day a girl named Mira brought him a broken
watch. It had stopped at 3:45 and would not start again. Tomas looked at it for a long time.
"I'll fix it," he said, "but you must help me." Together they opened the case, cleaned the tiny
gears, and replaced a spring that had worn thin. When the watch began to tick, Mira jumped with
joy. She thanked him and ran home to show her mother. From then on she came to the shop every
week, and she learned how to read the gears the way other people read books. Years later, when
Tomas was too old to work, Mira took over the shop. She kept every clock running, and she told
the children the same stories he had told her. The town grew, new roads were built, and cars
replaced the horses, but the little shop by the river stayed the same.
def count_words(text):
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts
The total was 42.50 dollars, or about 39 euros; the train left at 10:15 and arrived at 12:30.
What's the weather like today? It's sunny, with a high of 24 degrees. We're going to the park!
)";

// Greedy BPE training over word symbol sequences: repeatedly merges the most frequent adjacent
// pair (ties: smallest (left id, right id)) while it occurs at least twice and the vocabulary
// has room. on_merge(a, b) returns the new token id, or -1 when the concatenation already
// exists (the pair is then banned).
template <typename OnMerge>
void learn_merges(std::vector<std::pair<std::vector<int32_t>, int>>& words, int max_new, OnMerge on_merge) {
  std::unordered_set<uint64_t> banned;
  auto key = [](int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); };
  for (int made = 0; made < max_new;) {
    std::map<uint64_t, int> counts;  // ordered: deterministic tie-break by (a, b)
    for (const auto& [w, c] : words)
      for (size_t i = 0; i + 1 < w.size(); ++i) {
        const uint64_t k = key(w[i], w[i + 1]);
        if (!banned.count(k)) counts[k] += c;
      }
    uint64_t best = 0;
    int best_count = 1;
    for (const auto& [k, c] : counts)
      if (c > best_count) {
        best = k;
        best_count = c;
      }
    if (best_count < 2) return;
    const int32_t a = int32_t(best >> 32), b = int32_t(best & 0xFFFFFFFFu);
    const int32_t m = on_merge(a, b);
    if (m < 0) {
      banned.insert(best);
      continue;
    }
    ++made;
    for (auto& [w, c] : words) {
      std::vector<int32_t> nw;
      nw.reserve(w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
          nw.push_back(m);
          ++i;
        } else {
          nw.push_back(w[i]);
        }
      }
      w.swap(nw);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// llama2.c

Vocab load_llama2c_vocab(const std::string& path, int vocab_size) {
  if (vocab_size <= 0) fail("llama2.c tokenizer '", path, "': vocab_size ", vocab_size, " must be positive");
  // A llama2.c tokenizer.bin: ~0.4 MB for 32k tokens; the tokenizer.json bound covers any vocabulary.
  const std::string data = read_file_or_fail(path, "llama2.c tokenizer", kTokenizerJsonLimits.max_bytes);
  size_t off = 0;
  auto take = [&](void* dst, size_t n, int token) {
    if (off + n > data.size())
      fail("llama2.c tokenizer '", path, "' is truncated at token ", token, " of ", vocab_size,
           " (", data.size(), " bytes)");
    std::memcpy(dst, data.data() + off, n);
    off += n;
  };
  int32_t max_len = 0;
  take(&max_len, 4, 0);
  if (max_len <= 0 || max_len > (1 << 20))
    fail("llama2.c tokenizer '", path, "': max_token_length ", max_len, " is not in [1, 2^20]");
  Vocab v;
  v.kind = VocabKind::Spm;
  v.tokens.resize(size_t(vocab_size));
  v.scores.resize(size_t(vocab_size));
  v.types.assign(size_t(vocab_size), TokenType::Normal);
  for (int i = 0; i < vocab_size; ++i) {
    int32_t len = 0;
    take(&v.scores[size_t(i)], 4, i);
    take(&len, 4, i);
    if (len < 0 || len > max_len)
      fail("llama2.c tokenizer '", path, "': token ", i, " has length ", len, ", outside [0, ",
           max_len, "] (max_token_length)");
    v.tokens[size_t(i)].resize(size_t(len));
    if (len) take(v.tokens[size_t(i)].data(), size_t(len), i);
    if (is_byte_piece(v.tokens[size_t(i)])) v.types[size_t(i)] = TokenType::Byte;
  }
  // llama2.c's fixed ids: 0 <unk>, 1 BOS, 2 EOS.
  v.unk_id = 0;
  v.types[0] = TokenType::Unknown;
  if (vocab_size > 1) v.bos_id = 1, v.types[1] = TokenType::Control;
  if (vocab_size > 2) v.eos_id = 2, v.types[2] = TokenType::Control;
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

std::string llama2c_vocab_bytes(const Vocab& v) {
  std::vector<std::string> pieces;
  pieces.reserve(v.tokens.size());
  int32_t max_len = 1;
  for (const auto& t : v.tokens) {
    pieces.push_back(replace_all(t, kSpmMarker, " "));  // llama2.c spells the marker ' '
    max_len = std::max(max_len, int32_t(pieces.back().size()));
  }
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  put(&max_len, 4);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const float score = v.scores.empty() ? 0.0f : v.scores[i];
    const int32_t len = int32_t(pieces[i].size());
    put(&score, 4);
    put(&len, 4);
    put(pieces[i].data(), pieces[i].size());
  }
  return out;
}

void write_llama2c_vocab(const Vocab& v, const std::string& path) {
  const std::string bytes = llama2c_vocab_bytes(v);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot create llama2.c tokenizer '", path, "'");
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) fail("cannot write llama2.c tokenizer '", path, "'");
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json

Vocab parse_tokenizer_json(const std::string& tokenizer_json, const std::string& config_json,
                           const std::string& what, int64_t max_tokens) {
  // Bounded parses (core/json_bounded.h): size and nesting depth checked on the raw text.
  const json j = parse_json_bounded(tokenizer_json, what, kTokenizerJsonLimits);
  const json cfg = config_json.empty()
                       ? json()
                       : parse_json_bounded(config_json, what + " (tokenizer_config.json)", kTokenizerJsonLimits);
  try {
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
      fail(what, ": no \"model\" object");
    const json& model = j["model"];
    const std::string type = model.value("type", "BPE");
    if (type != "BPE") fail(what, ": model.type '", text_excerpt(type), "' is not supported (only \"BPE\")");
    // byte_fallback marks SentencePiece BPE converted by HF (Llama-2): read as an Spm vocabulary.
    const bool spm = model.value("byte_fallback", false);
    if (!model.contains("vocab") || !model["vocab"].is_object()) fail(what, ": model.vocab is not an object");

    // Every id is checked against the id space before anything is sized from it: one id of
    // 16,777,215 in a 10 KB file once cost 34 s and 3.4 GB before the vocabulary-size error.
    // The bound is the model's vocabulary size when the caller knows it, else 2^24.
    constexpr int64_t kMaxTokens = 1 << 24;
    const int64_t bound = max_tokens > 0 ? std::min(max_tokens, kMaxTokens) : kMaxTokens;
    const std::string bound_text =
        max_tokens > 0 && max_tokens <= kMaxTokens ? cat("the model's vocab_size ", bound) : std::string("2^24");
    auto checked_id = [&](const json& id, const std::string& where) -> int64_t {
      if (!id.is_number_integer()) fail(what, ": ", where, " is not an integer id: ", json_excerpt(id));
      if (id.is_number_unsigned() ? id.get<uint64_t>() >= uint64_t(bound)
                                  : (id.get<int64_t>() < 0 || id.get<int64_t>() >= bound))
        fail(what, ": ", where, " = ", json_excerpt(id), " is outside [0, ", bound, ") (", bound_text, ")");
      return id.get<int64_t>();
    };
    std::vector<std::pair<int64_t, std::string>> entries;
    for (const auto& [piece, id] : model["vocab"].items())
      entries.emplace_back(checked_id(id, cat("model.vocab['", text_excerpt(piece), "']")), piece);
    struct Added {
      int64_t id;
      std::string content;
      bool special;
    };
    std::vector<Added> added;
    if (j.contains("added_tokens") && j["added_tokens"].is_array())
      for (const auto& a : j["added_tokens"]) {
        if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string())
          fail(what, ": added_tokens[", added.size(), "] is not {\"id\": ..., \"content\": \"...\"}: ",
               json_excerpt(a));
        added.push_back({checked_id(a["id"], cat("added_tokens[", added.size(), "].id")),
                         a["content"].get<std::string>(), a.value("special", false)});
      }

    int64_t n = 0;  // ids are below bound <= 2^24: id + 1 cannot overflow
    for (const auto& e : entries) n = std::max(n, e.first + 1);
    for (const auto& a : added) n = std::max(n, a.id + 1);

    Vocab v;
    v.kind = spm ? VocabKind::Spm : VocabKind::Bpe;
    v.tokens.resize(size_t(n));
    v.types.assign(size_t(n), TokenType::Unused);
    std::vector<uint8_t> set(size_t(n), 0);
    for (auto& [id, piece] : entries) {
      if (set[size_t(id)] && v.tokens[size_t(id)] != piece)
        fail(what, ": id ", id, " is given to both '", text_excerpt(v.tokens[size_t(id)]), "' and '",
             text_excerpt(piece), "'");
      v.tokens[size_t(id)] = std::move(piece);
      v.types[size_t(id)] = TokenType::Normal;
      set[size_t(id)] = 1;
    }
    for (const auto& a : added) {
      if (set[size_t(a.id)] && v.tokens[size_t(a.id)] != a.content)
        fail(what, ": added token ", a.id, " '", text_excerpt(a.content), "' collides with vocab piece '",
             text_excerpt(v.tokens[size_t(a.id)]), "'");
      v.tokens[size_t(a.id)] = a.content;
      v.types[size_t(a.id)] = a.special ? TokenType::Control : TokenType::UserDefined;
      set[size_t(a.id)] = 1;
    }
    for (int64_t i = 0; i < n; ++i)  // holes in the id space get unique unusable names
      if (!set[size_t(i)]) v.tokens[size_t(i)] = cat("<|loom_unused_", i, "|>");

    if (model.contains("merges") && model["merges"].is_array()) {
      v.merges.reserve(model["merges"].size());
      for (const auto& m : model["merges"]) {
        if (m.is_string()) {
          v.merges.push_back(m.get<std::string>());
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
          v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
        } else {
          fail(what, ": merge ", v.merges.size(), " is neither \"a b\" nor [\"a\", \"b\"]");
        }
      }
    }
    std::unordered_map<std::string, int32_t> id_of;
    id_of.reserve(size_t(n) * 2);
    for (int64_t i = n - 1; i >= 0; --i) id_of[v.tokens[size_t(i)]] = int32_t(i);

    if (spm) {
      spm_scores_from_merges(v, id_of, what);
      v.add_space_prefix = detect_spm_space_prefix(j, what);
    } else {
      v.ignore_merges = model.value("ignore_merges", false);
      if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null())
        fail(what, ": pre_tokenizer is null; byte-level BPE needs ByteLevel");
      v.pre = detect_pre(j["pre_tokenizer"], what);
      v.add_space_prefix = false;
    }
    auto id_or_fail = [&](const std::string& piece, const char* role) {
      auto it = id_of.find(piece);
      if (it == id_of.end()) fail(what, ": ", role, " token '", text_excerpt(piece), "' is not in the vocabulary");
      return it->second;
    };
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      v.unk_id = id_or_fail(model["unk_token"].get<std::string>(), "unk");
      if (spm) v.types[size_t(v.unk_id)] = TokenType::Unknown;
    }

    // BOS: tokenizer_config's bos_token, else the post-processor template's first token.
    const std::string tmpl_bos = j.contains("post_processor") ? template_bos(j["post_processor"], what) : "";
    const std::string cfg_bos = config_token(cfg, "bos_token");
    if (!cfg_bos.empty()) v.bos_id = id_or_fail(cfg_bos, "bos");
    else if (!tmpl_bos.empty()) v.bos_id = id_or_fail(tmpl_bos, "bos");
    if (cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      v.add_bos = cfg["add_bos_token"].get<bool>();
    else
      v.add_bos = !tmpl_bos.empty();
    if (v.bos_id < 0) v.add_bos = false;

    const std::string cfg_eos = config_token(cfg, "eos_token");
    if (!cfg_eos.empty()) {
      v.eos_id = id_or_fail(cfg_eos, "eos");
    } else {
      for (const char* e : {"<|end_of_text|>", "<|endoftext|>", "</s>"})
        if (auto it = id_of.find(e); it != id_of.end()) {
          v.eos_id = it->second;
          break;
        }
    }
    const std::string cfg_pad = config_token(cfg, "pad_token");
    if (!cfg_pad.empty()) {
      if (auto it = id_of.find(cfg_pad); it != id_of.end()) v.pad_id = it->second;
    }
    if (cfg.is_object() && cfg.contains("chat_template")) {
      const auto& ct = cfg["chat_template"];
      if (ct.is_string()) {
        v.chat_template = ct.get<std::string>();
      } else if (ct.is_array()) {  // [{"name": ..., "template": ...}]: "default" or the first
        for (const auto& t : ct)
          if (t.value("name", "") == "default" || v.chat_template.empty())
            v.chat_template = t.value("template", "");
      }
    }
    return v;
  } catch (const json::exception& e) {
    fail(what, ": unexpected JSON structure: ", text_excerpt(e.what(), 200));
  }
}

Vocab load_tokenizer_json(const std::string& path, int64_t max_tokens) {
  const std::string text = read_file_or_fail(path, "tokenizer.json", kTokenizerJsonLimits.max_bytes);
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string cfg_path = dir + "tokenizer_config.json";
  const std::string cfg = file_exists(cfg_path)
                              ? read_file_or_fail(cfg_path, "tokenizer_config.json", kTokenizerJsonLimits.max_bytes)
                              : "";
  return parse_tokenizer_json(text, cfg, path, max_tokens);
}

std::string vocab_to_tokenizer_json(const Vocab& v) {
  if (v.kind == VocabKind::Spm) return spm_tokenizer_json(v);
  const PreTokenizer pre = pre_tokenizer_from_name(v.pre);
  auto type_at = [&](size_t i) { return v.types.empty() ? TokenType::Normal : v.types[i]; };
  auto is_added = [&](size_t i) {
    const TokenType t = type_at(i);
    return t == TokenType::Control || t == TokenType::UserDefined || int(i) == v.bos_id || int(i) == v.eos_id;
  };
  std::string o;
  o.reserve(v.tokens.size() * 24 + v.merges.size() * 16 + 4096);
  o += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
  bool first = true;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (!is_added(i)) continue;
    const bool special = type_at(i) != TokenType::UserDefined;
    o += first ? "\n" : ",\n";
    first = false;
    o += cat("    {\"id\": ", i, ", \"content\": ", jstr(v.tokens[i]),
             ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": ",
             special ? "true" : "false", "}");
  }
  o += "\n  ],\n  \"normalizer\": null,\n";
  if (pre == PreTokenizer::Gpt2) {
    o += "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n";
  } else {
    o += "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n";
    o += "    {\"type\": \"Split\", \"pattern\": {\"Regex\": " + jstr(pre_tokenizer_regex(pre)) +
         "}, \"behavior\": \"Isolated\", \"invert\": false},\n";
    o += "    {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}\n  ]},\n";
  }
  if (v.add_bos && v.bos_id >= 0) {
    o += "  \"post_processor\": " + bos_template_json(v) + ",\n";
  } else {
    o += "  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true},\n";
  }
  o += "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n";
  o += "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": ";
  o += v.unk_id >= 0 ? jstr(v.tokens[size_t(v.unk_id)]) : std::string("null");
  o += ", \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": ";
  o += v.ignore_merges ? "true" : "false";
  o += ",\n    \"vocab\": {";
  first = true;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (is_added(i)) continue;
    o += first ? "\n      " : ",\n      ";
    first = false;
    json_escape(o, v.tokens[i]);
    o += cat(": ", i);
  }
  o += "\n    },\n    \"merges\": [";
  first = true;
  for (const auto& m : v.merges) {
    o += first ? "\n      " : ",\n      ";
    first = false;
    // The "a b" form reads in every tokenizers version; pieces holding ' ' need [a, b].
    const size_t sp = m.find(' ');
    if (sp != std::string::npos && m.find(' ', sp + 1) == std::string::npos) {
      json_escape(o, m);
    } else {
      fail("merge '", m, "' cannot be split unambiguously at one space for tokenizer.json");
    }
  }
  o += "\n    ]\n  }\n}\n";
  return o;
}

std::string vocab_to_tokenizer_config_json(const Vocab& v) {
  json c = json::object();
  c["add_bos_token"] = v.add_bos;
  c["add_eos_token"] = false;
  c["bos_token"] = v.bos_id >= 0 ? json(v.tokens[size_t(v.bos_id)]) : json(nullptr);
  c["eos_token"] = v.eos_id >= 0 ? json(v.tokens[size_t(v.eos_id)]) : json(nullptr);
  if (v.pad_id >= 0) c["pad_token"] = v.tokens[size_t(v.pad_id)];
  if (!v.chat_template.empty()) c["chat_template"] = v.chat_template;
  c["clean_up_tokenization_spaces"] = false;
  c["model_max_length"] = 131072;
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  return c.dump(2) + "\n";
}

// ---------------------------------------------------------------------------------------------
// Synthetic vocabularies

Vocab synth_bpe_vocab(int size, uint64_t seed, const std::string& pre) {
  const PreTokenizer p = pre_tokenizer_from_name(pre);
  std::vector<std::string> specials;
  Vocab v;
  v.kind = VocabKind::Bpe;
  if (p == PreTokenizer::Llama3) {
    specials = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    v.pre = "llama3";
    v.ignore_merges = true;
  } else if (p == PreTokenizer::Qwen2) {
    specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    v.pre = "qwen2";
  } else {
    specials = {"<|endoftext|>"};
    v.pre = "gpt2";
  }
  const int n_special = int(specials.size());
  if (size < 256 + n_special)
    fail("synthetic BPE vocabulary size ", size, " is below the minimum ", 256 + n_special,
         " (256 byte tokens + ", n_special, " special tokens)");
  const int n_normal = size - n_special;
  v.tokens.reserve(size_t(size));
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(size_t(size) * 2);
  std::vector<int> byte_len;  // decoded length of each token in bytes
  for (int b = 0; b < 256; ++b) {
    std::string c;
    utf8_append(c, byte_to_unicode(static_cast<unsigned char>(b)));
    ids.emplace(c, int32_t(b));
    v.tokens.push_back(std::move(c));
    byte_len.push_back(1);
  }
  auto add_merge = [&](int32_t a, int32_t b) -> int32_t {
    std::string s = v.tokens[size_t(a)] + v.tokens[size_t(b)];
    if (ids.count(s)) return -1;
    const int32_t id = int32_t(v.tokens.size());
    v.merges.push_back(v.tokens[size_t(a)] + " " + v.tokens[size_t(b)]);
    ids.emplace(s, id);
    v.tokens.push_back(std::move(s));
    byte_len.push_back(byte_len[size_t(a)] + byte_len[size_t(b)]);
    return id;
  };
  // 1. Merges learned from the built-in text.
  {
    std::map<std::string, int> word_counts;
    for (std::string_view w : pretokenize(kSynthText, p)) ++word_counts[std::string(w)];
    std::vector<std::pair<std::vector<int32_t>, int>> words;
    for (const auto& [w, c] : word_counts) {
      std::vector<int32_t> sym;
      for (char ch : w) sym.push_back(int32_t(static_cast<unsigned char>(ch)));
      words.emplace_back(std::move(sym), c);
    }
    learn_merges(words, n_normal - 256, add_merge);
  }
  // 2. Seeded random merges: a short token (<= 8 bytes) followed by a very short one (<= 3
  // bytes, half the time a lowercase letter), so pieces stay word-like in length.
  Rng rng(seed);
  std::vector<int32_t> lefts, rights;
  for (int32_t i = 0; i < int32_t(v.tokens.size()); ++i) {
    if (byte_len[size_t(i)] <= 8) lefts.push_back(i);
    if (byte_len[size_t(i)] <= 3) rights.push_back(i);
  }
  int max_left = 8;
  for (int misses = 0; int(v.tokens.size()) < n_normal;) {
    const int32_t a = lefts[rng.below(lefts.size())];
    const int32_t b = rng.below(2) ? int32_t('a' + rng.below(26)) : rights[rng.below(rights.size())];
    const int32_t m = add_merge(a, b);
    if (m < 0) {
      if (++misses > 64) {  // the short pieces are used up: allow longer ones
        ++max_left;
        for (int32_t i = 0; i < int32_t(v.tokens.size()); ++i)
          if (byte_len[size_t(i)] == max_left) lefts.push_back(i);
        misses = 0;
      }
      continue;
    }
    misses = 0;
    if (byte_len[size_t(m)] <= max_left) lefts.push_back(m);
    if (byte_len[size_t(m)] <= 3) rights.push_back(m);
  }
  v.types.assign(v.tokens.size(), TokenType::Normal);
  for (const auto& s : specials) {
    ids.emplace(s, int32_t(v.tokens.size()));
    v.tokens.push_back(s);
    v.types.push_back(TokenType::Control);
  }
  auto id = [&](const char* s) { return ids.at(s); };
  if (p == PreTokenizer::Llama3) {
    v.bos_id = id("<|begin_of_text|>");
    v.eos_id = id("<|end_of_text|>");
    v.add_bos = true;
  } else if (p == PreTokenizer::Qwen2) {
    v.bos_id = id("<|endoftext|>");  // as Qwen2 GGUF files record it, never added
    v.eos_id = id("<|im_end|>");
    v.add_bos = false;
  } else {
    v.bos_id = v.eos_id = id("<|endoftext|>");
    v.add_bos = false;
  }
  v.add_space_prefix = false;
  LOOM_CHECK(v.size() == size);
  return v;
}

Vocab synth_vocab(VocabKind kind, int size, uint64_t seed) {
  if (kind == VocabKind::Bpe) return synth_bpe_vocab(size, seed, "llama3");
  constexpr int kFixed = 3 + 256;
  if (size < kFixed)
    fail("synthetic SentencePiece vocabulary size ", size, " is below the minimum ", kFixed,
         " (<unk>, <s>, </s> and 256 byte pieces)");
  Vocab v;
  v.kind = VocabKind::Spm;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {TokenType::Unknown, TokenType::Control, TokenType::Control};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v.tokens.push_back(name);
    v.types.push_back(TokenType::Byte);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = true;
  std::unordered_map<std::string, int32_t> ids;
  for (int32_t i = 0; i < int32_t(v.tokens.size()); ++i) ids.emplace(v.tokens[size_t(i)], i);
  // Pieces spell the word marker U+2581 (GGUF "llama"); write_llama2c_vocab turns it into ' '.
  const std::string text = replace_all(std::string(" ") + kSynthText, " ", kSpmMarker);
  int rank = 0;  // merges score -rank (llama2.c's tok512 does the same)
  auto add_piece = [&](const std::string& s, float score) -> int32_t {
    if (int(v.tokens.size()) >= size || ids.count(s)) return -1;
    const int32_t id = int32_t(v.tokens.size());
    ids.emplace(s, id);
    v.tokens.push_back(s);
    v.scores.push_back(score);
    v.types.push_back(TokenType::Normal);
    return id;
  };
  // 1. Single code points: the marker, printable ASCII, then the text's others.
  std::vector<std::string> chars = {kSpmMarker};
  for (char c = 0x21; c < 0x7F; ++c) chars.emplace_back(1, c);
  for (size_t i = 0; i < text.size();) {
    int len = 1;
    utf8_decode(text, i, &len);
    if (text[i] != '\n') chars.push_back(text.substr(i, size_t(len)));
    i += size_t(len);
  }
  int k = 0;
  for (const auto& c : chars)
    if (add_piece(c, -1.0e6f - float(k)) >= 0) ++k;  // never a merge result, so never compared
  // 2. Merges learned from the text, words split before each marker and at newlines.
  {
    std::map<std::string, int> word_counts;
    size_t start = 0;
    for (size_t i = 1; i <= text.size(); ++i)
      if (i == text.size() || text.compare(i, 3, kSpmMarker) == 0 || text[i] == '\n') {
        std::string w = text.substr(start, i - start);
        if (!w.empty() && w != "\n") ++word_counts[w];
        start = (i < text.size() && text[i] == '\n') ? i + 1 : i;
      }
    std::vector<std::pair<std::vector<int32_t>, int>> words;
    for (const auto& [w, c] : word_counts) {
      std::vector<int32_t> sym;
      for (size_t i = 0; i < w.size();) {
        int len = 1;
        utf8_decode(w, i, &len);
        auto it = ids.find(w.substr(i, size_t(len)));
        if (it != ids.end()) sym.push_back(it->second);
        i += size_t(len);
      }
      words.emplace_back(std::move(sym), c);
    }
    learn_merges(words, size - v.size(), [&](int32_t a, int32_t b) {
      const int32_t m = add_piece(v.tokens[size_t(a)] + v.tokens[size_t(b)], -float(rank));
      if (m >= 0) ++rank;
      return m;
    });
  }
  // 3. Seeded random pieces: a learned/char piece followed by a short one.
  Rng rng(seed);
  const int32_t first_piece = kFixed;
  while (v.size() < size) {
    const int32_t a = first_piece + int32_t(rng.below(uint64_t(v.size() - first_piece)));
    const int32_t b = first_piece + int32_t(rng.below(uint64_t(std::min(v.size(), first_piece + 200) - first_piece)));
    if (v.tokens[size_t(a)].size() > 24) continue;
    if (add_piece(v.tokens[size_t(a)] + v.tokens[size_t(b)], -float(rank)) >= 0) ++rank;
  }
  return v;
}

}  // namespace loom
