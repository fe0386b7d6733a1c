// Element types of weights and activations, and their conversions.
//
// Q8_0 is GGML's block format: blocks of 32 weights, each an f16 scale d followed by 32 int8
// quants q[i]; the weight is d * q[i]. A row of K weights (K % 32 == 0) takes K/32 * 34 bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace loom {

enum class DType : uint8_t { F32, F16, BF16, Q8_0 };

inline constexpr int kQ8BlockSize = 32;  // weights per Q8_0 block
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQ8BlockSize];
};
static_assert(sizeof(BlockQ8_0) == 34);

std::string_view dtype_name(DType t);
// Parses "f32", "f16", "bf16", "q8_0" (case-insensitive); throws loom::Error naming the value.
DType parse_dtype(std::string_view name);

// Elements per storage block (1, or 32 for Q8_0) and bytes per block.
constexpr int dtype_block_elems(DType t) { return t == DType::Q8_0 ? kQ8BlockSize : 1; }
constexpr int dtype_block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::Q8_0: return 34;
  }
  return 0;
}
// Bytes taken by `n` consecutive elements; n must be a multiple of the block size.
constexpr int64_t dtype_row_bytes(DType t, int64_t n) {
  return n / dtype_block_elems(t) * dtype_block_bytes(t);
}

// --- scalar conversions (exact IEEE semantics, round-to-nearest-even) ---

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Element i of a 16-bit (or 32-bit) array at any address. Weight data is mapped from files whose
// formats allow odd offsets (a safetensors header length or data_offsets), so a plain
// `static_cast<const uint16_t*>(p)[i]` would be a misaligned load, undefined behaviour that
// UBSan reports; memcpy compiles to the same single load on x86.
inline uint16_t load_u16(const void* p, int64_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + 2 * i, 2);
  return v;
}
inline float load_f32(const void* p, int64_t i) {
  float v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + 4 * i, 4);
  return v;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                           // round to nearest even
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of type `t` starting at `src` (n a multiple of the block size) to f32.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Converts n f32 values to type `t` (n a multiple of the block size).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace loom
