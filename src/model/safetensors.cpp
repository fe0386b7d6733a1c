#include "model/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"
#include "core/json_bounded.h"
#include "model/hf_config.h"

namespace loom {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Element size of a safetensors dtype name, 0 for names loom does not know.
int known_dtype_size(const std::string& s) {
  if (s == "F64" || s == "I64" || s == "U64") return 8;
  if (s == "F32" || s == "I32" || s == "U32") return 4;
  if (s == "F16" || s == "BF16" || s == "I16" || s == "U16") return 2;
  if (s == "I8" || s == "U8" || s == "BOOL" || s == "F8_E4M3" || s == "F8_E5M2") return 1;
  return 0;
}

}  // namespace

std::string safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    default: break;  // the block-quantized types
  }
  fail("safetensors cannot hold ", dtype_name(t), " tensors (it holds f32, f16, bf16)");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  file_ = std::make_shared<MappedFile>(path);
  const uint64_t size = file_->size();
  if (size < 8) fail("safetensors '", path, "': ", size, " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, file_->data(), 8);
  if (n > size - 8)
    fail("safetensors '", path, "': header length ", n, " runs past the end of the file (", size - 8,
         " bytes after the length)");
  // Bounded before parsing (core/json_bounded.h): the format caps headers at 100 MB, and
  // entries, shapes or metadata nested thousands deep are one error line, not a crash in a
  // later recursion.
  const std::string_view text(reinterpret_cast<const char*>(file_->data() + 8), size_t(n));
  const json h = parse_json_bounded(text, cat("safetensors '", path, "': header"), kSafetensorsHeaderLimits);
  if (!h.is_object()) fail("safetensors '", path, "': header is not a JSON object");
  const uint8_t* buffer = file_->data() + 8 + n;
  const uint64_t buffer_size = size - 8 - n;
  struct Range {
    uint64_t b, e;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) fail("safetensors '", path, "': __metadata__ is not an object");
      for (auto& [k, v] : e.items()) metadata_[k] = v.is_string() ? v.get<std::string>() : json_excerpt(v, 256);
      continue;
    }
    const std::string what = cat("safetensors '", path, "': tensor '", text_excerpt(name), "'");
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      fail(what, ": expected an object with dtype, shape and data_offsets, found ", json_excerpt(e));
    if (!e["dtype"].is_string()) fail(what, ": dtype is not a string: ", json_excerpt(e["dtype"]));
    const std::string dt = e["dtype"].get<std::string>();
    RawTensor t;
    t.name = name;
    if (dt == "F32") t.dtype = DType::F32;
    else if (dt == "F16") t.dtype = DType::F16;
    else if (dt == "BF16") t.dtype = DType::BF16;
    else if (known_dtype_size(dt))
      fail(what, ": dtype ", dt, " is not supported (loom reads F32, F16, BF16)");
    else
      fail(what, ": unknown dtype '", text_excerpt(dt), "' (expected F32, F16 or BF16)");
    const json& shape = e["shape"];
    if (!shape.is_array()) fail(what, ": shape is not a list: ", json_excerpt(shape));
    // Element count bounded before each multiply (a shape [2^40, 2^40] overflowed int64 before
    // the check).
    constexpr int64_t kMaxDim = int64_t(1) << 40, kMaxElems = int64_t(1) << 48;
    int64_t elems = 1;
    for (auto& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(kMaxDim))
        fail(what, ": bad dimension ", json_excerpt(d), " in shape ", json_excerpt(shape), " (at most 2^40)");
      const int64_t dim = d.get<int64_t>();
      t.shape.push_back(dim);
      if (dim != 0 && elems > kMaxElems / dim)
        fail(what, ": shape ", json_excerpt(shape), " has more than 2^48 elements");
      elems *= dim;
    }
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(what, ": data_offsets must be two non-negative integers, found ", json_excerpt(off));
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    if (b > en) fail(what, ": data_offsets [", b, ", ", en, "] end before they begin");
    if (en > buffer_size)
      fail(what, ": data_offsets [", b, ", ", en, "] run past the end of the data (", buffer_size,
           " bytes; file truncated?)");
    const uint64_t expect = uint64_t(elems) * uint64_t(dtype_block_bytes(t.dtype));
    if (en - b != expect)
      fail(what, ": expected ", expect, " bytes for shape ", json_excerpt(shape), " ", dt, ", found ", en - b,
           " (data_offsets [", b, ", ", en, "])");
    t.data = buffer + b;
    t.bytes = int64_t(expect);
    dtype_names_[name] = dt;
    auto [it, inserted] = tensors_.emplace(name, std::move(t));
    ranges.push_back({b, en, &it->first});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.b < b.b; });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i - 1].e > ranges[i].b)
      fail("safetensors '", path, "': tensors '", *ranges[i - 1].name, "' (bytes [", ranges[i - 1].b, ", ",
           ranges[i - 1].e, ")) and '", *ranges[i].name, "' (from ", ranges[i].b, ") overlap");
}

// ---- writer ----

SafetensorsWriter::~SafetensorsWriter() {
  if (file_) std::fclose(static_cast<FILE*>(file_));
}

void SafetensorsWriter::add_tensor(const std::string& name, std::vector<int64_t> shape, DType dtype) {
  LOOM_CHECK(!file_, "add_tensor after begin");
  safetensors_dtype_name(dtype);  // throws for q8_0
  int64_t n = 1;
  for (auto d : shape) n *= d;
  const uint64_t bytes = uint64_t(n) * uint64_t(dtype_block_bytes(dtype));
  tensors_.push_back({name, std::move(shape), dtype, bytes, total_});
  total_ += bytes;
}

