#include "model/loader.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "core/error.h"
#include "core/mmap_file.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/llama2c.h"
#include "model/safetensors.h"
#include "model/vocab_io.h"

namespace loom {

namespace fs = std::filesystem;

int64_t FileTensor::elements() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + "]";
}

void fill_model_weights(Model& m, const TensorFinder& find) {
  const ModelConfig& c = m.config;
  auto check_shape = [](const RawTensor& t, const std::vector<int64_t>& want) {
    if (t.shape != want)
      fail("tensor '", t.name, "': expected shape ", shape_text(want), " (outermost first), found ",
           shape_text(t.shape));
  };
  auto matrix = [&](const std::string& canonical, int64_t rows, int64_t cols, bool required) -> WeightView {
    const RawTensor* t = find(canonical, required);
    if (!t) return {};
    check_shape(*t, {rows, cols});
    return make_view(t->name, t->data, t->bytes, t->dtype, rows, cols);
  };
  std::vector<float> tmp;
  auto vec = [&](const std::string& canonical, int64_t n, bool required) -> WeightView {
    const RawTensor* t = find(canonical, required);
    if (!t) return {};
    check_shape(*t, {n});
    if (n % dtype_block_elems(t->dtype) != 0 || t->bytes != dtype_row_bytes(t->dtype, n))
      fail("tensor '", t->name, "': expected ", dtype_row_bytes(t->dtype, n), " bytes for [", n, "] ",
           dtype_name(t->dtype), ", found ", t->bytes);
    tmp.resize(size_t(n));
    dequantize_row(t->dtype, t->data, tmp.data(), n);
    return m.own_f32(tmp.data(), n);
  };
  const int64_t d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), f = c.ffn_dim, v = c.vocab_size;
  m.tok_embd = matrix("token_embd", v, d, true);
  // Grown layer by layer: a corrupt layer count fails at the first missing tensor instead of
  // allocating for it.
  m.layers.clear();
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = cat("blk.", l, ".");
    LayerWeights L;
    L.attn_norm = vec(p + "attn_norm", d, true);
    L.wq = matrix(p + "attn_q", q, d, true);
    L.wk = matrix(p + "attn_k", kv, d, true);
    L.wv = matrix(p + "attn_v", kv, d, true);
    L.wo = matrix(p + "attn_output", d, q, true);
    if (c.qkv_bias) {
      L.bq = vec(p + "attn_q.bias", q, true);
      L.bk = vec(p + "attn_k.bias", kv, true);
      L.bv = vec(p + "attn_v.bias", kv, true);
    }
    L.ffn_norm = vec(p + "ffn_norm", d, true);
    L.w_gate = matrix(p + "ffn_gate", f, d, true);
    L.w_up = matrix(p + "ffn_up", f, d, true);
    L.w_down = matrix(p + "ffn_down", d, f, true);
    m.layers.push_back(L);
  }
  m.out_norm = vec("output_norm", d, true);
  m.output = c.tied_embeddings ? m.tok_embd : matrix("output", v, d, true);
}

void check_layer_index(const std::string& tensor, const std::string& prefix, int n_layers, const std::string& key) {
  if (tensor.compare(0, prefix.size(), prefix) != 0) return;
  int64_t layer = 0;
  size_t i = prefix.size();
  if (i >= tensor.size() || !std::isdigit(static_cast<unsigned char>(tensor[i]))) return;
  for (; i < tensor.size() && std::isdigit(static_cast<unsigned char>(tensor[i])) && layer < (1 << 30); ++i)
    layer = layer * 10 + (tensor[i] - '0');
  if (layer >= n_layers)
    fail("tensor '", tensor, "' belongs to layer ", layer, " but ", key, " = ", n_layers, " (expected layers 0 to ",
         n_layers - 1, ")");
}

std::string detect_model_format(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (file_exists((fs::path(path) / "config.json").string())) return "safetensors";
    fail("'", path, "' is a directory without config.json (expected an HF safetensors model directory)");
  }
  if (!fs::exists(path, ec)) fail("model '", path, "' does not exist");
  // A FIFO or a device is refused here, before anything blocks on it or reads it.
  ::close(open_regular_file(path, "model"));
  if (read_file_head(path, 4) == "GGUF") return "gguf";
  if (fs::path(path).extension() == ".safetensors") return "safetensors";
  return "llama2c";
}

std::shared_ptr<Model> load_model(const std::string& path) {
  const std::string fmt = detect_model_format(path);
  if (fmt == "gguf") return load_gguf_model(path);
  if (fmt == "safetensors") return load_safetensors_model(path);
  return load_llama2c_model(path);
}

namespace {

bool starts_with_gguf(const std::string& path) { return read_file_head(path, 4) == "GGUF"; }

Vocab vocab_from_file(const std::string& path, int vocab_size) {
  if (!file_exists(path)) fail("tokenizer '", path, "' does not exist");
  ::close(open_regular_file(path, "tokenizer"));
  if (starts_with_gguf(path)) return gguf_vocab(GgufFile(path));
  if (fs::path(path).extension() == ".json") return load_tokenizer_json(path, vocab_size);
  return load_llama2c_vocab(path, vocab_size);
}

}  // namespace

