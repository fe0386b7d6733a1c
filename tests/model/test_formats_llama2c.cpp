// The real stories260K llama2.c checkpoint (../shared/models/stories260K), checked against the
// README's numbers, and the llama2.c error cases.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/info.h"
#include "model/llama2c.h"
#include "model/loader.h"
#include "test_formats_util.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::string stories_bin() { return test::stories_dir() + "/stories260K.bin"; }

TEST(FormatsLlama2c, Stories260KConfigMatchesReadme) {
  LOOM_REQUIRE_SHARED();
  EXPECT_EQ(detect_model_format(stories_bin()), "llama2c");
  auto m = load_model(stories_bin());
  const ModelConfig& c = m->config;
  // README: dim 64, hidden_dim 172, n_layers 5, n_heads 8, n_kv_heads 4, vocab 512, seq_len 512,
  // eps 1e-5, theta 10000, interleaved RoPE, shared classifier.
  EXPECT_EQ(m->format, "llama2c");
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.ffn_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_style, RopeStyle::Interleaved);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  ASSERT_EQ(m->layers.size(), 5u);
  EXPECT_EQ(m->output.data, m->tok_embd.data);
  EXPECT_EQ(m->layers[4].wk.rows, 32);
  EXPECT_EQ(m->layers[4].w_down.cols, 172);

  // Views point into the file at the offsets the README's order implies: the first float of
  // layer 1's wq follows token_embedding, rms_att and layer 0's wq.
  const std::string bytes = test::read_bytes(stories_bin());
  const int64_t wq1 = 28 + 4 * (512 * 64 + 5 * 64 + 64 * 64);
  EXPECT_EQ(std::memcmp(m->layers[1].wq.data, bytes.data() + wq1, 64 * 64 * 4), 0);
  const int64_t rms_final = 28 + 4 * (512 * 64 + 5 * 64 + 5 * 64 * 64 * 2 + 5 * 32 * 64 * 2 + 5 * 64 + 3 * 5 * 172 * 64);
  EXPECT_EQ(std::memcmp(m->out_norm.data, bytes.data() + rms_final, 64 * 4), 0);
  EXPECT_EQ(m->out_norm.dtype, DType::F32);

  // The tokenizer beside it (tok512.bin) is found without --tokenizer.
  const Vocab v = load_vocab(stories_bin(), "");
  EXPECT_EQ(v.size(), 512);
  EXPECT_EQ(v.bos_id, 1);

  const ModelSummary s = summarize_model(stories_bin());
  EXPECT_EQ(s.n_params, c.param_count());
  EXPECT_EQ(s.weight_bytes, c.param_count() * 4);
  ASSERT_EQ(s.dtypes.size(), 1u);
  EXPECT_EQ(s.dtypes[0].dtype, "F32");
}

TEST(FormatsLlama2c, FileSizeMustMatchTheHeader) {
  LOOM_REQUIRE_SHARED();
  const std::string dir = test::temp_dir();
  const std::string bytes = test::read_bytes(stories_bin());
  ASSERT_EQ(bytes.size(), 1056540u);
  test::write_bytes(dir + "/short.bin", bytes.substr(0, bytes.size() - 4));
  test::expect_error([&] { load_model(dir + "/short.bin"); }, {"short.bin", "expected 1056540", "found 1056536"});
  test::write_bytes(dir + "/long.bin", bytes + std::string(8, '\0'));
  test::expect_error([&] { load_model(dir + "/long.bin"); }, {"expected 1056540", "found 1056548"});
  // A negative vocab_size promises a classifier at the end that is not there.
  std::string unshared = bytes;
  test::put_le<int32_t>(unshared, 20, -512);
  test::write_bytes(dir + "/unshared.bin", unshared);
  test::expect_error([&] { load_model(dir + "/unshared.bin"); },
                     {"expected " + std::to_string(1056540 + 512 * 64 * 4), "found 1056540", "separate"});
  // ... and with it appended, it loads with an untied output.
  test::write_bytes(dir + "/unshared.bin", unshared + bytes.substr(28, 512 * 64 * 4));
  auto m = load_model(dir + "/unshared.bin");
  EXPECT_FALSE(m->config.tied_embeddings);
  EXPECT_NE(m->output.data, m->tok_embd.data);
  EXPECT_EQ(std::memcmp(m->output.data, m->tok_embd.data, 512 * 64 * 4), 0);
  test::write_bytes(dir + "/tiny.bin", bytes.substr(0, 20));
  test::expect_error([&] { load_model(dir + "/tiny.bin"); }, {"20 bytes", "28-byte header"});
}

TEST(FormatsLlama2c, InconsistentHeader) {
  LOOM_REQUIRE_SHARED();
  const std::string dir = test::temp_dir();
  const std::string bytes = test::read_bytes(stories_bin());
  std::string b = bytes;
  test::put_le<int32_t>(b, 12, 7);  // n_heads 7 does not divide dim 64
  test::write_bytes(dir + "/h.bin", b);
  test::expect_error([&] { load_model(dir + "/h.bin"); }, {"n_heads = 7", "dim = 64"});
  b = bytes;
  test::put_le<int32_t>(b, 16, 3);  // kv heads 3 does not divide heads 8
  test::write_bytes(dir + "/kv.bin", b);
  test::expect_error([&] { load_model(dir + "/kv.bin"); }, {"num_attention_heads = 8", "num_key_value_heads = 3"});
  b = bytes;
  test::put_le<int32_t>(b, 8, 0);  // no layers
  test::write_bytes(dir + "/l.bin", b);
  test::expect_error([&] { load_model(dir + "/l.bin"); }, {"n_layers = 0"});
}

TEST(FormatsLlama2c, MissingTokenizerAsksForOne) {
  LOOM_REQUIRE_SHARED();
  const std::string dir = test::temp_dir();
  fs::copy_file(stories_bin(), dir + "/model.bin");
  test::expect_error([&] { load_vocab(dir + "/model.bin", ""); }, {"no tokenizer", "--tokenizer"});
  // An explicit tokenizer is taken as given.
  const Vocab v = load_vocab(dir + "/model.bin", test::stories_dir() + "/tok512.bin");
  EXPECT_EQ(v.size(), 512);
}

}  // namespace
}  // namespace loom
