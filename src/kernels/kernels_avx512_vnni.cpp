// The fast mode's AVX-512 kernels (kernels.h "Numerics"): q8_0 with VNNI int8 dot products
// (vpdpbusd), bf16 with AVX512-BF16 (vdpbf16ps). Compiled with -mavx512vnni -mavx512bf16 (see
// src/CMakeLists.txt); cpu_features.cpp puts each in the AVX-512 table only when the CPU reports
// avx512_vnni / avx512_bf16 (else the AVX2 fast kernels run there). The per-output operations
// are the scalar path's (kernels_fast_impl.h), so the results are the same bits (bf16: unless a
// value is subnormal: vdpbf16ps flushes those).
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/dispatch.h"

namespace loom::kernels::detail {
namespace {

struct Avx512Fast {
  using F8 = __m256;
  using I8 = __m256i;
  static F8 f8_zero() { return _mm256_setzero_ps(); }
  static F8 f8_set1(float f) { return _mm256_set1_ps(f); }
  static F8 f8_load(const float* p) { return _mm256_loadu_ps(p); }
  static void f8_store(float* p, F8 a) { _mm256_storeu_ps(p, a); }
  static F8 f8_mul(F8 a, F8 b) { return _mm256_mul_ps(a, b); }
  static F8 f8_fma(F8 a, F8 b, F8 c) { return _mm256_fmadd_ps(a, b, c); }
  static F8 f8_from_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F8 f8_from_i32(I8 s) { return _mm256_cvtepi32_ps(s); }
  static float f8_lane(F8 a, int i) {
    alignas(32) float t[8];
    _mm256_store_ps(t, a);
    return t[i];
  }
  // Rows r and r + 1 in one vector (32 bytes each); x's 32 bytes in both halves.
  static __m512i two_rows(const int8_t* w, int64_t stride, int r) {
    if (stride == 32) return _mm512_loadu_si512(w + r * 32);
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * stride));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + (r + 1) * stride));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  // vpdpbusd takes unsigned x signed bytes: w ^ 0x80 = w + 128 (u8) times x (s8, |x| <= 127)
  // sums to s + 128 * sum(x) exactly in int32; xsum removes the offset. Then the lanes of each
  // row (8 int32) are added by a transposing tree into lane r of the result.
  static I8 q8_dot8(const int8_t* w, int64_t stride, const int8_t* x, int32_t xsum) {
    const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
    const __m512i off = _mm512_set1_epi8(char(0x80));
    __m512i d[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
      d[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(two_rows(w, stride, 2 * i), off), xv);
    // d[i]: 128-bit lanes 0, 1 = row 2i, lanes 2, 3 = row 2i + 1.
    const __m512i p = _mm512_add_epi32(_mm512_shuffle_i32x4(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));  // rows 0..3
    const __m512i q = _mm512_add_epi32(_mm512_shuffle_i32x4(d[2], d[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(d[2], d[3], _MM_SHUFFLE(3, 1, 3, 1)));  // rows 4..7
    const __m512i r1 = _mm512_add_epi32(_mm512_unpacklo_epi32(p, q), _mm512_unpackhi_epi32(p, q));
    const __m512i r2 = _mm512_add_epi32(r1, _mm512_shuffle_epi32(r1, _MM_PERM_BADC));
    // 128-bit lane i of r2: element 0 = row i, element 1 = row 4 + i.
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i s = _mm512_castsi512_si256(_mm512_permutexvar_epi32(idx, r2));
    return _mm256_sub_epi32(s, _mm256_set1_epi32(128 * xsum));
  }
  using A16 = __m512;
  static A16 a16_zero() { return _mm512_setzero_ps(); }
  static void a16_step_pairs(A16& a, const uint32_t* w, const uint32_t* x) {
    a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_loadu_si512(w), (__m512bh)_mm512_loadu_si512(x));
  }
  static void a16_step_plain(A16& a, const uint16_t* w, const uint32_t* x) {
    // 32 bf16 in column order -> words j = (w[j], w[j + 16]).
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i wv = _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(w));
    a = _mm512_dpbf16_ps(a, (__m512bh)wv, (__m512bh)_mm512_loadu_si512(x));
  }
  static float a16_reduce(const A16& a) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
};

#include "kernels/kernels_fast_impl.h"

}  // namespace

void (*q8_fast_rows_vnni())(const MatmulArgs&, int64_t, int64_t) { return &q8_fast_rows_impl<Avx512Fast>; }
void (*bf16_fast_rows_avx512bf16())(const MatmulArgs&, int64_t, int64_t) { return &bf16_fast_rows_impl<Avx512Fast>; }

}  // namespace loom::kernels::detail
