// Batched ops of the CUDA device (gpu/cuda/cuda_device.h): span copies and paged attention over
// many sequences in one launch, split along the keys (declared in gpu/cuda/ops.h).
//
// Paged attention, one thread block per (job, query, head, split), 4 warps: the online softmax of
//   online_softmax.cuh over the split's keys [lo, hi).
// A job of one split writes the normalised output (and LSE) directly; a job of several writes one
// partial (o / l, m + log l) per split, and the merge kernel combines them exactly as Helix's LSE
// merge does (LSE = log sum exp(lse_s), o = sum exp(lse_s - LSE) o_s): FlashDecoding's split-K.
#include <cmath>
#include <cstdint>

#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/online_softmax.cuh"
#include "gpu/cuda/ops.h"

namespace loom::gpu {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxDim = 256;

__global__ void copy_spans_kernel(float* dst, const float* src, const DeviceSpan* spans, int64_t n_spans) {
  for (int64_t i = blockIdx.x; i < n_spans; i += gridDim.x) {
    const DeviceSpan sp = spans[i];
    float* d = dst + sp.dst_at;
    const float* s = src + sp.src_at;
    for (int64_t j = threadIdx.x; j < sp.n; j += blockDim.x) d[j] = s[j];
  }
}

// The job holding unit u (jobs sorted by unit0).
__device__ int64_t job_of_unit(const PagedJob* jobs, int64_t n_jobs, int64_t u) {
  int64_t lo = 0, hi = n_jobs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (jobs[mid].unit0 <= u) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__global__ void paged_attention_kernel(const PagedJob* jobs, int64_t n_jobs, const float* kbase, const float* vbase,
                                       int block_size, int head_dim, int64_t page_floats, float scale,
                                       float* scratch_o, float* scratch_lse) {
  const int64_t u = blockIdx.x;
  const PagedJob& J = jobs[job_of_unit(jobs, n_jobs, u)];
  const int64_t local = u - J.unit0;
  const int split = int(local % J.splits);
  const int64_t item = local / J.splits;
  const int h = int(item % J.n_heads);
  const int64_t t = item / J.n_heads;

  int64_t end = int64_t(J.q_pos[t]) + 1;
  if (end > J.kv_end) end = J.kv_end;
  const int64_t chunk = (J.kv_end + J.splits - 1) / J.splits;
  const int64_t lo = int64_t(split) * chunk;
  int64_t hi = lo + chunk;
  if (hi > end) hi = end;

  float* o;
  float* lse_out;
  if (J.splits == 1) {
    o = J.out + t * J.ldo + int64_t(h) * head_dim;
    lse_out = J.lse ? J.lse + t * J.ld_lse + h : nullptr;
  } else {
    const int64_t part = J.part0 + local;
    o = scratch_o + part * head_dim;
    lse_out = scratch_lse + part;
  }
  const int32_t* pages = J.pages;
  online_softmax_block<kWarps, kMaxDim>(
      J.q + t * J.ldq + int64_t(h) * head_dim, kbase, vbase, lo, hi, head_dim, scale,
      [=](int64_t p) { return int64_t(pages[p / block_size]) * page_floats + (p % block_size) * head_dim; }, o,
      lse_out);
}

// The job holding merge item i: split_jobs lists the jobs of several splits, merge0 ascending.
__device__ int64_t job_of_merge(const PagedJob* jobs, const int32_t* split_jobs, int64_t n_split, int64_t i) {
  int64_t lo = 0, hi = n_split - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (jobs[split_jobs[mid]].merge0 <= i) lo = mid; else hi = mid - 1;
  }
  return split_jobs[lo];
}

__global__ void merge_splits_kernel(const PagedJob* jobs, const int32_t* split_jobs, int64_t n_split, int head_dim,
                                    const float* scratch_o, const float* scratch_lse) {
  const int64_t i = blockIdx.x;
  const PagedJob& J = jobs[job_of_merge(jobs, split_jobs, n_split, i)];
  const int64_t item = i - J.merge0;
  const int h = int(item % J.n_heads);
  const int64_t t = item / J.n_heads;
  const int S = J.splits;
  const int64_t p0 = J.part0 + item * S;
  float* o = J.out + t * J.ldo + int64_t(h) * head_dim;
  float M = -INFINITY;
  for (int s = 0; s < S; ++s) M = fmaxf(M, scratch_lse[p0 + s]);
  if (M == -INFINITY) {
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) o[d] = 0.0f;
    if (J.lse && threadIdx.x == 0) J.lse[t * J.ld_lse + h] = -INFINITY;
    return;
  }
  float total = 0.0f;
  for (int s = 0; s < S; ++s) total += expf(scratch_lse[p0 + s] - M);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < S; ++s) {
      const float w = expf(scratch_lse[p0 + s] - M);
      if (w != 0.0f) acc += w * scratch_o[(p0 + s) * head_dim + d];
    }
    o[d] = acc / total;
  }
  if (J.lse && threadIdx.x == 0) J.lse[t * J.ld_lse + h] = M + logf(total);
}

}  // namespace

void copy_spans(float* dst, const float* src, const DeviceSpan* spans, int64_t n_spans, cudaStream_t s) {
  if (n_spans <= 0) return;
  const unsigned grid = unsigned(n_spans < 65535 * 16 ? n_spans : 65535 * 16);
  copy_spans_kernel<<<grid, 128, 0, s>>>(dst, src, spans, n_spans);
  check_launch("copy_spans");
}

void paged_attention(const PagedJob* jobs, int64_t n_jobs, int64_t units, const int32_t* split_jobs,
                     int64_t n_split, int64_t merges, const float* k, const float* v, int block_size, int head_dim,
                     int64_t page_floats, float scale, float* scratch_o, float* scratch_lse, cudaStream_t s) {
  LOOM_CHECK(head_dim > 0 && head_dim <= kMaxDim, "head_dim=", head_dim, " (the GPU kernel takes <= ", kMaxDim, ")");
  LOOM_CHECK(block_size > 0, "block_size=", block_size);
  if (n_jobs <= 0 || units <= 0) return;
  LOOM_CHECK(units <= 0x7fffffff && merges <= 0x7fffffff, "paged attention of ", units, " blocks");
  paged_attention_kernel<<<unsigned(units), kWarps * 32, 0, s>>>(jobs, n_jobs, k, v, block_size, head_dim,
                                                                 page_floats, scale, scratch_o, scratch_lse);
  check_launch("paged_attention");
  if (merges <= 0 || n_split <= 0) return;
  merge_splits_kernel<<<unsigned(merges), 128, 0, s>>>(jobs, split_jobs, n_split, head_dim, scratch_o, scratch_lse);
  check_launch("paged_attention merge");
}

}  // namespace loom::gpu
