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
};

#include "kernels/kernels_impl.h"

}  // namespace

const KernelTable& table_scalar() { return make_table<Scalar>("scalar"); }

}  // namespace loom::kernels::detail
