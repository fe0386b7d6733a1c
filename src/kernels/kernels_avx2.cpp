// AVX2 + FMA + F16C path: 8 floats per vector. Called only after cpu_features() reports
// avx2, fma and f16c (see kernels.cpp).
#include <immintrin.h>

#include <cstdlib>

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
#include "kernels/kernels_quant_impl.h"

// ---- fast mode, batched q8_0 (n >= kQ8BatchMinTokens): the operations of kernels.h per output,
// arranged so that each weight load serves several tokens and no horizontal add is left per block.
// Per 8-row group and column block the weights are repacked once per call into a panel with
// lane = row (q8_0 weights as they are, so the values are the file's): for block
// b, register k (k < 8) holds columns 4k..4k+3 of the 8 rows (the 8 x 8 dword transpose of the
// rows' 32 bytes), as |w| (u8) and as w (for the sign), plus the 8 scales widened to f32. Then
// per token, per block: lane r of sum_k madd(maddubs(|w_k|, sign(bcast(x[4k..4k+3]), w_k)), 1) is
// s_b of row r exactly (int32; the grouping of an integer sum does not change it), then
// acc = fma(float(s_b), f32(d_w) * d_x, acc) per lane: the defined operations, so the bits of the
// scalar path. From 2 tokens on (measured, 2048 x 2048, one thread: n = 2 and 3 at 1.0-1.1x
// the one-token kernel on row tiles, 1.3-2x on plain rows).
constexpr int64_t kQ8BatchMinTokens = 2;
constexpr int kQ8BatchTokens = 4;  // tokens sharing each panel load
// Panel bytes per block: 8 scales (f32), 8 registers of |w|, 8 registers of w. The panel holds
// kQ8BlockBlocks blocks (8.5 KiB: it stays in L1 while all tokens pass); the 8 f32 row sums of each
// token wait between column blocks in a buffer after it (stored and loaded unchanged).
constexpr int64_t kQ8PanelBlock = 32 + 8 * 32 + 8 * 32;
constexpr int64_t kQ8BlockBlocks = 16;

struct Q8Panel {
  uint8_t* p = nullptr;
  int64_t bytes = 0;
  ~Q8Panel() { std::free(p); }
  uint8_t* get(int64_t need) {
    if (need > bytes) {
      std::free(p);
      p = static_cast<uint8_t*>(std::aligned_alloc(64, size_t((need + 63) / 64 * 64)));
      if (!p) fail_out_of_memory(need);
      bytes = need;
    }
    return p;
  }
};
thread_local Q8Panel t_q8_panel;

