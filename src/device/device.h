// Device: where one rank's forward pass computes (ARCHITECTURE.md "One forward on any device").
//
// The stages (engine/stage.h) and the one layer loop (engine/rank_forward.h) never touch the
// numbers of a step themselves: they hold their activations, the KV pages and the weights on
// their rank's Device and call the ops below on them. What differs between the CPU engine and the
// GPU engine is this one seam:
//   CpuDevice  (device/cpu_device.h): host memory and the kernels of src/kernels, synchronous;
//              exactly the calls the CPU engine made before the seam existed, so its bits did not
//              change;
//   CudaDevice (gpu/cuda/cuda_device.h): cudaMalloc'd memory, one CUDA stream, cuBLAS for the GEMM
//              and the kernels of gpu/cuda/kernels.cu.
// gpu/device.h (make_device) picks one by --device.
//
// Memory model (what every op below assumes):
//   - Data pointers (activations, K/V pages, weights' `data`) are DEVICE memory: what allocate()
//     returned, on this device or on a peer rank's device of the same kind and GPU (ranks sharing
//     one GPU exchange through it, comm/rank_memory.h).
//   - Metadata (token ids, positions, page tables, copy spans, pointer arrays) is HOST memory, read
//     during the call: the device takes what it needs before the call returns, so the caller may
//     reuse or free it at once.
//   - Ops of one Device run in the order they are called (one queue, a CUDA stream). to_host()
//     returns when the bytes are on the host; sync() when everything called before is done. The
//     communicators take device pointers of their rank's device: a collective is called after the
//     ops that wrote its send buffer, and its fence (comm/rank_memory.h) orders the two.
//   - Thread-safety: one rank's thread calls the ops, except transfer(), which any thread may call
//     (Seesaw's tier copy threads, kv/kv_tier.h).
//
// Numerics: the CPU device is the reference (kernels.h states every kernel's contract and error
// bound against its naive reference). A GPU device keeps each op's contract; where its arithmetic
// differs (GEMM summation order; bf16/f16 activations rounded for the tensor cores) the op's
// comment in gpu/cuda/ says by how much, and tests/gpu checks it against the CPU device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/weight_view.h"
#include "kernels/kernels.h"

namespace loom {

enum class DeviceKind { Cpu, Cuda };

// A weight matrix (rows x cols, any weight dtype) or an f32 vector (rows = 1) as a device computes
// with it. The CPU device computes on `view` itself (no copy); a GPU device on `data`, its own
// copy in device memory (plain rows of view.dtype), kept alive by `keep`.
struct DeviceMatrix {
  WeightView view;                   // shape, dtype (and on the CPU, the operand)
  const void* data = nullptr;        // device memory (CPU: view.data)
  std::shared_ptr<const void> keep;  // owns `data` (null: the view's owner does)
  bool present() const { return data != nullptr; }
  int64_t rows() const { return view.rows; }
  int64_t cols() const { return view.cols; }
  DType dtype() const { return view.dtype; }
  // An f32 vector's values (norm weights, biases) on the device; null when absent.
  const float* f32() const { return static_cast<const float*>(data); }
};

// A contiguous run of floats to copy: [src + src_at, + n) -> [dst + dst_at, + n).
struct CopySpan {
  int64_t dst_at = 0, src_at = 0, n = 0;
};

// The paged K/V an attention call reads: a pool of pages of block_size positions x head_dim
// floats each (kv/kv_store.h), element (page p, offset o, d) at k[p * page_floats + o * head_dim + d].
struct PagedKv {
  const float* k = nullptr;
  const float* v = nullptr;
  int block_size = 0;
  int head_dim = 0;
  int64_t page_floats = 0;
};

// One call of kernels::attention's contract: the query rows of one sequence for a run of query
// heads that all read one KV head, whose key sequence is the pages listed in `pages`. Query t at
// position q_pos[t] attends keys [0, min(q_pos[t] + 1, kv_end)) of that sequence.
struct AttentionJob {
  const float* q = nullptr;         // [n_q] rows ldq floats apart, n_heads * head_dim each (device)
  int64_t ldq = 0;
  int64_t n_q = 0;
  const int32_t* q_pos = nullptr;   // [n_q] HOST
  const int32_t* pages = nullptr;   // [n_pages] HOST: the page of each block of the key sequence
  int64_t n_pages = 0;
  int64_t kv_end = 0;
  int n_heads = 0;
  float* out = nullptr;             // [n_q] rows ldo apart (device)
  int64_t ldo = 0;
  float* lse = nullptr;             // optional: [n_q] rows ld_lse floats apart, n_heads each (device)
  int64_t ld_lse = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  // "cpu" or "cuda:0 (NVIDIA H200)".
  virtual std::string name() const = 0;

