#include "model/vocab_io.h"

#include "core/error.h"

namespace loom {

Vocab load_llama2c_vocab(const std::string& path, int vocab_size) { fail("load_llama2c_vocab: not implemented yet"); }
void write_llama2c_vocab(const Vocab& v, const std::string& path) { fail("write_llama2c_vocab: not implemented yet"); }
std::string llama2c_vocab_bytes(const Vocab& v) { fail("llama2c_vocab_bytes: not implemented yet"); }
Vocab load_tokenizer_json(const std::string& path) { fail("load_tokenizer_json: not implemented yet"); }
Vocab parse_tokenizer_json(const std::string&, const std::string&, const std::string&) { fail("parse_tokenizer_json: not implemented yet"); }
std::string vocab_to_tokenizer_json(const Vocab& v) { fail("vocab_to_tokenizer_json: not implemented yet"); }
std::string vocab_to_tokenizer_config_json(const Vocab& v) { fail("not implemented yet"); }
Vocab synth_vocab(VocabKind kind, int size, uint64_t seed) { fail("synth_vocab: not implemented yet"); }
Vocab synth_bpe_vocab(int size, uint64_t seed, const std::string& pre) { fail("synth_bpe_vocab: not implemented yet"); }

}  // namespace loom
