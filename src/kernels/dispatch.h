// Internal: the one run-time dispatch point of the CPU kernels.
//
// Each instruction-set path (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp) fills one
// KernelTable with its single-threaded bodies; kernels.cpp picks the table once per process
// (cpu_features() + LOOM_KERNELS, or set_kernel_path_for_testing) and does the threading,
// argument checks and the kernels that need no SIMD. The ISA files only take plain structs and
// raw pointers: they call no inline function of other headers, so no function compiled with
// AVX-512 can be merged (as a COMDAT) into code that runs on a CPU without it.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/weight_tiles.h"
#include "kernels/kernels.h"

namespace loom::kernels::detail {

// y[t, r] (= y[t*ldy + r]) for t < n over a row range of W; see matmul() in kernels.h.
struct MatmulArgs {
  const float* x = nullptr;  // [n, cols], rows ldx floats apart
  int64_t n = 0, ldx = 0;
  const uint8_t* w = nullptr;  // W row 0; row r at w + r*row_stride (plain rows)
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0, row_stride = 0;
  // Row tiles (core/weight_tiles.h) when tile_rows != 0: tile t at w + t*tile_stride. Row ranges
  // passed to matmul_rows then start on a tile boundary.
  int tile_rows = 0;
  int64_t tile_stride = 0;
  // Plain rows of the block types: weights of the first block before column 0 (core/weight_view.h;
  // a multiple of 32, non-zero only for a K-quant column block).
  int64_t col_offset = 0;
  float* y = nullptr;  // [n, rows], rows ldy floats apart
  int64_t ldy = 0;
  bool accumulate = false;
  // Fast mode (kernels.h "Numerics"), set by matmul() for the fast kernels only:
  //  q8_0: token t's int8 blocks at xq + t*cols, scales at xd + t*(cols/32), block sums of q at
  //        xs + t*(cols/32);
  //  bf16: token t's bf16 values at xb + t*cols in the tile pair order: 32-bit word j of 32-column
  //        chunk c holds column 32c + j in its low half and 32c + j + 16 in its high half.
  const int8_t* xq = nullptr;
  const float* xd = nullptr;
  const int32_t* xs = nullptr;
  //  the other block types (kernels_quant_impl.h) also: xm + t*(cols/32), d * float(qsum) per
  //  block (rounded once), and xs16 + t*(cols/16), the sums of q over each 16 values.
  const float* xm = nullptr;
  const int32_t* xs16 = nullptr;
  const uint32_t* xb = nullptr;
  //  bf16, n > 1 only: the same rounded values widened to f32 in column order, token t at xf + t*cols.
  const float* xf = nullptr;
};

// One attention call. Work item i covers query t = i / (n_heads / heads_per_item) and the
// heads_per_item consecutive query heads from h0 = (i % (n_heads / heads_per_item)) *
// heads_per_item, which share one kv head (heads_per_item divides n_heads / n_kv_heads).
struct AttentionArgs {
  const float* q = nullptr;
  int64_t ldq = 0;
  const int32_t* q_pos = nullptr;
  KvView kv;
  int64_t kv_begin = 0, kv_end = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int heads_per_item = 1;  // <= kMaxHeadsPerItem
  float scale = 0.0f;
  float* out = nullptr;
  int64_t ldo = 0;
  float* lse = nullptr;
};

// Throws loom::Error for a failed scratch allocation of `bytes` (out of line: the ISA files call
// nothing inline from other headers).
[[noreturn]] void fail_out_of_memory(int64_t bytes);

// The largest head_dim the optimised attention takes (its accumulator lives on the stack).
inline constexpr int kMaxHeadDim = 512;
// The most query heads one attention work item walks the keys with (their accumulators, 32 KiB
// at head_dim 128, live on the stack: kMaxHeadsPerItem * kMaxHeadDim floats at most).
inline constexpr int kMaxHeadsPerItem = 8;

struct KernelTable {
  const char* name;
  // Output rows [r0, r1) of W (columns [r0, r1) of y) for all n tokens.
  void (*matmul_rows)(const MatmulArgs& a, int64_t r0, int64_t r1);
  void (*rmsnorm)(float* out, const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps);
  void (*swiglu)(float* out, const float* gate, const float* up, int64_t n);
  // Work items [i0, i1).
  void (*attention_items)(const AttentionArgs& a, int64_t i0, int64_t i1);
  // Fast mode (kernels.h): output rows [r0, r1) for all n tokens, from the quantized activations
  // of MatmulArgs (q8_0 / bf16 weights; plain rows or row tiles).
  void (*q8_fast_rows)(const MatmulArgs& a, int64_t r0, int64_t r1);
  void (*bf16_fast_rows)(const MatmulArgs& a, int64_t r0, int64_t r1);
  const char* q8_fast_name;
  const char* bf16_fast_name;
  // Fast mode for Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K weights (kernels_quant_impl.h), with the
  // q8 activations plus xm, xs16.
  void (*quant_fast_rows)(const MatmulArgs& a, int64_t r0, int64_t r1);
  const char* quant_fast_name;
  // Roofline: `iters` rounds of 12 independent register-resident FMA vectors; returns the FLOP done.
  double (*fma_peak)(int64_t iters);
  // The fast mode's activation quantizer (quantize_activations_q8's definition, the same bits for
  // finite x); nullptr: the scalar one in kernels.cpp.
  void (*quantize_q8)(const float* x, int64_t cols, int8_t* q, float* d, int32_t* qsum) = nullptr;
};

const KernelTable& table_scalar();
const KernelTable& table_avx2();
const KernelTable& table_avx512();
// The fast-mode AVX-512 kernels (kernels_avx512_vnni.cpp): call only where the CPU has
// avx512_vnni / avx512_bf16.
void (*q8_fast_rows_vnni())(const MatmulArgs&, int64_t, int64_t);
void (*bf16_fast_rows_avx512bf16())(const MatmulArgs&, int64_t, int64_t);
// The AVX2 fast-mode kernels of the block types beyond q8_0 (kernels_quant_avx2.cpp).
void (*quant_fast_rows_avx2())(const MatmulArgs&, int64_t, int64_t);
// The same with AVX-512 VNNI dot products (kernels_quant_vnni.cpp): call only where the CPU has
// avx512_vnni (and avx512vl).
void (*quant_fast_rows_vnni())(const MatmulArgs&, int64_t, int64_t);
// The table of the current path (kernel_path()).
const KernelTable& active_table();

}  // namespace loom::kernels::detail
