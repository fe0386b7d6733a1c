// loom synth -> load round trips for every format x dtype, determinism, the safetensors header
// as an independent JSON parser sees it, GGUF metadata and vocabulary round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/info.h"
#include "model/loader.h"
#include "model/safetensors.h"
#include "model/synth.h"
#include "model/vocab_io.h"
#include "test_formats_util.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using test::read_bytes;

// The GGUF llama row order, written independently of the loader: llama.cpp's converter reshapes
// each head's rows as [2, head_dim/2] and swaps the axes, so stored row 2i+j of a head is HF row
// j*head_dim/2 + i.
int64_t reference_qk_source_row(int64_t r, int head_dim) {
  const int64_t head = r / head_dim, within = r % head_dim;
  const int64_t i = within / 2, j = within % 2;
  return head * head_dim + j * (head_dim / 2) + i;
}

std::map<std::string, WeightView> views_by_name(const Model& m) {
  std::map<std::string, WeightView> out;
  for (auto& [n, v] : m.tensors()) out[n] = v;
  if (m.config.tied_embeddings) out["output"] = m.output;
  return out;
}

// Compares every weight of `m` with the regenerated synth values, exactly: each stored value
// must equal dequantize(quantize(original, file dtype)). Matrices are stored in `dtype`, vectors
// in `vector_dtype` (GGUF keeps norms f32; safetensors uses the model dtype).
void expect_weights_match(const Model& m, uint64_t seed, DType dtype, DType vector_dtype, bool gguf_llama) {
  const ModelConfig& c = m.config;
  auto views = views_by_name(m);
  int64_t compared = 0;
  for (const SynthTensor& t : synth_tensors(c)) {
    ASSERT_TRUE(views.count(t.name)) << t.name;
    const WeightView& v = views[t.name];
    const bool matrix = t.kind == SynthTensor::Matrix;
    const DType stored = matrix ? dtype : vector_dtype;
    ASSERT_EQ(v.rows, t.rows) << t.name;
    ASSERT_EQ(v.cols, t.cols) << t.name;
    ASSERT_EQ(v.dtype, matrix ? dtype : DType::F32) << t.name;  // vectors come back as f32
    const bool permuted = gguf_llama && (t.name.find(".attn_q") != std::string::npos ||
                                         t.name.find(".attn_k") != std::string::npos) &&
                          t.name.find(".bias") == std::string::npos;
    std::vector<float> orig(size_t(t.cols)), want(size_t(t.cols)), got(size_t(t.cols));
    std::vector<uint8_t> q(size_t(dtype_row_bytes(stored, t.cols)));
    for (int64_t r = 0; r < t.rows; ++r) {
      synth_row(seed, t, permuted ? reference_qk_source_row(r, c.head_dim) : r, orig.data());
      quantize_row(stored, orig.data(), q.data(), t.cols);
      dequantize_row(stored, q.data(), want.data(), t.cols);
      dequantize_row(v.dtype, v.row(r), got.data(), t.cols);
      for (int64_t i = 0; i < t.cols; ++i)
        if (want[size_t(i)] != got[size_t(i)]) {
          FAIL() << t.name << " row " << r << " col " << i << ": want " << want[size_t(i)] << " got " << got[size_t(i)];
        }
      compared += t.cols;
    }
  }
  EXPECT_EQ(compared, c.param_count());
  if (c.tied_embeddings) {
    EXPECT_EQ(m.output.data, m.tok_embd.data);
  }
}

// Qwen2 layout (QKV biases, half-split RoPE in GGUF too, no Q/K permutation), awkward sizes.
const char* kQwen2Mini = "d=96,layers=2,heads=3,kv_heads=1,ffn=224,vocab=419,ctx=64,arch=qwen2,tok=qwen2,theta=1000000";

// Mistral layout through HF (MistralForCausalLM), explicit head_dim != d/heads, untied.
const char* kMistralMini = "d=64,layers=1,heads=4,kv_heads=2,head_dim=32,ffn=96,vocab=300,arch=mistral,tied=0";

struct Case {
  std::string shape, format;
  DType dtype;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.shape << "/" << c.format << "/" << dtype_name(c.dtype); }
};

class FormatsRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(FormatsRoundTrip, LoadedWeightsEqualWhatTheWriterMeant) {
  const Case& k = GetParam();
  const std::string dir = test::temp_dir();
  SynthOptions o;
  o.shape = k.shape == "qwen2-mini"     ? parse_synth_dims(kQwen2Mini)
            : k.shape == "mistral-mini" ? parse_synth_dims(kMistralMini)
                                        : synth_shape(k.shape);
  o.dtype = k.dtype;
  o.format = k.format;
  o.seed = 97;
  o.threads = 2;
  const std::string out = dir + (k.format == "gguf" ? "/m.gguf" : "/m");
  const SynthResult r = write_synth_model(o, out);
  EXPECT_EQ(detect_model_format(r.model_path), k.format);
  auto m = load_model(r.model_path);
  EXPECT_EQ(m->format, k.format);
  const ModelConfig& c = m->config;
  const ModelConfig& want = o.shape.config;
  EXPECT_EQ(c.d_model, want.d_model);
  EXPECT_EQ(c.n_layers, want.n_layers);
  EXPECT_EQ(c.n_heads, want.n_heads);
  EXPECT_EQ(c.n_kv_heads, want.n_kv_heads);
  EXPECT_EQ(c.head_dim, want.head_dim);
  EXPECT_EQ(c.ffn_dim, want.ffn_dim);
  EXPECT_EQ(c.vocab_size, want.vocab_size);
  EXPECT_EQ(c.max_seq_len, want.max_seq_len);
  EXPECT_EQ(c.tied_embeddings, want.tied_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, want.rope_theta);
  EXPECT_FLOAT_EQ(c.rms_eps, want.rms_eps);
  const bool gguf = k.format == "gguf", qwen = k.shape == "qwen2-mini";
  EXPECT_EQ(c.rope_style, gguf && !qwen ? RopeStyle::Interleaved : RopeStyle::HalfSplit);
  EXPECT_EQ(c.qkv_bias, qwen);
  const bool mistral = k.shape == "mistral-mini";
  EXPECT_EQ(c.arch, qwen ? "qwen2" : mistral && !gguf ? "mistral" : "llama");
  expect_weights_match(*m, o.seed, k.dtype, gguf ? DType::F32 : k.dtype, gguf && !qwen);

  // The embedded / companion vocabulary comes back as written.
  const Vocab v = load_vocab(r.model_path, "");
  const Vocab w = synth_model_vocab(o.shape, o.seed);
  // Spm pieces may spell the word marker ' ' (llama2.c) or U+2581 (GGUF, tokenizer.json):
  // compare with the marker normalised.
  auto marker_free = [](std::vector<std::string> toks) {
    const std::string marker = "\xe2\x96\x81";
    for (auto& t : toks) {
      std::string out;
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, marker.size(), marker) == 0) {
          out += ' ';
          i += marker.size();
        } else {
          out += t[i++];
        }
      }
      t = out;
    }
    return toks;
  };
  EXPECT_EQ(marker_free(v.tokens), marker_free(w.tokens));
  EXPECT_EQ(v.kind, w.kind);
  EXPECT_EQ(v.bos_id, w.bos_id);
  EXPECT_EQ(v.eos_id, w.eos_id);
  EXPECT_EQ(c.bos_id, w.bos_id);
  EXPECT_EQ(c.eos_id, w.eos_id);
}

std::vector<Case> all_cases() {
  std::vector<Case> cs;
  for (const char* shape : {"tiny", "gqa-24x6"}) {
    for (DType d : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) cs.push_back({shape, "gguf", d});
    for (DType d : {DType::F32, DType::F16, DType::BF16}) cs.push_back({shape, "safetensors", d});
  }
  cs.push_back({"qwen2-mini", "gguf", DType::Q8_0});
  cs.push_back({"qwen2-mini", "gguf", DType::F16});
  cs.push_back({"qwen2-mini", "safetensors", DType::BF16});
  cs.push_back({"mistral-mini", "safetensors", DType::F16});
  cs.push_back({"mistral-mini", "gguf", DType::Q8_0});
  return cs;
}

