// Internal: kernel bodies written once over a small SIMD vector type S, instantiated by each ISA
// file (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp) inside its own anonymous
// namespace, so every instantiation has internal linkage and carries that file's ISA flags.
//
// S provides: V (vector of kW floats), zero, set1, load, store, add, mul, fma(a, b, c) = a*b + c,
// max, hsum, hmax, exp (elementwise), load_f16 / load_bf16 / load_q8 (kW weights -> floats) and
// f16 (one f16 -> float).
//
// Include only from an ISA file, inside `namespace loom::kernels::detail { namespace { ... } }`.

// ---------------------------------------------------------------- matmul
// Micro-kernel: R rows of W x T tokens of x over columns [k0, k1): R*T vector accumulators, each
// weight vector is loaded (and converted) once and used T times, each x vector R times.
// n == 1 (decode gemv) uses R = kGemvRows, T = 1: R independent row streams, R accumulators.

// Bytes of k consecutive weights (k a multiple of 32 for q8_0); dtype_row_bytes without a call
// into another header.
template <DType D>
constexpr int64_t row_bytes(int64_t k) {
  return D == DType::Q8_0 ? k / kQ8BlockSize * int64_t(sizeof(BlockQ8_0)) : D == DType::F32 ? 4 * k : 2 * k;
}

// Q8_0 block b of a row, the row at any address (a view of a mapped file, a row stride of odd
// byte length: core/dtype.h load_u16): byte arithmetic and a memcpy load of the scale, never a
// BlockQ8_0 member access (misaligned, undefined behaviour that UBSan reports).
inline const uint8_t* q8_block(const uint8_t* row, int64_t b) { return row + b * int64_t(sizeof(BlockQ8_0)); }
inline uint16_t q8_d(const uint8_t* blk) { return load_u16(blk + offsetof(BlockQ8_0, d), 0); }
inline const int8_t* q8_qs(const uint8_t* blk) { return reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_0, qs)); }

template <class S, DType D>
inline typename S::V load_w(const uint8_t* row, int64_t k) {
  if constexpr (D == DType::F32) return S::load(reinterpret_cast<const float*>(row) + k);
  if constexpr (D == DType::F16) return S::load_f16(reinterpret_cast<const uint16_t*>(row) + k);
  if constexpr (D == DType::BF16) return S::load_bf16(reinterpret_cast<const uint16_t*>(row) + k);
  return S::zero();
}

template <class S, DType D>
inline float load_w_scalar(const uint8_t* row, int64_t k) {
  // Rows may be views of a mapped file at any address (core/dtype.h load_u16).
  if constexpr (D == DType::F32) return load_f32(row, k);
  if constexpr (D == DType::F16) return S::f16(load_u16(row, k));
  if constexpr (D == DType::BF16) {
    const uint32_t u = uint32_t(load_u16(row, k)) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
  }
  return 0.0f;
}

// y[t0 + t, r0 + r] (+)= sum_{k in [k0, k1)} x[t0 + t, k] * W[r0 + r, k]; `init` overwrites.
template <class S, DType D, int R, int T>
void matmul_micro(const MatmulArgs& a, int64_t r0, int64_t t0, int64_t k0, int64_t k1, bool init) {
  using V = typename S::V;
  constexpr int W = S::kW;
  const uint8_t* wr[R];
  const float* xt[T];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) wr[r] = a.w + (r0 + r) * a.row_stride;
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) xt[t] = a.x + (t0 + t) * a.ldx;
  V acc[R][T];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = S::zero();
  float tail[R][T] = {};

  if constexpr (D == DType::Q8_0) {
    // k0, k1 are multiples of 32: whole blocks. Per block, sum q * x over its 32 weights, then
    // one FMA with the scale d: d*q is exact in f32 (11 + 8 significant bits), so this is the
    // reference's sum of x * (d*q) in another order. This is the T == 1 gemv (n > kGemmTokens
    // packs W to f32 first).
    for (int64_t b = k0 / kQ8BlockSize; b < k1 / kQ8BlockSize; ++b) {
      if constexpr (T == 1 && S::kGemvPrefetch > 0) {
        // One prefetch per 64-byte line is enough: blocks are 34 bytes.
        if ((b & 1) == 0) {
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r)
            __builtin_prefetch(wr[r] + b * int64_t(sizeof(BlockQ8_0)) + S::kGemvPrefetch, 0, 3);
        }
      }
      if constexpr (T > 1) {
        // Small batches (n <= kGemmTokens): dequantize each weight vector (w = d * q, one mul
        // amortised over T tokens) and FMA as for f32; the per-block sums below would need
        // 2*R*T live vectors.
        V dv[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) dv[r] = S::set1(S::f16(q8_d(q8_block(wr[r], b))));
#pragma GCC unroll 32
        for (int sub = 0; sub < kQ8BlockSize; sub += W) {
          V wv[R];
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r)
            wv[r] = S::mul(S::load_q8(q8_qs(q8_block(wr[r], b)) + sub), dv[r]);
          const int64_t k = b * kQ8BlockSize + sub;
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) {
            const V xv = S::load(xt[t] + k);
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) acc[r][t] = S::fma(wv[r], xv, acc[r][t]);
          }
        }
        continue;
      }
      V blk[R][T];
