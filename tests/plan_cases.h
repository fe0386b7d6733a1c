// Every plan and plan set the engine runs, on two ranks of stories260K (8 query heads, 4 KV heads,
// 5 layers), as one table: the device-seam test runs them on a strict CPU device
// (tests/dist/device_seam_test.cpp) and tests/gpu on the CUDA device, each against the single-rank
// CPU engine's greedy tokens. Header-only, for test areas that link the engine.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/dist_engine.h"
#include "kv/kv_tier.h"
#include "single_rank.h"

namespace loom::test {

struct PlanCase {
  std::string name;
  std::vector<std::string> plans;
  std::string policy = "fixed";
  int64_t shift_threshold = -1;
  int64_t sidp_threshold = -1;
  int64_t tier_tokens = 0;  // Seesaw's CPU tier, in tokens of the model's KV
};

inline std::vector<PlanCase> two_rank_plan_cases() {
  return {
      {"tp=2", {"tp=2"}},
      {"dp=2", {"dp=2"}},
      {"pp=2", {"pp=2,layers=3+2"}},
      {"ulysses sp=2", {"sp=2"}},
      {"shift sp=2 (threshold 8)", {"sp=2"}, "shift", 8},
      {"helix kvp=2 hopb", {"kvp=2,tpa=1"}},
      {"helix kvp=2 hopb=off", {"kvp=2,tpa=1,hopb=off"}},
      {"sidp was", {"dp=2,weights=owner"}, "sidp:was"},
      {"sidp cas", {"dp=2,weights=owner"}, "sidp:cas"},
      {"set tp=2|dp=2 cycle:2 (KV migrated)", {"tp=2", "dp=2"}, "cycle:2"},
      {"set pp=2|kvp=2 cycle:3 (KV migrated)", {"pp=2,layers=3+2", "kvp=2,tpa=1"}, "cycle:3"},
      {"seesaw pp=2|tp=2 (CPU tier)", {"pp=2,layers=3+2", "tp=2"}, "seesaw", -1, -1, 256},
  };
}

// Runs `requests` under the case on the local backend; `configure` adjusts the options (the
// device; an after_step it sets must call the one it finds, the holdings check). Returns outputs
// by request id; checks the KV holdings after every step.
inline std::map<int64_t, std::vector<int32_t>> run_plan_case(const PlanCase& pc, const std::shared_ptr<Model>& model,
                                                              const std::vector<Request>& requests,
                                                              const std::function<void(DistOptions&)>& configure) {
  DistOptions o;
  o.comm = "local";
  o.plans = pc.plans;
  o.policy = pc.policy;
  o.shift_threshold = pc.shift_threshold;
  o.sidp_threshold = pc.sidp_threshold;
  o.ranks = Plan::parse(pc.plans[0]).size();
  o.engine.max_tokens_per_step = 16;  // prompts prefilled in chunks beside decodes
  o.engine.max_num_seqs = 64;
  o.engine.kv_cache_bytes = int64_t(8) << 20;
  o.engine.max_model_len = 64;
  const ModelConfig& c = model->config;
  if (pc.tier_tokens > 0) o.engine.cpu_kv_bytes = pc.tier_tokens * tier_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_dim);
  o.comm_options.timeout_s = 60;
  o.load_model = [model](int) { return model; };
  HoldingsCheck holdings;
  holdings.install(o, o.ranks);
  if (configure) configure(o);  // after: a configure that sets after_step chains the holdings check
  std::map<int64_t, std::vector<int32_t>> out;
  run_distributed(o, [&](DistEngine& e) {
    for (const Sequence& s : e.run(requests)) {
      EXPECT_TRUE(s.finish_reason == FinishReason::kLength || s.finish_reason == FinishReason::kStop)
          << pc.name << ": request " << s.id() << ": " << finish_reason_name(s.finish_reason) << " " << s.finish_detail;
      out[s.id()] = s.output;
    }
    EXPECT_EQ(e.scheduler().num_used_blocks(), 0) << pc.name;
  });
  holdings.expect_clean(pc.name);
  return out;
}

}  // namespace loom::test
