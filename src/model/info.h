// `loom info`: what a model file holds, for any format loom loads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/loader.h"

namespace loom {

struct ModelSummary {
  std::string path;
  std::string format;  // "gguf", "safetensors", "llama2c"
  ModelConfig config;
  ModelFileInfo file;
  int64_t n_tensors = 0;
  int64_t n_params = 0;      // elements of every weight tensor in the file
  int64_t weight_bytes = 0;  // bytes of every weight tensor in the file
  struct DTypeShare {
    std::string dtype;  // as the file names it ("BF16", "Q8_0")
    int64_t tensors = 0, params = 0, bytes = 0;
  };
  std::vector<DTypeShare> dtypes;  // sorted by bytes, largest first
};

// Loads (validating everything) and summarises the model at `path`.
ModelSummary summarize_model(const std::string& path);
// Human-readable text; with list_tensors, one line per tensor and every metadata key.
std::string format_model_summary(const ModelSummary& s, bool list_tensors);

}  // namespace loom
