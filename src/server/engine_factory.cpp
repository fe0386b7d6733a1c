#include "server/engine_factory.h"

#include "core/error.h"
#include "parallel/plan.h"

namespace loom::server {

void check_layout(const EngineSpec& spec) {
  if (spec.comm != "local" && spec.comm != "mpi") fail("--comm must be local or mpi, got '", spec.comm, "'");
  if (spec.ranks < 0 || (spec.ranks == 0 && spec.comm != "mpi")) fail("--ranks must be >= 1, got ", spec.ranks);
}

void with_engine(const EngineSpec& spec, std::shared_ptr<const Model> model,
                 const std::function<void(EngineHandle&)>& serve) {
  check_layout(spec);
  if (spec.pool()) {
    cluster::PoolOptions o;
    o.comm = spec.comm;
    o.ranks = spec.ranks;
    o.model_path = spec.model_path;
    o.engine = spec.config;
    o.load_model = [model](int) { return model; };
    spec.configure_pool(o, *model);
    cluster::run_pool(o, [&](cluster::PoolEngine& e) { serve(e); });
    return;
  }
  if (!spec.distributed()) {
    Engine engine(std::move(model), spec.config);
    serve(engine);
    return;
  }
  DistOptions o;
  o.comm = spec.comm;
  o.ranks = spec.ranks;
  o.plan = cat("tp=", std::max(spec.ranks, 1));
  o.model_path = spec.model_path;
  o.engine = spec.config;
  o.load_model = [model](int) { return model; };
  if (spec.configure_dist) spec.configure_dist(o);
  run_distributed(o, [&](DistEngine& e) { serve(e); });
}

}  // namespace loom::server
