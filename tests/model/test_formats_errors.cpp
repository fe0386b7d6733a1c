// Corrupted GGUF and safetensors files and bad configs: each must raise a one-line loom::Error
// naming the tensor or key with the expected and found values (never a crash).
#include <gtest/gtest.h>

#include <filesystem>
#include <typeinfo>
#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/loader.h"
#include "model/safetensors.h"
#include "model/synth.h"
#include "test_formats_util.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::expect_error;
using test::get_le;
using test::put_le;
using test::read_bytes;
using test::write_bytes;

// A fresh tiny GGUF (untied, f16) and its bytes.
struct GgufFixture {
  std::string dir, path, bytes;
  GgufFixture() {
    dir = test::temp_dir();
    path = dir + "/m.gguf";
    SynthOptions o;
    o.shape = synth_shape("tiny");
    o.dtype = DType::F16;
    write_synth_model(o, path);
    bytes = read_bytes(path);
  }
  std::string save(const std::string& b, const std::string& name = "bad.gguf") const {
    write_bytes(dir + "/" + name, b);
    return dir + "/" + name;
  }
};

// Positions of one tensor info's fields in a GGUF file, found by its length-prefixed name.
struct InfoPos {
  size_t n_dims, dims, type, offset;
};
InfoPos find_info(const std::string& b, const std::string& name) {
  std::string key(8, '\0');
  put_le<uint64_t>(key, 0, name.size());
  key += name;
  const size_t at = b.find(key);
  EXPECT_NE(at, std::string::npos) << name;
  InfoPos p;
  p.n_dims = at + key.size();
  const uint32_t nd = get_le<uint32_t>(b, p.n_dims);
  p.dims = p.n_dims + 4;
  p.type = p.dims + 8 * nd;
  p.offset = p.type + 4;
  return p;
}

TEST(FormatsGgufErrors, BadMagicAndVersion) {
  GgufFixture f;
  std::string b = f.bytes;
  b[3] = 'X';
  expect_error([&] { GgufFile g(f.save(b)); }, {"bad magic", "expected \"GGUF\"", "found \"GGUX\""});
  // detect_model_format then takes it for llama2.c, whose header check fails cleanly too
  expect_error([&] { load_model(f.save(b)); }, {"bad.gguf"});
  b = f.bytes;
  put_le<uint32_t>(b, 4, 4);
  expect_error([&] { load_model(f.save(b)); }, {"version 4", "expected 3"});
}

TEST(FormatsGgufErrors, Truncated) {
  GgufFixture f;
  // Cut into the last tensor's data (output.weight, the untied classifier).
  expect_error([&] { load_model(f.save(f.bytes.substr(0, f.bytes.size() - 100))); },
               {"output.weight", "run past", "truncated"});
  // Cut inside the metadata: the reader names what it was reading.
  expect_error([&] { load_model(f.save(f.bytes.substr(0, 300))); }, {"kv_count 23", "truncated"});
  expect_error([&] { load_model(f.save(f.bytes.substr(0, 3000))); },
               {"tokenizer.ggml.tokens", "array of 512 strings", "cannot fit"});
  expect_error([&] { load_model(f.save(f.bytes.substr(0, 5500))); },
               {"truncated reading key 'tokenizer.ggml.tokens'", "need", "left"});
  expect_error([&] { load_model(f.save(f.bytes.substr(0, 10))); }, {"truncated", "tensor_count"});
}

TEST(FormatsGgufErrors, UnknownGgmlType) {
  GgufFixture f;
  std::string b = f.bytes;
  const InfoPos p = find_info(b, "blk.0.attn_v.weight");
  // Q3_K (11) and IQ4_XS (23): ggml types loom does not read, refused in one line naming the
  // tensor, the type and what is read.
  put_le<uint32_t>(b, p.type, 11);
  expect_error([&] { load_model(f.save(b)); },
               {"blk.0.attn_v.weight", "ggml type 11", "Q3_K", "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K"});
  put_le<uint32_t>(b, p.type, 23);
  expect_error([&] { load_model(f.save(b)); }, {"blk.0.attn_v.weight", "ggml type 23", "IQ4_XS"});
  put_le<uint32_t>(b, p.type, 777);
  expect_error([&] { load_model(f.save(b)); }, {"blk.0.attn_v.weight", "777", "unknown"});
}

