// Scalar path: the same kernel bodies with a one-float "vector"; runs on any x86-64 (and any
// other) CPU. Always present, and the fallback of the dispatch.
#include "kernels/dispatch.h"

namespace loom::kernels::detail {
namespace {

struct Scalar {
  using V = float;
  static constexpr int kW = 1;
  static constexpr int kGemvRows = 4, kGemmRows = 2, kGemmTokens = 4;
  static constexpr int kPackMinTokens = 24;  // batches above this pack W to f32 (measured crossover)
  static constexpr int kGemvPrefetch = 0;  // bytes ahead on each W row in gemv (0: off)
  static constexpr int kTilePrefetch = 0, kTilePrefetchL2 = 0;
  static constexpr int64_t kGemmKc = 512;
  static V zero() { return 0.0f; }
  static V set1(float f) { return f; }
  static V load(const float* p) { return load_f32(p, 0); }  // weight views may be misaligned
  static void store(float* p, V v) { *p = v; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static float hsum(V v) { return v; }
  static V load_f16(const uint16_t* p) { return f16_to_f32(load_u16(p, 0)); }  // any address
  static V load_bf16(const uint16_t* p) {
    const uint32_t u = uint32_t(load_u16(p, 0)) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
  }
  static void load_bf16_pairs(const uint16_t* p, V& lo, V& hi) {
    lo = load_bf16(p);
    hi = load_bf16(p + 1);
  }
  static V load_q8(const int8_t* p) { return float(*p); }
  static float f16(uint16_t h) { return f16_to_f32(h); }
  static V exp(V x) { return __builtin_expf(x); }

  // ---- fast mode (kernels_fast_impl.h): the definitions the SIMD paths repeat bit for bit.
  struct F8 {
    float v[8];
  };
  struct I8 {
    int32_t v[8];
  };
  static F8 f8_zero() { return F8{}; }
  static F8 f8_set1(float f) {
    F8 r;
    for (float& x : r.v) x = f;
    return r;
  }
  static F8 f8_load(const float* p) {
    F8 r;
    for (int i = 0; i < 8; ++i) r.v[i] = p[i];
    return r;
  }
  static void f8_store(float* p, const F8& a) {
    for (int i = 0; i < 8; ++i) p[i] = a.v[i];
  }
  static F8 f8_mul(const F8& a, const F8& b) {
    F8 r;
    for (int i = 0; i < 8; ++i) r.v[i] = a.v[i] * b.v[i];
    return r;
  }
  static F8 f8_fma(const F8& a, const F8& b, const F8& c) {
    F8 r;
    for (int i = 0; i < 8; ++i) r.v[i] = __builtin_fmaf(a.v[i], b.v[i], c.v[i]);
    return r;
  }
  static F8 f8_from_f16(const uint16_t* p) {
    F8 r;
    for (int i = 0; i < 8; ++i) r.v[i] = f16_to_f32(p[i]);
    return r;
  }
  static F8 f8_from_i32(const I8& s) {
    F8 r;
    for (int i = 0; i < 8; ++i) r.v[i] = float(s.v[i]);
    return r;
  }
  static float f8_lane(const F8& a, int i) { return a.v[i]; }
  static I8 q8_dot8(const int8_t* w, int64_t stride, const int8_t* x, int32_t /*xsum*/) {
    I8 r;
    for (int l = 0; l < 8; ++l) {
      int32_t s = 0;
      for (int i = 0; i < 32; ++i) s += int32_t(w[l * stride + i]) * int32_t(x[i]);
      r.v[l] = s;
    }
    return r;
  }
  struct A16 {
    float v[16];
  };
  static A16 a16_zero() { return A16{}; }
  static float bf16_lo(uint32_t u) {
    const uint32_t b = u << 16;
    float f;
    __builtin_memcpy(&f, &b, 4);
    return f;
  }
  static float bf16_hi(uint32_t u) {
    const uint32_t b = u & 0xFFFF0000u;
    float f;
    __builtin_memcpy(&f, &b, 4);
    return f;
  }
  static void a16_step_pairs(A16& a, const uint32_t* w, const uint32_t* x) {
    for (int j = 0; j < 16; ++j) {
      a.v[j] = __builtin_fmaf(bf16_hi(w[j]), bf16_hi(x[j]), a.v[j]);
      a.v[j] = __builtin_fmaf(bf16_lo(w[j]), bf16_lo(x[j]), a.v[j]);
    }
  }
  static void a16_step_plain(A16& a, const uint16_t* w, const uint32_t* x) {
    for (int j = 0; j < 16; ++j) {
      a.v[j] = __builtin_fmaf(bf16_lo(w[j + 16]), bf16_hi(x[j]), a.v[j]);
      a.v[j] = __builtin_fmaf(bf16_lo(w[j]), bf16_lo(x[j]), a.v[j]);
    }
  }
  static float a16_reduce(const A16& a) {
    float s8[8], s4[4];
    for (int i = 0; i < 8; ++i) s8[i] = a.v[i] + a.v[i + 8];
    for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
    const float s20 = s4[0] + s4[2], s21 = s4[1] + s4[3];
    return s20 + s21;
  }
};

#include "kernels/kernels_impl.h"
#include "kernels/kernels_fast_impl.h"
#include "kernels/kernels_quant_impl.h"

}  // namespace

const KernelTable& table_scalar() { return make_table<Scalar>("scalar", "scalar", "scalar"); }

}  // namespace loom::kernels::detail
