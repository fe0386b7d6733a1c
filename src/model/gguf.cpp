#include "model/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "model/loader.h"

namespace loom {

namespace {

constexpr uint64_t kDefaultAlignment = 32;

// Bounds-checked little-endian cursor over the mapped header; every read names what it reads.
// The name is `what` + `suffix`, put together only when a read fails (a metadata array of a
// million entries builds no strings).
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, const std::string& path) : p_(data), size_(size), path_(path) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  void need(uint64_t n, const std::string& what, const char* suffix = "") const {
    if (n > left())
      fail("GGUF '", path_, "': truncated reading ", what, suffix, " at offset ", pos_, ": need ", n, " bytes, ",
           left(), " left in the file");
  }
  template <typename T>
  T get(const std::string& what, const char* suffix = "") {
    need(sizeof(T), what, suffix);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const std::string& what) {
    const uint64_t n = get<uint64_t>(what, " length");
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(n));
    pos_ += n;
    return s;
  }
  void advance(uint64_t n) {  // after need(n, ...)
    pos_ += std::min(n, left());
  }
  void skip_str(const std::string& what) {
    const uint64_t n = get<uint64_t>(what, " length");
    need(n, what);
    pos_ += n;
  }

 private:
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

int scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

double read_scalar(Cursor& c, GgufType t, const std::string& what) {
  switch (t) {
    case GgufType::U8: return c.get<uint8_t>(what);
    case GgufType::I8: return c.get<int8_t>(what);
    case GgufType::U16: return c.get<uint16_t>(what);
    case GgufType::I16: return c.get<int16_t>(what);
    case GgufType::U32: return c.get<uint32_t>(what);
    case GgufType::I32: return c.get<int32_t>(what);
    case GgufType::F32: return c.get<float>(what);
    case GgufType::Bool: {
      const uint8_t b = c.get<uint8_t>(what);
      if (b > 1) fail("GGUF ", what, ": bool value ", int(b), " (expected 0 or 1)");
      return b;
    }
    case GgufType::U64: return double(c.get<uint64_t>(what));
    case GgufType::I64: return double(c.get<int64_t>(what));
    case GgufType::F64: return c.get<double>(what);
    default: break;
  }
  fail("GGUF ", what, ": not a scalar type ", uint32_t(t));
}

// Arrays nested in arrays are read and checked but not kept; their elements count towards this
// bound (a metadata array of 10^6 empty arrays took over 30 s in the sanitized build).
constexpr uint64_t kMaxNestedElements = uint64_t(1) << 24;

// An integer scalar exactly (num as well, for the callers that want a double).
void read_int_exact(Cursor& c, GgufType t, const std::string& what, GgufValue* v) {
  switch (t) {
    case GgufType::U8: v->ival = c.get<uint8_t>(what); break;
    case GgufType::I8: v->ival = c.get<int8_t>(what); break;
    case GgufType::U16: v->ival = c.get<uint16_t>(what); break;
    case GgufType::I16: v->ival = c.get<int16_t>(what); break;
    case GgufType::U32: v->ival = c.get<uint32_t>(what); break;
    case GgufType::I32: v->ival = c.get<int32_t>(what); break;
    case GgufType::I64: v->ival = c.get<int64_t>(what); break;
    case GgufType::U64: {
      const uint64_t u = c.get<uint64_t>(what);
      if (u > uint64_t(std::numeric_limits<int64_t>::max())) {
        v->uval_high = u;
        v->num = double(u);
        return;
      }
      v->ival = int64_t(u);
      break;
    }
    default: fail("GGUF ", what, ": not an integer type ", uint32_t(t));
  }
  v->num = double(v->ival);
}

// Skips one array value nested in an array (its elements are not kept): depth-bounded, every
// element counted against *budget.
void skip_nested_array(Cursor& c, const std::string& what, int depth, uint64_t* budget) {
  if (depth > 4) fail("GGUF ", what, ": arrays nested deeper than 4");
  const uint32_t et = c.get<uint32_t>(what, " array type");
  if (et > 12) fail("GGUF ", what, ": unknown array element type ", et, " (expected 0..12)");
  const uint64_t count = c.get<uint64_t>(what, " array length");
  if (count > *budget)
    fail("GGUF ", what, ": arrays nested in it hold more than ", kMaxNestedElements, " elements in all");
  *budget -= count;
  const GgufType t = GgufType(et);
  if (t == GgufType::String) {
    if (count > c.left() / 8)
      fail("GGUF ", what, ": array of ", count, " strings cannot fit in the ", c.left(), " bytes left");
    for (uint64_t i = 0; i < count; ++i) c.skip_str(what);
  } else if (t == GgufType::Array) {
    if (count > c.left() / 12)
      fail("GGUF ", what, ": array of ", count, " arrays cannot fit in the ", c.left(), " bytes left");
    for (uint64_t i = 0; i < count; ++i) skip_nested_array(c, what, depth + 1, budget);
  } else {
    const uint64_t sz = uint64_t(scalar_size(t));
    if (count > c.left() / sz)
      fail("GGUF ", what, ": array of ", count, " x ", sz, " bytes runs past the end of the file (", c.left(),
           " bytes left)");
    if (t == GgufType::Bool) {
      for (uint64_t i = 0; i < count; ++i) read_scalar(c, t, what);  // each must be 0 or 1
    } else {
      c.advance(count * sz);
    }
  }
}

