#include "core/dtype.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>

#include "core/error.h"

namespace loom {

namespace {
// The store counterpart of load_u16 (dtype.h): quantized rows are written into buffers at any
// byte offset too (packed tiles, file images whose rows have an odd byte length).
void store_u16(void* p, int64_t i, uint16_t v) { std::memcpy(static_cast<uint8_t*>(p) + 2 * i, &v, 2); }
}  // namespace

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8_0: return "q8_0";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "f32" || s == "float32") return DType::F32;
  if (s == "f16" || s == "float16" || s == "fp16") return DType::F16;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  if (s == "q8_0") return DType::Q8_0;
  fail("unknown dtype '", name, "' (expected f32, f16, bf16 or q8_0)");
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return bits_to_f32(sign);
    // subnormal: value = mant * 2^-24
    float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (mant << 13));
  return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_to_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00;  // overflow (>= 65520 rounds to inf)
  if (absu < 0x38800000u) {                       // below the smallest normal: subnormal or 0
    // round(|f| * 2^24) with ties to even, done in float (exact: |f| < 2^-14)
    const float a = bits_to_f32(absu);
    const float scaled = a * 16777216.0f;  // 2^24
    return sign | uint16_t(std::nearbyint(scaled));
  }
  // normal: rebias the exponent and round the mantissa to 10 bits, nearest even
  uint32_t v = absu - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return sign | uint16_t(v >> 13);
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    // src may be at any address (load_u16): a mapped safetensors tensor can start at an odd byte.
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src, i));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src, i));
      return;
    case DType::Q8_0: {
      LOOM_CHECK(n % kQ8BlockSize == 0, "n=", n);
      const auto* b = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n / kQ8BlockSize; ++i, b += sizeof(BlockQ8_0)) {
        const float d = f16_to_f32(load_u16(b + offsetof(BlockQ8_0, d), 0));
        const auto* qs = reinterpret_cast<const int8_t*>(b + offsetof(BlockQ8_0, qs));
        for (int j = 0; j < kQ8BlockSize; ++j) dst[i * kQ8BlockSize + j] = d * float(qs[j]);
      }
      return;
    }
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    // dst may be at any address (store_u16), like dequantize_row's src.
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) store_u16(dst, i, f32_to_f16(src[i]));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) store_u16(dst, i, f32_to_bf16(src[i]));
      return;
    case DType::Q8_0: {
      LOOM_CHECK(n % kQ8BlockSize == 0, "n=", n);
      for (int64_t i = 0; i < n / kQ8BlockSize; ++i) {
        auto* b = static_cast<uint8_t*>(dst) + i * int64_t(sizeof(BlockQ8_0));
        const float* x = src + i * kQ8BlockSize;
        float amax = 0.0f;
        for (int j = 0; j < kQ8BlockSize; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16(b + offsetof(BlockQ8_0, d), 0, f32_to_f16(d));
        auto* qs = reinterpret_cast<int8_t*>(b + offsetof(BlockQ8_0, qs));
        for (int j = 0; j < kQ8BlockSize; ++j) qs[j] = int8_t(std::lround(x[j] * id));
      }
      return;
    }
  }
}

}  // namespace loom
