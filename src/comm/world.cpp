#include "comm/world.h"

#include "comm/local.h"
#include "comm/single.h"
#include "core/error.h"
#ifdef LOOM_HAVE_MPI
#include "comm/mpi/mpi_world.h"
#endif

namespace loom {
namespace {

class SingleWorld final : public World {
 public:
  std::string_view backend() const override { return "single"; }
  int size() const override { return 1; }
  void run(const std::function<void(Communicator&)>& fn) override {
    SingleCommunicator comm;
    fn(comm);
  }
};

class LocalThreadsWorld final : public World {
 public:
  LocalThreadsWorld(int n, const CommOptions& options, RankMemoryFactory memory)
      : n_(n), options_(options), memory_(std::move(memory)) {}
  std::string_view backend() const override { return "local"; }
  int size() const override { return n_; }
  void run(const std::function<void(Communicator&)>& fn) override {
    if (memory_) LocalWorld::run(n_, fn, options_, memory_);
    else LocalWorld::run(n_, fn, options_);
  }

 private:
  int n_;
  CommOptions options_;
  RankMemoryFactory memory_;
};

std::string choices() {
  std::string s;
  for (const auto& b : comm_backends()) s += (s.empty() ? "" : "|") + b;
  return s;
}

}  // namespace

std::vector<std::string> comm_backends() {
#ifdef LOOM_HAVE_MPI
  return {"single", "local", "mpi"};
#else
  return {"single", "local"};
#endif
}

std::unique_ptr<World> make_world(std::string_view backend, int n_ranks,
                                  const CommOptions& options, RankMemoryFactory memory) {
  if (backend == "single") {
    if (n_ranks > 1) fail("--comm single runs 1 rank, but ", n_ranks, " ranks were asked for");
    if (memory) return std::make_unique<LocalThreadsWorld>(1, options, std::move(memory));  // device memory
    return std::make_unique<SingleWorld>();
  }
  if (backend == "local") {
    if (n_ranks < 1) fail("--comm local needs a rank count >= 1, got ", n_ranks);
    return std::make_unique<LocalThreadsWorld>(n_ranks, options, std::move(memory));
  }
  if (backend == "mpi") {
#ifdef LOOM_HAVE_MPI
    auto world = std::make_unique<MpiWorld>(options);
    if (n_ranks != 0 && n_ranks != world->size()) {
      fail("--comm mpi: ", n_ranks, " ranks were asked for, but mpirun started ", world->size(),
           " processes");
    }
    return world;
#else
    fail("--comm mpi: this loom was built without OpenMPI (LOOM_MPI=OFF or MPI not found); "
         "choose one of ", choices());
#endif
  }
  fail("--comm '", backend, "' is not a backend; choose one of ", choices());
}

}  // namespace loom
