#include "sim/cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "parallel/kv_migration.h"
#include "parallel/plan_set.h"
#include "parallel/sharding.h"
#include "sim/helix.h"
#include "sim/measured_ops.h"
#include "sim/sidp_cost.h"

namespace loom::sim {

namespace {
constexpr double kPcieBw = 32e9;  // PCIe Gen4 x16 per direction (GPU pairs without NVLink)

int ceil_div(int a, int b) { return (a + b - 1) / b; }
}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllToAll: return "all_to_all";
    case Collective::AllGather: return "all_gather";
    case Collective::SendRecv: return "send_recv";
    case Collective::Broadcast: return "broadcast";
    case Collective::Get: return "get";
  }
  return "?";
}

double CollectiveCurve::seconds(double bytes) const {
  LOOM_CHECK(!log_bytes.empty() && log_bytes.size() == log_seconds.size());
  const double lx = std::log(std::max(bytes, 1.0));
  const size_t n = log_bytes.size();
  if (n == 1 || lx <= log_bytes.front()) return std::exp(log_seconds.front());
  if (lx >= log_bytes.back()) {
    // Beyond the last knot: linear in bytes with the bandwidth of the last segment.
    const double x0 = std::exp(log_bytes[n - 2]), x1 = std::exp(log_bytes[n - 1]);
    const double t0 = std::exp(log_seconds[n - 2]), t1 = std::exp(log_seconds[n - 1]);
    const double slope = x1 > x0 ? std::max(0.0, (t1 - t0) / (x1 - x0)) : 0.0;
    return t1 + (std::exp(lx) - x1) * slope;
  }
  const size_t i = size_t(std::upper_bound(log_bytes.begin(), log_bytes.end(), lx) - log_bytes.begin());
  const double f = (lx - log_bytes[i - 1]) / (log_bytes[i] - log_bytes[i - 1]);
  return std::exp(log_seconds[i - 1] + f * (log_seconds[i] - log_seconds[i - 1]));
}

CostModel::CostModel(const ModelConfig& model, const NodeSpec& node, CostModelOptions options,
                     Calibration calibration)
    : model_(model), node_(node), opt_(options), cal_(std::move(calibration)) {
  model_.validate();
  shape_ = ModelShape::from(model_, opt_.weight_block);
  node_.gpu.flops(opt_.weight_dtype);  // throws when the GPU lacks the precision
  if (opt_.weight_bytes < 0) fail("weight bytes per element ", opt_.weight_bytes, " must be >= 0");
}

double CostModel::weight_bytes() const {
  return opt_.weight_bytes > 0 ? opt_.weight_bytes : sim_dtype_bytes(opt_.weight_dtype);
}

bool CostModel::pipeline_steady_state() const {
  if (opt_.pipeline == PipelineSchedule::Auto) return opt_.kernels == StepKernels::FusedGpu;
  return opt_.pipeline == PipelineSchedule::Steady;
}

double CostModel::qkv_proj_s(double m, double d, double q_cols, double kv_cols, double ws) const {
  const SimDType dt = opt_.weight_dtype;
  const double wb = weight_bytes(), ab = opt_.act_bytes;
  if (opt_.kernels == StepKernels::FusedGpu) return gemm_s(m, d, q_cols + 2 * kv_cols, dt, wb, ab, ws);
  if (cal_.measured && m > 0)
    if (const double t = cal_.measured->qkv_s(m, d, q_cols, kv_cols); t >= 0) return t;
  // Measured as the three calls together: the working set is all three matrices.
  if (ws <= 0) ws = d * (q_cols + 2 * kv_cols) * wb;
  return gemm_s(m, d, q_cols, dt, wb, ab, ws) + 2 * gemm_s(m, d, kv_cols, dt, wb, ab, ws);
}

double CostModel::gate_up_s(double m, double d, double ffn, double ws) const {
  const SimDType dt = opt_.weight_dtype;
  const double wb = weight_bytes(), ab = opt_.act_bytes;
  if (opt_.kernels == StepKernels::FusedGpu) return gemm_s(m, d, 2 * ffn, dt, wb, ab, ws);
  if (cal_.measured && m > 0)
    if (const double t = cal_.measured->gate_up_s(m, d, ffn); t >= 0) return t;
  if (ws <= 0) ws = 2 * d * ffn * wb;
  return 2 * gemm_s(m, d, ffn, dt, wb, ab, ws);
}

double CostModel::gemm_s(double m, double k, double n, SimDType compute, double weight_bytes, double act_bytes,
                         double working_set) const {
  if (m <= 0 || k <= 0 || n <= 0) return 0.0;
  if (cal_.measured && opt_.kernels == StepKernels::LoomCpu)
    if (const double t = cal_.measured->gemm_s(m, k, n); t >= 0) return t;
  const auto& g = cal_.gemm;
  // m_half carried to this GPU by its ridge point (GemmCalibration::ridge).
  const double m_half = g.ridge > 0 ? g.m_half * (node_.gpu.flops_bf16 / node_.gpu.hbm_bw) / g.ridge : g.m_half;
  double eff = g.eff_max * m / (m + m_half);
  if (compute != SimDType::BF16) eff *= cal_.low_precision_gemm_factor;
  const double compute_s = 2.0 * m * k * n / (node_.gpu.flops(compute) * eff);
  const double bytes = k * n * weight_bytes + m * k * act_bytes + m * n * act_bytes;
  double bw = node_.gpu.hbm_bw * g.mem_eff;
  if (g.cache_gain > 0 && node_.gpu.cache_bytes > 0) {
    const double c = node_.gpu.cache_bytes * g.cache_fraction;
    const double w = (working_set > 0 ? working_set : bytes) * std::max(1, opt_.concurrent_ranks);
    bw *= 1.0 + g.cache_gain / (1.0 + (w / c) * (w / c));
  }
  const double memory_s = bytes / bw;
  return std::max(compute_s, memory_s) + g.latency_s;
}

double CostModel::elementwise_s(Elementwise kind, double bytes) const {
  if (cal_.measured && opt_.kernels == StepKernels::LoomCpu && bytes > 0)
    if (const double t = cal_.measured->elementwise_s(int(kind), bytes); t >= 0) return t;
  const ElementwiseCalibration* c = &cal_.norm;
  switch (kind) {
    case Elementwise::Norm: c = &cal_.norm; break;
    case Elementwise::Add: c = &cal_.add; break;
    case Elementwise::Act: c = &cal_.act; break;
    case Elementwise::Rope: c = &cal_.rope; break;
    case Elementwise::Emb: c = &cal_.emb; break;
  }
  return c->latency_s + bytes / (node_.gpu.hbm_bw * c->bw_eff);
}

double CostModel::link_bw(int group) const {
  const double pcie = node_.gpu.pcie_bw > 0 ? node_.gpu.pcie_bw : kPcieBw;
  switch (node_.topology) {
    case Topology::NvSwitch: return node_.gpu.link_bw;
    case Topology::PairwiseNvlink: return group <= 2 ? node_.gpu.link_bw : pcie;
    case Topology::Pcie: return node_.gpu.nvlink ? pcie : node_.gpu.link_bw;
  }
  return node_.gpu.link_bw;
}

bool CostModel::crosses_pcie(int group) const {
  if (!node_.gpu.nvlink) return false;  // PCIe GPUs and CPUs: their link is the one measured
  return node_.topology == Topology::Pcie || (node_.topology == Topology::PairwiseNvlink && group > 2);
}

