#include "gpu/cuda/cuda_util.h"

namespace loom::gpu {

void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  fail("CUDA error ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ") in ", what, " at ", file, ":", line);
}

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA kernel ", kernel, " failed to launch: ", cudaGetErrorString(e));
}

void DeviceBuffer::allocate(std::size_t bytes) {
  reset();
  if (bytes == 0) return;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("cudaMalloc of ", bytes, " bytes failed: ", cudaGetErrorString(e));
  }
  p_ = p;
  bytes_ = bytes;
}

void DeviceBuffer::reset() noexcept {
  if (p_ != nullptr) (void)cudaFree(p_);
  p_ = nullptr;
  bytes_ = 0;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  LOOM_CHECK(offset <= bytes_ && bytes <= bytes_ - offset, "upload of ", bytes, " bytes at ", offset, " into ", bytes_);
  if (bytes) LOOM_CUDA_CHECK(cudaMemcpy(static_cast<char*>(p_) + offset, host, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  LOOM_CHECK(offset <= bytes_ && bytes <= bytes_ - offset, "download of ", bytes, " bytes at ", offset, " from ", bytes_);
  if (bytes) LOOM_CUDA_CHECK(cudaMemcpy(host, static_cast<const char*>(p_) + offset, bytes, cudaMemcpyDeviceToHost));
}

Stream::Stream() { LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) (void)cudaStreamDestroy(s_);
}
void Stream::sync() const { LOOM_CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event() { LOOM_CUDA_CHECK(cudaEventCreate(&e_)); }
Event::~Event() {
  if (e_) (void)cudaEventDestroy(e_);
}
void Event::record(cudaStream_t s) { LOOM_CUDA_CHECK(cudaEventRecord(e_, s)); }
void Event::sync() const { LOOM_CUDA_CHECK(cudaEventSynchronize(e_)); }
float Event::ms_since(const Event& start) const {
  float ms = 0;
  LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

}  // namespace loom::gpu
