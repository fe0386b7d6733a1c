#include "model/llama2c.h"

#include <climits>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/mmap_file.h"

namespace loom {

namespace {

// The f32 arrays of a checkpoint in file order: canonical name (or "" for the legacy freq_cis
// block), shape. Per-layer arrays are stored as [layers, ...] blocks.
struct Llama2cArray {
  std::string name;
  std::vector<int64_t> shape;
  int64_t elements() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

std::vector<Llama2cArray> llama2c_arrays(const ModelConfig& c, bool shared) {
  const int64_t d = c.d_model, L = c.n_layers, kv = c.kv_dim(), f = c.ffn_dim, v = c.vocab_size;
  std::vector<Llama2cArray> a = {
      {"token_embedding", {v, d}}, {"rms_att", {L, d}},  {"wq", {L, d, d}},       {"wk", {L, kv, d}},
      {"wv", {L, kv, d}},          {"wo", {L, d, d}},    {"rms_ffn", {L, d}},     {"w1", {L, f, d}},
      {"w2", {L, d, f}},           {"w3", {L, f, d}},    {"rms_final", {d}},
      {"freq_cis_real", {int64_t(c.max_seq_len), c.head_dim / 2}},
      {"freq_cis_imag", {int64_t(c.max_seq_len), c.head_dim / 2}}};
  if (!shared) a.push_back({"wcls", {v, d}});
  return a;
}

void read_header(const MappedFile& f, int32_t h[7]) {
  if (int64_t(f.size()) < kLlama2cHeaderBytes)
    fail("llama2.c checkpoint '", f.path(), "': ", f.size(), " bytes, shorter than the ", kLlama2cHeaderBytes,
         "-byte header");
  std::memcpy(h, f.data(), kLlama2cHeaderBytes);
}

}  // namespace

ModelConfig llama2c_config(const int32_t h[7], bool* shared_classifier) {
  static const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    const bool ok = i == 5 ? (h[i] != 0 && h[i] != INT32_MIN) : h[i] > 0;
    if (!ok) fail("llama2.c header: ", names[i], " = ", h[i], " (must be ", i == 5 ? "non-zero" : "positive", ")");
  }
  if (h[0] > (1 << 20) || h[1] > (1 << 22) || h[2] > 4096 || h[6] > (1 << 24) ||
      h[5] > (1 << 24) || h[5] < -(1 << 24))
    fail("llama2.c header: dim ", h[0], ", hidden_dim ", h[1], ", n_layers ", h[2], ", seq_len ", h[6],
         " are implausibly large (not a llama2.c checkpoint?)");
  ModelConfig c;
  c.arch = "llama";
  c.d_model = h[0];
  c.ffn_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.vocab_size = h[5] < 0 ? -h[5] : h[5];
  c.max_seq_len = h[6];
  if (c.d_model % c.n_heads != 0)
    fail("llama2.c header: n_heads = ", c.n_heads, " does not divide dim = ", c.d_model);
  c.head_dim = c.d_model / c.n_heads;
  c.rms_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_style = RopeStyle::Interleaved;
  c.tied_embeddings = h[5] > 0;
  c.bos_id = 1;
  c.eos_id = 2;
  c.eos_ids = {2};
  c.validate();
  if (shared_classifier) *shared_classifier = c.tied_embeddings;
  return c;
}

int64_t llama2c_file_bytes(const ModelConfig& c, bool shared_classifier) {
  int64_t n = 0;
  for (auto& a : llama2c_arrays(c, shared_classifier)) n += a.elements();
  return kLlama2cHeaderBytes + n * 4;
}

std::shared_ptr<Model> load_llama2c_model(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  int32_t h[7];
  read_header(*file, h);
  bool shared = true;
  auto m = std::make_shared<Model>();
  try {
    m->config = llama2c_config(h, &shared);
  } catch (const Error& e) {
    fail("llama2.c checkpoint '", path, "': ", e.what());
  }
  m->path = path;
  m->format = "llama2c";
  const ModelConfig& c = m->config;
  const int64_t expect = llama2c_file_bytes(c, shared);
  if (int64_t(file->size()) != expect)
    fail("llama2.c checkpoint '", path, "': expected ", expect, " bytes for the header's shapes (",
         shared ? "shared" : "separate", " classifier), found ", file->size());
  m->storage.push_back(file);

  // Offsets of the arrays, in floats after the header.
  std::map<std::string, const float*> at;
  const float* p = reinterpret_cast<const float*>(file->data() + kLlama2cHeaderBytes);
  for (auto& a : llama2c_arrays(c, shared)) {
    at[a.name] = p;
    p += a.elements();
  }
  const int64_t d = c.d_model, kv = c.kv_dim(), f = c.ffn_dim, v = c.vocab_size;
  auto mat = [](const float* base, int64_t rows, int64_t cols) {
    WeightView w;
    w.data = base;
    w.dtype = DType::F32;
    w.rows = rows;
    w.cols = cols;
    w.row_stride = cols * 4;
    return w;
  };
  m->tok_embd = mat(at["token_embedding"], v, d);
  m->layers.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto& L = m->layers[size_t(l)];
    L.attn_norm = m->own_f32(at["rms_att"] + l * d, d);
    L.wq = mat(at["wq"] + l * d * d, d, d);
    L.wk = mat(at["wk"] + l * kv * d, kv, d);
    L.wv = mat(at["wv"] + l * kv * d, kv, d);
    L.wo = mat(at["wo"] + l * d * d, d, d);
    L.ffn_norm = m->own_f32(at["rms_ffn"] + l * d, d);
    L.w_gate = mat(at["w1"] + l * f * d, f, d);
    L.w_down = mat(at["w2"] + l * d * f, d, f);
    L.w_up = mat(at["w3"] + l * f * d, f, d);
  }
  m->out_norm = m->own_f32(at["rms_final"], d);
  m->output = shared ? m->tok_embd : mat(at["wcls"], v, d);
  return m;
}

ModelFileInfo inspect_llama2c(const std::string& path) {
  auto m = load_llama2c_model(path);  // validates
  ModelFileInfo info;
  info.format = "llama2c";
  info.files = {path};
  const bool shared = m->config.tied_embeddings;
  for (auto& a : llama2c_arrays(m->config, shared)) {
    if (a.name.rfind("freq_cis", 0) == 0) continue;  // legacy RoPE table, not a weight
    FileTensor t;
    t.name = a.name;
    t.dtype = "F32";
    t.shape = a.shape;
    t.bytes = a.elements() * 4;
    info.tensors.push_back(std::move(t));
  }
  const int32_t* h = reinterpret_cast<const int32_t*>(static_cast<const MappedFile*>(m->storage[0].get())->data());
  static const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) info.metadata.emplace_back(names[i], std::to_string(h[i]));
  return info;
}

}  // namespace loom
