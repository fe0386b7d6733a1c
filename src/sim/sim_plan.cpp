#include "sim/sim_plan.h"

#include <cctype>

#include "core/error.h"
#include "engine/policy.h"
#include "parallel/plan.h"

namespace loom::sim {

std::string ParallelConfig::name() const {
  std::string s;
  auto add = [&](const char* k, int v) {
    if (v > 1) s += cat(s.empty() ? "" : ",", k, "=", v);
  };
  add("sp", sp);
  add("tp", tp);
  add("pp", pp);
  return s.empty() ? "tp=1" : s;
}

ParallelConfig SimPlan::config_for(int num_tokens) const {
  // Shift Algorithm 2, the engine's own rule (engine/policy.h).
  if (shift && !shift_runs_base(num_tokens, shift_threshold)) return shift_config();
  return base;
}

std::string SimPlan::name() const {
  std::string s = shift ? "shift:" : "";
  if (dp > 1) s += cat("dp=", dp, base.gpus() > 1 ? "," : "");
  if (dp == 1 || base.gpus() > 1) s += base.name();
  if (shift) s += cat(",threshold=", shift_threshold);
  return s;
}

SimPlan SimPlan::parse(const std::string& text) {
  // The layout itself is parsed by loom::Plan (src/parallel/plan.h); the simulator adds only the
  // Shift policy's "threshold=" key and treats "shift:" as the policy (base sp x tp that runs its
  // shift config for small steps).
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += char(std::tolower(static_cast<unsigned char>(c)));
  SimPlan p;
  std::string rest;
  size_t pos = 0;
  while (pos <= t.size()) {
    size_t comma = t.find(',', pos);
    if (comma == std::string::npos) comma = t.size();
    std::string item = t.substr(pos, comma - pos);
    pos = comma + 1;
    const std::string bare = item.rfind("shift:", 0) == 0 ? item.substr(6) : item;
    if (bare.rfind("threshold=", 0) == 0) {
      const std::string val = bare.substr(10);
      try {
        size_t used = 0;
        p.shift_threshold = std::stoi(val, &used);
        if (used != val.size() || p.shift_threshold < 0) throw std::invalid_argument(val);
      } catch (const std::exception&) {
        fail("plan '", text, "': threshold must be a non-negative integer, found '", val, "'");
      }
      if (item.rfind("shift:", 0) == 0) rest += std::string(rest.empty() ? "" : ",") + "shift:";
      continue;
    }
    if (!item.empty()) rest += (rest.empty() || rest.back() == ':' ? "" : ",") + item;
  }
  if (rest == "shift" || rest == "shift:") fail("plan '", text, "': shift needs a base, e.g. shift:sp=8");
  const Plan plan = Plan::parse(rest);
  if (plan.helix()) fail("plan '", text, "': Helix (kvp) plans are not priced by the simulator yet");
  p.dp = plan.dp;
  p.base.tp = plan.tp;
  p.base.sp = plan.sp;
  p.base.pp = plan.pp;
  p.shift = plan.shift;
  if (t.rfind("shift", 0) == 0 && !p.shift)
    fail("plan '", text, "': shift needs a sequence-parallel base (sp > 1), e.g. shift:sp=8");
  if (p.base.sp > 1 && p.base.pp > 1) fail("plan '", text, "': sp with pp is not modelled");
  return p;
}

}  // namespace loom::sim
