// Internal: the byte layout of GGML's block-quantized types (core/dtype.h states the formats),
// as small functions over raw bytes that the dequantization (core/dtype.cpp) and every kernel
// path (src/kernels/*) share.
//
// Include only inside an anonymous namespace (`namespace loom { namespace { ... } }` or the
// kernels' `namespace loom::kernels::detail { namespace { ... } }`): each includer gets its own
// copy compiled with its own instruction-set flags, so no function compiled for AVX-512 can be
// merged into code that runs without it (kernels/dispatch.h). Nothing here calls an inline
// function of another header; f16 scales are converted by the caller's `F16` functor.
//
// The unit every kernel works in is the 32-weight sub-block: a whole block of Q4_0 / Q4_1 /
// Q5_0 / Q8_0, one of the 8 sub-blocks of a Q4_K / Q5_K super-block, a pair of Q6_K's 16-weight
// sub-blocks. Sub-block j of a row is sub-block j % S of the row's block j / S (S = sub-blocks
// per block). For it:
//   qb_sub_quants  the 32 integer levels q (u8: Q4_0/Q4_1/Q4_K 0..15, Q5_0/Q5_K 0..31, Q6_K 0..63)
//   qb_sub_scales  a (f32), the scale the levels are multiplied by, and
//                  mn (f32), the constant every weight gets added (0 when the type has none),
//                  offset (int), the level that means zero (Q4_0 8, Q5_0 16, Q6_K 32, else 0),
//                  k_lo, k_hi (int), the integer sub-scales of the first and last 16 weights
//                  (Q6_K's int8 scales, else 1),
// so that weight i of the sub-block is exactly the dequantized value of ggml
//   w_i = (a * k) * (q_i - offset) + mn      (Q6_K: a = d, (d * k) * (q - 32) as ggml rounds it;
//                                             Q4_K/Q5_K: a = d * sc exact, mn = -(dmin * m) exact,
//                                             w = a * q + mn rounded once as ggml's d1*q - m1;
//                                             Q4_1: a = d, mn = m, w = q*d + m rounded once;
//                                             Q4_0/Q5_0: (q - offset) * d, exact)
// and qb_dequant_sub writes those 32 values.

// Byte offsets inside one block.
inline constexpr int kQ40Qs = 2;                                   // Q4_0: d, qs[16]
inline constexpr int kQ41M = 2, kQ41Qs = 4;                        // Q4_1: d, m, qs[16]
inline constexpr int kQ50Qh = 2, kQ50Qs = 6;                       // Q5_0: d, qh[4], qs[16]
inline constexpr int kQ4KDmin = 2, kQ4KScales = 4, kQ4KQs = 16;    // Q4_K: d, dmin, scales[12], qs[128]
inline constexpr int kQ5KQh = 16, kQ5KQs = 48;                     // Q5_K: d, dmin, scales[12], qh[32], qs[128]
inline constexpr int kQ6KQh = 128, kQ6KScales = 192, kQ6KD = 208;  // Q6_K: ql[128], qh[64], scales[16], d

// Bytes per block (dtype_block_bytes, for the includers that call no inline function of another
// header).
constexpr int qb_block_bytes(DType t) {
  switch (t) {
    case DType::Q4_0: return 18;
    case DType::Q4_1: return 20;
    case DType::Q5_0: return 22;
    case DType::Q8_0: return 34;
    case DType::Q4_K: return 144;
    case DType::Q5_K: return 176;
    case DType::Q6_K: return 210;
    default: return 0;
  }
}

// 32-weight sub-blocks per block.
constexpr int qb_subs(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K ? 8 : 1; }

inline uint16_t qb_u16(const uint8_t* p) {
  uint16_t v;
  __builtin_memcpy(&v, p, 2);
  return v;
}

// Scale and min j (0..7) of a Q4_K / Q5_K super-block: 6 bits each, packed in 12 bytes. Pairs
// 0..3 sit in the low 6 bits of bytes j (scale) and j + 4 (min); pairs 4..7 keep their low 4 bits
// in byte j + 4 (scale low nibble, min high nibble) and their top 2 bits in the top bits of bytes
// j - 4 (scale) and j (min).
inline void qb_k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The inverse (quantization): writes pair j into the 12 bytes (which start zeroed).
inline void qb_k_put_scale_min(uint8_t* s, int j, int sc, int m) {
  if (j < 4) {
    s[j] = uint8_t((s[j] & 0xC0) | (sc & 63));
    s[j + 4] = uint8_t((s[j + 4] & 0xC0) | (m & 63));
  } else {
    s[j + 4] = uint8_t((sc & 0xF) | ((m & 0xF) << 4));
    s[j - 4] = uint8_t((s[j - 4] & 63) | ((sc >> 4) << 6));
    s[j] = uint8_t((s[j] & 63) | ((m >> 4) << 6));
  }
}

