// Weights in device memory and the GEMM over them (cuBLAS).
//
// DeviceWeight uploads a WeightView once (plain rows or the CPU engine's row tiles, read back
// row by row into plain rows; f32, f16 and bf16 kept as they are, q8_0 kept as q8_0 blocks:
// 34 bytes per 32 weights, dequantized per call by a kernel into f32 scratch, so q8_0 computes
// with exactly the weights dequantize_row gives).
//
// Gemm: y[n, rows] = x[n, cols] . W^T (+ y when accumulating), x and y f32 row-major on the device.
//   f32   cublasSgemm, CUBLAS_PEDANTIC_MATH (no TF32): error only from f32 summation order,
//         |y - y_ref| <= (cols + 8) 2^-24 sum_k |x_k w_k|, the CPU kernels' bound.
//   f16, bf16  activations rounded to the weight dtype (one conversion kernel), cublasGemmEx with
//         f32 accumulation and f32 output (tensor cores). Rounding x costs a relative 2^-11 (f16)
//         or 2^-8 (bf16) per product: |y - y_ref| <= (u_x + (cols + 8) 2^-24) sum_k |x_k w_k|
//         with u_x = 2^-11 / 2^-8. This is the GPU's one deliberate numerics change against the
//         CPU engine (which keeps f32 activations); GemmPrecision::F32Activations avoids it by
//         widening W to f32 in scratch (exact weights, the f32 bound, slower).
//   q8_0  dequantize to f32 scratch, then the f32 path.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/weight_view.h"
#include "gpu/cuda/cuda_util.h"

namespace loom::gpu {

class DeviceWeight {
 public:
  DeviceWeight() = default;
  // Copies w's rows (any layout read_weight_row understands) into device memory, plain rows.
  explicit DeviceWeight(const WeightView& w);
  // rows x cols of dtype dt (f32, f16, bf16) filled on the device with fill_random (ops.h).
  static DeviceWeight random(DType dt, int64_t rows, int64_t cols, uint64_t seed, float scale);
  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  const void* data() const { return buf_.data(); }
  std::size_t bytes() const { return buf_.bytes(); }
  bool empty() const { return rows_ == 0; }

 private:
  DeviceBuffer buf_;
  DType dtype_ = DType::F32;
  int64_t rows_ = 0, cols_ = 0;
};

enum class GemmPrecision {
  Native,          // f16/bf16 weights: activations rounded to the weight dtype, tensor cores
  F32Activations,  // every dtype widened to f32 (exact weights and activations), Sgemm
};

// One cuBLAS handle bound to one stream, with its scratch (activation copies, dequantized
// weights). Not thread-safe: one per rank thread.
class Gemm {
 public:
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[n, w.rows] (rows ldy floats apart) = x[n, w.cols] (ldx apart) . W^T, or += when accumulate.
  void matmul(const float* x, int64_t n, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy,
              bool accumulate = false, GemmPrecision precision = GemmPrecision::Native) {
    matmul(x, n, ldx, w.data(), w.dtype(), w.rows(), w.cols(), y, ldy, accumulate, precision);
  }
  // The same over raw device bytes: W [rows, cols] of dtype dt in plain contiguous rows at w.
  void matmul(const float* x, int64_t n, int64_t ldx, const void* w, DType dt, int64_t rows, int64_t cols, float* y,
              int64_t ldy, bool accumulate, GemmPrecision precision);
  // The bf16 x bf16 -> f32 GEMM alone (both operands already bf16, row-major like matmul): what
  // bench_gpu measures as the device's GEMM peak.
  void gemm_bf16(const uint16_t* x, int64_t n, const uint16_t* w, int64_t rows, int64_t cols, float* y);

  cudaStream_t stream() const { return stream_; }

 private:
  void widen_to_f32(const void* w, DType dt, int64_t cols, int64_t r0, int64_t nr, float* out);
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer act_, wide_;
};

}  // namespace loom::gpu
