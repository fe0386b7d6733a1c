// The OpenAI request parser of `loom serve`: the first byte picks the endpoint (even:
// completions, odd: chat), the rest is the body. Outcomes: a request, or ApiError with a 4xx
// status whose JSON error body serialises (strictly: invalid UTF-8 in it would throw).
#include "fuzz_util.h"
#include "server/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto ep = data[0] % 2 ? loom::server::Endpoint::kChat : loom::server::Endpoint::kCompletions;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  loom::fuzz::expect_clean([&] {
    try {
      (void)loom::server::parse_api_request(ep, body);
    } catch (const loom::server::ApiError& e) {
      if (e.status < 400 || e.status >= 500) {
        std::fprintf(stderr, "fuzz: status %d for a bad request\n", e.status);
        std::abort();
      }
      if (e.message.size() > 4096) {
        std::fprintf(stderr, "fuzz: %zu-byte error message\n", e.message.size());
        std::abort();
      }
      (void)loom::server::error_json(e).dump();  // throws on invalid UTF-8: escapes -> abort
    }
  });
  return 0;
}
