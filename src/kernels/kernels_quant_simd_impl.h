// Internal: the SIMD fast-mode kernels of the block types Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K
// (256-bit vectors), included inside the anonymous namespace of kernels_quant_avx2.cpp (AVX2: the
// integer dot by vpmaddubsw + vpmaddwd) and kernels_quant_vnni.cpp (AVX-512 VNNI on 256-bit
// vectors: vpdpbusd, defining LOOM_QUANT_VNNI). Both compute every s_b exactly, so both give the
// bits of the generic path (kernels_quant_impl.h).
//
// They perform, per output, exactly the operations kernels_quant_impl.h defines (so the bits of
// the generic path): s_b exact in int32, then acc = fma(float(s_b), a_b * d_x, acc) and, for the
// types with a min, accm = fma(mn_b, xm_b, accm); y = acc + accm.
//
// Work is done on 8 rows at a time, lane = row, on a panel of decoded sub-blocks: per 32-weight
// sub-block b, 8 registers of the 8 rows' levels (register k: 4 bytes of each row, columns 4k ..
// 4k + 3, as u8), the rows' scales a_b and mins mn_b (f32), and Q6_K's integer sub-scales. The
// levels come straight out of the row tiles (core/dtype_blocks_impl.h: a 32-byte load of a tile
// holds 4 bytes of each of its 8 rows) with a mask and a shift per register; plain rows are first
// gathered into the tile layout, one block at a time. Then per token, per sub-block:
//   s = sum_k madd(maddubs(levels_k, broadcast(x[4k .. 4k + 3])), K_k)
// (u8 levels <= 63 times int8 x <= 127 in magnitude: pairs <= 16002, no int16 saturation; K_k = 1,
// or Q6_K's sub-scale of columns 4k .. 4k + 3), minus the levels' zero point times the activation
// sums (Q4_0: 8 qsum, Q5_0: 16 qsum, Q6_K: 32 (k_lo qsum_lo + k_hi qsum_hi)): exactly s_b. Each
// panel register serves 4 tokens per load.

#include "core/dtype_blocks_impl.h"

// One decoded sub-block of 8 rows.
struct alignas(32) PanelSub {
  uint8_t q[8][32];   // register k: row r's levels of columns 4k .. 4k + 3 at bytes 4r .. 4r + 3
  float a[8];         // a_b per row
  float mn[8];        // mn_b per row (types with a min)
  int32_t klo[8];     // Q6_K: (k_lo, k_lo) as two int16 per lane: columns 0 .. 15
  int32_t khi[8];     //       (k_hi, k_hi): columns 16 .. 31
  int32_t kpair[8];   //       (k_lo, k_hi): the zero-point correction
};
static_assert(sizeof(PanelSub) == 416);

constexpr int kPanelSubs = 16;  // sub-blocks decoded at a time (6.5 KiB: stays in L1 while the tokens pass)

struct Scratch {
  void* p = nullptr;
  int64_t bytes = 0;
  ~Scratch() { __builtin_free(p); }
  void* get(int64_t need) {
    if (need > bytes) {
      __builtin_free(p);
      p = __builtin_malloc(size_t(need) + 64);
      if (!p) fail_out_of_memory(need);
      bytes = need;
    }
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
  }
};
thread_local Scratch t_panel, t_acc, t_chunk;

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256 f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
// Byte plane p (8 bytes: one per row) widened to 8 int32 lanes, zero- or sign-extended.
inline __m256i plane_u8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
inline __m256i plane_i8(const uint8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }

// Q5_0's fifth bits: for each lane (row) the 4 bits (t >> 0..3) & 1 of its low byte, as 0x10 in
// bytes 0..3 of the lane.
inline __m256i spread4(__m256i t) {
  const __m256i dup = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4, 4, 8, 8,
                                       8, 8, 12, 12, 12, 12);
  const __m256i bits = _mm256_set1_epi32(0x08040201);
  const __m256i x = _mm256_and_si256(_mm256_shuffle_epi8(t, dup), bits);
  return _mm256_and_si256(_mm256_cmpeq_epi8(x, bits), _mm256_set1_epi8(0x10));
}

