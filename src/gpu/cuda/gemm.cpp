#include "gpu/cuda/gemm.h"

#include <algorithm>
#include <vector>

#include "core/weight_tiles.h"
#include "gpu/cuda/ops.h"

namespace loom::gpu {
namespace {

void cublas_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail("cuBLAS error ", cublasGetStatusString(st), " in ", what);
}

// Rows of W widened per call at most this many f32 bytes at a time (q8_0 / F32Activations).
constexpr std::size_t kWideScratchBytes = std::size_t(256) << 20;

}  // namespace

DeviceWeight::DeviceWeight(const WeightView& w) : dtype_(w.dtype), rows_(w.rows), cols_(w.cols) {
  LOOM_CHECK(w.cols % dtype_block_elems(w.dtype) == 0, "cols=", w.cols);
  const int64_t rb = dtype_row_bytes(w.dtype, w.cols);
  buf_.allocate(std::size_t(rows_ * rb));
  // Staged through host memory in pieces of about 64 MiB (one read_weight_row per row, so row
  // tiles and strided views come out as plain rows).
  const int64_t rows_per_piece = std::max<int64_t>(1, (int64_t(64) << 20) / std::max<int64_t>(rb, 1));
  std::vector<uint8_t> host(std::size_t(std::min(rows_, rows_per_piece) * rb));
  for (int64_t r0 = 0; r0 < rows_; r0 += rows_per_piece) {
    const int64_t nr = std::min(rows_per_piece, rows_ - r0);
    for (int64_t r = 0; r < nr; ++r) read_weight_row(w, r0 + r, host.data() + r * rb);
    buf_.upload(host.data(), std::size_t(nr * rb), std::size_t(r0 * rb));
  }
}

DeviceWeight DeviceWeight::random(DType dt, int64_t rows, int64_t cols, uint64_t seed, float scale) {
  DeviceWeight w;
  w.dtype_ = dt;
  w.rows_ = rows;
  w.cols_ = cols;
  w.buf_.allocate(std::size_t(rows * dtype_row_bytes(dt, cols)));
  fill_random(w.buf_.data(), dt, rows * cols, seed, scale, nullptr);
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

Gemm::Gemm(cudaStream_t stream) : stream_(stream) {
  cublas_check(cublasCreate(&handle_), "cublasCreate");
  cublas_check(cublasSetStream(handle_, stream_), "cublasSetStream");
}

Gemm::~Gemm() {
  if (handle_) cublasDestroy(handle_);
}

void Gemm::widen_to_f32(const void* w, DType dt, int64_t cols, int64_t r0, int64_t nr, float* out) {
  const int64_t rb = dtype_row_bytes(dt, cols);
  const char* src = static_cast<const char*>(w) + r0 * rb;
  switch (dt) {
    case DType::F32:
      LOOM_CUDA_CHECK(cudaMemcpyAsync(out, src, std::size_t(nr * rb), cudaMemcpyDeviceToDevice, stream_));
      break;
    case DType::Q8_0: dequantize_q8_0(src, nr, cols, out, stream_); break;
    case DType::F16:
    case DType::BF16: {
      // Row i of the widened block is the "embedding" of token i.
      std::vector<int32_t> idx(static_cast<std::size_t>(nr));
      for (int64_t i = 0; i < nr; ++i) idx[std::size_t(i)] = int32_t(i);
      DeviceBuffer didx(idx.size() * sizeof(int32_t));
      didx.upload(idx.data(), idx.size() * sizeof(int32_t));
      embed_rows(src, dt, cols, didx.as<int32_t>(), nr, out, stream_);
      LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // didx dies here
      break;
    }
    default:  // the block types reach the GPU dequantized to f32 (CudaDevice::upload)
      fail("GPU GEMM: no path for ", dtype_name(dt), " weights (upload them through CudaDevice, which widens them)");
  }
}

void Gemm::matmul(const float* x, int64_t n, int64_t ldx, const void* wdata, DType dt, int64_t rows, int64_t cols,
                  float* y, int64_t ldy, bool accumulate, GemmPrecision precision) {
  if (n <= 0 || rows <= 0) return;
  LOOM_CHECK(ldx >= cols && ldy >= rows, "ldx=", ldx, " cols=", cols, " ldy=", ldy, " rows=", rows);
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Row-major y[n, rows] = x[n, cols] W^T is column-major y^T[rows, n] = W[rows, cols] x^T:
  // W (row-major [rows, cols] = column-major [cols, rows], ld cols) transposed, x as is.
  const bool half = dt == DType::F16 || dt == DType::BF16;
  if (half && precision == GemmPrecision::Native) {
    act_.reserve(std::size_t(n * cols) * 2);
    uint16_t* xa = act_.as<uint16_t>();
    // Pack x into [n, cols] contiguous (ldx may exceed cols), rounded to the weight dtype.
    for (int64_t i = 0; i < n; ++i) {
      if (ldx == cols) {
        (dt == DType::BF16 ? convert_f32_to_bf16 : convert_f32_to_f16)(x, xa, n * cols, stream_);
        break;
      }
      (dt == DType::BF16 ? convert_f32_to_bf16 : convert_f32_to_f16)(x + i * ldx, xa + i * cols, cols, stream_);
    }
    const cudaDataType_t t = dt == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
    cublas_check(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    cublas_check(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(n), int(cols), &one, wdata, t,
                              int(cols), xa, t, int(cols), &beta, y, CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
    return;
  }
  cublas_check(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  if (dt == DType::F32) {
    cublas_check(cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(n), int(cols), &one,
                             static_cast<const float*>(wdata), int(cols), x, int(ldx), &beta, y, int(ldy)),
                 "cublasSgemm");
    return;
  }
  // Widen row blocks of W to f32 scratch, one Sgemm per block (output rows [r0, r0 + nr)).
  const int64_t block_rows = std::max<int64_t>(1, int64_t(kWideScratchBytes / (std::size_t(cols) * 4)));
  wide_.reserve(std::size_t(std::min(rows, block_rows) * cols) * 4);
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t nr = std::min(block_rows, rows - r0);
    widen_to_f32(wdata, dt, cols, r0, nr, wide_.as<float>());
    cublas_check(cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, int(nr), int(n), int(cols), &one, wide_.as<float>(),
                             int(cols), x, int(ldx), &beta, y + r0, int(ldy)),
                 "cublasSgemm (widened)");
  }
}

void Gemm::gemm_bf16(const uint16_t* x, int64_t n, const uint16_t* w, int64_t rows, int64_t cols, float* y) {
  const float one = 1.0f, zero = 0.0f;
  cublas_check(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  cublas_check(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(n), int(cols), &one, w, CUDA_R_16BF,
                            int(cols), x, CUDA_R_16BF, int(cols), &zero, y, CUDA_R_32F, int(rows), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx (bf16)");
}

}  // namespace loom::gpu
