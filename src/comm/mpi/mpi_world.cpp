// The mpi backend: see mpi_world.h for the design.
#include "comm/mpi/mpi_world.h"

// The C API only: without these, OpenMPI's mpi.h pulls in the deprecated C++ bindings, which
// libmpi (the C library MPI::MPI_C links) does not provide.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <numeric>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

namespace loom {
namespace {

// Largest message handed to MPI, bytes: 1 GiB keeps every count below INT_MAX. Tests lower it
// with LOOM_MPI_PIECE_BYTES to exercise the splitting on small buffers.
std::size_t piece_bytes() {
  static const std::size_t piece = [] {
    constexpr std::size_t kMax = std::size_t{1} << 30;
    const char* env = std::getenv("LOOM_MPI_PIECE_BYTES");
    if (env == nullptr || *env == '\0') return kMax;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (*end != '\0' || v < 1 || v > kMax) {
      fail("LOOM_MPI_PIECE_BYTES='", env, "' is not a byte count in [1, ", kMax, "]");
    }
    return static_cast<std::size_t>(v);
  }();
  return piece;
}

// One tag per operation on the collectives' communicator: operations that do not match time
// out instead of exchanging the wrong data.
enum Tag : int {
  kTagAllReduceScatter = 1,
  kTagAllReduceGather,
  kTagReduceScatter,
  kTagAllGather,
  kTagAllToAll,
  kTagBroadcast,
  kTagBarrier,
  kTagAgree,
};

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return cat("MPI error ", rc);
  return std::string(buf, static_cast<std::size_t>(len));
}

void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) fail("MPI ", what, " failed: ", mpi_error_string(rc));
}