double CostModel::collective_s(Collective kind, double bytes, int group, int per_node) const {
  const double t = collective_base_s(kind, bytes, group, per_node);
  return kind == Collective::AllReduce ? t * opt_.all_reduce_time_scale : t;
}

double CostModel::collective_base_s(Collective kind, double bytes, int group, int per_node) const {
  if (group <= 1 || bytes <= 0) return 0.0;
  per_node = std::clamp(per_node, 1, group);
  if (!curves_.empty()) {
    auto it = curves_.find({kind, group, per_node});
    if (it != curves_.end()) return it->second.seconds(bytes);
    // A profile without one-sided reads: a get as the measured send/recv of its size.
    if (kind == Collective::Get) {
      it = curves_.find({Collective::SendRecv, group, per_node});
      if (it != curves_.end()) return it->second.seconds(bytes);
    }
  }
  // Bytes one rank puts on its busiest link, by algorithm.
  auto wire = [&](int n) {
    switch (kind) {
      case Collective::AllReduce: return 2.0 * (n - 1) / n * bytes;  // ring reduce-scatter + all-gather
      case Collective::AllToAll: return double(n - 1) / n * bytes;
      case Collective::AllGather: return double(n - 1) / n * bytes;
      case Collective::SendRecv: return bytes;
      case Collective::Broadcast: return bytes;  // pipelined ring / tree: the message once per link
      case Collective::Get: return bytes;
    }
    return bytes;
  };
  const bool pcie_path = crosses_pcie(per_node >= group ? group : per_node);
  const CollectiveCalibration& c = pcie_path                       ? cal_.pcie
                                   : kind == Collective::AllReduce ? cal_.all_reduce
                                   : kind == Collective::AllToAll  ? cal_.all_to_all
                                   : kind == Collective::AllGather ? cal_.all_gather
                                   : kind == Collective::Broadcast ? cal_.broadcast
                                   : kind == Collective::Get       ? cal_.get
                                                                   : cal_.send_recv;
  // Latency of a group of n: the fixed part plus one hop per rank beyond a pair, in units of the
  // link's time when the path is of the link kind the figures were fitted on (CollectiveCalibration).
  auto latency = [&](const CollectiveCalibration& k, int n) {
    const bool nvlink_path = node_.gpu.nvlink && !crosses_pcie(n);
    const double scale = k.link_bw_fit > 0 && k.nvlink_fit == nvlink_path ? k.link_bw_fit / link_bw(n) : 1.0;
    return (k.latency_s + k.hop_latency_s * (n - 2)) * scale;
  };
  if (per_node >= group) {
    double lat = latency(c, group);
    if (kind == Collective::AllReduce && opt_.custom_all_reduce && node_.topology == Topology::NvSwitch &&
        node_.gpu.nvlink && bytes <= cal_.custom_all_reduce_max_bytes)
      lat = cal_.custom_all_reduce_latency_s;
    return lat + wire(group) / (link_bw(group) * c.bw_eff);
  }
  // Crosses nodes: the NICs bound the ring (one NIC per GPU); the intra-node part adds its own.
  const double inter = latency(cal_.net, group) + wire(group) / (node_.net_bw * cal_.net.bw_eff);
  const double intra = per_node > 1 ? latency(c, per_node) + wire(per_node) / (link_bw(per_node) * c.bw_eff) : 0.0;
  return inter + intra;
}

CostModel::AttentionWork CostModel::attention_work(const std::vector<SeqWork>& seqs, int q_heads, int kv_heads,
                                                   int head_dim) const {
  const double hd = head_dim > 0 ? head_dim : model_.head_dim;
  AttentionWork w;
  for (const auto& s : seqs) {
    const double q = s.new_tokens, c = s.context_len;
    // Causal (query, key) pairs: earlier context fully, the new block as a triangle.
    const double pairs = q * (c - q) + q * (q + 1) / 2;
    const double flops = 4.0 * hd * q_heads * pairs;
    // K and V of the context read; Q, the new K and V, and the output written / read.
    const double bytes = c * 2.0 * kv_heads * hd * opt_.kv_bytes + q * (2.0 * q_heads + 2.0 * kv_heads) * hd * opt_.act_bytes;
    if (s.new_tokens > 1) {
      w.prefill_flops += flops;
      w.prefill_bytes += bytes;
      w.prefill = true;
    } else {
      w.decode_flops += flops;
      w.decode_bytes += bytes;
      w.decode = true;
    }
  }
  return w;
}

double CostModel::attention_s(const std::vector<SeqWork>& seqs, int q_heads, int kv_heads, int head_dim) const {
  if (cal_.measured && opt_.kernels == StepKernels::LoomCpu && !seqs.empty()) {
    std::vector<MeasuredOps::Work> w;
    w.reserve(seqs.size());
    for (const SeqWork& s : seqs) w.push_back({s.new_tokens, s.context_len});
    const double t = cal_.measured->attention_s(w, q_heads, kv_heads, head_dim > 0 ? head_dim : model_.head_dim);
    if (t >= 0) return t;
  }
  const AttentionWork w = attention_work(seqs, q_heads, kv_heads, head_dim);
  const double peak = node_.gpu.flops(SimDType::BF16) * cal_.attn_compute_eff;
  const double bw = node_.gpu.hbm_bw * cal_.attn_mem_eff;
  double t = 0;
  if (w.prefill) t += std::max(w.prefill_flops / peak, w.prefill_bytes / bw) + cal_.attn_latency_s;
  if (w.decode) t += std::max(w.decode_flops / peak, w.decode_bytes / bw) + cal_.attn_latency_s;
  return t;
}

const char* plan_variant_name(PlanVariant v) {
  switch (v) {
    case PlanVariant::AsPlanned: return "plan";
    case PlanVariant::MedhaKvp: return "medha";
    case PlanVariant::DpAttentionEp: return "dp-attention-ep";
  }
  return "?";
}

void CostModel::set_arch(const ModelArch& a) {
  if (a.mla && (model_.n_kv_heads != 1 || model_.head_dim != a.mla->v_head_dim))
    fail("MLA model: the ModelConfig must carry the shared latent as one KV head of v_head_dim (got ",
         model_.n_kv_heads, " KV heads of ", model_.head_dim, ", v_head_dim ", a.mla->v_head_dim, ")");
  if (a.moe) {
    const MoeShape& e = *a.moe;
    if (e.n_routed < 1 || e.n_active < 1 || e.n_active > e.n_routed || e.expert_ffn < 1 || e.n_shared < 0 ||
        e.first_dense < 0 || e.first_dense > model_.n_layers)
      fail("MoE model: ", e.n_active, " active of ", e.n_routed, " routed experts of width ", e.expert_ffn, ", ",
           e.n_shared, " shared, first ", e.first_dense, " of ", model_.n_layers, " layers dense: inconsistent");
  }
  arch_ = a;
}

