// Decode throughput of the distributed engine (engine/dist_engine.h) on the local backend:
// tp=2 (two ranks as threads, one worker thread each) against tp=1 on one rank with one worker
// thread, and against tp=1 with two worker threads (the same cores, split by the kernels' own
// thread pool instead of by Megatron sharding), on the synthetic `small` model (d=512, 8 layers,
// 8 query / 4 KV heads, FFN 1536, vocab 4096, f16 weights).
//
// What is measured: a batch of B sequences with 8-token prompts decodes G tokens each; decode
// tokens/s = decode tokens / wall time of the steps that contain only decodes (Metrics step
// records), best of 5 interleaved rounds. A tp=2 step does half the weight streaming per rank but adds the
// step-descriptor broadcast and 2 all-reduces per layer; with 2 cores shared by other work the
// ratio shows the sharding overhead more than a speed-up. Printed as ratios measured in one run.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/dist_engine.h"
#include "model/synth.h"

using namespace loom;

namespace {

// One run; decode tokens/s.
double decode_tok_per_s(const std::string& model, const std::string& plan, int ranks, int threads, int batch,
                        int gen) {
  double best = 0;
  {
    DistOptions o;
    o.comm = "local";
    o.plan = plan;
    o.ranks = ranks;
    o.model_path = model;
    o.engine.threads = threads;
    o.engine.kv_cache_bytes = int64_t(64) << 20;
    run_distributed(o, [&](DistEngine& e) {
      std::vector<Request> rs;
      for (int i = 0; i < batch; ++i) {
        Request r;
        r.id = i;
        for (int k = 0; k < 8; ++k) r.prompt.push_back(3 + (i * 31 + k * 7) % 4000);
        r.max_tokens = gen;
        r.sampling.temperature = 0;
        r.stop.ignore_eos = true;
        rs.push_back(r);
      }
      e.run(rs);
      double secs = 0;
      int64_t toks = 0;
      for (const StepMetrics& s : e.metrics().steps()) {
        if (s.num_prefill_tokens != 0) continue;
        secs += s.end_s - s.start_s;
        toks += s.num_decode_tokens;
      }
      best = std::max(best, secs > 0 ? double(toks) / secs : 0.0);
    });
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int batch = argc > 1 ? std::atoi(argv[1]) : 4;
  const int gen = argc > 2 ? std::atoi(argv[2]) : 48;
  SynthOptions so;
  so.shape = synth_shape("small");
  so.dtype = DType::F16;
  char dir[] = "/tmp/loom_bench_dist_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const std::string path = std::string(dir) + "/small.gguf";
  write_synth_model(so, path);
  // Rounds interleave the three configurations so that load from other processes on a shared
  // machine hits all of them alike; best of 5 rounds each.
  double tp1 = 0, tp1x2 = 0, tp2 = 0;
  for (int round = 0; round < 5; ++round) {
    tp1 = std::max(tp1, decode_tok_per_s(path, "tp=1", 1, 1, batch, gen));
    tp1x2 = std::max(tp1x2, decode_tok_per_s(path, "tp=1", 1, 2, batch, gen));
    tp2 = std::max(tp2, decode_tok_per_s(path, "tp=2", 2, 1, batch, gen));
  }
  std::printf("decode, synthetic small (f16), batch %d, %d tokens each, local backend, best of 5 interleaved rounds:\n",
              batch, gen);
  std::printf("  tp=1, 1 rank x 1 thread : %8.1f tok/s\n", tp1);
  std::printf("  tp=1, 1 rank x 2 threads: %8.1f tok/s\n", tp1x2);
  std::printf("  tp=2, 2 ranks x 1 thread: %8.1f tok/s\n", tp2);
  std::printf("  ratio tp=2 / tp=1 (1 thread)  : %.2f\n", tp1 > 0 ? tp2 / tp1 : 0.0);
  std::printf("  ratio tp=2 / tp=1 (2 threads) : %.2f  (same cores: TP sharding vs the kernels' own threads)\n",
              tp1x2 > 0 ? tp2 / tp1x2 : 0.0);
  std::remove(path.c_str());
  rmdir(dir);
  return 0;
}
