#include "comm/single.h"

#include <cstring>

#include "core/error.h"

namespace loom {
namespace {

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
}

void check_span(std::span<const std::size_t> s, const char* what, const char* name) {
  if (s.size() != 1) fail(what, ": ", name, " has ", s.size(), " entries, expected 1 (group size)");
}

}  // namespace

void SingleCommunicator::all_reduce_sum(float*, std::size_t) {}

void SingleCommunicator::reduce_scatter_sum(const float* send, float* recv,
                                            std::size_t recv_count) {
  copy(recv, send, recv_count * sizeof(float));
}

void SingleCommunicator::reduce_scatter_sum_v(const float* send, float* recv,
                                              std::span<const std::size_t> counts) {
  check_span(counts, "reduce_scatter_sum_v", "counts");
  copy(recv, send, counts[0] * sizeof(float));
}

void SingleCommunicator::all_gather_bytes(const void* send, void* recv,
                                          std::size_t bytes_per_rank) {
  copy(recv, send, bytes_per_rank);
}

void SingleCommunicator::all_gather_v_bytes(const void* send, void* recv,
                                            std::span<const std::size_t> recv_bytes) {
  check_span(recv_bytes, "all_gather_v_bytes", "recv_bytes");
  copy(recv, send, recv_bytes[0]);
}

void SingleCommunicator::all_to_all_bytes(const void* send, void* recv,
                                          std::size_t bytes_per_rank) {
  copy(recv, send, bytes_per_rank);
}

void SingleCommunicator::all_to_all_v_bytes(const void* send,
                                            std::span<const std::size_t> send_bytes,
                                            std::span<const std::size_t> send_displs, void* recv,
                                            std::span<const std::size_t> recv_bytes,
                                            std::span<const std::size_t> recv_displs) {
  check_span(send_bytes, "all_to_all_v_bytes", "send_bytes");
  check_span(send_displs, "all_to_all_v_bytes", "send_displs");
  check_span(recv_bytes, "all_to_all_v_bytes", "recv_bytes");
  check_span(recv_displs, "all_to_all_v_bytes", "recv_displs");
  if (send_bytes[0] != recv_bytes[0]) {
    fail("all_to_all_v_bytes: rank 0 sends ", send_bytes[0], " bytes to itself but expects ",
         recv_bytes[0]);
  }
  copy(static_cast<char*>(recv) + recv_displs[0],
       static_cast<const char*>(send) + send_displs[0], send_bytes[0]);
}

void SingleCommunicator::send(int dst, int tag, const void*, std::size_t) {
  fail("send to rank ", dst, " (tag ", tag, "): the single backend has only rank 0");
}

void SingleCommunicator::recv(int src, int tag, void*, std::size_t) {
  fail("recv from rank ", src, " (tag ", tag, "): the single backend has only rank 0");
}

void SingleCommunicator::broadcast(void*, std::size_t, int root) {
  if (root != 0) fail("broadcast: root ", root, " is not a rank of a group of size 1");
}

void SingleCommunicator::register_buffer(int id, void* ptr, std::size_t bytes) {
  if (buffers_.count(id)) fail("register_buffer: id ", id, " is already registered");
  buffers_[id] = Region{ptr, bytes};
}

void SingleCommunicator::deregister_buffer(int id) {
  if (buffers_.erase(id) == 0) fail("deregister_buffer: id ", id, " is not registered");
}

void SingleCommunicator::get(int src_rank, int id, std::size_t offset, void* dst,
                             std::size_t bytes) {
  if (src_rank != 0) fail("get: rank ", src_rank, " is not a rank of a group of size 1");
  auto it = buffers_.find(id);
  if (it == buffers_.end()) fail("get: buffer id ", id, " is not registered");
  if (offset > it->second.bytes || bytes > it->second.bytes - offset) {
    fail("get: bytes [", offset, ", ", offset + bytes, ") of buffer ", id, " on rank 0 are out of ",
         "range (it has ", it->second.bytes, " bytes)");
  }
  copy(dst, static_cast<const char*>(it->second.ptr) + offset, bytes);
}

std::unique_ptr<Communicator> SingleCommunicator::split(int color, int) {
  if (color < 0) return nullptr;
  return std::make_unique<SingleCommunicator>();
}

}  // namespace loom