#pragma GCC unroll 32
      for (int sub = 0; sub < kQ8BlockSize; sub += W) {
        V wv[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) wv[r] = S::load_q8(q8_qs(q8_block(wr[r], b)) + sub);
        const int64_t k = b * kQ8BlockSize + sub;
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
          const V xv = S::load(xt[t] + k);
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) blk[r][t] = sub == 0 ? S::mul(wv[r], xv) : S::fma(wv[r], xv, blk[r][t]);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const V dv = S::set1(S::f16(q8_d(q8_block(wr[r], b))));
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) acc[r][t] = S::fma(blk[r][t], dv, acc[r][t]);
      }
    }
  } else {
    int64_t k = k0;
    for (; k + W <= k1; k += W) {
      if constexpr (T == 1 && S::kGemvPrefetch > 0) {
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) __builtin_prefetch(wr[r] + row_bytes<D>(k) + S::kGemvPrefetch, 0, 3);
      }
      V wv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) wv[r] = load_w<S, D>(wr[r], k);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const V xv = S::load(xt[t] + k);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[r][t] = S::fma(wv[r], xv, acc[r][t]);
      }
    }
    for (; k < k1; ++k)  // odd column counts: fewer than kW columns left
      for (int r = 0; r < R; ++r) {
        const float wk = load_w_scalar<S, D>(wr[r], k);
        for (int t = 0; t < T; ++t) tail[r][t] += wk * xt[t][k];
      }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    float* yt = a.y + (t0 + t) * a.ldy + r0;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float s = S::hsum(acc[r][t]) + tail[r][t];
      yt[r] = init ? s : yt[r] + s;
    }
  }
}

// q8_0 decode gemv (n == 1), R rows at a time over whole rows. Per block: s = sum q_i * x_i over
// its 32 weights (f32 FMAs), then acc += d * s (one FMA). d*q is exact in f32, so this is the
// reference's sum of x * (d*q) in another order. Two costs of the generic micro-kernel removed:
//  - the f16 scales: converting one per block and row (load, move to a vector register,
//    vcvtph2ps, broadcast) took as many vector uops as the block's products. Here the scales of
//    kQ8ScaleChunk blocks of the R rows are first copied (integer loads and stores) into a
//    scratch array and converted kW at a time; the block loop then broadcasts each one straight
//    from memory (a load, no vector ALU uop).
//  - the cold start of every tile: with 2048 columns a q8_0 row is 2176 bytes, so a prefetch a
//    fixed distance ahead inside the row leaves the first lines of each of the R rows to demand
//    misses. The prefetch stream of row r instead runs on into row r + R (the next tile) once it
//    passes the end of the row, so the R streams stay kGemvPrefetch bytes ahead across tiles.
inline constexpr int kQ8ScaleChunk = 16;  // blocks whose scales are converted at a time (64: slower from DRAM)

template <class S, int R>
void gemv_q8_tile(const MatmulArgs& a, int64_t r0, int64_t pf_rows_end, bool init) {
  using V = typename S::V;
  constexpr int W = S::kW;
  constexpr int64_t kBlk = int64_t(sizeof(BlockQ8_0));
  const int64_t nb = a.cols / kQ8BlockSize, row_len = nb * kBlk;
  const uint8_t* wb[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) wb[r] = a.w + (r0 + r) * a.row_stride;
  // Prefetch cursor: offset `pf` in this tile's rows; past row_len it continues in the next tile
  // (rows r0 + R ..), unless that tile lies beyond pf_rows_end.
  // The scale copy of a chunk touches every line of the chunk first, so the prefetch runs a
  // chunk plus kGemvPrefetch bytes ahead.
  // (Measured at 2048 columns, 1 thread from DRAM: 544 -> 1056 bytes ahead 10.2 -> 10.5 GB/s;
  // 2176 and 4352 no better; prefetcht1/t2 instead of t0 no different.)
  constexpr int64_t pf_dist = kQ8ScaleChunk * kBlk + S::kGemvPrefetch;
  const bool pf_next = r0 + 2 * R <= pf_rows_end;
  V acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = S::zero();
  alignas(64) uint16_t dh[R][kQ8ScaleChunk + 16];
  alignas(64) float df[R][kQ8ScaleChunk + 16];
  for (int64_t c0 = 0; c0 < nb; c0 += kQ8ScaleChunk) {
    const int nc = int(nb - c0 < kQ8ScaleChunk ? nb - c0 : kQ8ScaleChunk);
    const int ncv = (nc + W - 1) / W * W;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < nc; ++j) {
        // Scalar loads and stores on purpose: the empty asm keeps g++ from vectorising this
        // gather into vpinsrw chains (shuffle-port uops, the very cost this copy avoids).
        uint32_t h = q8_d(q8_block(wb[r], c0 + j));
        __asm__("" : "+r"(h));
        dh[r][j] = uint16_t(h);
      }
      for (int j = nc; j < ncv; ++j) dh[r][j] = 0;
      for (int j = 0; j < ncv; j += W) S::store(df[r] + j, S::load_f16(dh[r] + j));
    }
    for (int j = 0; j < nc; ++j) {
      const int64_t b = c0 + j;
      if constexpr (S::kGemvPrefetch > 0) {
        const int64_t o = b * kBlk + pf_dist;
        if (o < row_len) {
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) __builtin_prefetch(wb[r] + o, 0, 3);
        } else if (pf_next) {
          const int64_t o2 = R * a.row_stride + (o - row_len);
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) __builtin_prefetch(wb[r] + o2, 0, 3);
        }
      }
      const float* xb = a.x + b * kQ8BlockSize;
      V blk[R];
