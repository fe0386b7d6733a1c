// Calibration and validation of the cost model against measured operator and collective times
// (the format of ../shared/data/gpu-measurements/a100, Vidur's profiling output, which
// `loom profile` also writes for this machine):
//   mlp_<model>.csv: time_stats.<op>.median (ms) per (num_tokens, num_tensor_parallel_workers)
//     with the model shape (n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size,
//     use_gated_mlp); ops emb, input_layernorm, attn_pre_proj, attn_rope, attn_post_proj,
//     post_attention_layernorm, mlp_up_proj, mlp_act, mlp_down_proj, add. Optional columns
//     (loom profile): weight_dtype, weight_bytes and act_bytes (bytes per element; default 2, the
//     fp16 of Vidur's profiles), kernels (fused_gpu: one QKV and one gate+up GEMM, Vidur's; or
//     loom_cpu: Wq, Wk, Wv and W_gate, W_up as separate matmuls, loom's CPU engine),
//     concurrent_ranks (ranks computing at once), working_set_bytes (weights cycled through, one
//     copy per layer as a step reads them: the GEMM's cache term).
//   attention_<model>.csv: time_stats.attn_prefill.median or time_stats.attn_decode.median (ms) of
//     one layer's attention per (batch_size, prefill_chunk_size, kv_cache_size, is_prefill) with
//     n_q_head, n_kv_head, n_embd, num_tensor_parallel_workers (Vidur's attention profile);
//     optional kv_bytes, act_bytes. Each of batch_size sequences computes prefill_chunk_size new
//     tokens (1 for a decode) over kv_cache_size earlier ones.
//   <collective>_<node>.csv for all_reduce, all_gather, all_to_all, send_recv, broadcast, get (a
//     one-sided read of a peer's registered buffer, size = bytes read; `loom profile` writes it):
//     time_stats.<collective>.median (ms) per (num_workers, devices_per_node, size in bytes). A
//     node name with "pairwise" is a node with NVLink between GPU pairs only.
//   step_overhead_<name>.csv: time_stats.step_overhead.median (ms) of the engine's work per step
//     outside the forward pass (scheduling, sampling, bookkeeping) per (num_seqs, num_tokens).
//
// What is fitted is hardware-independent: efficiencies, i.e. achieved fractions of the
// datasheet's FLOP/s, memory bandwidth and link bandwidth (GpuSpec), as functions of the operand
// sizes (GEMM: compute efficiency rising with the token count m, eff_max * m / (m + m_half); the
// roofline's max picks the bound by arithmetic intensity), of the collective's group size (a
// latency per extra rank) and of the kernel (attention prefill / decode, each element-wise op),
// plus fixed latencies in seconds. So a calibration fitted on one machine's measurements prices
// another machine from its datasheet entry alone (validate_transfer). Collectives additionally
// get measured curves (fit_collective_curves) when the machine itself was measured.
//
// Fitting (fit_calibration): coordinate grid search minimising the median relative error, per
// group of parameters.
//
// Validation (validate_measurements) is out of sample: each mlp / attention file is predicted with
// a calibration fitted on the other files of its kind in the folder (leave one file out; with
// one file, the even rows predict the odd ones and back), each collective row with curves fitted
// on the other half of its file's rows (2-fold by row parity).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/progress.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"

