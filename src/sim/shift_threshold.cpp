#include "sim/shift_threshold.h"

#include "core/error.h"

namespace loom::sim {

ShiftThreshold derive_shift_threshold(const CostModel& model, int s, int t, int max_tokens) {
  if (s < 2 || t < 1 || max_tokens < 1) fail("shift threshold needs sp >= 2, tp >= 1 (got sp=", s, ", tp=", t, ")");
  const ParallelConfig base{t, s, 1}, shift{s * t, 1, 1};
  model.check_config(base);
  model.check_config(shift);
  ShiftThreshold r;
  auto step = [](int n) { return std::vector<SeqWork>{SeqWork{n, n, true}}; };
  for (int n = 1; n <= max_tokens; ++n) {
    const double b = model.price(base, step(n)).total_s, sh = model.price(shift, step(n)).total_s;
    if (b < sh) {
      r.threshold = n - 1;
      r.crossed = true;
      r.base_s = b;
      r.shift_s = sh;
      break;
    }
  }
  if (!r.crossed) {
    r.threshold = max_tokens;
    r.base_s = model.price(base, step(max_tokens)).total_s;
    r.shift_s = model.price(shift, step(max_tokens)).total_s;
  }
  r.explain = r.crossed ? cat("cost model on ", model.node().name(), ": ", base.name(), " prices a ", r.threshold + 1,
                              "-token step at ", r.base_s * 1e3, " ms < ", shift.name(), " ", r.shift_s * 1e3,
                              " ms (first step size where the base wins)")
                        : cat("cost model on ", model.node().name(), ": ", base.name(), " never beats ", shift.name(),
                              " up to ", max_tokens, " tokens per step (", r.base_s * 1e3, " vs ", r.shift_s * 1e3,
                              " ms there)");
  return r;
}

CostModel cpu_cost_model(const ModelConfig& model, double weight_bytes, double memcpy_bytes_per_s, double peak_flops,
                         double memory_bytes, int ranks) {
  // Activations and KV are f32 (4 bytes). For f32 weights everything is priced as 2-byte elements
  // at half the bandwidths (cpu_spec's elem_scale), so every byte term is exact; f16/bf16 weights
  // are priced like f32 ones (an upper bound on their reads); ~1-byte weights (q8_0) as fp8 with
  // 4-byte activations and KV at the measured bandwidth.
  const bool one_byte = weight_bytes < 1.5;
  const double scale = one_byte ? 1.0 : 4.0 / 2.0;
  CostModelOptions o;
  o.weight_dtype = one_byte ? SimDType::FP8 : SimDType::BF16;
  o.act_bytes = one_byte ? 4.0 : 2.0;
  o.kv_bytes = one_byte ? 4.0 : 2.0;
  o.custom_all_reduce = false;
  o.activation_reserve_bytes = 0;
  o.memory_utilization = 1.0;
  return CostModel(model, cpu_node(cpu_spec(memcpy_bytes_per_s, peak_flops, memory_bytes, scale), ranks), o);
}

}  // namespace loom::sim