#pragma GCC unroll 32
      for (int sub = 0; sub < kQ8BlockSize; sub += W) {
        const V xv = S::load(xb + sub);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const V wv = S::load_q8(q8_qs(q8_block(wb[r], b)) + sub);
          blk[r] = sub == 0 ? S::mul(wv, xv) : S::fma(wv, xv, blk[r]);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r] = S::fma(blk[r], S::set1(df[r][j]), acc[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const float s = S::hsum(acc[r]);
    a.y[r0 + r] = init ? s : a.y[r0 + r] + s;
  }
}

template <class S>
void gemv_q8(const MatmulArgs& a, int64_t r0, int64_t r1, bool init) {
  constexpr int R = S::kGemvRows;
  int64_t r = r0;
  for (; r + R <= r1; r += R) gemv_q8_tile<S, R>(a, r, a.rows, init);
  for (; r < r1; ++r) gemv_q8_tile<S, 1>(a, r, r1, init);
}

// ---------------------------------------------------------------- row tiles (decode layout)
// core/weight_tiles.h: a tile's kTileRows rows are one linear run of chunks (f32/f16/bf16: 64
// bytes per row; q8_0: 4 blocks, their 4 x 8 scales then their 4 x 8 x 32 int8), so a gemv thread
// reads one stream instead of kTileRows interleaved rows. (constexpr copies of the layout's
// constants: this file calls nothing inline from other headers.)
inline constexpr int kTR = kTileRows;
template <DType D>
inline constexpr int64_t kChunkCols = tile_chunk_cols(D);
template <DType D>
inline constexpr int64_t kChunkBytes = tile_chunk_bytes(D);

