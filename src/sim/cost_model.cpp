#include "sim/cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

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
  node_.gpu.flops(opt_.weight_dtype);  // throws when the GPU lacks the precision
}

double CostModel::gemm_s(double m, double k, double n, SimDType compute, double weight_bytes,
                         double act_bytes) const {
  if (m <= 0 || k <= 0 || n <= 0) return 0.0;
  const auto& g = cal_.gemm;
  double eff = g.eff_max * m / (m + g.m_half);
  if (compute != SimDType::BF16) eff *= cal_.low_precision_gemm_factor;
  const double compute_s = 2.0 * m * k * n / (node_.gpu.flops(compute) * eff);
  const double bytes = k * n * weight_bytes + m * k * act_bytes + m * n * 2.0;
  const double memory_s = bytes / (node_.gpu.hbm_bw * g.mem_eff);
  return std::max(compute_s, memory_s) + g.latency_s;
}

double CostModel::elementwise_s(Elementwise kind, double bytes) const {
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
  switch (node_.topology) {
    case Topology::NvSwitch: return node_.gpu.link_bw;
    case Topology::PairwiseNvlink: return group <= 2 ? node_.gpu.link_bw : kPcieBw;
    case Topology::Pcie: return node_.gpu.nvlink ? kPcieBw : node_.gpu.link_bw;
  }
  return node_.gpu.link_bw;
}

double CostModel::collective_s(Collective kind, double bytes, int group, int per_node) const {
  if (group <= 1 || bytes <= 0) return 0.0;
  per_node = std::clamp(per_node, 1, group);
  if (!curves_.empty()) {
    auto it = curves_.find({kind, group, per_node});
    if (it != curves_.end()) return it->second.seconds(bytes);
  }
  // Bytes one rank puts on its busiest link, by algorithm.
  auto wire = [&](int n) {
    switch (kind) {
      case Collective::AllReduce: return 2.0 * (n - 1) / n * bytes;  // ring reduce-scatter + all-gather
      case Collective::AllToAll: return double(n - 1) / n * bytes;
      case Collective::AllGather: return double(n - 1) / n * bytes;
      case Collective::SendRecv: return bytes;
    }
    return bytes;
  };
  const CollectiveCalibration& c = kind == Collective::AllReduce   ? cal_.all_reduce
                                   : kind == Collective::AllToAll  ? cal_.all_to_all
                                   : kind == Collective::AllGather ? cal_.all_gather
                                                                   : cal_.send_recv;
  if (per_node >= group) {
    double latency = c.latency_s;
    if (kind == Collective::AllReduce && opt_.custom_all_reduce && node_.topology == Topology::NvSwitch &&
        node_.gpu.nvlink && bytes <= cal_.custom_all_reduce_max_bytes)
      latency = cal_.custom_all_reduce_latency_s;
    return latency + wire(group) / (link_bw(group) * c.bw_eff);
  }
  // Crosses nodes: the NICs bound the ring (one NIC per GPU); the intra-node part adds its own.
  const double inter = cal_.net.latency_s + wire(group) / (node_.net_bw * cal_.net.bw_eff);
  const double intra = per_node > 1 ? c.latency_s + wire(per_node) / (link_bw(per_node) * c.bw_eff) : 0.0;
  return inter + intra;
}

double CostModel::attention_s(const std::vector<SeqWork>& seqs, int q_heads, int kv_heads) const {
  const double hd = model_.head_dim;
  double pf_flops = 0, pf_bytes = 0, dec_flops = 0, dec_bytes = 0;
  bool any_pf = false, any_dec = false;
  for (const auto& s : seqs) {
    const double q = s.new_tokens, c = s.context_len;
    // Causal (query, key) pairs: earlier context fully, the new block as a triangle.
    const double pairs = q * (c - q) + q * (q + 1) / 2;
    const double flops = 4.0 * hd * q_heads * pairs;
    const double bytes = c * 2.0 * kv_heads * hd * opt_.kv_bytes + q * (2.0 * q_heads + 2.0 * kv_heads) * hd * 2.0;
    if (s.new_tokens > 1) {
      pf_flops += flops;
      pf_bytes += bytes;
      any_pf = true;
    } else {
      dec_flops += flops;
      dec_bytes += bytes;
      any_dec = true;
    }
  }
  const double peak = node_.gpu.flops(SimDType::BF16) * cal_.attn_compute_eff;
  const double bw = node_.gpu.hbm_bw * cal_.attn_mem_eff;
  double t = 0;
  if (any_pf) t += std::max(pf_flops / peak, pf_bytes / bw) + cal_.attn_latency_s;
  if (any_dec) t += std::max(dec_flops / peak, dec_bytes / bw) + cal_.attn_latency_s;
  return t;
}

