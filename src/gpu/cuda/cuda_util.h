// CUDA plumbing for the GPU backend: error checks that throw loom::Error, and RAII owners of
// device memory, streams and events. Only built with LOOM_HAVE_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/error.h"

namespace loom::gpu {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line);

#define LOOM_CUDA_CHECK(call)                                                          \
  do {                                                                                 \
    const cudaError_t loom_cuda_e_ = (call);                                           \
    if (loom_cuda_e_ != cudaSuccess) ::loom::gpu::throw_cuda_error(loom_cuda_e_, #call, __FILE__, __LINE__); \
  } while (0)

// Throws the last launch error (cudaGetLastError) naming the kernel.
void check_launch(const char* kernel);

// Device memory: cudaMalloc'd bytes, freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) { allocate(bytes); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Frees what it held and allocates `bytes` (0: holds nothing). Contents are undefined.
  void allocate(std::size_t bytes);
  // Grows to at least `bytes` (contents lost when it grows).
  void reserve(std::size_t bytes) {
    if (bytes > bytes_) allocate(bytes);
  }
  void reset() noexcept;

  void* data() { return p_; }
  const void* data() const { return p_; }
  template <class T>
  T* as() {
    return static_cast<T*>(p_);
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(p_);
  }
  std::size_t bytes() const { return bytes_; }

  // Synchronous copies (the default stream's semantics for pageable host memory).
  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// A non-blocking CUDA stream, destroyed with its owner.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void sync() const;

 private:
  cudaStream_t s_ = nullptr;
};

// A CUDA event with timing, for the benchmark and stream ordering.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s);
  void sync() const;
  // Milliseconds from `start` to this event (both recorded and complete).
  float ms_since(const Event& start) const;

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace loom::gpu