void SafetensorsWriter::begin(const std::string& path) {
  LOOM_CHECK(!file_, "begin twice");
  path_ = path;
  json h = json::object();
  h["__metadata__"] = {{"format", "pt"}};
  for (auto& t : tensors_)
    h[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {t.offset, t.offset + t.bytes}}};
  std::string text = h.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail("cannot create '", path, "': ", std::strerror(errno));
  file_ = f;
  std::setvbuf(f, nullptr, _IOFBF, 1 << 22);
  const uint64_t n = text.size();
  if (std::fwrite(&n, 8, 1, f) != 1 || std::fwrite(text.data(), 1, text.size(), f) != text.size())
    fail("cannot write '", path, "' (disk full?)");
  current_ = 0;
  current_done_ = 0;
}

void SafetensorsWriter::write(const void* bytes, size_t n) {
  LOOM_CHECK(file_, "write before begin");
  const auto* p = static_cast<const uint8_t*>(bytes);
  while (n > 0) {
    LOOM_CHECK(current_ < tensors_.size(), "more bytes than the tensors declared");
    auto& t = tensors_[current_];
    const uint64_t take = std::min<uint64_t>(n, t.bytes - current_done_);
    if (std::fwrite(p, 1, size_t(take), static_cast<FILE*>(file_)) != take)
      fail("cannot write '", path_, "' (disk full?)");
    p += take;
    n -= size_t(take);
    current_done_ += take;
    if (current_done_ == t.bytes) {
      ++current_;
      current_done_ = 0;
    }
  }
}

void SafetensorsWriter::finish() {
  LOOM_CHECK(file_, "finish before begin");
  while (current_ < tensors_.size() && tensors_[current_].bytes == 0) ++current_;
  LOOM_CHECK(current_ == tensors_.size() && current_done_ == 0, "tensor ", current_, " of ", tensors_.size(),
             " incomplete");
  FILE* f = static_cast<FILE*>(file_);
  file_ = nullptr;
  if (std::fclose(f) != 0) fail("cannot write '", path_, "' (disk full?)");
}

// ---- model ----

std::vector<std::string> safetensors_model_files(const std::string& path, std::string* dir) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    *dir = path;
    const std::string index = (fs::path(path) / "model.safetensors.index.json").string();
    if (file_exists(index)) {
      const json j = parse_json_bounded(read_text_file(index, kHfConfigJsonLimits.max_bytes, "model.safetensors.index.json"), cat("'", index, "'"), kHfConfigJsonLimits);
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        fail("'", index, "': missing key 'weight_map' (an object tensor -> file)");
      std::vector<std::string> files;
      std::unordered_set<std::string> seen;  // linear-time de-duplication (a find per name took 26 s for 100k)
      for (auto& [name, file] : j["weight_map"].items()) {
        if (!file.is_string())
          fail("'", index, "': weight_map['", text_excerpt(name), "'] is not a file name: ", json_excerpt(file));
        const std::string f = file.get<std::string>();
        if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
          fail("'", index, "': weight_map['", text_excerpt(name), "'] = '", text_excerpt(f),
               "' is not a file name in the same directory");
        const std::string full = (fs::path(path) / f).string();
        if (seen.insert(full).second) files.push_back(full);
      }
      std::sort(files.begin(), files.end());
      if (files.empty()) fail("'", index, "': weight_map is empty");
      return files;
    }
    const std::string single = (fs::path(path) / "model.safetensors").string();
    if (file_exists(single)) return {single};
    std::vector<std::string> found;
    for (auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".safetensors") found.push_back(e.path().string());
    std::sort(found.begin(), found.end());
    if (found.size() == 1) return found;
    if (found.empty()) fail("'", path, "': no model.safetensors, model.safetensors.index.json or *.safetensors file");
    fail("'", path, "': ", found.size(), " *.safetensors files but no model.safetensors.index.json listing them");
  }
  *dir = fs::path(path).parent_path().string();
  if (dir->empty()) *dir = ".";
  return {path};
}

std::shared_ptr<Model> load_safetensors_model(const std::string& path) {
  std::string dir;
  const auto files = safetensors_model_files(path, &dir);
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!file_exists(config_path)) fail("safetensors model '", path, "': no config.json in '", dir, "'");
  auto m = std::make_shared<Model>();
  m->config = load_hf_config(config_path).config;
  m->path = path;
  m->format = "safetensors";
  std::map<std::string, const RawTensor*> by_name;
  std::vector<std::shared_ptr<SafetensorsFile>> shards;
  for (auto& f : files) {
    if (!file_exists(f)) fail("safetensors model '", path, "': shard '", f, "' is missing");
    auto sf = std::make_shared<SafetensorsFile>(f);
    m->storage.push_back(sf->mapping());
    for (auto& [name, t] : sf->tensors()) {
      check_layer_index(name, "model.layers.", m->config.n_layers, "num_hidden_layers");
      if (by_name.count(name)) fail("safetensors model '", path, "': tensor '", name, "' appears in two shards");
      by_name[name] = &t;
    }
    shards.push_back(std::move(sf));
  }
  fill_model_weights(*m, [&](const std::string& canonical, bool required) -> const RawTensor* {
    const std::string name = hf_tensor_name(canonical);
    auto it = by_name.find(name);
    if (it != by_name.end()) return it->second;
    if (required)
      fail("safetensors model '", path, "': missing tensor '", name, "'",
           canonical == "output" ? " (tie_word_embeddings is false)" : "");
    return nullptr;
  });
  return m;  // `shards` may go: the views point into the mappings kept in m->storage
}

}  // namespace loom
