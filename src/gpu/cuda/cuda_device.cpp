#include "gpu/cuda/cuda_device.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/log.h"
#include "core/weight_tiles.h"
#include "gpu/cuda/ops.h"
#include "gpu/cuda/shared_gpu.h"

namespace loom::gpu {

namespace {

static_assert(sizeof(CopySpan) == sizeof(DeviceSpan) && offsetof(CopySpan, src_at) == offsetof(DeviceSpan, src_at) &&
                  offsetof(CopySpan, n) == offsetof(DeviceSpan, n),
              "CopySpan and DeviceSpan share one layout");

constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

// A stream per (thread, GPU) for transfer(): the CPU tier's copy threads are not rank threads.
cudaStream_t thread_stream(int ordinal) {
  thread_local std::unordered_map<int, cudaStream_t> streams;
  auto it = streams.find(ordinal);
  if (it != streams.end()) return it->second;
  cudaStream_t s = nullptr;
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  streams.emplace(ordinal, s);  // lives as long as the thread (a handful of tier threads)
  return s;
}

}  // namespace

CudaDevice::CudaDevice(const CudaDeviceOptions& options) : options_(options) {
  LOOM_CUDA_CHECK(cudaSetDevice(options_.ordinal));
  cudaDeviceProp prop{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, options_.ordinal));
  name_ = cat("cuda:", options_.ordinal, " (", prop.name, ")");
  sms_ = std::max(1, prop.multiProcessorCount);
  stream_ = rank_stream();  // the shared-GPU rank's stream, when this thread is such a rank
  if (!stream_) {
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    own_stream_ = true;
  }
  gemm_ = std::make_unique<Gemm>(stream_);
  LOOM_CUDA_CHECK(cudaMallocHost(&pinned_, options_.staging_bytes));
  ring_.allocate(options_.staging_bytes);
}

CudaDevice::~CudaDevice() {
  cudaStreamSynchronize(stream_);
  gemm_.reset();
  if (pinned_) cudaFreeHost(pinned_);
  if (own_stream_) cudaStreamDestroy(stream_);
}

void* CudaDevice::stage(const void* host, std::size_t bytes) {
  if (bytes == 0) return ring_.data();
  const std::size_t need = aligned(bytes);
  if (need > ring_.bytes()) {  // larger than the ring: wait, then a buffer of its own
    sync();
    DeviceBuffer big(need);
    big.upload(host, bytes);
    void* p = big.data();
    // Keep it until the next large staging (work that reads it is enqueued right after).
    static thread_local std::vector<DeviceBuffer> kept;
    kept.clear();
    kept.push_back(std::move(big));
    return p;
  }
  // The same bytes staged again since the ring last wrapped (every layer's RoPE positions, the V
  // spans after the K spans of a KV write): the device copy is still there.
  for (const Recent& r : recent_)
    if (r.generation == generation_ && r.bytes == bytes &&
        std::memcmp(static_cast<const char*>(pinned_) + r.at, host, bytes) == 0)
      return static_cast<char*>(ring_.data()) + r.at;
  if (ring_at_ + need > ring_.bytes()) {  // wrap: what read the ring's start is done
    sync();
    ring_at_ = 0;
    ++generation_;
  }
  char* pin = static_cast<char*>(pinned_) + ring_at_;
  char* dev = static_cast<char*>(ring_.data()) + ring_at_;
  std::memcpy(pin, host, bytes);
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dev, pin, bytes, cudaMemcpyHostToDevice, stream_));
  recent_[next_recent_++ % recent_.size()] = Recent{ring_at_, bytes, generation_};
  ring_at_ += need;
  return dev;
}

void* CudaDevice::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    std::size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail("GPU ", name_, ": cannot allocate ", bytes, " bytes (", free_b, " of ", total_b, " bytes free): ",
         cudaGetErrorString(e));
  }
  LOOM_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return p;
}

void CudaDevice::deallocate(void* p, std::size_t) noexcept {
  if (!p) return;
  cudaStreamSynchronize(stream_);
  cudaFree(p);
}

void CudaDevice::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes) LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
}

void CudaDevice::to_host(void* host, const void* src, std::size_t bytes) {
  if (bytes) LOOM_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDefault, stream_));
  sync();
}

void CudaDevice::from_host(void* dst, const void* host, std::size_t bytes) {
  if (!bytes) return;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyDefault, stream_));
  sync();  // the host bytes may be pinned (then the copy is truly asynchronous): wait for it
}

void CudaDevice::fill_zero(void* dst, std::size_t bytes) {
  if (bytes) LOOM_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
}

void CudaDevice::copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t width) {
  if (rows <= 0 || width <= 0) return;
  LOOM_CUDA_CHECK(cudaMemcpy2DAsync(dst, std::size_t(ldd) * 4, src, std::size_t(lds) * 4, std::size_t(width) * 4,
                                    std::size_t(rows), cudaMemcpyDefault, stream_));
}

void CudaDevice::copy_spans(float* dst, const float* src, std::span<const CopySpan> spans) {
  if (spans.empty()) return;
  const auto* d = static_cast<const DeviceSpan*>(stage(spans.data(), spans.size_bytes()));
  gpu::copy_spans(dst, src, d, int64_t(spans.size()), stream_);
}

