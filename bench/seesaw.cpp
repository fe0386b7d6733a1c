// Seesaw on CPU ranks (issue 13, ../shared/papers/004): offline throughput of `pp=2` prefill /
// `tp=2` decode under the seesaw policy (the KV parked in the CPU tier between the phases,
// transitions only when the tier is full or empty, 4.2) against fixed tp=2, fixed pp=2 and dp=2
// on the same two ranks (threads), and Seesaw's own prefill-first / decode-first orders. Printed as
// ratios to fixed tp=2 from one run each (the machine is shared: see the load line), with the
// phase transitions, the plan switches, the KV bytes the switches migrated and the milliseconds
// they took (zero under the phase policies: the decoding sequences stay resident in c_d's placement
// through a prefill phase, 4.2; a fixed plan never switches) and re-sharding weights (lazy: `weights=resident` builds the new plan's
// shards at each transition; `weights=full` computes on the mapped model and builds nothing), and
// the tier copies of rank 0: their total time, the part hidden behind compute (§5.2's asynchronous
// swap-out and prefetcher) and the part the main thread was exposed to (deciding copies, waiting for
// one a step needed). "seesaw, swaps not overlapped" waits for every copy right after starting it:
// the same schedule with the copies exposed.
//
// Usage: bench_seesaw [requests] [prompt tokens] [output tokens] [tier sequences]
//        (defaults 32 256 32 8: an arXiv-summarization-like long-prompt, short-output load)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "engine/dist_engine.h"
#include "kv/kv_tier.h"
#include "model/loader.h"

using namespace loom;

namespace {

struct Figures {
  double tok_s = 0;
  int64_t transitions = 0, switches = 0, swapped = 0, built = 0, kv_moved = 0;
  double switch_ms = 0, reshard_ms = 0;
  TierStats tier;
};

Figures measure(const std::string& model, const std::vector<std::string>& plans, const std::string& policy, int n_req,
                int prompt, int out, int64_t tier_bytes, bool overlap) {
  DistOptions o;
  o.comm = "local";
  o.plans = plans;
  o.policy = policy;
  o.ranks = 2;
  o.model_path = model;
  o.engine.threads = 1;
  o.engine.max_tokens_per_step = 1024;
  o.engine.max_num_seqs = 64;
  o.engine.max_model_len = prompt + out;
  o.engine.kv_cache_bytes = int64_t(256) << 20;
  o.engine.cpu_kv_bytes = tier_bytes;
  o.rank_options = [overlap](int, RankEngineOptions& ro) { ro.overlap_swaps = overlap; };
  Figures f;
  run_distributed(o, [&](DistEngine& e) {
    std::vector<Request> rs;
    for (int i = 0; i < n_req; ++i) {
      Request q;
      q.id = i;
      for (int k = 0; k < prompt; ++k) q.prompt.push_back(3 + (i * 131 + k * 17) % 500);
      q.max_tokens = out;
      q.sampling.temperature = 0;
      q.stop.ignore_eos = true;
      rs.push_back(q);
    }
    const double t0 = e.clock().now();
    e.run(rs);
    const double s = e.clock().now() - t0;
    f.tok_s = double(n_req) * (prompt + out) / s;
    for (const PlanStats& p : e.plan_stats()) {
      f.switches += p.switches;
      f.switch_ms += p.switch_s * 1e3;
      f.kv_moved += p.kv_bytes_moved;
      f.reshard_ms += p.reshard_s * 1e3;
      f.built += p.weight_bytes_built;
    }
    f.transitions = e.scheduler().phase_switches();
    f.swapped = e.scheduler().num_swapped_out();
    f.tier = e.tier_stats();
  });
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const int n_req = argc > 1 ? std::atoi(argv[1]) : 32;
  const int prompt = argc > 2 ? std::atoi(argv[2]) : 256;
  const int out = argc > 3 ? std::atoi(argv[3]) : 32;
  const int tier_seqs = argc > 4 ? std::atoi(argv[4]) : 8;
  const std::string path = bench::ensure_model("small", DType::F32);
  const ModelConfig c = load_model(path)->config;
  const int64_t tier = int64_t(tier_seqs) * (prompt + out) * tier_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_dim);
  bench::print_load("before");
  std::printf("model small (f32, %d layers, %d/%d heads), %d requests of %d prompt + %d output tokens, 2 ranks "
              "(threads, 1 worker each), CPU KV tier %lld bytes (%d sequences)\n",
              c.n_layers, c.n_heads, c.n_kv_heads, n_req, prompt, out, (long long)tier, tier_seqs);
  struct Run {
    const char* label;
    std::vector<std::string> plans;
    const char* policy;
    bool overlap = true;
  };
  const std::vector<std::string> resident = {"pp=2", "tp=2"}, full = {"pp=2,weights=full", "tp=2,weights=full"};
  const std::vector<Run> runs = {
      {"fixed tp=2", {"tp=2"}, "fixed"},
      {"fixed pp=2", {"pp=2"}, "fixed"},
      {"fixed dp=2", {"dp=2"}, "fixed"},
      {"seesaw (resident, lazy)", resident, "seesaw"},
      {"seesaw (full)", full, "seesaw"},
      {"seesaw, swaps not overlapped", full, "seesaw", false},
      {"prefill-first (full)", full, "prefill-first"},
      {"decode-first (full)", full, "decode-first"},
  };
  double base = 0;
  std::printf("%-30s %10s %8s %6s %6s %9s %9s %10s %9s %8s %9s %9s %9s\n", "config", "tokens/s", "vs tp=2", "trans",
              "switch", "KV MB", "KV ms", "reshard ms", "built MB", "swapped", "copy ms", "hidden", "exposed");
  for (const Run& r : runs) {
    const Figures f = measure(path, r.plans, r.policy, n_req, prompt, out, tier, r.overlap);
    if (base == 0) base = f.tok_s;
    std::printf("%-30s %10.1f %7.2fx %6lld %6lld %9.2f %9.2f %10.2f %9.2f %8lld %9.2f %9.2f %9.2f\n", r.label, f.tok_s,
                f.tok_s / base, (long long)f.transitions, (long long)f.switches, double(f.kv_moved) / 1e6, f.switch_ms, f.reshard_ms,
                double(f.built) / 1e6, (long long)f.swapped, f.tier.copy_s * 1e3, f.tier.hidden_s() * 1e3,
                f.tier.exposed_s() * 1e3);
    std::fflush(stdout);
  }
  bench::print_load("after");
  std::printf("(rank 0's figures. KV MB / KV ms: KV migrated at plan switches (all ranks' bytes) and rank 0's time in it; reshard ms / built MB: lazy "
              "weight re-shard at transitions (weights=full builds nothing); copy ms: tier copies on rank 0's "
              "swap-out and prefetcher threads, hidden = copy time beside the main thread's work, exposed = main "
              "thread deciding copies and waiting for one a step needed)\n");
  return 0;
}