Vocab load_vocab(const std::string& model_path, const std::string& tokenizer_path) {
  const std::string fmt = detect_model_format(model_path);
  ModelConfig config;
  std::unique_ptr<GgufFile> gguf;
  if (fmt == "gguf") {
    gguf = std::make_unique<GgufFile>(model_path);
    config = gguf_model_config(*gguf);
  } else {
    config = load_model(model_path)->config;
  }
  std::string tok = tokenizer_path;
  Vocab v;
  if (!tok.empty()) {
    v = vocab_from_file(tok, config.vocab_size);
  } else if (fmt == "gguf") {
    tok = model_path;
    v = gguf_vocab(*gguf);
  } else {
    std::error_code ec;
    const fs::path dir = fs::is_directory(model_path, ec) ? fs::path(model_path) : fs::path(model_path).parent_path();
    std::vector<std::string> candidates;
    if (fmt == "safetensors") {
      candidates = {(dir / "tokenizer.json").string(), (dir / "tokenizer.bin").string()};
    } else {
      candidates.push_back((dir / "tokenizer.bin").string());
      std::vector<std::string> tok_bins;
      for (auto& e : fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("tok", 0) == 0 && e.path().extension() == ".bin") tok_bins.push_back(e.path().string());
      }
      std::sort(tok_bins.begin(), tok_bins.end());
      // Prefer the one named for the vocabulary size (tok512.bin for a 512-token model).
      std::stable_partition(tok_bins.begin(), tok_bins.end(), [&](const std::string& p) {
        return fs::path(p).filename().string() == cat("tok", config.vocab_size, ".bin");
      });
      candidates.insert(candidates.end(), tok_bins.begin(), tok_bins.end());
    }
    for (auto& c : candidates)
      if (file_exists(c)) {
        tok = c;
        break;
      }
    if (tok.empty())
      fail("no tokenizer found beside model '", model_path, "' (looked for ",
           fmt == "safetensors" ? "tokenizer.json, tokenizer.bin" : "tokenizer.bin, tok*.bin",
           "); pass one with --tokenizer");
    v = vocab_from_file(tok, config.vocab_size);
  }
  if (v.size() > config.vocab_size)
    fail("tokenizer '", tok, "' has ", v.size(), " tokens but model '", model_path, "' has vocab_size ",
         config.vocab_size, " (token ids would index past the embedding)");
  if (v.size() == 0) fail("tokenizer '", tok, "' has no tokens");
  // Smaller is how padded vocabularies look (Qwen2.5: 151,665 tokens for 151,936 rows), but ids
  // past the tokenizer decode to nothing: a gap wider than padding is the wrong tokenizer.
  const int gap = config.vocab_size - v.size();
  const int padding = std::max(256, config.vocab_size / 64);
  if (gap > padding)
    fail("tokenizer '", tok, "' has ", v.size(), " tokens but model '", model_path, "' has vocab_size ",
         config.vocab_size, ": ids ", v.size(), "..", config.vocab_size - 1,
         " would decode to nothing (a padded vocabulary leaves at most ", padding, " ids unused)");
  return v;
}

ModelFileInfo inspect_model_file(const std::string& path) {
  const std::string fmt = detect_model_format(path);
  if (fmt == "llama2c") return inspect_llama2c(path);
  load_model(path);  // validates everything
  ModelFileInfo info;
  info.format = fmt;
  if (fmt == "gguf") {
    GgufFile f(path);
    info.files = {path};
    for (auto& [k, v] : f.kvs()) info.metadata.emplace_back(k, v.short_text());
    for (auto& t : f.tensors()) {
      FileTensor ft;
      ft.name = t.name;
      ft.dtype = ggml_type_name(t.ggml_type);
      for (auto it = t.dims.rbegin(); it != t.dims.rend(); ++it) ft.shape.push_back(int64_t(*it));
      ft.bytes = int64_t(t.bytes);
      info.tensors.push_back(std::move(ft));
    }
    return info;
  }
  std::string dir;
  info.files = safetensors_model_files(path, &dir);
  const HfConfig hc = load_hf_config((fs::path(dir) / "config.json").string());
  info.metadata.emplace_back("architectures", hc.architecture);
  if (!hc.torch_dtype.empty()) info.metadata.emplace_back("torch_dtype", hc.torch_dtype);
  for (auto& file : info.files) {
    SafetensorsFile sf(file);
    for (auto& [name, t] : sf.tensors()) {
      FileTensor ft;
      ft.name = name;
      ft.dtype = sf.dtype_names().at(name);
      ft.shape = t.shape;
      ft.bytes = t.bytes;
      info.tensors.push_back(std::move(ft));
    }
  }
  return info;
}

}  // namespace loom