double CostModel::attention_core_s(const std::vector<SeqWork>& seqs, int q_heads, int kv_heads, int kvp,
                                   int block) const {
  // Per (query head, key): scores over qk values and outputs of v values; per cached token,
  // kv_vals values read. GQA: K and V of head_dim for each of the rank's KV heads. MLA: one
  // latent of kv_lora_rank + rope values for every head, scores over all of it, outputs over the
  // latent part.
  double qk = model_.head_dim, v = model_.head_dim, kv_vals = 2.0 * kv_heads * model_.head_dim;
  if (arch_.mla) {
    qk = arch_.mla->cached_per_token();
    v = arch_.mla->kv_lora_rank;
    kv_vals = arch_.mla->cached_per_token();
  }
  double pf = 0, pb = 0, df = 0, db = 0;
  for (const auto& s : seqs) {
    const double q = s.new_tokens, c = s.context_len;
    double keys = c;
    if (kvp > 1) {
      // Helix 2.3 (positions by blocks, PAPERS-NOTES ambiguity 2): block b of a sequence on KVP
      // rank b % kvp; the busiest rank holds ceil(blocks / kvp) of them.
      const double blocks = std::ceil(c / block);
      keys = std::min(c, std::ceil(blocks / kvp) * block);
    }
    const double pairs = (q * (c - q) + q * (q + 1) / 2) * (c > 0 ? keys / c : 0.0);
    const double flops = 2.0 * (qk + v) * q_heads * pairs;
    const double bytes = keys * kv_vals * opt_.kv_bytes + q * (q_heads * (qk + v) + kv_vals) * opt_.act_bytes;
    (s.new_tokens > 1 ? pf : df) += flops;
    (s.new_tokens > 1 ? pb : db) += bytes;
  }
  // MLA's absorbed attention is compute-heavy (128 heads on one latent): priced at the
  // deployment's arithmetic precision (the Helix paper runs "all ... arithmetic operations" in
  // FP4, 3.1); GQA attention, memory-bound in decode, at the BF16 peak as attention_s.
  const double peak = node_.gpu.flops(arch_.mla ? opt_.weight_dtype : SimDType::BF16) * cal_.attn_compute_eff;
  const double bw = node_.gpu.hbm_bw * cal_.attn_mem_eff;
  return std::max(pf / peak, pb / bw) + std::max(df / peak, db / bw);
}

double CostModel::helix_all_to_all_s(double bytes, int group, int per_node) const {
  if (group <= 1 || bytes <= 0) return 0.0;
  // ASSUMPTION: inside an NVSwitch domain the Helix all-to-all is one kernel writing to peer
  // memory (as TensorRT-LLM's NVLink all-to-all, CUDA-graph captured), so small exchanges pay the
  // custom all-reduce's latency rather than a launch-bound NCCL collective's; the bandwidth term
  // stays NCCL's all-to-all efficiency.
  if (curves_.empty() && opt_.custom_all_reduce && node_.topology == Topology::NvSwitch && node_.gpu.nvlink &&
      per_node >= group && bytes <= cal_.custom_all_reduce_max_bytes)
    return cal_.custom_all_reduce_latency_s + double(group - 1) / group * bytes / (link_bw(group) * cal_.all_to_all.bw_eff);
  return collective_s(Collective::AllToAll, bytes, group, per_node);
}

int CostModel::kvp_per_node(const PricedPlan& pl) const {
  // KVP ranks are the outer index (stride TPA): on one node when KVP x TPA fits.
  const int per_node = node_.gpus_per_node;
  return std::max(1, std::min(pl.kvp, per_node / std::min(pl.plan.tp, per_node)));
}

double CostModel::helix_exchange_s(const PricedPlan& pl, double tokens) const {
  if (pl.kvp <= 1 || tokens <= 0) return 0.0;
  const double per_token = pl.q_heads * (double(model_.head_dim) * opt_.act_bytes + 4.0);
  return helix_all_to_all_s(tokens * per_token, pl.kvp, kvp_per_node(pl));
}

void CostModel::moe_ffn(const PricedPlan& p, double m, double* gemm_out, double* elem_out, double* comm_out) const {
  const MoeShape& e = *arch_.moe;
  const SimDType dt = opt_.weight_dtype;
  const double wb = weight_bytes(), ab = opt_.act_bytes, ws = p.weight_bytes;
  const double d = model_.d_model, f = e.expert_ffn, k = e.n_active, E = e.n_routed;
  const int per_node = node_.gpus_per_node;
  // ASSUMPTION (the simple MoE model): routing is uniform and independent per token, so t tokens
  // touch E_l * (1 - (1 - k/E)^t) distinct experts of the E_l a rank holds, in expectation, and
  // only those experts' weights are read; their tokens are spread evenly (no hot expert).
  auto active = [&](double experts, double tokens) { return experts * (1.0 - std::pow(1.0 - k / E, tokens)); };
  // Experts of one rank as one grouped GEMM: each expert's [tokens, kk] x [kk, nn], one launch.
  auto grouped = [&](double experts, double tokens, double kk, double nn) {
    if (experts <= 0 || tokens <= 0) return 0.0;
    const double one = gemm_s(tokens / experts, kk, nn, dt, wb, ab, ws) - cal_.gemm.latency_s;
    return experts * one + cal_.gemm.latency_s;
  };
  auto expert_ffn = [&](double experts, double tokens, double width) {
    return grouped(experts, tokens, d, 2 * width) + grouped(experts, tokens, width, d);
  };
  const double router = gemm_s(m, d, E, dt, wb, ab, ws);
  if (p.variant == PlanVariant::DpAttentionEp) {
    // Each rank routes its own m tokens; a dispatch all-to-all sends each token to the ranks of
    // its k experts and a combine all-to-all brings the outputs back (DeepSeek-V3's EP); the
    // shared experts run on the rank's own tokens.
    const int ep = p.ep;
    const double tokens_in = m * k;  // arriving at a rank (balanced)
    *gemm_out = router + expert_ffn(active(E / ep, m * ep), tokens_in, f) +
                (e.n_shared > 0 ? gate_up_s(m, d, e.n_shared * f, ws) + gemm_s(m, e.n_shared * f, d, dt, wb, ab, ws) : 0.0);
    *elem_out = elementwise_s(Elementwise::Act, (tokens_in + m * e.n_shared) * f * ab * 3) +
                elementwise_s(Elementwise::Add, m * k * d * ab * 2);
    *comm_out = 2 * collective_s(Collective::AllToAll, m * k * d * ab, ep, std::min(ep, per_node));
    return;
  }
  // Every rank of the FFN group holds the step's m tokens [m, H] (after W_O's all-reduce): Helix
  // 2.2's TPF x EP grid of the G ranks. An EP group (TPF ranks) holds E/EP experts, each cut in
  // TPF column shards, and picks its tokens locally; the shared experts are cut over all G ranks;
  // then an all-reduce inside the EP group (TPF) and an all-gather across EP groups, and a local
  // sum (H8). EP = 1 is plain TP with one all-reduce. Of the grids whose EP divides E, the
  // cheapest for this step.
  const int G = p.tp_group;
  double best = -1;
  for (int ep = 1; ep <= G; ++ep) {
    if (G % ep != 0 || e.n_routed % ep != 0) continue;
    const int tpf = G / ep;
    const double w = f / tpf, sw = e.n_shared * f / G;
    const double g = router + expert_ffn(active(E / ep, m), m * k / ep, w) +
                     (e.n_shared > 0 ? gate_up_s(m, d, sw, ws) + gemm_s(m, sw, d, dt, wb, ab, ws) : 0.0);
    const double el = elementwise_s(Elementwise::Act, (m * k / ep + m) * w * ab * 3) +
                      (ep > 1 ? elementwise_s(Elementwise::Add, ep * m * d * ab) : 0.0);
    double c = 0;
    if (ep == 1) {
      c = collective_s(Collective::AllReduce, m * d * ab, G, std::min(G, per_node));
    } else {
      if (tpf > 1) c += collective_s(Collective::AllReduce, m * d * ab, tpf, std::min(tpf, per_node));
      c += collective_s(Collective::AllGather, ep * m * d * ab, ep, std::min(ep, per_node));
    }
    if (best < 0 || g + el + c < best) {
      best = g + el + c;
      *gemm_out = g;
      *elem_out = el;
      *comm_out = c;
    }
  }
}

