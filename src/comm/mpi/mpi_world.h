// The mpi backend (only with LOOM_HAVE_MPI): one rank per OpenMPI process, started by
// `mpirun -np N loom ...`.
//
// Implementation notes (mpi_world.cpp):
//   - Every operation is non-blocking MPI (Isend/Irecv/Ibcast/Ibarrier) completed by a polling
//     loop (MPI_Testall; spin with yield for 5 ms, then sleep 50 us between polls, so
//     oversubscribed ranks leave the cores to others) with a deadline of CommOptions::timeout_s.
//     At the deadline it throws loom::Error naming the operation and the rank; MpiWorld::run
//     then aborts the job. That is the watchdog for dead or stuck peers and for ranks calling
//     different operations. (A peer process that dies is normally seen first by mpirun, which
//     kills the job.)
//   - Errors come back as codes (MPI_ERRORS_RETURN on every communicator) and become loom::Error.
//   - Large counts: messages are cut into pieces of at most 1 GiB, so no count passed to MPI
//     exceeds INT_MAX.
//   - Collectives are built from point-to-point messages on a private duplicate of the group's
//     communicator (user send/recv use another), each operation with its own tag, so that a
//     mismatch times out instead of matching the wrong data. all_reduce is reduce-scatter (each
//     rank receives its chunk from every peer and sums in rank order with
//     reduce_sum_rank_order) followed by all-gather: the same bits as the local backend.
//   - One-sided get: MPI_Win_create per registered buffer, MPI_Get under a passive-target
//     MPI_Win_lock(MPI_LOCK_SHARED)/MPI_Win_unlock. Blocking calls without a non-blocking form
//     (Win_create/Win_free/Comm_split/Win_lock) are preceded by a deadline-checked agreement
//     exchange, so a missing rank is detected before them.
//   - MPI is initialised with MPI_THREAD_SERIALIZED: any thread may call, one at a time.
#pragma once

#include <memory>

#include "comm/world.h"

namespace loom {

class MpiWorld final : public World {
 public:
  // Initialises MPI unless it already is (then it is not finalised here either). MPI can be
  // initialised once per process: a second MpiWorld after the first one finalised throws.
  explicit MpiWorld(const CommOptions& options = {});
  ~MpiWorld() override;

  std::string_view backend() const override { return "mpi"; }
  int size() const override { return size_; }
  int rank() const { return rank_; }  // this process's rank in MPI_COMM_WORLD

  // See World::run: on failure prints "loom: rank R failed: <message>" and calls MPI_Abort.
  void run(const std::function<void(Communicator&)>& fn) override;

  // A communicator over a duplicate of MPI_COMM_WORLD, for callers that manage errors
  // themselves (tests). Destroy it before the MpiWorld.
  std::unique_ptr<Communicator> world_communicator();

 private:
  CommOptions options_;
  bool finalize_ = false;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace loom
