// Helix on CPU ranks (issue 12): decode at a long context on a model with fewer KV heads than
// ranks (1 KV head, 2 ranks), kvp=2,tpa=1 against tp=2. Under tp=2 both ranks hold the one KV
// head (Helix 2.1.1: TP beyond K duplicates the KV cache); under Helix each holds half of the
// sequence. Printed as ratios from one run: per-rank KV bytes, decode step time, and for Helix
// the communication HOP-B leaves exposed (time waiting on the all-to-all) with it on and off.
// Each figure is the best of 3 runs (the machine is shared).
//
// Usage: bench_helix [context tokens] [decode tokens] [sequences]   (defaults 4096 16 4)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/dist_engine.h"
#include "model/synth.h"

using namespace loom;

namespace {

// The local backend (ranks as threads): one process runs every configuration (an MPI process can
// initialise MPI only once). There the exchange is a copy the receiving rank makes inside wait();
// what HOP-B hides is the wait for the slower peer to arrive (the ranks' skew), not a transfer.
std::string comm_backend() { return "local"; }

struct Figures {
  double decode_ms = 1e30;       // mean decode-only step
  int64_t kv_bytes_rank = 0;     // the largest rank's KV store use
  double exposed_ms = 1e30;      // per decode step, rank 0
};

Figures measure(const std::string& model, const std::string& plan, int ctx, int gen, int seqs) {
  Figures best;
  for (int rep = 0; rep < 3; ++rep) {
    DistOptions o;
    o.comm = comm_backend();
    o.plan = plan;
    o.ranks = 2;
    o.model_path = model;
    o.engine.threads = 1;
    o.engine.max_tokens_per_step = 1024;
    o.engine.kv_cache_bytes = int64_t(512) << 20;
    std::mutex mu;
    int64_t kv = 0;
    double exposed = 0, seen = 0;  // rank 0: waits during decode-only steps; all waits so far
    o.after_step = [&](int r, RankEngine& e, const StepBatch& b, const std::vector<RequestId>&) {
      std::lock_guard<std::mutex> lock(mu);
      kv = std::max(kv, e.kv().used_pages() * e.kv().page_bytes());
      if (r != 0) return;
      const double now = e.forward_of(e.current()).attention().exposed_comm_s();
      if (b.num_prefill_tokens == 0) exposed += now - seen;
      seen = now;
    };
    Figures f;
    run_distributed(o, [&](DistEngine& e) {
      std::vector<Request> rs;
      for (int i = 0; i < seqs; ++i) {
        Request q;
        q.id = i;
        for (int k = 0; k < ctx; ++k) q.prompt.push_back(3 + (i * 131 + k * 17) % 500);
        q.max_tokens = gen;
        q.sampling.temperature = 0;
        q.stop.ignore_eos = true;
        rs.push_back(q);
      }
      e.run(rs);
      double sum = 0;
      int n = 0;
      for (const StepMetrics& s : e.metrics().steps())
        if (s.num_prefill_tokens == 0) sum += s.end_s - s.start_s, ++n;
      f.decode_ms = n ? sum / n * 1e3 : 0;
      f.exposed_ms = n ? exposed / n * 1e3 : 0;
    });
    f.kv_bytes_rank = kv;
    best.decode_ms = std::min(best.decode_ms, f.decode_ms);
    best.exposed_ms = std::min(best.exposed_ms, f.exposed_ms);
    best.kv_bytes_rank = f.kv_bytes_rank;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int ctx = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int gen = argc > 2 ? std::atoi(argv[2]) : 16;
  const int seqs = argc > 3 ? std::atoi(argv[3]) : 4;
  SynthOptions so;
  so.shape = parse_synth_dims("d=256,layers=4,heads=8,kv_heads=1,head_dim=64,ffn=512,vocab=512,ctx=16384");
  so.dtype = DType::F32;
  so.seed = 3;
  char dir[] = "/tmp/loom_bench_helix_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const std::string path = std::string(dir) + "/mqa.gguf";
  write_synth_model(so, path);
  const Figures tp = measure(path, "tp=2", ctx, gen, seqs);
  const Figures hx = measure(path, "kvp=2,tpa=1", ctx, gen, seqs);
  const Figures off = measure(path, "kvp=2,tpa=1,hopb=off", ctx, gen, seqs);
  unlink(path.c_str());
  rmdir(dir);
  std::printf("bench_helix (%s backend): 1 KV head, 2 ranks x 1 thread, %d sequences of %d context tokens, %d decode tokens\n",
              comm_backend().c_str(), seqs, ctx, gen);
  std::printf("  KV bytes per rank: kvp=2 / tp=2 = x%.2f (%.1f MB vs %.1f MB)\n",
              double(hx.kv_bytes_rank) / double(tp.kv_bytes_rank), hx.kv_bytes_rank / 1e6, tp.kv_bytes_rank / 1e6);
  std::printf("  decode step time: kvp=2 / tp=2 = x%.2f (%.2f ms vs %.2f ms)\n", hx.decode_ms / tp.decode_ms,
              hx.decode_ms, tp.decode_ms);
  std::printf("  exposed all-to-all per decode step: HOP-B on %.3f ms, off %.3f ms (x%.2f); step %.2f vs %.2f ms\n",
              hx.exposed_ms, off.exposed_ms, off.exposed_ms > 0 ? hx.exposed_ms / off.exposed_ms : 0.0,
              hx.decode_ms, off.decode_ms);
  return 0;
}
