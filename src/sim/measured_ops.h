// Measured operator times of the profiled machine (`loom profile`), used as they were measured
// rather than through the fitted efficiency curves (hardware.h Calibration), where a step runs an
// operator of a measured shape. Vidur prices its steps the same way: operator times profiled per
// model shape and interpolated over the token count (Vidur, MLSys 2024, 4.2 "Profiling" and 4.3
// "Runtime estimator"); the efficiency fit stays for what was not measured (other shapes, other
// hardware, the transfer of `loom sim validate --calibrate-on`).
//
// Why: the efficiency curves fit loom's CPU matmuls with a median error of 20-30% even on the
// very files they were fitted on (`loom sim validate --calibrate-on P --hardware P
// --measurements P`), and the error has a sign that depends on the token count, so the priced
// prefill and decode steps of `loom sim validate-engine` were off by different amounts.
//
// Curves are piecewise linear in (log x, log seconds): x = tokens for the GEMMs (per shard shape)
// and bytes for the element-wise kernels (per kind, any shape). Below the first knot the first
// value (a latency floor), above the last the last segment's slope in x (linear).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace loom::sim {

struct MeasurementFile;

struct LogCurve {
  std::vector<double> log_x, log_s;
  bool empty() const { return log_x.empty(); }
  double seconds(double x) const;
  // From (x, seconds) points: points at the same x merged by their median, then made
  // non-decreasing in x (isotonic regression of log seconds; see measured_ops.cpp); with
  // economies_of_scale (GEMMs over tokens) first seconds / x made non-increasing likewise.
  static LogCurve from_points(std::vector<std::pair<double, double>> pts, bool economies_of_scale = false);
};

struct MeasuredOps {
  // Single GEMMs [m, k] x [k, n] (W_O, W_down): (k, n) -> seconds over m.
  std::map<std::pair<int64_t, int64_t>, LogCurve> gemm;
  // loom's Wq + Wk + Wv of one shard (three matmuls): (d, q columns, kv columns) -> over m.
  std::map<std::tuple<int64_t, int64_t, int64_t>, LogCurve> qkv;
  // W_gate + W_up of one shard (two matmuls): (d, ffn columns) -> over m.
  std::map<std::pair<int64_t, int64_t>, LogCurve> gate_up;
  // What meeting at Ulysses' all-to-alls adds to an SP step, seconds per layer, over tokens per
  // rank: (d, FFN columns of the shard) -> curve (MeasurementFile::ulysses_waits).
  std::map<std::pair<int64_t, int64_t>, LogCurve> ulysses_wait;
  // Element-wise kernels by kind (Elementwise as int: Norm, Add, Act, Rope, Emb) over bytes.
  std::map<int, LogCurve> elementwise;
  // One layer's paged attention (KV scatter + kernel, as engine/stage_attention.cpp runs it) of one
  // rank's heads, from the attention files: decode as seconds per sequence over the context, one
  // curve per measured batch size; prefill as seconds per chunk over the chunk's tokens, one curve
  // per measured number of earlier tokens.
  struct Attention {
    std::map<int, LogCurve> decode_per_seq;  // batch -> over context (new token included)
    std::map<int, LogCurve> prefill;         // earlier tokens -> over chunk tokens
  };
  std::map<std::tuple<int, int, int>, Attention> attention;  // (q heads, kv heads, head_dim)

  bool empty() const {
    return gemm.empty() && qkv.empty() && gate_up.empty() && elementwise.empty() && attention.empty() &&
           ulysses_wait.empty();
  }
  // Seconds, or a negative value when the shape (kind) was not measured.
  double gemm_s(double m, double k, double n) const;
  double qkv_s(double m, double d, double q_cols, double kv_cols) const;
  double gate_up_s(double m, double d, double ffn) const;
  double ulysses_wait_s(double m, double d, double ffn) const;
  double elementwise_s(int kind, double bytes) const;
  // A GEMM [m, k] x [k, n] of an unmeasured n (loom's classifier, [m, d] x [d, vocab]) from the
  // measured GEMM of the same k and m with the most output columns, scaled by n over its
  // columns. ASSUMPTION: at equal m and k, a CPU matmul's time is proportional to its output
  // columns (it streams one weight row per output column; both terms of the roofline scale so).
  double scaled_gemm_s(double m, double k, double n) const;
  // One layer's attention of a step's sequences (new tokens, context) on a rank of these heads:
  // decode rows each at its context, at the step's decode batch (log-interpolated between the
  // measured batches, clamped to their range); each prefill chunk at its size, linear in its
  // earlier tokens between (and beyond, on the last two) the measured counts. Negative when the
  // heads (or a phase the step has) were not measured.
  struct Work {
    int new_tokens = 1, context = 1;
  };
  double attention_s(const std::vector<Work>& seqs, int q_heads, int kv_heads, int head_dim) const;
};

// The operators of the mlp files (loom_cpu kernels) given, by shape and kind.
MeasuredOps measured_ops(const std::vector<const MeasurementFile*>& files);

}  // namespace loom::sim
