// HF config.json: the parser and the config validation behind it.
#include "fuzz_util.h"
#include "model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  loom::fuzz::expect_clean([&] {
    const loom::HfConfig c = loom::parse_hf_config(text, "config.json");
    (void)c.config.param_count();
    (void)c.config.summary();
  });
  return 0;
}
