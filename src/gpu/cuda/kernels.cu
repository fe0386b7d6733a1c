// The CUDA backend's kernels (declared in gpu/cuda/ops.h). Written for clarity and exactness
// first: elementwise math in double where kernels/reference.cpp uses double, no FMA contraction
// where the CPU kernel's operation order is the contract (the rank-order sum, the LSE merge).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/online_softmax.cuh"
#include "gpu/cuda/ops.h"

namespace loom::gpu {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b > 65535LL * 32) b = 65535LL * 32;  // grid-stride loops cover the rest
  return int(b < 1 ? 1 : b);
}

__device__ double block_sum_double(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int n_warps = (blockDim.x + 31) >> 5;
  double t = 0.0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < n_warps; ++w) t += shared[w];
    shared[0] = t;
  }
  __syncthreads();
  t = shared[0];
  __syncthreads();
  return t;
}

// ------------------------------------------------------------------ rmsnorm
__global__ void rmsnorm_kernel(float* out, const float* x, const float* w, int64_t dim, float eps) {
  __shared__ double red[32];
  const int64_t t = blockIdx.x;
  const float* xt = x + t * dim;
  float* ot = out + t * dim;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += double(xt[i]) * double(xt[i]);
  ss = block_sum_double(ss, red);
  const double inv = 1.0 / sqrt(ss / double(dim) + double(eps));
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ot[i] = float(double(xt[i]) * inv * double(w[i]));
}

// ------------------------------------------------------------------ elementwise
__global__ void swiglu_kernel(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double g = gate[i];
    out[i] = float(g / (1.0 + exp(-g)) * double(up[i]));
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], x[i]);
}

__global__ void add_bias_kernel(float* x, int64_t n, int64_t ldx, const float* bias, int64_t cols) {
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    x[r * ldx + c] = __fadd_rn(x[r * ldx + c], bias[c]);
  }
}

// ------------------------------------------------------------------ RoPE
__global__ void rope_kernel(float* x, int64_t n_tokens, int64_t ld, int n_heads, int head_dim, const int32_t* pos,
                            const float* inv_freq, bool interleaved) {
  const int half = head_dim / 2;
  const int64_t total = n_tokens * n_heads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const int64_t th = idx / half;
    const int h = int(th % n_heads);
    const int64_t t = th / n_heads;
    float* v = x + t * ld + int64_t(h) * head_dim;
    const double angle = double(pos[t]) * double(inv_freq[i]);
    double c, s;
    sincos(angle, &s, &c);
    float* a = interleaved ? &v[2 * i] : &v[i];
    float* b = interleaved ? &v[2 * i + 1] : &v[i + half];
    const double av = *a, bv = *b;
    *a = float(av * c - bv * s);
    *b = float(av * s + bv * c);
  }
}

// ------------------------------------------------------------------ dtypes
__device__ float load_weight(const void* row, DType dt, int64_t c) {
  switch (dt) {
    case DType::F32: return static_cast<const float*>(row)[c];
    case DType::F16: return __half2float(__ushort_as_half(static_cast<const uint16_t*>(row)[c]));
    case DType::BF16: return __bfloat162float(__ushort_as_bfloat16(static_cast<const uint16_t*>(row)[c]));
    case DType::Q8_0: {
      const uint8_t* blk = static_cast<const uint8_t*>(row) + (c / 32) * 34;
      const uint16_t d = uint16_t(blk[0]) | uint16_t(uint16_t(blk[1]) << 8);
      const int8_t q = int8_t(blk[2 + c % 32]);
      return __fmul_rn(__half2float(__ushort_as_half(d)), float(q));
    }
    default: break;  // other types are dequantized on the host before they reach a kernel (cuda_device.cpp)
  }
  return 0.0f;
}

__device__ int64_t row_bytes(DType dt, int64_t cols) {
  switch (dt) {
    case DType::F32: return cols * 4;
    case DType::F16:
    case DType::BF16: return cols * 2;
    case DType::Q8_0: return cols / 32 * 34;
    default: break;
  }
  return 0;
}

__global__ void embed_kernel(const void* table, DType dt, int64_t cols, const int32_t* tokens, int64_t n,
                             float* out) {
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const char* row = static_cast<const char*>(table) + int64_t(tokens[r]) * row_bytes(dt, cols);
    out[i] = load_weight(row, dt, c);
  }
}

