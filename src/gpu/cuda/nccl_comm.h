// The NCCL backend of Communicator (comm/communicator.h): one rank per GPU, device buffers.
//
// Construction is collective over a host communicator (local threads or MPI, one rank per GPU):
// rank 0 makes the ncclUniqueId, the host communicator broadcasts it, every rank calls
// ncclCommInitRank on its device. The host communicator stays in use: split() splits it too
// (and the NCCL communicator with ncclCommSplit), and every operation whose buffers are all
// HOST memory (the engine's step descriptors, check_agreement's hashes) goes through it, so
// host-side control traffic keeps working unchanged. Device buffers go through NCCL; a call
// mixing host and device buffers is a loom::Error.
//
// Operations: all-reduce, reduce-scatter (even and uneven), all-gather (even: ncclAllGather;
// uneven: grouped ncclSend/ncclRecv), all-to-all (even and uneven: grouped ncclSend/ncclRecv,
// ncclGroupStart/End, the rank's own chunk a device copy), send/recv (ncclSend/ncclRecv after a
// 16-byte header carrying the byte count and tag, so a size or tag mismatch is a loom::Error as
// on the other backends, with the payload drained so the sender never hangs), broadcast
// (ncclBroadcast, in place). Every call enqueues on the communicator's stream and returns when
// the stream has completed it (the Communicator contract: results are there on return).
//
// Determinism (the contract of communicator.h, or a documented tolerance):
//   - default (LOOM_NCCL_REDUCE unset or "rank-order"): sums are the CPU backends' rank-order f32
//     sum, same bits: reduce-scatter moves each rank's chunk to its owner with grouped
//     send/recv and sums it there with the rank-order kernel (gpu/cuda/ops.h); all-reduce is that
//     reduce-scatter followed by ncclAllGather (the same bytes on the wire as a ring all-reduce,
//     one extra scratch of `count` floats).
//   - LOOM_NCCL_REDUCE=native: ncclAllReduce / ncclReduceScatter (ring or tree, NCCL's order).
//     Every rank still gets the same bits (NCCL guarantees that within one call), and runs repeat
//     for a fixed topology, NCCL_ALGO and NCCL_PROTO, but the bits differ from the rank-order sum
//     by at most (P - 1) 2^-24 sum_r |x_r| per element (any order of P-1 f32 additions).
// What NCCL cannot give: register_buffer / get (one-sided) are a loom::Error naming the backend
// (SiDP's weight streaming needs the local or MPI backend); a wait longer than
// CommOptions::timeout_s aborts the NCCL communicator (ncclCommAbort) and throws, after which
// the group is unusable. Tags of send/recv are checked, not matched: per pair, messages are
// received in the order they were sent.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>

#include "comm/communicator.h"
#include "gpu/cuda/cuda_util.h"

namespace loom::gpu {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `host` (which must outlive the result). `device`: this rank's GPU.
  static std::unique_ptr<NcclCommunicator> create(std::shared_ptr<Communicator> host, int device,
                                                  const CommOptions& options = {});
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "nccl"; }
  cudaStream_t stream() const { return stream_->get(); }
  Communicator& host() { return *host_; }

  void all_reduce_sum(float* data, std::size_t count) override;
  void reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) override;
  void reduce_scatter_sum_v(const float* send, float* recv, std::span<const std::size_t> counts) override;
  void all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override;
  void all_gather_v_bytes(const void* send, void* recv, std::span<const std::size_t> recv_bytes) override;
  void all_to_all_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override;
  void all_to_all_v_bytes(const void* send, std::span<const std::size_t> send_bytes,
                          std::span<const std::size_t> send_displs, void* recv,
                          std::span<const std::size_t> recv_bytes,
                          std::span<const std::size_t> recv_displs) override;
  void send(int dst, int tag, const void* data, std::size_t bytes) override;
  void recv(int src, int tag, void* data, std::size_t bytes) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void barrier() override;
  std::shared_ptr<void> allocate_host_shared(std::size_t bytes, void** data,
                                             std::function<void()>* sync = nullptr) override;
  void register_buffer(int id, void* ptr, std::size_t bytes) override;
  void deregister_buffer(int id) override;
  void get(int src_rank, int id, std::size_t offset, void* dst, std::size_t bytes) override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  NcclCommunicator(std::shared_ptr<Communicator> host, int device, ncclComm_t comm, const CommOptions& options);
  // 1: all device, 0: all host; mixed is an error naming `what`.
  bool on_device(const char* what, std::initializer_list<const void*> ptrs) const;
  void wait(const char* what);
  void rank_order_reduce_scatter(const float* send, float* recv, std::span<const std::size_t> counts);

  std::shared_ptr<Communicator> host_;
  int device_;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  CommOptions options_;
  bool native_reduce_ = false;
  std::unique_ptr<Stream> stream_;
  DeviceBuffer scratch_, sum_, header_;
};

}  // namespace loom::gpu
