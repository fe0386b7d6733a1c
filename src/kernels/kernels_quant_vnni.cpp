// AVX-512 VNNI fast-mode kernels of the block types Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K on 256-bit
// vectors (vpdpbusd; compiled with the AVX-512 VNNI flags, called only where cpu_features()
// reports avx512_vnni and avx512vl, kernels/cpu_features.cpp). The kernel bodies:
// kernels_quant_simd_impl.h; the same bits as the AVX2 and generic paths (every s_b exact).
#include <immintrin.h>

#include "kernels/dispatch.h"

#define LOOM_QUANT_VNNI 1

namespace loom::kernels::detail {
namespace {

#include "kernels/kernels_quant_simd_impl.h"

}  // namespace

void (*quant_fast_rows_vnni())(const MatmulArgs&, int64_t, int64_t) { return &quant_fast_rows_simd<true>; }

}  // namespace loom::kernels::detail
