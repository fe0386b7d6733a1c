// CudaDevice: the Device (device/device.h) of one CUDA GPU, for one rank.
//
// Memory: cudaMalloc'd and zero-filled. Queue: one CUDA stream, the rank's stream of a shared-GPU
// local world (gpu/cuda/shared_gpu.h rank_stream(), so the communicator's fence orders the rank's
// ops and its collectives) when the device is made on such a rank thread, else a stream of its own.
// Metadata (positions, token ids, page tables, spans, attention jobs) travels through a pinned
// staging ring: copied into pinned host memory, then cudaMemcpyAsync on the stream, so a call
// returns without waiting and the caller may reuse its arrays at once.
//
// Ops and their numerics against the CPU device (tests/gpu/test_gpu_device.cpp checks each):
//   matmul    cuBLAS (gpu/cuda/gemm.h): f32 weights Sgemm without TF32 (summation order only);
//             bf16 / f16 weights on tensor cores with the activations rounded to the weight dtype
//             (GemmPrecision::Native; F32Activations widens the weights instead); q8_0 dequantized
//             to f32 per call. kernels::Numerics (the CPU's fast mode) does not apply.
//   rmsnorm, rope, swiglu, add, add_bias, embed: gpu/cuda/ops.h, double where the CPU reference
//             computes in double (the final f32 rounding may differ).
//   attention paged_attention (ops.h): all jobs of a call in one launch, long key sequences split
//             FlashDecoding-style and merged by LSE; f32 online softmax.
//   merge_attention, copies: bit for bit the CPU's (the merge mirrors kernels::merge_attention).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/gemm.h"

namespace loom::gpu {

struct CudaDeviceOptions {
  int ordinal = 0;  // the CUDA device
  GemmPrecision precision = GemmPrecision::Native;
  std::size_t staging_bytes = std::size_t(32) << 20;  // the pinned metadata ring
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(const CudaDeviceOptions& options = {});
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return name_; }
  cudaStream_t stream() const { return stream_; }
  int ordinal() const { return options_.ordinal; }

  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void to_host(void* host, const void* src, std::size_t bytes) override;
  void from_host(void* dst, const void* host, std::size_t bytes) override;
  void fill_zero(void* dst, std::size_t bytes) override;
  void copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t width) override;
  void copy_spans(float* dst, const float* src, std::span<const CopySpan> spans) override;
  void transfer(float* dst, const float* src, std::span<const CopySpan> spans) override;
  void sync() override;
  std::shared_ptr<void> pin_host(void* host, std::size_t bytes) override;

  DeviceMatrix upload(const WeightView& w) override;
  DeviceMatrix wrap(const WeightView& on_device) override;

  void matmul(const float* x, int64_t n, int64_t ldx, const DeviceMatrix& w, float* y, int64_t ldy, bool accumulate,
              kernels::Numerics numerics) override;
  void rmsnorm(float* out, const float* x, const float* weight, int64_t n, int64_t dim, float eps) override;
  void add(float* y, const float* x, int64_t n) override;
  void add_bias(float* x, int64_t n, int64_t ldx, const float* bias, int64_t cols) override;
  void swiglu(float* out, const float* gate, const float* up, int64_t n) override;
  void rope(float* x, int64_t n, int64_t ld, int n_heads, const int32_t* pos, const kernels::RopeParams& p) override;
  void embed(const DeviceMatrix& table, const int32_t* tokens, int64_t n, float* out, int64_t ldo) override;
  void attention(const PagedKv& kv, std::span<const AttentionJob> jobs, float scale) override;
  void merge_attention(const float* const* parts, const float* const* lses, int n_parts, int64_t n_rows,
                       int head_dim, float* out, float* out_lse) override;

  // Splits attention uses for a job of `items` (query, head) pairs among `total_items` in the
  // call, over `kv_end` keys, on a GPU of `sms` multiprocessors (FlashDecoding's split count: enough
  // thread blocks for about four per multiprocessor, ranges of at least 256 keys). Public for tests.
  static int attention_splits(int64_t total_items, int64_t kv_end, int sms);

 private:
  // Copies `bytes` of host memory to the device through the staging ring; returns the device
  // address (valid for work enqueued on the stream after this call).
  void* stage(const void* host, std::size_t bytes);

  CudaDeviceOptions options_;
  std::string name_;
  int sms_ = 1;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  std::unique_ptr<Gemm> gemm_;
  // The staging ring: pinned host bytes and their device mirror; the last few blobs staged (their
  // pinned copy is compared with a new one) and the ring's wrap count.
  void* pinned_ = nullptr;
  DeviceBuffer ring_;
  std::size_t ring_at_ = 0;
  struct Recent {
    std::size_t at = 0, bytes = 0;
    uint64_t generation = ~uint64_t(0);
  };
  std::array<Recent, 4> recent_{};
  std::size_t next_recent_ = 0;
  uint64_t generation_ = 0;
  // RoPE inverse frequencies of the last parameters used (host copy to compare, device copy).
  std::vector<float> inv_host_;
  DeviceBuffer inv_dev_;
  DeviceBuffer scratch_;  // paged attention's split partials
};

}  // namespace loom::gpu
