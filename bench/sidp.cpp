// SiDP on CPU ranks (issue 14; ../shared/papers/001): an offline job with a long tail (most
// requests short, 1 in 10 long: the tail where few replicas still have work, §3.2) on D replicas
// (threads), plain dp=D against SiDP dp=D,weights=owner under --policy sidp (WaS while batches are
// large, CaS in the tail). Both get the same memory per rank (--rank-memory-bytes: plain DP's
// weights + 24 MiB of KV), so SiDP's KV budget grows by the FFN bytes it does not hold (S12;
// engine.h kv_budget_bytes). Printed as ratios from one run: KV blocks, job
// throughput, and how many steps ran in each mode. On a shared CPU a "fetch" is a memcpy from the
// same RAM: the timing says nothing about NVLink (PAPERS-NOTES 1.3); the KV ratio is exact.
// Then sidp:was with the replicas stepping on their own (engine/sidp_replicas.h) against the same
// replicas in lockstep (DistOptions::sidp_lockstep): job throughput and each replica's steps.
//
// Usage: bench_sidp [replicas] [requests] [B_th]   (defaults 4 48 2)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/dist_engine.h"
#include "engine/sidp_replicas.h"
#include "model/loader.h"
#include "model/synth.h"

using namespace loom;

namespace {

struct Figures {
  int kv_blocks = 0;
  double tok_s = 0;
  std::vector<PlanStats> plans;
  std::vector<int64_t> own_steps;  // SiDP replicas on their own: each replica's steps
  int64_t group_steps = 0;
};

Figures measure(const std::string& model, const std::string& plan, const std::string& policy, int D, int n, int64_t th,
                int64_t rank_memory, bool lockstep = false) {
  DistOptions o;
  o.comm = "local";
  o.plan = plan;
  o.policy = policy;
  o.sidp_threshold = th;
  o.ranks = D;
  o.model_path = model;
  o.engine.threads = 1;
  o.engine.max_num_seqs = 64;
  o.engine.rank_memory_bytes = rank_memory;
  o.sidp_lockstep = lockstep;
  Figures f;
  run_distributed(o, [&](DistEngine& e) {
    std::vector<Request> rs;
    int64_t tokens = 0;
    for (int i = 0; i < n; ++i) {
      Request q;
      q.id = i;
      for (int k = 0; k < 64; ++k) q.prompt.push_back(3 + (i * 131 + k * 17) % 500);
      q.max_tokens = i % 10 == 3 ? 256 : 24;  // the long tail
      q.sampling.temperature = 0;
      q.stop.ignore_eos = true;
      tokens += q.max_tokens + int64_t(q.prompt.size());
      rs.push_back(q);
    }
    const auto t0 = std::chrono::steady_clock::now();
    e.run(rs);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    f.tok_s = double(tokens) / s;
    f.kv_blocks = e.num_kv_blocks();
    f.plans = e.plan_stats();
    f.group_steps = int64_t(e.metrics().steps().size());
    if (SidpReplicas* r = e.sidp_replicas()) {
      f.own_steps = r->own_steps();
      f.group_steps = r->group_steps();
    }
  });
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const int D = argc > 1 ? std::atoi(argv[1]) : 4;
  const int n = argc > 2 ? std::atoi(argv[2]) : 48;
  const int64_t th = argc > 3 ? std::atoll(argv[3]) : 2;
  SynthOptions so;
  so.shape = parse_synth_dims("d=256,layers=8,heads=8,kv_heads=2,head_dim=32,ffn=1024,vocab=512,ctx=2048");
  so.dtype = DType::F32;
  so.seed = 5;
  char dir[] = "/tmp/loom_bench_sidp_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const std::string path = std::string(dir) + "/m.gguf";
  write_synth_model(so, path);
  // Memory per rank: what a plain DP rank's weights take, plus 24 MiB of KV.
  const int64_t memory = [&] {
    const std::shared_ptr<const Model> m(load_model(path));
    const PlanSet dp = PlanSet::make({Plan::parse("dp=" + std::to_string(D))},
                                     ModelShape::from(m->config, weight_block_elems(*m)));
    return rank_weight_bytes(*m, dp, 0).held + (int64_t(24) << 20);
  }();
  const Figures dp = measure(path, "dp=" + std::to_string(D), "fixed", D, n, -1, memory);
  const Figures sd = measure(path, "dp=" + std::to_string(D) + ",weights=owner", "sidp", D, n, th, memory);
  const Figures own = measure(path, "dp=" + std::to_string(D) + ",weights=owner", "sidp:was", D, n, -1, memory);
  const Figures lock = measure(path, "dp=" + std::to_string(D) + ",weights=owner", "sidp:was", D, n, -1, memory, true);
  unlink(path.c_str());
  rmdir(dir);
  std::printf("bench_sidp (local backend, %d replicas x 1 thread, %d requests, 1 in 10 long, B_th %lld seqs/replica)\n",
              D, n, (long long)th);
  std::printf("  KV blocks: SiDP / plain DP = x%.2f (%d vs %d)\n", double(sd.kv_blocks) / dp.kv_blocks, sd.kv_blocks,
              dp.kv_blocks);
  std::printf("  throughput: SiDP / plain DP = x%.2f (one run, shared machine)\n", sd.tok_s / dp.tok_s);
  for (const PlanStats& p : sd.plans)
    std::printf("  SiDP mode %s: %lld steps (%s)\n", p.name.find("sidp=cas") != std::string::npos ? "CaS" : "WaS",
                (long long)p.steps,
                p.name.find("sidp=cas") != std::string::npos ? "lockstep steps of the group"
                                                             : "each replica's own steps, summed");
  std::string per;
  for (size_t r = 0; r < own.own_steps.size(); ++r) per += (r ? ", " : "") + std::to_string(own.own_steps[r]);
  std::printf("  sidp:was, replicas on their own / in lockstep: throughput x%.2f (one run each); steps per replica "
              "%s on their own, %lld for every replica in lockstep\n",
              own.tok_s / lock.tok_s, per.c_str(), (long long)lock.group_steps);
  return 0;
}