// The 32 levels of sub-block j (0 .. qb_subs - 1) of block `b` of type t.
inline void qb_sub_quants(DType t, const uint8_t* b, int j, uint8_t* q) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1: {
      const uint8_t* qs = b + (t == DType::Q4_0 ? kQ40Qs : kQ41Qs);
      for (int i = 0; i < 16; ++i) {
        q[i] = qs[i] & 0xF;
        q[i + 16] = qs[i] >> 4;
      }
      return;
    }
    case DType::Q5_0: {
      uint32_t h;
      __builtin_memcpy(&h, b + kQ50Qh, 4);
      const uint8_t* qs = b + kQ50Qs;
      for (int i = 0; i < 16; ++i) {
        q[i] = uint8_t((qs[i] & 0xF) | (((h >> i) & 1) << 4));
        q[i + 16] = uint8_t((qs[i] >> 4) | (((h >> (i + 16)) & 1) << 4));
      }
      return;
    }
    case DType::Q4_K: {
      const uint8_t* qs = b + kQ4KQs + 32 * (j / 2);
      const int sh = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) q[l] = (qs[l] >> sh) & 0xF;
      return;
    }
    case DType::Q5_K: {
      const uint8_t* qs = b + kQ5KQs + 32 * (j / 2);
      const uint8_t* qh = b + kQ5KQh;
      const int sh = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(((qs[l] >> sh) & 0xF) | (((qh[l] >> j) & 1) << 4));
      return;
    }
    case DType::Q6_K: {
      // Elements 32j .. 32j + 31: half n = j / 4, quarter g = j % 4.
      const int n = j / 4, g = j % 4;
      const uint8_t* ql = b + 64 * n + 32 * (g % 2);
      const uint8_t* qh = b + kQ6KQh + 32 * n;
      const int lsh = 4 * (g / 2), hsh = 2 * g;
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(((ql[l] >> lsh) & 0xF) | (((qh[l] >> hsh) & 3) << 4));
      return;
    }
    default:
      return;
  }
}

struct QbScales {
  float a = 0.0f, mn = 0.0f;
  int offset = 0, k_lo = 1, k_hi = 1;
};

template <class F16>
inline QbScales qb_sub_scales(DType t, const uint8_t* b, int j, F16 f16) {
  QbScales s;
  switch (t) {
    case DType::Q4_0:
      s.a = f16(qb_u16(b));
      s.offset = 8;
      break;
    case DType::Q5_0:
      s.a = f16(qb_u16(b));
      s.offset = 16;
      break;
    case DType::Q4_1:
      s.a = f16(qb_u16(b));
      s.mn = f16(qb_u16(b + kQ41M));
      break;
    case DType::Q4_K:
    case DType::Q5_K: {
      int sc, m;
      qb_k_scale_min(b + kQ4KScales, j, &sc, &m);
      s.a = f16(qb_u16(b)) * float(sc);                // exact: 11 x 6 significant bits
      s.mn = -(f16(qb_u16(b + kQ4KDmin)) * float(m));  // exact likewise
      break;
    }
    case DType::Q6_K: {
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + kQ6KScales);
      s.a = f16(qb_u16(b + kQ6KD));
      s.offset = 32;
      s.k_lo = sc[2 * j];
      s.k_hi = sc[2 * j + 1];
      break;
    }
    default:
      break;
  }
  return s;
}

// The 32 dequantized weights of sub-block j, with ggml's f32 operations in ggml's order.
template <class F16>
inline void qb_dequant_sub(DType t, const uint8_t* b, int j, float* out, F16 f16) {
  uint8_t q[32];
  qb_sub_quants(t, b, j, q);
  const QbScales s = qb_sub_scales(t, b, j, f16);
  if (t == DType::Q6_K) {
    const float lo = s.a * float(s.k_lo), hi = s.a * float(s.k_hi);  // d * sc, exact
    for (int i = 0; i < 16; ++i) out[i] = lo * float(int(q[i]) - 32);
    for (int i = 16; i < 32; ++i) out[i] = hi * float(int(q[i]) - 32);
  } else if (s.offset != 0) {
    for (int i = 0; i < 32; ++i) out[i] = float(int(q[i]) - s.offset) * s.a;
  } else {
    // q * a is exact (at most 6 + 17 significant bits): one rounding, as ggml's (fused or not)
    // d1 * q - m1 and x * d + m.
    for (int i = 0; i < 32; ++i) out[i] = float(q[i]) * s.a + s.mn;
  }
}