__global__ void dequant_q8_kernel(const void* w, int64_t rows, int64_t cols, float* out) {
  const int64_t total = rows * cols;
  const int64_t rb = cols / 32 * 34;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    out[i] = load_weight(static_cast<const char*>(w) + r * rb, DType::Q8_0, c);
  }
}

__global__ void to_bf16_kernel(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

__global__ void to_f16_kernel(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __half_as_ushort(__float2half_rn(x[i]));
}

// ------------------------------------------------------------------ attention
constexpr int kAttnWarps = 4;
constexpr int kMaxHeadDim = 256;

__device__ int64_t kv_offset(const DeviceKvView& kv, int64_t pos, int h) {
  const int64_t b = pos / kv.block_size, o = pos % kv.block_size;
  return (kv.block_table ? int64_t(kv.block_table[b]) : b) * kv.block_stride + h * kv.head_stride + o * kv.pos_stride;
}

// grid (n_heads, n_q), block kAttnWarps warps (online_softmax.cuh).
__global__ void attention_kernel(const float* q, int64_t ldq, const int32_t* q_pos, DeviceKvView kv, int64_t kv_begin,
                                 int64_t kv_end, int n_heads, int group, int head_dim, float scale, float* out,
                                 int64_t ldo, float* lse) {
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int kvh = h / group;
  int64_t end = int64_t(q_pos[t]) + 1;
  if (end > kv_end) end = kv_end;
  online_softmax_block<kAttnWarps, kMaxHeadDim>(
      q + t * ldq + int64_t(h) * head_dim, kv.k, kv.v, kv_begin, end, head_dim, scale,
      [&](int64_t p) { return kv_offset(kv, p, kvh); }, out + t * ldo + int64_t(h) * head_dim,
      lse ? lse + t * n_heads + h : nullptr);
}

struct PtrArgs {
  const float* p[kMaxPointerArgs];
};

__global__ void merge_kernel(PtrArgs parts, PtrArgs lses, int n_parts, int64_t n_rows, int head_dim, float* out,
                             float* out_lse) {
  // One block per row; mirrors kernels::merge_attention operation for operation.
  const int64_t r = blockIdx.x;
  float m = -INFINITY;
  for (int i = 0; i < n_parts; ++i) m = fmaxf(m, lses.p[i][r]);
  float* o = out + r * head_dim;
  if (m == -INFINITY) {
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) o[d] = 0.0f;
    if (out_lse && threadIdx.x == 0) out_lse[r] = -INFINITY;
    return;
  }
  double total = 0.0;
  for (int i = 0; i < n_parts; ++i) total += double(float(exp(double(lses.p[i][r]) - double(m))));
  const float inv_total = float(1.0 / total);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < n_parts; ++i) {
      const float wi = __fmul_rn(float(exp(double(lses.p[i][r]) - double(m))), inv_total);
      if (wi == 0.0f) continue;
      acc = __fadd_rn(acc, __fmul_rn(wi, parts.p[i][r * head_dim + d]));
    }
    o[d] = acc;
  }
  if (out_lse && threadIdx.x == 0) out_lse[r] = float(double(m) + log(total));
}

// ------------------------------------------------------------------ argmax
__global__ void argmax_kernel(const float* logits, int64_t ld, int n, int32_t* out) {
  const float* row = logits + int64_t(blockIdx.x) * ld;
  float bv = -INFINITY;
  int bi = -1;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i];
    if (bi < 0 || v > bv) {  // strided ascending: the first hit of a tie is the lowest index
      bv = v;
      bi = i;
    }
  }
  __shared__ float sv[kThreads];
  __shared__ int si[kThreads];
  sv[threadIdx.x] = bv;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float ov = sv[threadIdx.x + stride];
      const int oi = si[threadIdx.x + stride];
      const int mi = si[threadIdx.x];
      if (oi >= 0 && (mi < 0 || ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < mi))) {
        sv[threadIdx.x] = ov;
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = si[0] < 0 ? 0 : si[0];
}

