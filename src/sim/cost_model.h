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
// Layouts: every replica plan is a loom::Plan (src/parallel/plan.h), validated by the engine's
// own validate() and reduced to per-rank sizes by the engine's own rank_layout() (one pricing path,
// ARCHITECTURE.md): TP (Megatron, all-reduce after Wo and W_down), Ulysses SP x TP (Shift
// Algorithm 1: token slices, two all-to-alls around attention, GQA KV replication when the KV
// heads per TP rank are fewer than SP, padding to a multiple of SP), the Shift config (TP(sp*tp)
// in the Shift 3.3.1 order), PP (micro-batches through stages: filled and drained within every step on loom's
// CPU engine, in steady state on GPU engines; PipelineSchedule). The
// layout policy (engine/policy.h) picks the plan of each step; DP replicas are priced one at a
// time by the simulator. Helix (kvp=K,tpa=A; ../shared/papers/003 2.1-2.3): every KVP rank
// projects Q/K/V for all the step's tokens for its TPA heads (2.1.1, redundant on the K ranks),
// attends its 1/K of each context (blocks round-robin, 2.3), one all-to-all over the KVP group
// of the partial outputs of H/N heads plus their LSE (2.1.1; MLA: the heads' outputs after W_UV,
// not the latent), W_O and the FFN as TP(N = K*A) with
// their all-reduces (2.2); HOP-B (2.1.3) overlaps each chunk's all-to-all with the next chunk's
// attention (exposed: what the attention cannot hide, hopb_span in sim/helix.h; at most
// CostModelOptions::hopb_max_chunks chunks; a chunk launches its own attention, all-to-all and
// merge kernel, each with its fixed cost); hopb=off as Figure 3 draws it, the same chunks one after
// another (CostModelOptions::hopb_off).
// MLA and MoE models (ModelArch) are priced with their own kernels: the latent KV cache and
// absorbed attention, and routed experts of which a step reads only those its tokens pick
// (expected count under uniform routing), on a TPF x EP grid of the FFN group chosen per step
// (Helix 2.2: "choosing TPF versus EP to best match expert size and quantity"). A switch between
// plans with different KV placements is priced with the bytes of kv_migration() (parallel/kv_migration.h), the engine's own count.
// SiDP plans (dp=D,weights=owner) are priced by price_sidp (sim/sidp_cost.h): a WaS replica's own
// step over its work alone, a lockstep step of the group (CaS) over every replica's part.
//
// Units: seconds and bytes. Thread-safety: const methods are safe to call concurrently.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "model/config.h"
#include "parallel/kv_placement.h"
#include "parallel/plan.h"
#include "sim/hardware.h"
#include "sim/model_catalog.h"

