#include "server/engine_factory.h"

#include "core/error.h"

namespace loom::server {

void check_layout(const EngineSpec& spec) {
  if (spec.ranks < 1) fail("--ranks must be >= 1, got ", spec.ranks);
  if (spec.ranks > 1)
    fail("--ranks ", spec.ranks, ": multi-rank serving is not yet supported (the distributed engine is not "
         "wired into loom serve); use --ranks 1");
  if (!spec.plan.empty() && spec.plan != "default" && spec.plan != "tp=1")
    fail("--plan ", spec.plan, ": layout plans are not yet supported by loom serve (one rank only); omit --plan");
  if (!spec.policy.empty() && spec.policy != "fixed")
    fail("--policy ", spec.policy, ": layout policies are not yet supported by loom serve; omit --policy or use fixed");
}

std::unique_ptr<Engine> make_engine(const EngineSpec& spec, std::shared_ptr<const Model> model) {
  check_layout(spec);
  return std::make_unique<Engine>(std::move(model), spec.config);
}

}  // namespace loom::server
