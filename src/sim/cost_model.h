// The cost model: one function that prices a forward step of a layout (plan) for the simulator,
// the planner and the engine's online policies (ARCHITECTURE.md: "the simulator, the planner and
// the online policies all price plans through the same function").
//
// Analytical with measured calibration (in the spirit of LLMCompass / GenZ, calibrated like
// Vidur but without per-model profiling):
//  - GEMM: t = max(2mkn / (peak * eff(m)), bytes / (hbm_bw * mem_eff)) + latency, eff(m) =
//    eff_max * m / (m + m_half): efficiency rises with the token count m;
//  - element-wise kernels (norms, residual add, SwiGLU, RoPE, embedding): latency + bytes / bw;
//  - attention: prefill priced by FLOPs (causal pairs), decode by KV bytes read;
//  - collectives: latency + bytes on the busiest link / (link bandwidth * efficiency), per
//    algorithm (ring all-reduce 2(n-1)/n, all-to-all and all-gather (n-1)/n, send/recv 1) and
//    group size; across nodes the NIC bandwidth; or a measured curve when one is loaded;
//  - a per-step overhead (scheduler, sampling, input preparation).
// Layouts (one replica): TP (Megatron, all-reduce after Wo and W_down), Ulysses SP x TP (Shift
// Algorithm 1: token slices, two all-to-alls around attention, GQA KV replication when the KV
// heads per TP rank are fewer than SP, padding to a multiple of SP), PP (micro-batches through
// stages, fill and drain every step), Shift (the base config for steps above the threshold, full
// TP otherwise; Shift 3.3 Algorithm 2). DP replicas are priced one at a time by the simulator.
//
// Units: seconds and bytes. Thread-safety: const methods are safe to call concurrently.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "model/config.h"
#include "sim/hardware.h"
#include "sim/sim_plan.h"

namespace loom::sim {

// One sequence's part of a step: `new_tokens` positions computed, attending over
// `context_len` positions (context_len includes the new ones), `sample`: a token is sampled.
struct SeqWork {
  int new_tokens = 1;
  int context_len = 1;
  bool sample = true;
};

struct StepCost {
  double total_s = 0;
  double gemm_s = 0;
  double attention_s = 0;
  double elementwise_s = 0;
  double comm_s = 0;
  double overhead_s = 0;
  ParallelConfig config;  // the config that ran the step (Shift: base or shift)
};

enum class Collective { AllReduce, AllToAll, AllGather, SendRecv };
enum class Elementwise { Norm, Add, Act, Rope, Emb };
const char* collective_name(Collective c);

// Measured collective times as piecewise-linear curves in (log bytes, log seconds), one per
// (collective, group size, GPUs per node). Built from measurement files (calibration.h).
struct CollectiveCurve {
  std::vector<double> log_bytes, log_seconds;  // knots, increasing log_bytes
  double seconds(double bytes) const;
};
using CollectiveKey = std::tuple<Collective, int, int>;  // (kind, group, per_node)

// Memory of one replica's GPUs under a plan (Shift 3.3.2 eq. 1 for the shift copy).
struct MemoryPlan {
  double weight_bytes_per_gpu = 0;
  double kv_bytes_per_token_per_gpu = 0;  // all layers the GPU holds
  double free_bytes_per_gpu = 0;          // for KV after weights and the activation reserve
  int64_t kv_capacity_tokens = 0;         // tokens of KV one replica holds
};

struct CostModelOptions {
  SimDType weight_dtype = SimDType::BF16;
  double kv_bytes = 2;               // per element (bf16 KV; 1 for fp8 KV)
  double act_bytes = 2;              // activations on the wire (bf16)
  double memory_utilization = 0.90;  // of HBM the engine may use (vLLM's default)
  double activation_reserve_bytes = 2e9;  // activations, CUDA graphs, workspace per GPU
  // Price small intra-node all-reduces as vLLM's custom all-reduce (Calibration); off when
  // predicting plain NCCL measurements.
  bool custom_all_reduce = true;
};

class CostModel {
 public:
  CostModel(const ModelConfig& model, const NodeSpec& node, CostModelOptions options = {},
            Calibration calibration = default_calibration());

  const ModelConfig& model() const { return model_; }
  const NodeSpec& node() const { return node_; }
  const Calibration& calibration() const { return cal_; }
  const CostModelOptions& options() const { return opt_; }

  // Replaces the analytical collective model by measured curves where a key matches.
  void set_collective_curves(std::map<CollectiveKey, CollectiveCurve> curves) { curves_ = std::move(curves); }

  // ---- primitives (one GPU) ----
  // [m, k] x [k, n] with weights of `weight_bytes` per element and activations of act_bytes.
  double gemm_s(double m, double k, double n, SimDType compute, double weight_bytes, double act_bytes) const;
  double elementwise_s(Elementwise kind, double bytes) const;
  // `bytes`: all-reduce: the buffer; all-to-all: what one rank sends in total (all peers, its
  // own chunk included); all-gather: the gathered output; send/recv: the message.
  // group: ranks; per_node: ranks of the group on one node (== group when inside a node).
  double collective_s(Collective kind, double bytes, int group, int per_node) const;
  // One layer's attention on one GPU holding q_heads query heads and kv_heads KV heads.
  double attention_s(const std::vector<SeqWork>& seqs, int q_heads, int kv_heads) const;

  // ---- a step ----
  // Prices one replica step under `config` (throws loom::Error when the config does not divide
  // the model or exceeds the node).
  StepCost price(const ParallelConfig& config, const std::vector<SeqWork>& seqs) const;
  // The plan's choice for this step (Shift: by scheduled tokens), then price().
  StepCost price_step(const SimPlan& plan, const std::vector<SeqWork>& seqs) const;

  // Memory of one replica; throws loom::Error naming the per-GPU weights and the HBM limit when
  // the weights do not fit.
  MemoryPlan memory(const SimPlan& plan) const;

  // Checks the config against the model (heads divide) and the node; throws loom::Error.
  void check_config(const ParallelConfig& config) const;

 private:
  double link_bw(int group) const;

  ModelConfig model_;
  NodeSpec node_;
  CostModelOptions opt_;
  Calibration cal_;
  std::map<CollectiveKey, CollectiveCurve> curves_;
};

}  // namespace loom::sim