// Decode gemv over rows [r0, r1) of a tiled W (r0 on a tile boundary). Per row it performs exactly
// the plain-row gemv's operations in the same order (matmul_micro<S, D, R, 1> for f32/f16/bf16,
// gemv_q8_tile for q8_0), so a tiled copy gives the same bits as the plain matrix.
template <class S, DType D>
void gemv_tiled(const MatmulArgs& a, int64_t r0, int64_t r1, bool init) {
  using V = typename S::V;
  constexpr int W = S::kW;
  constexpr int64_t kCC = kChunkCols<D>, kCB = kChunkBytes<D>;
  static_assert(kCC % W == 0 && 32 % W == 0);
  const int64_t chunks = a.cols / kCC;
  for (int64_t t0 = r0; t0 < r1; t0 += kTR) {
    const uint8_t* tile = a.w + t0 / kTR * a.tile_stride;
    V acc[kTR];
#pragma GCC unroll 8
    for (int r = 0; r < kTR; ++r) acc[r] = S::zero();
    for (int64_t c = 0; c < chunks; ++c) {
      const uint8_t* ch = tile + c * kCB;
      if constexpr (S::kTilePrefetch > 0) {
        // One linear stream: per line one prefetch a short distance ahead into L1 and one further
        // ahead into L2 (both run on into the next tile; a prefetch past the end of W is harmless).
        for (int64_t o = 0; o < kCB; o += 64) {
          __builtin_prefetch(ch + S::kTilePrefetch + o, 0, 3);      // into L1, just ahead
          __builtin_prefetch(ch + S::kTilePrefetchL2 + o, 0, 2);    // into L2, further ahead
        }
      }
      const float* xc = a.x + c * kCC;
      if constexpr (D == DType::Q8_0) {
        alignas(64) float df[kTileQ8Blocks * kTR];
        const uint16_t* sh = reinterpret_cast<const uint16_t*>(ch);
        for (int j = 0; j < kTileQ8Blocks * kTR; j += W) S::store(df + j, S::load_f16(sh + j));
        // Keep df in memory: each scale is then broadcast by a load. (Left to itself g++ keeps
        // the converted scales in registers and broadcasts with vpermps, a shuffle-port uop per
        // block and row, on the port vpmovsxbd already saturates: 22 -> 25 GB/s in L2.)
        __asm__ volatile("" : : "r"(df) : "memory");
        const int8_t* qs = reinterpret_cast<const int8_t*>(ch + 64);
#pragma GCC unroll 4
        for (int b = 0; b < kTileQ8Blocks; ++b) {
          V blk[kTR];
#pragma GCC unroll 32
          for (int sub = 0; sub < kQ8BlockSize; sub += W) {
            const V xv = S::load(xc + b * kQ8BlockSize + sub);
#pragma GCC unroll 8
            for (int r = 0; r < kTR; ++r) {
              const V wv = S::load_q8(qs + (b * kTR + r) * kQ8BlockSize + sub);
              blk[r] = sub == 0 ? S::mul(wv, xv) : S::fma(wv, xv, blk[r]);
            }
          }
#pragma GCC unroll 8
          for (int r = 0; r < kTR; ++r) acc[r] = S::fma(blk[r], S::set1(df[b * kTR + r]), acc[r]);
        }
      } else if constexpr (D == DType::BF16) {
        // 16 words of pairs (w[j], w[j + 16]) per row: the low halves are columns 0..15, the high
        // halves 16..31, taken in that order, as the plain gemv takes them.
        constexpr int kV = 16 / W;
#pragma GCC unroll 8
        for (int r = 0; r < kTR; ++r) {
          V lo[kV], hi[kV];
#pragma GCC unroll 16
          for (int i = 0; i < kV; ++i)
            S::load_bf16_pairs(reinterpret_cast<const uint16_t*>(ch + 64 * r) + 2 * W * i, lo[i], hi[i]);
#pragma GCC unroll 16
          for (int i = 0; i < kV; ++i) acc[r] = S::fma(lo[i], S::load(xc + W * i), acc[r]);
#pragma GCC unroll 16
          for (int i = 0; i < kV; ++i) acc[r] = S::fma(hi[i], S::load(xc + 16 + W * i), acc[r]);
        }
      } else {
#pragma GCC unroll 32
        for (int64_t j = 0; j < kCC; j += W) {
          const V xv = S::load(xc + j);
#pragma GCC unroll 8
          for (int r = 0; r < kTR; ++r) acc[r] = S::fma(load_w<S, D>(ch + 64 * r, j), xv, acc[r]);
        }
      }
    }
    const int nr = int(r1 - t0 < kTR ? r1 - t0 : kTR);
    for (int r = 0; r < nr; ++r) {
      const float s = S::hsum(acc[r]);
      a.y[t0 + r] = init ? s : a.y[t0 + r] + s;
    }
  }
}

// Row r of a tiled W, columns [k0, k1) (multiples of the chunk, or k1 == cols), converted to f32:
// the same values unpack_row gives for the plain row.
template <class S, DType D>
void unpack_tiled_row(const MatmulArgs& a, int64_t r, int64_t k0, int64_t k1, float* dst) {
  constexpr int W = S::kW;
  constexpr int64_t kCC = kChunkCols<D>, kCB = kChunkBytes<D>;
  const uint8_t* tile = a.w + r / kTR * a.tile_stride;
  const int l = int(r % kTR);
  for (int64_t c = k0 / kCC; c < k1 / kCC; ++c) {
    const uint8_t* ch = tile + c * kCB;
    float* out = dst + (c * kCC - k0);
    if constexpr (D == DType::Q8_0) {
      for (int b = 0; b < kTileQ8Blocks; ++b) {
        const typename S::V dv = S::set1(S::f16(reinterpret_cast<const uint16_t*>(ch)[b * kTR + l]));
        const int8_t* q = reinterpret_cast<const int8_t*>(ch + 64) + (b * kTR + l) * kQ8BlockSize;
        for (int sub = 0; sub < kQ8BlockSize; sub += W) S::store(out + b * kQ8BlockSize + sub, S::mul(S::load_q8(q + sub), dv));
      }
    } else if constexpr (D == DType::BF16) {
      for (int i = 0; i < 16 / W; ++i) {
        typename S::V lo, hi;
        S::load_bf16_pairs(reinterpret_cast<const uint16_t*>(ch + 64 * l) + 2 * W * i, lo, hi);
        S::store(out + W * i, lo);
        S::store(out + 16 + W * i, hi);
      }
    } else {
      for (int64_t j = 0; j < kCC; j += W) S::store(out + j, load_w<S, D>(ch + 64 * l, j));
    }
  }
}

// Rows [r0, r1) x tokens [t0, t0 + T) over [k0, k1): R-row tiles, then single rows.
template <class S, DType D, int R, int T>
void matmul_strip(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t k0, int64_t k1, bool init) {
  int64_t r = r0;
  for (; r + R <= r1; r += R) matmul_micro<S, D, R, T>(a, r, t0, k0, k1, init);
  for (; r < r1; ++r) matmul_micro<S, D, 1, T>(a, r, t0, k0, k1, init);
}