// Decodes sub-blocks [j_begin, j_end) (indices inside the block) of tile chunk `ch` (8 rows of
// one block, tile layout) into out[0 ..).
template <DType D>
void decode_chunk(const uint8_t* ch, int j_begin, int j_end, PanelSub* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if constexpr (D == DType::Q4_0 || D == DType::Q4_1 || D == DType::Q5_0) {
    PanelSub& p = out[0];
    const int qs = D == DType::Q4_0 ? 16 : D == DType::Q4_1 ? 32 : 48;
    _mm256_store_ps(p.a, f16x8(ch));
    if constexpr (D == DType::Q4_1) _mm256_store_ps(p.mn, f16x8(ch + 16));
    __m256i qh = _mm256_setzero_si256();
    if constexpr (D == DType::Q5_0) qh = load32(ch + 16);
    for (int k = 0; k < 4; ++k) {
      const __m256i v = load32(ch + qs + 32 * k);
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (D == DType::Q5_0) {
        lo = _mm256_or_si256(lo, spread4(_mm256_srli_epi32(qh, 4 * k)));
        hi = _mm256_or_si256(hi, spread4(_mm256_srli_epi32(qh, 16 + 4 * k)));
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.q[k]), lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.q[4 + k]), hi);
    }
  } else if constexpr (D == DType::Q4_K || D == DType::Q5_K) {
    const __m256 d = f16x8(ch), dmin = f16x8(ch + 16);
    const uint8_t* pl = ch + 32;  // 12 scale planes
    const int qs = D == DType::Q4_K ? kTileQ4KQs : kTileQ5KQs;
    for (int j = j_begin; j < j_end; ++j) {
      PanelSub& p = out[j - j_begin];
      __m256i sc, m;
      if (j < 4) {
        sc = _mm256_and_si256(plane_u8(pl + 8 * j), _mm256_set1_epi32(63));
        m = _mm256_and_si256(plane_u8(pl + 8 * (j + 4)), _mm256_set1_epi32(63));
      } else {
        const __m256i lo = plane_u8(pl + 8 * (j + 4));
        sc = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(15)),
                             _mm256_slli_epi32(_mm256_srli_epi32(plane_u8(pl + 8 * (j - 4)), 6), 4));
        m = _mm256_or_si256(_mm256_srli_epi32(lo, 4), _mm256_slli_epi32(_mm256_srli_epi32(plane_u8(pl + 8 * j), 6), 4));
      }
      _mm256_store_ps(p.a, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));  // exact
      // -(dmin * m): exact, the sign flipped exactly.
      _mm256_store_ps(p.mn, _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(m)), _mm256_set1_ps(-0.0f)));
      const int i = j / 2, sh = 4 * (j % 2);
      for (int k = 0; k < 8; ++k) {
        const __m256i v = load32(ch + qs + 32 * (8 * i + k));
        __m256i q = _mm256_and_si256(sh ? _mm256_srli_epi16(v, 4) : v, m4);
        if constexpr (D == DType::Q5_K) {
          const __m256i h = _mm256_and_si256(_mm256_srli_epi16(load32(ch + kTileQ5KQh + 32 * k), j), _mm256_set1_epi8(1));
          q = _mm256_or_si256(q, _mm256_slli_epi16(h, 4));
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.q[k]), q);
      }
    }
  } else {  // Q6_K
    const __m256 d = f16x8(ch);
    for (int j = j_begin; j < j_end; ++j) {
      PanelSub& p = out[j - j_begin];
      _mm256_store_ps(p.a, d);
      const __m256i klo = plane_i8(ch + kTileQ6KSc + 8 * (2 * j)), khi = plane_i8(ch + kTileQ6KSc + 8 * (2 * j + 1));
      const __m256i low16 = _mm256_set1_epi32(0xFFFF);
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.klo), _mm256_or_si256(_mm256_and_si256(klo, low16), _mm256_slli_epi32(klo, 16)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.khi), _mm256_or_si256(_mm256_and_si256(khi, low16), _mm256_slli_epi32(khi, 16)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.kpair), _mm256_or_si256(_mm256_and_si256(klo, low16), _mm256_slli_epi32(khi, 16)));
      const int n = j / 4, g = j % 4, h = g % 2;
      for (int k = 0; k < 8; ++k) {
        const __m256i v = load32(ch + kTileQ6KQl + 32 * (8 * (2 * n + h) + k));
        const __m256i lo = _mm256_and_si256(g < 2 ? v : _mm256_srli_epi16(v, 4), m4);
        const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(load32(ch + kTileQ6KQh + 32 * (8 * n + k)), 2 * g),
                                            _mm256_set1_epi8(3));
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.q[k]), _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4)));
      }
    }
  }
}

