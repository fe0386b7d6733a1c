#include "server/http_framing.h"

#include <cctype>
#include <vector>

#include "core/error.h"
#include "core/json_bounded.h"

namespace loom::server {

namespace {

constexpr size_t kMaxChunkLine = 4096;
constexpr size_t kExcerpt = 40;

bool is_tchar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.':
    case '^': case '_': case '`': case '|': case '~': return true;
    default: return false;
  }
}

// A control character other than horizontal tab (RFC 9110 5.5: field values exclude them; obs-text
// bytes >= 0x80 are allowed).
bool is_bad_ctl(unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; }

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = char(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_list(std::string_view v) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= v.size()) {
    const size_t comma = v.find(',', start);
    const size_t end = comma == std::string_view::npos ? v.size() : comma;
    const std::string_view item = trim_ows(v.substr(start, end - start));
    if (!item.empty()) out.push_back(item);  // empty list elements are ignored (RFC 9110 5.6.1)
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// The lines of `text` (ending in LF, an optional CR before it removed). A CR anywhere else in a
// line stays in it (and is a control character the checks refuse).
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = nl + 1;
  }
  return lines;
}

// Checks one field line ("name: value"); returns "" or why it is malformed. *name (lower case)
// and *value (without surrounding whitespace) are set when it is well formed.
std::string check_field_line(std::string_view line, std::string* name, std::string_view* value) {
  if (!line.empty() && (line.front() == ' ' || line.front() == '\t'))
    return cat("a folded header line (obs-fold, a line starting with whitespace) is not accepted: '",
               text_excerpt(line, kExcerpt), "'");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos)
    return cat("a header line without a colon: '", text_excerpt(line, kExcerpt), "'");
  const std::string_view n = line.substr(0, colon);
  if (n.empty()) return cat("a header line with an empty field name: '", text_excerpt(line, kExcerpt), "'");
  for (unsigned char c : n)
    if (!is_tchar(c))
      return cat("the header field name '", text_excerpt(n, kExcerpt), "' holds a character not allowed in a name",
                 c == ' ' || c == '\t' ? " (whitespace before the colon)" : "");
  const std::string_view v = line.substr(colon + 1);
  for (unsigned char c : v)
    if (is_bad_ctl(c))
      return cat("the value of header '", text_excerpt(n, kExcerpt), "' holds the control character \\x",
                 "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
  *name = lower(n);
  *value = trim_ows(v);
  return {};
}

}  // namespace

