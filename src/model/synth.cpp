#include "model/synth.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <numbers>
#include <optional>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/quantize.h"
#include "model/safetensors.h"
#include "model/vocab_io.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

ModelConfig base_config(const std::string& arch, int d, int layers, int heads, int kv, int head_dim, int ffn,
                        int vocab, int ctx, float theta, bool tied) {
  ModelConfig c = ModelConfig::from_dims(arch, d, layers, heads, kv, head_dim, ffn, vocab, ctx, theta);
  c.rms_eps = 1e-5f;
  c.tied_embeddings = tied;
  c.qkv_bias = arch == "qwen2";
  return c;
}

SynthShape make_shape(const std::string& name, ModelConfig c, VocabKind kind, const std::string& pre) {
  SynthShape s;
  s.name = name;
  s.config = std::move(c);
  s.vocab_kind = kind;
  s.vocab_pre = pre;
  // Special ids the synthetic vocabularies use (vocab_io.h): Spm <unk> 0, <s> 1, </s> 2; Bpe
  // specials at the end. The real ids are set from the vocabulary by write_synth_model.
  s.config.bos_id = kind == VocabKind::Spm ? 1 : 0;
  s.config.eos_id = kind == VocabKind::Spm ? 2 : 0;
  return s;
}

// The config written to the file: special ids from the vocabulary.
ModelConfig file_config(const SynthShape& s, const Vocab& v) {
  ModelConfig c = s.config;
  c.eos_id = v.eos_id >= 0 ? v.eos_id : 0;
  c.bos_id = v.bos_id >= 0 ? v.bos_id : c.eos_id;  // Qwen2 has no BOS; HF configs name <|endoftext|>
  c.eos_ids = {c.eos_id};
  c.validate();
  return c;
}

}  // namespace

std::vector<std::string> synth_shape_names() {
  return {"tiny", "small", "gqa-24x6", "llama-3.2-1b", "llama-3.1-8b", "qwen2.5-0.5b"};
}

SynthShape synth_shape(const std::string& name) {
  if (name == "tiny")
    return make_shape(name, base_config("llama", 64, 2, 4, 2, 16, 192, 512, 256, 10000.0f, false), VocabKind::Spm,
                      "llama3");
  if (name == "small")
    return make_shape(name, base_config("llama", 512, 8, 8, 4, 64, 1536, 4096, 2048, 10000.0f, true),
                      VocabKind::Bpe, "llama3");
  if (name == "gqa-24x6")
    return make_shape(name, base_config("llama", 192, 2, 24, 6, 8, 320, 512, 256, 10000.0f, true), VocabKind::Spm,
                      "llama3");
  if (name == "llama-3.2-1b" || name == "llama-3.1-8b") {
    const bool small = name == "llama-3.2-1b";
    ModelConfig c = small ? base_config("llama", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0f, true)
                          : base_config("llama", 4096, 32, 32, 8, 128, 14336, 128256, 131072, 500000.0f, false);
    c.rope_scaling.llama3 = true;
    c.rope_scaling.factor = small ? 32.0f : 8.0f;
    c.rope_scaling.low_freq_factor = 1.0f;
    c.rope_scaling.high_freq_factor = 4.0f;
    c.rope_scaling.original_max_position = 8192;
    return make_shape(name, c, VocabKind::Bpe, "llama3");
  }
  if (name == "qwen2.5-0.5b") {
    ModelConfig c = base_config("qwen2", 896, 24, 14, 2, 64, 4864, 151936, 32768, 1000000.0f, true);
    c.rms_eps = 1e-6f;
    return make_shape(name, c, VocabKind::Bpe, "qwen2");
  }
  std::string names;
  for (auto& n : synth_shape_names()) names += (names.empty() ? "" : ", ") + n;
  fail("unknown synth shape '", name, "' (known: ", names, "; or use --dims)");
}

