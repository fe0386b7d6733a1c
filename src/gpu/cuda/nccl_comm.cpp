#include "gpu/cuda/nccl_comm.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cuda/ops.h"
#include "gpu/cuda/shared_gpu.h"

namespace loom::gpu {
namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL error in ", what, ": ", ncclGetErrorString(r));
}

bool native_reduce_from_env() {
  const char* e = std::getenv("LOOM_NCCL_REDUCE");
  if (e == nullptr || *e == '\0' || std::string(e) == "rank-order") return false;
  if (std::string(e) == "native") return true;
  fail("LOOM_NCCL_REDUCE='", e, "' is not rank-order or native");
}

struct Group {
  Group() { nccl_check(ncclGroupStart(), "ncclGroupStart"); }
  ~Group() {
    if (!done) (void)ncclGroupEnd();  // unwinding after a failed enqueue
  }
  void end() {
    done = true;
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }
  bool done = false;
};

}  // namespace

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(std::shared_ptr<Communicator> host, int device,
                                                           const CommOptions& options) {
  LOOM_CHECK(host != nullptr);
  LOOM_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (host->rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  host->broadcast(&id, sizeof(id), 0);
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, host->size(), id, host->rank()), "ncclCommInitRank");
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(host), device, comm, options));
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<Communicator> host, int device, ncclComm_t comm,
                                   const CommOptions& options)
    : host_(std::move(host)), device_(device), comm_(comm), options_(options) {
  nccl_check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
  nccl_check(ncclCommCount(comm_, &size_), "ncclCommCount");
  LOOM_CHECK(rank_ == host_->rank() && size_ == host_->size(), "nccl rank ", rank_, "/", size_, " vs host ",
             host_->rank(), "/", host_->size());
  native_reduce_ = native_reduce_from_env();
  stream_ = std::make_unique<Stream>();
  header_.allocate(16);
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) (void)ncclCommDestroy(comm_);
}

bool NcclCommunicator::on_device(const char* what, std::initializer_list<const void*> ptrs) const {
  int dev = 0, host = 0;
  for (const void* p : ptrs) {
    if (p == nullptr) continue;
    (is_device_pointer(p) ? dev : host)++;
  }
  if (dev && host) fail(what, " on the nccl backend: some buffers are device memory and some host memory");
  if (host == 0) {
    // The fence of comm/rank_memory.h: what this rank enqueued on any stream of its GPU (the
    // device's compute stream wrote the send buffer; the rank owns the GPU) is complete before
    // NCCL's stream reads the buffers.
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return host == 0;
}

void NcclCommunicator::wait(const char* what) {
  if (comm_ == nullptr) fail("nccl communicator was aborted after an earlier failure");
  const auto t0 = std::chrono::steady_clock::now();
  for (int spin = 0;; ++spin) {
    const cudaError_t e = cudaStreamQuery(stream_->get());
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) throw_cuda_error(e, what, __FILE__, __LINE__);
    ncclResult_t async = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) {
      (void)ncclCommAbort(comm_);
      comm_ = nullptr;
      fail(what, " failed on rank ", rank_, ": ", ncclGetErrorString(async));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > options_.timeout_s) {
      (void)ncclCommAbort(comm_);
      comm_ = nullptr;
      fail("rank ", rank_, ": ", what, " timed out after ", options_.timeout_s,
           " s on the nccl backend (a rank is stuck or called a different operation); the group is aborted");
    }
    if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void NcclCommunicator::rank_order_reduce_scatter(const float* send, float* recv, std::span<const std::size_t> counts) {
  const int n = size_;
  LOOM_CHECK(n <= kMaxPointerArgs, "nccl rank-order reduction of ", n, " ranks (at most ", kMaxPointerArgs, ")");
  std::vector<std::size_t> off(std::size_t(n) + 1, 0);
  for (int q = 0; q < n; ++q) off[std::size_t(q) + 1] = off[std::size_t(q)] + counts[std::size_t(q)];
  const std::size_t mine = counts[std::size_t(rank_)];
  scratch_.reserve(std::max<std::size_t>(1, std::size_t(n) * mine) * sizeof(float));
  float* in = scratch_.as<float>();
  cudaStream_t s = stream_->get();
  {
    Group g;
    for (int q = 0; q < n; ++q) {
      if (q == rank_) continue;
      if (counts[std::size_t(q)]) nccl_check(ncclSend(send + off[std::size_t(q)], counts[std::size_t(q)], ncclFloat, q, comm_, s), "ncclSend");
      if (mine) nccl_check(ncclRecv(in + std::size_t(q) * mine, mine, ncclFloat, q, comm_, s), "ncclRecv");
    }
    g.end();
  }
  if (mine) {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(in + std::size_t(rank_) * mine, send + off[std::size_t(rank_)], mine * sizeof(float),
                                    cudaMemcpyDeviceToDevice, s));
    std::vector<const float*> parts(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) parts[std::size_t(q)] = in + std::size_t(q) * mine;
    reduce_sum_rank_order(recv, parts.data(), n, int64_t(mine), s);
  }
}

