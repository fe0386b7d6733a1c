// GGUF (ggml's model file format), version 3 (version 2 has the same layout and is read too).
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor_count, u64 kv_count; kv_count
// key/values (string key, u32 value type, value); tensor_count tensor infos (string name,
// u32 n_dims, u64 dims[n_dims] with dims[0] the innermost (contiguous) one, u32 ggml type,
// u64 offset into the data section, a multiple of the alignment); padding to
// general.alignment (default 32); the data section. A string is a u64 length and its bytes
// (no terminator); an array is a u32 element type, a u64 count and the elements.
//
// The reader validates everything up front: magic, version, every length against the end of
// the file, value types of the keys loom reads, tensor types, dims, offsets (in range, aligned,
// not overlapping) and sizes. loom reads tensors of ggml types F32, F16, BF16, Q8_0, Q4_0, Q4_1,
// Q5_0, Q4_K, Q5_K and Q6_K; a tensor of any other type is refused, in one line naming the tensor
// and the type, when the file is opened (before any weight is used).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"
#include "model/vocab.h"
#include "model/weights.h"

namespace loom {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
  U64 = 10, I64 = 11, F64 = 12
};
std::string_view gguf_type_name(GgufType t);

// ggml tensor type ids loom reads, and their mapping to DType.
inline constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6, kGgmlQ8_0 = 8,
                          kGgmlQ4_K = 12, kGgmlQ5_K = 13, kGgmlQ6_K = 14, kGgmlBF16 = 30;
uint32_t ggml_type_of(DType t);
// Name of any ggml type id ("Q4_K"), or "unknown".
std::string ggml_type_name(uint32_t type);

// One metadata value. Scalars: `num` (every numeric type and bool, exact for integers up to
// 2^53) or `str`; integer scalars also exactly (`ival` for values that fit an int64, `uval_high`
// for u64 values above INT64_MAX), so errors print the file's number, not a rounded one.
// Arrays: elem_type and `nums` or `strs` (arrays of arrays are parsed and counted but their
// elements not kept).
struct GgufValue {
  GgufType type = GgufType::U32;
  double num = 0.0;
  int64_t ival = 0;         // integer scalars that fit an int64
  uint64_t uval_high = 0;   // u64 scalars above INT64_MAX (then ival is unused)
  std::string str;
  GgufType elem_type = GgufType::U32;
  uint64_t count = 0;  // arrays: number of elements
  std::vector<double> nums;
  std::vector<std::string> strs;

  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue string_array(std::vector<std::string> v);
  static GgufValue f32_array(const std::vector<float>& v);
  static GgufValue i32_array(const std::vector<int32_t>& v);
  bool is_array() const { return type == GgufType::Array; }
  bool is_integer() const;  // any integer type (not bool, not float)
  bool is_number() const;   // integer or float type
  // Integer scalars: the exact value when it fits [lo, hi] (true), else false.
  bool int_in(int64_t lo, int64_t hi, int64_t* out) const;
  std::string int_text() const;  // integer scalars: the exact value
  std::string short_text() const;  // for `loom info`: scalars in full, arrays as "[n x type]"
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // innermost first, as in the file
  uint32_t ggml_type = 0;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;
  DType dtype = DType::F32;
  const uint8_t* data = nullptr;  // into the mapping
};

class GgufFile {
 public:
  // Maps and validates `path`; throws loom::Error naming the key/tensor and the values.
  explicit GgufFile(const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::vector<std::pair<std::string, GgufValue>>& kvs() const { return kvs_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  std::shared_ptr<const MappedFile> mapping() const { return file_; }

  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // Typed getters: throw loom::Error naming the key when it is missing (the 1-argument forms)
  // or holds the wrong type.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;

 private:
  std::string path_;
  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Streams a GGUF v3 file: set the key/values and declare every tensor, then begin(), then write
// each tensor's bytes in declaration order (in as many write() calls as wanted), then finish().
// Tensor data is placed at offsets aligned to `alignment` (written as general.alignment when it
// is not 32), padding with zeros. Not thread-safe.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32);
  ~GgufWriter();
  void set(const std::string& key, GgufValue v);  // replaces an existing key, keeps its place
  // dims innermost first (a [rows, cols] matrix is {cols, rows}).
  void add_tensor(const std::string& name, std::vector<uint64_t> dims, DType dtype);
  void begin(const std::string& path);
  void write(const void* bytes, size_t n);
  void finish();  // checks every tensor got exactly its bytes, closes the file

 private:
  void put(const void* p, size_t n);
  void put_string(const std::string& s);
  void put_value(const GgufValue& v);
  void pad_to(uint64_t multiple);
  struct Pending {
    std::string name;
    std::vector<uint64_t> dims;
    DType dtype;
    uint64_t bytes, offset;
  };
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::vector<Pending> tensors_;
  std::string path_;
  void* file_ = nullptr;  // FILE*
  uint64_t pos_ = 0;      // bytes written to the file
  uint64_t data_start_ = 0;
  size_t current_ = 0;         // tensor being written
  uint64_t current_done_ = 0;  // its bytes written so far
};

// Loads a GGUF llama/qwen2 model (see loader.h for the contract). Rope: llama -> Interleaved
// (the converters permute Q/K rows), qwen2 -> HalfSplit. A rope_freqs.weight tensor (Llama-3
// scaling) becomes config.rope_scaling.freq_factors.
std::shared_ptr<Model> load_gguf_model(const std::string& path);
ModelConfig gguf_model_config(const GgufFile& f);

// The general.* and <arch>.* keys of a model of config c (arch "llama" or "qwen2"; GGUF writes Mistral
// as llama), as loom synth and loom quantize write them.
void gguf_put_model_config(GgufWriter& w, const ModelConfig& c, const std::string& name, uint32_t file_type);
// "llama" or "qwen2": the GGUF architecture of config c.
std::string gguf_arch_of(const ModelConfig& c);

// tokenizer.ggml.* keys <-> Vocab. "llama" -> Spm, "gpt2" -> Bpe; other models are an error.
Vocab gguf_vocab(const GgufFile& f);
void gguf_put_vocab(GgufWriter& w, const Vocab& v);

// Canonical tensor name (loader.h) -> GGUF tensor name ("blk.0.attn_q" -> "blk.0.attn_q.weight",
// "blk.0.attn_q.bias" unchanged).
std::string gguf_tensor_name(const std::string& canonical);

// Row permutation the HF -> GGUF converters apply to Q and K of the llama architecture, turning
// half-split RoPE pairs (i, i + head_dim/2) into interleaved pairs (2i, 2i+1): GGUF row r of a
// head holds HF row gguf_llama_qk_source_row(r) of the same head.
int64_t gguf_llama_qk_source_row(int64_t r, int head_dim);

}  // namespace loom
