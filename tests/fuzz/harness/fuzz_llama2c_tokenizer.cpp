// llama2.c tokenizer.bin: the first two input bytes give the model's vocab_size (1..1024), the
// rest is the file; a Tokenizer built from it encodes and decodes fixed text.
#include "fuzz_util.h"
#include "model/tokenizer.h"
#include "model/vocab_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int vocab_size = 1 + int((data[0] | (data[1] << 8)) % 1024);
  const std::string path = loom::fuzz::write_scratch("tokenizer.bin", data + 2, size - 2);
  loom::fuzz::expect_clean([&] {
    auto tok = loom::Tokenizer::create(loom::load_llama2c_vocab(path, vocab_size));
    (void)tok->decode(tok->encode("Once upon a time, 12 \xc3\xa9", true));
  });
  return 0;
}