void NcclCommunicator::all_reduce_sum(float* data, std::size_t count) {
  if (!on_device("all_reduce_sum", {data})) return host_->all_reduce_sum(data, count);
  cudaStream_t s = stream_->get();
  if (native_reduce_ || size_ == 1) {
    if (size_ > 1) nccl_check(ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_, s), "ncclAllReduce");
    return wait("all_reduce_sum");
  }
  const int n = size_;
  std::vector<std::size_t> counts(static_cast<std::size_t>(n)), off(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    off[std::size_t(q)] = chunk_begin(count, n, q);
    counts[std::size_t(q)] = chunk_begin(count, n, q + 1) - off[std::size_t(q)];
  }
  // Phase 1: chunk q of every rank to rank q, summed there in rank order into a scratch row
  // (data's own chunk is not read by anyone in phase 1, but the sum lands in scratch first so
  // the reduction never reads what it writes).
  const std::size_t mine = counts[std::size_t(rank_)];
  sum_.reserve(std::max<std::size_t>(mine, 1) * sizeof(float));
  rank_order_reduce_scatter(data, sum_.as<float>(), counts);
  if (mine)
    LOOM_CUDA_CHECK(cudaMemcpyAsync(data + off[std::size_t(rank_)], sum_.as<float>(), mine * sizeof(float),
                                    cudaMemcpyDeviceToDevice, s));
  // Phase 2: every rank's summed chunk to every rank (uneven all-gather in place).
  {
    Group g;
    for (int q = 0; q < n; ++q) {
      if (q == rank_) continue;
      if (mine) nccl_check(ncclSend(data + off[std::size_t(rank_)], mine, ncclFloat, q, comm_, s), "ncclSend");
      if (counts[std::size_t(q)]) nccl_check(ncclRecv(data + off[std::size_t(q)], counts[std::size_t(q)], ncclFloat, q, comm_, s), "ncclRecv");
    }
    g.end();
  }
  wait("all_reduce_sum");
}

void NcclCommunicator::reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) {
  if (!on_device("reduce_scatter_sum", {send, recv})) return host_->reduce_scatter_sum(send, recv, recv_count);
  if (native_reduce_) {
    nccl_check(ncclReduceScatter(send, recv, recv_count, ncclFloat, ncclSum, comm_, stream_->get()), "ncclReduceScatter");
  } else {
    std::vector<std::size_t> counts(static_cast<std::size_t>(size_), recv_count);
    rank_order_reduce_scatter(send, recv, counts);
  }
  wait("reduce_scatter_sum");
}

void NcclCommunicator::reduce_scatter_sum_v(const float* send, float* recv, std::span<const std::size_t> counts) {
  if (counts.size() != std::size_t(size_))
    fail("reduce_scatter_sum_v: counts has ", counts.size(), " entries, expected ", size_, " (group size)");
  if (!on_device("reduce_scatter_sum_v", {send, recv})) return host_->reduce_scatter_sum_v(send, recv, counts);
  rank_order_reduce_scatter(send, recv, counts);  // native NCCL has no uneven reduce-scatter
  wait("reduce_scatter_sum_v");
}

void NcclCommunicator::all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) {
  if (!on_device("all_gather", {send, recv})) return host_->all_gather_bytes(send, recv, bytes_per_rank);
  nccl_check(ncclAllGather(send, recv, bytes_per_rank, ncclChar, comm_, stream_->get()), "ncclAllGather");
  wait("all_gather");
}