GgufValue read_value(Cursor& c, uint32_t type, const std::string& key) {
  const std::string what = cat("key '", key, "'");
  GgufValue v;
  if (type > 12) fail("GGUF ", what, ": unknown value type ", type, " (expected 0..12)");
  v.type = GgufType(type);
  if (v.type == GgufType::String) {
    v.str = c.str(what);
  } else if (v.type == GgufType::Array) {
    const uint32_t et = c.get<uint32_t>(what, " array type");
    if (et > 12) fail("GGUF ", what, ": unknown array element type ", et, " (expected 0..12)");
    v.elem_type = GgufType(et);
    v.count = c.get<uint64_t>(what, " array length");
    if (v.elem_type == GgufType::String) {
      // each string takes at least its 8-byte length: bound the count before reserving
      if (v.count > c.left() / 8)
        fail("GGUF ", what, ": array of ", v.count, " strings cannot fit in the ", c.left(), " bytes left");
      v.strs.reserve(size_t(v.count));
      for (uint64_t i = 0; i < v.count; ++i) v.strs.push_back(c.str(what));
    } else if (v.elem_type == GgufType::Array) {
      if (v.count > c.left() / 12)
        fail("GGUF ", what, ": array of ", v.count, " arrays cannot fit in the ", c.left(), " bytes left");
      uint64_t budget = kMaxNestedElements;
      if (v.count > budget)
        fail("GGUF ", what, ": arrays nested in it hold more than ", kMaxNestedElements, " elements in all");
      budget -= v.count;
      for (uint64_t i = 0; i < v.count; ++i) skip_nested_array(c, what, 1, &budget);
    } else {
      const uint64_t sz = uint64_t(scalar_size(v.elem_type));
      if (v.count > c.left() / sz)
        fail("GGUF ", what, ": array of ", v.count, " x ", sz, " bytes runs past the end of the file (",
             c.left(), " bytes left)");
      v.nums.resize(size_t(v.count));
      for (uint64_t i = 0; i < v.count; ++i) v.nums[i] = read_scalar(c, v.elem_type, what);
    }
  } else if (v.is_integer()) {
    read_int_exact(c, v.type, what, &v);
  } else {
    v.num = read_scalar(c, v.type, what);
  }
  return v;
}

bool ggml_to_dtype(uint32_t t, DType* out) {
  switch (t) {
    case kGgmlF32: *out = DType::F32; return true;
    case kGgmlF16: *out = DType::F16; return true;
    case kGgmlQ8_0: *out = DType::Q8_0; return true;
    case kGgmlBF16: *out = DType::BF16; return true;
    case kGgmlQ4_0: *out = DType::Q4_0; return true;
    case kGgmlQ4_1: *out = DType::Q4_1; return true;
    case kGgmlQ5_0: *out = DType::Q5_0; return true;
    case kGgmlQ4_K: *out = DType::Q4_K; return true;
    case kGgmlQ5_K: *out = DType::Q5_K; return true;
    case kGgmlQ6_K: *out = DType::Q6_K; return true;
    default: return false;
  }
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = uint32_t(t);
  return i <= 12 ? names[i] : "unknown";
}

uint32_t ggml_type_of(DType t) {
  switch (t) {
    case DType::F32: return kGgmlF32;
    case DType::F16: return kGgmlF16;
    case DType::BF16: return kGgmlBF16;
    case DType::Q8_0: return kGgmlQ8_0;
    case DType::Q4_0: return kGgmlQ4_0;
    case DType::Q4_1: return kGgmlQ4_1;
    case DType::Q5_0: return kGgmlQ5_0;
    case DType::Q4_K: return kGgmlQ4_K;
    case DType::Q5_K: return kGgmlQ5_K;
    case DType::Q6_K: return kGgmlQ6_K;
  }
  return kGgmlF32;
}

