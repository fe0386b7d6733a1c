// Hostile model and tokenizer files, round two (issue 36): files that are not regular files (a
// FIFO blocked `loom info` forever; config.json and tokenizer.json symlinked to /dev/zero read
// 16.8 GB), GGUF general.alignment that is not a positive power of two (UB for -1, INT64_MIN,
// UINT64_MAX), errors that printed rounded or wrapped numbers, a metadata array of a million empty
// arrays, a shard index of 100k names, tokenizers smaller than the model's vocabulary or without
// their byte alphabet (they decoded to nothing), and a BPE merge echoed whole in its error.
// Each ends in one short loom::Error naming the value and the limit.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/loader.h"
#include "model/safetensors.h"
#include "model/synth.h"
#include "model/tokenizer.h"
#include "model/vocab_io.h"
#include "test_formats_util.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void expect_short_error(const std::function<void()>& fn, std::initializer_list<std::string> parts,
                        size_t max_len = 400) {
  const std::string e = test::error_of<Error>(fn);
  ASSERT_NE(e, test::kNoError) << "expected a loom::Error mentioning '" << *parts.begin() << "'";
  for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "message: " << e << "\nmissing: " << p;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_LE(e.size(), max_len) << e.substr(0, 600);
}

// ---- files that are not regular files ----

TEST(HostileFilesRound2, NonRegularFilesAreRefusedBeforeReading) {
  const std::string dir = test::temp_dir();
  // A FIFO as the model: refused at once (opening it blocked until a writer came).
  const std::string fifo = dir + "/model.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_short_error([&] { load_model(fifo); }, {fifo, "FIFO", "not a regular file"});
  expect_short_error([&] { inspect_model_file(fifo); }, {"FIFO"});
  // A directory and a character device as the tokenizer.
  SynthOptions o;
  o.shape = synth_shape("tiny");
  o.dtype = DType::F32;
  o.threads = 1;
  const std::string model = dir + "/tiny.gguf";
  write_synth_model(o, model);
  expect_short_error([&] { load_vocab(model, "/dev/zero"); }, {"/dev/zero", "character device"});
  expect_short_error([&] { load_vocab(model, dir); }, {"directory"});
  // An HF folder whose config.json, then tokenizer.json, is a symlink to /dev/zero.
  const std::string hf = dir + "/hf";
  o.format = "safetensors";
  write_synth_model(o, hf);
  ASSERT_NO_THROW(load_vocab(hf, ""));
  fs::rename(hf + "/tokenizer.json", hf + "/tokenizer.json.real");
  fs::create_symlink("/dev/zero", hf + "/tokenizer.json");
  expect_short_error([&] { load_vocab(hf, ""); }, {"tokenizer.json", "character device"});
  fs::rename(hf + "/config.json", hf + "/config.json.real");
  fs::create_symlink("/dev/zero", hf + "/config.json");
  expect_short_error([&] { load_model(hf); }, {"config.json", "character device"});
  // A shard index symlinked there too.
  fs::remove(hf + "/config.json");
  fs::rename(hf + "/config.json.real", hf + "/config.json");
  fs::create_symlink("/dev/zero", hf + "/model.safetensors.index.json");
  expect_short_error([&] { load_model(hf); }, {"model.safetensors.index.json", "character device"});
  // An oversized config is refused by its size, before reading.
  fs::remove(hf + "/model.safetensors.index.json");
  fs::remove(hf + "/config.json");
  test::write_bytes(hf + "/config.json", std::string(5u << 20, ' '));
  expect_short_error([&] { load_model(hf); }, {"config.json", "5242880 bytes", "limit of 4194304"});
}

// ---- GGUF ----

