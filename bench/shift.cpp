// Shift Parallelism on this machine (CPU ranks as threads, local backend, 4 ranks): the base
// config sp=2,tp=2 (Ulysses, Shift Algorithm 1), full tp=4, and Shift (sp=2,tp=2 base for steps
// above the cost-model threshold, TP(4) in the shift order otherwise; Algorithm 2), on the
// synthetic `small` model (d=512, 8 layers, 8 query / 4 KV heads, FFN 1536, vocab 4096, f16).
//
// Measured, each as the best of 3 interleaved rounds (so load from other work on a shared
// machine hits every configuration alike):
//   - one request at a time (Shift 4.3.1 "lowest latency"): TTFT of a P-token prompt, TPOT of
//     its G output tokens;
//   - a burst of B such requests at t = 0 (throughput side): mean TTFT, mean TPOT, and output
//     tokens/s over the run.
// Printed as ratios against tp=4 measured in the same run. CAVEAT: on a 2-core machine 4 ranks
// share 2 cores, so the ranks time-slice and every collective waits for descheduled peers; the
// ratios show the algorithms' overheads (SP padding, all-to-alls, TP all-reduces) more than the
// speed-ups GPUs see. Usage: bench_shift [P] [G] [B].
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/dist_engine.h"
#include "kernels/roofline.h"
#include "model/loader.h"
#include "model/synth.h"
#include "sim/shift_threshold.h"

using namespace loom;

namespace {

struct Figures {
  double ttft_ms = 1e30, tpot_ms = 1e30;              // one request at a time
  double burst_ttft_ms = 1e30, burst_tpot_ms = 1e30;  // burst means
  double burst_out_tok_s = 0;
  int64_t base_steps = 0, shift_steps = 0;
};

std::vector<Request> requests(int n, int prompt, int gen, int first_id) {
  std::vector<Request> rs;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.id = first_id + i;
    for (int k = 0; k < prompt; ++k) r.prompt.push_back(3 + (i * 131 + k * 17) % 4000);
    r.max_tokens = gen;
    r.sampling.temperature = 0;
    r.stop.ignore_eos = true;
    rs.push_back(r);
  }
  return rs;
}

void measure(const std::string& model, const std::string& plan, const std::string& policy, int64_t threshold,
             int prompt, int gen, int burst, Figures& f) {
  DistOptions o;
  o.comm = "local";
  o.plan = plan;
  o.ranks = 4;
  o.model_path = model;
  o.engine.threads = 1;
  o.engine.max_tokens_per_step = 512;
  o.engine.kv_cache_bytes = int64_t(64) << 20;
  o.policy = policy;
  o.shift_threshold = threshold;
  run_distributed(o, [&](DistEngine& e) {
    // One request at a time.
    e.run(requests(1, prompt, gen, 0));
    const MetricsSummary one = e.metrics().summary();
    f.ttft_ms = std::min(f.ttft_ms, one.ttft_ms.mean);
    f.tpot_ms = std::min(f.tpot_ms, one.tpot_ms.mean);
    // A burst, on a fresh metrics view: the summary of the requests of this run only.
    const size_t before = e.metrics().requests().size();
    e.run(requests(burst, prompt, gen, 1000));
    const auto& reqs = e.metrics().requests();
    double t0 = 1e30, t1 = 0, ttft = 0, tpot = 0;
    int64_t out = 0, n = 0;
    for (size_t i = before; i < reqs.size(); ++i) {
      const RequestMetrics& r = reqs[i];
      if (r.token_s.size() < 2) continue;
      t0 = std::min(t0, r.arrival_s);
      t1 = std::max(t1, r.finish_s);
      ttft += (r.token_s.front() - r.arrival_s) * 1e3;
      tpot += (r.token_s.back() - r.token_s.front()) / double(r.token_s.size() - 1) * 1e3;
      out += int64_t(r.token_s.size());
      ++n;
    }
    if (n > 0) {
      f.burst_ttft_ms = std::min(f.burst_ttft_ms, ttft / double(n));
      f.burst_tpot_ms = std::min(f.burst_tpot_ms, tpot / double(n));
      f.burst_out_tok_s = std::max(f.burst_out_tok_s, double(out) / (t1 - t0));
    }
    const std::vector<PlanStats> s = e.plan_stats();
    f.base_steps = s[0].steps;
    f.shift_steps = s.size() > 1 ? s[1].steps : 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  const int prompt = argc > 1 ? std::atoi(argv[1]) : 256;
  const int gen = argc > 2 ? std::atoi(argv[2]) : 32;
  const int burst = argc > 3 ? std::atoi(argv[3]) : 16;
  SynthOptions so;
  so.shape = synth_shape("small");
  so.dtype = DType::F16;
  char dir[] = "/tmp/loom_bench_shift_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const std::string path = std::string(dir) + "/small.gguf";
  write_synth_model(so, path);

  // The Shift threshold from the cost model for this machine (as `loom generate` derives it).
  kernels::Roofline roof(1, size_t(64) << 20);
  const double bw = roof.memcpy_bandwidth(1, 3), flops = roof.peak_flops(1, 3);
  const sim::ShiftThreshold th =
      sim::derive_shift_threshold(sim::cpu_cost_model(so.shape.config, 4.0, bw, flops, 0, 4), 2, 2, 8192);
  std::printf("shift threshold %lld tokens (%s)\n", (long long)th.threshold, th.explain.c_str());

  Figures sp, tp, shift;
  for (int round = 0; round < 3; ++round) {
    measure(path, "tp=4", "fixed", -1, prompt, gen, burst, tp);
    measure(path, "sp=2,tp=2", "fixed", -1, prompt, gen, burst, sp);
    measure(path, "sp=2,tp=2", "shift", th.threshold, prompt, gen, burst, shift);
  }
  unlink(path.c_str());
  rmdir(dir);

  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  std::printf("bench_shift: small model (f16), 4 local ranks x 1 thread on %ld cores, prompt %d, output %d, burst %d\n",
              cores, prompt, gen, burst);
  if (cores < 4)
    std::printf("CAVEAT: %ld cores for 4 ranks: ranks time-slice, collectives wait for descheduled peers\n", cores);
  auto row = [&](const char* name, const Figures& f) {
    std::printf("  %-14s TTFT x%.2f  TPOT x%.2f | burst: TTFT x%.2f  TPOT x%.2f  output tok/s x%.2f   (vs tp=4)\n",
                name, f.ttft_ms / tp.ttft_ms, f.tpot_ms / tp.tpot_ms, f.burst_ttft_ms / tp.burst_ttft_ms,
                f.burst_tpot_ms / tp.burst_tpot_ms, f.burst_out_tok_s / tp.burst_out_tok_s);
  };
  row("sp=2,tp=2", sp);
  row("shift", shift);
  std::printf("  shift run: %lld base steps, %lld shift steps (last round)\n", (long long)shift.base_steps,
              (long long)shift.shift_steps);
  std::printf("  (tp=4 reference: TTFT %.1f ms, TPOT %.2f ms; burst TTFT %.1f ms, TPOT %.2f ms, %.1f output tok/s)\n",
              tp.ttft_ms, tp.tpot_ms, tp.burst_ttft_ms, tp.burst_tpot_ms, tp.burst_out_tok_s);
  return 0;
}
