#include "sim/shift_threshold.h"

#include "core/error.h"
#include "sim/profile.h"

namespace loom::sim {

ShiftThreshold derive_shift_threshold(const CostModel& model, int s, int t, int max_tokens) {
  if (s < 2 || t < 1 || max_tokens < 1) fail("shift threshold needs sp >= 2, tp >= 1 (got sp=", s, ", tp=", t, ")");
  const PricedPlan base = model.prepare(Plan::make_sp_tp(s, t)), shift = model.prepare(Plan::make_shift(s, t));
  ShiftThreshold r;
  auto step = [](int n) { return std::vector<SeqWork>{SeqWork{n, n, true}}; };
  // The last crossing, scanned down from max_tokens: the base wins at every step size above the
  // threshold. Where the two prices run close (a small model on CPU ranks, priced from a profile
  // measured on a shared machine), they cross back and forth at small sizes, and the first
  // crossing put the threshold anywhere from 1 to a few hundred tokens from one profile to the
  // next a minute later (decode batches of two tokens then ran under SP).
  r.threshold = 0;
  for (int n = max_tokens; n >= 1; --n) {
    const double b = model.price(base, step(n)).total_s, sh = model.price(shift, step(n)).total_s;
    if (b < sh) {
      r.crossed = true;
      r.base_s = b;
      r.shift_s = sh;
      continue;
    }
    r.threshold = n;
    break;
  }
  if (!r.crossed) {
    r.threshold = max_tokens;
    r.base_s = model.price(base, step(max_tokens)).total_s;
    r.shift_s = model.price(shift, step(max_tokens)).total_s;
  }
  r.explain = r.crossed ? cat("cost model on ", model.node().name(), ": ", base.name, " prices a ", r.threshold + 1,
                              "-token step at ", r.base_s * 1e3, " ms < ", shift.name, " ", r.shift_s * 1e3,
                              " ms (and every larger step up to ", max_tokens, " below it)")
                        : cat("cost model on ", model.node().name(), ": ", base.name, " never beats ", shift.name,
                              " up to ", max_tokens, " tokens per step (", r.base_s * 1e3, " vs ", r.shift_s * 1e3,
                              " ms there)");
  return r;
}

CostModel cpu_cost_model(const ModelConfig& model, double weight_bytes, double memcpy_bytes_per_s, double peak_flops,
                         double memory_bytes, int ranks) {
  // loom's CPU engine: f32 activations and KV cache (4 bytes), weights of `weight_bytes`, computed
  // in f32 at the measured FMA peak; the kernels it runs (StepKernels::LoomCpu).
  CostModelOptions o;
  o.weight_dtype = SimDType::BF16;  // the precision whose peak is the f32 FMA peak (cpu_spec)
  o.weight_bytes = weight_bytes;
  o.act_bytes = 4.0;
  o.kv_bytes = 4.0;
  o.custom_all_reduce = false;
  o.activation_reserve_bytes = 0;
  o.memory_utilization = 1.0;
  o.kernels = StepKernels::LoomCpu;
  return CostModel(model, cpu_node(cpu_spec(memcpy_bytes_per_s, peak_flops, memory_bytes), ranks), o);
}

ShiftThreshold default_shift_threshold(const ModelConfig& model, DType weight_dtype, const Plan& plan,
                                       const std::string& profile_dir, const std::string& backend,
                                       double memcpy_bytes_per_s, double peak_flops, int max_tokens) {
  Plan replica = plan;
  replica.dp = 1;
  if (!profile_dir.empty()) {
    const CostModel cm = profile_cost_model(read_profile(profile_dir), model, weight_dtype, replica.size(), backend,
                                            plan.size());
    ShiftThreshold t = derive_shift_threshold(cm, replica.sp, replica.tp, max_tokens);
    t.explain += cat(" [calibrated by the profile ", profile_dir, "]");
    return t;
  }
  const double wb = double(dtype_row_bytes(weight_dtype, dtype_block_elems(weight_dtype))) / dtype_block_elems(weight_dtype);
  return derive_shift_threshold(cpu_cost_model(model, wb, memcpy_bytes_per_s, peak_flops, 0, replica.size()), replica.sp,
                                replica.tp, max_tokens);
}

}  // namespace loom::sim
