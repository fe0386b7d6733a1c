// GPU kernels of the CUDA backend: the device twins of kernels/kernels.h, on device pointers,
// enqueued on a stream (nothing synchronises unless it says so). Shapes and conventions are the
// CPU kernels' (kernels/kernels.h); each is tested against the CPU reference kernel
// (kernels/reference.cpp) on the same inputs in tests/gpu/test_gpu_kernels.cpp, which states the
// error metric next to each test. Elementwise math runs in double where the reference does, so
// those kernels differ from it by the final f32 rounding only.
//
// GEMM is not here: it goes through cuBLAS (gpu/cuda/gemm.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace loom::gpu {

// Most device pointers a kernel takes by value (merge parts, reduction inputs).
inline constexpr int kMaxPointerArgs = 128;

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight[:]   (out may alias x)
void rmsnorm(float* out, const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps,
             cudaStream_t s);

// out[i] = silu(gate[i]) * up[i]   (out may alias gate or up)
void swiglu(float* out, const float* gate, const float* up, int64_t n, cudaStream_t s);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n, cudaStream_t s);

// x[r, c] += bias[c] for rows r < n (row stride ldx).
void add_bias(float* x, int64_t n, int64_t ldx, const float* bias, int64_t cols, cudaStream_t s);

// RoPE in place on x[n_tokens, n_heads, head_dim] (rows ld floats apart), token t at pos[t]
// (device). inv_freq[head_dim/2] (device) from kernels::rope_inv_freq, so both conventions
// (interleaved pairs (2i, 2i+1) of llama2.c / GGUF, and split halves (i, i + head_dim/2) of HF)
// and Llama-3 / GGUF frequency scaling match the CPU exactly. Angle, cos, sin and the rotation in
// double, like rope_ref.
void rope(float* x, int64_t n_tokens, int64_t ld, int n_heads, int head_dim, const int32_t* pos,
          const float* inv_freq, bool interleaved, cudaStream_t s);

// Rows `tokens[i]` of a [vocab, cols] table of dtype `dt` (plain rows, device) as f32 into
// out[n, cols]: the embedding lookup (f32, f16, bf16, q8_0).
void embed_rows(const void* table, DType dt, int64_t cols, const int32_t* tokens, int64_t n, float* out,
                cudaStream_t s);

// W [rows, cols] of dtype q8_0 (plain rows, device) dequantized into out [rows, cols] f32: d * q,
// exact in f32 (the same values dequantize_row gives).
void dequantize_q8_0(const void* w, int64_t rows, int64_t cols, float* out, cudaStream_t s);

// f32 -> bf16 / f16 with round-to-nearest-even (cuBLAS inputs for bf16 / f16 weights).
void convert_f32_to_bf16(const float* x, uint16_t* out, int64_t n, cudaStream_t s);
void convert_f32_to_f16(const float* x, uint16_t* out, int64_t n, cudaStream_t s);

// The K/V of one sequence in device memory, the layout of kernels::KvView (paged: element (pos,
// kv head h, d) at block_table[pos / block_size] * block_stride + h * head_stride +
// (pos % block_size) * pos_stride + d; block_table == nullptr: block index = pos / block_size).
// All pointers are device pointers.
struct DeviceKvView {
  const float* k = nullptr;
  const float* v = nullptr;
  const int32_t* block_table = nullptr;
  int block_size = 0;
  int64_t block_stride = 0, head_stride = 0, pos_stride = 0;
};

// Causal attention, kernels::attention's contract on the GPU: query t (row of q, ldq floats
// apart) at q_pos[t] (device) attends keys [kv_begin, min(q_pos[t] + 1, kv_end)); out [n_q,
// n_heads * head_dim] (ldo apart). lse (nullable, device) [n_q * n_heads]: log-sum-exp of the
// scaled scores, with `out` the normalised partial output (Helix 2.1 merges partials); a query
// that sees no key gets 0 and -inf. GQA: query head h reads KV head h / (n_heads / n_kv_heads).
// One thread block per (query, head), online softmax in f32 (FlashAttention's running max and
// sum, Dao et al. 2022 Alg. 1, one query row per block): serves decode (n_q = batch rows of one
// sequence, usually 1) and causal prefill; head_dim <= 256.
void attention(const float* q, int64_t n_q, int64_t ldq, const int32_t* q_pos, const DeviceKvView& kv,
               int64_t kv_begin, int64_t kv_end, int n_heads, int n_kv_heads, int head_dim, float scale,
               float* out, int64_t ldo, float* lse, cudaStream_t s);