HeadInfo check_request_head(std::string_view head, const FramingLimits& limits) {
  HeadInfo h;
  auto bad = [&h](int status, std::string message) {
    h.status = status;
    h.message = std::move(message);
    return h;
  };
  std::vector<std::string_view> lines = split_lines(head);
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return bad(400, "an empty request");
  const std::string_view request_line = lines[0];
  for (unsigned char c : request_line)
    if (is_bad_ctl(c) || c == '\t')
      return bad(400, cat("the request line holds a control character: '", text_excerpt(request_line, kExcerpt), "'"));
  const size_t sp = request_line.rfind(' ');
  const std::string_view version = sp == std::string_view::npos ? std::string_view() : request_line.substr(sp + 1);
  if (version.substr(0, 5) != "HTTP/")
    return bad(400, cat("the request line does not end in an HTTP version: '", text_excerpt(request_line, kExcerpt), "'"));
  const bool http10 = version == "HTTP/1.0";

  bool has_length = false, has_te = false;
  uint64_t length = 0;
  std::vector<std::string> codings;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::string name;
    std::string_view value;
    const std::string why = check_field_line(lines[i], &name, &value);
    if (!why.empty()) return bad(400, why);
    if (name == "content-length") {
      const std::vector<std::string_view> items = split_list(value);
      if (items.empty()) return bad(400, "an empty Content-Length");
      for (std::string_view item : items) {
        if (item.find_first_not_of("0123456789") != std::string_view::npos)
          return bad(400, cat("Content-Length '", text_excerpt(item, kExcerpt), "' is not a decimal number"));
        size_t z = 0;  // leading zeros do not count towards the digit limit
        while (z + 1 < item.size() && item[z] == '0') ++z;
        const std::string_view digits = item.substr(z);
        if (digits.size() > 18)
          return bad(413, cat("Content-Length ", text_excerpt(digits, kExcerpt), " is larger than the server's limit of ",
                              limits.max_body_bytes, " bytes"));
        uint64_t v = 0;
        for (char c : digits) v = v * 10 + uint64_t(c - '0');
        if (has_length && v != length)
          return bad(400, cat("the request has differing Content-Length values (", length, " and ", v, ")"));
        has_length = true;
        length = v;
      }
    } else if (name == "transfer-encoding") {
      has_te = true;
      for (std::string_view item : split_list(value)) codings.push_back(lower(item));
    } else if (name == "content-encoding") {
      for (std::string_view item : split_list(value))
        if (lower(item) != "identity")
          return bad(415, cat("Content-Encoding '", text_excerpt(item, kExcerpt),
                              "' is not supported: send the request body uncompressed (identity)"));
    } else if (name == "expect") {
      if (lower(value) == "100-continue") h.expect_continue = true;
    }
  }
  if (has_te) {
    if (http10) return bad(400, "Transfer-Encoding in an HTTP/1.0 request (its framing is faulty, RFC 9112 6.1)");
    if (has_length) return bad(400, "the request has both Transfer-Encoding and Content-Length");
    if (codings.empty()) return bad(400, "an empty Transfer-Encoding");
    int chunked = 0;
    for (const std::string& c : codings) {
      const std::string_view name = trim_ows(std::string_view(c).substr(0, c.find(';')));
      if (name != "chunked")
        return bad(501, cat("Transfer-Encoding '", text_excerpt(c, kExcerpt), "' is not supported (only chunked is)"));
      if (c.find(';') != std::string::npos)
        return bad(400, cat("Transfer-Encoding '", text_excerpt(c, kExcerpt), "': chunked takes no parameters"));
      ++chunked;
    }
    if (chunked > 1) return bad(400, "Transfer-Encoding names chunked more than once");
    h.framing = BodyFraming::kChunked;
    return h;
  }
  if (has_length) {
    if (length > limits.max_body_bytes)
      return bad(413, cat("the request body (Content-Length ", length, ") is larger than the server's limit of ",
                          limits.max_body_bytes, " bytes"));
    h.framing = length > 0 ? BodyFraming::kLength : BodyFraming::kNone;
    h.content_length = length;
  }
  return h;
}

void ChunkedDecoder::error(int status, std::string message) {
  state_ = State::kError;
  status_ = status;
  message_ = std::move(message);
}