// ------------------------------------------------------------------ KV append
__global__ void store_kv_kernel(const float* k, const float* v, int64_t n, int64_t ld, const int32_t* pos,
                                int n_kv_heads, int head_dim, float* kp, float* vp, const int32_t* table,
                                int block_size, int64_t block_stride, int64_t head_stride, int64_t pos_stride) {
  const int64_t per_tok = int64_t(n_kv_heads) * head_dim;
  const int64_t total = n * per_tok;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_tok, hd = i % per_tok;
    const int h = int(hd / head_dim), d = int(hd % head_dim);
    const int64_t p = pos[t];
    const int64_t b = p / block_size, o = p % block_size;
    const int64_t off = (table ? int64_t(table[b]) : b) * block_stride + h * head_stride + o * pos_stride + d;
    kp[off] = k[t * ld + hd];
    vp[off] = v[t * ld + hd];
  }
}

// ------------------------------------------------------------------ rank-order sum
__global__ void reduce_kernel(float* out, PtrArgs in, int n_inputs, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float acc = in.p[0][i];
    for (int r = 1; r < n_inputs; ++r) acc = __fadd_rn(acc, in.p[r][i]);
    out[i] = acc;
  }
}

__global__ void fill_random_kernel(void* dst, DType dt, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + uint64_t(i) * 0x9e3779b97f4a7c15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float v = (2.0f * u - 1.0f) * scale;
    switch (dt) {
      case DType::F32: static_cast<float*>(dst)[i] = v; break;
      case DType::F16: static_cast<uint16_t*>(dst)[i] = __half_as_ushort(__float2half_rn(v)); break;
      case DType::BF16: static_cast<uint16_t*>(dst)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v)); break;
      default: break;
    }
  }
}

__global__ void gather_rows_kernel(const float* x, int64_t cols, const int32_t* rows, int64_t n, float* out) {
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = x[int64_t(rows[i / cols]) * cols + i % cols];
}

PtrArgs pack(const float* const* p, int n) {
  LOOM_CHECK(n >= 1 && n <= kMaxPointerArgs, "n=", n, " pointers (1..", kMaxPointerArgs, ")");
  PtrArgs a{};
  for (int i = 0; i < n; ++i) a.p[i] = p[i];
  return a;
}

}  // namespace

void rmsnorm(float* out, const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps,
             cudaStream_t s) {
  if (n_tokens <= 0) return;
  rmsnorm_kernel<<<unsigned(n_tokens), kThreads, 0, s>>>(out, x, weight, dim, eps);
  check_launch("rmsnorm");
}

void swiglu(float* out, const float* gate, const float* up, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  swiglu_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, gate, up, n);
  check_launch("swiglu");
}

void add_inplace(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, x, n);
  check_launch("add_inplace");
}

void add_bias(float* x, int64_t n, int64_t ldx, const float* bias, int64_t cols, cudaStream_t s) {
  if (n <= 0 || cols <= 0) return;
  add_bias_kernel<<<blocks_for(n * cols), kThreads, 0, s>>>(x, n, ldx, bias, cols);
  check_launch("add_bias");
}

void rope(float* x, int64_t n_tokens, int64_t ld, int n_heads, int head_dim, const int32_t* pos,
          const float* inv_freq, bool interleaved, cudaStream_t s) {
  LOOM_CHECK(head_dim > 0 && head_dim % 2 == 0, "head_dim=", head_dim);
  const int64_t total = n_tokens * n_heads * (head_dim / 2);
  if (total <= 0) return;
  rope_kernel<<<blocks_for(total), kThreads, 0, s>>>(x, n_tokens, ld, n_heads, head_dim, pos, inv_freq, interleaved);
  check_launch("rope");
}

void embed_rows(const void* table, DType dt, int64_t cols, const int32_t* tokens, int64_t n, float* out,
                cudaStream_t s) {
  LOOM_CHECK(cols % dtype_block_elems(dt) == 0, "cols=", cols);
  if (n <= 0) return;
  embed_kernel<<<blocks_for(n * cols), kThreads, 0, s>>>(table, dt, cols, tokens, n, out);
  check_launch("embed_rows");
}

void dequantize_q8_0(const void* w, int64_t rows, int64_t cols, float* out, cudaStream_t s) {
  LOOM_CHECK(cols % 32 == 0, "cols=", cols);
  if (rows <= 0) return;
  dequant_q8_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(w, rows, cols, out);
  check_launch("dequantize_q8_0");
}