// Helix 3 LSE merge (kernels::merge_attention's arithmetic, operation for operation): parts and
// lses are HOST arrays of n_parts <= kMaxPointerArgs device pointers ([n_rows, head_dim] and
// [n_rows]); they travel as kernel arguments.
void merge_attention(const float* const* parts, const float* const* lses, int n_parts, int64_t n_rows,
                     int head_dim, float* out, float* out_lse, cudaStream_t s);

// Greedy sampling: out[r] = argmax of logits[r, :n] (rows ld apart), lowest index on ties.
void argmax_rows(const float* logits, int64_t n_rows, int64_t ld, int n, int32_t* out, cudaStream_t s);

// Writes K/V rows of `n` tokens (k/v rows ld floats apart, n_kv_heads * head_dim each) at
// positions pos[t] (device) into the paged layout of `kv` for kv heads [0, n_kv_heads): the
// decode/prefill KV append of a device KvCache.
void store_kv(const float* k, const float* v, int64_t n, int64_t ld, const int32_t* pos, int n_kv_heads,
              int head_dim, float* k_pages, float* v_pages, const int32_t* block_table, int block_size,
              int64_t block_stride, int64_t head_stride, int64_t pos_stride, cudaStream_t s);

// out[i] = ((in[0][i] + in[1][i]) + ...) + in[n-1][i] in f32, no FMA: the communicators'
// rank-order sum (comm/communicator.h) on the GPU, bit-identical to reduce_sum_rank_order.
// `in` is a HOST array of n_inputs <= kMaxPointerArgs device pointers (kernel arguments); out may
// alias any input.
void reduce_sum_rank_order(float* out, const float* const* in, int n_inputs, int64_t count, cudaStream_t s);

// Deterministic pseudo-random values in [-scale, scale) (a hash of seed and index) written as
// dtype dt (f32, f16 or bf16) into dst[n]: synthetic weights made on the device (bench_gpu), so
// an 8B-parameter shape needs no file.
void fill_random(void* dst, DType dt, int64_t n, uint64_t seed, float scale, cudaStream_t s);

// out[i, :] = x[rows[i], :] for i < n (rows device, [*, cols] f32): gathers the rows that sample.
void gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t n, float* out, cudaStream_t s);

// ---- the Device seam's batched ops (gpu/cuda/cuda_device.h; paged_attention.cu) ----

// One run of contiguous floats: dst[dst_at, + n) = src[src_at, + n) (device/device.h CopySpan).
struct DeviceSpan {
  int64_t dst_at, src_at, n;
};
// Every span of spans[n_spans] (device array), device to device: one launch.
void copy_spans(float* dst, const float* src, const DeviceSpan* spans, int64_t n_spans, cudaStream_t s);

// One job of batched paged attention (device/device.h AttentionJob, on the device): the query rows
// of one sequence for n_heads query heads that read one KV head, whose key sequence is the pages
// in pages[] (each `block_size` positions x head_dim floats, page p's K at k + p * page_floats).
// Query t at q_pos[t] attends keys [0, min(q_pos[t] + 1, kv_end)). The keys of a (query, head) are
// cut into `splits` contiguous ranges of ceil(kv_end / splits) positions, each its own thread
// block (FlashDecoding: long contexts with few queries still fill the GPU); the ranges' partial
// outputs and LSEs are merged by log-sum-exp (Helix's merge) in a second launch.
struct PagedJob {
  const float* q;
  int64_t ldq;
  const int32_t* q_pos;  // device
  const int32_t* pages;  // device
  int64_t n_q, kv_end;
  float* out;
  int64_t ldo;
  float* lse;  // nullable
  int64_t ld_lse;
  int n_heads, splits;
  int64_t unit0;   // first thread block of the job: n_q * n_heads * splits of them
  int64_t part0;   // splits > 1: first partial of the job in the scratch (-1 otherwise)
  int64_t merge0;  // splits > 1: first merge item of the job (n_q * n_heads of them)
};
// jobs[n_jobs] (device, unit0 ascending), units = total thread blocks; split_jobs[n_split]
// (device): the indices of the jobs with splits > 1, merge0 ascending, merges = their items in
// all; scratch_o [parts][head_dim] and scratch_lse [parts] for the partials. head_dim <= 256.
// Online softmax in f32 per block (FlashAttention's running max and sum, 4 warps over the keys).
void paged_attention(const PagedJob* jobs, int64_t n_jobs, int64_t units, const int32_t* split_jobs,
                     int64_t n_split, int64_t merges, const float* k, const float* v, int block_size, int head_dim,
                     int64_t page_floats, float scale, float* scratch_o, float* scratch_lse, cudaStream_t s);

}  // namespace loom::gpu