namespace loom::sim {

// One sequence's part of a step: `new_tokens` positions computed, attending over
// `context_len` positions (context_len includes the new ones), `sample`: a token is sampled.
struct SeqWork {
  int new_tokens = 1;
  int context_len = 1;
  bool sample = true;
};

// Layouts the Helix paper (../shared/papers/003, 3.1) compares Helix against that are not a
// loom::Plan (loom's engine does not run them); the simulator prices them on a Plan's sizes:
enum class PlanVariant {
  AsPlanned,
  // Medha-style KVP (Helix 1 and 3.1, "vanilla KVP"): the attention of a kvp=K,tpa=A plan, then
  // the partial outputs gathered onto one TP(A) group that runs W_O and the FFN while the other
  // KVP groups wait, its [B, H] result broadcast back; every communication exposed ("Medha
  // systems expose all communication overheads", 3.2).
  MedhaKvp,
  // DeepSeek's production layout (Helix 3.1, "EP": data-parallel attention coupled with
  // expert-parallel FFNs) over a dp=N plan: each replica attends its own requests with the whole
  // attention weights; the routed experts are spread over the N ranks (EP = N), tokens reach them
  // through a dispatch all-to-all and come back through a combine all-to-all; dense layers and
  // the shared experts run replicated.
  DpAttentionEp,
};
const char* plan_variant_name(PlanVariant v);  // "plan", "medha", "dp-attention-ep"

// One replica plan as the cost model prices it, built once by CostModel::prepare() and priced
// per step: the plan validated against the model by loom::validate() and reduced, through
// rank_layout(), to the sizes of its busiest rank (a step is as slow as its slowest rank; for an
// even split every rank is the busiest).
struct PricedPlan {
  Plan full;         // the plan as given (normalised): its KV placement, migrations, world size
  Plan plan;         // one replica of it (dp == 1): what one step of one replica is priced on
  std::string name;  // full.to_string(): the name StepBatch::plan and StepMetrics::plan carry
  int dp = 1;        // replicas
  int world_ranks = 1;  // full.size()
  int ranks = 1;     // plan.size(): one replica
  int sp = 1;        // Ulysses degree: tokens split by position (1 for a shift config)
  int tp_group = 1;  // ranks of the Wo / W_down all-reduce group (Plan::ffn_degree())
  int pp = 1;        // pipeline stages
  int max_layers = 0;  // layers of the largest stage
  // The busiest rank (maxima over rank_layout of every rank):
  int proj_q_heads = 0, proj_kv_heads = 0;  // heads projected on the rank's tokens (Wq, Wk/Wv rows)
  int q_heads = 0, kv_heads = 0;            // heads attended (after the SP all-to-all); KV stored
  int out_heads = 0;                        // heads of its Wo input columns
  int64_t ffn = 0;                          // FFN columns (uneven shards: the larger one)
  double weight_bytes = 0;  // weights the busiest rank reads every step (its working set)
  // Helix (kvp > 1, Helix 2.1): KV blocks of kv_block tokens round-robin over kvp ranks; each rank
  // attends its blocks for its TPA heads, one all-to-all over the KVP group merges them (HOP-B:
  // chunked and overlapped with the attention, 2.1.3).
  int kvp = 1, kv_block = 1;
  bool hopb = false;
  PlanVariant variant = PlanVariant::AsPlanned;
  int ep = 1;  // DpAttentionEp: the ranks the routed experts are spread over
  // MoE models (ModelArch::moe): of max_layers, those with a dense FFN (the first layers).
  int dense_layers = 0;
};

struct StepCost {
  double total_s = 0;
  double gemm_s = 0;
  double attention_s = 0;
  double elementwise_s = 0;
  double comm_s = 0;
  double overhead_s = 0;
  double switch_s = 0;          // KV migration before the step (plans with different placements)
  // Steady-state pipeline (PipelineSchedule): the p - 1 stage slots that fill an empty pipeline,
  // not in total_s (the simulator adds them when a plan switch has drained the pipeline).
  double pipeline_fill_s = 0;
  int64_t kv_bytes_moved = 0;   // by that migration (KvMigration::total_bytes)
  std::string plan;             // PricedPlan::name of the plan that ran the step
};

// Get: a one-sided read of `bytes` from a peer's registered buffer (Communicator::get; SiDP's
// weight fetch), priced with the send/recv figures where it was not measured.
enum class Collective { AllReduce, AllToAll, AllGather, SendRecv, Broadcast, Get };
enum class Elementwise { Norm, Add, Act, Rope, Emb };
const char* collective_name(Collective c);

// Measured collective times as piecewise-linear curves in (log bytes, log seconds), one per
// (collective, group size, GPUs per node). Built from measurement files (calibration.h).
struct CollectiveCurve {
  std::vector<double> log_bytes, log_seconds;  // knots, increasing log_bytes
  double seconds(double bytes) const;
};
using CollectiveKey = std::tuple<Collective, int, int>;  // (kind, group, per_node)

// Memory of one replica's GPUs under a set of resident plans (Shift 3.3.2 eq. 1 for the shift
// copy).
struct MemoryPlan {
  double weight_bytes_per_gpu = 0;
  double kv_bytes_per_token_per_gpu = 0;  // all layers the GPU holds
  double free_bytes_per_gpu = 0;          // for KV after weights and the activation reserve
  int64_t kv_capacity_tokens = 0;         // tokens of KV one replica holds
};

// Which kernels one layer step runs.
enum class StepKernels {
  // A vLLM-class GPU engine: one fused QKV GEMM, one fused gate+up GEMM, the final norm over
  // every token and a vocabulary-parallel LM head (V / tp columns per rank).
  FusedGpu,
  // loom's CPU engine (engine/transformer.cpp, engine/ulysses.cpp): Wq, Wk, Wv and W_gate, W_up
  // as separate matmuls; the final norm and the whole classifier only for the sampled rows, on
  // the sampling rank.
  LoomCpu,
};

// How a pipeline-parallel (pp > 1) step is priced.
enum class PipelineSchedule {
  // FillDrain for StepKernels::LoomCpu, Steady for FusedGpu.
  Auto,
  // loom's CPU engine (engine/rank_forward.cpp): the step's micro-batches (min(pp, sequences)
  // groups of whole sequences) enter and leave the pipeline within the step: mb + pp - 1 slots.
  FillDrain,
  // vLLM's virtual engines and Seesaw's asynchronous workers (../shared/papers/004 §3.1
  // Observation 2, §5.1: "each decoding step processes 1/PP of the sequences"): pp micro-batches
  // of about 1/pp of the step's tokens stay in flight from one step to the next, so a step is pp
  // stage slots (the round trip of one micro-batch) and the fill is paid once per start.
  Steady,
};

struct CostModelOptions {
  SimDType weight_dtype = SimDType::BF16;  // compute precision (tensor-core peak)
  double weight_bytes = 0;           // bytes per weight element; 0: sim_dtype_bytes(weight_dtype)
  int weight_block = 1;              // columns per weight block (ModelShape::weight_block: 32 for q8_0)
  double kv_bytes = 2;               // per element (bf16 KV; 1 for fp8 KV; 4 for loom's f32 cache)
  double act_bytes = 2;              // activations in memory and on the wire (bf16; 4 for loom's f32)
  double memory_utilization = 0.90;  // of HBM the engine may use (vLLM's default)
  double activation_reserve_bytes = 2e9;  // activations, CUDA graphs, workspace per GPU
  // Price small intra-node all-reduces as vLLM's custom all-reduce (Calibration); off when
  // predicting plain NCCL measurements.
  bool custom_all_reduce = true;
  // Ranks computing at once that share the cache (GpuSpec::cache_bytes): 1 on GPUs (each its own
  // L2); on a CPU every rank of the machine (all replicas of a DP plan).
  int concurrent_ranks = 1;
  // Kernel granularity of the engine being simulated (see StepKernels).
  StepKernels kernels = StepKernels::FusedGpu;
  // HOP-B (Helix 2.1.3): the most chunks a step's sequences are cut into, each chunk's all-to-all
  // under the next chunk's attention (the cheapest count up to it is priced). 8: loom's engine
  // (engine/stage_helix.cpp kMaxChunks); the paper pipelines per request ("once the attention
  // output for the first query token is computed, Helix immediately initiates All-to-All for that
  // token"), a cap of the batch size or more.
  int hopb_max_chunks = 8;
  // HOP-B off (plans with hopb=off). Figure3: the chunks the on schedule runs (its cheapest count,
  // each chunk one attention kernel, one all-to-all and one merge), strictly one after another:
  // the drawing of the paper's Figure 3 (8 requests, each exchange after all the attention) and
  // 3.3's ablation, so the fixed cost of every exchange is exposed. OneChunk: one exchange of the
  // whole batch (loom's engine runs one chunk when HOP-B is off, engine/stage_helix.cpp). Auto:
  // Figure3 for FusedGpu, OneChunk for LoomCpu.
  enum class HopbOff { Auto, Figure3, OneChunk };
  HopbOff hopb_off = HopbOff::Auto;
  // HOP-B chunks of one request each, on and off (2.1.3: "once the attention output for the first
  // query token is computed, Helix immediately initiates All-to-All for that token"; Figure 3's
  // 8 requests, 8 exchanges), instead of the cheapest count up to hopb_max_chunks.
  bool hopb_per_request = false;
  PipelineSchedule pipeline = PipelineSchedule::Auto;
  // SiDP WaS fetches in peak-shifting order where the plan's lookahead allows it (sim/sidp_cost.h);
  // false prices the same plan in layer order, every non-owner reading the same owner at once
  // (the ablation of SiDP Fig. 10; the engine has no such switch).
  bool sidp_peak_shifting = true;
  // Multiplies the time of every all-reduce (Seesaw §6.5 / Fig. 14: "we then mutate the
  // all-reduce time to project the end-to-end throughput with different inter-connection
  // bandwidths"; 1 / the bandwidth scale). Other transfers keep their price.
  double all_reduce_time_scale = 1.0;
};

class CostModel {
 public:
  CostModel(const ModelConfig& model, const NodeSpec& node, CostModelOptions options = {},
            Calibration calibration = default_calibration());