std::string ggml_type_name(uint32_t type) {
  static const char* names[] = {"F32",   "F16",    "Q4_0",    "Q4_1",   "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
                                "Q8_0",  "Q8_1",   "Q2_K",    "Q3_K",   "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
                                "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
                                "I8",    "I16",    "I32",     "I64",    "F64",    "IQ1_M", "BF16",  "Q4_0_4_4",
                                "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8",
                                "IQ4_NL_8_8", "MXFP4"};
  return type < sizeof(names) / sizeof(names[0]) ? names[type] : "unknown";
}

// ---- GgufValue ----

GgufValue GgufValue::u32(uint32_t x) { GgufValue v; v.type = GgufType::U32; v.num = x; v.ival = x; return v; }
GgufValue GgufValue::i32(int32_t x) { GgufValue v; v.type = GgufType::I32; v.num = x; v.ival = x; return v; }
GgufValue GgufValue::f32(float x) { GgufValue v; v.type = GgufType::F32; v.num = x; return v; }
GgufValue GgufValue::boolean(bool x) { GgufValue v; v.type = GgufType::Bool; v.num = x ? 1 : 0; return v; }
GgufValue GgufValue::string(std::string x) { GgufValue v; v.type = GgufType::String; v.str = std::move(x); return v; }
GgufValue GgufValue::string_array(std::vector<std::string> x) {
  GgufValue v;
  v.type = GgufType::Array;
  v.elem_type = GgufType::String;
  v.count = x.size();
  v.strs = std::move(x);
  return v;
}
GgufValue GgufValue::f32_array(const std::vector<float>& x) {
  GgufValue v;
  v.type = GgufType::Array;
  v.elem_type = GgufType::F32;
  v.count = x.size();
  v.nums.assign(x.begin(), x.end());
  return v;
}
GgufValue GgufValue::i32_array(const std::vector<int32_t>& x) {
  GgufValue v;
  v.type = GgufType::Array;
  v.elem_type = GgufType::I32;
  v.count = x.size();
  v.nums.assign(x.begin(), x.end());
  return v;
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16: case GgufType::U32:
    case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}
bool GgufValue::is_number() const { return is_integer() || type == GgufType::F32 || type == GgufType::F64; }

bool GgufValue::int_in(int64_t lo, int64_t hi, int64_t* out) const {
  if (!is_integer() || uval_high != 0) return false;
  if (ival < lo || ival > hi) return false;
  *out = ival;
  return true;
}

std::string GgufValue::int_text() const {
  if (uval_high != 0) return cat(uval_high);
  return cat(ival);
}

std::string GgufValue::short_text() const {
  if (type == GgufType::String) return str.size() > 60 ? cat('"', str.substr(0, 57), "...\"") : cat('"', str, '"');
  if (type == GgufType::Array) return cat("[", count, " x ", gguf_type_name(elem_type), "]");
  if (type == GgufType::Bool) return num != 0 ? "true" : "false";
  if (is_integer()) return int_text();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", num);
  return buf;
}

// ---- GgufFile ----

