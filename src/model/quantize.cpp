#include "model/quantize.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "model/gguf.h"
#include "model/loader.h"
#include "model/synth.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

struct SchemeDef {
  const char* name;
  DType base;
  uint32_t file_type;  // llama_ftype
  bool k_mix;
};
// llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q4_1 3, MOSTLY_Q8_0 7, MOSTLY_Q5_0 8,
// MOSTLY_Q4_K_M 15, MOSTLY_Q5_K_M 17, MOSTLY_Q6_K 18, MOSTLY_BF16 32.
const SchemeDef kSchemes[] = {
    {"q4_k_m", DType::Q4_K, 15, true}, {"q5_k_m", DType::Q5_K, 17, true}, {"q6_k", DType::Q6_K, 18, false},
    {"q8_0", DType::Q8_0, 7, false},   {"q4_0", DType::Q4_0, 2, false},   {"q4_1", DType::Q4_1, 3, false},
    {"q5_0", DType::Q5_0, 8, false},   {"f16", DType::F16, 1, false},     {"bf16", DType::BF16, 32, false},
    {"f32", DType::F32, 0, false},
};

std::string lower(std::string_view s) {
  std::string r(s);
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return r;
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The layer of "blk.N.<...>", or -1.
int layer_of(const std::string& name) {
  if (name.compare(0, 4, "blk.") != 0) return -1;
  int l = 0;
  size_t i = 4;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && l < (1 << 20); ++i) l = l * 10 + (name[i] - '0');
  return l;
}

// llama-quantize's use_more_bits(i, n): the layers of a K mix that get more bits.
bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

}  // namespace

std::vector<std::string> quant_scheme_names() {
  std::vector<std::string> out;
  for (const SchemeDef& d : kSchemes) out.push_back(d.name);
  return out;
}

bool is_quant_scheme(std::string_view name) {
  const std::string s = lower(name);
  for (const SchemeDef& d : kSchemes)
    if (s == d.name) return true;
  return false;
}

QuantScheme parse_quant_scheme(std::string_view name) {
  const std::string s = lower(name);
  for (const SchemeDef& d : kSchemes)
    if (s == d.name) return QuantScheme{d.name, d.base, d.file_type, d.k_mix};
  std::string names;
  for (const SchemeDef& d : kSchemes) names += cat(names.empty() ? "" : ", ", d.name);
  fail("unknown type '", name, "' (expected one of ", names, ")");
}

DType quant_scheme_tensor_type(const QuantScheme& s, const std::string& name, int64_t cols, int n_layers, bool tied) {
  DType t = s.base;
  if (!dtype_is_quantized(t)) return t;
  const bool classifier = name == "output.weight" || (tied && name == "token_embd.weight");
  if (classifier) {
    if (t != DType::Q8_0) t = DType::Q6_K;
  } else if (s.k_mix) {
    const int l = layer_of(name);
    if ((ends_with(name, "attn_v.weight") || ends_with(name, "ffn_down.weight")) && l >= 0 && more_bits(l, n_layers))
      t = DType::Q6_K;
  }
  // Rows a type cannot hold whole: llama-quantize's fallbacks.
  if (cols % dtype_block_elems(t) != 0) {
    switch (t) {
      case DType::Q4_K: t = DType::Q5_0; break;
      case DType::Q6_K: t = DType::Q8_0; break;
      case DType::Q5_K:
        fail("tensor '", name, "': rows of ", cols, " values are not whole Q5_K super-blocks of 256, and the Q5_1 ",
             "llama-quantize falls back to is not a type loom reads (choose q4_k_m or q6_k)");
      default: break;
    }
    if (cols % dtype_block_elems(t) != 0) t = DType::F16;
  }
  return t;
}

namespace {

// One tensor to write: name, dims (innermost first), the values' source.
struct OutTensor {
  std::string name;
  std::vector<uint64_t> dims;
  DType in_type = DType::F32;
  const uint8_t* data = nullptr;  // rows of in_type
  int64_t rows = 1, cols = 0;
  DType out_type = DType::F32;
  // Stored row r is source row source_row(r) (llama Q/K rows from HF order); identity when null.
  int head_dim = 0;
};

void check_input_type(const std::string& name, DType t) {
  if (dtype_is_quantized(t))
    fail("tensor '", name, "' is ", dtype_name(t), ": loom quantize reads f32, f16 or bf16 weights (requantizing a ",
         "quantized file loses accuracy twice; start from the f32/f16/bf16 model)");
}

int64_t write_tensors(GgufWriter& w, std::vector<OutTensor>& ts, const std::string& out, int threads,
                      QuantizeResult* res) {
  for (const OutTensor& t : ts) w.add_tensor(t.name, t.dims, t.out_type);
  w.begin(out);
  const int nth = threads > 0 ? threads : default_thread_count();
  std::unique_ptr<ThreadPool> pool = nth > 1 ? std::make_unique<ThreadPool>(nth) : nullptr;
  std::vector<uint8_t> buf;
  int64_t written = 0;
  for (const OutTensor& t : ts) {
    const int64_t in_rb = dtype_row_bytes(t.in_type, t.cols), out_rb = dtype_row_bytes(t.out_type, t.cols);
    buf.resize(size_t(t.rows * out_rb));
    parallel_run(pool.get(), [&](int ith, int n) {
      const auto [b, e] = ThreadPool::split(t.rows, ith, n);
      std::vector<float> row(size_t(t.cols));
      for (int64_t r = b; r < e; ++r) {
        const int64_t src = t.head_dim > 0 ? gguf_llama_qk_source_row(r, t.head_dim) : r;
        dequantize_row(t.in_type, t.data + src * in_rb, row.data(), t.cols);
        quantize_row(t.out_type, row.data(), buf.data() + r * out_rb, t.cols);
      }
    });
    w.write(buf.data(), buf.size());
    written += int64_t(buf.size());
    res->bytes_in += t.rows * in_rb;
    ++res->tensors[t.out_type];
  }
  w.finish();
  return written;
}

}  // namespace

