#include "core/json_bounded.h"

#include <cstdio>
#include <vector>

#include "core/error.h"

namespace loom {

using nlohmann::json;

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when the bytes there are not
// one (overlong forms, surrogates and code points above U+10FFFF included).
size_t utf8_seq_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else return 0;
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

void append_hex_byte(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

const char* plural(size_t n, const char* one, const char* many) { return n == 1 ? one : many; }

}  // namespace

int json_text_depth(std::string_view text, int stop_above, size_t* at) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > max_depth) {
          max_depth = depth;
          if (at) *at = i;
          if (max_depth > stop_above) return max_depth;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return max_depth;
}

std::string text_excerpt(std::string_view s, size_t max_chars) {
  std::string out;
  size_t i = 0;
  while (i < s.size() && out.size() < max_chars) {
    const size_t n = utf8_seq_len(s, i);
    const auto c = static_cast<unsigned char>(s[i]);
    if (n == 0 || (n == 1 && (c < 0x20 || c == 0x7F))) {
      append_hex_byte(out, c);
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  if (i < s.size()) out += cat("... (", s.size(), " bytes)");
  return out;
}

std::string json_excerpt(const json& v, size_t max_chars) {
  switch (v.type()) {
    case json::value_t::string: {
      // The string as JSON text: its own quotes and escapes, capped.
      return cat('"', text_excerpt(v.get_ref<const std::string&>(), max_chars), '"');
    }
    case json::value_t::array:
    case json::value_t::object: {
      // Render breadth-limited and depth-limited by hand: dump() recurses once per level.
      std::string out;
      struct Frame {
        const json* node;
        json::const_iterator it;
        bool first;
      };
      std::vector<Frame> stack;
      bool cut = false;
      auto open = [&](const json& n) {
        out += n.is_array() ? '[' : '{';
        stack.push_back({&n, n.cbegin(), true});
      };
      open(v);
      while (!stack.empty()) {
        if (out.size() > max_chars) {
          cut = true;
          break;
        }
        Frame& f = stack.back();
        if (f.it == f.node->cend()) {
          out += f.node->is_array() ? ']' : '}';
          stack.pop_back();
          continue;
        }
        if (!f.first) out += ',';
        f.first = false;
        if (f.node->is_object()) {
          out += cat('"', text_excerpt(f.it.key(), max_chars), "\":");
        }
        const json& child = *f.it;
        ++f.it;
        if (child.is_array() || child.is_object()) open(child);
        else out += json_excerpt(child, max_chars);
      }
      if (!cut) return out;
      if (out.size() > max_chars) out.resize(max_chars);
      // Do not end inside a multi-byte sequence.
      while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
      if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
      const size_t n = v.size();
      return cat(out, "... (", v.is_array() ? "an array of " : "an object of ", n, " ",
                 v.is_array() ? plural(n, "entry", "entries") : plural(n, "key", "keys"), ")");
    }
    default:
      return v.dump();  // numbers, booleans, null: short
  }
}

json parse_json_bounded(std::string_view text, const std::string& what, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    fail(what, ": ", text.size(), " bytes of JSON, more than the limit of ", limits.max_bytes, " bytes");
  size_t at = 0;
  const int depth = json_text_depth(text, limits.max_depth, &at);
  if (depth > limits.max_depth)
    fail(what, ": JSON nested more than ", limits.max_depth, " levels deep (at byte ", at, ")");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    // nlohmann's message quotes the token it was reading ("last read: '...'"), which may be a
    // whole multi-megabyte string or hold the invalid bytes that made it fail.
    std::string msg = e.what();
    const std::string tag = "; last read: '";
    std::string quoted;
    if (const size_t k = msg.find(tag); k != std::string::npos) {
      std::string_view q(msg);
      q.remove_prefix(k + tag.size());
      if (!q.empty() && q.back() == '\'') q.remove_suffix(1);
      quoted = cat("; last read: '", text_excerpt(q, 40), "'");
      msg.resize(k);
    }
    fail(what, ": not valid JSON: ", text_excerpt(msg, 200), quoted);
  }
}

}  // namespace loom
