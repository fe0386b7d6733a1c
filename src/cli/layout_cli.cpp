#include "cli/layout_cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/parse_number.h"
#include "core/sysmem.h"
#include "engine/policy.h"
#include "engine/policy_registry.h"
#include "engine/seesaw.h"
#include "gpu/device.h"
#include "engine/rank_engine.h"
#include "kernels/roofline.h"
#include "model/weights.h"
#include "parallel/plan_set.h"
#include "sim/profile.h"
#include "sim/shift_threshold.h"
#include "sim/sidp_cost.h"

namespace loom::cli {

void add_layout_options(CLI::App* sub, LayoutArgs& a) {
  sub->add_option("--plan", a.plans,
                  "Parallel plan, comma-separated key=value: tp (tensor parallel), dp (data parallel replicas), pp "
                  "(pipeline stages; layers=a+b+... splits them, uneven by default), sp (Ulysses sequence parallel, "
                  "with tp), kvp + tpa (Helix: KV-parallel attention, TP over all ranks for the FFN; hopb=on|off), "
                  "weights=full|owner (owner: SiDP, each layer's FFN held by one replica; with dp), block (KV block "
                  "tokens). E.g. tp=4, dp=2,tp=2, sp=2,tp=2, pp=2, kvp=2,tpa=2, dp=4,weights=owner. Repeat it for "
                  "a plan set a policy switches between (the first is the initial plan; default tp=<ranks>)")
      ->allow_extra_args(false);
  sub->add_option("--policy", a.policy, policy_help())
      ->capture_default_str();
  sub->add_option("--shift-threshold", a.threshold,
                  "Tokens per step above which --policy shift runs the base config (default: from the cost "
                  "model for this machine)");
  sub->add_option("--sidp-threshold", a.sidp_threshold,
                  "SiDP threshold (sequences per replica): --policy sidp runs compute-as-a-service after a window "
                  "of steps below it, weight-as-a-service above (default: the batch below which CaS is faster, from "
                  "the cost model for this machine, printed at start; `loom sim experiment sidp-fig11` prices it for "
                  "GPUs)");
  sub->add_option("--shift-weights", a.weights,
                  "Weights of plans whose shards overlap (the Shift pair): separate (own copies, w/t + w/P) or "
                  "slice (views of the first copy, w/t)")
      ->capture_default_str();
  sub->add_option("--device", a.device, "Where the ranks compute: cpu or cuda (needs a visible NVIDIA GPU)")
      ->capture_default_str();
  sub->add_option("--cpu-kv-bytes", a.cpu_kv_bytes,
                  "Seesaw's CPU KV tier: bytes of host memory shared by the ranks of a host (default with --policy seesaw: "
                  "4 GiB, at most a quarter of the memory available, as vLLM's swap space)");
  sub->add_option("--profile", a.profile,
                  "Profile of this machine (loom profile -o DIR): the default --shift-threshold and --sidp-threshold from its "
                  "cost model");
}

int layout_ranks(const LayoutArgs& a, int ranks, int block_size) {
  gpu::require_device(gpu::parse_device(a.device));  // before anything loads
  check_policy_name(a.policy);
  parse_shift_weights(a.weights);
  if (a.threshold < -1) fail("--shift-threshold must be >= 0 tokens, got ", a.threshold);
  if (a.sidp_threshold < -1) fail("--sidp-threshold must be >= 0 sequences per replica, got ", a.sidp_threshold);
  if (!a.profile.empty() && !sim::is_profile(a.profile))
    fail("--profile ", a.profile, " is not a loom profile folder (no hardware.json from `loom profile -o DIR`)");
  if (a.plans.empty()) return ranks;
  const std::vector<Plan> plans = policy_plans(a.policy, PlanSet::parse(a.plans));
  check_block_sizes(plans, block_size);
  if (ranks > 0 && plans[0].size() != ranks)
    fail("plan ", plans[0].to_string(), " needs ", plans[0].size(), " ranks, --ranks is ", ranks);
  return plans[0].size();
}

void apply_layout_options(const LayoutArgs& a, int ranks, DistOptions& o) {
  o.device = gpu::parse_device(a.device);
  o.plans = a.plans.empty() ? std::vector<std::string>{cat("tp=", std::max(ranks, 1))} : a.plans;
  o.policy = a.policy;
  o.shift_threshold = a.threshold;
  o.sidp_threshold = a.sidp_threshold;
  o.shift_weights = a.weights;
  if (a.cpu_kv_bytes < 0) fail("--cpu-kv-bytes must be >= 0, got ", a.cpu_kv_bytes);
  // The tier is allocated (and zeroed) whole: checked against what is free before anything is.
  if (a.cpu_kv_bytes > 0) {
    const std::optional<int64_t> avail = mem_available();
    if (avail && a.cpu_kv_bytes > *avail)
      fail("--cpu-kv-bytes ", a.cpu_kv_bytes, " is more than the ", *avail, " bytes of memory available (MemAvailable)");
  }
  o.engine.cpu_kv_bytes = a.cpu_kv_bytes;
  if (a.cpu_kv_bytes == 0 && is_seesaw_policy(a.policy)) {
    // As vLLM's swap space: 4 GiB by default, at most a quarter of the memory available. The
    // tier's pages are zero pages until KV is parked in them.
    const std::optional<int64_t> avail = mem_available();
    const int64_t four_gib = int64_t(4) << 30;
    o.engine.cpu_kv_bytes = avail ? std::min(four_gib, *avail / 4) : four_gib;
    const char* mpi_rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (mpi_rank == nullptr || std::string(mpi_rank) == "0")
      std::fprintf(stderr, "[--policy %s: CPU KV tier of %s (%lld bytes) by default, as vLLM's 4 GiB swap space%s; "
                   "--cpu-kv-bytes sets it]\n",
                   a.policy.c_str(), human_bytes(o.engine.cpu_kv_bytes).c_str(), (long long)o.engine.cpu_kv_bytes,
                   o.engine.cpu_kv_bytes < four_gib ? ", capped at a quarter of the memory available" : "");
  }
  const std::string profile = a.profile;
  // The ranks talk over MPI when mpirun started this process (the profile's mpi collectives).
  auto backend = [] { return std::string(std::getenv("OMPI_COMM_WORLD_SIZE") ? "mpi" : "local"); };
  // This machine's roofline, one rank's share: `threads` cores (64 MiB buffers: a quick probe).
  struct Measured {
    double bw = 0, flops = 0;
  };
  auto measure = [](int threads) {
    kernels::Roofline roof(threads, size_t(64) << 20);
    return Measured{roof.memcpy_bandwidth(threads, 3), roof.peak_flops(threads, 3)};
  };
  o.default_shift_threshold = [profile, backend, measure](const Model& m, const Plan& plan, int threads) -> int64_t {
    const DType wdt = m.layers.at(0).w_up.dtype;
    const int max_tokens = 8192;
    if (!profile.empty()) {
      const sim::ShiftThreshold t = sim::default_shift_threshold(m.config, wdt, plan, profile, backend(), 0, 0, max_tokens);
      std::fprintf(stderr, "[shift threshold %lld tokens: %s; --shift-threshold overrides]\n", (long long)t.threshold,
                   t.explain.c_str());
      return t.threshold;
    }
    const Measured x = measure(threads);
    const sim::ShiftThreshold t = sim::default_shift_threshold(m.config, wdt, plan, "", "local", x.bw, x.flops, max_tokens);
    std::fprintf(stderr,
                 "[shift threshold %lld tokens: %s; measured per rank: memcpy %.1f GB/s, peak %.1f GFLOP/s, "
                 "%s weights; --shift-threshold overrides, --profile DIR calibrates]\n",
                 (long long)t.threshold, t.explain.c_str(), x.bw / 1e9, x.flops / 1e9,
                 std::string(dtype_name(wdt)).c_str());
    return t.threshold;
  };
  // SiDP's threshold (engine/policy.h sidp): the per-replica batch below which a CaS step of the
  // group is faster than WaS (sim/sidp_cost.h derive_sidp_crossover), on the cost model of this
  // machine, at a decode context of min(512, max_seq_len / 2) tokens.
  o.default_sidp_threshold = [profile, backend, measure](const Model& m, const Plan& plan, int threads) -> int64_t {
    const DType wdt = m.layers.at(0).w_up.dtype;
    const int context = std::max(1, std::min(512, m.config.max_seq_len / 2));
    sim::SidpThreshold t;
    std::string how;
    if (!profile.empty()) {
      t = sim::default_sidp_threshold(m.config, wdt, plan, profile, backend(), 0, 0, context);
    } else {
      const Measured x = measure(threads);
      t = sim::default_sidp_threshold(m.config, wdt, plan, "", "local", x.bw, x.flops, context);
      how = cat("; measured per rank: memcpy ", x.bw / 1e9, " GB/s, peak ", x.flops / 1e9, " GFLOP/s, ",
                dtype_name(wdt), " weights; --profile DIR calibrates");
    }
    std::fprintf(stderr, "[sidp threshold %lld sequences per replica: %s%s; --sidp-threshold overrides]\n",
                 (long long)t.threshold, t.explain.c_str(), how.c_str());
    return t.threshold;
  };
}

void print_plan_stats(const DistEngine& e) {
  const std::vector<PlanStats> st = e.plan_stats();
  int64_t switches = 0;
  for (const PlanStats& p : st) switches += p.switches;
  if (st.size() == 1 && switches == 0) return;
  std::fprintf(stderr, "[policy %s: %lld switches]\n", e.policy().c_str(), (long long)switches);
  for (const PlanStats& p : st) {
    char reshard[128] = "";
    if (p.reshard_s > 0)
      std::snprintf(reshard, sizeof reshard, "; rank 0 built %lld weight bytes in %.3f ms", (long long)p.weight_bytes_built,
                    p.reshard_s * 1e3);
    std::fprintf(stderr, "[plan %s: %lld steps, %lld tokens, %lld switches in, %lld KV bytes moved in %.3f ms%s]\n",
                 p.name.c_str(), (long long)p.steps, (long long)p.tokens, (long long)p.switches,
                 (long long)p.kv_bytes_moved, p.switch_s * 1e3, reshard);
  }
  const Scheduler& sched = const_cast<DistEngine&>(e).scheduler();
  if (sched.config().phases != PhaseMode::None) {
    const TierStats t = e.tier_stats();
    std::fprintf(stderr,
                 "[seesaw %s: %lld phase transitions, %lld sequences swapped out, %lld in; rank 0 tier traffic %lld "
                 "bytes out, %lld in, copies %.3f ms (%.3f ms hidden behind compute), exposed %.3f ms]\n",
                 e.policy().c_str(), (long long)sched.phase_switches(), (long long)sched.num_swapped_out(),
                 (long long)sched.num_swapped_in(), (long long)t.bytes_out, (long long)t.bytes_in, t.copy_s * 1e3,
                 t.hidden_s() * 1e3, t.exposed_s() * 1e3);
  }
}

nlohmann::json plan_stats_json(const DistEngine& e) {
  nlohmann::json plans = nlohmann::json::array();
  for (const PlanStats& p : e.plan_stats())
    plans.push_back({{"name", p.name},
                     {"steps", p.steps},
                     {"tokens", p.tokens},
                     {"switches", p.switches},
                     {"kv_bytes_moved", p.kv_bytes_moved},
                     {"switch_ms", p.switch_s * 1e3},
                     {"weight_bytes_built", p.weight_bytes_built},
                     {"reshard_ms", p.reshard_s * 1e3}});
  return {{"policy", e.policy()}, {"plans", plans}};
}

}  // namespace loom::cli
