// How the local backend (comm/local.h) moves one rank's data: the memory model behind
// "ranks as threads of one process".
//
// The local backend's algorithms only publish pointers, cross barriers, and then copy from and
// sum over peers' buffers. RankMemory is the part that touches the bytes, so the same algorithms
// (and their fault handling, agreement checks and rank-order sums) serve two cases:
//   - HostRankMemory: host memory, memmove and reduce_sum_rank_order, synchronous (the default);
//   - ranks sharing one GPU (gpu/cuda/shared_gpu_memory.h): each rank thread has its own CUDA
//     stream; copies are cudaMemcpyAsync on it (device-to-device within the one GPU) and sums a
//     rank-order kernel on it, so they complete asynchronously until fence().
//
// The contract the backend keeps, and which a RankMemory may rely on:
//   - fence() runs when a rank enters a collective (or posts a send), before it publishes its
//     buffers: work the rank enqueued earlier on its stream (the kernels that wrote its send
//     buffer) is complete before any peer reads them;
//   - fence() runs after the rank's last copy / sum out of peers' buffers and before it tells
//     them it is done reading (before the closing barrier, before a recv marks its message
//     copied, before get() returns): a peer never reuses or frees a buffer a pending copy reads,
//     and results are complete when the call returns.
// Copies and sums of one rank run in the order they were issued.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>

namespace loom {

class RankMemory {
 public:
  virtual ~RankMemory() = default;
  // "host", "cuda", ...: the local backend reports backend() "local" for host, "local+<name>"
  // otherwise.
  virtual std::string_view name() const = 0;
  // dst <- src, bytes (may overlap when dst == src only); may complete at fence().
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // out[i] = ((in[0][i] + in[1][i]) + ...) + in[n-1][i] in f32 (reduce_sum_rank_order's
  // contract, same bits); out may alias any input; may complete at fence().
  virtual void reduce_sum(float* out, const float* const* in, int n_inputs, std::size_t count) = 0;
  // Completes everything this rank issued (and, for a device, its stream's earlier work).
  virtual void fence() = 0;
};

// Synchronous host memory: memmove and reduce_sum_rank_order.
class HostRankMemory final : public RankMemory {
 public:
  std::string_view name() const override { return "host"; }
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void reduce_sum(float* out, const float* const* in, int n_inputs, std::size_t count) override;
  void fence() override {}
};

// Makes rank r's memory; called on rank r's thread before its function runs (a device memory
// binds the thread to its GPU and creates the rank's stream there).
using RankMemoryFactory = std::function<std::unique_ptr<RankMemory>(int rank)>;

}  // namespace loom