PricedPlan CostModel::prepare(const Plan& plan_in, PlanVariant variant) const {
  const Plan full = plan_in.normalized();
  Plan plan = full;
  plan.dp = 1;
  std::string name = full.to_string();
  // SiDP (weights=owner): DP replicas of one rank each, as the engine runs them; priced by
  // price_sidp (sim/sidp_cost.h) over the replica's plain-DP sizes below.
  if (plan.weights == WeightSource::FetchFromOwner) check_executable(full);
  validate(full, shape_);  // the engine's rule (parallel/plan.h), naming the sizes
  if (variant == PlanVariant::MedhaKvp && !plan.helix())
    fail("plan ", name, ": Medha-style KVP needs a kvp=K,tpa=A plan");
  if (variant == PlanVariant::DpAttentionEp && (!arch_.moe || full.dp < 2 || plan.size() != 1))
    fail("plan ", name, ": data-parallel attention with expert-parallel FFNs needs a MoE model and a dp=N plan");
  if (variant == PlanVariant::DpAttentionEp && arch_.moe->n_routed % full.dp != 0)
    fail("plan ", name, ": ", arch_.moe->n_routed, " routed experts do not split over EP=", full.dp);
  if (variant != PlanVariant::AsPlanned) name += cat(" [", plan_variant_name(variant), "]");
  PricedPlan p;
  p.full = full;
  p.plan = plan;
  p.name = name;
  p.variant = variant;
  p.dp = full.dp;
  p.world_ranks = full.size();
  p.ranks = plan.size();
  p.sp = plan.shift ? 1 : plan.sp;
  p.tp_group = plan.ffn_degree();
  p.pp = plan.pp;
  p.kvp = plan.kvp;
  p.kv_block = plan.helix() ? plan.kv_block : 1;
  p.hopb = plan.helix() && plan.hopb;
  if (variant == PlanVariant::DpAttentionEp) {
    p.ep = full.dp;
    // The EP group spans the replicas: all of them on one node.
    if (p.ep > node_.gpus_per_node)
      fail("plan ", name, " spreads the experts over ", p.ep, " GPUs; a ", node_.name(), " node has ",
           node_.gpus_per_node);
  }
  // A replica may span nodes only through its pipeline stages (the TP / SP groups stay inside
  // one node).
  const int per_stage = p.ranks / p.pp;
  if (per_stage > node_.gpus_per_node)
    fail("plan ", name, " needs ", per_stage, " GPUs per pipeline stage; a ", node_.name(), " node has ",
         node_.gpus_per_node);
  const int first_dense = arch_.moe ? arch_.moe->first_dense : model_.n_layers;
  int stage_dense = -1;
  for (int r = 0; r < p.ranks; ++r) {
    const RankLayout l = rank_layout(plan, shape_, r);
    p.proj_q_heads = std::max(p.proj_q_heads, int(l.proj_q_heads.size()));
    p.proj_kv_heads = std::max(p.proj_kv_heads, int(l.proj_kv_heads.size()));
    p.q_heads = std::max(p.q_heads, int(l.q_heads.size()));
    p.kv_heads = std::max(p.kv_heads, int(l.kv_heads.size()));
    p.out_heads = std::max(p.out_heads, int(l.out_heads.size()));
    p.ffn = std::max(p.ffn, l.ffn.size());
    // The busiest stage: the most layers, and of those the fewest dense ones (MoE layers cost
    // more).
    const int layers = int(l.layers.size());
    const int dense = int(std::max<int64_t>(0, std::min<int64_t>(l.layers.end, first_dense) - l.layers.begin));
    if (layers > p.max_layers || (layers == p.max_layers && dense < stage_dense)) {
      p.max_layers = layers;
      stage_dense = dense;
    }
    // Its layer shards and the embedding and classifier rows it reads (vocabulary-parallel on
    // GPU engines, the whole classifier on loom's sampling rank).
    const double classifier = double(model_.vocab_size) * model_.d_model /
                              (opt_.kernels == StepKernels::FusedGpu ? p.tp_group : 1);
    p.weight_bytes = std::max(p.weight_bytes, (double(weight_shards(plan, shape_, r).elems()) + classifier) * weight_bytes());
  }
  p.dense_layers = std::max(0, stage_dense);
  if (variant == PlanVariant::MedhaKvp) {
    // W_O and the FFN on one TP(A) group: A-way shards.
    p.tp_group = plan.tp;
    p.out_heads = model_.n_heads / plan.tp;
    p.ffn = (int64_t(model_.ffn_dim) + plan.tp - 1) / plan.tp;
  }
  if (!arch_.plain() || variant != PlanVariant::AsPlanned) {
    // The working set from the MLA / MoE shapes (weight_shards knows only the dense GQA layer).
    const RankWeights w = rank_weights(p);
    p.weight_bytes = (w.attn * p.max_layers + w.dense_ffn * p.dense_layers +
                      w.moe_ffn * (p.max_layers - p.dense_layers) + w.other) * weight_bytes();
  }
  return p;
}

CostModel::RankWeights CostModel::rank_weights(const PricedPlan& p) const {
  RankWeights w;
  const double d = model_.d_model, H = model_.n_heads, hd = model_.head_dim;
  const double hq = p.proj_q_heads, ho = p.out_heads;
  if (arch_.mla) {
    const MlaShape& m = *arch_.mla;
    // W_DQ and W_DKV whole on every rank; W_UQ and W_UK for the rank's query heads; W_UV for the
    // heads it attends (Helix: before the all-to-all, by TPA) and W_O for its output heads (by N).
    w.attn = d * m.q_lora_rank + d * m.cached_per_token() + m.q_lora_rank * hq * (m.qk_nope_dim + m.qk_rope_dim) +
             double(m.kv_lora_rank) * hq * m.qk_nope_dim + double(m.kv_lora_rank) * p.q_heads * m.v_head_dim +
             ho * m.v_head_dim * d;
  } else {
    w.attn = d * hq * hd + 2.0 * d * p.proj_kv_heads * hd + ho * hd * d;
  }
  const bool dpep = p.variant == PlanVariant::DpAttentionEp;
  const double G = dpep ? 1.0 : double(p.tp_group);  // FFN group (DP-attention: dense replicated)
  w.dense_ffn = dpep ? 3.0 * d * model_.ffn_dim : 3.0 * d * double(p.ffn);
  if (arch_.moe) {
    const MoeShape& e = *arch_.moe;
    const double expert = 3.0 * d * e.expert_ffn;
    const double routed_ranks = dpep ? double(p.ep) : G;  // the routed experts split over these
    const double shared_ranks = dpep ? 1.0 : G;           // DP-attention: shared experts replicated
    w.moe_ffn = e.n_routed * expert / routed_ranks + e.n_shared * expert / shared_ranks + d * e.n_routed;
  }
  const bool vocab_split = opt_.kernels == StepKernels::FusedGpu;
  w.other = 2.0 * model_.vocab_size * d / (vocab_split ? double(p.tp_group) * p.pp : 1.0);
  (void)H;
  return w;
}

