#include "model/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/json_bounded.h"
#include "model/bpe_pretokenize.h"

namespace loom {

namespace {

// Heterogeneous lookup (std::string_view keys without building a std::string).
struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using PieceMap = std::unordered_map<std::string, int32_t, StrHash, std::equal_to<>>;

constexpr const char* kSpmMarker = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

TokenType type_of(const Vocab& v, int32_t id) {
  if (!v.types.empty()) return v.types[size_t(id)];
  if (id == v.bos_id || id == v.eos_id || id == v.pad_id) return TokenType::Control;
  if (id == v.unk_id) return TokenType::Unknown;
  return TokenType::Normal;
}

// "<0xAB>" -> 0xAB, else -1 (upper or lower case hex, as llama2.c's sscanf accepts).
int parse_byte_piece(std::string_view p) {
  if (p.size() != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(p[3]), lo = hex(p[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

PieceMap build_piece_map(const Vocab& v) {
  PieceMap m;
  m.reserve(v.tokens.size() * 2);
  for (size_t i = 0; i < v.tokens.size(); ++i) m.emplace(v.tokens[i], int32_t(i));  // first wins
  return m;
}

int32_t lookup(const PieceMap& m, std::string_view piece) {
  auto it = m.find(piece);
  return it == m.end() ? -1 : it->second;
}

// Symbols of a word being merged: a doubly linked list over the initial symbols, so merging is
// O(1) and candidate pairs live in a priority queue (O(n log n) per word, not quadratic).
struct SymbolList {
  std::vector<int32_t> tok, prev, next;
  void reset(const std::vector<int32_t>& ids) {
    const int n = int(ids.size());
    tok = ids;
    prev.resize(size_t(n));
    next.resize(size_t(n));
    for (int i = 0; i < n; ++i) {
      prev[size_t(i)] = i - 1;
      next[size_t(i)] = i + 1 < n ? i + 1 : -1;
    }
  }
  // Symbol j (= next[i]) is absorbed into i, which becomes token merged.
  void merge(int i, int32_t merged) {
    const int j = next[size_t(i)];
    tok[size_t(i)] = merged;
    tok[size_t(j)] = -1;
    next[size_t(i)] = next[size_t(j)];
    if (next[size_t(j)] >= 0) prev[size_t(next[size_t(j)])] = i;
  }
};

// A candidate merge of symbols (left, its next). Ordered by priority, then leftmost first.
struct Candidate {
  double priority;  // larger merges first (Spm: score; Bpe: -rank)
  int left, right;
  int32_t left_tok, right_tok, merged;
  bool operator<(const Candidate& o) const {  // std::priority_queue pops the largest
    if (priority != o.priority) return priority < o.priority;
    return left > o.left;
  }
};

// Applies candidates until none is left. pair_fn(left_tok, right_tok, &priority) returns the
// merged token id or -1.
template <typename PairFn>
void run_merges(SymbolList& s, PairFn pair_fn) {
  std::priority_queue<Candidate> pq;
  auto push = [&](int i) {
    if (i < 0) return;
    const int j = s.next[size_t(i)];
    if (j < 0 || s.tok[size_t(i)] < 0 || s.tok[size_t(j)] < 0) return;
    double pr = 0;
    const int32_t m = pair_fn(s.tok[size_t(i)], s.tok[size_t(j)], &pr);
    if (m >= 0) pq.push({pr, i, j, s.tok[size_t(i)], s.tok[size_t(j)], m});
  };
  for (int i = 0; i < int(s.tok.size()); ++i) push(i);
  while (!pq.empty()) {
    const Candidate c = pq.top();
    pq.pop();
    // Stale when either symbol changed since the candidate was pushed.
    if (s.next[size_t(c.left)] != c.right || s.tok[size_t(c.left)] != c.left_tok ||
        s.tok[size_t(c.right)] != c.right_tok)
      continue;
    s.merge(c.left, c.merged);
    push(s.prev[size_t(c.left)]);
    push(c.left);
  }
}

void append_symbols(const SymbolList& s, std::vector<int32_t>& out) {
  for (int i = s.tok.empty() ? -1 : 0; i >= 0; i = s.next[size_t(i)])
    if (s.tok[size_t(i)] >= 0) out.push_back(s.tok[size_t(i)]);
}

// ---------------------------------------------------------------------------------------------
// SentencePiece-style BPE by scores (llama2.c's encode).
class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab v) : Tokenizer(std::move(v)), map_(build_piece_map(vocab_)) {
    // GGUF "llama" vocabularies spell the word marker U+2581; llama2.c's use ' '.
    for (const auto& t : vocab_.tokens)
      if (t.find(kSpmMarker) != std::string::npos) {
        use_marker_ = true;
        break;
      }
    int bytes = 0, first_missing = -1;
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_id_[size_t(b)] = lookup(map_, name);
      if (byte_id_[size_t(b)] >= 0) ++bytes;
      else if (first_missing < 0) first_missing = b;
    }
    // Text the pieces do not cover falls back to byte tokens, else to the unknown token; with
    // neither it would vanish from the prompt (issue 36: such a tokenizer decoded to nothing).
    if (bytes > 0 && bytes < 256)
      fail("vocabulary has ", bytes, " of the 256 byte-fallback tokens <0x00>..<0xFF> (the first missing: <0x",
           "0123456789ABCDEF"[first_missing >> 4], "0123456789ABCDEF"[first_missing & 15],
           ">): text with the missing bytes could not be encoded");
    if (bytes == 0 && vocab_.unk_id < 0)
      fail("vocabulary has neither byte-fallback tokens <0x00>..<0xFF> nor an unknown token: text outside its ",
           vocab_.tokens.size(), " pieces would be dropped");
    decoded_.resize(vocab_.tokens.size());
    is_byte_.assign(vocab_.tokens.size(), 0);
    for (size_t i = 0; i < vocab_.tokens.size(); ++i) {
      const std::string& p = vocab_.tokens[i];
      const TokenType ty = type_of(vocab_, int32_t(i));
      if (ty == TokenType::Control || ty == TokenType::Unknown || ty == TokenType::Unused) continue;
      if (ty == TokenType::UserDefined) {
        decoded_[i] = p;
        continue;
      }
      const int b = parse_byte_piece(p);
      if (b >= 0) {
        decoded_[i] = std::string(1, char(b));
        is_byte_[i] = 1;
        continue;
      }
      std::string d;
      for (size_t k = 0; k < p.size();) {
        if (p.compare(k, 3, kSpmMarker) == 0) {
          d += ' ';
          k += 3;
        } else {
          d += p[k++];
        }
      }
      decoded_[i] = std::move(d);
    }
  }

  int32_t token_id(std::string_view piece) const override { return lookup(map_, piece); }

  std::string token_piece_bytes(int32_t prev, int32_t id) const override {
    if (id < 0 || id >= vocab_.size()) return {};
    const std::string& d = decoded_[size_t(id)];
    // llama2.c: "following BOS token, sentencepiece decoder strips any leading whitespace".
    if (prev >= 0 && prev == vocab_.bos_id && !is_byte_[size_t(id)] && !d.empty() && d[0] == ' ')
      return d.substr(1);
    return d;
  }

 protected:
  void encode_fragment(std::string_view text, bool first_or_after_special,
                       std::vector<int32_t>& out) const override {
    if (text.empty()) return;
    std::string s;
    s.reserve(text.size() + 3);
    if (vocab_.add_space_prefix && first_or_after_special) s += ' ';
    s.append(text);
    if (use_marker_) {
      std::string r;
      r.reserve(s.size() * 2);
      for (char c : s) {
        if (c == ' ')
          r += kSpmMarker;
        else
          r += c;
      }
      s.swap(r);
    }
    // Each code point to its piece, else its bytes as byte pieces. An invalid UTF-8 byte is
    // one "code point" of one byte here (llama2.c groups up to 4 continuation bytes blindly;
    // both fall back to byte pieces for such input).
    std::vector<int32_t> ids;
    ids.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      int len = 1;
      utf8_decode(s, i, &len);
      const int32_t id = lookup(map_, std::string_view(s).substr(i, size_t(len)));
      if (id >= 0) {
        ids.push_back(id);
      } else {
        for (int k = 0; k < len; ++k) {
          const int32_t b = byte_id_[static_cast<unsigned char>(s[i + size_t(k)])];
          if (b >= 0)
            ids.push_back(b);
          else if (vocab_.unk_id >= 0)
            ids.push_back(vocab_.unk_id);
        }
      }
      i += size_t(len);
    }
    SymbolList sym;
    sym.reset(ids);
    std::string buf;
    run_merges(sym, [&](int32_t a, int32_t b, double* pr) -> int32_t {
      buf.assign(vocab_.tokens[size_t(a)]);
      buf.append(vocab_.tokens[size_t(b)]);
      const int32_t m = lookup(map_, buf);
      if (m < 0) return -1;
      *pr = vocab_.scores.empty() ? 0.0 : double(vocab_.scores[size_t(m)]);
      return m;
    });
    append_symbols(sym, out);
  }

 private:
  PieceMap map_;
  bool use_marker_ = false;
  std::array<int32_t, 256> byte_id_{};
  std::vector<std::string> decoded_;
  std::vector<uint8_t> is_byte_;
};

// ---------------------------------------------------------------------------------------------
// Byte-level BPE with ranked merges (GPT-2, Llama-3, Qwen2).
class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(Vocab v)
      : Tokenizer(std::move(v)), map_(build_piece_map(vocab_)), pre_(pre_tokenizer_from_name(vocab_.pre)) {
    int missing = 0, first_missing = -1;
    for (int b = 0; b < 256; ++b) {
      std::string c;
      utf8_append(c, byte_to_unicode(static_cast<unsigned char>(b)));
      byte_id_[size_t(b)] = lookup(map_, c);
      if (byte_id_[size_t(b)] < 0 && missing++ == 0) first_missing = b;
    }
    // Byte-level BPE spells every byte with one character of the GPT-2 alphabet: all 256 must
    // be tokens, or text holding the missing bytes cannot be encoded (issue 36).
    if (missing > 0)
      fail("byte-level BPE vocabulary lacks ", missing, " of the 256 byte-alphabet tokens (the first: byte 0x",
           "0123456789abcdef"[first_missing >> 4], "0123456789abcdef"[first_missing & 15],
           "): text with those bytes could not be encoded");
    merges_.reserve(vocab_.merges.size() * 2);
    for (size_t r = 0; r < vocab_.merges.size(); ++r) {
      const std::string& m = vocab_.merges[r];
      // "left right"; byte-level pieces never hold ' ', but try every space to be safe.
      bool ok = false;
      for (size_t sp = m.find(' '); sp != std::string::npos; sp = m.find(' ', sp + 1)) {
        const int32_t a = lookup(map_, std::string_view(m).substr(0, sp));
        const int32_t b = lookup(map_, std::string_view(m).substr(sp + 1));
        const int32_t c = lookup(map_, m.substr(0, sp) + m.substr(sp + 1));
        if (a < 0 || b < 0 || c < 0) continue;
        merges_.emplace(key(a, b), std::make_pair(int32_t(r), c));  // first (lowest rank) wins
        ok = true;
        break;
      }
      if (!ok)
        fail("BPE merge ", r, " '", text_excerpt(m, 64), "': its parts or their concatenation are not tokens of the ",
             vocab_.size(), "-token vocabulary");
    }
    decoded_.resize(vocab_.tokens.size());
    for (size_t i = 0; i < vocab_.tokens.size(); ++i) {
      const TokenType ty = type_of(vocab_, int32_t(i));
      if (ty == TokenType::Control || ty == TokenType::Unknown || ty == TokenType::Unused) continue;
      decoded_[i] = ty == TokenType::UserDefined ? vocab_.tokens[i] : bpe_alphabet_to_bytes(vocab_.tokens[i]);
    }
  }