// ---- the row-tile layout (core/weight_tiles.h) of the block types ----
// Chunk c of a tile holds block c of the tile's 8 rows (tile_chunk_cols = the block size, chunk
// bytes = 8 blocks' bytes), rearranged so that one 32-byte load holds 4 consecutive bytes of
// each of the 8 rows (lane r = row r): the kernels then take 8 rows' levels in one register with
// no transpose. Scales: the 8 rows' f16 fields side by side; the packed 6-bit / int8 sub-scales
// as byte planes (plane p = byte p of each row's scale bytes, 8 bytes). Per type (offsets in the
// chunk; lane r's piece of a 4-byte run at +4r, of a plane at +r, of an f16 at +2r):
//   Q4_0  d 0; qs bytes 4k..4k+3 (k < 4) at 16 + 32k                               144 bytes
//   Q4_1  d 0, m 16; qs at 32 + 32k                                                   160
//   Q5_0  d 0; qh (4 bytes) at 16; qs at 48 + 32k                                     176
//   Q4_K  d 0, dmin 16; scale planes p < 12 at 32 + 8p; qs bytes 32i + 4k (i < 4, k < 8)
//         at 128 + 32 (8i + k)                                                          1152
//   Q5_K  as Q4_K, qh bytes 4k (k < 8) at 128 + 32k, qs at 384 + 32 (8i + k)          1408
//   Q6_K  d 0; scale planes p < 16 at 16 + 8p; ql bytes 64n + 32h + 4k (n, h < 2) at
//         144 + 32 (8 (2n + h) + k); qh bytes 32n + 4k at 1168 + 32 (8n + k)          1680
// qb_tile_pieces calls f(offset in the chunk, offset in the block, bytes) for every piece of lane l.
inline constexpr int kTileQ4KQs = 128, kTileQ5KQh = 128, kTileQ5KQs = 384, kTileQ6KSc = 16, kTileQ6KQl = 144,
                     kTileQ6KQh = 1168;

template <class F>
inline void qb_tile_pieces(DType t, int l, F&& f) {
  switch (t) {
    case DType::Q4_0:
      f(2 * l, 0, 2);
      for (int k = 0; k < 4; ++k) f(16 + 32 * k + 4 * l, kQ40Qs + 4 * k, 4);
      return;
    case DType::Q4_1:
      f(2 * l, 0, 2);
      f(16 + 2 * l, kQ41M, 2);
      for (int k = 0; k < 4; ++k) f(32 + 32 * k + 4 * l, kQ41Qs + 4 * k, 4);
      return;
    case DType::Q5_0:
      f(2 * l, 0, 2);
      f(16 + 4 * l, kQ50Qh, 4);
      for (int k = 0; k < 4; ++k) f(48 + 32 * k + 4 * l, kQ50Qs + 4 * k, 4);
      return;
    case DType::Q4_K:
    case DType::Q5_K: {
      f(2 * l, 0, 2);
      f(16 + 2 * l, kQ4KDmin, 2);
      for (int p = 0; p < 12; ++p) f(32 + 8 * p + l, kQ4KScales + p, 1);
      const bool q5 = t == DType::Q5_K;
      if (q5)
        for (int k = 0; k < 8; ++k) f(kTileQ5KQh + 32 * k + 4 * l, kQ5KQh + 4 * k, 4);
      for (int i = 0; i < 4; ++i)
        for (int k = 0; k < 8; ++k)
          f((q5 ? kTileQ5KQs : kTileQ4KQs) + 32 * (8 * i + k) + 4 * l, (q5 ? kQ5KQs : kQ4KQs) + 32 * i + 4 * k, 4);
      return;
    }
    case DType::Q6_K:
      f(2 * l, kQ6KD, 2);
      for (int p = 0; p < 16; ++p) f(kTileQ6KSc + 8 * p + l, kQ6KScales + p, 1);
      for (int n = 0; n < 2; ++n)
        for (int h = 0; h < 2; ++h)
          for (int k = 0; k < 8; ++k) f(kTileQ6KQl + 32 * (8 * (2 * n + h) + k) + 4 * l, 64 * n + 32 * h + 4 * k, 4);
      for (int n = 0; n < 2; ++n)
        for (int k = 0; k < 8; ++k) f(kTileQ6KQh + 32 * (8 * n + k) + 4 * l, kQ6KQh + 32 * n + 4 * k, 4);
      return;
    default:
      return;
  }
}

// Block `c` of lane l of a tile (tile = the tile's first byte) back in the plain encoding.
inline void qb_block_from_tile(DType t, const uint8_t* tile, int64_t c, int l, uint8_t* out) {
  const uint8_t* ch = tile + c * 8 * int64_t(qb_block_bytes(t));
  qb_tile_pieces(t, l, [&](int at_chunk, int at_block, int n) { __builtin_memcpy(out + at_block, ch + at_chunk, size_t(n)); });
}
