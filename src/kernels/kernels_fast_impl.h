// Internal: the fast-mode matmul bodies (kernels.h "Numerics"), written once over an ISA struct S
// and instantiated by each ISA file inside its anonymous namespace (as kernels_impl.h).
//
// Every path performs, per output (token t, row r), the operations kernels.h states, in its
// order, so all paths, decode and prefill, plain rows and row tiles give the same bits:
//  q8_0: per block b: s = exact int32 dot of the int8 weights with the int8 activations;
//        p = f32(d_w) * d_x; acc = fma(float(s), p, acc). S gives s for 8 rows at once
//        (S::q8_dot8) and the 8-lane float ops (S::F8: lane = row).
//  bf16: 16 lane sums over 32-column chunks, lane j: fma(w[j+16], x[j+16], a_j) then
//        fma(w[j], x[j], a_j) (the order of vdpbf16ps), then the fixed tree of S::a16_reduce.
//
// S provides (besides kernels_impl.h's members):
//   F8, f8_zero(), f8_set1(float), f8_mul, f8_fma(a, b, c) = a*b + c, f8_from_f16(const uint16_t* 8),
//   f8_from_i32(I8), f8_lane(F8, int) (tests of lanes < nr only);
//   I8 q8_dot8(const int8_t* w, int64_t stride, const int8_t* x, int32_t xsum): lane r =
//     sum_{i<32} w[r*stride + i] * x[i] (exact);
//   A16, a16_zero(), a16_step_pairs(A16&, const uint32_t* w16, const uint32_t* x16) (16 words of
//     pairs each), a16_step_plain(A16&, const uint16_t* w32, const uint32_t* x16) (32 bf16 in
//     column order), float a16_reduce(const A16&).

// Bytes per row-tile chunk (core/weight_tiles.h), evaluated at compile time.
inline constexpr int64_t kFastQ8ChunkBytes = tile_chunk_bytes(DType::Q8_0);
inline constexpr int64_t kFastBf16ChunkBytes = tile_chunk_bytes(DType::BF16);

template <class S>
void q8_fast_rows_impl(const MatmulArgs& a, int64_t r0, int64_t r1) {
  using F8 = typename S::F8;
  constexpr int64_t kBlk = int64_t(sizeof(BlockQ8_0));
  const int64_t nb = a.cols / kQ8BlockSize;
  const bool tiled = a.tile_rows != 0;
  alignas(32) uint16_t dh[kTileRows];
  for (int64_t g0 = r0; g0 < r1; g0 += kTileRows) {
    const int nr = int(r1 - g0 < kTileRows ? r1 - g0 : kTileRows);
    for (int64_t t = 0; t < a.n; ++t) {
      const int8_t* xq = a.xq + t * a.cols;
      const float* xd = a.xd + t * nb;
      const int32_t* xs = a.xs + t * nb;
      F8 acc = S::f8_zero();
      if (tiled) {
        // Tile g0 / 8: chunks of 4 blocks: 4 x 8 f16 scales (64 bytes), then 4 x 8 x 32 int8.
        const uint8_t* tile = a.w + g0 / kTileRows * a.tile_stride;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* ch = tile + (b / kTileQ8Blocks) * kFastQ8ChunkBytes;
          const int bi = int(b % kTileQ8Blocks);
          const F8 dw = S::f8_from_f16(reinterpret_cast<const uint16_t*>(ch) + bi * kTileRows);
          const int8_t* wq = reinterpret_cast<const int8_t*>(ch + 64) + bi * kTileRows * kQ8BlockSize;
          const auto s = S::q8_dot8(wq, kQ8BlockSize, xq + b * kQ8BlockSize, xs[b]);
          acc = S::f8_fma(S::f8_from_i32(s), S::f8_mul(dw, S::f8_set1(xd[b])), acc);
        }
      } else {
        // Plain rows: rows past r1 in the group read row nr - 1 again (results dropped).
        const uint8_t* row0 = a.w + g0 * a.row_stride;
        const int64_t stride = nr == kTileRows ? a.row_stride : 0;
        for (int64_t b = 0; b < nb; ++b) {
          for (int r = 0; r < kTileRows; ++r) {
            const int rr = r < nr ? r : nr - 1;
            // Rows at any address: the scale by a memcpy load (core/dtype.h load_u16).
            dh[r] = load_u16(row0 + rr * a.row_stride + b * kBlk + int64_t(offsetof(BlockQ8_0, d)), 0);
          }
          const F8 dw = S::f8_from_f16(dh);
          F8 sf;
          if (stride != 0) {
            sf = S::f8_from_i32(S::q8_dot8(reinterpret_cast<const int8_t*>(row0 + b * kBlk + 2), stride,
                                           xq + b * kQ8BlockSize, xs[b]));
          } else {
            // A partial group: one row at a time through lane 0 of the same dot (stride 0 repeats it).
            alignas(32) float tmp[kTileRows];
            for (int r = 0; r < kTileRows; ++r) {
              const int rr = r < nr ? r : nr - 1;
              tmp[r] = S::f8_lane(S::f8_from_i32(S::q8_dot8(
                                      reinterpret_cast<const int8_t*>(row0 + rr * a.row_stride + b * kBlk + 2), 0,
                                      xq + b * kQ8BlockSize, xs[b])),
                                  0);
            }
            sf = S::f8_load(tmp);
          }
          acc = S::f8_fma(sf, S::f8_mul(dw, S::f8_set1(xd[b])), acc);
        }
      }
      alignas(32) float out[kTileRows];
      S::f8_store(out, acc);
      float* yt = a.y + t * a.ldy + g0;
      for (int r = 0; r < nr; ++r) yt[r] = a.accumulate ? yt[r] + out[r] : out[r];
    }
  }
}

template <class S>
void bf16_fast_rows_impl(const MatmulArgs& a, int64_t r0, int64_t r1) {
  using A16 = typename S::A16;
  const int64_t chunks = a.cols / 32;
  const bool tiled = a.tile_rows != 0;
  for (int64_t g0 = r0; g0 < r1; g0 += kTileRows) {
    const int nr = int(r1 - g0 < kTileRows ? r1 - g0 : kTileRows);
    for (int64_t t = 0; t < a.n; ++t) {
      const uint32_t* xb = a.xb + t * a.cols / 2;
      A16 acc[kTileRows];
      for (int r = 0; r < nr; ++r) acc[r] = S::a16_zero();
      if (tiled) {
        const uint8_t* tile = a.w + g0 / kTileRows * a.tile_stride;
        for (int64_t c = 0; c < chunks; ++c) {
          const uint8_t* ch = tile + c * kFastBf16ChunkBytes;
          for (int r = 0; r < nr; ++r)
            S::a16_step_pairs(acc[r], reinterpret_cast<const uint32_t*>(ch + 64 * r), xb + 16 * c);
        }
      } else {
        for (int r = 0; r < nr; ++r) {
          const uint16_t* row = reinterpret_cast<const uint16_t*>(a.w + (g0 + r) * a.row_stride);
          for (int64_t c = 0; c < chunks; ++c) S::a16_step_plain(acc[r], row + 32 * c, xb + 16 * c);
        }
      }
      float* yt = a.y + t * a.ldy + g0;
      for (int r = 0; r < nr; ++r) {
        const float s = S::a16_reduce(acc[r]);
        yt[r] = a.accumulate ? yt[r] + s : s;
      }
    }
  }
}