int world_rank() {
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

bool mpi_finalized() {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}

// A batch of non-blocking requests completed together under a deadline.
class Batch {
 public:
  Batch(MPI_Comm comm, int tag, double timeout_s, const char* what)
      : comm_(comm), tag_(tag), timeout_s_(timeout_s), what_(what) {}
  // Requests are still pending only when an error is being thrown: cancel them so MPI does not
  // write into buffers that are about to be freed (the group is broken from here on).
  ~Batch() {
    for (auto& r : reqs_) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // Receives exactly `bytes` from src, in pieces of at most piece_bytes() (one empty message for 0).
  void recv(int src, void* buf, std::size_t bytes) {
    auto* p = static_cast<char*>(buf);
    std::size_t off = 0;
    do {
      const std::size_t len = std::min(piece_bytes(), bytes - off);
      MPI_Request req;
      mpi_check(MPI_Irecv(p + off, static_cast<int>(len), MPI_BYTE, src, tag_, comm_, &req),
                "Irecv");
      reqs_.push_back(req);
      expect_.push_back({src, len});
      off += len;
    } while (off < bytes);
  }

  void send(int dst, const void* buf, std::size_t bytes) {
    auto* p = static_cast<const char*>(buf);
    std::size_t off = 0;
    do {
      const std::size_t len = std::min(piece_bytes(), bytes - off);
      MPI_Request req;
      mpi_check(MPI_Isend(p + off, static_cast<int>(len), MPI_BYTE, dst, tag_, comm_, &req),
                "Isend");
      reqs_.push_back(req);
      expect_.push_back({-1, len});
      off += len;
    } while (off < bytes);
  }

  // Polls until every request completed; throws at the deadline or on a size mismatch.
  void complete() {
    if (reqs_.empty()) return;
    std::vector<MPI_Status> st(reqs_.size());
    const double start = now_seconds();
    for (;;) {
      int done = 0;
      const int rc = MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, st.data());
      if (rc == MPI_ERR_IN_STATUS) {
        for (std::size_t k = 0; k < st.size(); ++k) {
          const int e = st[k].MPI_ERROR;
          if (e == MPI_SUCCESS || e == MPI_ERR_PENDING) continue;
          if (expect_[k].src >= 0 && e == MPI_ERR_TRUNCATE) {
            fail("rank ", world_rank(), ": ", what_, ": group rank ", expect_[k].src,
                 " sent more than the ", expect_[k].bytes, " bytes expected");
          }
          fail("rank ", world_rank(), ": ", what_, ": ", mpi_error_string(e));
        }
      }
      mpi_check(rc, "Testall");
      if (done) break;
      const double elapsed = now_seconds() - start;
      if (elapsed > timeout_s_) {
        fail("rank ", world_rank(), ": ", what_, " did not complete within ", timeout_s_,
             " s (a peer rank died, is stuck, or called a different operation)");
      }
      // Spin (yielding) while an answer is likely soon; then poll gently so oversubscribed
      // ranks leave the cores to the ranks doing work.
      if (elapsed < 0.005) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    for (std::size_t k = 0; k < st.size(); ++k) {
      if (expect_[k].src < 0) continue;
      int got = 0;
      MPI_Get_count(&st[k], MPI_BYTE, &got);
      if (static_cast<std::size_t>(got) != expect_[k].bytes) {
        fail("rank ", world_rank(), ": ", what_, ": group rank ", expect_[k].src, " sent ", got,
             " bytes where ", expect_[k].bytes, " were expected (ranks disagree on the size)");
      }
    }
    reqs_.clear();
    expect_.clear();
  }

 private:
  struct Expect {
    int src;  // -1 for a send
    std::size_t bytes;
  };
  MPI_Comm comm_;
  int tag_;
  double timeout_s_;
  const char* what_;
  std::vector<MPI_Request> reqs_;
  std::vector<Expect> expect_;
};

// A Batch as a CommRequest: the messages are posted; wait() completes them.
class BatchRequest final : public CommRequest {
 public:
  BatchRequest(MPI_Comm comm, int tag, double timeout_s, const char* what) : batch(comm, tag, timeout_s, what) {}
  void wait() override { batch.complete(); }
  Batch batch;
};

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
}

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of comm.
  MpiCommunicator(MPI_Comm comm, double timeout_s) : coll_(comm), timeout_s_(timeout_s) {
    mpi_check(MPI_Comm_set_errhandler(coll_, MPI_ERRORS_RETURN), "Comm_set_errhandler");
    mpi_check(MPI_Comm_dup(coll_, &p2p_), "Comm_dup");
    mpi_check(MPI_Comm_set_errhandler(p2p_, MPI_ERRORS_RETURN), "Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(coll_, &rank_), "Comm_rank");
    mpi_check(MPI_Comm_size(coll_, &size_), "Comm_size");
  }

  ~MpiCommunicator() override {
    // While an exception unwinds the job is about to be aborted: skip the collective frees,
    // which would wait for peers that may never come.
    if (mpi_finalized() || std::uncaught_exceptions() > 0) return;
    for (auto& [id, b] : buffers_) {
      if (b.win != MPI_WIN_NULL) MPI_Win_free(&b.win);
    }
    MPI_Comm_free(&p2p_);
    MPI_Comm_free(&coll_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }

  std::shared_ptr<void> allocate_host_shared(std::size_t bytes, void** data, std::function<void()>* sync) override {
    // One MPI shared-memory window per host (Seesaw 4.2 / W8: "the CPU KV cache storage is shared
    // among all GPUs"), the host's rank 0 allocating all of it, every rank mapping it.
    MPI_Comm node = MPI_COMM_NULL;
    mpi_check(MPI_Comm_split_type(coll_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "Comm_split_type");
    int node_size = 0, node_rank = 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_rank(node, &node_rank);
    int all_here = node_size == size_ ? 1 : 0, everywhere = 0;
    mpi_check(MPI_Allreduce(&all_here, &everywhere, 1, MPI_INT, MPI_MIN, coll_), "Allreduce");
    if (!everywhere) {
      MPI_Comm_free(&node);
      fail("host shared memory: the ", size_, " ranks span several hosts (", node_size,
           " on this one); the CPU KV tier needs them on one host");
    }
    struct Shared {
      MPI_Comm node = MPI_COMM_NULL;
      MPI_Win win = MPI_WIN_NULL;
      ~Shared() {
        if (mpi_finalized() || std::uncaught_exceptions() > 0) return;
        if (win != MPI_WIN_NULL) {
          MPI_Win_unlock_all(win);
          MPI_Win_free(&win);
        }
        if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
      }
    };
    auto sh = std::make_shared<Shared>();
    sh->node = node;
    void* base = nullptr;
    mpi_check(MPI_Win_allocate_shared(static_cast<MPI_Aint>(node_rank == 0 ? bytes : 0), 1, MPI_INFO_NULL, node,
                                      &base, &sh->win),
              "Win_allocate_shared");
    MPI_Aint size = 0;
    int disp = 0;
    void* ptr = nullptr;
    mpi_check(MPI_Win_shared_query(sh->win, 0, &size, &disp, &ptr), "Win_shared_query");
    mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, sh->win), "Win_lock_all");
    if (node_rank == 0 && bytes > 0) std::memset(ptr, 0, bytes);
    MPI_Win_sync(sh->win);
    mpi_check(MPI_Barrier(node), "Barrier");
    MPI_Win_sync(sh->win);
    *data = ptr;
    // The fence of the tier's protocol (kv_tier.h "Ordering"): MPI_Win_sync inside the lock_all
    // epoch opened above. Raw pointer: the caller keeps `sh` alive while it may call this.
    if (sync) *sync = [s = sh.get()] { mpi_check(MPI_Win_sync(s->win), "Win_sync"); };
    return sh;
  }

  void all_reduce_sum(float* data, std::size_t count) override {
    const int n = size_;
    if (n == 1) return;
    const std::size_t lo = chunk_begin(count, n, rank_), hi = chunk_begin(count, n, rank_ + 1);
    const std::size_t m = hi - lo;
    // Reduce-scatter: chunk `rank_` of every peer into tmp[q], summed in rank order.
    std::vector<float> tmp(m * static_cast<std::size_t>(n));
    Batch rs(coll_, kTagAllReduceScatter, timeout_s_, "all_reduce_sum (reduce-scatter)");
    for (int k = 1; k < n; ++k) {
      const int from = (rank_ - k + n) % n;
      rs.recv(from, tmp.data() + static_cast<std::size_t>(from) * m, m * sizeof(float));
    }
    for (int k = 1; k < n; ++k) {
      const int to = (rank_ + k) % n;
      const std::size_t qlo = chunk_begin(count, n, to), qhi = chunk_begin(count, n, to + 1);
      rs.send(to, data + qlo, (qhi - qlo) * sizeof(float));
    }
    rs.complete();
    std::vector<const float*> in(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) in[q] = q == rank_ ? data + lo : tmp.data() + q * m;
    reduce_sum_rank_order(data + lo, in.data(), n, m);
    // All-gather of the summed chunks.
    Batch ag(coll_, kTagAllReduceGather, timeout_s_, "all_reduce_sum (all-gather)");
    for (int k = 1; k < n; ++k) {
      const int from = (rank_ - k + n) % n;
      const std::size_t qlo = chunk_begin(count, n, from), qhi = chunk_begin(count, n, from + 1);
      ag.recv(from, data + qlo, (qhi - qlo) * sizeof(float));
    }
    for (int k = 1; k < n; ++k) ag.send((rank_ + k) % n, data + lo, m * sizeof(float));
    ag.complete();
  }

  void reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) override {
    std::vector<std::size_t> counts(static_cast<std::size_t>(size_), recv_count);
    reduce_scatter_sum_v(send, recv, counts);
  }

  void reduce_scatter_sum_v(const float* send, float* recv,
                            std::span<const std::size_t> counts) override {
    const int n = size_;
    check_span(counts, "reduce_scatter_sum_v", "counts");
    std::vector<std::size_t> off(static_cast<std::size_t>(n) + 1, 0);
    for (int q = 0; q < n; ++q) off[q + 1] = off[q] + counts[q];
    const std::size_t m = counts[rank_];
    std::vector<float> tmp(m * static_cast<std::size_t>(n));
    Batch b(coll_, kTagReduceScatter, timeout_s_, "reduce_scatter_sum");
    for (int k = 1; k < n; ++k) {
      const int from = (rank_ - k + n) % n;
      b.recv(from, tmp.data() + static_cast<std::size_t>(from) * m, m * sizeof(float));
    }
    for (int k = 1; k < n; ++k) {
      const int to = (rank_ + k) % n;
      b.send(to, send + off[to], counts[to] * sizeof(float));
    }
    b.complete();
    std::vector<const float*> in(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) in[q] = q == rank_ ? send + off[rank_] : tmp.data() + q * m;
    reduce_sum_rank_order(recv, in.data(), n, m);
  }

  void all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override {
    std::vector<std::size_t> bytes(static_cast<std::size_t>(size_), bytes_per_rank);
    all_gather_v_bytes(send, recv, bytes);
  }

  void all_gather_v_bytes(const void* send, void* recv,
                          std::span<const std::size_t> recv_bytes) override {
    const int n = size_;
    check_span(recv_bytes, "all_gather_v_bytes", "recv_bytes");
    std::vector<std::size_t> off(static_cast<std::size_t>(n) + 1, 0);
    for (int q = 0; q < n; ++q) off[q + 1] = off[q] + recv_bytes[q];
    auto* out = static_cast<char*>(recv);
    Batch b(coll_, kTagAllGather, timeout_s_, "all_gather");
    for (int k = 1; k < n; ++k) {
      const int from = (rank_ - k + n) % n;
      b.recv(from, out + off[from], recv_bytes[from]);
    }
    for (int k = 1; k < n; ++k) b.send((rank_ + k) % n, send, recv_bytes[rank_]);
    copy(out + off[rank_], send, recv_bytes[rank_]);
    b.complete();
  }

  void all_to_all_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override {
    const std::size_t n = static_cast<std::size_t>(size_);
    std::vector<std::size_t> bytes(n, bytes_per_rank), displs(n);
    for (std::size_t q = 0; q < n; ++q) displs[q] = q * bytes_per_rank;
    all_to_all_v_bytes(send, bytes, displs, recv, bytes, displs);
  }

  // The non-blocking form, completed at once (one message pattern for both).
  void all_to_all_v_bytes(const void* send, std::span<const std::size_t> send_bytes,
                          std::span<const std::size_t> send_displs, void* recv,
                          std::span<const std::size_t> recv_bytes,
                          std::span<const std::size_t> recv_displs) override {
    start_all_to_all_v_bytes(send, send_bytes, send_displs, recv, recv_bytes, recv_displs)->wait();
  }

  // Posts every message now (receives from rank - k, sends to rank + k); the request's wait()
  // completes them under the communicator timeout. Outstanding requests of one group match
  // in the order they were started (MPI orders messages of one (source, tag, communicator)).
  std::unique_ptr<CommRequest> start_all_to_all_v_bytes(const void* send, std::span<const std::size_t> send_bytes,
                                                        std::span<const std::size_t> send_displs, void* recv,
                                                        std::span<const std::size_t> recv_bytes,
                                                        std::span<const std::size_t> recv_displs) override {
    const int n = size_;
    check_span(send_bytes, "all_to_all_v_bytes", "send_bytes");
    check_span(send_displs, "all_to_all_v_bytes", "send_displs");
    check_span(recv_bytes, "all_to_all_v_bytes", "recv_bytes");
    check_span(recv_displs, "all_to_all_v_bytes", "recv_displs");
    if (send_bytes[rank_] != recv_bytes[rank_]) {
      fail("all_to_all_v_bytes: rank ", rank_, " sends ", send_bytes[rank_], " bytes to itself but expects ",
           recv_bytes[rank_]);
    }
    auto* out = static_cast<char*>(recv);
    auto* in = static_cast<const char*>(send);
    auto req = std::make_unique<BatchRequest>(coll_, kTagAllToAll, timeout_s_, "all_to_all");
    for (int k = 1; k < n; ++k) {
      const int from = (rank_ - k + n) % n;
      req->batch.recv(from, out + recv_displs[from], recv_bytes[from]);
    }
    for (int k = 1; k < n; ++k) {
      const int to = (rank_ + k) % n;
      req->batch.send(to, in + send_displs[to], send_bytes[to]);
    }
    copy(out + recv_displs[rank_], in + send_displs[rank_], recv_bytes[rank_]);
    return req;
  }

  void send(int dst, int tag, const void* data, std::size_t bytes) override {
    check_peer(dst, "send");
    check_tag(tag, "send");
    Batch b(p2p_, tag, timeout_s_, "send");
    b.send(dst, data, bytes);
    b.complete();
  }

  void recv(int src, int tag, void* data, std::size_t bytes) override {
    check_peer(src, "recv");
    check_tag(tag, "recv");
    Batch b(p2p_, tag, timeout_s_, "recv");
    b.recv(src, data, bytes);
    b.complete();
  }

  // Binomial tree rooted at root over point-to-point messages (large-count safe, and a
  // mismatch with another operation times out instead of mixing collectives).
  void broadcast(void* data, std::size_t bytes, int root) override {
    const int n = size_;
    if (root < 0 || root >= n) fail("broadcast: root ", root, " is not in this group of ", n);
    const int vr = (rank_ - root + n) % n;
    int mask = 1;
    while (mask < n) {
      if (vr & mask) {
        Batch up(coll_, kTagBroadcast, timeout_s_, "broadcast");
        up.recv((vr - mask + root) % n, data, bytes);
        up.complete();
        break;
      }
      mask <<= 1;
    }
    Batch down(coll_, kTagBroadcast, timeout_s_, "broadcast");
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (vr + mask < n) down.send((vr + mask + root) % n, data, bytes);
    }
    down.complete();
  }

  // Dissemination barrier: ceil(log2 n) rounds of empty messages.
  void barrier() override {
    const int n = size_;
    for (int k = 1; k < n; k <<= 1) {
      Batch b(coll_, kTagBarrier, timeout_s_, "barrier");
      char dummy = 0;
      b.recv((rank_ - k + n) % n, &dummy, 0);
      b.send((rank_ + k) % n, &dummy, 0);
      b.complete();
    }
  }

  void register_buffer(int id, void* ptr, std::size_t bytes) override {
    if (buffers_.count(id)) fail("register_buffer: id ", id, " is already registered");
    std::vector<std::uint64_t> sizes = agree(kOpRegister, id, bytes, "register_buffer");
    Buffer b;
    b.sizes.assign(sizes.begin(), sizes.end());
    b.local = ptr;
    // A group of one needs no window (and OpenMPI 4.1 has no one-sided component for a lone
    // process: MPI_Win_create fails with MPI_ERR_WIN); get() copies directly then.
    if (size_ > 1) {
      mpi_check(MPI_Win_create(ptr, static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL, coll_, &b.win),
                "Win_create");
      MPI_Win_set_errhandler(b.win, MPI_ERRORS_RETURN);
    }
    buffers_[id] = std::move(b);
  }

  void deregister_buffer(int id) override {
    auto it = buffers_.find(id);
    if (it == buffers_.end()) fail("deregister_buffer: id ", id, " is not registered");
    agree(kOpDeregister, id, 0, "deregister_buffer");
    if (it->second.win != MPI_WIN_NULL) mpi_check(MPI_Win_free(&it->second.win), "Win_free");
    buffers_.erase(it);
  }

  void get(int src_rank, int id, std::size_t offset, void* dst, std::size_t bytes) override {
    if (src_rank < 0 || src_rank >= size_) {
      fail("get: rank ", src_rank, " is not in this group of ", size_);
    }
    auto it = buffers_.find(id);
    if (it == buffers_.end()) fail("get: buffer id ", id, " is not registered");
    const std::size_t have = it->second.sizes[src_rank];
    if (offset > have || bytes > have - offset) {
      fail("get: bytes [", offset, ", ", offset + bytes, ") of buffer ", id, " on rank ",
           src_rank, " are out of range (it registered ", have, " bytes)");
    }
    if (bytes == 0) return;
    if (it->second.win == MPI_WIN_NULL) {  // group of one
      copy(dst, static_cast<const char*>(it->second.local) + offset, bytes);
      return;
    }
    MPI_Win win = it->second.win;
    mpi_check(MPI_Win_lock(MPI_LOCK_SHARED, src_rank, 0, win), "Win_lock");
    auto* out = static_cast<char*>(dst);
    for (std::size_t off = 0; off < bytes; off += piece_bytes()) {
      const int len = static_cast<int>(std::min(piece_bytes(), bytes - off));
      mpi_check(MPI_Get(out + off, len, MPI_BYTE, src_rank,
                        static_cast<MPI_Aint>(offset + off), len, MPI_BYTE, win),
                "Get");
    }
    mpi_check(MPI_Win_unlock(src_rank, win), "Win_unlock");
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    agree(kOpSplit, 0, 0, "split");
    MPI_Comm sub = MPI_COMM_NULL;
    mpi_check(MPI_Comm_split(coll_, color < 0 ? MPI_UNDEFINED : color, key, &sub), "Comm_split");
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(sub, timeout_s_);
  }

 private:
  enum AgreeOp : std::uint64_t { kOpRegister = 1, kOpDeregister, kOpSplit };

  // Before a blocking MPI collective: every rank sends (op, id, value) to every other rank under
  // a deadline; all must agree on (op, id). Returns the values by rank.
  std::vector<std::uint64_t> agree(AgreeOp op, int id, std::uint64_t value, const char* what) {
    const int n = size_;
    std::uint64_t mine[3] = {op, static_cast<std::uint64_t>(static_cast<std::int64_t>(id)), value};
    std::vector<std::uint64_t> all(3 * static_cast<std::size_t>(n));
    Batch b(coll_, kTagAgree, timeout_s_, what);
    for (int k = 1; k < n; ++k) {
      const int from = (rank_ - k + n) % n;
      b.recv(from, all.data() + 3 * from, sizeof(mine));
    }
    for (int k = 1; k < n; ++k) b.send((rank_ + k) % n, mine, sizeof(mine));
    std::copy(mine, mine + 3, all.data() + 3 * rank_);
    b.complete();
    std::vector<std::uint64_t> values(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) {
      const std::uint64_t* p = all.data() + 3 * q;
      if (p[0] != mine[0] || p[1] != mine[1]) {
        fail("ranks disagree on a collective: rank ", rank_, " called ", op_name(mine[0]),
             " (id ", id, "), rank ", q, " called ", op_name(p[0]), " (id ",
             static_cast<std::int64_t>(p[1]), ")");
      }
      values[q] = p[2];
    }
    return values;
  }

  static const char* op_name(std::uint64_t op) {
    switch (op) {
      case kOpRegister: return "register_buffer";
      case kOpDeregister: return "deregister_buffer";
      case kOpSplit: return "split";
    }
    return "?";
  }

  void check_span(std::span<const std::size_t> s, const char* what, const char* name) const {
    if (s.size() != static_cast<std::size_t>(size_)) {
      fail(what, ": ", name, " has ", s.size(), " entries, expected ", size_, " (group size)");
    }
  }
  void check_peer(int q, const char* what) const {
    if (q < 0 || q >= size_ || q == rank_) {
      fail(what, ": peer rank ", q, " is not another rank of this group (rank ", rank_, " of ",
           size_, ")");
    }
  }
  static void check_tag(int tag, const char* what) {
    if (tag < 0 || tag > 32767) fail(what, ": tag ", tag, " is outside [0, 32767]");
  }

  struct Buffer {
    MPI_Win win = MPI_WIN_NULL;      // MPI_WIN_NULL in a group of one
    const void* local = nullptr;     // this rank's buffer
    std::vector<std::size_t> sizes;  // [rank] registered bytes
  };

  MPI_Comm coll_ = MPI_COMM_NULL;  // collectives (private tags)
  MPI_Comm p2p_ = MPI_COMM_NULL;   // user send/recv
  double timeout_s_;
  int rank_ = 0, size_ = 1;
  std::map<int, Buffer> buffers_;
};

}  // namespace