GgufFile::GgufFile(const std::string& path) : path_(path) {
  file_ = std::make_shared<MappedFile>(path);
  const uint8_t* base = file_->data();
  const uint64_t size = file_->size();
  Cursor c(base, size, path_);
  if (size < 4 || std::memcmp(base, "GGUF", 4) != 0) {
    std::string found = size >= 4 ? std::string(reinterpret_cast<const char*>(base), 4) : "(file too short)";
    for (auto& ch : found)
      if (ch < 32 || ch > 126) ch = '?';
    fail("GGUF '", path, "': bad magic: expected \"GGUF\", found \"", found, "\"");
  }
  c.get<uint32_t>("magic");
  version_ = c.get<uint32_t>("version");
  if (version_ != 3 && version_ != 2)
    fail("GGUF '", path, "': version ", version_, " is not supported (expected 3; 2 is read too)");
  const uint64_t n_tensors = c.get<uint64_t>("tensor_count");
  const uint64_t n_kv = c.get<uint64_t>("kv_count");
  // A kv takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8 + 4 + 4 + 8.
  if (n_kv > c.left() / 13)
    fail("GGUF '", path, "': kv_count ", n_kv, " cannot fit in the ", c.left(),
         " bytes after the header (truncated or corrupt file)");
  if (n_tensors > c.left() / 24)
    fail("GGUF '", path, "': tensor_count ", n_tensors, " cannot fit in the ", c.left(),
         " bytes after the header (truncated or corrupt file)");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.str(cat("key #", i));
    const uint32_t type = c.get<uint32_t>(cat("type of key '", key, "'"));
    GgufValue v = read_value(c, type, key);
    if (kv_index_.count(key)) fail("GGUF '", path, "': key '", key, "' appears twice");
    kv_index_[key] = kvs_.size();
    kvs_.emplace_back(std::move(key), std::move(v));
  }
  // ggml's rule: general.alignment is a positive power of two (any integer type; -1, INT64_MIN or
  // UINT64_MAX were undefined behaviour here before). loom also caps it at 2^20.
  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_integer()) fail("GGUF key 'general.alignment': expected an integer, found ", gguf_type_name(a->type));
    int64_t al = 0;
    if (!a->int_in(1, int64_t(1) << 20, &al) || (al & (al - 1)) != 0)
      fail("GGUF key 'general.alignment': ", a->int_text(), " (", gguf_type_name(a->type),
           ") is not a power of two in [1, 2^20]");
    alignment_ = uint64_t(al);
  }

  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.str(cat("tensor #", i, " name"));
    const std::string what = cat("tensor '", t.name, "'");
    const uint32_t n_dims = c.get<uint32_t>(what + " n_dims");
    if (n_dims < 1 || n_dims > 4) fail("GGUF ", what, ": n_dims ", n_dims, " (expected 1 to 4)");
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = c.get<uint64_t>(what + " dims");
      if (dim == 0 || dim > (uint64_t(1) << 40) || n > (uint64_t(1) << 48) / dim)
        fail("GGUF ", what, ": dimension ", d, " = ", dim, " is out of range");
      t.dims.push_back(dim);
      n *= dim;
    }
    t.ggml_type = c.get<uint32_t>(what + " type");
    t.offset = c.get<uint64_t>(what + " offset");
    if (!ggml_to_dtype(t.ggml_type, &t.dtype))
      fail("GGUF ", what, ": ggml type ", t.ggml_type, " (", ggml_type_name(t.ggml_type),
           ") is not supported (loom reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K)");
    const int be = dtype_block_elems(t.dtype);
    if (t.dims[0] % uint64_t(be) != 0)
      fail("GGUF ", what, ": innermost dimension ", t.dims[0], " is not a multiple of the ", dtype_name(t.dtype),
           " block size ", be);
    t.bytes = n / uint64_t(be) * uint64_t(dtype_block_bytes(t.dtype));
    if (t.offset % alignment_ != 0)
      fail("GGUF ", what, ": offset ", t.offset, " is not a multiple of the alignment ", alignment_);
    if (tensor_index_.count(t.name)) fail("GGUF '", path, "': tensor '", t.name, "' appears twice");
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = data_start <= size ? size - data_start : 0;
  for (auto& t : tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      fail("GGUF tensor '", t.name, "': its ", t.bytes, " bytes at offset ", t.offset,
           " of the data section run past its end (", data_size, " bytes; file truncated?)");
    t.data = base + data_start + t.offset;
  }
  std::vector<const GgufTensorInfo*> order;
  for (auto& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i - 1]->offset + order[i - 1]->bytes > order[i]->offset)
      fail("GGUF tensors '", order[i - 1]->name, "' (bytes [", order[i - 1]->offset, ", ",
           order[i - 1]->offset + order[i - 1]->bytes, ")) and '", order[i]->name, "' (from ", order[i]->offset,
           ") overlap");
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("GGUF '", path_, "': missing key '", key, "'");
  if (!v->is_integer()) fail("GGUF key '", key, "': expected an integer, found ", gguf_type_name(v->type));
  int64_t out = 0;
  if (!v->int_in(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &out))
    fail("GGUF key '", key, "': ", v->int_text(), " is out of range (at most 2^63-1)");
  return out;
}
int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
  return find(key) ? get_int(key) : fallback;
}
double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("GGUF '", path_, "': missing key '", key, "'");
  if (!v->is_number()) fail("GGUF key '", key, "': expected a number, found ", gguf_type_name(v->type));
  return v->num;
}
double GgufFile::get_float(const std::string& key, double fallback) const {
  return find(key) ? get_float(key) : fallback;
}
std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("GGUF '", path_, "': missing key '", key, "'");
  if (v->type != GgufType::String) fail("GGUF key '", key, "': expected a string, found ", gguf_type_name(v->type));
  return v->str;
}
std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  return find(key) ? get_string(key) : fallback;
}
bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  const GgufValue* v = find(key);
  if (!v) return fallback;
  if (v->type != GgufType::Bool) fail("GGUF key '", key, "': expected a bool, found ", gguf_type_name(v->type));
  return v->num != 0;
}

// ---- GgufWriter ----

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  LOOM_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment ", alignment);
}

GgufWriter::~GgufWriter() {
  if (file_) std::fclose(static_cast<FILE*>(file_));
}