TEST(FormatsGgufErrors, WrongShape) {
  GgufFixture f;
  // attn_k is [kv_dim 32, d 64]; make it [16, 64] (fewer bytes, so nothing overlaps).
  std::string b = f.bytes;
  const InfoPos p = find_info(b, "blk.1.attn_k.weight");
  ASSERT_EQ(get_le<uint64_t>(b, p.dims + 8), 32u);
  put_le<uint64_t>(b, p.dims + 8, 16);
  expect_error([&] { load_model(f.save(b)); }, {"blk.1.attn_k.weight", "expected shape [32, 64]", "found [16, 64]"});
  // Same byte count, dims swapped.
  b = f.bytes;
  put_le<uint64_t>(b, p.dims, 32);
  put_le<uint64_t>(b, p.dims + 8, 64);
  expect_error([&] { load_model(f.save(b)); }, {"blk.1.attn_k.weight", "expected shape [32, 64]", "found [64, 32]"});
}

TEST(FormatsGgufErrors, MissingTensor) {
  GgufFixture f;
  std::string b = f.bytes;
  const size_t at = b.find("blk.1.ffn_up.weight");
  ASSERT_NE(at, std::string::npos);
  b[at + 11] = 'q';  // blk.1.ffn_uq.weight
  expect_error([&] { load_model(f.save(b)); }, {"missing tensor 'blk.1.ffn_up.weight'"});
}