// The last n_left < kGemmTokens tokens: one strip of exactly n_left tokens.
template <class S, DType D, int R, int T>
void matmul_tail_tokens(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t n_left, int64_t k0,
                        int64_t k1, bool init) {
  if (n_left == T) {
    matmul_strip<S, D, R, T>(a, r0, r1, t0, k0, k1, init);
  } else if constexpr (T > 1) {
    matmul_tail_tokens<S, D, R, T - 1>(a, r0, r1, t0, n_left, k0, k1, init);
  }
}

// Converts W[row][k0, k1) to f32 (k0, k1 multiples of 32 for q8_0).
template <class S, DType D>
void unpack_row(const uint8_t* row, int64_t k0, int64_t k1, float* dst) {
  constexpr int W = S::kW;
  if constexpr (D == DType::Q8_0) {
    for (int64_t b = k0 / kQ8BlockSize; b < k1 / kQ8BlockSize; ++b) {
      const uint8_t* blk = q8_block(row, b);
      const typename S::V dv = S::set1(S::f16(q8_d(blk)));
      for (int sub = 0; sub < kQ8BlockSize; sub += W)
        S::store(dst + (b * kQ8BlockSize - k0) + sub, S::mul(S::load_q8(q8_qs(blk) + sub), dv));
    }
  } else {
    int64_t k = k0;
    for (; k + W <= k1; k += W) S::store(dst + (k - k0), load_w<S, D>(row, k));
    for (; k < k1; ++k) dst[k - k0] = load_w_scalar<S, D>(row, k);
  }
}

template <class S, DType D>
void matmul_rows_t(const MatmulArgs& a, int64_t r0, int64_t r1) {
  constexpr int kTok = S::kGemmTokens, kRows = S::kGemmRows;
  const int64_t n = a.n, cols = a.cols;
  if (cols == 0) {
    if (!a.accumulate)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = r0; r < r1; ++r) a.y[t * a.ldy + r] = 0.0f;
    return;
  }
  const bool tiled = a.tile_rows != 0;
  if (n == 1) {  // decode gemv: stream each row once, whole rows, in place
    if (tiled) gemv_tiled<S, D>(a, r0, r1, !a.accumulate);
    else if constexpr (D == DType::Q8_0) gemv_q8<S>(a, r0, r1, !a.accumulate);
    else matmul_strip<S, D, S::kGemvRows, 1>(a, r0, r1, 0, 0, cols, !a.accumulate);
    return;
  }
  // Tiled weights take the packed gemm for every n > 1 (it unpacks whole tiles).
  if (n <= S::kPackMinTokens && !tiled) {
    // Small batches: in place, one kRows-row W tile at a time (it stays in L2) under all token
    // blocks, so W comes from memory once and each weight is converted once per token block.
    for (int64_t rr = r0; rr < r1; rr += kRows) {
      const int64_t re = rr + kRows < r1 ? rr + kRows : r1;
      int64_t t = 0;
      for (; t + kTok <= n; t += kTok) matmul_strip<S, D, kRows, kTok>(a, rr, re, t, 0, cols, !a.accumulate);
      if (t < n) matmul_tail_tokens<S, D, kRows, kTok - 1>(a, rr, re, t, n - t, 0, cols, !a.accumulate);
    }
    return;
  }
  // Prefill gemm. Columns in chunks of kc; per chunk the x panel [n, kc] and each W block
  // [kRowBlock, kc] are packed into f32 rows kc + 16 floats apart. Packing (a) converts each
  // weight once per call instead of once per token block, and (b) breaks the power-of-two row
  // strides (d_model = 4096 floats = 16 KiB) that map every row of a tile onto the same L1 set.
  // The W block (33 KiB) and one x token block (8.4 KiB) then stay in L1 while the token blocks
  // pass over the W block; the x panel stays in L2.
  constexpr int64_t kc_max = S::kGemmKc, kRowBlock = 8;
  const int64_t kc = kc_max < cols ? kc_max : cols;
  const int64_t ld = (kc + 15) / 16 * 16 + 16;  // packed row stride, floats
  // 64-byte aligned rows: a 512-bit load that straddles two cache lines costs two L1 accesses
  // (measured: 25% of the micro-kernel's throughput).
  void* xbuf = __builtin_malloc(size_t(n * ld) * sizeof(float) + 64);
  void* wbuf = __builtin_malloc(size_t(kRowBlock * ld) * sizeof(float) + 64);
  if (!xbuf || !wbuf) fail_out_of_memory(n * ld * int64_t(sizeof(float)));
  float* xp = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(xbuf) + 63) & ~uintptr_t(63));
  float* wp = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(wbuf) + 63) & ~uintptr_t(63));
  for (int64_t k0 = 0; k0 < cols; k0 += kc) {
    const int64_t k1 = k0 + kc < cols ? k0 + kc : cols, kw = k1 - k0;
    const bool init = k0 == 0 && !a.accumulate;
    for (int64_t t = 0; t < n; ++t) unpack_row<S, DType::F32>(reinterpret_cast<const uint8_t*>(a.x + t * a.ldx), k0, k1, xp + t * ld);
    for (int64_t rr = r0; rr < r1; rr += kRowBlock) {
      const int64_t re = rr + kRowBlock < r1 ? rr + kRowBlock : r1;
      if (tiled) {
        for (int64_t r = rr; r < re; ++r) unpack_tiled_row<S, D>(a, r, k0, k1, wp + (r - rr) * ld);
        // The next tile's bytes of these columns are one run.
        if (re < r1) {
          const uint8_t* nt = a.w + re / kTR * a.tile_stride;
          for (int64_t off = k0 / kChunkCols<D> * kChunkBytes<D>; off < (k1 + kChunkCols<D> - 1) / kChunkCols<D> * kChunkBytes<D>; off += 64)
            __builtin_prefetch(nt + off, 0, 2);
        }
      } else {
        for (int64_t r = rr; r < re; ++r) unpack_row<S, D>(a.w + r * a.row_stride, k0, k1, wp + (r - rr) * ld);
        // Ask for the next W block (into L2) now, so packing it does not wait on DRAM.
        const int64_t kbytes = row_bytes<D>(kw), k0bytes = row_bytes<D>(k0);
        for (int64_t r = re; r < (re + kRowBlock < r1 ? re + kRowBlock : r1); ++r)
          for (int64_t off = 0; off < kbytes; off += 64) __builtin_prefetch(a.w + r * a.row_stride + k0bytes + off, 0, 2);
      }
      MatmulArgs p = a;  // the packed block as an f32 matrix; y columns from rr
      p.x = xp;
      p.ldx = ld;
      p.w = reinterpret_cast<const uint8_t*>(wp);
      p.dtype = DType::F32;
      p.row_stride = ld * int64_t(sizeof(float));
      p.tile_rows = 0;
      p.y = a.y + rr;
      int64_t t = 0;
      for (; t + kTok <= n; t += kTok) matmul_strip<S, DType::F32, kRows, kTok>(p, 0, re - rr, t, 0, kw, init);
      if (t < n) matmul_tail_tokens<S, DType::F32, kRows, kTok - 1>(p, 0, re - rr, t, n - t, 0, kw, init);
    }
  }
  __builtin_free(xbuf);
  __builtin_free(wbuf);
}

