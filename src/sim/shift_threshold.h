// The Shift threshold (Shift 3.3, Algorithm 2: base config for steps of more than `threshold`
// scheduled tokens, shift config otherwise) derived from the cost model instead of a fixed number:
// the smallest step size from which on the cost model prices the base SP(s) x TP(t) step below
// the shift config TP(s*t) on the given hardware, for every larger step up to max_tokens (the last
// crossing: where the prices run close they may cross more than once). Below it TP wins (its all-reduces are small and
// SP's padding and all-to-alls dominate); above it SP wins (each rank reads 1/t of the weights
// once for n/s tokens instead of 1/(s*t) for n, and sends less).
//
// A step of n tokens is priced as one prefill chunk of n tokens (context n): the shape of the
// large steps the threshold separates from decode batches. The scan covers n = 1..max_tokens;
// when the base never wins there, the threshold is max_tokens (the base never runs).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "sim/cost_model.h"

namespace loom::sim {

struct ShiftThreshold {
  int64_t threshold = 0;  // Algorithm 2: base iff scheduled tokens > threshold
  bool crossed = false;   // the base won somewhere in the scan
  double base_s = 0, shift_s = 0;  // priced step times at n = threshold + 1 (or max_tokens)
  std::string explain;    // one line: where it comes from
};

ShiftThreshold derive_shift_threshold(const CostModel& model, int s, int t, int max_tokens = 8192);

// The cost model for an engine on this machine's CPU cores (cpu_spec / cpu_node in hardware.h):
// weights of `weight_bytes` per element (4 for f32, 2 for f16/bf16, about 1 for q8_0), f32
// activations and KV cache, `ranks` ranks.
CostModel cpu_cost_model(const ModelConfig& model, double weight_bytes, double memcpy_bytes_per_s, double peak_flops,
                         double memory_bytes, int ranks);

// The default threshold of `loom generate` / `loom bench offline --policy shift` over `plan`
// (sp x tp, one replica) for `model` with weights of `weight_dtype`: from the cost model of a loom
// profile of this machine when `profile_dir` is given (sim/profile.h, collectives of
// `backend`), else from cpu_cost_model with the measured memcpy bandwidth and FMA peak.
ShiftThreshold default_shift_threshold(const ModelConfig& model, DType weight_dtype, const Plan& plan,
                                       const std::string& profile_dir, const std::string& backend,
                                       double memcpy_bytes_per_s, double peak_flops, int max_tokens = 8192);

}  // namespace loom::sim