StepCost CostModel::price(const PricedPlan& pl, const std::vector<SeqWork>& seqs) const {
  return price_step(pl, seqs, false, nullptr);
}

StepCost CostModel::price_step(const PricedPlan& pl, const std::vector<SeqWork>& seqs, bool one_micro_batch,
                               double stage[6]) const {
  // SiDP: one replica's work (replica 0's) is a step of the group in which the others are idle.
  if (pl.full.weights == WeightSource::FetchFromOwner) return price_sidp(*this, pl, {seqs});
  StepCost cost;
  cost.plan = pl.name;
  int n_seqs = 0, n_all = 0;
  for (const auto& w : seqs) ++n_seqs, n_all += w.new_tokens;
  cost.overhead_s = cal_.step_overhead_s + cal_.step_overhead_per_seq_s * n_seqs +
                    cal_.step_overhead_per_token_s * n_all;
  if (seqs.empty()) {
    cost.total_s = cost.overhead_s;
    return cost;
  }
  const int t = pl.tp_group, s = pl.sp, p = pl.pp;
  const double d = model_.d_model, hd = model_.head_dim, V = model_.vocab_size;
  const double wb = weight_bytes(), ab = opt_.act_bytes;
  const SimDType dt = opt_.weight_dtype;
  const int per_node = node_.gpus_per_node;
  const bool cpu = opt_.kernels == StepKernels::LoomCpu;

  // Pipeline micro-batches, priced at the largest one. Fill and drain (loom's CPU engine,
  // rank_forward.cpp): the step's sequences cut as the engine cuts them (pipeline_micro_batches:
  // min(p, n) contiguous groups of whole sequences). Steady state (vLLM's virtual engines, Seesaw's
  // workers, §5.1): p micro-batches of about 1/p of the step's tokens; a prefill chunk may be cut
  // across micro-batches (a later piece of a prompt attends to the earlier ones, which passed every
  // stage before it: one micro-batch behind in the same pipeline), a decode row may not.
  const bool steady = p > 1 && pipeline_steady_state();
  const int mb = steady ? p : one_micro_batch ? 1 : std::max(1, std::min<int>(p, int(seqs.size())));
  std::vector<SeqWork> group;
  // Fill and drain: every micro-batch, and which one `group` is (the busiest by tokens).
  std::vector<std::vector<SeqWork>> micro;
  size_t busiest = 0;
  if (steady) {
    int total = 0;
    for (const auto& w : seqs) total += w.new_tokens;
    const int target = ceil_div(total, p);
    // The busiest micro-batch: the most tokens, and of those the most attention (query, key) pairs.
    int acc = 0, best = -1;
    double best_pairs = -1;
    std::vector<SeqWork> cur;
    auto close = [&] {
      double pairs = 0;
      for (const auto& w : cur) pairs += double(w.new_tokens) * (w.context_len - (w.new_tokens - 1) / 2.0);
      if (acc > best || (acc == best && pairs > best_pairs)) best = acc, best_pairs = pairs, group = cur;
      cur.clear();
      acc = 0;
    };
    for (const auto& w : seqs) {
      if (w.new_tokens <= 1) {
        cur.push_back(w);
        acc += w.new_tokens;
        if (acc >= target) close();
        continue;
      }
      int done = 0;  // of this chunk's new tokens
      while (done < w.new_tokens) {
        const int piece = std::min(w.new_tokens - done, std::max(1, target - acc));
        done += piece;
        cur.push_back(SeqWork{piece, w.context_len - (w.new_tokens - done), w.sample && done == w.new_tokens});
        acc += piece;
        if (acc >= target) close();
      }
    }
    if (!cur.empty()) close();
  } else {
    // engine/rank_forward.cpp pipeline_micro_batches: k = min(p, n) contiguous parts of whole
    // sequences, cut i ending once the running token count reaches i/k of the total (each part at
    // least one sequence, enough left for the parts after it).
    const int64_t n_seq = int64_t(seqs.size()), k = mb;
    int64_t total = 0;
    for (const auto& w : seqs) total += w.new_tokens;
    int64_t begin = 0, acc = 0, best = -1;
    for (int64_t i = 1; i <= k; ++i) {
      int64_t end = begin;
      if (i == k) {
        end = n_seq;
      } else {
        do acc += seqs[size_t(end++)].new_tokens;
        while (end < n_seq - (k - i) && acc * k < total * i);
      }
      micro.emplace_back(seqs.begin() + begin, seqs.begin() + end);
      int64_t tokens = 0;
      for (const auto& w : micro.back()) tokens += w.new_tokens;
      if (tokens > best) best = tokens, busiest = micro.size() - 1;
      begin = end;
    }
    group = micro[busiest];
  }
  int n = 0, sampled = 0;
  for (const auto& w : group) {
    n += w.new_tokens;
    sampled += w.sample ? 1 : 0;
  }
  if (steady) {
    // The classifier runs on the last stage for every micro-batch's sampled rows: priced below p
    // times, each for an even share of the step's (the busiest micro-batch by tokens may be a
    // prompt piece that samples nothing).
    int all = 0;
    for (const auto& w : seqs) all += w.sample ? 1 : 0;
    sampled = ceil_div(all, p);
  }
  // Ulysses pads the step to a multiple of sp (Shift 3.2.1) and gives each rank n/sp tokens.
  const double m = s > 1 ? double(ceil_div(n, s)) : double(n);

  // One layer on one GPU (the busiest rank's shard sizes, from rank_layout).
  const bool dpep = pl.variant == PlanVariant::DpAttentionEp;
  const bool medha = pl.variant == PlanVariant::MedhaKvp;
  const double q_cols = pl.proj_q_heads * hd, kv_cols = pl.proj_kv_heads * hd, F = double(pl.ffn);
  const double ws = pl.weight_bytes;  // every weight of the rank comes back once per step
  double gemm = 0, elem = 0, comm = 0, attn = 0;
  if (arch_.mla) {
    // MLA, absorbed for decode (DeepSeek-V2 3.1.1 / V3): W_DQ and W_DKV (fused, whole on every
    // rank), W_UQ and W_UK folded into the query for the rank's query heads, W_UV on the latent
    // output of the heads it attends (before any exchange: Helix merges the per-head outputs of
    // v_head_dim values, 2.2's "B x H/N" with H = Q x Hsz, Appendix A) and W_O for its output
    // heads; two latent norms, RoPE on the rope part.
    const MlaShape& a = *arch_.mla;
    const double hq = pl.proj_q_heads, ho = pl.out_heads;
    gemm += gemm_s(m, d, a.q_lora_rank + a.cached_per_token(), dt, wb, ab, ws);
    gemm += gemm_s(m, a.q_lora_rank, hq * (a.qk_nope_dim + a.qk_rope_dim), dt, wb, ab, ws);
    gemm += gemm_s(m, a.qk_nope_dim, hq * a.kv_lora_rank, dt, wb, ab, ws);
    gemm += gemm_s(m, a.kv_lora_rank, double(pl.q_heads) * a.v_head_dim, dt, wb, ab, ws);
    gemm += gemm_s(m, ho * a.v_head_dim, d, dt, wb, ab, ws);
    elem += 2 * elementwise_s(Elementwise::Norm, m * (a.q_lora_rank + a.kv_lora_rank) * ab * 2);
    elem += elementwise_s(Elementwise::Rope, m * (hq + 1) * a.qk_rope_dim * ab * 2);
  } else {
    gemm += qkv_proj_s(m, d, q_cols, kv_cols, ws);            // QKV projection
    gemm += gemm_s(m, pl.out_heads * hd, d, dt, wb, ab, ws);  // O projection
    elem += elementwise_s(Elementwise::Rope, m * (q_cols + kv_cols) * ab * 2);
  }
  elem += 2 * elementwise_s(Elementwise::Norm, m * d * ab * 2);
  elem += 2 * elementwise_s(Elementwise::Add, m * d * ab * 3);
  const int tp_node = std::min(t, per_node);
  if (pl.kvp > 1) {
    // Helix 2.1.1: local attention over the rank's KV blocks, then one all-to-all over the KVP
    // group of the partial outputs of its H/TPA heads (head_dim values each: for MLA the
    // v_head_dim outputs after W_UV, which commutes with the merge's per-(token, head) weights;
    // 2.2: each GPU sends "B x H/(KVP x TPA)" to every other, H = Q x Hsz) with one f32 LSE per
    // (token, head); the rank keeps and receives the H/N heads of its TP(N) shard and merges the
    // KVP partials (LSE rescale and sum). HOP-B (2.1.3) cuts the step's sequences into chunks (at
    // most hopb_max_chunks), each chunk launching its own attention kernel, all-to-all and merge
    // (engine/stage_helix.cpp), each with its fixed cost; the all-to-all of a chunk runs under the
    // next chunk's attention; of the chunk counts tried (1..8, then powers of two, then one per
    // sequence) the cheapest span. hopb=off (CostModelOptions::hopb_off): Figure 3's drawing, the
    // on schedule's chunks strictly one after another, or loom's engine's one chunk. Medha: one
    // chunk, the partials gathered onto the TP(A) group, all exposed.
    const int k = pl.kvp;
    const int kvp_node = kvp_per_node(pl);
    const int nseq = int(group.size());
    const bool off_as_fig3 =
        !pl.hopb && !medha &&
        (opt_.hopb_off == CostModelOptions::HopbOff::Figure3 ||
         (opt_.hopb_off == CostModelOptions::HopbOff::Auto && opt_.kernels == StepKernels::FusedGpu));
    const bool chunked = (pl.hopb || off_as_fig3) && !medha;
    const int max_chunks = chunked ? std::max(1, std::min(nseq, opt_.hopb_max_chunks)) : 1;
    // Per request (CostModelOptions::hopb_per_request): the one count of one sequence a chunk.
    const int first_count = chunked && opt_.hopb_per_request ? std::max(1, nseq) : 1;
    // The merge reads the k partials (head_dim values and an f32 LSE each) of the rank's H/N heads
    // (Medha: the TP(A) group's H/A heads) per token and writes one: priced as an element-wise
    // kernel of the activation's kind (an exp and a multiply-add per element).
    const double merge_heads = medha ? double(pl.q_heads) : double(pl.out_heads);
    double best_on = 0;
    std::vector<double> ca, cc, cm, best_a, best_c, best_m;
    // 1, 2, ..., 8, then doubling, ending on max_chunks.
    auto next_count = [&](int c) { return c < 8 || c >= max_chunks ? c + 1 : std::min(2 * c, max_chunks); };
    for (int c = first_count; c <= std::max(max_chunks, first_count); c = next_count(c)) {
      ca.clear(), cc.clear(), cm.clear();
      for (int i = 0; i < c; ++i) {
        const std::vector<SeqWork> sub(group.begin() + size_t(nseq) * i / c, group.begin() + size_t(nseq) * (i + 1) / c);
        double tokens = 0;
        for (const auto& w : sub) tokens += w.new_tokens;
        ca.push_back(attention_core_s(sub, pl.q_heads, pl.kv_heads, k, pl.kv_block) + cal_.attn_latency_s);
        cc.push_back(medha ? collective_s(Collective::AllGather, k * tokens * pl.q_heads * (hd * ab + 4.0), k, kvp_node)
                           : helix_exchange_s(pl, tokens));
        cm.push_back(elementwise_s(Elementwise::Act, tokens * merge_heads * (k * (hd * ab + 4.0) + hd * ab)));
      }
      const double on = hopb_span(ca, cc, cm, !medha);
      if (c == first_count || on < best_on) best_on = on, best_a = ca, best_c = cc, best_m = cm;
    }
    const double span = pl.hopb && !medha ? best_on : hopb_span(best_a, best_c, best_m, false);
    double attn_sum = 0, merge_sum = 0;
    for (double x : best_a) attn_sum += x;
    for (double x : best_m) merge_sum += x;
    attn = attn_sum;
    elem += merge_sum;
    comm += span - attn_sum - merge_sum;
    // Medha: the FFN group's [B, H] result goes back to every KVP group for the next layer.
    if (medha) comm += collective_s(Collective::Broadcast, m * d * ab, k, kvp_node);
  } else if (arch_.mla) {
    attn = attention_core_s(group, pl.q_heads, pl.kv_heads, 1, 1) + cal_.attn_latency_s;
  } else {
    attn = attention_s(group, pl.q_heads, pl.kv_heads);
  }
  // W_O's all-reduce (TP, Helix TP(N), Medha TP(A)); DP attention has none.
  if (t > 1 && !dpep) comm += collective_s(Collective::AllReduce, m * d * ab, t, tp_node);
  if (s > 1) {
    // Shift Algorithm 1 lines 4 and 6: tokens -> heads and back, over the SP group (ranks with
    // equal tp index, stride tp: on one node when tp*sp fits).
    const double qkv_send = double(s) * m * (pl.q_heads + 2.0 * pl.kv_heads) * hd * ab;
    const double o_send = double(s) * m * pl.q_heads * hd * ab;
    const int tp = pl.plan.tp;
    const int sp_node = std::max(1, std::min(s, per_node / std::min(tp, per_node)));
    comm += collective_s(Collective::AllToAll, qkv_send, s, sp_node);
    comm += collective_s(Collective::AllToAll, o_send, s, sp_node);
    // The SP ranks meet there: what waiting for the slowest adds to the operators' times, as
    // `loom profile` measured it for these shards (its ulysses_wait column; TP shards charge
    // their meetings to their operators instead).
    if (cpu && cal_.measured)
      if (const double w = cal_.measured->ulysses_wait_s(m, d, F); w > 0) comm += w;
  }
  // The dense FFN (every layer of a dense model; the first layers of a MoE model): SwiGLU over
  // the rank's columns and its all-reduce (DP attention: whole and replicated, no communication).
  const double Fd = dpep ? double(model_.ffn_dim) : F;
  double dense_gemm = gate_up_s(m, d, Fd, ws) + gemm_s(m, Fd, d, dt, wb, ab, ws);
  double dense_elem = elementwise_s(Elementwise::Act, m * Fd * ab * 3);
  double dense_comm = t > 1 && !dpep ? collective_s(Collective::AllReduce, m * d * ab, t, tp_node) : 0.0;
  double moe_gemm = 0, moe_elem = 0, moe_comm = 0;
  if (arch_.moe) moe_ffn(pl, m, &moe_gemm, &moe_elem, &moe_comm);
  const int layers = pl.max_layers, dense_l = pl.dense_layers, moe_l = layers - dense_l;
  double stage_gemm = gemm * layers + dense_gemm * dense_l + moe_gemm * moe_l,
         stage_elem = elem * layers + dense_elem * dense_l + moe_elem * moe_l, stage_attn = attn * layers,
         stage_comm = comm * layers + dense_comm * dense_l + moe_comm * moe_l;

  // Embedding lookup, final norm, LM head on the sampled rows, split across stages as first /
  // last; SP gathers the sampled hidden states (Algorithm 1 line 13). FusedGpu: the norm over
  // every token and the vocabulary split over tp; LoomCpu: the norm and the whole classifier
  // for the sampled rows on the sampling rank.
  const double sampled_rank = s > 1 ? std::ceil(double(sampled) / s) : double(sampled);
  const double norm_rows = cpu ? double(sampled) : m;
  double ends = elementwise_s(Elementwise::Emb, m * d * ab * 2) +
                (norm_rows > 0 ? elementwise_s(Elementwise::Norm, norm_rows * d * ab * 2) : 0.0);
  double ends_gemm = 0.0;
  if (sampled > 0) {
    ends_gemm = cpu ? gemm_s(sampled, d, V, dt, wb, ab, ws) : gemm_s(sampled_rank, d, V / t, dt, wb, ab, ws);
    // The classifier's shape is not among the measured operators: scaled from the measured
    // GEMMs of the same d (MeasuredOps::scaled_gemm_s).
    if (cpu && cal_.measured && cal_.measured->gemm_s(sampled, d, V) < 0)
      if (const double c = cal_.measured->scaled_gemm_s(sampled, d, V); c >= 0) ends_gemm = c;
  }
  double ends_comm = s > 1 && sampled > 0 ? collective_s(Collective::AllGather, sampled * d * ab, s, s) : 0.0;

  // Pipeline. Fill and drain: mb micro-batches through p stages within the step, mb + p - 1
  // stage slots. Steady state: the pipeline stays full from one step to the next, so the step is
  // the round trip of a micro-batch, p stage slots (each stage runs the p micro-batches once; a
  // decode row's next token needs this one through every stage, so no step is shorter), with the
  // embedding on the first and the classifier on the last stage once per micro-batch; the fill of
  // p - 1 slots is paid when the pipeline starts (StepCost::pipeline_fill_s, added by the
  // simulator at a plan switch).
  // Fill and drain over stages of equal work: micro-batch i takes S_i per stage, and the step
  // takes sum_i S_i + (p - 1) max_i S_i (the busiest passes every stage; each other one adds its
  // own slot on the last stage, where it also runs its classifier). Uneven micro-batches (a
  // prefill chunk beside a few decode rows) make this well below (mb + p - 1) max_i S_i.
  double slots = p > 1 ? (steady ? double(p) : double(mb + p - 1)) : 1.0;
  double others[6] = {0, 0, 0, 0, 0, 0};
  if (!steady && micro.size() > 1) {
    slots = double(p);
    for (size_t i = 0; i < micro.size(); ++i) {
      if (i == busiest) continue;
      double q[6];
      price_step(pl, micro[i], true, q);
      for (int j = 0; j < 6; ++j) others[j] += q[j];
    }
  }
  const int stage_ranks = pl.ranks / p;
  const double pp_send =
      p > 1 ? (p - 1) * collective_s(Collective::SendRecv, m * d * ab, 2, per_node >= 2 * stage_ranks ? 2 : 1) : 0.0;
  // loom's CPU engine: world rank 0 broadcasts the step descriptor to every rank
  // (engine/plan_executor.h: 4 KiB inline, the rest in a second message; the whole step's
  // sequences, all replicas'), and with DP the sampled tokens come back in a world all-gather.
  if (cpu && pl.world_ranks > 1) {
    int64_t desc = 64;
    for (const auto& w : seqs) desc += 48 + 4 * int64_t(w.new_tokens);
    desc *= pl.dp;  // the other replicas' shares travel too (about as large)
    constexpr int64_t kInline = 4096;
    const int world = pl.world_ranks, node = std::min(world, per_node);
    ends_comm += collective_s(Collective::Broadcast, double(kInline), world, node);
    if (desc > kInline) ends_comm += collective_s(Collective::Broadcast, double(desc - kInline), world, node);
    if (pl.dp > 1) ends_comm += collective_s(Collective::AllGather, 16.0 * world * std::max(sampled, 1), world, node);
  }
  if (steady) {
    cost.pipeline_fill_s = (p - 1) * (stage_gemm + stage_elem + stage_attn + stage_comm);
    ends_gemm *= p;
    ends *= p;
  }
  if (stage) {
    stage[0] = stage_gemm, stage[1] = stage_elem, stage[2] = stage_attn, stage[3] = stage_comm;
    stage[4] = ends_gemm, stage[5] = ends;
  }
  cost.gemm_s = stage_gemm * slots + ends_gemm + others[0] + others[4];
  cost.elementwise_s = stage_elem * slots + ends + others[1] + others[5];
  cost.attention_s = stage_attn * slots + others[2];
  cost.comm_s = stage_comm * slots + ends_comm + pp_send + others[3];
  cost.total_s = cost.gemm_s + cost.elementwise_s + cost.attention_s + cost.comm_s + cost.overhead_s;
  return cost;
}

