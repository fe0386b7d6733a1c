// One (query, head) of attention over keys [lo, hi) in one thread block of kWarps warps: the
// online softmax both attention kernels share (kernels.cu's single-sequence `attention`,
// paged_attention.cu's batched one). Warp w takes keys lo + w, lo + w + kWarps, ...; each lane
// owns dims lane, lane + 32, ... of q and of the running output; per key one warp-reduced dot
// product, then the running max m, sum l and output acc (FlashAttention, Dao et al. 2022, Alg. 1);
// the warps' (m, l, acc) are combined through shared memory. Writes the normalised output o and,
// when lse_out is set, log(l) + m; no key: o = 0, lse = -inf. `offset(p)` gives key p's float
// offset into kbase / vbase. Call with blockDim.x == kWarps * 32 from every thread of the block.
#pragma once

#include <cmath>
#include <cstdint>

namespace loom::gpu {

template <int kWarps, int kMaxDim, class Offset>
__device__ void online_softmax_block(const float* qh, const float* kbase, const float* vbase, int64_t lo, int64_t hi,
                                     int head_dim, float scale, Offset offset, float* o, float* lse_out) {
  constexpr int kPerLane = kMaxDim / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float qr[kPerLane], acc[kPerLane];
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    qr[j] = d < head_dim ? qh[d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t p = lo + warp; p < hi; p += kWarps) {
    const int64_t off = offset(p);
    const float* kp = kbase + off;
    const float* vp = vbase + off;
    float dot = 0.0f;
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < head_dim) dot += qr[j] * kp[d];
    }
    for (int s = 16; s > 0; s >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, s);
    const float sc = dot * scale;
    const float m_new = fmaxf(m, sc);
    const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float pj = expf(sc - m_new);
    l = l * corr + pj;
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      acc[j] = acc[j] * corr + (d < head_dim ? pj * vp[d] : 0.0f);
    }
    m = m_new;
  }
  __shared__ float sm[kWarps], sl[kWarps];
  __shared__ float sacc[kWarps][kMaxDim];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < head_dim) sacc[warp][d] = acc[j];
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
  if (M == -INFINITY) {  // no key
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) o[d] = 0.0f;
    if (lse_out && threadIdx.x == 0) *lse_out = -INFINITY;
    return;
  }
  float L = 0.0f, wgt[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    wgt[w] = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - M);
    L += sl[w] * wgt[w];
  }
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kWarps; ++w) a += sacc[w][d] * wgt[w];
    o[d] = a / L;
  }
  if (lse_out && threadIdx.x == 0) *lse_out = M + logf(L);
}

}  // namespace loom::gpu