  const ModelConfig& model() const { return model_; }
  const ModelShape& shape() const { return shape_; }
  const NodeSpec& node() const { return node_; }
  const Calibration& calibration() const { return cal_; }
  const CostModelOptions& options() const { return opt_; }
  double weight_bytes() const;  // per element
  // Whether pp > 1 steps are priced in steady state (PipelineSchedule).
  bool pipeline_steady_state() const;

  // Replaces the analytical collective model by measured curves where a key matches.
  void set_collective_curves(std::map<CollectiveKey, CollectiveCurve> curves) { curves_ = std::move(curves); }
  const std::map<CollectiveKey, CollectiveCurve>& collective_curves() const { return curves_; }

  // ---- primitives (one GPU) ----
  // [m, k] x [k, n] with weights of `weight_bytes` per element and activations of act_bytes.
  // `working_set`: the bytes the operands come back from (GemmCalibration's cache term); 0: the
  // GEMM's own bytes (an operation repeated on its own, as measurements do).
  double gemm_s(double m, double k, double n, SimDType compute, double weight_bytes, double act_bytes,
                double working_set = 0) const;
  // The QKV projection of m tokens ([m, d] x [d, (q + 2 kv) * head_dim]) and the gate + up
  // projection ([m, d] x [d, 2 * ffn]) at the engine's granularity (fused or separate GEMMs),
  // in the model's weight dtype.
  double qkv_proj_s(double m, double d, double q_cols, double kv_cols, double working_set = 0) const;
  double gate_up_s(double m, double d, double ffn, double working_set = 0) const;
  double elementwise_s(Elementwise kind, double bytes) const;
  // `bytes`: all-reduce: the buffer; all-to-all: what one rank sends in total (all peers, its
  // own chunk included); all-gather: the gathered output; send/recv, broadcast: the message.
  // group: ranks; per_node: ranks of the group on one node (== group when inside a node).
  double collective_s(Collective kind, double bytes, int group, int per_node) const;
  // One layer's attention on one GPU holding q_heads query heads and kv_heads KV heads of
  // head_dim (0: the model's).
  double attention_s(const std::vector<SeqWork>& seqs, int q_heads, int kv_heads, int head_dim = 0) const;
  // Its two parts by FLOPs and bytes (prefill chunks, then decodes), for fitting.
  struct AttentionWork {
    double prefill_flops = 0, prefill_bytes = 0, decode_flops = 0, decode_bytes = 0;
    bool prefill = false, decode = false;
  };
  AttentionWork attention_work(const std::vector<SeqWork>& seqs, int q_heads, int kv_heads, int head_dim = 0) const;

