// The simulator's accuracy against the engine on this machine (issue 18's benchmark): the same
// requests through the real engine (ranks as threads, local backend) and through the simulator
// calibrated by a profile of this machine (`loom profile`), for tp=2, dp=2 and Shift over sp=2
// (and tp=1 for reference), and the plans later issues added (reported, outside the goal): Helix
// kvp=2,tpa=1, pipeline pp=2, SiDP dp=2,weights=owner under its adaptive policy, and Seesaw's
// set pp=2 (prefill) | tp=2 (decode); per plan the relative error of throughput, TTFT p50/p90,
// TPOT p50/p90 and step count. Goal (tp=2, dp=2, shift): median |error| <= 10%, no metric worse
// than 25% (printed, not asserted: timings on a shared machine are noisy).
//
// Paired rounds: each round measures a fresh profile of this machine, then runs every workload on
// the engine; a round's error is its simulation (calibrated by that round's profile) against its
// engine runs, and the error reported is the median over the rounds. Why: this machine's own speed
// drifts by 10-30% within minutes (a shared host: two profiles a minute apart differed by up to
// 39% on one shape, back-to-back tp=2 engine runs by 25%), so a profile measured once, minutes
// before the last engine run, says more about the drift than about the simulator. Within a
// profile, each point is the median of 3 sweeps over the token counts (loom profile --sweeps 3),
// so that a slow moment moves every row a little instead of a few rows a lot.
//
// Usage: bench_sim_fidelity [MODEL] [ROUNDS] [WORKLOAD...]
//   LOOM_BENCH_PLANS=goal runs only tp=1, tp=2, dp=2 and shift (default: every plan)
//   MODEL     a synthetic shape name (default small, f32) or a model file
//   WORKLOAD  batch (16 requests of 128 + 32 tokens at t = 0) and/or poisson (24 requests of
//             uniform 32..192 + 8..48 tokens at 12 requests/s: more than tp=1 serves here)
//             and/or light (the poisson requests at 4 requests/s: under every plan's capacity, so
//             TTFT and TPOT are those of small steps, not of a queue that grows all run long, as
//             at 12/s, where TTFT integrates any throughput error); default all three
// The profiles of the model's shapes go to $LOOM_BENCH_DIR (default /tmp/loom-bench)/
// profile-<model>-r<N>; LOOM_BENCH_REUSE_PROFILE=1 reuses $LOOM_BENCH_DIR/profile-<model> for every
// round instead. The layer operators are timed in the engine's order (loom profile --op-order engine); LOOM_BENCH_CLOCK=cpu times them with the rank
// thread's CPU clock (loom profile --clock cpu: what they cost a core of their own, whatever the
// machine's load while profiling; the engine's wall clock then adds the load of its own runs).
// LOOM_BENCH_REPEAT=1 runs every workload's engine runs twice a round and prints how far the
// engine is from itself (the noise floor). LOOM_OP_TIMING=1 (or cpu) adds, per plan, the engine's time by operator class beside the
// simulator's priced parts (sim/validate_engine.h op_breakdown), for the first round.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/error.h"
#include "engine/metrics.h"
#include "sim/validate_engine.h"

using namespace loom;

