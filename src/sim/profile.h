// A profile of the machine loom runs on, as `loom profile -o DIR` writes it (src/profiler/profiler.h):
//   hardware.json            the hardware entry of one rank (hardware.h: one rank = threads_per_rank
//                            cores; hbm_bw = measured memcpy bandwidth, flops = measured FMA peak,
//                            link_bw = measured point-to-point bandwidth between ranks) and a
//                            "profile" object: threads_per_rank, kernel_path, cores, what was measured
//   mlp_<shape>_<dtype>[_rR].csv  loom's layer operators per (tokens, TP degree), one file per weight
//                            dtype and per number R of ranks computing at once (no suffix: 1)
//   attention_<shape>[_rR].csv  one layer's paged attention per (batch, chunk, context, TP degree)
//   step_overhead_cpu.csv    the engine's per-step work outside the forward pass
//   <collective>_cpu_<backend>.csv  each collective over sizes and rank counts, backend local
//                            (ranks as threads) or mpi (written by `mpirun -np N loom profile --comm mpi`)
// in the measurement format of calibration.h, so `loom sim validate --hardware DIR --measurements DIR`
// checks the fit, and the simulator, the planner and the default Shift threshold price loom's CPU
// engine on this machine from it (profile_cost_model).
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "sim/calibration.h"
#include "sim/cost_model.h"

namespace loom::sim {

struct MachineProfile {
  std::string dir;
  GpuSpec hardware;          // one rank
  int threads_per_rank = 1;  // the threads each measured rank ran with
  std::string kernel_path;   // kernels::kernel_path() when measured
  std::vector<MeasurementFile> files;

  // Weight dtypes with an mlp file (dtype_name spelling: f32, f16, bf16, q8_0).
  std::vector<std::string> weight_dtypes() const;
  // Backends with collective files ("local", "mpi").
  std::vector<std::string> backends() const;
};

// True when `dir` holds a loom profile (a hardware.json with a "profile" object).
bool is_profile(const std::string& dir);
// Reads a profile folder. Throws loom::Error naming the folder and what is missing.
MachineProfile read_profile(const std::string& dir);

// The cost model of loom's CPU engine (StepKernels::LoomCpu, f32 activations and KV cache) for
// `model` with weights of `weight_dtype` on `ranks` ranks of the profiled machine talking over
// `backend` ("local" or "mpi"): a calibration fitted on the profile's mlp files of that dtype,
// its attention, step-overhead and `backend` collective files, plus that backend's measured
// collective curves; the operators of the measured shapes (the model's own, if it was profiled)
// are priced as measured (Calibration::measured, sim/measured_ops.h), the fit prices the rest. Throws loom::Error naming the dtypes / backends the profile has when the
// asked one is missing.
// `concurrent_ranks`: ranks computing at once on the machine (all replicas of a DP plan); 0: ranks.
CostModel profile_cost_model(const MachineProfile& profile, const ModelConfig& model, DType weight_dtype, int ranks,
                             const std::string& backend = "local", int concurrent_ranks = 0);

// The cost model `loom sim run`, `loom plan` and the experiments use for --hardware:
//  - a catalog node or hardware entry ("h200x8", "a100x4:pairwise", "entry.json"): a vLLM-class
//    GPU engine, `dtype` a GPU precision (bf16, fp8, fp4; "" = fp8), the A100 calibration;
//  - a loom profile folder, optionally "DIRxN": loom's CPU engine on the profiled machine,
//    `dtype` a weight dtype (f32, f16, bf16, q8_0; "" = f32), `plan`'s replica ranks talking over
//    `backend`, all of plan.size() ranks computing at once.
// Throws loom::Error naming the value.
CostModel hardware_cost_model(const ModelConfig& model, const std::string& hardware, const std::string& dtype,
                              const Plan& plan, const std::string& backend = "local");
// True when --hardware names a profile folder (with or without "xN").
bool is_profile_hardware(const std::string& hardware);

// The calibration profile_cost_model uses (exposed for reports): operator files measured with
// the largest number of concurrent ranks <= `ranks` (the plan's ranks all compute at once).
Calibration profile_calibration(const MachineProfile& profile, DType weight_dtype, const std::string& backend,
                                int ranks = 1);

}  // namespace loom::sim