TEST(FormatsGgufErrors, OffsetsOutOfRangeMisalignedOverlapping) {
  GgufFixture f;
  std::string b = f.bytes;
  const InfoPos p = find_info(b, "blk.0.ffn_gate.weight");
  const InfoPos q = find_info(b, "blk.0.ffn_up.weight");
  put_le<uint64_t>(b, p.offset, uint64_t(1) << 40);
  expect_error([&] { load_model(f.save(b)); }, {"blk.0.ffn_gate.weight", "run past"});
  b = f.bytes;
  put_le<uint64_t>(b, p.offset, get_le<uint64_t>(b, p.offset) + 2);
  expect_error([&] { load_model(f.save(b)); }, {"blk.0.ffn_gate.weight", "not a multiple of the alignment 32"});
  b = f.bytes;
  put_le<uint64_t>(b, q.offset, get_le<uint64_t>(b, p.offset) + 32);
  expect_error([&] { load_model(f.save(b)); }, {"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "overlap"});
}

TEST(FormatsGgufErrors, InconsistentConfig) {
  GgufFixture f;
  auto patch_u32 = [&](const std::string& key, uint32_t v) {
    std::string b = f.bytes;
    std::string k(8, '\0');
    put_le<uint64_t>(k, 0, key.size());
    k += key;
    const size_t at = b.find(k);
    EXPECT_NE(at, std::string::npos) << key;
    EXPECT_EQ(get_le<uint32_t>(b, at + k.size()), 4u) << key << " is not a u32";
    put_le<uint32_t>(b, at + k.size() + 4, v);
    return f.save(b);
  };
  expect_error([&] { load_model(patch_u32("llama.attention.head_count_kv", 3)); },
               {"num_attention_heads = 4", "num_key_value_heads = 3"});
  expect_error([&] { load_model(patch_u32("llama.attention.head_count", 5)); },
               {"llama.attention.head_count' = 5", "embedding_length = 64"});
  expect_error([&] { load_model(patch_u32("llama.vocab_size", 500)); },
               {"llama.vocab_size' = 500", "token_embd.weight", "512 rows"});
  expect_error([&] { load_model(patch_u32("llama.block_count", 1)); },
               {"blk.1.", "layer 1", "llama.block_count = 1"});
  expect_error([&] { load_model(patch_u32("llama.block_count", 2000000000)); }, {"missing tensor 'blk.2.attn_norm.weight'"});
  expect_error([&] { load_model(patch_u32("llama.rope.dimension_count", 8)); },
               {"rope.dimension_count' = 8", "16"});
  // A wrong value type is named too.
  std::string b = f.bytes;
  const std::string key = "llama.block_count";
  std::string k(8, '\0');
  put_le<uint64_t>(k, 0, key.size());
  const size_t at = b.find(k + key);
  put_le<uint32_t>(b, at + 8 + key.size(), 6);  // u32 -> f32 (same size)
  expect_error([&] { load_model(f.save(b)); }, {"llama.block_count", "integer", "f32"});
  // Unknown architecture.
  b = f.bytes;
  const size_t arch = b.find("llama", b.find("general.architecture") + 20 + 12);
  b.replace(arch, 5, "gemma");
  expect_error([&] { load_model(f.save(b)); }, {"general.architecture 'gemma'", "llama, qwen2"});
}

TEST(FormatsGgufErrors, VocabTooLargeForModel) {
  GgufFixture f;  // 512 tokens
  const std::string small = f.dir + "/small.gguf";
  SynthOptions o;
  o.shape = parse_synth_dims("d=64,layers=1,heads=4,ffn=64,vocab=300,ctx=32");
  write_synth_model(o, small);
  expect_error([&] { load_vocab(small, f.path); }, {"512 tokens", "vocab_size 300"});
  // Smaller than the model's (padded) embedding is accepted: those rows are never encoded.
  EXPECT_EQ(load_vocab(f.path, small).size(), 300);
}

// ---- safetensors ----

struct StFixture {
  std::string dir;
  std::string bytes;
  json header;
  uint64_t header_len = 0;
  StFixture() {
    dir = test::temp_dir() + "/m";
    SynthOptions o;
    o.shape = synth_shape("tiny");
    o.dtype = DType::BF16;
    o.format = "safetensors";
    write_synth_model(o, dir);
    bytes = read_bytes(dir + "/model.safetensors");
    header_len = get_le<uint64_t>(bytes, 0);
    header = json::parse(bytes.substr(8, size_t(header_len)));
  }
  // Writes the model with a modified header (same data buffer).
  std::string with_header(const json& h) const {
    std::string text = h.dump();
    while ((8 + text.size()) % 8) text += ' ';
    std::string b(8, '\0');
    put_le<uint64_t>(b, 0, text.size());
    b += text + bytes.substr(8 + size_t(header_len));
    write_bytes(dir + "/model.safetensors", b);
    return dir;
  }
};

TEST(FormatsSafetensorsErrors, TruncatedAndHeaderLength) {
  StFixture f;
  write_bytes(f.dir + "/model.safetensors", f.bytes.substr(0, f.bytes.size() - 10));
  expect_error([&] { load_model(f.dir); }, {"run past the end", "truncated"});
  std::string b = f.bytes;
  put_le<uint64_t>(b, 0, uint64_t(1) << 40);
  write_bytes(f.dir + "/model.safetensors", b);
  expect_error([&] { load_model(f.dir); }, {"header length 1099511627776", "past the end", std::to_string(b.size() - 8)});
  write_bytes(f.dir + "/model.safetensors", "abc");
  expect_error([&] { load_model(f.dir); }, {"3 bytes", "8-byte header length"});
  b = f.bytes;
  b[9] = '#';
  write_bytes(f.dir + "/model.safetensors", b);
  expect_error([&] { load_model(f.dir); }, {"not valid JSON"});
}

TEST(FormatsSafetensorsErrors, DtypeShapeMissing) {
  StFixture f;
  json h = f.header;
  h["model.layers.0.mlp.up_proj.weight"]["dtype"] = "F8_E4M3";
  expect_error([&] { load_model(f.with_header(h)); }, {"model.layers.0.mlp.up_proj.weight", "F8_E4M3", "not supported"});
  h = f.header;
  h["model.layers.0.mlp.up_proj.weight"]["dtype"] = "Q9";
  expect_error([&] { load_model(f.with_header(h)); }, {"model.layers.0.mlp.up_proj.weight", "unknown dtype 'Q9'"});
  // Shape whose size disagrees with the offsets.
  h = f.header;
  h["model.layers.1.self_attn.k_proj.weight"]["shape"] = {16, 64};
  expect_error([&] { load_model(f.with_header(h)); },
               {"model.layers.1.self_attn.k_proj.weight", "expected 2048 bytes", "found 4096"});
  // Same size, wrong shape.
  h = f.header;
  h["model.layers.1.self_attn.k_proj.weight"]["shape"] = {64, 32};
  expect_error([&] { load_model(f.with_header(h)); },
               {"model.layers.1.self_attn.k_proj.weight", "expected shape [32, 64]", "found [64, 32]"});
  // A norm that is not a vector.
  h = f.header;
  h["model.norm.weight"]["shape"] = {1, 64};
  expect_error([&] { load_model(f.with_header(h)); }, {"model.norm.weight", "expected shape [64]", "found [1, 64]"});
  h = f.header;
  h["model.layers.1.mlp.down_proj.weight_renamed"] = h["model.layers.1.mlp.down_proj.weight"];
  h.erase("model.layers.1.mlp.down_proj.weight");
  expect_error([&] { load_model(f.with_header(h)); }, {"missing tensor 'model.layers.1.mlp.down_proj.weight'"});
  h = f.header;
  h.erase("lm_head.weight");
  expect_error([&] { load_model(f.with_header(h)); }, {"missing tensor 'lm_head.weight'", "tie_word_embeddings"});
}

TEST(FormatsSafetensorsErrors, OffsetsOutOfRangeOrOverlapping) {
  StFixture f;
  json h = f.header;
  const std::string a = "model.layers.0.self_attn.q_proj.weight", b = "model.layers.0.self_attn.k_proj.weight";
  const uint64_t a0 = h[a]["data_offsets"][0];
  const uint64_t data = f.bytes.size() - 8 - f.header_len;
  h[a]["data_offsets"] = {data, data + 8192};
  expect_error([&] { load_model(f.with_header(h)); }, {a, "run past the end", std::to_string(data)});
  h = f.header;
  h[a]["data_offsets"] = {a0 + 8192, a0};
  expect_error([&] { load_model(f.with_header(h)); }, {a, "end before they begin"});
  h = f.header;
  h[b]["data_offsets"] = {a0 + 2, a0 + 2 + 4096};  // inside q_proj
  expect_error([&] { load_model(f.with_header(h)); }, {a, b, "overlap"});
  h = f.header;
  h[a]["data_offsets"] = {-1, 5};
  expect_error([&] { load_model(f.with_header(h)); }, {a, "data_offsets"});
}

TEST(FormatsSafetensorsErrors, BadConfigJson) {
  StFixture f;
  const json good = json::parse(read_bytes(f.dir + "/config.json"));
  auto with = [&](const std::function<void(json&)>& edit) {
    json c = good;
    edit(c);
    write_bytes(f.dir + "/config.json", c.dump());
    return f.dir;
  };
  expect_error([&] { load_model(with([](json& c) { c["architectures"] = {"GemmaForCausalLM"}; })); },
               {"architecture 'GemmaForCausalLM'", "LlamaForCausalLM"});
  expect_error([&] { load_model(with([](json& c) { c["num_key_value_heads"] = 3; })); },
               {"num_attention_heads = 4", "num_key_value_heads = 3"});
  expect_error([&] {
    load_model(with([](json& c) {
      c["num_attention_heads"] = 5;
      c.erase("head_dim");
    }));
  }, {"num_attention_heads = 5", "hidden_size = 64"});
  expect_error([&] { load_model(with([](json& c) { c.erase("hidden_size"); })); }, {"missing key 'hidden_size'"});
  expect_error([&] { load_model(with([](json& c) { c["num_hidden_layers"] = 1; })); },
               {"model.layers.1.", "layer 1", "num_hidden_layers = 1"});
  expect_error([&] { load_model(with([](json& c) { c["intermediate_size"] = "big"; })); },
               {"intermediate_size", "integer", "\"big\""});
  expect_error([&] { load_model(with([](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}}; })); },
               {"rope_scaling type 'yarn'"});
  expect_error([&] { load_model(with([](json& c) { c["eos_token_id"] = {2, 9999}; })); },
               {"eos_token_id' = 9999", "vocab_size = 512"});
  // Config and tensors disagree: the tensor is named with both shapes.
  expect_error([&] { load_model(with([](json& c) { c["intermediate_size"] = 160; })); },
               {"model.layers.0.mlp.gate_proj.weight", "expected shape [160, 64]", "found [192, 64]"});
  write_bytes(f.dir + "/config.json", "{ not json");
  expect_error([&] { load_model(f.dir); }, {"config.json", "not valid JSON"});
  fs::remove(f.dir + "/config.json");
  expect_error([&] { load_model(f.dir + "/model.safetensors"); }, {"no config.json"});
  expect_error([&] { load_model(f.dir); }, {"without config.json"});
}