MpiWorld::MpiWorld(const CommOptions& options) : options_(options) {
  if (!(options.timeout_s > 0)) fail("MpiWorld: timeout_s = ", options.timeout_s, ", expected > 0");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (mpi_finalized()) {
      fail("MpiWorld: MPI was already finalised in this process (one MpiWorld per process)");
    }
    int provided = 0;
    // MULTIPLE: SiDP's prefetch thread issues one-sided gets on its own communicator while the
    // rank's thread runs collectives on others (engine/stage_ffn_owner.h).
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
              "Init_thread");
    if (provided < MPI_THREAD_MULTIPLE)
      log_warn("MPI provides thread level ", provided, " < MPI_THREAD_MULTIPLE: SiDP weight-as-a-service ",
               "(a prefetch thread's one-sided gets) is not safe under this MPI");
    if (provided < MPI_THREAD_SERIALIZED) {
      log_warn("MPI provides thread level ", provided, " < MPI_THREAD_SERIALIZED: call the ",
               "communicator from the main thread only");
    }
    finalize_ = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiWorld::~MpiWorld() {
  if (finalize_ && !mpi_finalized()) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiWorld::world_communicator() {
  MPI_Comm comm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "Comm_dup");
  return std::make_unique<MpiCommunicator>(comm, options_.timeout_s);
}

void MpiWorld::run(const std::function<void(Communicator&)>& fn) {
  std::unique_ptr<Communicator> comm;
  try {
    comm = world_communicator();
    fn(*comm);
    comm.reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: rank %d failed: %s\n", rank_, e.what());
    std::fflush(stderr);
    (void)comm.release();  // its collective frees could wait for dead peers
    MPI_Abort(MPI_COMM_WORLD, 1);
  } catch (...) {
    std::fprintf(stderr, "loom: rank %d failed: unknown exception\n", rank_);
    std::fflush(stderr);
    (void)comm.release();
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

}  // namespace loom