size_t ChunkedDecoder::feed(std::string_view in, std::string* body) {
  size_t pos = 0;
  while (state_ == State::kMore) {
    if (part_ == Part::kSizeLine || part_ == Part::kTrailer) {
      const size_t nl = in.find('\n', pos);
      if (nl == std::string_view::npos) {
        const size_t pending = in.size() - pos;
        if (part_ == Part::kSizeLine && pending > kMaxChunkLine)
          error(400, cat("a chunk-size line longer than ", kMaxChunkLine, " bytes"));
        else if (part_ == Part::kTrailer && trailer_bytes_ + pending > lim_.max_header_bytes)
          error(431, cat("the trailer fields are larger than the server's limit of ", lim_.max_header_bytes, " bytes"));
        return pos;
      }
      std::string_view line = in.substr(pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      pos = nl + 1;
      if (part_ == Part::kTrailer) {
        if (line.empty()) {
          part_ = Part::kDone;
          state_ = State::kDone;
          return pos;
        }
        trailer_bytes_ += line.size() + 2;
        if (trailer_bytes_ > lim_.max_header_bytes) {
          error(431, cat("the trailer fields are larger than the server's limit of ", lim_.max_header_bytes, " bytes"));
          return pos;
        }
        std::string name;
        std::string_view value;
        const std::string why = check_field_line(line, &name, &value);
        if (!why.empty()) error(400, "in the trailer: " + why);
        continue;
      }
      if (line.size() > kMaxChunkLine) {
        error(400, cat("a chunk-size line longer than ", kMaxChunkLine, " bytes"));
        return pos;
      }
      size_t i = 0;
      while (i < line.size() && line[i] == '0') ++i;
      const bool had_zero = i > 0;
      uint64_t size = 0;
      int digits = 0;
      for (; i < line.size() && std::isxdigit(static_cast<unsigned char>(line[i])); ++i, ++digits) {
        if (digits >= 15) {  // 16 significant hex digits would pass 2^60: far beyond any body limit
          error(413, cat("a chunk size of more than 15 hex digits ('", text_excerpt(line, kExcerpt),
                         "') passes the server's body limit of ", lim_.max_body_bytes, " bytes"));
          return pos;
        }
        const char c = char(std::tolower(static_cast<unsigned char>(line[i])));
        size = size * 16 + uint64_t(c <= '9' ? c - '0' : c - 'a' + 10);
      }
      if (digits == 0 && !had_zero) {
        error(400, cat("the chunk size '", text_excerpt(line, kExcerpt), "' is not a hexadecimal number"));
        return pos;
      }
      // chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] ): ignored, but checked for shape.
      std::string_view rest = line.substr(i);
      while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
      if (!rest.empty()) {
        if (rest.front() != ';') {
          error(400, cat("the chunk-size line '", text_excerpt(line, kExcerpt), "' has bytes after the size"));
          return pos;
        }
        for (unsigned char c : rest)
          if (is_bad_ctl(c)) {
            error(400, "a chunk extension holds a control character");
            return pos;
          }
        ext_bytes_ += rest.size();
        if (ext_bytes_ > lim_.max_header_bytes) {
          error(400, cat("the chunk extensions are longer than ", lim_.max_header_bytes, " bytes in total"));
          return pos;
        }
      }
      if (size == 0) {
        part_ = Part::kTrailer;
        continue;
      }
      if (size > lim_.max_body_bytes || body->size() + size > lim_.max_body_bytes) {
        error(413, cat("the chunked request body (", body->size() + size, " bytes with the chunk of ", size,
                       ") is larger than the server's limit of ", lim_.max_body_bytes, " bytes"));
        return pos;
      }
      chunk_left_ = size;
      part_ = Part::kData;
    } else if (part_ == Part::kData) {
      const size_t take = size_t(std::min<uint64_t>(chunk_left_, in.size() - pos));
      body->append(in.data() + pos, take);
      pos += take;
      chunk_left_ -= take;
      if (chunk_left_ > 0) return pos;
      part_ = Part::kDataEnd;
    } else if (part_ == Part::kDataEnd) {
      if (pos >= in.size()) return pos;
      if (in[pos] == '\n') {
        pos += 1;
      } else if (in[pos] == '\r') {
        if (pos + 1 >= in.size()) return pos;
        if (in[pos + 1] != '\n') {
          error(400, "a chunk's data is longer than its chunk-size line says");
          return pos;
        }
        pos += 2;
      } else {
        error(400, "a chunk's data is longer than its chunk-size line says");
        return pos;
      }
      part_ = Part::kSizeLine;
    } else {
      return pos;
    }
  }
  return pos;
}

std::string head_with_length(std::string_view head, uint64_t n) {
  std::string out;
  out.reserve(head.size() + 32);
  bool first = true;
  for (std::string_view line : split_lines(head)) {
    if (line.empty()) continue;
    if (!first) {
      std::string name;
      std::string_view value;
      if (check_field_line(line, &name, &value).empty() && name == "transfer-encoding") continue;
    }
    first = false;
    out.append(line);
    out += "\r\n";
  }
  out += cat("Content-Length: ", n, "\r\n\r\n");
  return out;
}

}  // namespace loom::server