TEST(FormatsSafetensorsErrors, EosListKeepsAll) {
  StFixture f;
  json c = json::parse(read_bytes(f.dir + "/config.json"));
  c["eos_token_id"] = {2, 7, 9};
  write_bytes(f.dir + "/config.json", c.dump());
  auto m = load_model(f.dir);
  EXPECT_EQ(m->config.eos_id, 2);
  EXPECT_EQ(m->config.eos_ids, (std::vector<int>{2, 7, 9}));
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Every single-byte corruption of a small GGUF's header and of a safetensors header either
// loads or raises loom::Error: no crash, no other exception type (run under LOOM_SANITIZE for
// out-of-bounds reads).
void expect_only_loom_errors(const std::string& path, const std::string& good, const std::vector<size_t>& positions,
                             const std::function<void(const std::string&)>& load) {
  int errors = 0, loaded = 0;
  write_bytes(path, good);
  // Patch one byte in place (rewriting whole files is slow on a discard-mounted disk).
  auto patch = [&](size_t pos, char c) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(pos));
    f.put(c);
  };
  for (size_t pos : positions) {
    for (uint8_t flip : {uint8_t(0xff), uint8_t(0x01)}) {
      patch(pos, char(uint8_t(good[pos]) ^ flip));
      struct Restore {
        std::function<void()> fn;
        ~Restore() { fn(); }
      } restore{[&] { patch(pos, good[pos]); }};
      try {
        load(path);
        ++loaded;
      } catch (const loom::Error&) {
        ++errors;
      } catch (const std::exception& e) {
        FAIL() << "byte " << pos << " ^ " << int(flip) << ": " << typeid(e).name() << ": " << e.what();
      }
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(loaded, 0);  // some bytes (values inside weights, names' letters) are harmless
}

TEST(FormatsCorruption, GgufHeaderBytes) {
  const std::string dir = test::temp_dir();
  SynthOptions o;
  o.shape = parse_synth_dims("d=32,layers=1,heads=2,kv_heads=1,ffn=32,vocab=260,ctx=16,tied=0");
  o.dtype = DType::Q8_0;
  write_synth_model(o, dir + "/good.gguf");
  const std::string good = read_bytes(dir + "/good.gguf");
  const GgufFile f(dir + "/good.gguf");
  const size_t data_start = size_t(f.tensors()[0].data - f.mapping()->data());
  // Every byte of the fixed header, the model keys and the tensor infos; every 7th byte of the
  // long tokenizer arrays between them (their structure repeats), to keep the test fast.
  const size_t tokens_at = good.find("tokenizer.ggml.tokens");
  const size_t infos_at = good.find("token_embd.weight") - 8;
  ASSERT_LT(tokens_at, infos_at);
  std::vector<size_t> positions;
  for (size_t p = 0; p < data_start; p += (p >= tokens_at + 64 && p < infos_at - 256) ? 7 : 1) positions.push_back(p);
  expect_only_loom_errors(dir + "/bad.gguf", good, positions, [](const std::string& p) {
    load_model(p);
    load_vocab(p, "");
  });
}

TEST(FormatsCorruption, SafetensorsHeaderBytes) {
  const std::string dir = test::temp_dir() + "/m";
  SynthOptions o;
  o.shape = parse_synth_dims("d=32,layers=1,heads=2,kv_heads=1,ffn=32,vocab=260,ctx=16,tied=0");
  o.dtype = DType::F16;
  o.format = "safetensors";
  write_synth_model(o, dir);
  const std::string good = read_bytes(dir + "/model.safetensors");
  const size_t header_end = 8 + size_t(get_le<uint64_t>(good, 0));
  std::vector<size_t> positions;
  for (size_t p = 0; p < header_end; ++p) positions.push_back(p);
  expect_only_loom_errors(dir + "/model.safetensors", good, positions, [&](const std::string&) { load_model(dir); });
}

}  // namespace
}  // namespace loom