// Rows [g0, g0 + nr) (nr <= 8) into the panel; lanes >= nr are zero (their results are dropped).
void q8_pack_group(const MatmulArgs& a, int64_t g0, int nr, int64_t b0, int64_t b1, uint8_t* panel) {
  constexpr int64_t kBlk = int64_t(sizeof(BlockQ8_0));
  const bool tiled = a.tile_rows != 0;
  const uint8_t* tile = tiled ? a.w + g0 / kTileRows * a.tile_stride : nullptr;
  const uint8_t* row0 = a.w + g0 * a.row_stride;
  for (int64_t b = b0; b < b1; ++b) {
    uint8_t* pb = panel + (b - b0) * kQ8PanelBlock;
    __m256i r[8];
    __m256 dw;
    if (tiled) {  // padded tiles: all 8 rows exist (zero rows past the matrix)
      const uint8_t* ch = tile + (b / kTileQ8Blocks) * kFastQ8ChunkBytes;
      const int bi = int(b % kTileQ8Blocks);
      dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ch + 2 * bi * kTileRows)));
      const uint8_t* q = ch + 64 + bi * kTileRows * kQ8BlockSize;
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * i));
    } else {
      alignas(16) uint16_t dh[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int i = 0; i < 8; ++i) {
        if (i < nr) {
          const uint8_t* blk = row0 + i * a.row_stride + b * kBlk;
          dh[i] = reinterpret_cast<const BlockQ8_0*>(blk)->d;
          r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
        } else {
          r[i] = _mm256_setzero_si256();
        }
      }
      dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    }
    _mm256_store_ps(reinterpret_cast<float*>(pb), dw);
    // 8 x 8 transpose of dwords: k[j] lane i = dword j of row i.
    const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    __m256i k[8];
    k[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    k[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    k[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    k[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    k[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    k[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    k[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    k[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
    __m256i* pa = reinterpret_cast<__m256i*>(pb + 32);
    __m256i* pw = reinterpret_cast<__m256i*>(pb + 32 + 8 * 32);
    for (int j = 0; j < 8; ++j) {
      _mm256_store_si256(pa + j, _mm256_abs_epi8(k[j]));
      _mm256_store_si256(pw + j, k[j]);
    }
  }
}

// Tokens [t0, t0 + T) against one packed group's blocks [b0, b1); the 8 row sums of token t go
// on from facc + 8 t (from 0 when `first`) and are stored back, or written to y when `last`.
template <int T>
void q8_panel_tokens(const MatmulArgs& a, const uint8_t* panel, int64_t t0, int64_t g0, int nr, int64_t b0,
                     int64_t b1, float* facc, bool first, bool last) {
  const int64_t nb = a.cols / kQ8BlockSize;
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xq[T];
  const float* xd[T];
  __m256 f[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.xq + (t0 + t) * a.cols;
    xd[t] = a.xd + (t0 + t) * nb;
    f[t] = first ? _mm256_setzero_ps() : _mm256_load_ps(facc + 8 * (t0 + t));
  }
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* pb = panel + (b - b0) * kQ8PanelBlock;
    const __m256i* pa = reinterpret_cast<const __m256i*>(pb + 32);
    const __m256i* pw = reinterpret_cast<const __m256i*>(pb + 32 + 8 * 32);
    __m256i s[T];
    for (int t = 0; t < T; ++t) s[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m256i aw = _mm256_load_si256(pa + k), sw = _mm256_load_si256(pw + k);
      for (int t = 0; t < T; ++t) {
        int32_t x4;
        __builtin_memcpy(&x4, xq[t] + b * kQ8BlockSize + 4 * k, 4);
        const __m256i sx = _mm256_sign_epi8(_mm256_set1_epi32(x4), sw);
        s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones));
        __asm__("" : "+x"(s[t]));  // keeps GCC from regrouping the 8 adds into a tree that spills
      }
    }
    const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(pb));
    for (int t = 0; t < T; ++t)
      f[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[t][b])), f[t]);
  }
  for (int t = 0; t < T; ++t) {
    if (!last) {
      _mm256_store_ps(facc + 8 * (t0 + t), f[t]);
      continue;
    }
    alignas(32) float out[8];
    _mm256_store_ps(out, f[t]);
    float* yt = a.y + (t0 + t) * a.ldy + g0;
    for (int r = 0; r < nr; ++r) yt[r] = a.accumulate ? yt[r] + out[r] : out[r];
  }
}

void q8_fast_rows_avx2(const MatmulArgs& a, int64_t r0, int64_t r1) {
  if (a.n < kQ8BatchMinTokens) return q8_fast_rows_impl<Avx2>(a, r0, r1);
  const int64_t nb = a.cols / kQ8BlockSize;
  uint8_t* panel = t_q8_panel.get(kQ8BlockBlocks * kQ8PanelBlock + 32 * a.n);
  float* facc = reinterpret_cast<float*>(panel + kQ8BlockBlocks * kQ8PanelBlock);
  for (int64_t g0 = r0; g0 < r1; g0 += kTileRows) {
    const int nr = int(r1 - g0 < kTileRows ? r1 - g0 : kTileRows);
    for (int64_t b0 = 0; b0 < nb; b0 += kQ8BlockBlocks) {
      const int64_t b1 = b0 + kQ8BlockBlocks < nb ? b0 + kQ8BlockBlocks : nb;
      const bool first = b0 == 0, last = b1 == nb;
      q8_pack_group(a, g0, nr, b0, b1, panel);
      int64_t t0 = 0;
      for (; t0 + kQ8BatchTokens <= a.n; t0 += kQ8BatchTokens)
        q8_panel_tokens<kQ8BatchTokens>(a, panel, t0, g0, nr, b0, b1, facc, first, last);
      switch (a.n - t0) {
        case 3: q8_panel_tokens<3>(a, panel, t0, g0, nr, b0, b1, facc, first, last); break;
        case 2: q8_panel_tokens<2>(a, panel, t0, g0, nr, b0, b1, facc, first, last); break;
        case 1: q8_panel_tokens<1>(a, panel, t0, g0, nr, b0, b1, facc, first, last); break;
        default: break;
      }
    }
  }
}

