// loom quantize (model/quantize.h) and loom synth's type mixes.
//
// Oracles: the type of every tensor of llama-quantize's own files of the same model
// (../shared/models/tiny-quants, its dequant_sha256.json); the quantizers' stated bounds
// (core/dtype.h, tests/quant_bounds.h) for every value of every matrix; and the f32 tensors the
// files were made from. Exactness classes: the round trip is within each type's stated bound;
// files written from the same values through different readers (GGUF, safetensors) or writers
// (quantize, synth) are the same bytes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

#include "model/gguf.h"
#include "model/loader.h"
#include "model/quantize.h"
#include "model/synth.h"
#include "quant_bounds.h"
#include "sha256.h"
#include "test_formats_util.h"
#include "test_util.h"

namespace loom {
namespace {

std::string quants_dir() {
  const std::string s = test::shared_dir();
  return s.empty() ? "" : s + "/models/tiny-quants";
}

std::vector<float> values(const GgufTensorInfo& t) {
  int64_t n = 1;
  for (uint64_t d : t.dims) n *= int64_t(d);
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t.dtype, t.data, out.data(), n);
  return out;
}

// Every matrix of `q` within its type's bound of the same tensor of `f` (f32); vectors equal.
void expect_round_trip(const GgufFile& f, const GgufFile& q) {
  ASSERT_EQ(f.tensors().size(), q.tensors().size());
  for (const GgufTensorInfo& a : f.tensors()) {
    SCOPED_TRACE(a.name);
    const GgufTensorInfo* b = q.find_tensor(a.name);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(a.dims, b->dims);
    const auto x = values(a), w = values(*b);
    if (a.dims.size() == 1) {
      EXPECT_EQ(b->dtype, DType::F32);
      EXPECT_EQ(x, w);
      continue;
    }
    const int64_t cols = int64_t(a.dims[0]);
    int bad = 0;
    for (int64_t r = 0; r < int64_t(x.size()) / cols; ++r) {
      const auto bound = test::quant_error_bounds(b->dtype, x.data() + r * cols, cols);
      for (int64_t c = 0; c < cols; ++c) {
        const double err = std::fabs(double(x[size_t(r * cols + c)]) - double(w[size_t(r * cols + c)]));
        if (!(err <= bound[size_t(c)]) && bad++ < 3)
          ADD_FAILURE() << dtype_name(b->dtype) << " row " << r << " col " << c << " err " << err << " > " << bound[size_t(c)];
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// llama-quantize's type of every tensor (from the oracle's record of its files) is loom quantize's,
// for every scheme the oracle has, and every value is within its type's bound of tiny-f32.gguf's.
TEST(Quantize, TypeMixesOfLlamaQuantizeAndRoundTripBounds) {
  if (quants_dir().empty() || !std::ifstream(quants_dir() + "/dequant_sha256.json"))
    GTEST_SKIP() << "../shared/models/tiny-quants is missing beside the checkout; this test needs it";
  std::ifstream jf(quants_dir() + "/dequant_sha256.json");
  const nlohmann::json o = nlohmann::json::parse(jf);
  const GgufFile f32(quants_dir() + "/tiny-f32.gguf");
  for (const std::string q : {"q4_0", "q4_1", "q5_0", "q8_0", "q4_k_m", "q5_k_m", "q6_k"}) {
    SCOPED_TRACE(q);
    const std::string out = test::temp_dir() + "/tiny-" + q + ".gguf";
    const QuantizeResult r = quantize_model(quants_dir() + "/tiny-f32.gguf", out, parse_quant_scheme(q), 2);
    EXPECT_GT(r.bytes_out, 0);
    const GgufFile g(out);
    EXPECT_EQ(g.get_int("general.file_type"), parse_quant_scheme(q).file_type);
    const auto& rec = o.at("tiny-" + q + ".gguf");
    ASSERT_EQ(g.tensors().size(), rec.size());
    for (const GgufTensorInfo& t : g.tensors())
      EXPECT_EQ(ggml_type_name(t.ggml_type), rec.at(t.name).at("ggml_type").get<std::string>()) << t.name;
    // The metadata is the input's (besides the file type).
    for (const auto& [key, v] : f32.kvs()) {
      if (key != "general.file_type") {
        EXPECT_EQ(g.find(key) ? g.find(key)->short_text() : "(missing)", v.short_text()) << key;
      }
    }
    expect_round_trip(f32, g);
    EXPECT_NO_THROW(load_model(out));
  }
}

// Q8_0 is rounded as llama-quantize rounds it (d = amax / 127, q = round half away from zero of
// x / d): the same bytes, so the recorded digests of its dequantization.
TEST(Quantize, Q8_0IsLlamaQuantizesBytes) {
  if (quants_dir().empty() || !std::ifstream(quants_dir() + "/dequant_sha256.json"))
    GTEST_SKIP() << "../shared/models/tiny-quants is missing beside the checkout; this test needs it";
  const std::string out = test::temp_dir() + "/tiny-q8.gguf";
  quantize_model(quants_dir() + "/tiny-f32.gguf", out, parse_quant_scheme("q8_0"), 1);
  const GgufFile mine(out), theirs(quants_dir() + "/tiny-q8_0.gguf");
  for (const GgufTensorInfo& t : theirs.tensors()) {
    const GgufTensorInfo* m = mine.find_tensor(t.name);
    ASSERT_NE(m, nullptr);
    ASSERT_EQ(m->bytes, t.bytes);
    EXPECT_EQ(std::memcmp(m->data, t.data, size_t(t.bytes)), 0) << t.name;
  }
}

// From safetensors and from GGUF the same model quantizes to the same tensors (llama Q/K rows put
// in GGUF's order on the way), and loom synth's mixes are loom quantize's of its f32 model.
TEST(Quantize, SafetensorsGgufAndSynthAgree) {
  SynthOptions so;
  so.shape = parse_synth_dims("d=256,layers=3,heads=4,kv_heads=2,ffn=512,vocab=320,ctx=128");
  so.dtype = DType::F32;
  so.seed = 5;
  so.threads = 2;
  const std::string dir = test::temp_dir();
  write_synth_model(so, dir + "/m.gguf");
  so.format = "safetensors";
  write_synth_model(so, dir + "/m-st");
  for (const std::string q : {"q4_k_m", "q6_k", "q4_0"}) {
    SCOPED_TRACE(q);
    const QuantScheme s = parse_quant_scheme(q);
    quantize_model(dir + "/m.gguf", dir + "/a-" + q + ".gguf", s, 2);
    quantize_model(dir + "/m-st", dir + "/b-" + q + ".gguf", s, 2);
    SynthOptions sq = so;
    sq.format = "gguf";
    sq.mix = q;
    sq.dtype = s.base;
    write_synth_model(sq, dir + "/c-" + q + ".gguf");
    const GgufFile a(dir + "/a-" + q + ".gguf"), b(dir + "/b-" + q + ".gguf"), c(dir + "/c-" + q + ".gguf");
    for (const GgufFile* other : {&b, &c}) {
      ASSERT_EQ(a.tensors().size(), other->tensors().size());
      for (const GgufTensorInfo& t : a.tensors()) {
        const GgufTensorInfo* u = other->find_tensor(t.name);
        ASSERT_NE(u, nullptr) << t.name;
        EXPECT_EQ(u->ggml_type, t.ggml_type) << t.name;
        ASSERT_EQ(u->bytes, t.bytes) << t.name;
        EXPECT_EQ(std::memcmp(u->data, t.data, size_t(t.bytes)), 0) << t.name;
      }
    }
    const auto ma = load_model(dir + "/a-" + q + ".gguf"), mb = load_model(dir + "/b-" + q + ".gguf");
    EXPECT_EQ(ma->config.n_layers, mb->config.n_layers);
    EXPECT_EQ(ma->config.rope_style, mb->config.rope_style);
  }
}

TEST(Quantize, RefusesWhatItCannotWrite) {
  SynthOptions so;
  so.shape = parse_synth_dims("d=256,layers=1,heads=4,kv_heads=2,ffn=512,vocab=320,ctx=128");
  so.dtype = DType::Q8_0;
  so.threads = 1;
  const std::string dir = test::temp_dir();
  write_synth_model(so, dir + "/q8.gguf");
  test::expect_error([&] { quantize_model(dir + "/q8.gguf", dir + "/x.gguf", parse_quant_scheme("q4_0")); },
                     {"token_embd.weight", "q8_0", "f32, f16 or bf16"});
  test::expect_error([&] { parse_quant_scheme("q3_k_m"); }, {"q3_k_m", "q4_k_m", "q5_k_m", "q6_k", "q8_0", "q4_0"});
  test::expect_error([&] { quantize_model(dir + "/q8.gguf", dir + "/q8.gguf", parse_quant_scheme("q4_0")); },
                     {"is the input"});
  // Rows of 320 values: Q5_K would fall back to Q5_1.
  test::expect_error([&] { quant_scheme_tensor_type(parse_quant_scheme("q5_k_m"), "blk.0.ffn_gate.weight", 320, 4, false); },
                     {"blk.0.ffn_gate.weight", "320", "Q5_1"});
  // llama-quantize's other fallbacks: Q4_K -> Q5_0, Q6_K -> Q8_0, then F16.
  EXPECT_EQ(quant_scheme_tensor_type(parse_quant_scheme("q4_k_m"), "blk.0.ffn_gate.weight", 320, 4, false), DType::Q5_0);
  EXPECT_EQ(quant_scheme_tensor_type(parse_quant_scheme("q4_k_m"), "output.weight", 320, 4, false), DType::Q8_0);
  EXPECT_EQ(quant_scheme_tensor_type(parse_quant_scheme("q4_k_m"), "blk.0.ffn_gate.weight", 100, 4, false), DType::F16);
  EXPECT_EQ(quant_scheme_tensor_type(parse_quant_scheme("q4_0"), "token_embd.weight", 256, 4, true), DType::Q6_K);
  EXPECT_EQ(quant_scheme_tensor_type(parse_quant_scheme("q4_0"), "token_embd.weight", 256, 4, false), DType::Q4_0);
}

}  // namespace
}  // namespace loom
