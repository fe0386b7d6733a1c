// Loading a model and its vocabulary from any file format loom reads, and the pieces the
// format loaders (llama2c.h, gguf.h, safetensors.h) share.
//
// Formats (detected by load_model):
//  - a directory holding config.json: HF safetensors (model.safetensors, or shards listed by
//    model.safetensors.index.json);
//  - a file starting with the bytes "GGUF": GGUF v2/v3;
//  - a file named *.safetensors: HF safetensors, with config.json beside it;
//  - any other file: a llama2.c checkpoint.
// Every loader validates the whole file (header, every tensor's dtype, shape, offsets) before it
// returns; a bad file raises loom::Error naming the tensor or key with the expected and found
// values. Weight matrices are views into the memory mapping (f32/f16/bf16/q8_0 are all used
// directly); norm weights and biases are converted to f32 copies owned by the Model.
//
// Canonical tensor names (Model::tensors(), synth.h) are the GGUF ones without ".weight":
// token_embd, blk.N.attn_norm, blk.N.attn_q, ..., blk.N.attn_q.bias, ..., output_norm, output.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"
#include "model/vocab.h"
#include "model/weights.h"

namespace loom {

// "gguf", "safetensors" or "llama2c" for `path` (see the list above). Throws loom::Error when
// the path does not exist.
std::string detect_model_format(const std::string& path);

// Loads, validates and returns the model at `path` (file or directory).
std::shared_ptr<Model> load_model(const std::string& path);

// The vocabulary of the model at `model_path`. tokenizer_path, when not empty, names the file
// (tokenizer.json, a llama2.c tokenizer .bin, or a GGUF whose embedded vocabulary to use).
// When empty: a GGUF's embedded vocabulary; for safetensors tokenizer.json beside config.json
// (else a llama2.c tokenizer.bin, as older `loom synth` outputs carry for Spm vocabularies); for
// llama2.c tokenizer.bin or tok*.bin beside the checkpoint; else an error asking for --tokenizer.
// The vocabulary must not be larger than the model's vocab_size (ids past the embedding). It
// may be smaller: HF checkpoints pad the embedding (Qwen2.5-0.5B: 151936 rows for 151665
// tokens) and the padding rows are never produced by encode; decode yields "" for them.
Vocab load_vocab(const std::string& model_path, const std::string& tokenizer_path);

// One tensor as a file stores it (for `loom info` and the loaders).
struct FileTensor {
  std::string name;            // as in the file
  std::string dtype;           // as the file names it: "F32", "BF16", "Q8_0"...
  std::vector<int64_t> shape;  // outermost first ([rows, cols] for a matrix)
  int64_t bytes = 0;
  int64_t elements() const;
};

// What a model file holds, without building a Model (for `loom info`).
struct ModelFileInfo {
  std::string format;     // "gguf", "safetensors", "llama2c"
  std::vector<std::string> files;
  std::vector<FileTensor> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;  // key, short value text
};
ModelFileInfo inspect_model_file(const std::string& path);

// ---- for the format loaders ----

// A tensor located in a mapped file, with the dtype loom uses for it.
struct RawTensor {
  std::string name;            // the file's name, for messages
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // outermost first
  const uint8_t* data = nullptr;
  int64_t bytes = 0;
};

// Finds a tensor by canonical name (see above); returns nullptr when it is absent and not
// required, throws loom::Error naming the file's tensor name when it is absent and required.
using TensorFinder = std::function<const RawTensor*(const std::string& canonical, bool required)>;

// Fills m.tok_embd, m.layers, m.out_norm and m.output from `find`, checking every shape against
// m.config (which must be validated already). Matrices become views of the bytes; vectors are
// converted to f32 copies. The output matrix is tok_embd when m.config.tied_embeddings.
void fill_model_weights(Model& m, const TensorFinder& find);

// Throws loom::Error when `tensor` is named prefix + N + ... with N >= n_layers (a layer count
// `key` that disagrees with the file's tensors).
void check_layer_index(const std::string& tensor, const std::string& prefix, int n_layers, const std::string& key);

// Shape text "[a, b]" for messages.
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace loom