// ---- fast mode, batched bf16 (n >= kBf16BatchMinTokens): the lane sums of kernels.h per output,
// blocked as the exact gemm is (kernels_impl.h): per 8-row group and block of kBf16BlockCols
// columns, the group's weights (8 KiB of bf16) and one 4-token block of x (8 KiB) stay in L1 while
// 2-row x 4-token strips pass over them, so each widened weight vector serves 4 tokens and each x
// vector 2 rows. x comes widened to f32 (a.xf: the bf16-rounded values in column order). The 16
// lanes of an output are two independent halves (lanes 0..7: columns 32c + j and 32c + j + 16,
// lanes 8..15: 32c + 8 + j and 32c + 24 + j), so a strip runs one half at a time (8 accumulators,
// not 16), and the lane sums wait in a buffer between column blocks as f32 (stored and loaded
// unchanged). Per lane j the operations are the defined ones, in the defined order:
// fma(w[j+16], x[j+16], a_j) then fma(w[j], x[j], a_j) over the chunks, then a16_reduce's tree.
constexpr int64_t kBf16BatchMinTokens = 2;
constexpr int64_t kBf16BlockChunks = 16;  // 512 columns

struct F32Scratch {
  float* p = nullptr;
  int64_t n = 0;
  ~F32Scratch() { std::free(p); }
  float* get(int64_t need) {
    if (need > n) {
      std::free(p);
      p = static_cast<float*>(std::aligned_alloc(64, size_t((need * 4 + 63) / 64 * 64)));
      if (!p) fail_out_of_memory(need * 4);
      n = need;
    }
    return p;
  }
};
thread_local F32Scratch t_bf16_acc;

// Rows [row, row + R) (group rows rl, rl + 1), tokens [t0, t0 + T), chunks [c0, c1). Lane sums of
// (group row q, token t) at acc + (q * n + t) * 16 (from 0 when `first`).
template <int R, int T>
void bf16_strip(const MatmulArgs& a, int64_t row, int rl, int64_t t0, int64_t c0, int64_t c1, float* acc,
                bool first) {
  const bool tiled = a.tile_rows != 0;
  const uint8_t* tw[R];
  const uint16_t* pw[R];
  for (int i = 0; i < R; ++i) {
    tw[i] = tiled ? a.w + (row + i) / kTileRows * a.tile_stride + 64 * ((row + i) % kTileRows) : nullptr;
    pw[i] = tiled ? nullptr : reinterpret_cast<const uint16_t*>(a.w + (row + i) * a.row_stride);
  }
  const float* xf[T];
  for (int t = 0; t < T; ++t) xf[t] = a.xf + (t0 + t) * a.cols;
  for (int h = 0; h < 2; ++h) {
    __m256 s[R][T];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t)
        s[i][t] = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + ((rl + i) * a.n + t0 + t) * 16 + 8 * h);
    for (int64_t c = c0; c < c1; ++c) {
      __m256 wa[R], wb[R];  // columns 32c + 8h + 16 + j and 32c + 8h + j
      for (int i = 0; i < R; ++i) {
        if (tiled) {
          const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tw[i] + c * kFastBf16ChunkBytes + 32 * h));
          wa[i] = Avx2::pair_hi(u);
          wb[i] = Avx2::pair_lo(u);
        } else {
          wa[i] = Avx2::load_bf16(pw[i] + 32 * c + 8 * h + 16);
          wb[i] = Avx2::load_bf16(pw[i] + 32 * c + 8 * h);
        }
      }
      for (int t = 0; t < T; ++t) {
        __m256 xa = _mm256_loadu_ps(xf[t] + 32 * c + 8 * h + 16);
        __m256 xb = _mm256_loadu_ps(xf[t] + 32 * c + 8 * h);
        if constexpr (R > 1) __asm__("" : "+x"(xa), "+x"(xb));  // one load for both rows, not one per FMA
        for (int i = 0; i < R; ++i) s[i][t] = _mm256_fmadd_ps(wb[i], xb, _mm256_fmadd_ps(wa[i], xa, s[i][t]));
      }
    }
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) _mm256_store_ps(acc + ((rl + i) * a.n + t0 + t) * 16 + 8 * h, s[i][t]);
  }
}

