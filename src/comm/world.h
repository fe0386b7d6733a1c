// Choosing a backend by name (`--comm single|local|mpi`): a World hosts the ranks this process
// runs and hands each its world Communicator.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "comm/rank_memory.h"

namespace loom {

class World {
 public:
  virtual ~World() = default;
  virtual std::string_view backend() const = 0;
  // Ranks in the world (all processes together for mpi).
  virtual int size() const = 0;
  // Runs fn once for every rank hosted by this process, with that rank's world communicator:
  // all size() ranks as threads (local), rank 0 (single), this process's rank (mpi). Returns
  // when they have returned. A failure: local and single rethrow the first exception (see
  // LocalWorld::run); mpi prints "loom: rank R failed: <message>" to stderr and aborts the whole
  // job (MPI_Abort), because an MPI communicator cannot be used after a rank has failed.
  virtual void run(const std::function<void(Communicator&)>& fn) = 0;
};

// backend: "single" (n_ranks must be 1 or 0), "local" (n_ranks >= 1 threads), "mpi" (n_ranks 0
// means "as many as mpirun started"; otherwise it must equal that number). The mpi world
// initialises MPI and finalises it when destroyed, so make at most one per process.
// Unknown or unavailable backends are a loom::Error naming the choices.
// `memory` (local only; null: host memory): how the local backend's ranks move their buffers, e.g.
// ranks sharing one GPU (gpu/device.h rank_memory).
std::unique_ptr<World> make_world(std::string_view backend, int n_ranks,
                                  const CommOptions& options = {}, RankMemoryFactory memory = nullptr);

// The backends compiled into this build, e.g. {"single", "local", "mpi"}.
std::vector<std::string> comm_backends();

}  // namespace loom
