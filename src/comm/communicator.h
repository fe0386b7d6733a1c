// Communicator: the collectives and point-to-point operations every multi-rank plan stands on.
//
// One Communicator object per rank per group (the world, or a tp/sp/kvp/pp/dp group made with
// split()). Ranks are numbered 0..size()-1 inside the group. Backends:
//   - single (comm/single.h): one rank, every collective a copy or a no-op;
//   - local  (comm/local.h):  N ranks as threads of one process over shared memory;
//   - mpi    (comm/mpi/mpi_world.h, only with LOOM_HAVE_MPI): one rank per OpenMPI process.
// comm/world.h chooses one by name (`--comm single|local|mpi`).
//
// Contracts shared by all backends:
//   - Collectives are called by every rank of the group, in the same order, with agreeing sizes.
//     A rank that skips one, calls another or passes a different size is an error: the local
//     backend detects the mismatch and throws loom::Error naming both calls; every backend
//     throws (local) or aborts the job (mpi) when a wait passes CommOptions::timeout_s, so a
//     disagreement never hangs.
//   - Sums are deterministic: element i of a reduction is ((x_0 + x_1) + x_2) + ... + x_{P-1}
//     in f32, in rank order of the group (x_r = rank r's input). Every rank gets the same bits,
//     and the single, local and mpi backends give the same bits for the same inputs (they share
//     reduce_sum_rank_order()). No FMA, no tree: the order is part of the contract.
//   - Sizes are counts of elements (f32) or of bytes as the name says; all counts are size_t and
//     may exceed INT_MAX (the mpi backend splits messages into pieces of at most 1 GiB).
//   - Buffers of one call must not overlap unless the function says so.
//   - A Communicator is used by one thread at a time (the rank's thread, or one helper thread that
//     alone uses a communicator split for it: SiDP's prefetch thread; the MPI backend initialises
//     MPI_THREAD_MULTIPLE for that).
//   - Failures: a loom::Error from a collective means the group is broken (a rank failed, timed
//     out or disagreed); the rank should stop using the group. check_agreement() is the exception:
//     it completes the collective on every rank before throwing, so the group stays usable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace loom {

// Options shared by every backend.
struct CommOptions {
  // Longest a rank waits inside one operation for its peers before it reports an error
  // (seconds). Default: $LOOM_COMM_TIMEOUT_S if set, else 60.
  double timeout_s = default_timeout_s();

  static double default_timeout_s();
};

