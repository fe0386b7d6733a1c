// AVX2 fast-mode kernels of the block types Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K (compiled with
// -mavx2 -mfma -mf16c; called only after the run-time CPU check, kernels/cpu_features.cpp). The
// kernel bodies: kernels_quant_simd_impl.h.
#include <immintrin.h>

#include "kernels/dispatch.h"

namespace loom::kernels::detail {
namespace {

#include "kernels/kernels_quant_simd_impl.h"

}  // namespace

void (*quant_fast_rows_avx2())(const MatmulArgs&, int64_t, int64_t) { return &quant_fast_rows_simd<false>; }

}  // namespace loom::kernels::detail
