// HTTP/1.1 request framing for `loom serve`'s front end (http_front.h), as RFC 9112 states it:
// the checks on a request's head (request line and header fields) and the decoder of a chunked
// body. Pure functions over bytes, no sockets (unit tests and the fuzz harness call them).
//
// The head (check_request_head), each rule with its answer:
//   - a header line that starts with a space or tab (obs-fold, RFC 9112 5.2), a line without a
//     colon, a field name that is empty, holds whitespace (also before the colon: RFC 9112 5.1)
//     or characters outside RFC 9110's tchar, a value with a control character (NUL, bare CR,
//     ...; tab allowed): 400;
//   - Content-Length: a list of decimal numbers (RFC 9110 8.6: "42, 42" is one length); differing
//     values, in one line or over several: 400; more than 18 digits: 413;
//   - Transfer-Encoding: "chunked" (any case) is the only coding accepted; any other coding
//     ("gzip", "identity", "xchunked"): 501 (RFC 9112 6.1); chunked twice, or with parameters, or
//     an empty value: 400; with a Content-Length too (request smuggling): 400; in an HTTP/1.0
//     request (RFC 9112 6.1: faulty framing): 400;
//   - Content-Encoding other than identity: 415 (RFC 9110 15.5.16), before the body is read:
//     the server never inflates a body (a 1 MB gzip body inflated to 2 GB before; issue 36).
// Every message quotes at most a short excerpt of the client's bytes (text_excerpt).
//
// The chunked body (ChunkedDecoder), RFC 9112 7.1: chunk-size (hex, leading zeros allowed) with
// optional chunk extensions (ignored), CRLF, the data, CRLF; the last chunk (size 0), then trailer
// fields (checked as header lines and dropped, RFC 9112 7.1.2 lets a recipient discard them), then
// the empty line. A bare LF is accepted where CRLF ends a line (RFC 9112 2.2). The body is
// complete only when the empty line after the last chunk has arrived (no end-of-buffer
// heuristics: `0\r\n\r\n` inside a chunk's data is data). Bounds: the decoded body against
// max_body_bytes (413 at the chunk-size line that would pass it), a chunk-size line at most 4096
// bytes and all chunk extensions together at most max_header_bytes (400), trailers at most
// max_header_bytes (431).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom::server {

struct FramingLimits {
  size_t max_header_bytes = 64u << 10;
  size_t max_body_bytes = 8u << 20;
};

enum class BodyFraming { kNone, kLength, kChunked };

struct HeadInfo {
  int status = 0;            // 0: acceptable; else the status to answer before closing
  std::string message;       // why, for the error body (short; excerpts of the input only)
  BodyFraming framing = BodyFraming::kNone;
  uint64_t content_length = 0;  // kLength
  bool expect_continue = false; // "Expect: 100-continue"
};

// `head`: the request line and the header lines, with or without the empty line that ends them.
HeadInfo check_request_head(std::string_view head, const FramingLimits& limits);

// Decodes a chunked body incrementally: feed() the bytes after the head as they arrive.
class ChunkedDecoder {
 public:
  enum class State { kMore, kDone, kError };
  explicit ChunkedDecoder(FramingLimits limits) : lim_(limits) {}
  // Consumes what it can of `in` (the bytes not consumed by earlier calls), appending chunk data
  // to *body; returns the bytes consumed. Once done, nothing more is consumed (the rest of `in`
  // is the next request's); once failed, status() and message() say why.
  size_t feed(std::string_view in, std::string* body);
  State state() const { return state_; }
  int status() const { return status_; }
  const std::string& message() const { return message_; }

 private:
  enum class Part { kSizeLine, kData, kDataEnd, kTrailer, kDone };
  void error(int status, std::string message);
  FramingLimits lim_;
  Part part_ = Part::kSizeLine;
  State state_ = State::kMore;
  uint64_t chunk_left_ = 0;
  size_t ext_bytes_ = 0, trailer_bytes_ = 0;
  int status_ = 0;
  std::string message_;
};

// The head for a request whose chunked body was decoded: Transfer-Encoding lines dropped,
// "Content-Length: n" added; ends with the empty line. `head` as check_request_head accepted it.
std::string head_with_length(std::string_view head, uint64_t n);

}  // namespace loom::server
