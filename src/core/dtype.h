// Element types of weights and activations, and their conversions.
//
// Block formats (GGML's, byte for byte; every multi-byte field little-endian, f16 scales):
//  - Q8_0: blocks of 32 weights, an f16 scale d followed by 32 int8 quants q[i]; w = d * q[i].
//  - Q4_0: blocks of 32: d, then 16 bytes; element j < 16 is the low nibble of byte j, element
//    j + 16 its high nibble; w = d * (q - 8).
//  - Q4_1: blocks of 32: d, m, then the 16 nibble bytes of Q4_0; w = d * q + m.
//  - Q5_0: blocks of 32: d, a 32-bit word h, the 16 nibble bytes; element i has the 5th bit
//    (bit i of h) above its nibble; w = d * (q - 16).
//  - Q4_K: super-blocks of 256 = 8 sub-blocks of 32: f16 d, f16 dmin, 12 bytes of 6-bit sub-block
//    scales sc[j] and mins m[j] (dtype.cpp k_scale_min says how they are packed), 128 bytes of
//    nibbles: sub-blocks 2i and 2i + 1 share bytes [32i, 32i + 32), 2i in the low nibbles;
//    w = (d * sc[j]) * q - (dmin * m[j]).
//  - Q5_K: as Q4_K plus 32 bytes h before the nibbles: element l of sub-block j has its 5th bit
//    in bit j of h[l]; 176 bytes.
//  - Q6_K: super-blocks of 256 = 16 sub-blocks of 16: 128 bytes ql (low 4 bits), 64 bytes qh
//    (high 2 bits), 16 int8 scales, f16 d; element e of half n (e < 128) has quarter g = e / 32,
//    l = e % 32: low bits = nibble (g / 2) of ql[64n + 32(g % 2) + l], high bits = bits 2g..2g+1
//    of qh[32n + l]; w = (d * sc[e / 16]) * (q - 32).
// dequantize_row performs exactly ggml's dequantization arithmetic (the f32 products and their
// order as above), so its values are those of ggml's own to_float, bit for bit
// (tests/kernels/test_quant_formats.cpp checks every tensor of an independent tool's files).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace loom {

enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K };

inline constexpr int kQ8BlockSize = 32;  // weights per Q8_0 block
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQ8BlockSize];
};
static_assert(sizeof(BlockQ8_0) == 34);

inline constexpr int kQKBlockSize = 256;  // weights per K-quant super-block
inline constexpr int kQKSubBlock = 32;     // the split unit of every quantized type (see dtype_split_elems)

std::string_view dtype_name(DType t);
// Parses "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k"
// (case-insensitive); throws loom::Error naming the value.
DType parse_dtype(std::string_view name);
// Every dtype, in enum order (for tests and listings).
inline constexpr DType kAllDTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                                       DType::Q4_1, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Whether t is one of the block-quantized types (not f32, f16, bf16).
constexpr bool dtype_is_quantized(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }
// Whether t is a K-quant (256-weight super-blocks).
constexpr bool dtype_is_k_quant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

// Elements per storage block (1, 32, or 256 for the K-quants) and bytes per block.
constexpr int dtype_block_elems(DType t) {
  return !dtype_is_quantized(t) ? 1 : dtype_is_k_quant(t) ? kQKBlockSize : kQ8BlockSize;
}
constexpr int dtype_block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::Q8_0: return 34;
    case DType::Q4_0: return 18;
    case DType::Q4_1: return 20;
    case DType::Q5_0: return 22;
    case DType::Q4_K: return 144;
    case DType::Q5_K: return 176;
    case DType::Q6_K: return 210;
  }
  return 0;
}
// The column granularity at which a matrix of type t can be cut (a TP column shard, a view's
// first column): 1 for f32/f16/bf16, 32 for every quantized type. A K-quant super-block is cut
// between its 32-weight sub-blocks (Q6_K: pairs of its 16-weight sub-blocks): the view then starts
// `col_offset` weights into its first super-block (core/weight_view.h).
constexpr int dtype_split_elems(DType t) { return dtype_is_quantized(t) ? kQKSubBlock : 1; }
// Bytes taken by `n` consecutive elements; n must be a multiple of the block size.
constexpr int64_t dtype_row_bytes(DType t, int64_t n) {
  return n / dtype_block_elems(t) * dtype_block_bytes(t);
}
// Bytes of the blocks that hold elements [offset, offset + n) of a row (offset < block size).
constexpr int64_t dtype_span_bytes(DType t, int64_t offset, int64_t n) {
  const int64_t be = dtype_block_elems(t);
  return (offset + n + be - 1) / be * dtype_block_bytes(t);
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
// Elements [offset, offset + n) of the blocks at `src` (offset < the block size) to f32: a row of
// a view that starts inside a super-block (weight_view.h col_offset).
void dequantize_span(DType t, const void* src, int64_t offset, float* dst, int64_t n);
// Converts n f32 values to type `t` (n a multiple of the block size). Each quantized type rounds
// as dtype.cpp states, with this bound per element x and its dequantized value w (A = max |x|
// over the block or sub-block named, min / max over it; scales are stored as f16 and rounded up
// where a range must stay covered; tests/kernels/test_dtype.cpp checks every bound):
//   q8_0  d = A/127:                                 |x - w| <= d/2 + 127 |d - f16(d)|
//   q4_0  d = -v/8, v the block's value of largest magnitude (ggml's choice: v itself is a level,
//         the opposite end is one step short):         |x - w| <= A/8 (1 + 2^-7) + 2^-20
//   q5_0  d = -v/16:                                 |x - w| <= A/16 (1 + 2^-7) + 2^-20
//   q4_1  m = min rounded down, d = (max - m)/15:    |x - w| <= R/30 + 2^-10 (R + |min|) + 2^-20,
//                                                     R = max - min
//   q4_k, q5_k (L = 15, 31 levels) per 32-weight sub-block j: M_j = max(0, -min_j),
//         R_j = max_j + M_j; dmin = max_j M_j / 63, mins m_j = ceil(M_j / dmin); d =
//         max_j (R_j + dmin) / (63 L), scales sc_j = ceil((max_j + dmin m_j) / (L d)):
//                                                    |x - w| <= (R_j + dmin) / (2L) + d/2 + 2^-20 (|x| + R_j + dmin)
//   q6_k  per 16-weight sub-block k: d = max_k A_k / (31 * 127), sc_k = ceil(A_k / (31 d)):
//                                                    |x - w| <= A_k / 62 + d/2 + 2^-20 A_k
//   with d, dmin the stored scales: d <= (the value above) (1 + 2^-10) + 2^-24, likewise dmin.
// Throws loom::Error naming the value for a non-finite input or a scale beyond f16 (65504).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace loom
