// llama2.c checkpoint: header validation and the weight layout of a full load.
#include "fuzz_util.h"
#include "model/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = loom::fuzz::write_scratch("model.bin", data, size);
  loom::fuzz::expect_clean([&] { (void)loom::load_llama2c_model(path); });
  loom::fuzz::expect_clean([&] { (void)loom::inspect_llama2c(path); });
  return 0;
}