namespace {

struct Workload {
  std::string name;
  std::vector<TraceRequest> trace;
};

Workload workload(const std::string& name) {
  if (name == "batch")
    return {name, synthesize_trace(16, ArrivalSpec::all_at_zero(), 1, LengthDist::fixed(128), 2, LengthDist::fixed(32), 3)};
  if (name == "poisson")
    return {name, synthesize_trace(24, ArrivalSpec::poisson(12.0), 11, LengthDist::uniform(32, 192), 12,
                                   LengthDist::uniform(8, 48), 13)};
  if (name == "light")
    return {name, synthesize_trace(24, ArrivalSpec::poisson(4.0), 11, LengthDist::uniform(32, 192), 12,
                                   LengthDist::uniform(8, 48), 13)};
  std::fprintf(stderr, "unknown workload '%s' (batch, poisson, light)\n", name.c_str());
  std::exit(2);
}

// Measures this machine into `dir` (loom profile over the model's shapes); false on failure.
bool measure_profile(const std::string& dir, const std::string& model) {
  std::filesystem::remove_all(dir);
  const std::string cmd = std::string(LOOM_BIN) + " profile -o " + dir + " --model " + model +
                          " --shapes '' --dtypes f32 --tokens 1,2,4,8,16,32,64,128,256 --tp 1,2 --ranks 2"
                          " --concurrent 1,2 --reps 3 --sweeps 3" +
                          (std::getenv("LOOM_BENCH_CLOCK") ? std::string(" --clock ") + std::getenv("LOOM_BENCH_CLOCK")
                                                           : std::string());
  std::printf("profiling this machine: %s\n", cmd.c_str());
  std::fflush(stdout);
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "loom profile failed\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model_arg = argc > 1 ? argv[1] : "small";
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  std::vector<std::string> workloads;
  for (int i = 3; i < argc; ++i) workloads.push_back(argv[i]);
  if (workloads.empty()) workloads = {"batch", "poisson", "light"};

  const bool file = std::filesystem::exists(model_arg);
  const std::string model = file ? model_arg : bench::ensure_model(model_arg, DType::F32);
  const std::string stem = std::filesystem::path(model).stem().string();
  const std::string profile = bench::bench_dir() + "/profile-" + stem;
  const char* reuse_env = std::getenv("LOOM_BENCH_REUSE_PROFILE");
  const bool reuse = reuse_env && std::string(reuse_env) == "1" && sim::is_profile(profile);

  std::vector<sim::EnginePlan> plans = {sim::EnginePlan::parse("tp=1"), sim::EnginePlan::parse("tp=2"),
                                        sim::EnginePlan::parse("dp=2"), sim::EnginePlan::parse("sp=2@shift")};
  const char* which = std::getenv("LOOM_BENCH_PLANS");
  if (!(which && std::string(which) == "goal"))
    for (const char* p : {"kvp=2,tpa=1", "pp=2", "dp=2,weights=owner@sidp", "pp=2|tp=2@seesaw"})
      plans.push_back(sim::EnginePlan::parse(p));
  auto in_goal = [](const sim::EnginePlan& p) {
    return p.label() == "tp=2" || p.label() == "dp=2" || p.label() == "sp=2 @shift";
  };
  std::printf("model %s, %d round(s), %s\n", model.c_str(), rounds,
              reuse ? cat("one profile reused: ", profile).c_str()
                    : "each round: a fresh profile of this machine, then every workload's engine runs");

  std::vector<sim::EngineValidationOptions> opts;
  for (const std::string& wname : workloads) {
    sim::EngineValidationOptions o;
    o.model_path = model;
    o.trace = workload(wname).trace;
    o.max_num_seqs = 16;
    o.max_tokens_per_step = 256;
    o.kv_cache_bytes = int64_t(64) << 20;
    opts.push_back(std::move(o));
  }
  // runs[w][r]: round r of workload w, simulated with round r's profile.
  // LOOM_BENCH_REPEAT=1: every workload's engine runs twice a round, back to back, so that the
  // table also says how far the engine is from itself (the noise floor an error is read against).
  const bool repeat = std::getenv("LOOM_BENCH_REPEAT") && std::string(std::getenv("LOOM_BENCH_REPEAT")) == "1";
  std::vector<std::vector<std::vector<sim::PlanValidation>>> runs(workloads.size()), again(workloads.size());
  for (int r = 0; r < rounds; ++r) {
    const std::string dir = reuse ? profile : cat(profile, "-r", r);
    if (!reuse && !measure_profile(dir, model)) return 1;
    const sim::MachineProfile prof = sim::read_profile(dir);
    if (r == 0)
      std::printf("profile: %s kernels, %d thread(s) per rank\n", prof.kernel_path.c_str(), prof.threads_per_rank);
    for (size_t w = 0; w < workloads.size(); ++w) {
      bench::print_load(cat("round ", r, ", before ", workloads[w]).c_str());
      runs[w].push_back(sim::validate_engine(prof, opts[w], plans));
      if (repeat) again[w].push_back(sim::validate_engine(prof, opts[w], plans));
    }
  }
  bench::print_load("after the rounds");

  for (size_t w = 0; w < workloads.size(); ++w) {
    const std::string& wname = workloads[w];
    const auto& wr = runs[w];
    std::printf("\nworkload %s: %zu requests; per round error = (simulated - engine) / engine, the simulator "
                "calibrated by that round's profile%s; error = median over %d round(s)\n",
                wname.c_str(), opts[w].trace.size(), reuse ? " (one profile, reused)" : "", rounds);
    if (repeat)
      std::printf("engine vs itself = median over the rounds of |second run / first run - 1|, the engine's runs of "
                  "one round back to back\n");
    std::printf("%-26s %-17s %12s %12s %9s %s  %s\n", "plan", "metric", "engine", "simulated", "error",
                repeat ? "  vs itself" : "", "rounds' errors");
    std::vector<double> goal_errors;
    for (size_t p = 0; p < plans.size(); ++p) {
      std::vector<double> abs_errors, self_spread;
      for (size_t m = 0; m < wr[0][p].metrics.size(); ++m) {
        std::vector<double> eng, simv, err;
        std::string each;
        for (const auto& run : wr) {
          const sim::MetricComparison& c = run[p].metrics[m];
          eng.push_back(c.engine);
          simv.push_back(c.simulated);
          err.push_back(c.error());
          char b[32];
          std::snprintf(b, sizeof b, "%s%+.0f%%", each.empty() ? "" : " ", c.error() * 100);
          each += b;
        }
        const double e = percentile(err, 50);
        abs_errors.push_back(std::abs(e));
        std::string self = "";
        if (repeat) {
          std::vector<double> d;
          for (size_t r = 0; r < wr.size(); ++r) {
            const double a = wr[r][p].metrics[m].engine, b = again[w][r][p].metrics[m].engine;
            if (a > 0) d.push_back(std::abs(b / a - 1));
          }
          const double spread = d.empty() ? std::nan("") : percentile(d, 50);
          self_spread.push_back(spread);
          char b[32];
          std::snprintf(b, sizeof b, " %10.1f%%", spread * 100);
          self = b;
        }
        std::printf("%-26s %-17s %12.3f %12.3f %8.1f%%%s   %s\n", plans[p].label().c_str(),
                    wr[0][p].metrics[m].name.c_str(), percentile(eng, 50), percentile(simv, 50), e * 100, self.c_str(),
                    each.c_str());
      }
      const double med = percentile(abs_errors, 50), worst = *std::max_element(abs_errors.begin(), abs_errors.end());
      const bool goal_plan = in_goal(plans[p]);
      for (const auto& m : wr[0][p].op_breakdown)
        std::printf("%-26s   (%-16s engine %9.4f s, simulated %9.4f s)\n", plans[p].label().c_str(), m.name.c_str(),
                    m.engine, m.simulated);
      bool same = true;
      for (const auto& run : wr) same = same && run[p].same_requests;
      std::printf("%-26s median |error| %.1f%%, max %.1f%%%s%s\n", plans[p].label().c_str(), med * 100, worst * 100,
                  goal_plan ? (med <= 0.10 && worst <= 0.25 ? "  [goal met]" : "  [goal missed]")
                  : plans[p].plan == "tp=1" ? "  (reference)"
                                            : "  (reported)",
                  same ? "" : "  REQUESTS DIFFER");
      if (repeat)
        std::printf("%-26s engine vs itself: median %.1f%%, max %.1f%% over the metrics\n", plans[p].label().c_str(),
                    percentile(self_spread, 50) * 100,
                    *std::max_element(self_spread.begin(), self_spread.end()) * 100);
      if (goal_plan) goal_errors.insert(goal_errors.end(), abs_errors.begin(), abs_errors.end());
    }
    std::printf("workload %s, tp=2 / dp=2 / shift over sp=2: median |error| %.1f%%, max %.1f%% (goal 10%% / 25%%)\n",
                wname.c_str(), percentile(goal_errors, 50) * 100,
                *std::max_element(goal_errors.begin(), goal_errors.end()) * 100);
  }
  return 0;
}
