// The one place where `loom serve` turns its command-line layout into an engine. Today that is
// the single-process Engine (one rank); the distributed engine (--ranks N --plan ... --policy
// ...) plugs in here when it lands, and until then asking for it is a clear user error.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/weights.h"

namespace loom::server {

struct EngineSpec {
  std::string model_path;
  EngineConfig config;
  int ranks = 1;        // --ranks
  std::string plan;     // --plan (layout plan text, e.g. "tp=2"); "" = default
  std::string policy;   // --policy (layout policy name); "" = fixed/default
};

// Throws loom::Error naming the flag when the layout asks for what is not supported yet (ranks
// > 1, a plan or a policy other than the default). Cheap: call it before loading the model.
void check_layout(const EngineSpec& spec);

// check_layout(spec), then builds the engine over `model`.
std::unique_ptr<Engine> make_engine(const EngineSpec& spec, std::shared_ptr<const Model> model);

}  // namespace loom::server