// The other block types (Q4_0 .. Q6_K): kernels_quant_impl.h.
template <class S>
void quant_exact_rows(const MatmulArgs& a, int64_t r0, int64_t r1);

template <class S>
void matmul_rows_impl(const MatmulArgs& a, int64_t r0, int64_t r1) {
  switch (a.dtype) {
    case DType::F32: matmul_rows_t<S, DType::F32>(a, r0, r1); return;
    case DType::F16: matmul_rows_t<S, DType::F16>(a, r0, r1); return;
    case DType::BF16: matmul_rows_t<S, DType::BF16>(a, r0, r1); return;
    case DType::Q8_0: matmul_rows_t<S, DType::Q8_0>(a, r0, r1); return;
    default: quant_exact_rows<S>(a, r0, r1); return;
  }
}

// ---------------------------------------------------------------- elementwise
template <class S>
inline __attribute__((always_inline)) float dot_impl(const float* a, const float* b, int64_t n) {
  using V = typename S::V;
  constexpr int W = S::kW;
  V s0 = S::zero(), s1 = S::zero();
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    s0 = S::fma(S::load(a + i), S::load(b + i), s0);
    s1 = S::fma(S::load(a + i + W), S::load(b + i + W), s1);
  }
  for (; i + W <= n; i += W) s0 = S::fma(S::load(a + i), S::load(b + i), s0);
  float s = S::hsum(S::add(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <class S>
void rmsnorm_impl(float* out, const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps) {
  using V = typename S::V;
  constexpr int W = S::kW;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * dim;
    float* ot = out + t * dim;
    const float inv = 1.0f / __builtin_sqrtf(dot_impl<S>(xt, xt, dim) / float(dim) + eps);
    const V iv = S::set1(inv);
    int64_t i = 0;
    for (; i + W <= dim; i += W) S::store(ot + i, S::mul(S::mul(S::load(xt + i), iv), S::load(weight + i)));
    for (; i < dim; ++i) ot[i] = xt[i] * inv * weight[i];
  }
}

template <class S>
void swiglu_impl(float* out, const float* gate, const float* up, int64_t n) {
  using V = typename S::V;
  constexpr int W = S::kW;
  const V one = S::set1(1.0f), neg = S::set1(-1.0f);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const V g = S::load(gate + i);
    const V silu = S::div(g, S::add(one, S::exp(S::mul(g, neg))));
    S::store(out + i, S::mul(silu, S::load(up + i)));
  }
  if (i < n) {
    // The tail through the same vector arithmetic (S::exp is not expf): an element's bits must not
    // depend on where it falls in the call, or rows computed in batches of other sizes (pipeline
    // micro-batches, DP replicas) would differ from the single rank's (AVX-512's 16 lanes left a
    // tail of 8 on stories260K's 2 x 172 FFN rows, and the second row's last 8 values differed).
    alignas(64) float g[W] = {}, u[W] = {}, o[W];
    const int64_t left = n - i;
    for (int64_t k = 0; k < left; ++k) g[k] = gate[i + k], u[k] = up[i + k];
    const V gv = S::load(g);
    S::store(o, S::mul(S::div(gv, S::add(one, S::exp(S::mul(gv, neg)))), S::load(u)));
    for (int64_t k = 0; k < left; ++k) out[i + k] = o[k];
  }
}