  int32_t token_id(std::string_view piece) const override { return lookup(map_, piece); }

  std::string token_piece_bytes(int32_t /*prev*/, int32_t id) const override {
    if (id < 0 || id >= vocab_.size()) return {};
    return decoded_[size_t(id)];
  }

 protected:
  void encode_fragment(std::string_view text, bool /*first_or_after_special*/,
                       std::vector<int32_t>& out) const override {
    SymbolList sym;
    std::vector<int32_t> ids;
    for (std::string_view word : pretokenize(text, pre_)) {
      if (vocab_.ignore_merges) {
        const int32_t whole = lookup(map_, bytes_to_bpe_alphabet(word));
        if (whole >= 0) {
          out.push_back(whole);
          continue;
        }
      }
      ids.clear();
      for (char c : word) {
        const int32_t b = byte_id_[static_cast<unsigned char>(c)];
        if (b >= 0)
          ids.push_back(b);
        else if (vocab_.unk_id >= 0)
          ids.push_back(vocab_.unk_id);
      }
      sym.reset(ids);
      run_merges(sym, [&](int32_t a, int32_t b, double* pr) -> int32_t {
        auto it = merges_.find(key(a, b));
        if (it == merges_.end()) return -1;
        *pr = -double(it->second.first);
        return it->second.second;
      });
      append_symbols(sym, out);
    }
  }

