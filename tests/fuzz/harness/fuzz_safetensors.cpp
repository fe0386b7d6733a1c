// safetensors: the header parser of one file, then a full load of a model folder holding it
// beside a fixed, valid config.json (the tiny synthetic shape), which checks every tensor
// against the config.
#include "fuzz_util.h"
#include "model/loader.h"
#include "model/safetensors.h"

namespace {
const char* kConfig = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
  "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
  "vocab_size": 300, "max_position_embeddings": 64, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"})";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool init = [] {
    const std::string c(kConfig);
    loom::fuzz::write_scratch("config.json", reinterpret_cast<const uint8_t*>(c.data()), c.size());
    return true;
  }();
  (void)init;
  const std::string path = loom::fuzz::write_scratch("model.safetensors", data, size);
  loom::fuzz::expect_clean([&] { loom::SafetensorsFile f(path); });
  loom::fuzz::expect_clean([&] { (void)loom::load_safetensors_model(loom::fuzz::scratch_dir()); });
  return 0;
}
