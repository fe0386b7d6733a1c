#include "core/dtype.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.h"

namespace loom {

namespace {
// The store counterpart of load_u16 (dtype.h): quantized rows are written into buffers at any
// byte offset too (packed tiles, file images whose rows have an odd byte length).
void store_u16(void* p, int64_t i, uint16_t v) { std::memcpy(static_cast<uint8_t*>(p) + 2 * i, &v, 2); }

#include "core/dtype_blocks_impl.h"

struct SoftF16 {
  float operator()(uint16_t h) const { return f16_to_f32(h); }
};
}  // namespace

namespace {

// ---- quantization of the ggml block types (bounds: dtype.h quantize_row) ----

void check_finite(DType t, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) fail("cannot quantize to ", dtype_name(t), ": value ", x[i], " at ", i, " is not finite");
}

// The smallest f16 >= v (v >= 0), so that a range scaled by it stays covered.
uint16_t f16_up(DType t, float v) {
  if (!(v <= 65504.0f)) fail("cannot quantize to ", dtype_name(t), ": scale ", v, " exceeds the f16 range (max 65504)");
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v) ++h;  // a positive finite f16: the next one up
  return h;
}
// The largest f16 <= v.
uint16_t f16_down(DType t, float v) {
  if (!(std::fabs(v) <= 65504.0f)) fail("cannot quantize to ", dtype_name(t), ": offset ", v, " exceeds the f16 range (max 65504)");
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) > v) {
    if (h == 0) h = 0x8001;     // +0 above a tiny negative v: the smallest negative f16
    else if (h & 0x8000) ++h;   // negative: one step away from zero
    else --h;                   // positive: one step towards zero
  }
  return h;
}

int clamp_level(float v, int lo, int hi) {
  const float r = std::nearbyint(v);
  return r < float(lo) ? lo : r > float(hi) ? hi : int(r);
}

// Q4_0 (half = 8) and Q5_0 (half = 16): d = -v / half, v the value of largest magnitude.
void quantize_q40_q50(DType t, const float* x, uint8_t* b) {
  const int half = t == DType::Q4_0 ? 8 : 16;
  float v = 0.0f;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > std::fabs(v)) v = x[i];
  const float d = v / float(-half);
  if (!(std::fabs(d) <= 65504.0f)) fail("cannot quantize to ", dtype_name(t), ": scale ", d, " exceeds the f16 range (max 65504)");
  const uint16_t dh = f32_to_f16(d);
  const float df = f16_to_f32(dh), id = df != 0.0f ? 1.0f / df : 0.0f;
  int q[32];
  for (int i = 0; i < 32; ++i) q[i] = clamp_level(x[i] * id, -half, half - 1) + half;
  store_u16(b, 0, dh);
  uint8_t* qs = b + (t == DType::Q4_0 ? kQ40Qs : kQ50Qs);
  uint32_t h = 0;
  for (int i = 0; i < 16; ++i) qs[i] = uint8_t((q[i] & 0xF) | ((q[i + 16] & 0xF) << 4));
  for (int i = 0; i < 32; ++i) h |= uint32_t(q[i] >> 4) << i;
  if (t == DType::Q5_0) std::memcpy(b + kQ50Qh, &h, 4);
}

// Q4_1: m = min rounded down, d = (max - m) / 15 rounded up.
void quantize_q41(const float* x, uint8_t* b) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < 32; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  const uint16_t mh = f16_down(DType::Q4_1, mn);
  const float m = f16_to_f32(mh);
  const uint16_t dh = f16_up(DType::Q4_1, (mx - m) / 15.0f);
  const float d = f16_to_f32(dh), id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(b, 0, dh);
  store_u16(b + kQ41M, 0, mh);
  uint8_t* qs = b + kQ41Qs;
  for (int i = 0; i < 16; ++i)
    qs[i] = uint8_t(clamp_level((x[i] - m) * id, 0, 15) | (clamp_level((x[i + 16] - m) * id, 0, 15) << 4));
}