// A GGUF v3 file with no tensors and the given key/values (each already encoded: key, type,
// value bytes).
struct RawGguf {
  std::string kvs;
  int n = 0;
  template <typename T>
  RawGguf& scalar(const std::string& key, uint32_t type, T v) {
    put_str(key);
    put(type);
    put(v);
    ++n;
    return *this;
  }
  template <typename T>
  void put(T v) {
    kvs.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_str(const std::string& s) {
    put(uint64_t(s.size()));
    kvs += s;
  }
  std::string bytes() const {
    std::string b = "GGUF";
    auto app = [&](auto v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); };
    app(uint32_t(3));
    app(uint64_t(0));
    app(uint64_t(n));
    return b + kvs;
  }
  std::string save(const std::string& name) const {
    const std::string p = test::temp_dir() + "/" + name;
    test::write_bytes(p, bytes());
    return p;
  }
};

constexpr uint32_t kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kU64 = 10, kI64 = 11, kF32 = 6;

TEST(HostileFilesRound2, GgufAlignmentMustBeAPositivePowerOfTwo) {
  struct Case {
    uint32_t type;
    std::function<void(RawGguf&)> set;
    std::string shown;  // the value as the message must print it
  };
  auto i64 = [](int64_t v) { return [v](RawGguf& g) { g.scalar("general.alignment", kI64, v); }; };
  auto u64 = [](uint64_t v) { return [v](RawGguf& g) { g.scalar("general.alignment", kU64, v); }; };
  auto i32 = [](int32_t v) { return [v](RawGguf& g) { g.scalar("general.alignment", kI32, v); }; };
  auto u32 = [](uint32_t v) { return [v](RawGguf& g) { g.scalar("general.alignment", kU32, v); }; };
  auto i8 = [](int8_t v) { return [v](RawGguf& g) { g.scalar("general.alignment", kI8, v); }; };
  auto i16 = [](int16_t v) { return [v](RawGguf& g) { g.scalar("general.alignment", kI16, v); }; };
  const std::vector<Case> bad = {
      {kI64, i64(-1), "-1"},
      {kI64, i64(-32), "-32"},
      {kI64, i64(std::numeric_limits<int64_t>::min()), "-9223372036854775808"},
      {kU64, u64(std::numeric_limits<uint64_t>::max()), "18446744073709551615"},
      {kU64, u64(uint64_t(1) << 63), "9223372036854775808"},
      {kI32, i32(-1), "-1"},
      {kI32, i32(std::numeric_limits<int32_t>::min()), "-2147483648"},
      {kU32, u32(0), "0"},
      {kU32, u32(48), "48"},
      {kU32, u32(std::numeric_limits<uint32_t>::max()), "4294967295"},
      {kI8, i8(-128), "-128"},
      {kI16, i16(-32), "-32"},
      {kU64, u64(uint64_t(1) << 21), "2097152"},  // a power of two past loom's cap
  };
  for (const Case& c : bad) {
    RawGguf g;
    c.set(g);
    const std::string p = g.save("align.gguf");
    expect_short_error([&] { GgufFile f(p); }, {"general.alignment", "': " + c.shown + " (", "power of two"});
  }
  for (uint64_t ok : {uint64_t(1), uint64_t(32), uint64_t(64), uint64_t(1) << 20}) {
    RawGguf g;
    g.scalar("general.alignment", kU64, ok);
    const std::string p = g.save("align.gguf");
    GgufFile f(p);
    EXPECT_EQ(f.alignment(), ok);
  }
  {
    RawGguf g;
    g.scalar("general.alignment", kF32, 32.0f);
    const std::string p = g.save("align.gguf");
    expect_short_error([&] { GgufFile f(p); }, {"general.alignment", "expected an integer", "f32"});
  }
}