  // One Helix all-to-all (kvp > 1, Helix 2.1.1) of the partial outputs and LSE of `tokens` tokens
  // under `plan`, one layer: each rank sends its H/TPA heads' head_dim values (BF16 on the wire)
  // plus one f32 LSE per (token, head) over the KVP group.
  double helix_exchange_s(const PricedPlan& plan, double tokens) const;

  // ---- MLA / MoE ----
  // What ModelConfig does not describe (sim/model_catalog.h): MLA attention and MoE FFNs are
  // priced when set (find_model_arch gives a catalog model's).
  void set_arch(const ModelArch& arch);
  const ModelArch& arch() const { return arch_; }

  // ---- plans ----
  // Validates `plan` (loom::validate against the model, plus: a replica fits the node,
  // weights=owner only on DP replicas of one rank; `variant` fits the plan) and derives the per-rank sizes of one replica (a
  // step of each replica is priced on them). Throws loom::Error naming the value and the limit.
  PricedPlan prepare(const Plan& plan, PlanVariant variant = PlanVariant::AsPlanned) const;

  // ---- a step ----
  // Prices one replica step under `plan` (`seqs`: that replica's sequences; a SiDP plan: replica
  // 0's own step, priced as a step of the group in which the other replicas are idle).
  StepCost price(const PricedPlan& plan, const std::vector<SeqWork>& seqs) const;
  // A lockstep step of every replica (DpMode::Lockstep): replica r computes the sequences with
  // id % dp == r; the step lasts as long as the busiest (`replica_seqs[r]`: replica r's).
  StepCost price_lockstep(const PricedPlan& plan, const std::vector<std::vector<SeqWork>>& replica_seqs) const;
  StepCost price(const Plan& plan, const std::vector<SeqWork>& seqs) const { return price(prepare(plan), seqs); }