// ---------------------------------------------------------------- attention
// acc[0, head_dim) += sum_jj p[jj] * v[jj][0, head_dim), keys in order. The accumulator is
// held in registers, kBlock vectors at a time, across all nj keys (through memory, every key's
// FMA would wait on the previous key's store).
template <class S>
inline void accumulate_v(float* acc, const float* p, const float* const* v, int nj, int head_dim) {
  using V = typename S::V;
  constexpr int W = S::kW, kBlock = 4;
  int d = 0;
  for (; d + kBlock * W <= head_dim; d += kBlock * W) {
    V a[kBlock];
#pragma GCC unroll 4
    for (int i = 0; i < kBlock; ++i) a[i] = S::load(acc + d + i * W);
    for (int jj = 0; jj < nj; ++jj) {
      const V pv = S::set1(p[jj]);
#pragma GCC unroll 4
      for (int i = 0; i < kBlock; ++i) a[i] = S::fma(pv, S::load(v[jj] + d + i * W), a[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < kBlock; ++i) S::store(acc + d + i * W, a[i]);
  }
  for (; d + W <= head_dim; d += W) {
    V a = S::load(acc + d);
    for (int jj = 0; jj < nj; ++jj) a = S::fma(S::set1(p[jj]), S::load(v[jj] + d), a);
    S::store(acc + d, a);
  }
  for (; d < head_dim; ++d) {
    float a = acc[d];
    for (int jj = 0; jj < nj; ++jj) a += p[jj] * v[jj][d];
    acc[d] = a;
  }
}

// Online softmax (FlashAttention's running max / sum), keys in chunks of kKeyChunk: the chunk's
// scores are computed first (vectorised dots over head_dim), then one rescale of the running
// output per chunk, then exp of the whole chunk (vector exp) and the V accumulation.
// A work item is (query t, kv head, a run of a.heads_per_item query heads of that kv head): the
// heads of a GQA group walk the keys together, so each K and V row is read once per item
// instead of once per head. Every head sees the same operations in the same order whatever
// heads_per_item is, so the result does not depend on the grouping.
template <class S>
void attention_items_impl(const AttentionArgs& a, int64_t i0, int64_t i1) {
  using V = typename S::V;
  constexpr int W = S::kW;
  constexpr int kKeyChunk = 64;
  const int head_dim = a.head_dim, group = a.n_heads / a.n_kv_heads, hpi = a.heads_per_item;
  const int items_per_token = a.n_heads / hpi;
  const KvView& kv = a.kv;
  alignas(64) float acc[kMaxHeadsPerItem][kMaxHeadDim];
  alignas(64) float sc[kMaxHeadsPerItem][kKeyChunk + 16];
  float m[kMaxHeadsPerItem], l[kMaxHeadsPerItem];
  const float* kp[2][kKeyChunk];  // row pointers of this chunk and the next
  const float* vp[2][kKeyChunk];
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t t = item / items_per_token;
    const int h0 = int(item % items_per_token) * hpi, kvh = h0 / group;
    const int64_t end = int64_t(a.q_pos[t]) + 1 < a.kv_end ? int64_t(a.q_pos[t]) + 1 : a.kv_end;
    const int64_t begin = a.kv_begin;
    if (end <= begin) {
      for (int g = 0; g < hpi; ++g) {
        float* oh = a.out + t * a.ldo + int64_t(h0 + g) * head_dim;
        for (int d = 0; d < head_dim; ++d) oh[d] = 0.0f;
        if (a.lse) a.lse[t * a.n_heads + h0 + g] = -__builtin_inff();
      }
      continue;
    }
    for (int g = 0; g < hpi; ++g) {
      for (int d = 0; d < head_dim; ++d) acc[g][d] = 0.0f;
      m[g] = -__builtin_inff();
      l[g] = 0.0f;
    }
    // Position cursor over the (possibly paged) cache: block index and offset inside it.
    // (Software prefetch of the next chunk's rows was tried: no measurable gain.)
    int64_t blk = begin / kv.block_size, off = begin % kv.block_size;
    auto fill = [&](int64_t j0, const float** kq, const float** vq) {
      const int nj = int(end - j0 < kKeyChunk ? end - j0 : kKeyChunk);
      for (int jj = 0; jj < nj; ++jj) {
        const int64_t base = (kv.block_table ? int64_t(kv.block_table[blk]) : blk) * kv.block_stride +
                             kvh * kv.head_stride + off * kv.pos_stride;
        kq[jj] = kv.k + base;
        vq[jj] = kv.v + base;
        if (++off == kv.block_size) {
          off = 0;
          ++blk;
        }
      }
    };
    int cur = 0;
    fill(begin, kp[0], vp[0]);
    for (int64_t j0 = begin; j0 < end; j0 += kKeyChunk, cur ^= 1) {
      const int nj = int(end - j0 < kKeyChunk ? end - j0 : kKeyChunk);
      if (j0 + kKeyChunk < end) fill(j0 + kKeyChunk, kp[cur ^ 1], vp[cur ^ 1]);
      const float* const* kc = kp[cur];
      const float* const* vc = vp[cur];
      for (int g = 0; g < hpi; ++g) {
        const float* qh = a.q + t * a.ldq + int64_t(h0 + g) * head_dim;
        float* sg = sc[g];
        float cmax = -__builtin_inff();
        for (int jj = 0; jj < nj; ++jj) {
          sg[jj] = dot_impl<S>(qh, kc[jj], head_dim) * a.scale;
          cmax = sg[jj] > cmax ? sg[jj] : cmax;
        }
        const float m_new = cmax > m[g] ? cmax : m[g];
        if (m_new != m[g]) {
          const float corr = __builtin_expf(m[g] - m_new);  // m = -inf: 0
          l[g] *= corr;
          const V cv = S::set1(corr);
          int d = 0;
          for (; d + W <= head_dim; d += W) S::store(acc[g] + d, S::mul(S::load(acc[g] + d), cv));
          for (; d < head_dim; ++d) acc[g][d] *= corr;
          m[g] = m_new;
        }
        const V mv = S::set1(m[g]);
        for (int jj = nj; jj < (nj + W - 1) / W * W; ++jj) sg[jj] = m[g];  // padding lanes, unused
        for (int jj = 0; jj < nj; jj += W) S::store(sg + jj, S::exp(S::sub(S::load(sg + jj), mv)));
      }
      for (int g = 0; g < hpi; ++g) {
        for (int jj = 0; jj < nj; ++jj) l[g] += sc[g][jj];
        accumulate_v<S>(acc[g], sc[g], vc, nj, head_dim);
      }
    }
    for (int g = 0; g < hpi; ++g) {
      float* oh = a.out + t * a.ldo + int64_t(h0 + g) * head_dim;
      const float inv_l = 1.0f / l[g];
      for (int d = 0; d < head_dim; ++d) oh[d] = acc[g][d] * inv_l;
      if (a.lse) a.lse[t * a.n_heads + h0 + g] = m[g] + __builtin_logf(l[g]);
    }
  }
}

// ---------------------------------------------------------------- roofline
// 12 independent FMA chains (more than latency x ports on current x86 cores) kept in registers.
template <class S>
double fma_peak_impl(int64_t iters) {
  using V = typename S::V;
  constexpr int kChains = 12;
  V acc[kChains];
  const V a = S::set1(0.999999f), b = S::set1(1e-7f);
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = S::set1(float(c));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = S::fma(acc[c], a, b);
    __asm__ volatile("" : : : "memory");
  }
  V s = acc[0];
#pragma GCC unroll 12
  for (int c = 1; c < kChains; ++c) s = S::add(s, acc[c]);
  volatile float sink = S::hsum(s);
  (void)sink;
  return double(iters) * kChains * S::kW * 2.0;
}