// Tokens [t0, t0 + T) against the panel's sub-blocks [0, nsub) (the view's sub-blocks b0 ..); the 16
// lanes of acc / accm of token t wait at acc + 16 t.
template <DType D, int T, bool kVnni>
void panel_tokens(const MatmulArgs& a, const PanelSub* panel, int nsub, int64_t b0, int64_t t0, float* accbuf) {
  constexpr bool kMin = D == DType::Q4_1 || D == DType::Q4_K || D == DType::Q5_K;
  constexpr int kZero = D == DType::Q4_0 ? 8 : D == DType::Q5_0 ? 16 : 0;
  const int64_t nb = a.cols / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xq[T];
  __m256 acc[T], accm[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.xq + (t0 + t) * a.cols + b0 * 32;
    acc[t] = _mm256_load_ps(accbuf + 16 * (t0 + t));
    accm[t] = _mm256_load_ps(accbuf + 16 * (t0 + t) + 8);
  }
  for (int b = 0; b < nsub; ++b) {
    const PanelSub& p = panel[b];
    __m256i s[T];
    for (int t = 0; t < T; ++t) s[t] = _mm256_setzero_si256();
    __m256i klo = ones, khi = ones;
    if constexpr (D == DType::Q6_K) {
      klo = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.klo));
      khi = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.khi));
    }
    if constexpr (kVnni) {
#if defined(LOOM_QUANT_VNNI)
      // vpdpbusd: 4 u8 x s8 products per lane added to the int32 lane exactly. Q6_K's sub-scales
      // multiply the two 16-column halves' sums afterwards (exact int32).
      __m256i sh[T];
      for (int t = 0; t < T; ++t) sh[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.q[k]));
        for (int t = 0; t < T; ++t) {
          int32_t x4;
          __builtin_memcpy(&x4, xq[t] + 32 * b + 4 * k, 4);
          if (D == DType::Q6_K && k >= 4) sh[t] = _mm256_dpbusd_epi32(sh[t], w, _mm256_set1_epi32(x4));
          else s[t] = _mm256_dpbusd_epi32(s[t], w, _mm256_set1_epi32(x4));
        }
      }
      if constexpr (D == DType::Q6_K) {
        const __m256i kl = _mm256_srai_epi32(klo, 16), kh = _mm256_srai_epi32(khi, 16);
        for (int t = 0; t < T; ++t) s[t] = _mm256_add_epi32(_mm256_mullo_epi32(s[t], kl), _mm256_mullo_epi32(sh[t], kh));
      }
#endif
    } else {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.q[k]));
        for (int t = 0; t < T; ++t) {
          int32_t x4;
          __builtin_memcpy(&x4, xq[t] + 32 * b + 4 * k, 4);
          const __m256i prod = _mm256_maddubs_epi16(w, _mm256_set1_epi32(x4));
          s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(prod, k < 4 ? klo : khi));
          __asm__("" : "+x"(s[t]));  // keeps GCC from regrouping the adds into a tree that spills
        }
      }
    }
    const __m256 av = _mm256_load_ps(p.a);
    for (int t = 0; t < T; ++t) {
      const int64_t bi = (t0 + t) * nb + b0 + b;
      if constexpr (kZero != 0) s[t] = _mm256_sub_epi32(s[t], _mm256_set1_epi32(kZero * a.xs[bi]));
      if constexpr (D == DType::Q6_K) {
        const int32_t lo = a.xs16[2 * bi], hi = a.xs16[2 * bi + 1];
        const __m256i pair = _mm256_set1_epi32(int32_t((uint32_t(lo) & 0xFFFFu) | (uint32_t(hi) << 16)));
        const __m256i corr = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.kpair)), pair);
        s[t] = _mm256_sub_epi32(s[t], _mm256_slli_epi32(corr, 5));
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(av, _mm256_set1_ps(a.xd[bi])), acc[t]);
      if constexpr (kMin) accm[t] = _mm256_fmadd_ps(_mm256_load_ps(p.mn), _mm256_set1_ps(a.xm[bi]), accm[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm256_store_ps(accbuf + 16 * (t0 + t), acc[t]);
    _mm256_store_ps(accbuf + 16 * (t0 + t) + 8, accm[t]);
  }
}

