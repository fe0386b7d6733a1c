// The single-rank backend: size() == 1, every collective is a copy or a no-op. Lets every test
// and the single-rank engine run the multi-rank code paths without threads or processes.
#pragma once

#include <map>
#include <memory>

#include "comm/communicator.h"

namespace loom {

class SingleCommunicator final : public Communicator {
 public:
  SingleCommunicator() = default;

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view backend() const override { return "single"; }

  void all_reduce_sum(float* data, std::size_t count) override;
  void reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) override;
  void reduce_scatter_sum_v(const float* send, float* recv,
                            std::span<const std::size_t> counts) override;
  void all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override;
  void all_gather_v_bytes(const void* send, void* recv,
                          std::span<const std::size_t> recv_bytes) override;
  void all_to_all_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override;
  void all_to_all_v_bytes(const void* send, std::span<const std::size_t> send_bytes,
                          std::span<const std::size_t> send_displs, void* recv,
                          std::span<const std::size_t> recv_bytes,
                          std::span<const std::size_t> recv_displs) override;
  // There is no peer: both throw loom::Error.
  void send(int dst, int tag, const void* data, std::size_t bytes) override;
  void recv(int src, int tag, void* data, std::size_t bytes) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void barrier() override {}
  void register_buffer(int id, void* ptr, std::size_t bytes) override;
  void deregister_buffer(int id) override;
  void get(int src_rank, int id, std::size_t offset, void* dst, std::size_t bytes) override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  struct Region {
    const void* ptr;
    std::size_t bytes;
  };
  std::map<int, Region> buffers_;
};

}  // namespace loom
