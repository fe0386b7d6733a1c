#include "cli/shift_cli.h"

#include <cstdio>

#include "core/error.h"
#include "kernels/roofline.h"
#include "model/weights.h"
#include "sim/shift_threshold.h"

namespace loom::cli {

void add_shift_options(CLI::App* sub, ShiftArgs& a) {
  sub->add_option("--policy", a.policy,
                  "Layout policy: fixed (the plan's config every step) or shift (Shift Algorithm 2 over an "
                  "sp x tp plan: base above --shift-threshold tokens per step, full TP otherwise)")
      ->capture_default_str();
  sub->add_option("--shift-threshold", a.threshold,
                  "Tokens per step above which --policy shift runs the base config (default: from the cost "
                  "model for this machine)");
  sub->add_option("--shift-weights", a.weights,
                  "Shift weights: separate (copies of base and shift shards, w/t + w/P) or slice (views of the "
                  "base copy, w/t)")
      ->capture_default_str();
}

void apply_shift_options(const ShiftArgs& a, DistOptions& o) {
  if (a.threshold < -1) fail("--shift-threshold must be >= 0 tokens, got ", a.threshold);
  o.policy = a.policy;
  o.shift_threshold = a.threshold;
  o.shift_weights = a.weights;
  o.default_shift_threshold = [](const Model& m, const Plan& plan, int threads) -> int64_t {
    // This machine's roofline, one rank's share: `threads` cores (64 MiB buffers: a quick probe).
    kernels::Roofline roof(threads, size_t(64) << 20);
    const double bw = roof.memcpy_bandwidth(threads, 3), flops = roof.peak_flops(threads, 3);
    const double weight_bytes = double(m.layers.at(0).w_up.bytes()) / double(m.layers.at(0).w_up.rows * m.layers.at(0).w_up.cols);
    const sim::CostModel cm = sim::cpu_cost_model(m.config, weight_bytes, bw, flops, 0, plan.size());
    const int max_tokens = 8192;
    const sim::ShiftThreshold t = sim::derive_shift_threshold(cm, plan.sp, plan.tp, max_tokens);
    std::fprintf(stderr,
                 "[shift threshold %lld tokens: %s; measured per rank: memcpy %.1f GB/s, peak %.1f GFLOP/s, "
                 "%.2f bytes per weight; --shift-threshold overrides]\n",
                 (long long)t.threshold, t.explain.c_str(), bw / 1e9, flops / 1e9, weight_bytes);
    return t.threshold;
  };
}

void print_shift_stats(const DistEngine& e) {
  const ShiftStats s = e.shift_stats();
  if (s.base_steps + s.shift_steps == 0) return;
  std::fprintf(stderr, "[shift: policy %s, %lld base steps, %lld shift steps, %lld switches, %lld KV bytes moved]\n",
               e.policy().c_str(), (long long)s.base_steps, (long long)s.shift_steps, (long long)s.switches,
               (long long)s.kv_bytes_moved);
}

}  // namespace loom::cli
