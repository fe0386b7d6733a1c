// tokenizer.json (+ tokenizer_config.json after the first NUL byte, if any), bounded by a model
// vocabulary of 4096, then a Tokenizer built from the result encoding and decoding fixed text.
#include <cstring>

#include "fuzz_util.h"
#include "model/tokenizer.h"
#include "model/vocab_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* p = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(p, 0, size);
  const size_t split = nul ? size_t(static_cast<const char*>(nul) - p) : size;
  const std::string tj(p, split), cfg = nul ? std::string(p + split + 1, size - split - 1) : std::string();
  loom::fuzz::expect_clean([&] {
    auto tok = loom::Tokenizer::create(loom::parse_tokenizer_json(tj, cfg, "tokenizer.json", 4096));
    const auto ids = tok->encode("Hello, world! \xe2\x96\x81 12 <s> caf\xc3\xa9", true);
    (void)tok->decode(ids);
  });
  return 0;
}