void CudaDevice::transfer(float* dst, const float* src, std::span<const CopySpan> spans) {
  if (spans.empty()) return;
  LOOM_CUDA_CHECK(cudaSetDevice(options_.ordinal));
  cudaStream_t s = thread_stream(options_.ordinal);
  for (const CopySpan& sp : spans)
    if (sp.n > 0)
      LOOM_CUDA_CHECK(cudaMemcpyAsync(dst + sp.dst_at, src + sp.src_at, std::size_t(sp.n) * 4, cudaMemcpyDefault, s));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaDevice::sync() { LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

std::shared_ptr<void> CudaDevice::pin_host(void* host, std::size_t bytes) {
  if (!host || bytes == 0) return nullptr;
  const cudaError_t e = cudaHostRegister(host, bytes, cudaHostRegisterPortable);
  if (e == cudaSuccess) return std::shared_ptr<void>(host, [](void* p) { cudaHostUnregister(p); });
  (void)cudaGetLastError();
  if (e != cudaErrorHostMemoryAlreadyRegistered)  // not fatal: pageable copies are slower, not wrong
    log_warn("GPU ", name_, ": could not pin ", bytes, " bytes of host memory for the CPU KV tier (",
             cudaGetErrorString(e), "); its copies go through pageable memory");
  return nullptr;
}

DeviceMatrix CudaDevice::upload(const WeightView& w) {
  DeviceMatrix m;
  m.view = w;
  if (!w.present() || w.rows * w.cols == 0) return m;
  if (w.dtype != DType::F32 && w.dtype != DType::F16 && w.dtype != DType::BF16 && w.dtype != DType::Q8_0) {
    // A type the GEMM has no path for (the K-quants, Q4_0, ...): dequantized once, exactly as the
    // CPU's dequantize_row, and computed in f32.
    std::vector<float> f(std::size_t(w.rows * w.cols));
    std::vector<uint8_t> row(std::size_t(w.row_bytes()));
    for (int64_t r = 0; r < w.rows; ++r) {  // a TP column shard may start inside a super-block
      read_weight_row(w, r, row.data());
      dequantize_span(w.dtype, row.data(), w.col_offset, f.data() + r * w.cols, w.cols);
    }
    const WeightView wide{f.data(), DType::F32, w.rows, w.cols, w.cols * int64_t(sizeof(float))};
    auto dw = std::make_shared<DeviceWeight>(wide);
    m.view = wide;
    m.view.data = nullptr;  // the host copy dies here; the device's is `data`
    m.data = dw->data();
    m.keep = std::move(dw);
    return m;
  }
  auto dw = std::make_shared<DeviceWeight>(w);
  m.data = dw->data();
  m.keep = std::move(dw);
  return m;
}

DeviceMatrix CudaDevice::wrap(const WeightView& v) {
  LOOM_CHECK(!v.tiled() && (v.rows <= 1 || v.row_stride == dtype_row_bytes(v.dtype, v.cols)),
             "a GPU computes on contiguous plain rows: the view of ", v.rows, " x ", v.cols, " is tiled or strided");
  DeviceMatrix m;
  m.view = v;
  m.data = v.data;
  return m;
}

void CudaDevice::matmul(const float* x, int64_t n, int64_t ldx, const DeviceMatrix& w, float* y, int64_t ldy,
                        bool accumulate, kernels::Numerics) {
  if (n <= 0) return;
  LOOM_CHECK(w.present(), "matmul with an absent weight");
  gemm_->matmul(x, n, ldx, w.data, w.dtype(), w.rows(), w.cols(), y, ldy, accumulate, options_.precision);
}

void CudaDevice::rmsnorm(float* out, const float* x, const float* weight, int64_t n, int64_t dim, float eps) {
  gpu::rmsnorm(out, x, weight, n, dim, eps, stream_);
}

void CudaDevice::add(float* y, const float* x, int64_t n) { add_inplace(y, x, n, stream_); }

void CudaDevice::add_bias(float* x, int64_t n, int64_t ldx, const float* bias, int64_t cols) {
  gpu::add_bias(x, n, ldx, bias, cols, stream_);
}

void CudaDevice::swiglu(float* out, const float* gate, const float* up, int64_t n) {
  gpu::swiglu(out, gate, up, n, stream_);
}

void CudaDevice::rope(float* x, int64_t n, int64_t ld, int n_heads, const int32_t* pos, const kernels::RopeParams& p) {
  if (n <= 0 || n_heads <= 0) return;
  std::vector<float> inv(std::size_t(p.head_dim / 2));
  kernels::rope_inv_freq(p, inv.data());
  if (inv != inv_host_) {
    sync();  // kernels enqueued earlier may still read the old table
    inv_dev_.reserve(inv.size() * sizeof(float));
    inv_dev_.upload(inv.data(), inv.size() * sizeof(float));
    inv_host_ = std::move(inv);
  }
  const auto* dpos = static_cast<const int32_t*>(stage(pos, std::size_t(n) * sizeof(int32_t)));
  gpu::rope(x, n, ld, n_heads, p.head_dim, dpos, inv_dev_.as<float>(), p.interleaved, stream_);
}

void CudaDevice::embed(const DeviceMatrix& table, const int32_t* tokens, int64_t n, float* out, int64_t ldo) {
  if (n <= 0) return;
  LOOM_CHECK(ldo == table.cols(), "GPU embedding rows are ", table.cols(), " floats apart, not ", ldo);
  for (int64_t t = 0; t < n; ++t)
    LOOM_CHECK(tokens[t] >= 0 && tokens[t] < table.rows(), "token id ", tokens[t], " outside the vocabulary of ",
               table.rows());
  const auto* dtok = static_cast<const int32_t*>(stage(tokens, std::size_t(n) * sizeof(int32_t)));
  embed_rows(table.data, table.dtype(), table.cols(), dtok, n, out, stream_);
}

int CudaDevice::attention_splits(int64_t total_items, int64_t kv_end, int sms) {
  constexpr int64_t kMinKeys = 256, kMaxSplits = 64;
  if (kv_end <= kMinKeys) return 1;
  const int64_t want = (4 * int64_t(std::max(sms, 1)) + std::max<int64_t>(total_items, 1) - 1) /
                       std::max<int64_t>(total_items, 1);
  const int64_t by_len = (kv_end + kMinKeys - 1) / kMinKeys;
  return int(std::clamp<int64_t>(std::min(want, by_len), 1, kMaxSplits));
}

void CudaDevice::attention(const PagedKv& kv, std::span<const AttentionJob> jobs, float scale) {
  if (jobs.empty()) return;
  // One int32 array for every job's positions and pages, staged first; then the jobs.
  std::vector<int32_t> ints;
  std::vector<std::pair<std::size_t, std::size_t>> at(jobs.size());  // positions, pages
  int64_t total_items = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const AttentionJob& j = jobs[i];
    at[i].first = ints.size();
    ints.insert(ints.end(), j.q_pos, j.q_pos + j.n_q);
    at[i].second = ints.size();
    ints.insert(ints.end(), j.pages, j.pages + j.n_pages);
    total_items += j.n_q * j.n_heads;
    for (int64_t t = 0; t < j.n_q; ++t)  // the kernel reads pages[p / block] for p < min(q_pos + 1, kv_end)
      LOOM_CHECK(std::min<int64_t>(int64_t(j.q_pos[t]) + 1, j.kv_end) <= j.n_pages * kv.block_size,
                 "attention job reads past its ", j.n_pages, " pages");
  }
  const auto* dints = static_cast<const int32_t*>(stage(ints.data(), ints.size() * sizeof(int32_t)));
  std::vector<PagedJob> pj;
  std::vector<int32_t> split_jobs;
  pj.reserve(jobs.size());
  int64_t units = 0, parts = 0, merges = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const AttentionJob& j = jobs[i];
    if (j.n_q <= 0 || j.n_heads <= 0) continue;
    PagedJob p{};
    p.q = j.q;
    p.ldq = j.ldq;
    p.q_pos = dints + at[i].first;
    p.pages = dints + at[i].second;
    p.n_q = j.n_q;
    p.kv_end = j.kv_end;
    p.out = j.out;
    p.ldo = j.ldo;
    p.lse = j.lse;
    p.ld_lse = j.ld_lse;
    p.n_heads = j.n_heads;
    p.splits = attention_splits(total_items, j.kv_end, sms_);
    const int64_t items = j.n_q * j.n_heads;
    p.unit0 = units;
    units += items * p.splits;
    p.part0 = -1;
    p.merge0 = -1;
    if (p.splits > 1) {
      p.part0 = parts;
      parts += items * p.splits;
      p.merge0 = merges;
      merges += items;
      split_jobs.push_back(int32_t(pj.size()));
    }
    pj.push_back(p);
  }
  if (pj.empty()) return;
  const auto* djobs = static_cast<const PagedJob*>(stage(pj.data(), pj.size() * sizeof(PagedJob)));
  const int32_t* dsplit = split_jobs.empty()
                              ? nullptr
                              : static_cast<const int32_t*>(stage(split_jobs.data(), split_jobs.size() * 4));
  float *so = nullptr, *sl = nullptr;
  if (parts > 0) {
    scratch_.reserve(std::size_t(parts) * std::size_t(kv.head_dim + 1) * sizeof(float));
    so = scratch_.as<float>();
    sl = so + parts * kv.head_dim;
  }
  paged_attention(djobs, int64_t(pj.size()), units, dsplit, int64_t(split_jobs.size()), merges, kv.k, kv.v,
                  kv.block_size, kv.head_dim, kv.page_floats, scale, so, sl, stream_);
}

void CudaDevice::merge_attention(const float* const* parts, const float* const* lses, int n_parts, int64_t n_rows,
                                 int head_dim, float* out, float* out_lse) {
  gpu::merge_attention(parts, lses, n_parts, n_rows, head_dim, out, out_lse, stream_);
}

}  // namespace loom::gpu
