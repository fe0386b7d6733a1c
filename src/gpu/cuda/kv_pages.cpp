#include "gpu/cuda/kv_pages.h"

namespace loom::gpu {

DeviceKvPages::DeviceKvPages(int head_dim, int block_size, int64_t num_pages)
    : head_dim_(head_dim), block_size_(block_size), num_pages_(num_pages) {
  LOOM_CHECK(head_dim > 0 && block_size > 0 && num_pages >= 0, "head_dim=", head_dim, " block_size=", block_size,
             " num_pages=", num_pages);
  const std::size_t bytes = std::size_t(num_pages) * std::size_t(page_floats()) * sizeof(float);
  k_.allocate(bytes);
  v_.allocate(bytes);
}

DeviceKvView DeviceKvPages::view(const int32_t* device_table) const {
  DeviceKvView kv;
  kv.k = k_.as<float>();
  kv.v = v_.as<float>();
  kv.block_table = device_table;
  kv.block_size = block_size_;
  kv.block_stride = page_floats();
  kv.head_stride = 0;  // one KV head per page
  kv.pos_stride = head_dim_;
  return kv;
}

void DeviceKvPages::upload_table(std::span<const int32_t> table, int32_t* dst, cudaStream_t s) {
  if (table.empty()) return;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, table.data(), table.size_bytes(), cudaMemcpyHostToDevice, s));
}

void DeviceKvPages::store(const float* k, const float* v, int64_t n, int64_t ld, const int32_t* pos,
                          const int32_t* device_table, cudaStream_t s) {
  gpu::store_kv(k, v, n, ld, pos, /*n_kv_heads=*/1, head_dim_, k_.as<float>(), v_.as<float>(), device_table,
                block_size_, page_floats(), /*head_stride=*/0, /*pos_stride=*/head_dim_, s);
}

void DeviceKvPages::download_page(int32_t page, float* k_host, float* v_host) const {
  LOOM_CHECK(page >= 0 && page < num_pages_, "page ", page, " of ", num_pages_);
  const std::size_t b = std::size_t(page_floats()) * sizeof(float);
  k_.download(k_host, b, std::size_t(page) * b);
  v_.download(v_host, b, std::size_t(page) * b);
}

void DeviceKvPages::upload_page(int32_t page, const float* k_host, const float* v_host) {
  LOOM_CHECK(page >= 0 && page < num_pages_, "page ", page, " of ", num_pages_);
  const std::size_t b = std::size_t(page_floats()) * sizeof(float);
  k_.upload(k_host, b, std::size_t(page) * b);
  v_.upload(v_host, b, std::size_t(page) * b);
}

}  // namespace loom::gpu
