// Model catalog of the simulator: the shapes of well-known models (from their published HF
// config.json), or any config.json / GGUF loom can read. Only shapes matter to the simulator;
// no weight is loaded.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace loom::sim {

struct CatalogModel {
  std::string name;  // catalog key, lower case: "llama-3-70b"
  std::string hf_id;  // where the shapes come from
  ModelConfig config;
};

const std::vector<CatalogModel>& model_catalog();

// A model by catalog name (case-insensitive, aliases like "llama-70b", "llama-3.3-70b"), or a
// path: a directory or file named config.json (HF) or a GGUF file. Throws loom::Error listing the
// known names when nothing matches.
ModelConfig find_model(const std::string& name_or_path);

// Reads the shape keys of an HF config.json (llama / mistral / qwen2 / qwen3 families).
ModelConfig model_config_from_hf_json(const std::string& path);

// Parameter bytes at `bytes_per_param` for the matrices and 2 bytes for norms (ModelConfig
// counts both as parameters; norms are negligible).
double model_weight_bytes(const ModelConfig& c, double bytes_per_param);

}  // namespace loom::sim