StepCost CostModel::price_lockstep(const PricedPlan& pl, const std::vector<std::vector<SeqWork>>& replica_seqs) const {
  if (pl.full.weights == WeightSource::FetchFromOwner) return price_sidp(*this, pl, replica_seqs);
  StepCost worst;
  bool any = false;
  for (const auto& seqs : replica_seqs) {
    if (seqs.empty()) continue;
    const StepCost c = price(pl, seqs);
    if (!any || c.total_s > worst.total_s) worst = c;
    any = true;
  }
  if (!any) worst = price(pl, {});
  return worst;
}

bool CostModel::same_kv_placement(const PricedPlan& from, const PricedPlan& to) const {
  if (from.world_ranks != to.world_ranks) return false;
  return kv_placement(from.full, shape_) == kv_placement(to.full, shape_);
}

double CostModel::switch_s(const PricedPlan& from, const PricedPlan& to, const std::vector<SeqExtent>& seqs,
                           int block_tokens, int64_t* bytes) const {
  if (bytes) *bytes = 0;
  if (from.world_ranks != to.world_ranks)
    fail("switch ", from.name, " -> ", to.name, ": the plans have ", from.world_ranks, " and ", to.world_ranks,
         " ranks (a plan set shares one rank count)");
  // Per token, per KV head, per layer: K and V of head_dim elements (kv_bytes_per_token for the
  // engine's dtypes; here the simulated KV element size); MLA: the one latent of kv_lora_rank +
  // qk_rope_dim values every head shares (the model's one KV head).
  const int64_t per_token = std::max<int64_t>(1, int64_t(std::llround(kv_values_per_token_head() * opt_.kv_bytes)));
  const KvMigrationBytes mig =
      kv_migration_bytes(kv_placement(from.full, shape_), kv_placement(to.full, shape_), seqs, block_tokens, per_token);
  if (bytes) *bytes = mig.total_bytes;
  if (mig.total_bytes == 0) return 0.0;
  // Each rank's sends and receives (one message per peer), then the busiest rank.
  std::vector<double> rank_s(size_t(from.world_ranks), 0.0), rank_bytes(size_t(from.world_ranks), 0.0);
  const int per_node = node_.gpus_per_node;
  for (const auto& [pair, b] : mig.bytes_by_pair) {
    const auto [src, dst] = pair;
    const bool same_node = src / per_node == dst / per_node;
    const double msg = collective_s(Collective::SendRecv, double(b), 2, same_node ? 2 : 1);
    rank_s[size_t(src)] += msg;
    rank_s[size_t(dst)] += msg;
    rank_bytes[size_t(src)] += double(b);
    rank_bytes[size_t(dst)] += double(b);
  }
  double worst = 0;
  for (size_t r = 0; r < rank_s.size(); ++r) {
    // Packing fragmented blocks into a contiguous buffer and unpacking them (a read and a write
    // of every byte on each side) at memory bandwidth.
    const double pack = 2.0 * rank_bytes[r] / (node_.gpu.hbm_bw * cal_.add.bw_eff);
    worst = std::max(worst, rank_s[r] + pack);
  }
  return worst;
}

