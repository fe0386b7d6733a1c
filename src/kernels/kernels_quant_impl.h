// Internal: matmul bodies for the ggml block types beyond q8_0 (Q4_0, Q4_1, Q5_0, Q4_K, Q5_K,
// Q6_K), written once over an ISA struct S and instantiated by each ISA file inside its anonymous
// namespace after kernels_impl.h (as kernels_fast_impl.h).
//
// Every row is read as a run of 32-weight sub-blocks from its view's col_offset (core/dtype.h,
// core/dtype_blocks_impl.h), so a TP column shard that starts inside a K-quant super-block is
// computed like any other view.
//
// Exact mode (quant_exact_rows): each group of rows is dequantized into an f32 scratch with
// exactly dequantize_row's values (ggml's), then multiplied by the f32 kernel of this path
// (matmul_rows_t<S, F32>): the product of the exact weights in the f32 kernels' summation order.
//
// Fast mode (quant_fast_rows_impl): kernels.h "Numerics" per output (token t, row r), over the
// view's sub-blocks b in order, with the token's int8 blocks (xq, d_x = xd[b], qsum = xs[b]) and
// xm[b] = d_x * float(qsum) (rounded once, per token and block):
//   s_b  = sum_i k_i * (q_i - offset) * xq_i     exact int32 (q, offset, k: dtype_blocks_impl.h)
//   acc  = fmaf(float(s_b), a_b * d_x, acc)      (a_b * d_x rounded once)
//   accm = fmaf(mn_b, xm[b], accm)               types with a min (Q4_1, Q4_K, Q5_K) only
// from acc = accm = 0; y = acc + accm (or acc), then y = y_old + y when accumulating. This is the
// product of the dequantized weights with the quantized activations d_x * xq, in that order; every
// path (this generic one, the AVX2 kernels) performs exactly these operations.

#include "core/dtype_blocks_impl.h"

// ---- scratch (malloc'd, no std:: containers: dispatch.h) ----
struct QuantScratch {
  void* p = nullptr;
  int64_t bytes = 0;
  ~QuantScratch() { __builtin_free(p); }
  void* get(int64_t need) {
    if (need > bytes) {
      __builtin_free(p);
      p = __builtin_malloc(size_t(need));
      if (!p) fail_out_of_memory(need);
      bytes = need;
    }
    return p;
  }
};

template <class S>
struct SF16 {
  float operator()(uint16_t h) const { return S::f16(h); }
};

// Whether weights of type t add a per-sub-block constant (the fast mode's second accumulator).
constexpr bool quant_has_min(DType t) { return t == DType::Q4_1 || t == DType::Q4_K || t == DType::Q5_K; }

// The bytes of block c of row r in the plain encoding: in place for plain rows, else gathered from
// the row's tile into tmp (at least 256 bytes).
inline const uint8_t* quant_block(const MatmulArgs& a, int64_t r, int64_t c, uint8_t* tmp) {
  if (a.tile_rows == 0) return a.w + r * a.row_stride + c * qb_block_bytes(a.dtype);
  qb_block_from_tile(a.dtype, a.w + r / kTileRows * a.tile_stride, c, int(r % kTileRows), tmp);
  return tmp;
}

// Row r's columns [0, a.cols) as f32.
template <class S>
void quant_dequant_row(const MatmulArgs& a, int64_t r, float* dst) {
  const DType t = a.dtype;
  const int subs = qb_subs(t);
  const int64_t j0 = a.col_offset / 32, nj = a.cols / 32;
  alignas(16) uint8_t tmp[256];
  int64_t have = -1;
  const uint8_t* blk = nullptr;
  for (int64_t j = j0; j < j0 + nj; ++j) {
    if (j / subs != have) blk = quant_block(a, r, have = j / subs, tmp);
    qb_dequant_sub(t, blk, int(j % subs), dst + (j - j0) * 32, SF16<S>{});
  }
}

thread_local QuantScratch t_quant_exact;

