#include "gpu/cuda/shared_gpu.h"

#include <vector>

#include "comm/communicator.h"
#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/ops.h"

namespace loom::gpu {
namespace {

thread_local cudaStream_t t_rank_stream = nullptr;

class CudaRankMemory final : public RankMemory {
 public:
  explicit CudaRankMemory(int device) : device_(device) {
    LOOM_CUDA_CHECK(cudaSetDevice(device_));
    stream_ = std::make_unique<Stream>();
    t_rank_stream = stream_->get();
  }
  ~CudaRankMemory() override {
    if (t_rank_stream == stream_->get()) t_rank_stream = nullptr;
  }
  std::string_view name() const override { return "cuda"; }

  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_->get()));
  }

  void reduce_sum(float* out, const float* const* in, int n_inputs, std::size_t count) override {
    bool device = is_device_pointer(out);
    for (int i = 0; i < n_inputs && device; ++i) device = is_device_pointer(in[i]);
    if (device && n_inputs <= kMaxPointerArgs) {
      gpu::reduce_sum_rank_order(out, in, n_inputs, int64_t(count), stream_->get());
      return;
    }
    fence();  // earlier copies into these buffers complete first
    loom::reduce_sum_rank_order(out, in, n_inputs, count);
  }

  void fence() override { stream_->sync(); }

 private:
  int device_;
  std::unique_ptr<Stream> stream_;
};

}  // namespace

RankMemoryFactory shared_gpu_memory(int device) {
  return [device](int) -> std::unique_ptr<RankMemory> { return std::make_unique<CudaRankMemory>(device); };
}

cudaStream_t rank_stream() { return t_rank_stream; }

bool is_device_pointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

}  // namespace loom::gpu