MemoryPlan CostModel::memory(const std::vector<PricedPlan>& resident) const {
  LOOM_CHECK(!resident.empty(), "memory() of no plan");
  const double wb = weight_bytes();
  // Weights outside the layer matrices (embedding, classifier, norms): split over the TP group
  // of a vocabulary-parallel engine, whole on every rank otherwise.
  int64_t layer_elems = 0;
  {
    const WeightShards all = weight_shards(Plan::make_tp(1), shape_, 0);
    layer_elems = all.elems();
  }
  const double other_elems = double(model_.param_count() - layer_elems);
  const bool vocab_split = opt_.kernels == StepKernels::FusedGpu;
  const int ranks = resident.front().world_ranks;
  MemoryPlan mem;
  std::string names;
  for (const auto& pl : resident) names += (names.empty() ? "" : " + ") + pl.name;
  for (int r = 0; r < ranks; ++r) {
    double elems = 0;
    bool full_counted = false;
    for (const auto& pl : resident) {
      if (pl.world_ranks != ranks)
        fail("plans ", names, " have different rank counts (", ranks, " and ", pl.world_ranks, ")");
      if (pl.plan.weights == WeightSource::SliceOfFull) {
        // Nitsum 3.2.1: every rank maps the whole model and computes with views of it, once
        // for every plan that does.
        if (!full_counted) elems += double(model_.param_count());
        full_counted = true;
        continue;
      }
      const WeightShards w = weight_shards(pl.full, shape_, r);
      elems += double(w.elems()) + other_elems / double(vocab_split ? pl.tp_group * pl.pp : 1);
    }
    // MLA / MoE models and the variants: the busiest rank's shards from their own shapes
    // (weight_shards knows only the dense GQA layer), resident once per plan.
    bool any_arch = !arch_.plain();
    for (const auto& pl : resident) any_arch = any_arch || pl.variant != PlanVariant::AsPlanned;
    if (any_arch) {
      elems = 0;
      for (const auto& pl : resident) {
        const RankWeights w = rank_weights(pl);
        elems += w.attn * pl.max_layers + w.dense_ffn * pl.dense_layers + w.moe_ffn * (pl.max_layers - pl.dense_layers) +
                 w.other;
      }
    }
    // SiDP: the owned FFN layers and the WaS cache slots instead of every layer's FFN.
    if (resident.front().full.weights == WeightSource::FetchFromOwner) elems = sidp_rank_weight_elems(*this, resident, r);
    mem.weight_bytes_per_gpu = std::max(mem.weight_bytes_per_gpu, elems * wb);
    double kv_per_token = 0;
    for (const auto& pl : resident) {
      const RankLayout l = rank_layout(pl.full, shape_, r);
      // Helix stores 1/kv_shards of every sequence (blocks round-robin, Helix 2.3); MLA one latent
      // per token and layer whatever the heads.
      const double vals = double(l.kv_heads.size()) * kv_values_per_token_head();
      kv_per_token = std::max(kv_per_token, double(l.layers.size()) * vals * opt_.kv_bytes / l.kv_shards);
    }
    mem.kv_bytes_per_token_per_gpu = std::max(mem.kv_bytes_per_token_per_gpu, kv_per_token);
  }
  const double usable = node_.gpu.hbm_bytes * opt_.memory_utilization;
  mem.free_bytes_per_gpu = usable - mem.weight_bytes_per_gpu - opt_.activation_reserve_bytes;
  if (mem.free_bytes_per_gpu <= 0)
    fail("plan ", names, ": weights need ", mem.weight_bytes_per_gpu / 1e9, " GB per GPU but a ", node_.gpu.name,
         " offers ", usable / 1e9, " GB (", opt_.memory_utilization * 100, "% of ", node_.gpu.hbm_bytes / 1e9,
         " GB) less ", opt_.activation_reserve_bytes / 1e9, " GB for activations: the weights do not fit");
  // Every GPU of an SP x TP group stores the KV of all tokens for its heads, so one replica's
  // token capacity is one GPU's free bytes over its per-token share.
  mem.kv_capacity_tokens = int64_t(mem.free_bytes_per_gpu / mem.kv_bytes_per_token_per_gpu);
  return mem;
}