template <class S>
void quant_exact_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  // Groups of rows: the gemv's row tile for one token; for batches enough rows that the f32
  // kernel's packing of x is paid over many of them.
  const int64_t group = a.n == 1 ? S::kGemvRows : 64;
  const int64_t g = r1 - r0 < group ? r1 - r0 : group;
  float* buf = static_cast<float*>(t_quant_exact.get(g * a.cols * int64_t(sizeof(float))));
  for (int64_t rr = r0; rr < r1; rr += group) {
    const int64_t re = rr + group < r1 ? rr + group : r1;
    for (int64_t r = rr; r < re; ++r) quant_dequant_row<S>(a, r, buf + (r - rr) * a.cols);
    MatmulArgs p = a;
    p.w = reinterpret_cast<const uint8_t*>(buf);
    p.dtype = DType::F32;
    p.rows = re - rr;
    p.row_stride = a.cols * int64_t(sizeof(float));
    p.tile_rows = 0;
    p.tile_stride = 0;
    p.col_offset = 0;
    p.y = a.y + rr;
    matmul_rows_t<S, DType::F32>(p, 0, re - rr);
  }
}

// ---- fast mode, the generic path: 8-row groups, per sub-block the rows' levels and scales
// decoded (dtype_blocks_impl.h), per token the defined operations on 8 lanes.
thread_local QuantScratch t_quant_fast;

template <class S>
void quant_fast_rows_impl(const MatmulArgs& a, int64_t r0, int64_t r1) {
  using F8 = typename S::F8;
  const DType t = a.dtype;
  const int subs = qb_subs(t);
  const bool has_min = quant_has_min(t);
  const int64_t nb = a.cols / 32, j0 = a.col_offset / 32, n = a.n;
  // Per token: the 8 lanes of acc and accm between sub-blocks.
  float* accs = static_cast<float*>(t_quant_fast.get(n * 16 * int64_t(sizeof(float))));
  for (int64_t g0 = r0; g0 < r1; g0 += 8) {
    const int nr = int(r1 - g0 < 8 ? r1 - g0 : 8);
    for (int64_t i = 0; i < n * 16; ++i) accs[i] = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t j = j0 + b;
      alignas(32) uint8_t q[8][32];
      alignas(32) float av[8], mv[8];
      int off[8], klo[8], khi[8];
      for (int r = 0; r < 8; ++r) {
        const int rr = r < nr ? r : nr - 1;  // lanes past the group repeat its last row (dropped)
        alignas(16) uint8_t tmp[256];
        const uint8_t* blk = quant_block(a, g0 + rr, j / subs, tmp);
        qb_sub_quants(t, blk, int(j % subs), q[r]);
        const QbScales s = qb_sub_scales(t, blk, int(j % subs), SF16<S>{});
        av[r] = s.a;
        mv[r] = s.mn;
        off[r] = s.offset;
        klo[r] = s.k_lo;
        khi[r] = s.k_hi;
      }
      const F8 a8 = S::f8_load(av), m8 = S::f8_load(mv);
      for (int64_t tk = 0; tk < n; ++tk) {
        const int8_t* xq = a.xq + tk * a.cols + b * 32;
        alignas(32) float sf[8];
        for (int r = 0; r < 8; ++r) {
          int32_t lo = 0, hi = 0;
          for (int i = 0; i < 16; ++i) lo += (int32_t(q[r][i]) - off[r]) * int32_t(xq[i]);
          for (int i = 16; i < 32; ++i) hi += (int32_t(q[r][i]) - off[r]) * int32_t(xq[i]);
          sf[r] = float(klo[r] * lo + khi[r] * hi);
        }
        float* acc = accs + tk * 16;
        F8 f = S::f8_fma(S::f8_load(sf), S::f8_mul(a8, S::f8_set1(a.xd[tk * nb + b])), S::f8_load(acc));
        S::f8_store(acc, f);
        if (has_min) S::f8_store(acc + 8, S::f8_fma(m8, S::f8_set1(a.xm[tk * nb + b]), S::f8_load(acc + 8)));
      }
    }
    for (int64_t tk = 0; tk < n; ++tk) {
      const float* acc = accs + tk * 16;
      float* y = a.y + tk * a.ldy + g0;
      for (int r = 0; r < nr; ++r) {
        const float v = has_min ? acc[r] + acc[8 + r] : acc[r];
        y[r] = a.accumulate ? y[r] + v : v;
      }
    }
  }
}
