// GGUF quantized types against an independent oracle: ../shared/models/tiny-quants (its README),
// one random-weight Llama quantized by llama.cpp's llama-quantize into Q4_0, Q4_1, Q5_0, Q8_0,
// Q4_K_M, Q5_K_M and Q6_K, with the SHA-256 of every tensor's dequantization as ggml computes it
// and F32 twins (gguf-py's dequantization) of the Q4_0 and Q4_K_M files.
//
// Exactness class: data (the same bits). loom's dequantize_row of every tensor of every file hashes
// to the recorded digest, and equals the twin's f32 values bit for bit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

#include "model/gguf.h"
#include "model/loader.h"
#include "sha256.h"
#include "test_util.h"

namespace loom {
namespace {

std::string quants_dir() {
  const std::string s = test::shared_dir();
  return s.empty() ? "" : s + "/models/tiny-quants";
}

#define REQUIRE_QUANTS()                                                                               \
  do {                                                                                                 \
    if (quants_dir().empty() || !std::ifstream(quants_dir() + "/dequant_sha256.json"))                \
      GTEST_SKIP() << "../shared/models/tiny-quants is missing beside the checkout; this test needs it"; \
  } while (0)

nlohmann::json oracle() {
  std::ifstream f(quants_dir() + "/dequant_sha256.json");
  return nlohmann::json::parse(f);
}

std::vector<float> dequantize(const GgufTensorInfo& t) {
  int64_t n = 1;
  for (uint64_t d : t.dims) n *= int64_t(d);
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t.dtype, t.data, out.data(), n);
  return out;
}

std::string sha_of(const std::vector<float>& v) {
  test::Sha256 h;
  h.update(v.data(), v.size() * sizeof(float));  // little-endian float32 on x86
  return h.hex();
}

TEST(QuantGguf, Sha256StandardExamples) {
  test::Sha256 h;
  EXPECT_EQ(h.hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  h.update("abc", 3);
  EXPECT_EQ(h.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  h.update(m.data(), m.size());
  EXPECT_EQ(h.hex(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  for (int i = 0; i < 10; ++i) h.update(million.data() + i * 100000, 100000);
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Every tensor of every file: type and shape as recorded, dequantization hashing to the digest.
TEST(QuantGguf, EveryTensorDequantizesToTheRecordedSha256) {
  REQUIRE_QUANTS();
  const nlohmann::json o = oracle();
  ASSERT_EQ(o.size(), 7u);
  std::map<std::string, int> types_seen;
  for (const auto& [file, tensors] : o.items()) {
    SCOPED_TRACE(file);
    const GgufFile f(quants_dir() + "/" + file);
    ASSERT_EQ(f.tensors().size(), tensors.size());
    for (const auto& [name, rec] : tensors.items()) {
      SCOPED_TRACE(name);
      const GgufTensorInfo* t = f.find_tensor(name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(ggml_type_name(t->ggml_type), rec.at("ggml_type").get<std::string>());
      ASSERT_EQ(t->dims.size(), rec.at("ne").size());
      for (size_t i = 0; i < t->dims.size(); ++i) EXPECT_EQ(t->dims[i], rec.at("ne")[i].get<uint64_t>());
      EXPECT_EQ(sha_of(dequantize(*t)), rec.at("sha256_f32").get<std::string>());
      ++types_seen[ggml_type_name(t->ggml_type)];
    }
  }
  // The oracle covers every type loom reads (besides F16 / BF16, covered by the round-trip tests).
  for (const char* ty : {"F32", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q4_K", "Q5_K", "Q6_K"})
    EXPECT_GT(types_seen[ty], 0) << ty;
}

// The F32 twins hold gguf-py's dequantization: loom's equals it value for value, bits included.
TEST(QuantGguf, DequantizationEqualsTheF32Twins) {
  REQUIRE_QUANTS();
  for (const std::string q : {"q4_0", "q4_k_m"}) {
    SCOPED_TRACE(q);
    const GgufFile f(quants_dir() + "/tiny-" + q + ".gguf");
    const GgufFile twin(quants_dir() + "/tiny-" + q + "-dequant-f32.gguf");
    ASSERT_EQ(f.tensors().size(), twin.tensors().size());
    for (const GgufTensorInfo& t : f.tensors()) {
      const GgufTensorInfo* u = twin.find_tensor(t.name);
      ASSERT_NE(u, nullptr) << t.name;
      ASSERT_EQ(u->dtype, DType::F32) << t.name;
      ASSERT_EQ(u->dims, t.dims) << t.name;
      const std::vector<float> v = dequantize(t);
      ASSERT_EQ(u->bytes, v.size() * sizeof(float)) << t.name;
      EXPECT_EQ(std::memcmp(u->data, v.data(), size_t(u->bytes)), 0) << t.name;
    }
  }
}

// Each file loads as a model: the matrices keep their file types (views of the mapping), the norms
// become f32.
TEST(QuantGguf, EveryFileLoads) {
  REQUIRE_QUANTS();
  const std::map<std::string, std::map<DType, int>> mixes = {
      {"q4_0", {{DType::Q4_0, 29}, {DType::Q6_K, 1}}}, {"q4_1", {{DType::Q4_1, 29}, {DType::Q6_K, 1}}},
      {"q5_0", {{DType::Q5_0, 29}, {DType::Q6_K, 1}}}, {"q8_0", {{DType::Q8_0, 30}}},
      {"q4_k_m", {{DType::Q4_K, 25}, {DType::Q6_K, 5}}}, {"q5_k_m", {{DType::Q5_K, 25}, {DType::Q6_K, 5}}},
      {"q6_k", {{DType::Q6_K, 30}}}};
  for (const auto& [q, mix] : mixes) {
    SCOPED_TRACE(q);
    const auto m = load_model(quants_dir() + "/tiny-" + q + ".gguf");
    EXPECT_EQ(m->config.n_layers, 4);
    EXPECT_EQ(m->config.d_model, 256);
    EXPECT_EQ(m->config.ffn_dim, 768);
    std::map<DType, int> got;
    for (const auto& [name, w] : m->tensors())
      if (w.rows > 1) ++got[w.dtype];
    EXPECT_EQ(got, mix);
  }
}

}  // namespace
}  // namespace loom
