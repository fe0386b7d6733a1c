// Engine benchmark: steady-state decode tokens/s of the batched Engine at batch 1, 8, 32 and
// 128 on a synthetic llama-3.2-1b (q8_0 by default: 1.3 GB, fits beside the others' work), and
// the ratio to batch 1. Decode of one sequence is bound by streaming the weights (every step
// reads all of them once), so a batch of B reads them once for B tokens: tokens/s should grow
// nearly B-fold until the gemm turns compute-bound.
//
// Each batch size runs `batch` requests with an 8-token prompt and a fixed output length
// (ignore_eos, greedy) through an Engine with max_num_seqs = batch. Steady state = steps with no
// prefill token and exactly `batch` sequences (StepMetrics); tokens/s = their decode tokens /
// their summed durations. The batch-1 row is also shown against the memcpy roofline.
//
//   bench_engine [--dtype q8_0|bf16|f32] [--batches 1,8,32,128] [--threads N] [--steps S]
//
// The model is written once to $LOOM_BENCH_DIR (default /tmp/loom-bench) and reused.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "kernels/roofline.h"
#include "model/loader.h"
#include "model/synth.h"

#include "bench_util.h"

using namespace loom;
using bench::ensure_model;
using bench::print_load;

namespace {

struct BatchResult {
  int batch = 0;
  int steady_steps = 0;
  int64_t decode_tokens = 0;
  double decode_s = 0;   // summed steady step times
  double best_step_s = 0;  // fastest steady step (the machine is shared: others only add time)
  double prefill_s = 0;
  double tokens_per_s() const { return decode_s > 0 ? double(decode_tokens) / decode_s : 0.0; }
  double best_tokens_per_s() const { return best_step_s > 0 ? double(batch) / best_step_s : 0.0; }
};

BatchResult run_batch(std::shared_ptr<const Model> model, int batch, int threads, int steps) {
  const ModelConfig& c = model->config;
  const int prompt_len = 8;
  EngineConfig cfg;
  cfg.threads = threads;
  cfg.max_num_seqs = batch;
  cfg.max_tokens_per_step = std::max(2048, batch * prompt_len);
  cfg.max_model_len = 256;
  // Room for every sequence at full length, nothing more.
  const int64_t blocks_per_seq = (prompt_len + steps + 2 + kDefaultKvBlockSize - 1) / kDefaultKvBlockSize + 1;
  cfg.kv_cache_bytes = int64_t(batch) * blocks_per_seq * 2 * c.n_layers * c.n_kv_heads * kDefaultKvBlockSize *
                       c.head_dim * int64_t(sizeof(float));
  Engine engine(model, cfg);
  std::vector<Request> reqs;
  for (int i = 0; i < batch; ++i) {
    Request r;
    r.id = i;
    Rng rng(uint64_t(i) + 1);
    for (int p = 0; p < prompt_len; ++p) r.prompt.push_back(TokenId(rng.below(uint64_t(c.vocab_size))));
    r.max_tokens = steps + 1;  // the first token comes from the prefill step
    r.stop.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    reqs.push_back(std::move(r));
  }
  const auto done = engine.run(std::move(reqs));
  for (const Sequence& s : done)
    if (s.finish_reason != FinishReason::kLength)
      fail("request ", s.id(), " ended with ", finish_reason_name(s.finish_reason), ": ", s.finish_detail);
  BatchResult r;
  r.batch = batch;
  for (const StepMetrics& m : engine.metrics().steps()) {
    if (m.num_prefill_tokens > 0) {
      r.prefill_s += m.end_s - m.start_s;
      continue;
    }
    if (m.num_seqs != batch) continue;
    ++r.steady_steps;
    r.decode_tokens += m.num_decode_tokens;
    const double dt = m.end_s - m.start_s;
    r.decode_s += dt;
    if (r.best_step_s == 0 || dt < r.best_step_s) r.best_step_s = dt;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtype_name_arg = "q8_0";
  std::vector<int> batches = {1, 8, 32, 128};
  int threads = 2, steps = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dtype") dtype_name_arg = next();
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--steps") steps = std::atoi(next().c_str());
    else if (a == "--batches") {
      batches.clear();
      const std::string s = next();
      size_t pos = 0;
      while (pos < s.size()) {
        size_t c = s.find(',', pos);
        if (c == std::string::npos) c = s.size();
        batches.push_back(std::atoi(s.substr(pos, c - pos).c_str()));
        pos = c + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_engine [--dtype q8_0|bf16|f32] [--batches 1,8,32,128] [--threads N] "
                           "[--steps S]\n");
      return 2;
    }
  }
  try {
    print_load("start");
    const DType dt = parse_dtype(dtype_name_arg);
    std::shared_ptr<const Model> model = load_model(ensure_model("llama-3.2-1b", dt));
    int64_t weight_bytes = model->output.bytes();
    for (const LayerWeights& l : model->layers)
      weight_bytes += l.wq.bytes() + l.wk.bytes() + l.wv.bytes() + l.wo.bytes() + l.w_gate.bytes() +
                      l.w_up.bytes() + l.w_down.bytes();
    const double bw = kernels::measure_memcpy_bandwidth(threads);
    std::printf("llama-3.2-1b %s (%.3f GB of weights per step), %d threads, %s kernels, memcpy %.2f GB/s\n",
                dtype_name_arg.c_str(), double(weight_bytes) / 1e9, threads, kernels::kernel_path(), bw / 1e9);
    std::printf("tok/s: batch / fastest steady step (mean over the steps alongside)\n");
    std::printf("%6s %7s %12s %10s %10s %10s %12s %10s\n", "batch", "steps", "decode tok/s", "ms/step", "vs batch1",
                "mean tok/s", "mean vs b1", "prefill s");
    double base = 0, base_mean = 0;
    for (int b : batches) {
      // Fewer steps for big batches (each step is a 1B-param gemm over b rows).
      const int s = steps > 0 ? steps : (b <= 1 ? 16 : b <= 8 ? 12 : b <= 32 ? 8 : 5);
      const BatchResult r = run_batch(model, b, threads, s);
      if (b == batches.front()) base = r.best_tokens_per_s(), base_mean = r.tokens_per_s();
      std::printf("%6d %7d %12.2f %10.1f %9.2fx %10.2f %11.2fx %10.2f\n", b, r.steady_steps, r.best_tokens_per_s(),
                  r.best_step_s * 1e3, base > 0 ? r.best_tokens_per_s() / base : 0.0, r.tokens_per_s(),
                  base_mean > 0 ? r.tokens_per_s() / base_mean : 0.0, r.prefill_s);
      if (b == 1 && r.steady_steps > 0) {
        const double step_s = r.best_step_s, roof = double(weight_bytes) / bw;
        std::printf("       batch 1: %.1f ms/step vs %.1f ms weight-streaming roofline (%.0f%%)\n", step_s * 1e3,
                    roof * 1e3, 100.0 * roof / step_s);
      }
      std::fflush(stdout);
    }
    print_load("end");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
