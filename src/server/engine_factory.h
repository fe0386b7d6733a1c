// The one place where `loom serve` turns its command-line layout into an engine: the
// single-process Engine for one rank, the distributed engine (engine/dist_engine.h) for
// --ranks N --plan P [--plan Q ...] [--comm local|mpi] (the plans, policy and its options are
// filled in by configure_dist; DP replicas step together under the one scheduler, so every plan
// serves live), or Nitsum's pool of independently stepping instances (cluster/pool.h) for
// --ranks N --policy nitsum (filled in by configure_pool).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cluster/pool.h"
#include "engine/dist_engine.h"
#include "engine/engine.h"
#include "model/weights.h"

namespace loom::server {

struct EngineSpec {
  std::string model_path;
  EngineConfig config;
  int ranks = 1;              // --ranks (mpi: 0 = as many as mpirun started)
  std::string comm = "local";  // --comm local | mpi
  bool layout_options = false;  // a layout policy or its options were given (distributed engine)
  // Fills the distributed engine's layout (--plan, --policy, --shift-threshold, --shift-weights).
  std::function<void(DistOptions&)> configure_dist;
  // Set: a Nitsum pool (--policy nitsum) of `ranks` workers; fills the pool's options (tiers,
  // layouts, window, degrees, the planner's profile table) once the model is loaded.
  std::function<void(cluster::PoolOptions&, const Model&)> configure_pool;
  bool distributed() const {
    return ranks != 1 || comm != "local" || layout_options;
  }
  bool pool() const { return configure_pool != nullptr; }
};

// Throws loom::Error naming the flag for a layout serve cannot run. Cheap: call it before
// loading the model.
void check_layout(const EngineSpec& spec);

// check_layout(spec), builds the engine over `model` and calls `serve` with it (on world rank 0
// only when distributed: the other ranks follow its steps until `serve` returns; a pool: on its
// control plane, a cluster::PoolEngine).
void with_engine(const EngineSpec& spec, std::shared_ptr<const Model> model,
                 const std::function<void(EngineHandle&)>& serve);

}  // namespace loom::server