SynthShape parse_synth_dims(const std::string& spec) {
  std::map<std::string, std::string> kv;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail("--dims: '", item, "' is not key=value");
    kv[item.substr(0, eq)] = item.substr(eq + 1);
  }
  static const char* known[] = {"d", "layers", "heads", "kv_heads", "ffn", "vocab", "ctx", "head_dim",
                                "theta", "eps", "arch", "tied", "tok"};
  for (auto& [k, v] : kv) {
    bool ok = false;
    for (auto* n : known) ok = ok || k == n;
    if (!ok)
      fail("--dims: unknown key '", k, "' (known: d, layers, heads, kv_heads, ffn, vocab, ctx, head_dim, theta, eps, ",
           "arch, tied, tok)");
  }
  auto num = [&](const std::string& k, const std::string& fallback) -> double {
    auto it = kv.find(k);
    if (it == kv.end()) {
      if (fallback.empty()) fail("--dims: missing key '", k, "'");
      return std::stod(fallback);
    }
    try {
      size_t used = 0;
      const double v = std::stod(it->second, &used);
      if (used != it->second.size()) throw std::invalid_argument("trailing");
      return v;
    } catch (const std::exception&) {
      fail("--dims: ", k, "='", it->second, "' is not a number");
    }
  };
  auto integer = [&](const std::string& k, const std::string& fallback) {
    const double v = num(k, fallback);
    if (v != std::floor(v) || v < 1 || v > 1e9) fail("--dims: ", k, "=", v, " must be a positive integer");
    return int(v);
  };
  const int d = integer("d", ""), heads = integer("heads", "");
  if (!kv.count("head_dim") && d % heads != 0)
    fail("--dims: heads=", heads, " does not divide d=", d, " (give head_dim=)");
  const std::string arch = kv.count("arch") ? kv["arch"] : "llama";
  if (arch != "llama" && arch != "mistral" && arch != "qwen2")
    fail("--dims: arch='", arch, "' (expected llama, mistral or qwen2)");
  const std::string tied = kv.count("tied") ? kv["tied"] : "1";
  if (tied != "0" && tied != "1") fail("--dims: tied='", tied, "' (expected 0 or 1)");
  ModelConfig c = base_config(arch, d, integer("layers", ""), heads, integer("kv_heads", std::to_string(heads)),
                              integer("head_dim", std::to_string(d / heads)), integer("ffn", ""),
                              integer("vocab", ""), integer("ctx", "2048"), float(num("theta", "10000")),
                              tied == "1");
  c.rms_eps = float(num("eps", "1e-5"));
  const std::string tok = kv.count("tok") ? kv["tok"] : "spm";
  if (tok != "spm" && tok != "llama3" && tok != "qwen2" && tok != "gpt2")
    fail("--dims: tok='", tok, "' (expected spm, llama3, qwen2 or gpt2)");
  SynthShape s = make_shape("custom", c, tok == "spm" ? VocabKind::Spm : VocabKind::Bpe, tok == "spm" ? "llama3" : tok);
  s.config.validate();
  return s;
}

void check_synth_options(const SynthOptions& o) {
  const ModelConfig& c = o.shape.config;
  c.validate();
  if (o.format != "gguf" && o.format != "safetensors")
    fail("unknown format '", o.format, "' (expected gguf or safetensors)");
  if (o.format == "safetensors") safetensors_dtype_name(o.dtype);  // throws for the block types
  if (!o.mix.empty()) {
    if (o.format != "gguf") fail("--dtype ", o.mix, " is a GGUF type mix: use --format gguf");
    const QuantScheme s = parse_quant_scheme(o.mix);
    for (const auto& t : synth_tensors(c))  // throws for a matrix no type of the mix can hold
      if (t.kind == SynthTensor::Matrix) quant_scheme_tensor_type(s, gguf_tensor_name(t.name), t.cols, c.n_layers, c.tied_embeddings);
  } else if (dtype_is_quantized(o.dtype)) {
    const int be = dtype_block_elems(o.dtype);
    const std::pair<const char*, int> lens[] = {{"d_model", c.d_model}, {"q_dim (heads * head_dim)", c.q_dim()},
                                                {"ffn_dim", c.ffn_dim}};
    for (auto& [what, n] : lens)
      if (n % be != 0)
        fail(dtype_name(o.dtype), " needs every matrix row length to be a multiple of ", be, ": ", what, " = ", n,
             " is not");
  }
}

std::vector<SynthTensor> synth_tensors(const ModelConfig& c) {
  const int64_t d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), f = c.ffn_dim, v = c.vocab_size;
  std::vector<SynthTensor> t;
  t.push_back({"token_embd", v, d, SynthTensor::Matrix});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = cat("blk.", l, ".");
    t.push_back({p + "attn_norm", 1, d, SynthTensor::Norm});
    t.push_back({p + "attn_q", q, d, SynthTensor::Matrix});
    t.push_back({p + "attn_k", kv, d, SynthTensor::Matrix});
    t.push_back({p + "attn_v", kv, d, SynthTensor::Matrix});
    if (c.qkv_bias) {
      t.push_back({p + "attn_q.bias", 1, q, SynthTensor::Bias});
      t.push_back({p + "attn_k.bias", 1, kv, SynthTensor::Bias});
      t.push_back({p + "attn_v.bias", 1, kv, SynthTensor::Bias});
    }
    t.push_back({p + "attn_output", d, q, SynthTensor::Matrix});
    t.push_back({p + "ffn_norm", 1, d, SynthTensor::Norm});
    t.push_back({p + "ffn_gate", f, d, SynthTensor::Matrix});
    t.push_back({p + "ffn_up", f, d, SynthTensor::Matrix});
    t.push_back({p + "ffn_down", d, f, SynthTensor::Matrix});
  }
  t.push_back({"output_norm", 1, d, SynthTensor::Norm});
  if (!c.tied_embeddings) t.push_back({"output", v, d, SynthTensor::Matrix});
  return t;
}