TEST(HostileFilesRound2, GgufErrorsPrintTheFilesNumbers) {
  // An integer key past int64 is printed exactly (it read 1.84467e+19), and `loom info`'s text
  // of a large integer is exact (it printed 1.23457e+10).
  RawGguf g;
  g.scalar("llama.context_length", kU64, std::numeric_limits<uint64_t>::max());
  g.scalar("x.big", kU64, uint64_t(12345678901));
  g.scalar("x.neg", kI64, int64_t(-9007199254740993));  // 2^53 + 1: not a double
  const std::string p = g.save("numbers.gguf");
  GgufFile f(p);
  expect_short_error([&] { f.get_int("llama.context_length"); }, {"18446744073709551615", "out of range"});
  EXPECT_EQ(f.find("x.big")->short_text(), "12345678901");
  EXPECT_EQ(f.find("x.neg")->short_text(), "-9007199254740993");
  EXPECT_EQ(f.get_int("x.neg"), -9007199254740993);

  // A tensor whose offset + size wraps 2^64: the message names the offset and the size (it
  // printed the wrapped end).
  SynthOptions o;
  o.shape = synth_shape("tiny");
  o.dtype = DType::F32;
  o.threads = 1;
  const std::string model = test::temp_dir() + "/wrap.gguf";
  write_synth_model(o, model);
  std::string b = test::read_bytes(model);
  GgufFile good(model);
  const GgufTensorInfo& t0 = good.tensors()[0];
  // Find the first tensor's offset field in the header: its name, then n_dims, dims, type, offset.
  const size_t name_at = b.find(t0.name);
  ASSERT_NE(name_at, std::string::npos);
  const size_t off_at = name_at + t0.name.size() + 4 + 8 * t0.dims.size() + 4;
  ASSERT_EQ(test::get_le<uint64_t>(b, off_at), t0.offset);
  const uint64_t huge = (std::numeric_limits<uint64_t>::max() / 32) * 32;  // aligned, wraps with any size
  test::put_le<uint64_t>(b, off_at, huge);
  test::write_bytes(model, b);
  expect_short_error([&] { GgufFile f2(model); }, {"'" + t0.name + "'", "at offset " + std::to_string(huge), "run past its end"});
}

TEST(HostileFilesRound2, GgufNestedArraysAreBoundedAndCheap) {
  // The probe's file: one key holding 10^6 empty arrays (12 MB). It is read (the elements are not
  // kept) with no string built per element (it ran for over 30 s in the sanitized build).
  RawGguf g;
  g.put_str("x.arrays");
  g.put(uint32_t(9));  // array
  g.put(uint32_t(9));  // of arrays
  g.put(uint64_t(1000000));
  for (int i = 0; i < 1000000; ++i) {
    g.put(uint32_t(kU8));
    g.put(uint64_t(0));
  }
  g.n = 1;
  const std::string p = g.save("arrays.gguf");
  GgufFile f(p);
  EXPECT_EQ(f.find("x.arrays")->count, 1000000u);
  // More nested elements than the bound (2^24): refused, naming it.
  RawGguf h;
  h.put_str("x.arrays");
  h.put(uint32_t(9));
  h.put(uint32_t(9));
  h.put(uint64_t(2));
  h.put(uint32_t(kU8));
  h.put(uint64_t(1) << 24);
  h.kvs += std::string(size_t(1) << 24, '\0');
  h.put(uint32_t(kU8));
  h.put(uint64_t(1));
  h.kvs += std::string(1, '\0');
  h.n = 1;
  const std::string q = h.save("arrays2.gguf");
  expect_short_error([&] { GgufFile f2(q); }, {"x.arrays", "more than 16777216 elements"});
  // Bools nested in arrays are still checked.
  RawGguf k;
  k.put_str("x.bools");
  k.put(uint32_t(9));
  k.put(uint32_t(9));
  k.put(uint64_t(1));
  k.put(uint32_t(7));  // bool
  k.put(uint64_t(1));
  k.kvs += std::string(1, '\x05');
  k.n = 1;
  const std::string r = k.save("bools.gguf");
  expect_short_error([&] { GgufFile f3(r); }, {"bool value 5"});
}

// ---- safetensors shard index ----

TEST(HostileFilesRound2, ShardIndexOfManyNamesIsDeduplicated) {
  const std::string dir = test::temp_dir() + "/shards";
  SynthOptions o;
  o.shape = synth_shape("tiny");
  o.dtype = DType::F32;
  o.format = "safetensors";
  o.threads = 1;
  write_synth_model(o, dir);
  // 100k tensor names over 100k distinct shard files (none exists) and 50k more over one, within
  // the index's 4 MiB: the first missing shard is named; the list is de-duplicated in linear time
  // (a find per name took 26 s).
  json map = json::object();
  for (int i = 0; i < 100000; ++i) map[cat("t", i)] = cat("s", i);
  for (int i = 0; i < 50000; ++i) map[cat("u", i)] = "model.safetensors";
  test::write_bytes(dir + "/model.safetensors.index.json", json{{"weight_map", map}}.dump());
  std::string d;
  const auto files = safetensors_model_files(dir, &d);
  EXPECT_EQ(files.size(), 100001u);
  expect_short_error([&] { load_model(dir); }, {"shard", "is missing"});
}

