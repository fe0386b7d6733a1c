// AVX2 + FMA + F16C path: 8 floats per vector. Called only after cpu_features() reports
// avx2, fma and f16c (see kernels.cpp).
#include <immintrin.h>

#include "kernels/dispatch.h"

namespace loom::kernels::detail {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kW = 8;
  static constexpr int kGemvRows = 8, kGemmRows = 2, kGemmTokens = 4;
  static constexpr int kPackMinTokens = 24;  // batches above this pack W to f32 (measured crossover)
  // gemv: 8 rows in flight plus a software prefetch 512 bytes ahead on each: one core keeps
  // enough DRAM requests outstanding (measured: q8_0 9.9 -> 13.3 GB/s, f16 12.5 -> 14.8 GB/s).
  static constexpr int kGemvPrefetch = 512;
  // Tiled gemv prefetch distance (as the AVX-512 path).
  static constexpr int kTilePrefetch = 1088, kTilePrefetchL2 = 4096;
  static constexpr int64_t kGemmKc = 512;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 sh = _mm_movehdup_ps(s);
    s = _mm_add_ps(s, sh);
    sh = _mm_movehl_ps(sh, s);
    return _mm_cvtss_f32(_mm_add_ss(s, sh));
  }
  static V load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V load_bf16(const uint16_t* p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  static void load_bf16_pairs(const uint16_t* p, V& lo, V& hi) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    hi = _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(int(0xFFFF0000u))));
  }
  static V load_q8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static float f16(uint16_t h) { return _cvtsh_ss(h); }
  // e^x, Cephes' expf polynomial after range reduction x = n*ln2 + r; max rel. error ~2 ulp.
  static V exp(V x) {
    x = _mm256_min_ps(_mm256_max_ps(x, set1(-87.3365448f)), set1(88.3762626f));
    const V n = _mm256_round_ps(_mm256_mul_ps(x, set1(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V y = set1(1.9875691500e-4f);
    y = fma(y, r, set1(1.3981999507e-3f));
    y = fma(y, r, set1(8.3334519073e-3f));
    y = fma(y, r, set1(4.1665795894e-2f));
    y = fma(y, r, set1(1.6666665459e-1f));
    y = fma(y, r, set1(5.0000001201e-1f));
    y = add(fma(y, mul(r, r), r), set1(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return mul(y, _mm256_castsi256_ps(e));
  }

  // ---- fast mode (kernels_fast_impl.h); the same operations as the scalar path's definitions.
  using F8 = __m256;
  using I8 = __m256i;
  static F8 f8_zero() { return _mm256_setzero_ps(); }
  static F8 f8_set1(float f) { return _mm256_set1_ps(f); }
  static F8 f8_load(const float* p) { return _mm256_loadu_ps(p); }
  static void f8_store(float* p, F8 a) { _mm256_storeu_ps(p, a); }
  static F8 f8_mul(F8 a, F8 b) { return _mm256_mul_ps(a, b); }
  static F8 f8_fma(F8 a, F8 b, F8 c) { return _mm256_fmadd_ps(a, b, c); }
  static F8 f8_from_f16(const uint16_t* p) { return load_f16(p); }
  static F8 f8_from_i32(I8 s) { return _mm256_cvtepi32_ps(s); }
  static float f8_lane(F8 a, int i) {
    alignas(32) float t[8];
    _mm256_store_ps(t, a);
    return t[i];
  }
  // 8 rows x 32 int8: |w| (u8) times x with w's sign (s8) pairwise into int16 (|w| <= 128,
  // |x| <= 127: no saturation), pairs of those into int32, then a transposing add tree.
  static I8 q8_dot8(const int8_t* w, int64_t stride, const int8_t* x, int32_t /*xsum*/) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * stride));
      const __m256i d16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
      p[r] = _mm256_madd_epi16(d16, ones);
    }
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i h0123 = _mm256_hadd_epi32(h01, h23), h4567 = _mm256_hadd_epi32(h45, h67);
    // h0123: 128-bit lane 0 = rows 0..3 over columns 0..15, lane 1 = rows 0..3 over 16..31.
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                            _mm256_permute2x128_si256(h0123, h4567, 0x31));
  }
  // 16 lanes as two vectors of 8.
  struct A16 {
    __m256 lo, hi;
  };
  static A16 a16_zero() { return A16{_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static __m256 pair_lo(__m256i u) { return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16)); }
  static __m256 pair_hi(__m256i u) { return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(int(0xFFFF0000u)))); }
  static void a16_step_pairs(A16& a, const uint32_t* w, const uint32_t* x) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 8));
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8));
    a.lo = _mm256_fmadd_ps(pair_lo(w0), pair_lo(x0), _mm256_fmadd_ps(pair_hi(w0), pair_hi(x0), a.lo));
    a.hi = _mm256_fmadd_ps(pair_lo(w1), pair_lo(x1), _mm256_fmadd_ps(pair_hi(w1), pair_hi(x1), a.hi));
  }
  static void a16_step_plain(A16& a, const uint16_t* w, const uint32_t* x) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8));
    a.lo = _mm256_fmadd_ps(load_bf16(w), pair_lo(x0), _mm256_fmadd_ps(load_bf16(w + 16), pair_hi(x0), a.lo));
    a.hi = _mm256_fmadd_ps(load_bf16(w + 8), pair_lo(x1), _mm256_fmadd_ps(load_bf16(w + 24), pair_hi(x1), a.hi));
  }
  static float a16_reduce(const A16& a) {
    const __m256 s8 = _mm256_add_ps(a.lo, a.hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // [s4[0] + s4[2], s4[1] + s4[3]]
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
};

#include "kernels/kernels_impl.h"
#include "kernels/kernels_fast_impl.h"

}  // namespace

const KernelTable& table_avx2() { return make_table<Avx2>("avx2", "avx2", "avx2"); }

}  // namespace loom::kernels::detail