void synth_row(uint64_t seed, const SynthTensor& t, int64_t row, float* out) {
  Rng rng(fnv1a(t.name) ^ (seed * 0x9e3779b97f4a7c15ull) ^ (uint64_t(row) * 0xd1342543de82ef95ull));
  float lo, scale;  // value = lo + scale * u, u uniform in [0, 1) on a 2^-24 grid
  switch (t.kind) {
    case SynthTensor::Matrix: {
      const float a = float(std::sqrt(3.0 / double(t.cols)));
      lo = -a;
      scale = 2 * a;
      break;
    }
    case SynthTensor::Norm: lo = 0.9f; scale = 0.2f; break;
    default: lo = -0.05f; scale = 0.1f; break;
  }
  constexpr float k24 = 1.0f / 16777216.0f;
  int64_t i = 0;
  for (; i + 1 < t.cols; i += 2) {  // two 24-bit uniforms per 64-bit draw
    const uint64_t r = rng.next_u64();
    out[i] = lo + scale * (float(r >> 40) * k24);
    out[i + 1] = lo + scale * (float((r >> 16) & 0xffffff) * k24);
  }
  if (i < t.cols) out[i] = lo + scale * (float(rng.next_u64() >> 40) * k24);
}

Vocab synth_model_vocab(const SynthShape& s, uint64_t seed) {
  const int n = s.config.vocab_size;
  if (s.vocab_kind == VocabKind::Spm) return synth_vocab(VocabKind::Spm, n, seed);
  return synth_bpe_vocab(n, seed, s.vocab_pre);
}

std::vector<float> llama3_rope_freq_factors(const ModelConfig& c) {
  std::vector<float> out;
  if (!c.rope_scaling.llama3) return out;
  const auto& r = c.rope_scaling;
  const double low_wavelen = r.original_max_position / double(r.low_freq_factor);
  const double high_wavelen = r.original_max_position / double(r.high_freq_factor);
  for (int i = 0; i < c.head_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(double(c.rope_theta), 2.0 * i / c.head_dim);
    const double wavelen = 2 * std::numbers::pi / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = r.factor;
    } else {
      const double smooth = (r.original_max_position / wavelen - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      f = 1.0 / ((1 - smooth) / r.factor + smooth);
    }
    out.push_back(float(f));
  }
  return out;
}

namespace {

// Generates the rows of `t` in chunks (in parallel), converts them to `dtype`, hands each chunk
// to `sink` in order. While the sink writes one chunk (on another thread), the next is generated
// into the other buffer. source_row maps a stored row to the generated (HF) row.
template <typename Sink, typename SourceRow>
void stream_tensor(ThreadPool* pool, uint64_t seed, const SynthTensor& t, DType dtype, SourceRow source_row,
                   std::vector<uint8_t> (&bufs)[2], Sink&& sink) {
  const int64_t row_bytes = dtype_row_bytes(dtype, t.cols);
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t(8) << 20) / row_bytes);
  const int nth = pool ? pool->size() : 1;
  std::vector<std::vector<float>> scratch(size_t(nth), std::vector<float>(size_t(t.cols)));
  std::future<void> pending;
  int which = 0;
  for (int64_t r0 = 0; r0 < t.rows; r0 += chunk_rows, which ^= 1) {
    const int64_t n = std::min(chunk_rows, t.rows - r0);
    std::vector<uint8_t>& buf = bufs[which];
    buf.resize(size_t(n * row_bytes));
    parallel_run(pool, [&](int ith, int nth_) {
      auto [b, e] = ThreadPool::split(n, ith, nth_);
      float* tmp = scratch[size_t(ith)].data();
      for (int64_t r = b; r < e; ++r) {
        synth_row(seed, t, source_row(r0 + r), tmp);
        quantize_row(dtype, tmp, buf.data() + r * row_bytes, t.cols);
      }
    });
    if (pending.valid()) pending.get();  // the previous chunk is written; rethrows its error
    pending = std::async(std::launch::async, [&sink, &buf, n, row_bytes] { sink(buf.data(), size_t(n * row_bytes)); });
  }
  if (pending.valid()) pending.get();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("cannot create '", path, "'");
  f << text;
  if (!f) fail("cannot write '", path, "'");
}

uint32_t gguf_file_type(DType t) {
  // llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q4_1 3, MOSTLY_Q8_0 7, MOSTLY_Q5_0 8,
  // MOSTLY_Q4_K_S 14, MOSTLY_Q5_K_S 16, MOSTLY_Q6_K 18, MOSTLY_BF16 32 (every matrix of one type).
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q8_0: return 7;
    case DType::BF16: return 32;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q5_0: return 8;
    case DType::Q4_K: return 14;
    case DType::Q5_K: return 16;
    case DType::Q6_K: return 18;
  }
  return 0;
}

}  // namespace