void convert_f32_to_bf16(const float* x, uint16_t* out, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, out, n);
  check_launch("convert_f32_to_bf16");
}

void convert_f32_to_f16(const float* x, uint16_t* out, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  to_f16_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, out, n);
  check_launch("convert_f32_to_f16");
}

void attention(const float* q, int64_t n_q, int64_t ldq, const int32_t* q_pos, const DeviceKvView& kv,
               int64_t kv_begin, int64_t kv_end, int n_heads, int n_kv_heads, int head_dim, float scale,
               float* out, int64_t ldo, float* lse, cudaStream_t s) {
  LOOM_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "n_heads=", n_heads, " n_kv_heads=", n_kv_heads);
  LOOM_CHECK(head_dim > 0 && head_dim <= kMaxHeadDim, "head_dim=", head_dim, " (the GPU kernel takes <= ",
             kMaxHeadDim, ")");
  LOOM_CHECK(kv.block_size > 0, "block_size=", kv.block_size);
  if (n_q <= 0 || n_heads <= 0) return;
  LOOM_CHECK(n_q <= 65535, "n_q=", n_q, " (grid y limit)");
  const dim3 grid{unsigned(n_heads), unsigned(n_q), 1u};
  attention_kernel<<<grid, kAttnWarps * 32, 0, s>>>(q, ldq, q_pos, kv, kv_begin, kv_end, n_heads,
                                                    n_heads / n_kv_heads, head_dim, scale, out, ldo, lse);
  check_launch("attention");
}

void merge_attention(const float* const* parts, const float* const* lses, int n_parts, int64_t n_rows,
                     int head_dim, float* out, float* out_lse, cudaStream_t s) {
  if (n_rows <= 0) return;
  LOOM_CHECK(n_rows <= 0x7fffffff, "n_rows=", n_rows);
  merge_kernel<<<unsigned(n_rows), 128, 0, s>>>(pack(parts, n_parts), pack(lses, n_parts), n_parts, n_rows, head_dim,
                                                out, out_lse);
  check_launch("merge_attention");
}

void argmax_rows(const float* logits, int64_t n_rows, int64_t ld, int n, int32_t* out, cudaStream_t s) {
  LOOM_CHECK(n > 0, "n=", n);
  if (n_rows <= 0) return;
  argmax_kernel<<<unsigned(n_rows), kThreads, 0, s>>>(logits, ld, n, out);
  check_launch("argmax_rows");
}

void store_kv(const float* k, const float* v, int64_t n, int64_t ld, const int32_t* pos, int n_kv_heads,
              int head_dim, float* k_pages, float* v_pages, const int32_t* block_table, int block_size,
              int64_t block_stride, int64_t head_stride, int64_t pos_stride, cudaStream_t s) {
  const int64_t total = n * n_kv_heads * head_dim;
  if (total <= 0) return;
  store_kv_kernel<<<blocks_for(total), kThreads, 0, s>>>(k, v, n, ld, pos, n_kv_heads, head_dim, k_pages, v_pages,
                                                         block_table, block_size, block_stride, head_stride,
                                                         pos_stride);
  check_launch("store_kv");
}

void reduce_sum_rank_order(float* out, const float* const* in, int n_inputs, int64_t count, cudaStream_t s) {
  if (count <= 0) return;
  reduce_kernel<<<blocks_for(count), kThreads, 0, s>>>(out, pack(in, n_inputs), n_inputs, count);
  check_launch("reduce_sum_rank_order");
}

void fill_random(void* dst, DType dt, int64_t n, uint64_t seed, float scale, cudaStream_t s) {
  LOOM_CHECK(dt != DType::Q8_0, "fill_random: q8_0 is not generated on the device");
  if (n <= 0) return;
  fill_random_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, dt, n, seed, scale);
  check_launch("fill_random");
}

void gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t n, float* out, cudaStream_t s) {
  if (n <= 0) return;
  gather_rows_kernel<<<blocks_for(n * cols), kThreads, 0, s>>>(x, cols, rows, n, out);
  check_launch("gather_rows");
}

}  // namespace loom::gpu