// Q4_K (L = 15) and Q5_K (L = 31): per 32-sub-block j an offset o_j = dmin * m_j covering
// max(0, -min_j) and a step d * sc_j covering max_j + o_j in L steps (both rounded up).
void quantize_q4k_q5k(DType t, const float* x, uint8_t* b) {
  const int L = t == DType::Q4_K ? 15 : 31;
  float mx[8], need[8], maxm = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float lo = x[32 * j], hi = x[32 * j];
    for (int l = 1; l < 32; ++l) {
      lo = std::min(lo, x[32 * j + l]);
      hi = std::max(hi, x[32 * j + l]);
    }
    mx[j] = hi;
    need[j] = std::max(0.0f, -lo);
    maxm = std::max(maxm, need[j]);
  }
  const uint16_t dminh = maxm > 0.0f ? f16_up(t, maxm / 63.0f) : 0;
  const float dmin = f16_to_f32(dminh);
  int m[8];
  float o[8], span[8], maxs = 0.0f;
  for (int j = 0; j < 8; ++j) {
    m[j] = dmin > 0.0f ? std::min(63, int(std::ceil(need[j] / dmin))) : 0;
    o[j] = dmin * float(m[j]);
    span[j] = std::max(0.0f, mx[j] + o[j]);
    maxs = std::max(maxs, span[j]);
  }
  const uint16_t dh = maxs > 0.0f ? f16_up(t, maxs / float(63 * L)) : 0;
  const float d = f16_to_f32(dh);
  std::memset(b, 0, size_t(dtype_block_bytes(t)));
  store_u16(b, 0, dh);
  store_u16(b + kQ4KDmin, 0, dminh);
  uint8_t* qs = b + (t == DType::Q4_K ? kQ4KQs : kQ5KQs);
  for (int j = 0; j < 8; ++j) {
    const int sc = d > 0.0f ? std::min(63, int(std::ceil(span[j] / (float(L) * d)))) : 0;
    qb_k_put_scale_min(b + kQ4KScales, j, sc, m[j]);
    const float a = d * float(sc), ia = a > 0.0f ? 1.0f / a : 0.0f;
    for (int l = 0; l < 32; ++l) {
      const int q = clamp_level((x[32 * j + l] + o[j]) * ia, 0, L);
      qs[32 * (j / 2) + l] |= uint8_t((q & 0xF) << (4 * (j % 2)));
      if (t == DType::Q5_K) b[kQ5KQh + l] |= uint8_t((q >> 4) << j);
    }
  }
}

// Q6_K: per 16-sub-block k a step d * sc_k with 31 steps covering max |x|.
void quantize_q6k(const float* x, uint8_t* b) {
  float amax[16], maxa = 0.0f;
  for (int k = 0; k < 16; ++k) {
    amax[k] = 0.0f;
    for (int l = 0; l < 16; ++l) amax[k] = std::max(amax[k], std::fabs(x[16 * k + l]));
    maxa = std::max(maxa, amax[k]);
  }
  const uint16_t dh = maxa > 0.0f ? f16_up(DType::Q6_K, maxa / float(31 * 127)) : 0;
  const float d = f16_to_f32(dh);
  std::memset(b, 0, size_t(dtype_block_bytes(DType::Q6_K)));
  auto* scales = reinterpret_cast<int8_t*>(b + kQ6KScales);
  for (int k = 0; k < 16; ++k) {
    const int sc = d > 0.0f ? std::min(127, int(std::ceil(amax[k] / (31.0f * d)))) : 0;
    scales[k] = int8_t(sc);
    const float s = d * float(sc), is = s > 0.0f ? 1.0f / s : 0.0f;
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * k + l, n = e / 128, g = (e % 128) / 32, p = e % 32;
      const int q = clamp_level(x[e] * is, -32, 31) + 32;
      b[64 * n + 32 * (g % 2) + p] |= uint8_t((q & 0xF) << (4 * (g / 2)));
      b[kQ6KQh + 32 * n + p] |= uint8_t((q >> 4) << (2 * g));
    }
  }
  store_u16(b + kQ6KD, 0, dh);
}
}  // namespace

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q4_K: return "q4_k";
    case DType::Q5_K: return "q5_k";
    case DType::Q6_K: return "q6_k";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "f32" || s == "float32") return DType::F32;
  if (s == "f16" || s == "float16" || s == "fp16") return DType::F16;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  for (DType t : kAllDTypes)
    if (s == dtype_name(t)) return t;
  fail("unknown dtype '", name, "' (expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q4_k, q5_k or q6_k)");
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
    default: {
      const int be = dtype_block_elems(t), bb = dtype_block_bytes(t), subs = qb_subs(t);
      LOOM_CHECK(n % be == 0, "n=", n, " ", dtype_name(t));
      const auto* b = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n / be; ++i, b += bb)
        for (int j = 0; j < subs; ++j) qb_dequant_sub(t, b, j, dst + i * be + 32 * j, SoftF16{});
      return;
    }
  }
}

void dequantize_span(DType t, const void* src, int64_t offset, float* dst, int64_t n) {
  const int be = dtype_block_elems(t);
  LOOM_CHECK(offset >= 0 && offset < be && n >= 0, "offset=", offset, " n=", n, " ", dtype_name(t));
  if (offset == 0 && n % be == 0) return dequantize_row(t, src, dst, n);
  const int64_t blocks = (offset + n + be - 1) / be;
  std::vector<float> all(size_t(blocks * be));
  dequantize_row(t, src, all.data(), blocks * be);
  std::memcpy(dst, all.data() + offset, size_t(n) * sizeof(float));
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
    default: {
      const int be = dtype_block_elems(t), bb = dtype_block_bytes(t);
      LOOM_CHECK(n % be == 0, "n=", n, " ", dtype_name(t));
      check_finite(t, src, n);
      auto* b = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n / be; ++i, b += bb) {
        const float* x = src + i * be;
        switch (t) {
          case DType::Q4_0:
          case DType::Q5_0: quantize_q40_q50(t, x, b); break;
          case DType::Q4_1: quantize_q41(x, b); break;
          case DType::Q4_K:
          case DType::Q5_K: quantize_q4k_q5k(t, x, b); break;
          default: quantize_q6k(x, b); break;
        }
      }
      return;
    }
  }
}

}  // namespace loom
