#include "sim/helix.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace loom::sim {

namespace {
void check(const HelixRoofline& r) {
  if (r.tpa < 1 || r.tpf < 1 || r.kvp < 1 || r.q_heads < 1 || r.kv_heads < 1 || r.head_size < 1)
    fail("Helix roofline: widths and head counts must be >= 1 (tpa=", r.tpa, ", tpf=", r.tpf, ", kvp=", r.kvp,
         ", Q=", r.q_heads, ", K=", r.kv_heads, ", Hsz=", r.head_size, ")");
  if (!(r.mem_bw > 0)) fail("Helix roofline: MemBW ", r.mem_bw, " must be > 0");
}
// ceil(K / TPA): beyond TPA = K each shard holds (and reads) one whole KV head (the Figure 1
// plateau).
double kv_per_tpa(const HelixRoofline& r) { return std::ceil(double(r.kv_heads) / r.tpa); }
}  // namespace

double helix_t_kv(const HelixRoofline& r) {
  check(r);
  return r.batch * 2.0 * kv_per_tpa(r) * r.head_size * (r.seq_len / r.kvp) * r.bytes_param / r.mem_bw;
}

double helix_t_w(const HelixRoofline& r) {
  check(r);
  const double H = r.hidden();
  const double qo = 2.0 * H * (double(r.q_heads) / r.tpa) * r.head_size;
  const double kv = 2.0 * H * kv_per_tpa(r) * r.head_size;
  const double ffn = 3.0 * H * r.ffn / r.tpf;
  return (qo + kv + ffn) * r.bytes_param / r.mem_bw;
}

double helix_t_w_as_described(const HelixRoofline& r) {
  check(r);
  const double H = r.hidden();
  const double q = H * (double(r.q_heads) / r.tpa) * r.head_size;
  const double o = H * (double(r.q_heads) / (double(r.tpa) * r.kvp)) * r.head_size;
  const double kv = 2.0 * H * kv_per_tpa(r) * r.head_size;
  const double ffn = 3.0 * H * r.ffn / r.tpf;
  return (q + o + kv + ffn) * r.bytes_param / r.mem_bw;
}

Calibration helix_paper_calibration(double collective_latency_s) {
  if (!(collective_latency_s >= 0)) fail("collective latency ", collective_latency_s, " s must be >= 0");
  const Calibration& fit = default_calibration();
  Calibration k;
  k.fitted_on = cat("Helix 3.1 roofline: datasheet peaks, the A100 fit's fixed cost per kernel, NVLink collectives of ",
                    collective_latency_s * 1e6, " us latency");
  // GEMMs: eff = eff_max * m / (m + m_half) = 1 at every token count; FP4 at its own peak; the
  // fit's fixed cost per GEMM.
  k.gemm = {1.0, 0.0, 1.0, fit.gemm.latency_s};
  k.low_precision_gemm_factor = 1.0;
  k.norm = {1.0, fit.norm.latency_s};
  k.add = {1.0, fit.add.latency_s};
  k.act = {1.0, fit.act.latency_s};
  k.rope = {1.0, fit.rope.latency_s};
  k.emb = {1.0, fit.emb.latency_s};
  k.attn_compute_eff = 1.0;
  k.attn_mem_eff = 1.0;
  k.attn_latency_s = fit.attn_latency_s;
  k.all_reduce = k.all_to_all = k.all_gather = k.broadcast = k.send_recv = k.get = {collective_latency_s, 1.0, 0.0};
  k.custom_all_reduce_latency_s = collective_latency_s;
  // The experiments stay inside one NVLink domain; a crossing would be priced at the NIC's
  // datasheet bandwidth with the same latency.
  k.net = {collective_latency_s, 1.0, 0.0};
  k.step_overhead_s = 0.0;
  return k;
}

double hopb_span(const std::vector<double>& attn_s, const std::vector<double>& comm_s,
                 const std::vector<double>& merge_s, bool hopb) {
  if (attn_s.size() != comm_s.size() || (!merge_s.empty() && merge_s.size() != attn_s.size()))
    fail("HOP-B: ", attn_s.size(), " attention chunks but ", comm_s.size(), " all-to-alls and ", merge_s.size(),
         " merges (one each)");
  const size_t n = attn_s.size();
  auto merge = [&](size_t c) { return merge_s.empty() ? 0.0 : merge_s[c]; };
  if (!hopb) {
    double t = 0;
    for (size_t c = 0; c < n; ++c) t += attn_s[c] + comm_s[c] + merge(c);
    return t;
  }
  double compute = 0, link = 0;
  std::vector<double> comm_end(n, 0.0);
  for (size_t c = 0; c < n; ++c) {
    compute += attn_s[c];
    link = std::max(compute, link) + comm_s[c];
    comm_end[c] = link;
    if (c > 0) compute = std::max(compute, comm_end[c - 1]) + merge(c - 1);
  }
  if (n > 0) compute = std::max(compute, comm_end[n - 1]) + merge(n - 1);
  return compute;
}

double hopb_span(const std::vector<double>& attn_s, const std::vector<double>& comm_s, bool hopb) {
  return hopb_span(attn_s, comm_s, {}, hopb);
}

double hopb_exposed(const std::vector<double>& attn_s, const std::vector<double>& comm_s, bool hopb) {
  double attn = 0;
  for (double a : attn_s) attn += a;
  return hopb_span(attn_s, comm_s, hopb) - attn;
}

}  // namespace loom::sim
