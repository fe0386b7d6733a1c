// AVX-512 path (compiled with -mavx512f/bw/vl/dq, -mfma, -mf16c): 16 floats per vector.
// Called only after cpu_features() reports avx512f + avx512bw (see kernels.cpp).
#include <immintrin.h>

// g++ 12's _mm512_undefined_ps() (`__m512 __Y = __Y;`, used by the conversion intrinsics) trips
// -Wuninitialized once inlined; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/dispatch.h"

namespace loom::kernels::detail {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kW = 16;
  static constexpr int kGemvRows = 8, kGemmRows = 4, kGemmTokens = 6;  // 4x6 tile: 24 accumulators
  static constexpr int kPackMinTokens = 24;  // batches above this pack W to f32 (measured crossover)
  // gemv: 8 rows in flight plus a software prefetch 512 bytes ahead on each: one core keeps
  // enough DRAM requests outstanding (measured: q8_0 9.9 -> 13.3 GB/s, f16 12.5 -> 14.8 GB/s).
  static constexpr int kGemvPrefetch = 512;
  // Tiled gemv: one linear stream, prefetched 1088 bytes ahead into L1 (2048 and more: slower,
  // the L1 fill buffers run out) and 4096 ahead into L2 (measured at 2 threads, 2048 columns, GB/s
  // L1-only -> both: bf16 27-28 -> 30, q8_0 25-26 -> 25-28, f32 31 -> 30-33; run-to-run +-2).
  static constexpr int kTilePrefetch = 1088, kTilePrefetchL2 = 4096;
  static constexpr int64_t kGemmKc = 1024;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
  static V load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V load_bf16(const uint16_t* p) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  // kW 32-bit words of bf16 pairs: lo lane i = p[2i], hi lane i = p[2i + 1] (one load, one shift,
  // one and; no shuffle-port uop).
  static void load_bf16_pairs(const uint16_t* p, V& lo, V& hi) {
    const __m512i u = _mm512_loadu_si512(p);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    hi = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(int(0xFFFF0000u))));
  }
  static V load_q8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static float f16(uint16_t h) { return _cvtsh_ss(h); }
  // e^x, Cephes' expf polynomial after range reduction x = n*ln2 + r; max rel. error ~2 ulp.
  static V exp(V x) {
    x = _mm512_min_ps(_mm512_max_ps(x, set1(-87.3365448f)), set1(88.3762626f));
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, set1(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V y = set1(1.9875691500e-4f);
    y = fma(y, r, set1(1.3981999507e-3f));
    y = fma(y, r, set1(8.3334519073e-3f));
    y = fma(y, r, set1(4.1665795894e-2f));
    y = fma(y, r, set1(1.6666665459e-1f));
    y = fma(y, r, set1(5.0000001201e-1f));
    y = add(fma(y, mul(r, r), r), set1(1.0f));
    return _mm512_scalef_ps(y, n);
  }
};

#include "kernels/kernels_impl.h"
#include "kernels/kernels_quant_impl.h"

}  // namespace

const KernelTable& table_avx512() { return make_table<Avx512, false>("avx512", nullptr, nullptr); }

}  // namespace loom::kernels::detail