template <class S>
void q8_fast_rows_impl(const MatmulArgs& a, int64_t r0, int64_t r1);
template <class S>
void bf16_fast_rows_impl(const MatmulArgs& a, int64_t r0, int64_t r1);
template <class S>
void quant_fast_rows_impl(const MatmulArgs& a, int64_t r0, int64_t r1);

// kFast: S has the fast-mode members (kernels_fast_impl.h); else the table's fast entries are
// null and the dispatch fills them (cpu_features.cpp).
template <class S, bool kFast = true>
const KernelTable& make_table(const char* name, const char* q8_fast_name, const char* bf16_fast_name) {
  using Rows = void (*)(const MatmulArgs&, int64_t, int64_t);
  Rows q8 = nullptr, bf16 = nullptr, quant = nullptr;
  if constexpr (kFast) {
    q8 = &q8_fast_rows_impl<S>;
    bf16 = &bf16_fast_rows_impl<S>;
    quant = &quant_fast_rows_impl<S>;
  }
  static const KernelTable t{name,
                             &matmul_rows_impl<S>,
                             &rmsnorm_impl<S>,
                             &swiglu_impl<S>,
                             &attention_items_impl<S>,
                             q8,
                             bf16,
                             q8_fast_name,
                             bf16_fast_name,
                             quant,
                             q8_fast_name,
                             &fma_peak_impl<S>};
  return t;
}