INSTANTIATE_TEST_SUITE_P(AllFormats, FormatsRoundTrip, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  std::string n = info.param.shape + "_" + info.param.format + "_" + std::string(dtype_name(info.param.dtype));
  for (auto& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

TEST(FormatsSynth, SameSeedSameBytesOtherSeedOtherBytes) {
  const std::string dir = test::temp_dir();
  for (const char* fmt : {"gguf", "safetensors"}) {
    SynthOptions o;
    o.shape = synth_shape("gqa-24x6");
    o.dtype = DType::BF16;
    o.format = fmt;
    o.seed = 7;
    o.threads = 2;
    const bool g = std::string(fmt) == "gguf";
    const std::string a = dir + (g ? "/a.gguf" : "/a"), b = dir + (g ? "/b.gguf" : "/b"), c = dir + (g ? "/c.gguf" : "/c");
    write_synth_model(o, a);
    o.threads = 1;  // thread count must not change the bytes
    write_synth_model(o, b);
    o.seed = 8;
    write_synth_model(o, c);
    const std::string file = g ? "" : "/model.safetensors";
    EXPECT_EQ(read_bytes(a + file), read_bytes(b + file)) << fmt;
    EXPECT_NE(read_bytes(a + file), read_bytes(c + file)) << fmt;
    EXPECT_EQ(read_bytes(a + file).size(), read_bytes(c + file).size()) << fmt;
    if (!g) {
      EXPECT_EQ(read_bytes(a + "/config.json"), read_bytes(b + "/config.json"));
    }
  }
}

// The safetensors file as an independent reader sees it: nlohmann::json on the raw header,
// offsets recomputed from shapes.
TEST(FormatsSafetensors, HeaderIsValidJsonWithContiguousOffsets) {
  const std::string dir = test::temp_dir();
  SynthOptions o;
  o.shape = synth_shape("tiny");
  o.dtype = DType::F16;
  o.format = "safetensors";
  write_synth_model(o, dir + "/m");
  const std::string b = read_bytes(dir + "/m/model.safetensors");
  ASSERT_GE(b.size(), 8u);
  const uint64_t n = test::get_le<uint64_t>(b, 0);
  ASSERT_LE(8 + n, b.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "the buffer must start 8-byte aligned";
  const std::string header = b.substr(8, size_t(n));
  EXPECT_EQ(header.find_last_not_of(' ') + 1 + header.find_first_not_of(' '),
            header.find_last_not_of(' ') + 1)
      << "padding must be trailing spaces";
  const auto j = nlohmann::json::parse(header);
  ASSERT_TRUE(j.contains("__metadata__"));
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  // Every tensor of the config, HF names, sizes and contiguous non-overlapping offsets.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  size_t count = 0;
  for (const SynthTensor& t : synth_tensors(load_model(dir + "/m")->config)) {
    const std::string name = hf_tensor_name(t.name);
    ASSERT_TRUE(j.contains(name)) << name;
    const auto& e = j[name];
    EXPECT_EQ(e["dtype"], "F16");
    std::vector<int64_t> shape = e["shape"].get<std::vector<int64_t>>();
    std::vector<int64_t> want = t.kind == SynthTensor::Matrix ? std::vector<int64_t>{t.rows, t.cols}
                                                              : std::vector<int64_t>{t.cols};
    EXPECT_EQ(shape, want) << name;
    const uint64_t b0 = e["data_offsets"][0], b1 = e["data_offsets"][1];
    EXPECT_EQ(b1 - b0, uint64_t(t.rows * t.cols * 2)) << name;
    ranges.emplace_back(b0, b1);
    ++count;
  }
  EXPECT_EQ(j.size(), count + 1);  // nothing else but __metadata__
  std::sort(ranges.begin(), ranges.end());
  EXPECT_EQ(ranges.front().first, 0u);
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_EQ(ranges[i].first, ranges[i - 1].second);
  EXPECT_EQ(8 + n + ranges.back().second, b.size()) << "the buffer is exactly the tensors";
  // config.json parses back with the architecture and dtype
  const HfConfig hc = load_hf_config(dir + "/m/config.json");
  EXPECT_EQ(hc.architecture, "LlamaForCausalLM");
  EXPECT_EQ(hc.torch_dtype, "float16");
}

TEST(FormatsSafetensors, ShardedIndexLoads) {
  // Two shards written with the writer, listed by an index, next to a config.json.
  const std::string dir = test::temp_dir() + "/sharded";
  fs::create_directories(dir);
  SynthOptions o;
  o.shape = synth_shape("tiny");
  o.dtype = DType::BF16;
  o.format = "safetensors";
  o.seed = 3;
  const std::string single = test::temp_dir() + "/single";
  write_synth_model(o, single);
  fs::copy_file(single + "/config.json", dir + "/config.json");
  const auto tensors = synth_tensors(load_model(single)->config);
  SafetensorsFile src(single + "/model.safetensors");
  nlohmann::json index;
  for (int shard = 0; shard < 2; ++shard) {
    SafetensorsWriter w;
    const std::string file = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
    std::vector<const RawTensor*> mine;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (int(i % 2) == shard) {
        const RawTensor& t = src.tensors().at(hf_tensor_name(tensors[i].name));
        w.add_tensor(t.name, t.shape, t.dtype);
        mine.push_back(&t);
        index["weight_map"][t.name] = file;
      }
    w.begin(dir + "/" + file);
    for (auto* t : mine) w.write(t->data, size_t(t->bytes));
    w.finish();
  }
  test::write_bytes(dir + "/model.safetensors.index.json", index.dump());
  auto m = load_model(dir);
  expect_weights_match(*m, o.seed, DType::BF16, DType::BF16, false);
}

TEST(FormatsGguf, MetadataRoundTrip) {
  const std::string path = test::temp_dir() + "/meta.gguf";
  GgufWriter w(64);
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("a.u32", GgufValue::u32(4000000000u));
  w.set("a.i32", GgufValue::i32(-17));
  w.set("a.f32", GgufValue::f32(0.1f));
  w.set("a.bool", GgufValue::boolean(true));
  w.set("a.empty_string", GgufValue::string(""));
  w.set("a.utf8", GgufValue::string("caf\xc3\xa9 \xe2\x96\x81x"));
  w.set("a.strs", GgufValue::string_array({"x", "", "yz"}));
  w.set("a.f32s", GgufValue::f32_array({1.5f, -2.0f}));
  w.set("a.i32s", GgufValue::i32_array({-1, 7, 97}));
  w.set("a.i32", GgufValue::i32(-18));  // replaces, keeps its place
  w.add_tensor("t1", {7}, DType::F32);
  w.add_tensor("t2", {32, 3}, DType::Q8_0);
  w.begin(path);
  std::vector<float> t1 = {1, 2, 3, 4, 5, 6, 7};
  w.write(t1.data(), 28);
  std::vector<uint8_t> t2(3 * 34, 0xab);
  w.write(t2.data(), 10);  // in pieces
  w.write(t2.data() + 10, t2.size() - 10);
  w.finish();

  GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  ASSERT_EQ(f.kvs().size(), 11u);  // 10 set + general.alignment
  EXPECT_EQ(f.kvs()[2].first, "a.i32");
  EXPECT_EQ(f.get_int("a.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("a.i32"), -18);
  EXPECT_EQ(f.find("a.i32")->type, GgufType::I32);
  EXPECT_EQ(float(f.get_float("a.f32")), 0.1f);
  EXPECT_TRUE(f.get_bool("a.bool", false));
  EXPECT_EQ(f.get_string("a.empty_string"), "");
  EXPECT_EQ(f.get_string("a.utf8"), "caf\xc3\xa9 \xe2\x96\x81x");
  EXPECT_EQ(f.find("a.strs")->strs, (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(f.find("a.f32s")->nums, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(f.find("a.i32s")->nums, (std::vector<double>{-1, 7, 97}));
  EXPECT_EQ(f.find("a.i32s")->elem_type, GgufType::I32);
  test::expect_error([&] { f.get_int("a.f32"); }, {"a.f32", "integer", "f32"});
  test::expect_error([&] { f.get_string("nope"); }, {"nope"});
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensorInfo* a = f.find_tensor("t1");
  const GgufTensorInfo* b = f.find_tensor("t2");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->dims, (std::vector<uint64_t>{7}));
  EXPECT_EQ(b->dims, (std::vector<uint64_t>{32, 3}));
  EXPECT_EQ(b->ggml_type, 8u);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(b->offset, 64u);  // 28 bytes padded to the 64-byte alignment
  EXPECT_EQ(std::memcmp(a->data, t1.data(), 28), 0);
  EXPECT_EQ(std::memcmp(b->data, t2.data(), t2.size()), 0);
  // The data section starts aligned in the file.
  EXPECT_EQ((a->data - f.mapping()->data()) % 64, 0);
}

TEST(FormatsGguf, VocabRoundTrip) {
  Vocab v;
  v.kind = VocabKind::Bpe;
  v.pre = "qwen2";
  v.tokens = {"a", "b", "ab", "\xc4\xa0", "<|endoftext|>", "<|im_start|>"};
  v.types = {TokenType::Normal, TokenType::Normal, TokenType::Normal, TokenType::Byte, TokenType::Control,
             TokenType::UserDefined};
  v.merges = {"a b"};
  v.bos_id = -1;
  v.eos_id = 4;
  v.pad_id = 4;
  v.add_bos = false;
  v.add_space_prefix = false;
  v.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
  const std::string path = test::temp_dir() + "/v.gguf";
  GgufWriter w;
  gguf_put_vocab(w, v);
  w.begin(path);
  w.finish();
  const Vocab u = gguf_vocab(GgufFile(path));
  EXPECT_EQ(u.kind, v.kind);
  EXPECT_EQ(u.pre, v.pre);
  EXPECT_EQ(u.tokens, v.tokens);
  EXPECT_EQ(u.types, v.types);
  EXPECT_EQ(u.merges, v.merges);
  EXPECT_TRUE(u.scores.empty());
  EXPECT_EQ(u.bos_id, -1);
  EXPECT_EQ(u.eos_id, 4);
  EXPECT_EQ(u.pad_id, 4);
  EXPECT_EQ(u.unk_id, -1);
  EXPECT_FALSE(u.add_bos);
  EXPECT_FALSE(u.add_space_prefix);
  EXPECT_EQ(u.chat_template, v.chat_template);
  // Llama-3's pre-tokenizer is written as llama.cpp's converter spells it and read back as "llama3".
  v.pre = "llama3";
  GgufWriter w3;
  gguf_put_vocab(w3, v);
  w3.begin(path);
  w3.finish();
  EXPECT_EQ(GgufFile(path).get_string("tokenizer.ggml.pre"), "llama-bpe");
  EXPECT_EQ(gguf_vocab(GgufFile(path)).pre, "llama3");

  Vocab s;
  s.kind = VocabKind::Spm;
  s.tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81the"};
  s.scores = {0.0f, 0.0f, 0.0f, -1.25f};
  s.bos_id = 1;
  s.eos_id = 2;
  s.unk_id = 0;
  const std::string p2 = test::temp_dir() + "/s.gguf";
  GgufWriter w2;
  gguf_put_vocab(w2, s);
  w2.begin(p2);
  w2.finish();
  const Vocab t = gguf_vocab(GgufFile(p2));
  EXPECT_EQ(t.kind, VocabKind::Spm);
  EXPECT_EQ(t.tokens, s.tokens);
  EXPECT_EQ(t.scores, s.scores);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_TRUE(t.add_bos);
  EXPECT_TRUE(t.add_space_prefix);
}

// Naive RoPE of one head at position pos, both pairings (config.h).
void rope(float* x, int head_dim, int pos, bool interleaved, float theta) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const double ang = pos * std::pow(double(theta), -2.0 * i / head_dim);
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + head_dim / 2;
    const double x0 = x[a], x1 = x[b];
    x[a] = float(x0 * std::cos(ang) - x1 * std::sin(ang));
    x[b] = float(x0 * std::sin(ang) + x1 * std::cos(ang));
  }
}

// The GGUF (interleaved, permuted Q/K) and safetensors (half-split) files of one seed are the
// same model: attention scores q_h(pos 5) . k_g(pos 2) agree for every query head.
TEST(FormatsSynth, GgufAndSafetensorsAreTheSameModel) {
  const std::string dir = test::temp_dir();
  SynthOptions o;
  o.shape = synth_shape("gqa-24x6");
  o.dtype = DType::F32;
  o.seed = 5;
  o.format = "gguf";
  write_synth_model(o, dir + "/m.gguf");
  o.format = "safetensors";
  write_synth_model(o, dir + "/m");
  auto g = load_model(dir + "/m.gguf");
  auto s = load_model(dir + "/m");
  const ModelConfig& c = g->config;
  std::vector<float> x(size_t(c.d_model));
  for (int i = 0; i < c.d_model; ++i) x[size_t(i)] = std::sin(0.37f * float(i) + 1.0f);
  auto matvec = [&](const WeightView& w) {
    std::vector<float> y(size_t(w.rows));
    for (int64_t r = 0; r < w.rows; ++r) {
      double acc = 0;
      for (int64_t i = 0; i < w.cols; ++i) acc += double(w.f32()[r * w.cols + i]) * x[size_t(i)];
      y[size_t(r)] = float(acc);
    }
    return y;
  };
  for (int l = 0; l < c.n_layers; ++l) {
    auto qg = matvec(g->layers[size_t(l)].wq), kg = matvec(g->layers[size_t(l)].wk);
    auto qs = matvec(s->layers[size_t(l)].wq), ks = matvec(s->layers[size_t(l)].wk);
    const int hd = c.head_dim;
    for (int h = 0; h < c.n_heads; ++h) {
      const int kvh = h / c.group_size();
      rope(qg.data() + h * hd, hd, 5, true, c.rope_theta);
      rope(qs.data() + h * hd, hd, 5, false, c.rope_theta);
      std::vector<float> kgh(kg.begin() + kvh * hd, kg.begin() + (kvh + 1) * hd);
      std::vector<float> ksh(ks.begin() + kvh * hd, ks.begin() + (kvh + 1) * hd);
      rope(kgh.data(), hd, 2, true, c.rope_theta);
      rope(ksh.data(), hd, 2, false, c.rope_theta);
      double sg = 0, ss = 0, mag = 0;
      for (int i = 0; i < hd; ++i) {
        sg += double(qg[size_t(h * hd + i)]) * kgh[size_t(i)];
        ss += double(qs[size_t(h * hd + i)]) * ksh[size_t(i)];
        mag += std::fabs(double(qs[size_t(h * hd + i)]) * ksh[size_t(i)]);
      }
      EXPECT_NEAR(sg, ss, 1e-5 * mag + 1e-7) << "layer " << l << " head " << h;
    }
  }
}

// Llama-3 scaling: GGUF carries it as rope_freqs.weight, safetensors as config.json keys.
TEST(FormatsSynth, Llama3RopeScaling) {
  const std::string dir = test::temp_dir();
  SynthOptions o;
  o.shape = synth_shape("tiny");
  auto& rs = o.shape.config.rope_scaling;
  o.shape.config.rope_theta = 500000.0f;
  o.shape.config.max_seq_len = 1 << 17;
  rs.llama3 = true;
  rs.factor = 32.0f;
  rs.low_freq_factor = 1.0f;
  rs.high_freq_factor = 4.0f;
  rs.original_max_position = 8192;
  o.shape.config.head_dim = 16;
  o.dtype = DType::F32;
  write_synth_model(o, dir + "/m.gguf");
  o.format = "safetensors";
  write_synth_model(o, dir + "/m");
  auto g = load_model(dir + "/m.gguf");
  auto s = load_model(dir + "/m");
  EXPECT_TRUE(s->config.rope_scaling.llama3);
  EXPECT_EQ(s->config.rope_scaling.factor, 32.0f);
  EXPECT_EQ(s->config.rope_scaling.original_max_position, 8192);
  EXPECT_FALSE(g->config.rope_scaling.llama3);
  const auto& ff = g->config.rope_scaling.freq_factors;
  ASSERT_EQ(ff.size(), 8u);
  // Reference (Llama 3.1 reference code, apply_scaling): wavelengths under 8192/4 keep their
  // frequency, over 8192/1 are divided by 32, in between interpolate smoothly.
  for (int i = 0; i < 8; ++i) {
    const double freq = std::pow(500000.0, -2.0 * i / 16), wavelen = 2 * 3.14159265358979 / freq;
    double want;
    if (wavelen < 2048) want = 1;
    else if (wavelen > 8192) want = 32;
    else {
      const double smooth = (8192 / wavelen - 1) / 3;
      want = freq / ((1 - smooth) * freq / 32 + smooth * freq);
    }
    EXPECT_NEAR(ff[size_t(i)], want, 1e-4 * want) << i;
  }
  EXPECT_EQ(ff[0], 1.0f);
  EXPECT_EQ(ff[7], 32.0f);
}

TEST(FormatsSynth, ShapesAndOptions) {
  for (auto& name : synth_shape_names()) {
    const SynthShape s = synth_shape(name);
    EXPECT_NO_THROW(s.config.validate()) << name;
    SynthOptions o;
    o.shape = s;
    o.dtype = DType::Q8_0;
    EXPECT_NO_THROW(check_synth_options(o)) << name << " must be q8_0-writable";
  }
  const SynthShape l1 = synth_shape("llama-3.2-1b");
  EXPECT_EQ(l1.config.d_model, 2048);
  EXPECT_EQ(l1.config.n_heads, 32);
  EXPECT_EQ(l1.config.n_kv_heads, 8);
  EXPECT_EQ(l1.config.vocab_size, 128256);
  EXPECT_TRUE(l1.config.tied_embeddings);
  EXPECT_TRUE(l1.config.rope_scaling.llama3);
  const SynthShape qw = synth_shape("qwen2.5-0.5b");
  EXPECT_TRUE(qw.config.qkv_bias);
  EXPECT_EQ(qw.config.head_dim, 64);
  EXPECT_EQ(qw.vocab_pre, "qwen2");
  const SynthShape g = synth_shape("gqa-24x6");
  EXPECT_EQ(g.config.n_heads, 24);
  EXPECT_EQ(g.config.n_kv_heads, 6);
  EXPECT_EQ(g.config.head_dim, 8);
  test::expect_error([] { synth_shape("huge"); }, {"huge", "tiny"});

  const SynthShape d = parse_synth_dims("d=96,layers=3,heads=6,kv_heads=3,ffn=160,vocab=300,ctx=64");
  EXPECT_EQ(d.config.head_dim, 16);
  EXPECT_EQ(d.config.n_layers, 3);
  EXPECT_EQ(d.config.max_seq_len, 64);
  test::expect_error([] { parse_synth_dims("d=96,layers=3,heads=7,ffn=160,vocab=300"); }, {"heads=7", "d=96"});
  test::expect_error([] { parse_synth_dims("d=96,layers=3,heads=6,ffn=160,vocab=300,bogus=1"); }, {"bogus"});
  test::expect_error([] { parse_synth_dims("d=96,layers=x,heads=6,ffn=160,vocab=300"); }, {"layers", "x"});
  SynthOptions o;
  o.shape = parse_synth_dims("d=64,layers=1,heads=4,ffn=172,vocab=300");
  o.dtype = DType::Q8_0;
  test::expect_error([&] { check_synth_options(o); }, {"q8_0", "ffn_dim", "172", "32"});
  o.shape = synth_shape("tiny");
  o.format = "safetensors";
  test::expect_error([&] { check_synth_options(o); }, {"safetensors", "q8_0"});
  o.format = "onnx";
  o.dtype = DType::F16;
  test::expect_error([&] { check_synth_options(o); }, {"onnx"});
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// `loom info` numbers, from the file's tensors, against what the config implies.
TEST(FormatsInfo, CountsAndDtypeMix) {
  const std::string dir = test::temp_dir();
  SynthOptions o;
  o.shape = synth_shape("gqa-24x6");
  o.dtype = DType::Q8_0;
  write_synth_model(o, dir + "/m.gguf");
  const ModelSummary g = summarize_model(dir + "/m.gguf");
  const ModelConfig& c = g.config;
  EXPECT_EQ(g.format, "gguf");
  EXPECT_EQ(g.n_params, c.param_count());
  // tied: embedding + 7 matrices per layer in q8_0; 2 norms per layer + output_norm in f32
  EXPECT_EQ(g.n_tensors, 1 + 9 * c.n_layers + 1);
  ASSERT_EQ(g.dtypes.size(), 2u);
  EXPECT_EQ(g.dtypes[0].dtype, "Q8_0");
  EXPECT_EQ(g.dtypes[0].tensors, 1 + 7 * c.n_layers);
  EXPECT_EQ(g.dtypes[1].dtype, "F32");
  EXPECT_EQ(g.dtypes[1].params, int64_t(2 * c.n_layers + 1) * c.d_model);
  EXPECT_EQ(g.dtypes[1].bytes, g.dtypes[1].params * 4);
  EXPECT_EQ(g.dtypes[0].bytes, g.dtypes[0].params / 32 * 34);
  EXPECT_EQ(g.weight_bytes, g.dtypes[0].bytes + g.dtypes[1].bytes);
  const std::string text = format_model_summary(g, true);
  EXPECT_NE(text.find("Q8_0"), std::string::npos);
  EXPECT_NE(text.find("blk.1.ffn_down.weight"), std::string::npos);

  o.format = "safetensors";
  o.dtype = DType::BF16;
  write_synth_model(o, dir + "/st");
  const ModelSummary s = summarize_model(dir + "/st/model.safetensors");
  EXPECT_EQ(s.format, "safetensors");
  EXPECT_EQ(s.n_params, c.param_count());
  ASSERT_EQ(s.dtypes.size(), 1u);
  EXPECT_EQ(s.dtypes[0].dtype, "BF16");
  EXPECT_EQ(s.weight_bytes, c.param_count() * 2);
}

}  // namespace
}  // namespace loom