QuantizeResult quantize_model(const std::string& in, const std::string& out, const QuantScheme& s, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  if (fs::exists(out, ec) && fs::equivalent(in, out, ec))
    fail("loom quantize: the output '", out, "' is the input (it would be overwritten while it is read)");
  QuantizeResult res;
  const std::string fmt = detect_model_format(in);
  GgufWriter w;
  std::vector<OutTensor> ts;
  if (fmt == "gguf") {
    const GgufFile f(in);
    const ModelConfig c = gguf_model_config(f);
    for (const auto& [key, v] : f.kvs()) {
      if (key == "general.alignment") continue;  // the writer lays out its own data
      if (v.is_array() && v.elem_type == GgufType::Array) {
        log_warn("loom quantize: key '", key, "' (an array of arrays) is not copied");
        continue;
      }
      w.set(key, v);
    }
    w.set("general.file_type", GgufValue::u32(s.file_type));
    w.set("general.quantization_version", GgufValue::u32(2));
    const bool tied = f.find_tensor("output.weight") == nullptr;
    for (const GgufTensorInfo& gt : f.tensors()) {
      OutTensor t;
      t.name = gt.name;
      t.dims = gt.dims;
      t.in_type = gt.dtype;
      t.data = gt.data;
      t.cols = int64_t(gt.dims[0]);
      for (size_t i = 1; i < gt.dims.size(); ++i) t.rows *= int64_t(gt.dims[i]);
      if (gt.dims.size() == 1) {
        t.out_type = DType::F32;
      } else {
        check_input_type(gt.name, gt.dtype);
        t.out_type = quant_scheme_tensor_type(s, gt.name, t.cols, c.n_layers, tied);
      }
      ts.push_back(std::move(t));
    }
    res.bytes_out = write_tensors(w, ts, out, threads, &res);
  } else {
    if (fmt != "safetensors") fail("loom quantize: '", in, "' is a ", fmt, " model (expected GGUF or safetensors)");
    const std::shared_ptr<Model> m = load_model(in);
    const ModelConfig& c = m->config;
    const Vocab vocab = load_vocab(in, "");
    gguf_put_model_config(w, c, fs::path(in).filename().string(), s.file_type);
    gguf_put_vocab(w, vocab);
    const bool permute_qk = gguf_arch_of(c) == "llama";
    std::vector<float> freq = c.rope_scaling.freq_factors;
    if (freq.empty()) freq = llama3_rope_freq_factors(c);
    for (const auto& [canonical, v] : m->tensors()) {
      OutTensor t;
      t.name = gguf_tensor_name(canonical);
      t.in_type = v.dtype;
      t.data = static_cast<const uint8_t*>(v.data);
      t.rows = v.rows;
      t.cols = v.cols;
      if (v.rows > 1 || canonical == "token_embd" || canonical == "output") {
        check_input_type(t.name, v.dtype);
        t.dims = {uint64_t(v.cols), uint64_t(v.rows)};
        t.out_type = quant_scheme_tensor_type(s, t.name, v.cols, c.n_layers, c.tied_embeddings);
        if (permute_qk && (ends_with(canonical, ".attn_q") || ends_with(canonical, ".attn_k"))) t.head_dim = c.head_dim;
      } else {
        t.dims = {uint64_t(v.cols)};
        t.out_type = DType::F32;
      }
      ts.push_back(std::move(t));
      if (canonical == "token_embd" && !freq.empty()) {
        OutTensor r;
        r.name = "rope_freqs.weight";
        r.dims = {uint64_t(freq.size())};
        r.data = reinterpret_cast<const uint8_t*>(freq.data());
        r.cols = int64_t(freq.size());
        ts.push_back(std::move(r));
      }
    }
    res.bytes_out = write_tensors(w, ts, out, threads, &res);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace loom