template <DType D, bool kVnni>
void quant_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  constexpr bool kMin = D == DType::Q4_1 || D == DType::Q4_K || D == DType::Q5_K;
  constexpr int kSubs = qb_subs(D), kBB = qb_block_bytes(D);
  constexpr int64_t kChunk = 8 * int64_t(kBB);
  const int64_t nb = a.cols / 32, j0 = a.col_offset / 32, n = a.n;
  const bool tiled = a.tile_rows != 0;
  PanelSub* panel = static_cast<PanelSub*>(t_panel.get(kPanelSubs * int64_t(sizeof(PanelSub))));
  float* accbuf = static_cast<float*>(t_acc.get(n * 16 * int64_t(sizeof(float))));
  uint8_t* gathered = tiled ? nullptr : static_cast<uint8_t*>(t_chunk.get(kChunk));
  for (int64_t g0 = r0; g0 < r1; g0 += 8) {
    const int nr = int(r1 - g0 < 8 ? r1 - g0 : 8);
    for (int64_t i = 0; i < n * 16; ++i) accbuf[i] = 0.0f;
    const uint8_t* tile = tiled ? a.w + g0 / 8 * a.tile_stride : nullptr;
    int64_t have = -1;  // the block in `gathered`
    for (int64_t b0 = 0; b0 < nb; b0 += kPanelSubs) {
      const int64_t b1 = b0 + kPanelSubs < nb ? b0 + kPanelSubs : nb;
      // Decode the view's sub-blocks [b0, b1): global sub-blocks j0 + b, block (j0 + b) / kSubs.
      for (int64_t b = b0; b < b1;) {
        const int64_t jj = j0 + b, blk = jj / kSubs;
        const int js = int(jj % kSubs);
        const int je = int(kSubs < js + (b1 - b) ? kSubs : js + (b1 - b));
        const uint8_t* ch;
        if (tiled) {
          ch = tile + blk * kChunk;
          if constexpr (kChunk >= 1024) {
            for (int64_t o = 0; o < kChunk; o += 64) __builtin_prefetch(ch + 2 * kChunk + o, 0, 3);
          } else {
            for (int64_t o = 0; o < kChunk; o += 64) __builtin_prefetch(ch + 8 * kChunk + o, 0, 3);
          }
        } else {
          if (blk != have) {
            for (int r = 0; r < 8; ++r) {
              const uint8_t* src = a.w + (g0 + (r < nr ? r : nr - 1)) * a.row_stride + blk * kBB;
              qb_tile_pieces(D, r, [&](int at_chunk, int at_block, int bytes) {
                __builtin_memcpy(gathered + at_chunk, src + at_block, size_t(bytes));
              });
            }
            have = blk;
          }
          ch = gathered;
        }
        decode_chunk<D>(ch, js, je, panel + (b - b0));
        b += je - js;
      }
      const int nsub = int(b1 - b0);
      int64_t t0 = 0;
      for (; t0 + 4 <= n; t0 += 4) panel_tokens<D, 4, kVnni>(a, panel, nsub, b0, t0, accbuf);
      switch (n - t0) {
        case 3: panel_tokens<D, 3, kVnni>(a, panel, nsub, b0, t0, accbuf); break;
        case 2: panel_tokens<D, 2, kVnni>(a, panel, nsub, b0, t0, accbuf); break;
        case 1: panel_tokens<D, 1, kVnni>(a, panel, nsub, b0, t0, accbuf); break;
        default: break;
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      const float* acc = accbuf + 16 * t;
      float* y = a.y + t * a.ldy + g0;
      for (int r = 0; r < nr; ++r) {
        const float v = kMin ? acc[r] + acc[8 + r] : acc[r];
        y[r] = a.accumulate ? y[r] + v : v;
      }
    }
  }
}

template <bool kVnni>
void quant_fast_rows_simd(const MatmulArgs& a, int64_t r0, int64_t r1) {
  switch (a.dtype) {
    case DType::Q4_0: return quant_rows<DType::Q4_0, kVnni>(a, r0, r1);
    case DType::Q4_1: return quant_rows<DType::Q4_1, kVnni>(a, r0, r1);
    case DType::Q5_0: return quant_rows<DType::Q5_0, kVnni>(a, r0, r1);
    case DType::Q4_K: return quant_rows<DType::Q4_K, kVnni>(a, r0, r1);
    case DType::Q5_K: return quant_rows<DType::Q5_K, kVnni>(a, r0, r1);
    case DType::Q6_K: return quant_rows<DType::Q6_K, kVnni>(a, r0, r1);
    default: return;
  }
}