 private:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  PieceMap map_;
  PreTokenizer pre_;
  std::array<int32_t, 256> byte_id_{};
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (a, b) -> (rank, merged)
  std::vector<std::string> decoded_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(Vocab v) : vocab_(std::move(v)) {
  const Vocab& w = vocab_;
  const int n = w.size();
  static const char* const kEndOfTurn[] = {"<|eot_id|>",    "<|im_end|>",    "<|end_of_text|>",
                                           "<|endoftext|>", "<|eom_id|>",    "<end_of_turn>",
                                           "<|end|>",       "</s>"};
  if (w.eos_id >= 0) eog_ids_.push_back(w.eos_id);
  // Special tokens matched in text: Control and UserDefined (never Byte/Normal/Unknown/Unused).
  specials_by_byte_.resize(256);
  for (int i = 0; i < n; ++i) {
    const std::string& p = w.tokens[size_t(i)];
    for (const char* e : kEndOfTurn)
      if (p == e) eog_ids_.push_back(i);
    const TokenType ty = type_of(w, i);
    if ((ty == TokenType::Control || ty == TokenType::UserDefined) && !p.empty())
      specials_by_byte_[static_cast<unsigned char>(p[0])].emplace_back(p, i);
  }
  for (auto& v : specials_by_byte_)
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  std::sort(eog_ids_.begin(), eog_ids_.end());
  eog_ids_.erase(std::unique(eog_ids_.begin(), eog_ids_.end()), eog_ids_.end());
}

std::unique_ptr<Tokenizer> Tokenizer::create(Vocab v) {
  const int n = v.size();
  if (n == 0) fail("vocabulary has no tokens");
  if (!v.scores.empty() && int(v.scores.size()) != n)
    fail("vocabulary has ", v.scores.size(), " scores for ", n, " tokens");
  if (!v.types.empty() && int(v.types.size()) != n)
    fail("vocabulary has ", v.types.size(), " token types for ", n, " tokens");
  for (auto [name, id] : {std::pair<const char*, int>{"bos", v.bos_id}, {"eos", v.eos_id},
                          {"unk", v.unk_id}, {"pad", v.pad_id}})
    if (id < -1 || id >= n) fail("vocabulary ", name, " id ", id, " is outside [0, ", n, ")");
  if (v.kind == VocabKind::Spm) return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(v)));
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(std::move(v)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  if (!parse_special) {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
    encode_fragment(text, true, out);
    return out;
  }
  return encode(text, add_bos, std::vector<std::pair<size_t, size_t>>{});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       const std::vector<std::pair<size_t, size_t>>& literal) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  bool after_special = true;
  size_t start = 0;
  size_t lit = 0;  // the first literal range not wholly before i
  for (size_t i = 0; i < text.size();) {
    while (lit < literal.size() && literal[lit].second <= i) ++lit;
    if (lit < literal.size() && literal[lit].first <= i) {  // inside a literal range: no specials
      i = literal[lit].second;
      continue;
    }
    const size_t next_literal = lit < literal.size() ? literal[lit].first : text.size();
    const auto& cands = specials_by_byte_[static_cast<unsigned char>(text[i])];
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (const auto& c : cands)
      if (i + c.first.size() <= next_literal && text.compare(i, c.first.size(), c.first) == 0) {
        hit = &c;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > start) {
      encode_fragment(text.substr(start, i - start), after_special, out);
    }
    out.push_back(hit->second);
    after_special = true;
    i += hit->first.size();
    start = i;
    // A fragment between specials follows a special; the first one started the text.
  }
  if (start < text.size()) encode_fragment(text.substr(start), after_special, out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    out += token_piece_bytes(prev, id);
    prev = id;
  }
  return out;
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

// ---------------------------------------------------------------------------------------------

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    const uint32_t cp = utf8_decode(s, i, &len);
    if (cp == 0xFFFD && len == 1) return false;
    i += size_t(len);
  }
  return true;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_piece_bytes(prev_, id);
  prev_ = id;
  return take_complete();
}

std::string StreamDecoder::take_complete() {
  std::string out;
  size_t i = 0;
  const size_t n = pending_.size();
  while (i < n) {
    const int want = utf8_seq_len(static_cast<unsigned char>(pending_[i]));
    if (want > 1 && i + size_t(want) > n) {
      // Incomplete at the end: hold it back if what we have so far are continuation bytes.
      bool prefix_ok = true;
      for (size_t k = i + 1; k < n; ++k)
        if ((static_cast<unsigned char>(pending_[k]) & 0xC0) != 0x80) prefix_ok = false;
      if (prefix_ok) break;
    }
    int len = 1;
    const uint32_t cp = utf8_decode(pending_, i, &len);
    if (cp == 0xFFFD && len == 1)
      out += "\xEF\xBF\xBD";  // an invalid byte becomes U+FFFD
    else
      out.append(pending_, i, size_t(len));
    i += size_t(len);
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
  pending_.clear();
  return out;
}

}  // namespace loom
