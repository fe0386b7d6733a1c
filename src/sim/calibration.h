// Calibration and validation of the cost model against measured operator and collective times
// (the format of ../shared/data/gpu-measurements/a100, Vidur's profiling output):
//   mlp_<model>.csv: time_stats.<op>.median (ms) per (num_tokens, num_tensor_parallel_workers)
//     with the model shape (n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size,
//     use_gated_mlp); ops emb, input_layernorm, attn_pre_proj, attn_rope, attn_post_proj,
//     post_attention_layernorm, mlp_up_proj, mlp_act, mlp_down_proj, add.
//   all_reduce_<node>.csv, send_recv_<node>.csv: time_stats.<collective>.median (ms) per
//     (num_workers, devices_per_node, size in bytes).
//
// Fitting (fit_calibration): GEMM efficiency curve and element-wise bandwidths by coordinate
// grid search minimising the median relative error; collectives as (log bytes, log s) curves of
// binned medians per (collective, workers, devices per node), plus the latency/bandwidth
// efficiencies of the analytical collective model.
//
// Validation (validate_measurements) is out of sample: each mlp file is predicted with a
// calibration fitted on the other mlp files of the folder (leave one file out; with one file,
// the even rows predict the odd ones and back), each collective row with curves fitted on the
// other half of its file's rows (2-fold by row parity).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sim/cost_model.h"
#include "sim/hardware.h"

namespace loom::sim {

// One measured time and what the cost model needs to predict it.
struct OpSample {
  std::string op;   // "attn_pre_proj", ..., or the collective name
  double measured_s = 0;
  // GEMM: m, k, n. Element-wise: bytes in k (m = n = 0). Collective: bytes in k, group in m,
  // per_node in n.
  double m = 0, k = 0, n = 0;
  int row = 0;  // data row index in its file
};

struct MeasurementFile {
  std::string path;
  std::string name;  // file name
  enum Kind { Mlp, Collective } kind = Mlp;
  std::vector<OpSample> samples;
};

// Reads every mlp_*.csv, all_reduce_*.csv and send_recv_*.csv of `dir` (sorted by name). Throws
// loom::Error when the folder is missing, holds none, or a file lacks a needed column.
std::vector<MeasurementFile> read_measurements(const std::string& dir);

// Fits a calibration to the samples of `files` for `gpu` (GEMM and element-wise from mlp files,
// collectives from collective files, each part left at `start` when no file has it).
Calibration fit_calibration(const std::vector<const MeasurementFile*>& files, const GpuSpec& gpu,
                            const Calibration& start);

// Measured collective curves from `files`, using the rows for which keep(row) is true.
std::map<CollectiveKey, CollectiveCurve> fit_collective_curves(
    const std::vector<const MeasurementFile*>& files, const std::function<bool(int row)>& keep);

// The cost model's prediction for one sample (calibration and curves held by `model`).
double predict_sample(const CostModel& model, const MeasurementFile& file, const OpSample& s);

struct FileValidation {
  std::string file;
  int samples = 0;
  double median = 0;  // of |predicted - measured| / measured
  double p90 = 0;
  double analytic_median = -1;  // collectives: the analytical model without measured curves
};

// Out-of-sample validation of every file in `dir` on `hardware` (see the top of this file).
std::vector<FileValidation> validate_measurements(const std::string& hardware, const std::string& dir);

}  // namespace loom::sim