void CostModel::check_config(const ParallelConfig& cfg) const {
  const int H = model_.n_heads, K = model_.n_kv_heads;
  if (cfg.tp < 1 || cfg.sp < 1 || cfg.pp < 1) fail("plan ", cfg.name(), ": degrees must be >= 1");
  const int heads_split = cfg.tp * cfg.sp;
  if (H % heads_split != 0)
    fail("plan ", cfg.name(), ": ", H, " query heads do not divide over tp*sp = ", heads_split);
  if (cfg.tp <= K ? K % cfg.tp != 0 : cfg.tp % K != 0)
    fail("plan ", cfg.name(), ": tp = ", cfg.tp, " and ", K, " KV heads (need K % tp == 0 or tp % K == 0)");
  if (model_.ffn_dim % cfg.tp != 0) fail("plan ", cfg.name(), ": ffn width ", model_.ffn_dim, " does not divide by tp");
  if (cfg.pp > model_.n_layers) fail("plan ", cfg.name(), ": pp = ", cfg.pp, " > ", model_.n_layers, " layers");
}

StepCost CostModel::price(const ParallelConfig& cfg, const std::vector<SeqWork>& seqs) const {
  StepCost cost;
  cost.config = cfg;
  cost.overhead_s = cal_.step_overhead_s;
  if (seqs.empty()) {
    cost.total_s = cost.overhead_s;
    return cost;
  }
  const int t = cfg.tp, s = cfg.sp, p = cfg.pp;
  const double d = model_.d_model, hd = model_.head_dim, F = model_.ffn_dim, V = model_.vocab_size;
  const int H = model_.n_heads, K = model_.n_kv_heads;
  const double wb = sim_dtype_bytes(opt_.weight_dtype), ab = opt_.act_bytes;
  const SimDType dt = opt_.weight_dtype;
  const int per_node = node_.gpus_per_node;

  // Query/KV heads of a TP rank (TP replicates a KV head over t/K ranks when t > K), and of a GPU
  // after the Ulysses all-to-all (GQA replication inside the send buffer when fewer than s).
  const double q_tp = double(H) / t;
  const double kv_tp = std::max(1.0, double(K) / t);
  const int q_gpu = H / (t * s);
  const int kv_gpu = std::max(1, K / (t * s));

  // Pipeline micro-batches: contiguous groups of sequences, priced at the largest one.
  const int mb = std::max(1, std::min<int>(p, int(seqs.size())));
  std::vector<SeqWork> group;
  {
    int total = 0;
    for (const auto& w : seqs) total += w.new_tokens;
    const int target = ceil_div(total, mb);
    int acc = 0, best = -1;
    std::vector<SeqWork> cur;
    for (const auto& w : seqs) {
      cur.push_back(w);
      acc += w.new_tokens;
      if (acc >= target) {
        if (acc > best) best = acc, group = cur;
        cur.clear();
        acc = 0;
      }
    }
    if (!cur.empty() && acc > best) group = cur;
  }
  int n = 0, sampled = 0;
  for (const auto& w : group) {
    n += w.new_tokens;
    sampled += w.sample ? 1 : 0;
  }
  // Ulysses pads the step to a multiple of sp (Shift 3.2.1) and gives each rank n/sp tokens.
  const double m = s > 1 ? double(ceil_div(n, s)) : double(n);

  // One layer on one GPU.
  double gemm = 0, elem = 0, comm = 0;
  gemm += gemm_s(m, d, (q_tp + 2 * kv_tp) * hd, dt, wb, ab);  // QKV projection
  gemm += gemm_s(m, q_tp * hd, d, dt, wb, ab);                // O projection
  gemm += gemm_s(m, d, 2 * F / t, dt, wb, ab);                // gate + up
  gemm += gemm_s(m, F / t, d, dt, wb, ab);                    // down
  elem += 2 * elementwise_s(Elementwise::Norm, m * d * 2 * 2);
  elem += 2 * elementwise_s(Elementwise::Add, m * d * 3 * 2);
  elem += elementwise_s(Elementwise::Act, m * (F / t) * 3 * 2);
  elem += elementwise_s(Elementwise::Rope, m * (q_tp + kv_tp) * hd * 2 * 2);
  const double attn = attention_s(group, q_gpu, kv_gpu);
  const int tp_node = std::min(t, per_node);
  if (t > 1) comm += 2 * collective_s(Collective::AllReduce, m * d * ab, t, tp_node);
  if (s > 1) {
    // Shift Algorithm 1 lines 4 and 6: tokens -> heads and back, over the SP group (ranks with
    // equal tp index, stride t: on one node when t*s fits).
    const double qkv_send = double(s) * m * (q_gpu + 2.0 * kv_gpu) * hd * ab;
    const double o_send = double(s) * m * q_gpu * hd * ab;
    const int sp_node = std::max(1, std::min(s, per_node / std::min(t, per_node)));
    comm += collective_s(Collective::AllToAll, qkv_send, s, sp_node);
    comm += collective_s(Collective::AllToAll, o_send, s, sp_node);
  }
  const int layers = ceil_div(model_.n_layers, p);
  double stage_gemm = gemm * layers, stage_elem = elem * layers, stage_attn = attn * layers,
         stage_comm = comm * layers;

  // Embedding lookup, final norm, LM head on the sampled rows (vocab split over tp), split
  // across stages as first/last; SP gathers the sampled hidden states (Algorithm 1 line 13).
  const double sampled_rank = s > 1 ? std::ceil(double(sampled) / s) : double(sampled);
  double ends = elementwise_s(Elementwise::Emb, m * d * 2 * 2) + elementwise_s(Elementwise::Norm, m * d * 2 * 2);
  double ends_gemm = sampled > 0 ? gemm_s(sampled_rank, d, V / t, dt, wb, ab) : 0.0;
  double ends_comm = s > 1 && sampled > 0 ? collective_s(Collective::AllGather, sampled * d * ab, s, s) : 0.0;

  // Pipeline: mb micro-batches through p stages, filled and drained within the step.
  const double slots = p > 1 ? double(mb + p - 1) : 1.0;
  const double pp_send = p > 1 ? (p - 1) * collective_s(Collective::SendRecv, m * d * ab, 2, per_node >= 2 * t ? 2 : 1)
                               : 0.0;
  cost.gemm_s = stage_gemm * slots + ends_gemm;
  cost.elementwise_s = stage_elem * slots + ends;
  cost.attention_s = stage_attn * slots;
  cost.comm_s = stage_comm * slots + ends_comm + pp_send;
  cost.total_s = cost.gemm_s + cost.elementwise_s + cost.attention_s + cost.comm_s + cost.overhead_s;
  return cost;
}