// A started non-blocking operation (start_all_to_all_v_bytes). wait() completes it (throws as the
// blocking form would); the destructor of a request that was never waited on cancels what it can
// and must only run while the group is being abandoned after an error.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;  // 0..size()-1 inside this group
  virtual int size() const = 0;  // ranks in this group, >= 1
  // "single", "local" or "mpi".
  virtual std::string_view backend() const = 0;

  // ---- reductions (f32, deterministic rank-order sum, see above) ----

  // In place: data [count] on every rank; afterwards every rank holds the elementwise sum.
  virtual void all_reduce_sum(float* data, std::size_t count) = 0;

  // send [size() * recv_count]: chunk r (elements [r*recv_count, (r+1)*recv_count)) is summed
  // over ranks into rank r's recv [recv_count].
  virtual void reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) = 0;

  // Uneven chunks: counts [size()], equal on every rank; send [sum(counts)] holds the chunks in
  // rank order (chunk r at offset counts[0] + ... + counts[r-1]); recv [counts[rank()]].
  virtual void reduce_scatter_sum_v(const float* send, float* recv,
                                    std::span<const std::size_t> counts) = 0;

  // ---- gathers ----

  // send [bytes_per_rank] from every rank; recv [size() * bytes_per_rank], rank r's at
  // r*bytes_per_rank. send may be recv + rank()*bytes_per_rank (in place).
  virtual void all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) = 0;

  // Uneven: recv_bytes [size()], equal on every rank; rank r sends recv_bytes[r] bytes; recv
  // holds them in rank order without gaps. send may be rank()'s slot of recv (in place).
  virtual void all_gather_v_bytes(const void* send, void* recv,
                                  std::span<const std::size_t> recv_bytes) = 0;

  // f32 forms of the two above (counts in elements).
  void all_gather(const float* send, float* recv, std::size_t count_per_rank);
  void all_gather_v(const float* send, float* recv, std::span<const std::size_t> counts);

  // ---- all-to-all ----

  // send [size()][bytes_per_rank]: chunk j goes to rank j; recv [size()][bytes_per_rank]: chunk j
  // came from rank j.
  virtual void all_to_all_bytes(const void* send, void* recv, std::size_t bytes_per_rank) = 0;
  void all_to_all(const float* send, float* recv, std::size_t count_per_rank);

  // Uneven, in BYTES (counts and displacements alike, so any element type works): rank i sends
  // send_bytes[j] bytes starting at send + send_displs[j] to rank j, which stores them at
  // recv + recv_displs[i]; recv_bytes[i] on rank j must equal send_bytes[j] on rank i (a
  // mismatch is a loom::Error). All four spans have size() entries. Regions may be in any order
  // but must not overlap within recv.
  virtual void all_to_all_v_bytes(const void* send, std::span<const std::size_t> send_bytes,
                                  std::span<const std::size_t> send_displs, void* recv,
                                  std::span<const std::size_t> recv_bytes,
                                  std::span<const std::size_t> recv_displs) = 0;

  // Non-blocking form of all_to_all_v_bytes (Nitsum 3.2.2 double-buffered KV migration; Helix
  // 2.1.3 HOP-B): returns at once; the transfer completes in the request's wait(). Until then
  // none of the buffers may be touched, and the rank may compute or start further requests. Every
  // rank starts the same sequence of requests and waits on them in the same order. The counts and
  // displacements are copied (the spans need not outlive the call). The default implementation
  // runs the blocking all_to_all_v_bytes inside wait() (no overlap: the local and single
  // backends, where a transfer is a memory copy by the receiving rank anyway); the MPI backend
  // posts the messages at once (MPI_Isend / MPI_Irecv) so they progress while the rank computes.
  virtual std::unique_ptr<CommRequest> start_all_to_all_v_bytes(const void* send,
                                                                std::span<const std::size_t> send_bytes,
                                                                std::span<const std::size_t> send_displs,
                                                                void* recv,
                                                                std::span<const std::size_t> recv_bytes,
                                                                std::span<const std::size_t> recv_displs);

  // ---- point to point (bytes, tagged) ----

  // tag in [0, 32767]. A send may block until the matching recv is posted (it always does on
  // the local backend, like MPI_Ssend), so write exchanges deadlock-free (e.g. even ranks send
  // first, odd ranks receive first). Messages between one pair with one tag arrive in order.
  // The recv's byte count must equal the send's (a mismatch is a loom::Error). dst != rank().
  virtual void send(int dst, int tag, const void* data, std::size_t bytes) = 0;
  virtual void recv(int src, int tag, void* data, std::size_t bytes) = 0;

  // data [bytes] on every rank; afterwards every rank holds root's bytes.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;

  virtual void barrier() = 0;

  // ---- one-sided get (SiDP weight-as-a-service streams FFN weights with it) ----

  // Collective: every rank exposes [ptr, ptr + bytes) under the same id (bytes may differ per
  // rank and may be 0). Ranks disagreeing on the id is a loom::Error. The owner must not write
  // the buffer while others may read it (separate such phases with barrier()).
  virtual void register_buffer(int id, void* ptr, std::size_t bytes) = 0;
  // Collective: ends the exposure; no get() on id may be in flight on any rank.
  virtual void deregister_buffer(int id) = 0;
  // Copies bytes [offset, offset + bytes) of src_rank's buffer id into dst (src_rank may be
  // rank()). Not collective: the owner does nothing. Out of range is a loom::Error.
  virtual void get(int src_rank, int id, std::size_t offset, void* dst, std::size_t bytes) = 0;

  // ---- host shared memory (Seesaw's CPU KV tier, kv/kv_tier.h) ----

  // Collective: `bytes` zero-filled bytes shared by every rank of the group, which must all run
  // on one host (MPI: MPI_Win_allocate_shared over the host's ranks; a group spanning hosts is a
  // loom::Error). Sets *data; the returned handle keeps the memory alive (freeing it is collective
  // under MPI). The default (thread backends, whose ranks share the process) is a loom::Error: the
  // caller allocates process memory once for all of them instead.
  // *sync (when given) is set to the memory fence of that memory: MPI_Win_sync on the window. The
  // MPI-3 rules for load/store in a shared window (unified model): a store another process reads is
  // ordered by "sync; a synchronising communication between the two processes; sync" (the writer's
  // MPI_Win_sync after its stores and before the communication, the reader's after it and before
  // its loads); the window stays in one MPI_Win_lock_all epoch from allocation to free.
  virtual std::shared_ptr<void> allocate_host_shared(std::size_t bytes, void** data,
                                                     std::function<void()>* sync = nullptr);

  // ---- groups ----

  // Collective: ranks with equal color form a new group, ordered by (key, rank()) ascending
  // (like MPI_Comm_split). color < 0 joins no group and gets nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // ---- agreement ----

  // Collective: every rank passes a hash of something that must be equal everywhere (the plan,
  // the step descriptor). Returns normally when all hashes are equal; otherwise throws
  // loom::Error on every rank, naming `what` and each distinct value with the ranks holding it.
  void check_agreement(const std::string& what, std::uint64_t hash);
};

// FNV-1a 64 of bytes, for check_agreement (seed chains calls: hash_bytes(b, n, hash_bytes(a, m))).
std::uint64_t hash_bytes(const void* data, std::size_t bytes,
                         std::uint64_t seed = 0xcbf29ce484222325ull);

// The reduction every backend uses: out[i] = ((in[0][i] + in[1][i]) + ...) + in[n-1][i] in f32.
// out may alias any in[r] (each element is read from all inputs before it is written).
void reduce_sum_rank_order(float* out, const float* const* in, int n_inputs, std::size_t count);

// Begin of chunk r when count elements are split into n near-equal contiguous chunks (the
// first count % n chunks get one more). Used by all-reduce; chunk r is [begin(r), begin(r+1)).
std::size_t chunk_begin(std::size_t count, int n, int r);

}  // namespace loom