template <int R>
void bf16_strip_tokens(const MatmulArgs& a, int64_t row, int rl, int64_t t0, int T, int64_t c0, int64_t c1,
                       float* acc, bool first) {
  switch (T) {
    case 4: bf16_strip<R, 4>(a, row, rl, t0, c0, c1, acc, first); break;
    case 3: bf16_strip<R, 3>(a, row, rl, t0, c0, c1, acc, first); break;
    case 2: bf16_strip<R, 2>(a, row, rl, t0, c0, c1, acc, first); break;
    default: bf16_strip<R, 1>(a, row, rl, t0, c0, c1, acc, first); break;
  }
}

void bf16_fast_rows_avx2(const MatmulArgs& a, int64_t r0, int64_t r1) {
  if (a.n < kBf16BatchMinTokens || a.xf == nullptr) return bf16_fast_rows_impl<Avx2>(a, r0, r1);
  const int64_t chunks = a.cols / 32;
  float* acc = t_bf16_acc.get(kTileRows * a.n * 16);
  for (int64_t g0 = r0; g0 < r1; g0 += kTileRows) {
    const int nr = int(r1 - g0 < kTileRows ? r1 - g0 : kTileRows);
    for (int64_t c0 = 0; c0 < chunks; c0 += kBf16BlockChunks) {
      const int64_t c1 = c0 + kBf16BlockChunks < chunks ? c0 + kBf16BlockChunks : chunks;
      for (int64_t t0 = 0; t0 < a.n; t0 += 4) {
        const int T = int(a.n - t0 < 4 ? a.n - t0 : 4);
        for (int i = 0; i < nr; i += 2) {
          if (i + 2 <= nr) bf16_strip_tokens<2>(a, g0 + i, i, t0, T, c0, c1, acc, c0 == 0);
          else bf16_strip_tokens<1>(a, g0 + i, i, t0, T, c0, c1, acc, c0 == 0);
        }
      }
    }
    for (int64_t t = 0; t < a.n; ++t)
      for (int i = 0; i < nr; ++i) {
        const float* l = acc + (i * a.n + t) * 16;
        const float s = Avx2::a16_reduce(Avx2::A16{_mm256_load_ps(l), _mm256_load_ps(l + 8)});
        float* y = a.y + t * a.ldy + g0 + i;
        *y = a.accumulate ? *y + s : s;
      }
  }
}

// quantize_activations_q8 (kernels.cpp) 8 values at a time: the same operations (max of |x|,
// 127 / amax and amax / 127 as scalars, x * (127 / amax) rounded to nearest even, clamped to
// [-127, 127]), so the same bits for finite x.
void quantize_q8_avx2(const float* x, int64_t cols, int8_t* q, float* d, int32_t* qsum) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < cols / kQ8BlockSize; ++b) {
    const float* xb = x + b * kQ8BlockSize;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                             _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    d[b] = amax / 127.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i iv[4];
    for (int i = 0; i < 4; ++i) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      iv[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQ8BlockSize), _mm256_permutevar8x32_epi32(p, order));
    const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    qsum[b] = _mm_cvtsi128_si32(s4);
  }
}

}  // namespace

const KernelTable& table_avx2() {
  static const KernelTable t = [] {
    KernelTable x = make_table<Avx2>("avx2", "avx2", "avx2");
    x.q8_fast_rows = &q8_fast_rows_avx2;
    x.bf16_fast_rows = &bf16_fast_rows_avx2;
    x.quantize_q8 = &quantize_q8_avx2;
    x.quant_fast_rows = quant_fast_rows_avx2();
    return x;
  }();
  return t;
}

}  // namespace loom::kernels::detail