namespace {
int64_t overlap(const Range& a, const Range& b) { return std::max<int64_t>(0, std::min(a.end, b.end) - std::max(a.begin, b.begin)); }
}  // namespace

double CostModel::reshard_bytes(const PricedPlan& from, const PricedPlan& to, int rank) const {
  const WeightShards a = weight_shards(from.full, shape_, rank), b = weight_shards(to.full, shape_, rank);
  const int64_t d = shape_.d_model;
  // Rows of Wq, Wk, Wv, W_gate, W_up and columns of Wo, W_down are d elements each.
  const int64_t kept_per_layer = d * (overlap(a.wq_rows, b.wq_rows) + overlap(a.wk_rows, b.wk_rows) +
                                      overlap(a.wv_rows, b.wv_rows) + overlap(a.gate_rows, b.gate_rows) +
                                      overlap(a.up_rows, b.up_rows) + overlap(a.wo_cols, b.wo_cols) +
                                      overlap(a.down_cols, b.down_cols));
  const int64_t kept = kept_per_layer * overlap(a.layers, b.layers);
  return double(std::max<int64_t>(0, b.elems() - kept)) * weight_bytes();
}

double CostModel::reshard_s(const PricedPlan& from, const PricedPlan& to) const {
  double worst = 0;
  for (int r = 0; r < to.world_ranks; ++r) worst = std::max(worst, reshard_bytes(from, to, r));
  return worst > 0 ? worst / node_.gpu.link_bw : 0.0;
}

double CostModel::kv_values_per_token_head() const {
  return arch_.mla ? double(arch_.mla->cached_per_token()) : 2.0 * model_.head_dim;
}

double CostModel::kv_bytes_per_token() const {
  return double(model_.n_layers) * model_.n_kv_heads * kv_values_per_token_head() * opt_.kv_bytes;
}

double CostModel::kv_swap_s(int64_t tokens, int gpus) const {
  if (tokens <= 0) return 0.0;
  return double(tokens) * kv_bytes_per_token() / (node_.gpu.link_bw * std::max(gpus, 1));
}

}  // namespace loom::sim
