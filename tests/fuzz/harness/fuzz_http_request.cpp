// The front end's request framing (server/http_framing.h): any bytes as a request. The head
// checks and the chunked decoder are pure functions that never throw; the decoder fed the body in
// pieces (their size from the first byte) must end in the same state, body and consumed count as
// fed whole, and a decoded body never passes the limit.
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "server/http_framing.h"

namespace {

struct Fed {
  loom::server::ChunkedDecoder::State state;
  int status = 0;
  std::string body;
  size_t consumed = 0;
};

Fed feed(std::string_view wire, size_t step, const loom::server::FramingLimits& lim) {
  loom::server::ChunkedDecoder d(lim);
  Fed out;
  std::string pending;
  size_t fed = 0;
  while (d.state() == loom::server::ChunkedDecoder::State::kMore && fed < wire.size()) {
    const size_t n = std::min(step, wire.size() - fed);
    pending.append(wire.substr(fed, n));
    fed += n;
    const size_t used = d.feed(pending, &out.body);
    out.consumed += used;
    pending.erase(0, used);
  }
  out.state = d.state();
  out.status = d.status();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_clean([&] {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const loom::server::FramingLimits lim{4096, 1 << 16};
    size_t end = in.find("\r\n\r\n");
    end = end == std::string_view::npos ? in.size() : end + 4;
    const loom::server::HeadInfo h = loom::server::check_request_head(in.substr(0, end), lim);
    if (h.status != 0 && h.message.size() > 400) {
      std::fprintf(stderr, "fuzz: a %zu-byte framing error message\n", h.message.size());
      std::abort();
    }
    // The body as chunked, whatever the head said (the decoder sees any bytes).
    const std::string_view body = in.substr(end);
    const Fed whole = feed(body, body.size() + 1, lim);
    const Fed pieces = feed(body, size > 0 ? size_t(data[0] % 7) + 1 : 1, lim);
    if (whole.state != pieces.state || whole.status != pieces.status ||
        (whole.state == loom::server::ChunkedDecoder::State::kDone &&
         (whole.body != pieces.body || whole.consumed != pieces.consumed))) {
      std::fprintf(stderr, "fuzz: chunked decoding depends on how the bytes arrive\n");
      std::abort();
    }
    if (whole.body.size() > lim.max_body_bytes) {
      std::fprintf(stderr, "fuzz: a decoded body past the limit\n");
      std::abort();
    }
    if (h.status == 0 && h.framing == loom::server::BodyFraming::kChunked &&
        whole.state == loom::server::ChunkedDecoder::State::kDone)
      (void)loom::server::head_with_length(in.substr(0, end), whole.body.size());
  });
  return 0;
}