void NcclCommunicator::all_gather_v_bytes(const void* send, void* recv, std::span<const std::size_t> recv_bytes) {
  if (recv_bytes.size() != std::size_t(size_))
    fail("all_gather_v_bytes: recv_bytes has ", recv_bytes.size(), " entries, expected ", size_, " (group size)");
  if (!on_device("all_gather_v", {send, recv})) return host_->all_gather_v_bytes(send, recv, recv_bytes);
  cudaStream_t s = stream_->get();
  std::vector<std::size_t> off(std::size_t(size_), 0);
  for (int q = 1; q < size_; ++q) off[std::size_t(q)] = off[std::size_t(q) - 1] + recv_bytes[std::size_t(q) - 1];
  char* out = static_cast<char*>(recv);
  const std::size_t mine = recv_bytes[std::size_t(rank_)];
  if (mine && send != out + off[std::size_t(rank_)])
    LOOM_CUDA_CHECK(cudaMemcpyAsync(out + off[std::size_t(rank_)], send, mine, cudaMemcpyDeviceToDevice, s));
  {
    Group g;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      if (mine) nccl_check(ncclSend(send, mine, ncclChar, q, comm_, s), "ncclSend");
      if (recv_bytes[std::size_t(q)]) nccl_check(ncclRecv(out + off[std::size_t(q)], recv_bytes[std::size_t(q)], ncclChar, q, comm_, s), "ncclRecv");
    }
    g.end();
  }
  wait("all_gather_v");
}

void NcclCommunicator::all_to_all_bytes(const void* send, void* recv, std::size_t bytes_per_rank) {
  if (!on_device("all_to_all", {send, recv})) return host_->all_to_all_bytes(send, recv, bytes_per_rank);
  std::vector<std::size_t> bytes(static_cast<std::size_t>(size_), bytes_per_rank), displs(static_cast<std::size_t>(size_));
  for (int q = 0; q < size_; ++q) displs[std::size_t(q)] = std::size_t(q) * bytes_per_rank;
  all_to_all_v_bytes(send, bytes, displs, recv, bytes, displs);
}

void NcclCommunicator::all_to_all_v_bytes(const void* send, std::span<const std::size_t> send_bytes,
                                          std::span<const std::size_t> send_displs, void* recv,
                                          std::span<const std::size_t> recv_bytes,
                                          std::span<const std::size_t> recv_displs) {
  for (auto [span, name] : {std::pair{send_bytes, "send_bytes"}, std::pair{send_displs, "send_displs"},
                            std::pair{recv_bytes, "recv_bytes"}, std::pair{recv_displs, "recv_displs"}}) {
    if (span.size() != std::size_t(size_))
      fail("all_to_all_v_bytes: ", name, " has ", span.size(), " entries, expected ", size_, " (group size)");
  }
  if (!on_device("all_to_all_v", {send, recv}))
    return host_->all_to_all_v_bytes(send, send_bytes, send_displs, recv, recv_bytes, recv_displs);
  // The size contract (recv_bytes[i] on rank j == send_bytes[j] on rank i) checked over the host
  // communicator first: NCCL would hang or corrupt on a mismatch.
  std::vector<std::size_t> all(std::size_t(size_) * std::size_t(size_));
  host_->all_gather_bytes(send_bytes.data(), all.data(), std::size_t(size_) * sizeof(std::size_t));
  for (int q = 0; q < size_; ++q) {
    const std::size_t sent = all[std::size_t(q) * std::size_t(size_) + std::size_t(rank_)];
    if (sent != recv_bytes[std::size_t(q)])
      fail("all_to_all_v_bytes: rank ", q, " sends ", sent, " bytes to rank ", rank_, ", which expects recv_bytes[", q,
           "] = ", recv_bytes[std::size_t(q)]);
  }
  cudaStream_t s = stream_->get();
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (recv_bytes[std::size_t(rank_)])
    LOOM_CUDA_CHECK(cudaMemcpyAsync(out + recv_displs[std::size_t(rank_)], in + send_displs[std::size_t(rank_)],
                                    recv_bytes[std::size_t(rank_)], cudaMemcpyDeviceToDevice, s));
  {
    Group g;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      if (send_bytes[std::size_t(q)])
        nccl_check(ncclSend(in + send_displs[std::size_t(q)], send_bytes[std::size_t(q)], ncclChar, q, comm_, s), "ncclSend");
      if (recv_bytes[std::size_t(q)])
        nccl_check(ncclRecv(out + recv_displs[std::size_t(q)], recv_bytes[std::size_t(q)], ncclChar, q, comm_, s), "ncclRecv");
    }
    g.end();
  }
  wait("all_to_all_v");
}

