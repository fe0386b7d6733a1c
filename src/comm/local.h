// The local backend: N ranks as threads of one process, collectives over shared memory.
//
// How it works: each collective publishes its buffer pointers in a per-rank slot of the group's
// shared arena, crosses a barrier, then every rank reads its peers' buffers directly (one copy,
// no transport) and crosses a final barrier before anyone returns (so buffers stay valid while
// peers read them). All-reduce is the bandwidth-friendly two-phase form: rank r sums chunk r
// from all peers' buffers in rank order, then every rank copies the other chunks from their
// owners. Slots are double-buffered by barrier parity, so a fast rank's next call never
// overwrites a slot a slow rank still reads. send/recv is a rendezvous: the receiver copies
// straight from the sender's buffer, and send returns once it has.
//
// Memory: every byte a collective moves goes through the rank's RankMemory (rank_memory.h):
// host memmove by default, or a GPU stream for ranks sharing one device. The rank fences its
// memory when it enters a collective and before it tells peers it has finished reading them.
//
// Faults (the item 7): every wait spins briefly, then sleeps on a condition variable
// with a deadline of CommOptions::timeout_s. When a rank's function throws, the world is marked
// failed and every waiting rank throws loom::Error("rank R failed: <its message>") within about
// 10 ms. A rank that returns while peers wait for it in a collective fails those peers at once.
// Each collective checks that all ranks called the same operation with the same sizes and
// throws "ranks disagree on collective #N: ..." otherwise. A rank that leaves a collective with
// an error (timeout, disagreement, failed peer) first marks the world failed, then waits until
// no peer still copies from its buffers, so unwinding never frees memory a peer reads; errors
// from send/recv and get() (sizes, ranges) do not fail the world. Limits: a rank stuck outside
// the communicator (an endless loop in user code) cannot be interrupted: its peers time out and
// fail, but run() still waits for that thread to return. A registered buffer must outlive every
// get() on it: if its owner's function throws while peers may still get() from it, keep the
// buffer alive outside the rank function.
#pragma once

#include <functional>

#include "comm/communicator.h"
#include "comm/rank_memory.h"

namespace loom {

class LocalWorld {
 public:
  // Runs fn on n_ranks threads, each with its own world Communicator (rank 0..n_ranks-1), joins
  // them, and rethrows the first exception a rank threw (the original, not the "rank R failed"
  // errors it caused on the others). n_ranks >= 1.
  static void run(int n_ranks, const std::function<void(Communicator&)>& fn,
                  const CommOptions& options = {});
  // The same with each rank's data moved by memory(rank) (comm/rank_memory.h): ranks sharing one
  // GPU pass gpu::shared_gpu_memory(); tests pass host memories that defer their copies.
  // Sub-groups made by split() keep their rank's memory.
  static void run(int n_ranks, const std::function<void(Communicator&)>& fn, const CommOptions& options,
                  const RankMemoryFactory& memory);
};

}  // namespace loom
