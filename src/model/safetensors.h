// safetensors: u64 little-endian header length N, N bytes of JSON {name: {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the byte buffer; offsets are
// relative to the buffer. loom reads dtypes F32, F16 and BF16. A model is one file or shards
// listed by model.safetensors.index.json ({"weight_map": {tensor: file}}), with config.json
// (hf_config.h) beside them.
//
// The reader validates the header length against the file, the JSON, every entry's dtype, shape
// (size == product of the shape * element size) and offsets (in range, not overlapping).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"
#include "model/loader.h"
#include "model/weights.h"

namespace loom {

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  // name -> tensor (data points into the mapping)
  const std::map<std::string, RawTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::shared_ptr<const MappedFile> mapping() const { return file_; }
  // The dtype names as the file writes them ("BF16"), by tensor name.
  const std::map<std::string, std::string>& dtype_names() const { return dtype_names_; }

 private:
  std::string path_;
  std::shared_ptr<const MappedFile> file_;
  std::map<std::string, RawTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, std::string> dtype_names_;
};

// "F32", "F16", "BF16" for the dtypes safetensors can hold; throws loom::Error for Q8_0.
std::string safetensors_dtype_name(DType t);

// Streams one safetensors file: declare every tensor (shape outermost first), begin(), then
// write each tensor's bytes in declaration order, then finish(). The header is JSON with the
// tensors' keys sorted, "__metadata__" {"format": "pt"}, padded with spaces so that the buffer
// starts at a multiple of 8 bytes.
class SafetensorsWriter {
 public:
  ~SafetensorsWriter();
  void add_tensor(const std::string& name, std::vector<int64_t> shape, DType dtype);
  void begin(const std::string& path);
  void write(const void* bytes, size_t n);
  void finish();

 private:
  struct Pending {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype;
    uint64_t bytes, offset;
  };
  std::vector<Pending> tensors_;
  uint64_t total_ = 0;
  std::string path_;
  void* file_ = nullptr;
  size_t current_ = 0;
  uint64_t current_done_ = 0;
};

// Model files of a safetensors model: `path` is a directory (model.safetensors.index.json, or
// model.safetensors, or the only *.safetensors there) or a *.safetensors file. Returns the
// directory holding config.json through *dir.
std::vector<std::string> safetensors_model_files(const std::string& path, std::string* dir);

// Loads an HF Llama/Mistral/Qwen2 checkpoint (see loader.h for the contract).
std::shared_ptr<Model> load_safetensors_model(const std::string& path);

}  // namespace loom