void GgufWriter::set(const std::string& key, GgufValue v) {
  LOOM_CHECK(!file_, "set after begin");
  for (auto& kv : kvs_)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  kvs_.emplace_back(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, std::vector<uint64_t> dims, DType dtype) {
  LOOM_CHECK(!file_, "add_tensor after begin");
  LOOM_CHECK(!dims.empty() && dims.size() <= 4, name);
  LOOM_CHECK(dims[0] % uint64_t(dtype_block_elems(dtype)) == 0, name);
  uint64_t n = 1;
  for (auto d : dims) n *= d;
  const uint64_t bytes = uint64_t(dtype_row_bytes(dtype, int64_t(n)));
  uint64_t offset = 0;
  if (!tensors_.empty()) {
    const auto& last = tensors_.back();
    offset = (last.offset + last.bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  tensors_.push_back({name, std::move(dims), dtype, bytes, offset});
}

void GgufWriter::put(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, static_cast<FILE*>(file_)) != n) fail("cannot write '", path_, "' (disk full?)");
  pos_ += n;
}

void GgufWriter::put_string(const std::string& s) {
  const uint64_t n = s.size();
  put(&n, 8);
  put(s.data(), s.size());
}

void GgufWriter::put_value(const GgufValue& v) {
  auto scalar = [&](GgufType t, double x) {
    switch (t) {
      case GgufType::U8: { uint8_t y = uint8_t(x); put(&y, 1); break; }
      case GgufType::I8: { int8_t y = int8_t(x); put(&y, 1); break; }
      case GgufType::U16: { uint16_t y = uint16_t(x); put(&y, 2); break; }
      case GgufType::I16: { int16_t y = int16_t(x); put(&y, 2); break; }
      case GgufType::U32: { uint32_t y = uint32_t(x); put(&y, 4); break; }
      case GgufType::I32: { int32_t y = int32_t(x); put(&y, 4); break; }
      case GgufType::F32: { float y = float(x); put(&y, 4); break; }
      case GgufType::Bool: { uint8_t y = x != 0 ? 1 : 0; put(&y, 1); break; }
      case GgufType::U64: { uint64_t y = uint64_t(x); put(&y, 8); break; }
      case GgufType::I64: { int64_t y = int64_t(x); put(&y, 8); break; }
      case GgufType::F64: { put(&x, 8); break; }
      default: LOOM_CHECK(false, "not a scalar");
    }
  };
  if (v.type == GgufType::String) {
    put_string(v.str);
  } else if (v.type == GgufType::Array) {
    const uint32_t et = uint32_t(v.elem_type);
    put(&et, 4);
    LOOM_CHECK(v.elem_type != GgufType::Array, "nested arrays are not written");
    const uint64_t n = v.elem_type == GgufType::String ? v.strs.size() : v.nums.size();
    put(&n, 8);
    if (v.elem_type == GgufType::String) {
      for (auto& s : v.strs) put_string(s);
    } else {
      for (double x : v.nums) scalar(v.elem_type, x);
    }
  } else {
    scalar(v.type, v.num);
  }
}

void GgufWriter::pad_to(uint64_t multiple) {
  static const uint8_t zeros[64] = {};
  while (pos_ % multiple != 0) put(zeros, std::min<uint64_t>(64, multiple - pos_ % multiple));
}

void GgufWriter::begin(const std::string& path) {
  LOOM_CHECK(!file_, "begin twice");
  path_ = path;
  if (alignment_ != kDefaultAlignment) set("general.alignment", GgufValue::u32(alignment_));
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail("cannot create '", path, "': ", std::strerror(errno));
  file_ = f;
  std::setvbuf(f, nullptr, _IOFBF, 1 << 22);
  put("GGUF", 4);
  const uint32_t version = 3;
  put(&version, 4);
  const uint64_t nt = tensors_.size(), nkv = kvs_.size();
  put(&nt, 8);
  put(&nkv, 8);
  for (auto& [k, v] : kvs_) {
    put_string(k);
    const uint32_t t = uint32_t(v.type);
    put(&t, 4);
    put_value(v);
  }
  for (auto& t : tensors_) {
    put_string(t.name);
    const uint32_t nd = uint32_t(t.dims.size());
    put(&nd, 4);
    for (auto d : t.dims) put(&d, 8);
    const uint32_t gt = ggml_type_of(t.dtype);
    put(&gt, 4);
    put(&t.offset, 8);
  }
  pad_to(alignment_);
  data_start_ = pos_;
  current_ = 0;
  current_done_ = 0;
}

void GgufWriter::write(const void* bytes, size_t n) {
  LOOM_CHECK(file_, "write before begin");
  const auto* p = static_cast<const uint8_t*>(bytes);
  while (n > 0) {
    LOOM_CHECK(current_ < tensors_.size(), "more bytes than the tensors declared");
    auto& t = tensors_[current_];
    if (current_done_ == 0) {
      pad_to(alignment_);
      LOOM_CHECK(pos_ - data_start_ == t.offset, t.name);
    }
    const uint64_t take = std::min<uint64_t>(n, t.bytes - current_done_);
    put(p, size_t(take));
    p += take;
    n -= size_t(take);
    current_done_ += take;
    if (current_done_ == t.bytes) {
      ++current_;
      current_done_ = 0;
    }
  }
}

void GgufWriter::finish() {
  LOOM_CHECK(file_, "finish before begin");
  LOOM_CHECK(current_ == tensors_.size() && current_done_ == 0, "tensor ", current_, " of ", tensors_.size(),
             " incomplete");
  FILE* f = static_cast<FILE*>(file_);
  file_ = nullptr;
  if (std::fclose(f) != 0) fail("cannot write '", path_, "' (disk full?)");
}

// ---- model ----

std::string gguf_tensor_name(const std::string& canonical) {
  if (canonical.size() > 5 && canonical.compare(canonical.size() - 5, 5, ".bias") == 0) return canonical;
  return canonical + ".weight";
}

int64_t gguf_llama_qk_source_row(int64_t r, int head_dim) {
  const int64_t h = r / head_dim, k = r % head_dim;
  return h * head_dim + (k % 2) * (head_dim / 2) + k / 2;
}

ModelConfig gguf_model_config(const GgufFile& f) {
  ModelConfig c;
  const std::string arch = f.get_string("general.architecture");
  if (arch != "llama" && arch != "qwen2")
    fail("GGUF '", f.path(), "': general.architecture '", arch, "' is not supported (loom reads llama, qwen2)");
  c.arch = arch;
  const std::string p = arch + ".";
  auto int_key = [&](const std::string& k) -> int {
    const int64_t v = f.get_int(p + k);
    if (v <= 0 || v > std::numeric_limits<int>::max()) fail("GGUF key '", p + k, "': ", v, " is out of range");
    return int(v);
  };
  c.d_model = int_key("embedding_length");
  c.n_layers = int_key("block_count");
  c.ffn_dim = int_key("feed_forward_length");
  c.n_heads = int_key("attention.head_count");
  c.n_kv_heads = f.find(p + "attention.head_count_kv") ? int_key("attention.head_count_kv") : c.n_heads;
  c.max_seq_len = int_key("context_length");
  if (c.d_model % c.n_heads != 0 && !f.find(p + "attention.key_length"))
    fail("GGUF key '", p, "attention.head_count' = ", c.n_heads, " does not divide ", p, "embedding_length = ",
         c.d_model);
  c.head_dim = f.find(p + "attention.key_length") ? int_key("attention.key_length") : c.d_model / c.n_heads;
  if (f.find(p + "attention.value_length") && int_key("attention.value_length") != c.head_dim)
    fail("GGUF key '", p, "attention.value_length' = ", int_key("attention.value_length"), " differs from the key length ",
         c.head_dim, " (not supported)");
  if (f.find(p + "rope.dimension_count") && int_key("rope.dimension_count") != c.head_dim)
    fail("GGUF key '", p, "rope.dimension_count' = ", int_key("rope.dimension_count"),
         ": expected the head dimension ", c.head_dim, " (partial rotary embeddings are not supported)");
  c.rms_eps = float(f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = float(f.get_float(p + "rope.freq_base", 10000.0));
  const std::string scaling = f.get_string(p + "rope.scaling.type", "none");
  if (scaling != "none" && scaling != "")
    fail("GGUF key '", p, "rope.scaling.type' = '", scaling, "' is not supported (expected none; Llama-3 scaling comes as rope_freqs.weight)");
  c.rope_style = arch == "qwen2" ? RopeStyle::HalfSplit : RopeStyle::Interleaved;
  c.qkv_bias = arch == "qwen2";

  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) fail("GGUF '", f.path(), "': missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2)
    fail("GGUF tensor 'token_embd.weight': expected 2 dims, found ", embd->dims.size());
  const int64_t embd_rows = int64_t(embd->dims[1]);
  if (f.find(p + "vocab_size")) {
    c.vocab_size = int_key("vocab_size");
    if (c.vocab_size != embd_rows)
      fail("GGUF key '", p, "vocab_size' = ", c.vocab_size, " but tensor 'token_embd.weight' has ", embd_rows, " rows");
  } else {
    c.vocab_size = int(embd_rows);
  }
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.bos_id = int(f.get_int("tokenizer.ggml.bos_token_id", 1));
  c.eos_id = int(f.get_int("tokenizer.ggml.eos_token_id", 2));
  c.eos_ids = {c.eos_id};

  if (const GgufTensorInfo* rf = f.find_tensor("rope_freqs.weight")) {
    if (rf->dims.size() != 1 || rf->dims[0] != uint64_t(c.head_dim / 2) || rf->dtype != DType::F32)
      fail("GGUF tensor 'rope_freqs.weight': expected [", c.head_dim / 2, "] F32, found ",
           rf->dims.size() == 1 ? cat("[", rf->dims[0], "]") : cat(rf->dims.size(), " dims"), " ",
           ggml_type_name(rf->ggml_type));
    c.rope_scaling.freq_factors.resize(size_t(c.head_dim / 2));
    std::memcpy(c.rope_scaling.freq_factors.data(), rf->data, rf->bytes);
    for (size_t i = 0; i < c.rope_scaling.freq_factors.size(); ++i)
      if (!(c.rope_scaling.freq_factors[i] > 0.0f))
        fail("GGUF tensor 'rope_freqs.weight': element ", i, " = ", c.rope_scaling.freq_factors[i],
             " (must be positive)");
  }
  c.validate();
  return c;
}

std::shared_ptr<Model> load_gguf_model(const std::string& path) {
  auto gf = std::make_shared<GgufFile>(path);
  auto m = std::make_shared<Model>();
  m->config = gguf_model_config(*gf);
  m->path = path;
  m->format = "gguf";
  m->storage.push_back(gf->mapping());

  std::vector<RawTensor> raws;  // stable storage for what the finder returns
  raws.reserve(gf->tensors().size());
  std::map<std::string, const RawTensor*> by_name;
  for (auto& t : gf->tensors()) {
    check_layer_index(t.name, "blk.", m->config.n_layers, m->config.arch + ".block_count");
    RawTensor r;
    r.name = t.name;
    r.dtype = t.dtype;
    for (auto it = t.dims.rbegin(); it != t.dims.rend(); ++it) r.shape.push_back(int64_t(*it));
    r.data = t.data;
    r.bytes = int64_t(t.bytes);
    raws.push_back(std::move(r));
    by_name[t.name] = &raws.back();
  }
  fill_model_weights(*m, [&](const std::string& canonical, bool required) -> const RawTensor* {
    const std::string name = gguf_tensor_name(canonical);
    auto it = by_name.find(name);
    if (it != by_name.end()) return it->second;
    if (required) fail("GGUF '", path, "': missing tensor '", name, "'");
    return nullptr;
  });
  return m;
}

std::string gguf_arch_of(const ModelConfig& c) { return c.arch == "qwen2" ? "qwen2" : "llama"; }

void gguf_put_model_config(GgufWriter& w, const ModelConfig& c, const std::string& name, uint32_t file_type) {
  const std::string arch = gguf_arch_of(c);
  w.set("general.architecture", GgufValue::string(arch));
  w.set("general.name", GgufValue::string(name));
  w.set("general.file_type", GgufValue::u32(file_type));
  w.set("general.quantization_version", GgufValue::u32(2));
  const std::string p = arch + ".";
  w.set(p + "context_length", GgufValue::u32(uint32_t(c.max_seq_len)));
  w.set(p + "embedding_length", GgufValue::u32(uint32_t(c.d_model)));
  w.set(p + "block_count", GgufValue::u32(uint32_t(c.n_layers)));
  w.set(p + "feed_forward_length", GgufValue::u32(uint32_t(c.ffn_dim)));
  w.set(p + "attention.head_count", GgufValue::u32(uint32_t(c.n_heads)));
  w.set(p + "attention.head_count_kv", GgufValue::u32(uint32_t(c.n_kv_heads)));
  if (c.head_dim * c.n_heads != c.d_model) {
    w.set(p + "attention.key_length", GgufValue::u32(uint32_t(c.head_dim)));
    w.set(p + "attention.value_length", GgufValue::u32(uint32_t(c.head_dim)));
  }
  w.set(p + "attention.layer_norm_rms_epsilon", GgufValue::f32(c.rms_eps));
  w.set(p + "rope.freq_base", GgufValue::f32(c.rope_theta));
  w.set(p + "rope.dimension_count", GgufValue::u32(uint32_t(c.head_dim)));
  w.set(p + "vocab_size", GgufValue::u32(uint32_t(c.vocab_size)));
}

// ---- vocabulary ----

Vocab gguf_vocab(const GgufFile& f) {
  Vocab v;
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model == "llama") {
    v.kind = VocabKind::Spm;
  } else if (model == "gpt2") {
    v.kind = VocabKind::Bpe;
  } else {
    fail("GGUF key 'tokenizer.ggml.model' = '", model, "' is not supported (loom reads llama, gpt2)");
  }
  // llama.cpp's converter spells the Llama-3 pre-tokenizer "llama-bpe" (llama.cpp also accepts
  // "llama3", "llama-v3", "smaug-bpe", "falcon3" for the same regex); loom calls it "llama3".
  v.pre = f.get_string("tokenizer.ggml.pre", "default");
  if (v.pre == "llama-bpe" || v.pre == "llama-v3" || v.pre == "smaug-bpe" || v.pre == "falcon3") v.pre = "llama3";
  // GGUF has no ignore_merges key: Llama-3's tokenizer.json sets it, and readers of GGUF infer
  // it from the pre-tokenizer (a pre-token that is itself a token is emitted whole).
  if (v.pre == "llama3") v.ignore_merges = true;
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens) fail("GGUF '", f.path(), "': missing key 'tokenizer.ggml.tokens'");
  if (!tokens->is_array() || tokens->elem_type != GgufType::String)
    fail("GGUF key 'tokenizer.ggml.tokens': expected an array of strings");
  v.tokens = tokens->strs;
  const size_t n = v.tokens.size();
  if (const GgufValue* s = f.find("tokenizer.ggml.scores")) {
    if (!s->is_array() || s->nums.size() != n)
      fail("GGUF key 'tokenizer.ggml.scores': expected ", n, " numbers, found ",
           s->is_array() ? cat(s->count, " elements") : std::string(gguf_type_name(s->type)));
    v.scores.assign(s->nums.begin(), s->nums.end());
  }
  if (const GgufValue* t = f.find("tokenizer.ggml.token_type")) {
    if (!t->is_array() || t->nums.size() != n)
      fail("GGUF key 'tokenizer.ggml.token_type': expected ", n, " integers, found ",
           t->is_array() ? cat(t->count, " elements") : std::string(gguf_type_name(t->type)));
    v.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const double x = t->nums[i];
      if (!(x >= 0 && x <= 6))
        fail("GGUF key 'tokenizer.ggml.token_type': element ", i, " = ", x, " (expected 0 to 6)");
      v.types.push_back(x == 0 ? TokenType::Normal : TokenType(int(x)));
    }
  }
  if (const GgufValue* m = f.find("tokenizer.ggml.merges")) {
    if (!m->is_array() || m->elem_type != GgufType::String)
      fail("GGUF key 'tokenizer.ggml.merges': expected an array of strings");
    v.merges = m->strs;
  }
  auto id = [&](const char* key, int fallback) {
    const int64_t x = f.get_int(key, fallback);
    if (x < -1 || x >= int64_t(n)) fail("GGUF key '", key, "' = ", x, ": outside the ", n, " tokens");
    return int(x);
  };
  const bool spm = v.kind == VocabKind::Spm;
  v.bos_id = id("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  v.eos_id = id("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  v.unk_id = id("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  v.pad_id = id("tokenizer.ggml.padding_token_id", -1);
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", spm);
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", spm);
  v.chat_template = f.get_string("tokenizer.chat_template", "");
  return v;
}

void gguf_put_vocab(GgufWriter& w, const Vocab& v) {
  w.set("tokenizer.ggml.model", GgufValue::string(v.kind == VocabKind::Spm ? "llama" : "gpt2"));
  if (v.kind == VocabKind::Bpe)
    w.set("tokenizer.ggml.pre", GgufValue::string(v.pre == "llama3" ? "llama-bpe" : v.pre));
  w.set("tokenizer.ggml.tokens", GgufValue::string_array(v.tokens));
  if (!v.scores.empty()) w.set("tokenizer.ggml.scores", GgufValue::f32_array(v.scores));
  if (!v.types.empty()) {
    std::vector<int32_t> t;
    t.reserve(v.types.size());
    for (auto x : v.types) t.push_back(int32_t(x));
    w.set("tokenizer.ggml.token_type", GgufValue::i32_array(t));
  }
  if (!v.merges.empty()) w.set("tokenizer.ggml.merges", GgufValue::string_array(v.merges));
  if (v.bos_id >= 0) w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(uint32_t(v.bos_id)));
  if (v.eos_id >= 0) w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(uint32_t(v.eos_id)));
  if (v.unk_id >= 0) w.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(uint32_t(v.unk_id)));
  if (v.pad_id >= 0) w.set("tokenizer.ggml.padding_token_id", GgufValue::u32(uint32_t(v.pad_id)));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(v.add_bos));
  w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(v.add_space_prefix));
  if (!v.chat_template.empty()) w.set("tokenizer.chat_template", GgufValue::string(v.chat_template));
}

}  // namespace loom