StepCost CostModel::price_step(const SimPlan& plan, const std::vector<SeqWork>& seqs) const {
  int n = 0;
  for (const auto& w : seqs) n += w.new_tokens;
  return price(plan.config_for(n), seqs);
}

MemoryPlan CostModel::memory(const SimPlan& plan) const {
  check_config(plan.base);
  if (plan.shift) check_config(plan.shift_config());
  if (plan.base.gpus() > node_.gpus_per_node && plan.base.tp * plan.base.sp > node_.gpus_per_node)
    fail("plan ", plan.name(), ": tp*sp = ", plan.base.tp * plan.base.sp, " exceeds the ", node_.gpus_per_node,
         " GPUs of a ", node_.name(), " node");
  MemoryPlan mem;
  const double total = double(model_.param_count()) * sim_dtype_bytes(opt_.weight_dtype);
  const auto& b = plan.base;
  mem.weight_bytes_per_gpu = total / (b.tp * b.pp);
  if (plan.shift) mem.weight_bytes_per_gpu += total / (b.tp * b.sp * b.pp);  // Shift 3.3.2, eq. (1)
  const double kv_heads_gpu = std::max(1, model_.n_kv_heads / (b.tp * b.sp));
  const int layers = ceil_div(model_.n_layers, b.pp);
  mem.kv_bytes_per_token_per_gpu = 2.0 * layers * kv_heads_gpu * model_.head_dim * opt_.kv_bytes;
  const double usable = node_.gpu.hbm_bytes * opt_.memory_utilization;
  mem.free_bytes_per_gpu = usable - mem.weight_bytes_per_gpu - opt_.activation_reserve_bytes;
  if (mem.free_bytes_per_gpu <= 0)
    fail("plan ", plan.name(), ": weights need ", mem.weight_bytes_per_gpu / 1e9, " GB per GPU but a ",
         node_.gpu.name, " offers ", usable / 1e9, " GB (", opt_.memory_utilization * 100, "% of ",
         node_.gpu.hbm_bytes / 1e9, " GB) less ", opt_.activation_reserve_bytes / 1e9,
         " GB for activations: the weights do not fit");
  // Every GPU of an SP x TP group stores the KV of all tokens for its heads, so one replica's
  // token capacity is one GPU's free bytes over its per-token share.
  mem.kv_capacity_tokens = int64_t(mem.free_bytes_per_gpu / mem.kv_bytes_per_token_per_gpu);
  return mem;
}

}  // namespace loom::sim
