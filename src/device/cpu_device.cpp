#include "device/cpu_device.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"

namespace loom {

namespace {

// Live allocations of every CpuDevice: AlignedBuffer's storage rules (64-byte aligned, zeroed,
// big blocks mmap'd on huge pages) without a header in front of the block.
struct Blocks {
  std::mutex mu;
  std::unordered_map<void*, std::unique_ptr<AlignedBuffer<uint8_t>>> live;
};
Blocks& blocks() {
  static Blocks* b = new Blocks;  // never destroyed: devices may outlive static destruction order
  return *b;
}

}  // namespace

void* CpuDevice::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  auto b = std::make_unique<AlignedBuffer<uint8_t>>(bytes);
  void* p = b->data();
  Blocks& all = blocks();
  std::lock_guard<std::mutex> lk(all.mu);
  all.live.emplace(p, std::move(b));
  return p;
}

void CpuDevice::deallocate(void* p, std::size_t) noexcept {
  if (!p) return;
  std::unique_ptr<AlignedBuffer<uint8_t>> b;
  Blocks& all = blocks();
  {
    std::lock_guard<std::mutex> lk(all.mu);
    auto it = all.live.find(p);
    if (it == all.live.end()) return;
    b = std::move(it->second);
    all.live.erase(it);
  }
}

void CpuDevice::copy(void* dst, const void* src, std::size_t bytes) {
  const Op op(this);
  if (bytes) std::memmove(dst, src, bytes);
}

void CpuDevice::to_host(void* host, const void* src, std::size_t bytes) {
  const Op op(this);
  if (bytes) std::memcpy(host, src, bytes);
}

void CpuDevice::from_host(void* dst, const void* host, std::size_t bytes) {
  const Op op(this);
  if (bytes) std::memcpy(dst, host, bytes);
}

void CpuDevice::fill_zero(void* dst, std::size_t bytes) {
  const Op op(this);
  if (bytes) std::memset(dst, 0, bytes);
}

void CpuDevice::copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t width) {
  const Op op(this);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * ldd, src + r * lds, size_t(width) * sizeof(float));
}

void CpuDevice::copy_spans(float* dst, const float* src, std::span<const CopySpan> spans) {
  const Op op(this);
  for (const CopySpan& s : spans) std::memcpy(dst + s.dst_at, src + s.src_at, size_t(s.n) * sizeof(float));
}

void CpuDevice::transfer(float* dst, const float* src, std::span<const CopySpan> spans) {
  const Op op(this);
  for (const CopySpan& s : spans) std::memcpy(dst + s.dst_at, src + s.src_at, size_t(s.n) * sizeof(float));
}

DeviceMatrix CpuDevice::upload(const WeightView& w) {
  DeviceMatrix m;
  m.view = w;
  m.data = w.data;
  return m;
}

void CpuDevice::matmul(const float* x, int64_t n, int64_t ldx, const DeviceMatrix& w, float* y, int64_t ldy,
                       bool accumulate, kernels::Numerics numerics) {
  const Op op(this);
  kernels::matmul(x, n, ldx, w.view, y, ldy, pool_, accumulate, numerics);
}

void CpuDevice::rmsnorm(float* out, const float* x, const float* weight, int64_t n, int64_t dim, float eps) {
  const Op op(this);
  kernels::rmsnorm(out, x, weight, n, dim, eps);
}

void CpuDevice::add(float* y, const float* x, int64_t n) {
  const Op op(this);
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuDevice::add_bias(float* x, int64_t n, int64_t ldx, const float* bias, int64_t cols) {
  const Op op(this);
  kernels::add_bias(x, n, ldx, bias, cols);
}

void CpuDevice::swiglu(float* out, const float* gate, const float* up, int64_t n) {
  const Op op(this);
  kernels::swiglu(out, gate, up, n);
}

void CpuDevice::rope(float* x, int64_t n, int64_t ld, int n_heads, const int32_t* pos, const kernels::RopeParams& p) {
  const Op op(this);
  kernels::rope(x, n, ld, n_heads, pos, p);
}

void CpuDevice::embed(const DeviceMatrix& table, const int32_t* tokens, int64_t n, float* out, int64_t ldo) {
  const Op op(this);
  const WeightView& w = table.view;
  for (int64_t t = 0; t < n; ++t) {
    const int32_t tok = tokens[t];
    LOOM_CHECK(tok >= 0 && tok < w.rows, "token id ", tok, " outside the vocabulary of ", w.rows);
    dequantize_row(w.dtype, w.row(tok), out + t * ldo, w.cols);
  }
}

void CpuDevice::one_job(const PagedKv& kv, const AttentionJob& j, float scale, ThreadPool* pool) {
  kernels::KvView view;
  view.k = kv.k;
  view.v = kv.v;
  view.block_table = j.pages;
  view.block_size = kv.block_size;
  view.block_stride = kv.page_floats;
  view.head_stride = 0;
  view.pos_stride = kv.head_dim;
  const kernels::AttentionShape shape{j.n_heads, 1, kv.head_dim, scale};
  if (!j.lse || j.ld_lse == j.n_heads) {
    kernels::attention(j.q, j.n_q, j.ldq, j.q_pos, view, 0, j.kv_end, shape, j.out, j.ldo, j.lse, pool);
    return;
  }
  // The kernel writes lse rows n_heads apart; the job wants them ld_lse apart.
  thread_local std::vector<float> lse;
  lse.resize(size_t(j.n_q) * size_t(j.n_heads));
  kernels::attention(j.q, j.n_q, j.ldq, j.q_pos, view, 0, j.kv_end, shape, j.out, j.ldo, lse.data(), pool);
  for (int64_t t = 0; t < j.n_q; ++t)
    std::memcpy(j.lse + t * j.ld_lse, lse.data() + t * j.n_heads, size_t(j.n_heads) * sizeof(float));
}

void CpuDevice::attention(const PagedKv& kv, std::span<const AttentionJob> jobs, float scale) {
  const Op op(this);
  // Long prefills split inside the kernel over (query, head); the small jobs (decodes) are spread
  // over the pool as whole calls. Each (query, head) is computed the same way either way.
  const int nth = pool_ ? pool_->size() : 1;
  std::vector<size_t> small;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (nth > 1 && jobs[i].n_q * int64_t(jobs[i].n_heads) >= 4 * int64_t(nth)) {
      one_job(kv, jobs[i], scale, pool_);
    } else {
      small.push_back(i);
    }
  }
  if (small.empty()) return;
  std::atomic<size_t> next{0};
  parallel_run(small.size() > 1 ? pool_ : nullptr, [&](int, int) {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < small.size();)
      one_job(kv, jobs[small[i]], scale, nullptr);
  });
}

void CpuDevice::merge_attention(const float* const* parts, const float* const* lses, int n_parts, int64_t n_rows,
                                int head_dim, float* out, float* out_lse) {
  const Op op(this);
  kernels::merge_attention(parts, lses, n_parts, n_rows, head_dim, out, out_lse);
}

std::unique_ptr<Device> make_cpu_device(ThreadPool* pool) { return std::make_unique<CpuDevice>(pool); }

}  // namespace loom
