// GGUF: the file parser (header, metadata, tensor infos), the model config and vocabulary read
// from it, and the weight views of a full load.
#include "fuzz_util.h"
#include "model/gguf.h"
#include "model/loader.h"
#include "model/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = loom::fuzz::write_scratch("m.gguf", data, size);
  loom::fuzz::expect_clean([&] {
    loom::GgufFile f(path);
    loom::fuzz::expect_clean([&] { (void)loom::gguf_model_config(f); });
    loom::fuzz::expect_clean([&] {
      auto tok = loom::Tokenizer::create(loom::gguf_vocab(f));
      (void)tok->decode(tok->encode("Hello, world! \xe2\x96\x81 12 <s>", true));
    });
  });
  loom::fuzz::expect_clean([&] { (void)loom::load_gguf_model(path); });
  return 0;
}
