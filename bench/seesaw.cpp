// Seesaw on CPU ranks (issue 13, ../shared/papers/004): offline throughput of `pp=2` prefill /
// `tp=2` decode under the seesaw policy (the KV parked in the CPU tier between the phases,
// transitions only when the tier is full or empty, 4.2) against fixed tp=2, fixed pp=2 and dp=2
// on the same two ranks (threads), and Seesaw's own prefill-first / decode-first orders. Printed as
// ratios to fixed tp=2 from one run each (the machine is shared: see the load line), with the
// phase transitions, the plan switches and the milliseconds spent switching (KV migration of the
// resident sequences) and swapping (tier traffic, rank 0).
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
  int64_t transitions = 0, switches = 0, swapped = 0;
  double switch_ms = 0, swap_ms = 0;
};

Figures measure(const std::string& model, const std::vector<std::string>& plans, const std::string& policy, int n_req,
                int prompt, int out, int64_t tier_bytes) {
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
    for (const PlanStats& p : e.plan_stats()) f.switches += p.switches, f.switch_ms += p.switch_s * 1e3;
    f.transitions = e.scheduler().phase_switches();
    f.swapped = e.scheduler().num_swapped_out();
    f.swap_ms = e.tier_stats().seconds * 1e3;
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
  };
  const std::vector<Run> runs = {
      {"fixed tp=2", {"tp=2"}, "fixed"},
      {"fixed pp=2", {"pp=2"}, "fixed"},
      {"fixed dp=2", {"dp=2"}, "fixed"},
      {"seesaw pp=2 -> tp=2", {"pp=2,weights=full", "tp=2,weights=full"}, "seesaw"},
      {"prefill-first pp=2 -> tp=2", {"pp=2,weights=full", "tp=2,weights=full"}, "prefill-first"},
      {"decode-first pp=2 -> tp=2", {"pp=2,weights=full", "tp=2,weights=full"}, "decode-first"},
  };
  double base = 0;
  std::printf("%-28s %12s %9s %12s %9s %11s %9s %9s\n", "config", "tokens/s", "vs tp=2", "transitions", "switches",
              "switch ms", "swapped", "swap ms");
  for (const Run& r : runs) {
    const Figures f = measure(path, r.plans, r.policy, n_req, prompt, out, tier);
    if (base == 0) base = f.tok_s;
    std::printf("%-28s %12.1f %8.2fx %12lld %9lld %11.2f %9lld %9.2f\n", r.label, f.tok_s, f.tok_s / base,
                (long long)f.transitions, (long long)f.switches, f.switch_ms, (long long)f.swapped, f.swap_ms);
    std::fflush(stdout);
  }
  std::printf("(the fixed plans copy their shards; the Seesaw pair computes on views of the mapped model, "
              "weights=full, so a transition builds no weights)\n");
  return 0;
}
