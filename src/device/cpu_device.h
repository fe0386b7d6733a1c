// CpuDevice: the Device (device.h) of the CPU engine. Memory is host memory (64-byte aligned,
// zero-filled, large blocks from anonymous mmap as core/buffer.h does), every op runs at once on
// the calling thread and the rank's ThreadPool, and each op is exactly the kernel call the CPU
// engine made before the seam existed (same kernels, same arguments, same split over threads), so
// the CPU engine's bits do not depend on the seam. Weights are computed on their views: upload()
// copies nothing.
#pragma once

#include <memory>

#include "core/thread_pool.h"
#include "device/device.h"

namespace loom {

class CpuDevice : public Device {
 public:
  // `pool` (may be null: one thread) runs the matmuls and attention.
  explicit CpuDevice(ThreadPool* pool) : pool_(pool) {}

  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu"; }
  ThreadPool* pool() const { return pool_; }

  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void to_host(void* host, const void* src, std::size_t bytes) override;
  void from_host(void* dst, const void* host, std::size_t bytes) override;
  void fill_zero(void* dst, std::size_t bytes) override;
  void copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t width) override;
  void copy_spans(float* dst, const float* src, std::span<const CopySpan> spans) override;
  void transfer(float* dst, const float* src, std::span<const CopySpan> spans) override;
  void sync() override {}

  DeviceMatrix upload(const WeightView& w) override;
  DeviceMatrix wrap(const WeightView& on_device) override { return upload(on_device); }

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

 protected:
  // Called by every op before it touches device memory, and after (StrictCpuDevice in the tests
  // opens and closes its memory there).
  virtual void enter() {}
  virtual void leave() {}
  struct Op {
    explicit Op(CpuDevice* d) : d(d) { d->enter(); }
    ~Op() { d->leave(); }
    CpuDevice* d;
  };

 private:
  void one_job(const PagedKv& kv, const AttentionJob& j, float scale, ThreadPool* pool);
  ThreadPool* pool_;
};

// A CPU device over `pool`, for callers that own no device (tests, the single-sequence generator).
std::unique_ptr<Device> make_cpu_device(ThreadPool* pool);

}  // namespace loom