namespace loom::sim {

// One measured time and what the cost model needs to predict it.
// What a sample measured, parsed once from its `op` name when the file is read (a fit predicts
// every sample thousands of times; comparing names there was a quarter of `loom sim validate`).
enum class SampleOp : uint8_t { QkvProj, PostProj, UpProj, DownProj, Norm, Add, Act, Rope, Emb, Attention, Collective, Overhead };

struct OpSample {
  std::string op;   // "attn_pre_proj", ..., "attn_decode", "step_overhead", or the collective
  SampleOp kind = SampleOp::Emb;             // from `op`
  Collective collective = Collective::AllReduce;  // kind == Collective: from `op`
  double measured_s = 0;
  // GEMM: m, k, n (QKV: n = query columns, n2 = KV columns; gate+up: n = FFN columns of one of
  // the two, n2 = 1 when gated). Element-wise: bytes in k. Collective: bytes in k, group in m,
  // per_node in n. Step overhead: sequences in m, tokens in k.
  double m = 0, k = 0, n = 0, n2 = 0;
  // Attention: `batch` sequences of `new_tokens` new tokens over `context` tokens in all
  // (new ones included), q_heads / kv_heads on the GPU.
  int batch = 0, new_tokens = 0, context = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  double working_set = 0;  // GEMM: bytes its operands came back from (0: its own, repeated)
  int row = 0;  // data row index in its file
};

struct MeasurementFile {
  std::string path;
  std::string name;  // file name
  enum Kind { Mlp, Attention, Collective, Overhead } kind = Mlp;
  std::vector<OpSample> samples;
  // How the measured engine ran (mlp / attention files): bytes per element, kernel granularity.
  double weight_bytes = 2, act_bytes = 2, kv_bytes = 2;
  std::string weight_dtype = "fp16";
  StepKernels kernels = StepKernels::FusedGpu;
  Topology topology = Topology::NvSwitch;  // collectives: "pairwise" in the name -> PairwiseNvlink
  int concurrent_ranks = 1;  // ranks that computed at once while it was measured (loom profile)
  // mlp files of `loom profile` (column ulysses_wait, tp=1 rows of concurrent ranks): seconds per
  // layer that meeting at Ulysses' all-to-alls adds to a step of SP ranks; m = tokens per rank,
  // k = d_model, n = FFN columns of the shard. Not operators: no fit reads them.
  std::vector<OpSample> ulysses_waits;
};

// Reads every measurement file of `dir` (the kinds above, sorted by name). Throws loom::Error
// when the folder is missing, holds none, or a file lacks a needed column.
std::vector<MeasurementFile> read_measurements(const std::string& dir);

// Fits a calibration to the samples of `files` measured on `gpu` (GEMM and element-wise from mlp
// files, attention from attention files, the step overhead from overhead files, collectives
// from collective files; each part left at `start` when no file has it).
Calibration fit_calibration(const std::vector<const MeasurementFile*>& files, const GpuSpec& gpu,
                            const Calibration& start);

// Measured collective curves from `files`, using the rows for which keep(row) is true.
std::map<CollectiveKey, CollectiveCurve> fit_collective_curves(
    const std::vector<const MeasurementFile*>& files, const std::function<bool(int row)>& keep);

// A cost model of `gpu` for priming the primitives of `file` (its element sizes, kernels and,
// for collectives, its topology), with `cal`.
CostModel measurement_model(const GpuSpec& gpu, const Calibration& cal, const MeasurementFile& file);
// The cost model's prediction for one sample (calibration and curves held by `model`, built
// for the sample's file by measurement_model).
double predict_sample(const CostModel& model, const MeasurementFile& file, const OpSample& s);

struct FileValidation {
  std::string file;
  int samples = 0;
  double median = 0;  // of |predicted - measured| / measured
  double p90 = 0;
  double analytic_median = -1;  // collectives: the analytical model without measured curves
  std::map<std::string, std::pair<int, double>> by_op;  // op -> (samples, median error)
};

// Out-of-sample validation of every file in `dir` on `hardware` (see the top of this file).
// `progress` (optional): files done and in all.
std::vector<FileValidation> validate_measurements(const std::string& hardware, const std::string& dir,
                                                  ProgressCount* progress = nullptr);

// Transfer: a calibration fitted on every file of `calibrate_dir` (measured on
// `calibrate_hardware`) predicts every file of `dir` on `hardware` from its datasheet entry
// alone (no curves, no fitting on `dir`): collectives by the analytical model.
std::vector<FileValidation> validate_transfer(const std::string& calibrate_hardware, const std::string& calibrate_dir,
                                              const std::string& hardware, const std::string& dir,
                                              ProgressCount* progress = nullptr);

// The hardware a measurement folder was taken on: its hardware.json (loom profile) when there
// is one, else the catalog GPU its folder name names ("a100" -> a100-80gb). Throws loom::Error
// saying to name it otherwise.
std::string measurement_hardware(const std::string& dir);

}  // namespace loom::sim