  // ---- memory ----
  // `bytes` of zero-filled device memory, 64-byte aligned (0 bytes: nullptr).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  // Device to device.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // Device to host: returns when the bytes are there.
  virtual void to_host(void* host, const void* src, std::size_t bytes) = 0;
  // Host to device: the host bytes may be reused when it returns.
  virtual void from_host(void* dst, const void* host, std::size_t bytes) = 0;
  virtual void fill_zero(void* dst, std::size_t bytes) = 0;
  // rows x width floats, row r from src + r * lds to dst + r * ldd (device to device).
  virtual void copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t width) = 0;
  // Every span, device to device (spans may not overlap in dst).
  virtual void copy_spans(float* dst, const float* src, std::span<const CopySpan> spans) = 0;
  // Like copy_spans, but either side may be host memory, from any thread, and it returns when the
  // copies are done: the CPU KV tier's swaps (kv/kv_tier.h).
  virtual void transfer(float* dst, const float* src, std::span<const CopySpan> spans) = 0;
  // Waits for everything called before.
  virtual void sync() = 0;
  // Host memory that transfer() will copy to and from often (Seesaw's CPU tier): a GPU pins it
  // (page-locked, so its copies run at the link's speed without a bounce buffer) until the handle
  // it returns is released; the CPU does nothing (null). A range another handle pins already stays
  // pinned by that one (copies stay correct either way; only their speed depends on it).
  virtual std::shared_ptr<void> pin_host(void* host, std::size_t bytes) { return nullptr; }

  // ---- weights ----
  // The device's operand for `w` (plain rows or row tiles, any dtype; a vector: rows 1, f32). The
  // CPU device keeps the view (the caller keeps its bytes alive); a GPU device copies it.
  virtual DeviceMatrix upload(const WeightView& w) = 0;
  // A matrix whose bytes already are device memory of this device (plain rows at view.data, e.g.
  // SiDP's fetched FFN layer): no copy.
  virtual DeviceMatrix wrap(const WeightView& on_device) = 0;

  // ---- compute (shapes and contracts of kernels/kernels.h) ----
  // y[n, w.rows] (ldy apart) = x[n, w.cols] (ldx apart) . W^T, or += when accumulate.
  virtual void matmul(const float* x, int64_t n, int64_t ldx, const DeviceMatrix& w, float* y, int64_t ldy,
                      bool accumulate, kernels::Numerics numerics) = 0;
  virtual void rmsnorm(float* out, const float* x, const float* weight, int64_t n, int64_t dim, float eps) = 0;
  // y[i] += x[i]
  virtual void add(float* y, const float* x, int64_t n) = 0;
  virtual void add_bias(float* x, int64_t n, int64_t ldx, const float* bias, int64_t cols) = 0;
  virtual void swiglu(float* out, const float* gate, const float* up, int64_t n) = 0;
  // RoPE in place on x[n, n_heads * head_dim] (rows ld apart), token t at pos[t] (HOST).
  virtual void rope(float* x, int64_t n, int64_t ld, int n_heads, const int32_t* pos,
                    const kernels::RopeParams& p) = 0;
  // out[t, :] = row tokens[t] (HOST) of `table` as f32, rows ldo apart.
  virtual void embed(const DeviceMatrix& table, const int32_t* tokens, int64_t n, float* out, int64_t ldo) = 0;
  // Every job (see AttentionJob), scale applied to the scores.
  virtual void attention(const PagedKv& kv, std::span<const AttentionJob> jobs, float scale) = 0;
  // kernels::merge_attention: parts / lses are HOST arrays of n_parts device pointers.
  virtual void merge_attention(const float* const* parts, const float* const* lses, int n_parts, int64_t n_rows,
                               int head_dim, float* out, float* out_lse) = 0;
};

// Device memory of one Device, n elements of T (zero-filled when it grows), freed with it.
// Grows only: resize(n) to n <= size() keeps the buffer (and its contents).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(Device& d, std::size_t n = 0) : dev_(&d) { resize(n); }
  ~DeviceArray() { reset(); }
  DeviceArray(DeviceArray&& o) noexcept { *this = std::move(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      reset();
      dev_ = o.dev_;
      p_ = o.p_;
      n_ = o.n_;
      o.p_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void bind(Device& d) {
    if (dev_ != &d) {
      reset();
      dev_ = &d;
    }
  }
  void resize(std::size_t n) {
    if (n <= n_) return;
    reset();
    p_ = static_cast<T*>(dev_->allocate(n * sizeof(T)));
    n_ = n;
  }
  void reset() noexcept {
    if (p_) dev_->deallocate(p_, n_ * sizeof(T));
    p_ = nullptr;
    n_ = 0;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  std::size_t size() const { return n_; }
  Device* device() const { return dev_; }

 private:
  Device* dev_ = nullptr;
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace loom