// ---- tokenizers ----

TEST(HostileFilesRound2, TokenizerMuchSmallerThanTheVocabularyIsRefused) {
  const std::string dir = test::temp_dir();
  SynthOptions o;
  o.shape = synth_shape("tiny");
  o.shape.config.vocab_size = 1024;
  o.dtype = DType::F32;
  o.threads = 1;
  const std::string model = dir + "/m.gguf";
  write_synth_model(o, model);
  ASSERT_NO_THROW(load_vocab(model, ""));
  // A 300-token tokenizer for the 1024-token model: 724 ids would decode to nothing.
  Vocab small = synth_vocab(VocabKind::Spm, 300, 3);
  const std::string tok = dir + "/small.json";
  test::write_bytes(tok, vocab_to_tokenizer_json(small));
  expect_short_error([&] { load_vocab(model, tok); },
                     {"has 300 tokens", "vocab_size 1024", "ids 300..1023 would decode to nothing", "at most 256"});
  // Within the padding allowance (a padded vocabulary): accepted.
  Vocab padded = synth_vocab(VocabKind::Spm, 800, 3);
  test::write_bytes(tok, vocab_to_tokenizer_json(padded));
  EXPECT_EQ(load_vocab(model, tok).size(), 800);
}

TEST(HostileFilesRound2, VocabularyWithoutItsByteAlphabetIsRefused) {
  // Byte-level BPE missing one byte character: refused, naming the byte.
  Vocab bpe = synth_bpe_vocab(400, 2, "gpt2");
  ASSERT_NO_THROW(Tokenizer::create(bpe));
  const std::string a = "a";
  const auto it = std::find(bpe.tokens.begin(), bpe.tokens.end(), a);
  ASSERT_NE(it, bpe.tokens.end());
  *it = "\xe2\x98\x83";  // the token for byte 'a' replaced by a snowman
  bpe.merges.erase(std::remove_if(bpe.merges.begin(), bpe.merges.end(),
                                  [](const std::string& m) { return m.find('a') != std::string::npos; }),
                   bpe.merges.end());
  expect_short_error([&] { Tokenizer::create(bpe); }, {"lacks 1 of the 256 byte-alphabet tokens", "byte 0x61"});
  // Spm with part of the byte fallback: refused; with none and no unknown token: refused.
  Vocab spm = synth_vocab(VocabKind::Spm, 300, 2);
  ASSERT_NO_THROW(Tokenizer::create(spm));
  const auto b7 = std::find(spm.tokens.begin(), spm.tokens.end(), "<0x07>");
  ASSERT_NE(b7, spm.tokens.end());
  *b7 = "<not-a-byte>";
  expect_short_error([&] { Tokenizer::create(spm); }, {"255 of the 256 byte-fallback tokens", "<0x07>"});
  Vocab none;
  none.kind = VocabKind::Spm;
  none.tokens = {"a", "b", "ab"};
  expect_short_error([&] { Tokenizer::create(none); }, {"neither byte-fallback tokens", "nor an unknown token"});
  none.tokens.push_back("<unk>");
  none.unk_id = 3;
  EXPECT_NO_THROW(Tokenizer::create(none));
}

TEST(HostileFilesRound2, AnUnknownBpeMergeIsQuotedShort) {
  Vocab bpe = synth_bpe_vocab(400, 2, "gpt2");
  bpe.merges.push_back(std::string(600000, 'q') + " x");
  expect_short_error([&] { Tokenizer::create(bpe); }, {"BPE merge", "600002 bytes"});
}

}  // namespace
}  // namespace loom