SynthResult write_synth_model(const SynthOptions& o, const std::string& out) {
  check_synth_options(o);
  const auto t0 = std::chrono::steady_clock::now();
  const Vocab vocab = synth_model_vocab(o.shape, o.seed);
  if (vocab.size() != o.shape.config.vocab_size)
    fail("synth: vocabulary has ", vocab.size(), " tokens, expected ", o.shape.config.vocab_size);
  const ModelConfig c = file_config(o.shape, vocab);
  const auto tensors = synth_tensors(c);
  const int threads = o.threads > 0 ? o.threads : default_thread_count();
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  std::vector<uint8_t> buf[2];
  SynthResult res;
  auto identity = [](int64_t r) { return r; };

  if (o.format == "gguf") {
    const std::string arch = gguf_arch_of(c);  // GGUF writes Mistral as llama
    const bool permute_qk = arch == "llama";
    GgufWriter w;
    gguf_put_model_config(w, c, cat("loom-synth-", o.shape.name), o.mix.empty() ? gguf_file_type(o.dtype) : parse_quant_scheme(o.mix).file_type);
    gguf_put_vocab(w, vocab);
    const auto freq_factors = llama3_rope_freq_factors(c);
    // Per matrix: o.dtype, or the type the mix (model/quantize.h) gives it.
    std::optional<QuantScheme> mix;
    if (!o.mix.empty()) mix = parse_quant_scheme(o.mix);
    std::vector<DType> types;
    for (const auto& t : tensors)
      types.push_back(t.kind != SynthTensor::Matrix ? DType::F32
                      : mix ? quant_scheme_tensor_type(*mix, gguf_tensor_name(t.name), t.cols, c.n_layers, c.tied_embeddings)
                            : o.dtype);
    w.add_tensor("token_embd.weight", {uint64_t(c.d_model), uint64_t(c.vocab_size)}, types[0]);
    if (!freq_factors.empty()) w.add_tensor("rope_freqs.weight", {uint64_t(freq_factors.size())}, DType::F32);
    for (size_t i = 1; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      const bool matrix = t.kind == SynthTensor::Matrix;
      if (matrix) w.add_tensor(gguf_tensor_name(t.name), {uint64_t(t.cols), uint64_t(t.rows)}, types[i]);
      else w.add_tensor(gguf_tensor_name(t.name), {uint64_t(t.cols)}, DType::F32);
    }
    w.begin(out);
    auto sink = [&](const void* b, size_t n) {
      w.write(b, n);
      res.bytes += int64_t(n);
    };
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      const bool matrix = t.kind == SynthTensor::Matrix;
      const bool is_qk = permute_qk && (t.name.size() > 7 && (t.name.compare(t.name.size() - 7, 7, ".attn_q") == 0 ||
                                                               t.name.compare(t.name.size() - 7, 7, ".attn_k") == 0));
      if (is_qk) {
        const int hd = c.head_dim;
        stream_tensor(pool.get(), o.seed, t, types[i], [hd](int64_t r) { return gguf_llama_qk_source_row(r, hd); }, buf,
                      sink);
      } else {
        stream_tensor(pool.get(), o.seed, t, matrix ? types[i] : DType::F32, identity, buf, sink);
      }
      if (i == 0 && !freq_factors.empty()) sink(freq_factors.data(), freq_factors.size() * 4);
    }
    w.finish();
    res.model_path = out;
  } else {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (!fs::is_directory(out)) fail("cannot create directory '", out, "'");
    SafetensorsWriter w;
    for (auto& t : tensors) {
      std::vector<int64_t> shape = t.kind == SynthTensor::Matrix ? std::vector<int64_t>{t.rows, t.cols}
                                                                 : std::vector<int64_t>{t.cols};
      w.add_tensor(hf_tensor_name(t.name), shape, o.dtype);
    }
    w.begin((fs::path(out) / "model.safetensors").string());
    auto sink = [&](const void* b, size_t n) {
      w.write(b, n);
      res.bytes += int64_t(n);
    };
    for (auto& t : tensors) stream_tensor(pool.get(), o.seed, t, o.dtype, identity, buf, sink);
    w.finish();
    write_text((fs::path(out) / "config.json").string(), hf_config_json(c, o.dtype));
    // Both kinds as HF tokenizer.json (Spm in the layout of Llama-2's, vocab_io.h).
    write_text((fs::path(out) / "tokenizer.json").string(), vocab_to_tokenizer_json(vocab));
    write_text((fs::path(out) / "tokenizer_config.json").string(), vocab_to_tokenizer_config_json(vocab));
    res.model_path = out;
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace loom
