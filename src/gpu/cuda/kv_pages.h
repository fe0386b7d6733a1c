// The paged KV cache in device memory. Page bookkeeping stays on the host in a KvStore
// (kv/kv_store.h: which (sequence, layer, KV head, block) cell has which page, reserve, release,
// the migration's ensure_page/drop); DeviceKvPages holds the page contents on the GPU under the
// same page ids, [num_pages][block_size][head_dim] floats of K and the same of V, so a KvStore's
// table is directly the block table of the device attention kernel (one KV head per view,
// like kernels::KvView over KvStore pages, engine/stage.h page_view).
#pragma once

#include <cstdint>
#include <span>

#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/ops.h"

namespace loom::gpu {

class DeviceKvPages {
 public:
  DeviceKvPages(int head_dim, int block_size, int64_t num_pages);
  int head_dim() const { return head_dim_; }
  int block_size() const { return block_size_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t page_floats() const { return int64_t(block_size_) * head_dim_; }
  std::size_t bytes() const { return k_.bytes() + v_.bytes(); }
  float* k() { return k_.as<float>(); }
  float* v() { return v_.as<float>(); }

  // The attention kernel's view of one KV head whose block table (page per logical block) is at
  // `device_table` (device memory; upload_table fills it).
  DeviceKvView view(const int32_t* device_table) const;

  // Copies a host page table into `dst` (device, at least table.size() entries) on stream s.
  // The host memory must stay valid until the stream passes this point.
  static void upload_table(std::span<const int32_t> table, int32_t* dst, cudaStream_t s);

  // Writes K/V rows [n, head_dim] (ld floats apart) of ONE KV head at positions pos[t] (device)
  // into the pages listed by device_table.
  void store(const float* k, const float* v, int64_t n, int64_t ld, const int32_t* pos, const int32_t* device_table,
             cudaStream_t s);

  // Page `page` of K and of V to / from host memory (page_floats() each): what a KV migration
  // (kv/kv_transfer.h) packs and unpacks when the ranks exchange through host buffers.
  void download_page(int32_t page, float* k_host, float* v_host) const;
  void upload_page(int32_t page, const float* k_host, const float* v_host);

 private:
  int head_dim_, block_size_;
  int64_t num_pages_;
  DeviceBuffer k_, v_;
};

}  // namespace loom::gpu