  // ---- a switch ----
  // True when the two plans store the same KV on every rank (kv_placement equality: a Shift
  // switch, Shift 3.3.1), so switching costs nothing.
  bool same_kv_placement(const PricedPlan& from, const PricedPlan& to) const;
  // Switches are between the full plans (their placements include DP).
  // Stop-and-migrate (Nitsum 3.2.2) from `from` to `to` before a step: the KvMigration of the
  // live sequences `seqs` (parallel/kv_migration.h, blocks of `block_tokens`), each rank's
  // transfers priced as send/recv messages (one per peer) plus packing and unpacking at memory
  // bandwidth; the busiest rank sets the time. Sets *bytes to the migration's total_bytes.
  double switch_s(const PricedPlan& from, const PricedPlan& to, const std::vector<SeqExtent>& seqs,
                  int block_tokens, int64_t* bytes = nullptr) const;

  // Seesaw (../shared/papers/004 §4.1, W5): at a transition from `from` to `to` every GPU loads
  // from host memory the weights of its `to` shards it did not hold under `from` (the shards'
  // row / column ranges intersected layer by layer, parallel/sharding.h), over its own host link
  // (GpuSpec::link_bw under a PCIe topology); the slowest GPU sets the time.
  double reshard_s(const PricedPlan& from, const PricedPlan& to) const;
  // Bytes `to` needs that GPU `rank` did not hold under `from` (elements x weight bytes).
  double reshard_bytes(const PricedPlan& from, const PricedPlan& to, int rank) const;
  // Moving `tokens` tokens of every layer's KV between the GPUs and the host (Seesaw's CPU tier:
  // each GPU its shard over its own host link, all at once).
  double kv_swap_s(int64_t tokens, int gpus) const;
  // Bytes of one token of the whole model's KV (every layer and KV head, K and V; MLA: the latent).
  double kv_bytes_per_token() const;
  // KV values one token stores per KV head and layer: 2 x head_dim (K and V), or MLA's latent
  // (kv_lora_rank + qk_rope_dim, shared by every query head; the model's one KV head).
  double kv_values_per_token_head() const;

  // Memory of one replica whose ranks hold the weights of every plan in `resident` (Shift: the
  // base and its shift config, Shift 3.3.2 eq. 1; weights=full: the whole model once) and the
  // KV of the largest placement among them. Throws loom::Error naming the per-GPU weights and
  // the HBM limit when the weights do not fit.
  MemoryPlan memory(const std::vector<PricedPlan>& resident) const;

 private:
  // price(), with `one_micro_batch` pricing `seqs` as a single pipeline micro-batch; `stage`
  // (optional) gets one stage slot's gemm, elementwise, attention and comm seconds and the ends'
  // gemm and elementwise seconds (embedding, final norm, classifier).
  StepCost price_step(const PricedPlan& plan, const std::vector<SeqWork>& seqs, bool one_micro_batch,
                      double stage[6]) const;

  double link_bw(int group) const;
  // Whether a group of `group` GPUs of one node talks over PCIe while its GPUs have NVLink (a
  // pairwise node beyond a pair, or NVLink GPUs on a PCIe node): Calibration::pcie prices it.
  bool crosses_pcie(int group) const;
  // collective_s before CostModelOptions::all_reduce_time_scale.
  double collective_base_s(Collective kind, double bytes, int group, int per_node) const;
  // One layer's attention on the busiest rank for `seqs` (kvp > 1: the rank's share of each
  // context, blocks of `block` tokens round-robin), without the kernel latency; the model's
  // attention shape (GQA or MLA) and the rank's query heads.
  double attention_core_s(const std::vector<SeqWork>& seqs, int q_heads, int kv_heads, int kvp, int block) const;
  // The Helix all-to-all of `bytes` (what one rank sends, its own chunk included) over `group`
  // KVP ranks, `per_node` of them on one node.
  double helix_all_to_all_s(double bytes, int group, int per_node) const;
  int kvp_per_node(const PricedPlan& pl) const;
  // Weight elements the busiest rank of `p` holds for one layer with a dense FFN and one with a
  // MoE FFN, and outside the layers.
  struct RankWeights {
    double attn = 0, dense_ffn = 0, moe_ffn = 0, other = 0;
  };
  RankWeights rank_weights(const PricedPlan& p) const;
  // One MoE FFN layer on the busiest rank of `p` for m tokens on that rank (gemm, elementwise,
  // communication).
  void moe_ffn(const PricedPlan& p, double m, double* gemm, double* elem, double* comm) const;

  ModelConfig model_;
  ModelShape shape_;
  NodeSpec node_;
  CostModelOptions opt_;
  Calibration cal_;
  std::map<CollectiveKey, CollectiveCurve> curves_;
  ModelArch arch_;
};

}  // namespace loom::sim