void NcclCommunicator::send(int dst, int tag, const void* data, std::size_t bytes) {
  if (dst < 0 || dst >= size_ || dst == rank_) fail("send: peer rank ", dst, " is not another rank of this group of ", size_);
  if (tag < 0 || tag > 32767) fail("send: tag ", tag, " is outside [0, 32767]");
  if (!on_device("send", {data})) return host_->send(dst, tag, data, bytes);
  const std::uint64_t h[2] = {bytes, std::uint64_t(tag)};
  LOOM_CUDA_CHECK(cudaMemcpyAsync(header_.data(), h, sizeof(h), cudaMemcpyHostToDevice, stream_->get()));
  nccl_check(ncclSend(header_.data(), sizeof(h), ncclChar, dst, comm_, stream_->get()), "ncclSend (header)");
  wait("send (header)");
  if (bytes) nccl_check(ncclSend(data, bytes, ncclChar, dst, comm_, stream_->get()), "ncclSend");
  wait("send");
}

void NcclCommunicator::recv(int src, int tag, void* data, std::size_t bytes) {
  if (src < 0 || src >= size_ || src == rank_) fail("recv: peer rank ", src, " is not another rank of this group of ", size_);
  if (tag < 0 || tag > 32767) fail("recv: tag ", tag, " is outside [0, 32767]");
  if (!on_device("recv", {data})) return host_->recv(src, tag, data, bytes);
  nccl_check(ncclRecv(header_.data(), 16, ncclChar, src, comm_, stream_->get()), "ncclRecv (header)");
  wait("recv (header)");
  std::uint64_t h[2];
  header_.download(h, sizeof(h));
  if (h[0] != bytes || h[1] != std::uint64_t(tag)) {
    // Drain the payload so the sender does not hang, then report.
    if (h[0]) {
      scratch_.reserve(h[0]);
      nccl_check(ncclRecv(scratch_.data(), h[0], ncclChar, src, comm_, stream_->get()), "ncclRecv (drain)");
      wait("recv (drain)");
    }
    fail("send/recv mismatch: rank ", src, " sends ", h[0], " bytes with tag ", h[1], ", rank ", rank_, " receives ",
         bytes, " bytes with tag ", tag, " (the nccl backend receives in send order)");
  }
  if (bytes) nccl_check(ncclRecv(data, bytes, ncclChar, src, comm_, stream_->get()), "ncclRecv");
  wait("recv");
}

void NcclCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  if (root < 0 || root >= size_) fail("broadcast: rank ", root, " is not in this group of ", size_, " ranks");
  if (!on_device("broadcast", {data})) return host_->broadcast(data, bytes, root);
  nccl_check(ncclBroadcast(data, data, bytes, ncclChar, root, comm_, stream_->get()), "ncclBroadcast");
  wait("broadcast");
}

void NcclCommunicator::barrier() {
  stream_->sync();
  host_->barrier();
}

std::shared_ptr<void> NcclCommunicator::allocate_host_shared(std::size_t bytes, void** data,
                                                             std::function<void()>* sync) {
  return host_->allocate_host_shared(bytes, data, sync);  // host memory: the host communicator's
}

void NcclCommunicator::register_buffer(int, void*, std::size_t) {
  fail("register_buffer: the nccl backend has no one-sided get (SiDP weight streaming needs the local or mpi backend)");
}
void NcclCommunicator::deregister_buffer(int) {
  fail("deregister_buffer: the nccl backend has no one-sided get");
}
void NcclCommunicator::get(int, int, std::size_t, void*, std::size_t) {
  fail("get: the nccl backend has no one-sided get (SiDP weight streaming needs the local or mpi backend)");
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  std::shared_ptr<Communicator> h = host_->split(color, key);
  ncclComm_t nc = nullptr;
  nccl_check(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, nullptr), "ncclCommSplit");
  if (color < 0) return nullptr;
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(h), device_, nc, options_));
}

}  // namespace loom::gpu
