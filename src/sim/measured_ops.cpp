#include "sim/measured_ops.h"

#include <algorithm>
#include <cmath>

#include "engine/metrics.h"
#include "sim/calibration.h"

namespace loom::sim {

double LogCurve::seconds(double x) const {
  const double lx = std::log(std::max(x, 1e-9));
  const size_t n = log_x.size();
  if (n == 1 || lx <= log_x.front()) return std::exp(log_s.front());
  if (lx >= log_x.back()) {
    const double x0 = std::exp(log_x[n - 2]), x1 = std::exp(log_x[n - 1]);
    const double t0 = std::exp(log_s[n - 2]), t1 = std::exp(log_s[n - 1]);
    const double slope = x1 > x0 ? std::max(0.0, (t1 - t0) / (x1 - x0)) : 0.0;
    return t1 + (std::exp(lx) - x1) * slope;
  }
  const size_t i = size_t(std::upper_bound(log_x.begin(), log_x.end(), lx) - log_x.begin());
  const double f = (lx - log_x[i - 1]) / (log_x[i] - log_x[i - 1]);
  return std::exp(log_s[i - 1] + f * (log_s[i] - log_s[i - 1]));
}

namespace {
// Pool adjacent violators (isotonic regression, equal weights): y made non-decreasing in order.
void pool_adjacent_violators(std::vector<double>& y) {
  std::vector<double> val, wt;
  std::vector<size_t> len;
  for (double v : y) {
    val.push_back(v), wt.push_back(1), len.push_back(1);
    while (val.size() > 1 && val[val.size() - 2] > val.back()) {
      const size_t k = val.size() - 1;
      val[k - 1] = (val[k - 1] * wt[k - 1] + val[k] * wt[k]) / (wt[k - 1] + wt[k]);
      wt[k - 1] += wt[k], len[k - 1] += len[k];
      val.pop_back(), wt.pop_back(), len.pop_back();
    }
  }
  size_t at = 0;
  for (size_t b = 0; b < val.size(); ++b)
    for (size_t r = 0; r < len[b]; ++r) y[at++] = val[b];
}
}  // namespace

LogCurve LogCurve::from_points(std::vector<std::pair<double, double>> pts, bool economies_of_scale) {
  std::sort(pts.begin(), pts.end());
  LogCurve c;
  for (size_t i = 0; i < pts.size();) {
    size_t j = i;
    std::vector<double> same;
    while (j < pts.size() && pts[j].first == pts[i].first) same.push_back(pts[j++].second);
    const double med = percentile(same, 50);
    if (pts[i].first > 0 && med > 0) {
      c.log_x.push_back(std::log(pts[i].first));
      c.log_s.push_back(std::log(med));
    }
    i = j;
  }
  // Economies of scale (the GEMM curves): a matmul reads its weights once per call whatever the
  // token count, so a token never costs more in a larger call. One slow moment of a profile on a
  // shared machine breaks this at a single point (a 128-token row of the small shape at 1.21 ms
  // a token between 0.97 at 64 and 0.99 at 256), and an SP step, priced at half its tokens, then
  // doubles the error where it lands. Pooled as below on log(seconds / x), made non-increasing.
  // Pooling the second step below keeps this (a pooled pair shares its seconds, so the larger x
  // of the two costs less per unit).
  if (economies_of_scale) {
    std::vector<double> neg_per_unit(c.log_s.size());
    for (size_t i = 0; i < c.log_s.size(); ++i) neg_per_unit[i] = -(c.log_s[i] - c.log_x[i]);
    pool_adjacent_violators(neg_per_unit);
    for (size_t i = 0; i < c.log_s.size(); ++i) c.log_s[i] = c.log_x[i] - neg_per_unit[i];
  }
  // More work never takes less time: a profile taken on a shared machine has points that dip
  // below a smaller size's (noise), which would make a step of more tokens priced cheaper (and a
  // threshold derived from the prices jump). Pool adjacent violators (isotonic regression in log
  // seconds, equal weights) makes the curve non-decreasing.
  pool_adjacent_violators(c.log_s);
  return c;
}

namespace {
int64_t key(double v) { return int64_t(std::llround(v)); }

template <class Map, class Key>
double lookup(const Map& m, const Key& k, double x) {
  const auto it = m.find(k);
  return it == m.end() || it->second.empty() ? -1.0 : it->second.seconds(x);
}

int elementwise_kind(SampleOp op) {
  switch (op) {
    case SampleOp::Norm: return int(Elementwise::Norm);
    case SampleOp::Add: return int(Elementwise::Add);
    case SampleOp::Act: return int(Elementwise::Act);
    case SampleOp::Rope: return int(Elementwise::Rope);
    case SampleOp::Emb: return int(Elementwise::Emb);
    default: return -1;
  }
}
}  // namespace

double MeasuredOps::gemm_s(double m, double k, double n) const { return lookup(gemm, std::pair{key(k), key(n)}, m); }

double MeasuredOps::qkv_s(double m, double d, double q_cols, double kv_cols) const {
  return lookup(qkv, std::tuple{key(d), key(q_cols), key(kv_cols)}, m);
}

double MeasuredOps::gate_up_s(double m, double d, double ffn) const {
  return lookup(gate_up, std::pair{key(d), key(ffn)}, m);
}

double MeasuredOps::ulysses_wait_s(double m, double d, double ffn) const {
  return lookup(ulysses_wait, std::pair{key(d), key(ffn)}, m);
}

double MeasuredOps::elementwise_s(int kind, double bytes) const { return lookup(elementwise, kind, bytes); }

double MeasuredOps::scaled_gemm_s(double m, double k, double n) const {
  const int64_t kk = key(k);
  double best_cols = 0, best_s = -1;
  auto consider = [&](double cols, const LogCurve& c) {
    if (cols > best_cols && !c.empty()) best_cols = cols, best_s = c.seconds(m);
  };
  for (const auto& [kn, c] : gemm)
    if (kn.first == kk) consider(double(kn.second), c);
  for (const auto& [kf, c] : gate_up)
    if (kf.first == kk) consider(2.0 * double(kf.second), c);
  for (const auto& [kqv, c] : qkv)
    if (std::get<0>(kqv) == kk) consider(double(std::get<1>(kqv) + 2 * std::get<2>(kqv)), c);
  return best_s < 0 ? -1.0 : best_s * n / best_cols;
}

double MeasuredOps::attention_s(const std::vector<Work>& seqs, int q_heads, int kv_heads, int head_dim) const {
  const auto it = attention.find({q_heads, kv_heads, head_dim});
  if (it == attention.end()) return -1.0;
  const Attention& a = it->second;
  int decodes = 0;
  for (const Work& w : seqs) decodes += w.new_tokens <= 1 ? 1 : 0;
  // The two measured batches around the step's decode batch (or the nearest one).
  const LogCurve *lo = nullptr, *hi = nullptr;
  double f = 0;
  if (decodes > 0) {
    if (a.decode_per_seq.empty()) return -1.0;
    auto up = a.decode_per_seq.lower_bound(decodes);
    if (up == a.decode_per_seq.end()) {
      lo = hi = &std::prev(up)->second;
    } else if (up->first == decodes || up == a.decode_per_seq.begin()) {
      lo = hi = &up->second;
    } else {
      const auto down = std::prev(up);
      lo = &down->second, hi = &up->second;
      f = (std::log(double(decodes)) - std::log(double(down->first))) /
          (std::log(double(up->first)) - std::log(double(down->first)));
    }
  }
  double total = 0;
  for (const Work& w : seqs) {
    if (w.new_tokens <= 1) {
      const double x = std::max(1, w.context);
      total += std::exp((1 - f) * std::log(lo->seconds(x)) + f * std::log(hi->seconds(x)));
      continue;
    }
    if (a.prefill.empty()) return -1.0;
    const double before = std::max(0, w.context - w.new_tokens);
    // Linear in the earlier tokens between the two measured counts around `before` (the last
    // two beyond them), never below the fewest's.
    auto up = a.prefill.upper_bound(int(before));
    if (up == a.prefill.end()) up = std::prev(up);
    if (up == a.prefill.begin() && std::next(up) != a.prefill.end()) up = std::next(up);
    if (up == a.prefill.begin()) {
      total += up->second.seconds(w.new_tokens);
      continue;
    }
    const auto down = std::prev(up);
    const double t0 = down->second.seconds(w.new_tokens), t1 = up->second.seconds(w.new_tokens);
    const double g = (before - down->first) / double(up->first - down->first);
    total += std::max(a.prefill.begin()->second.seconds(w.new_tokens), t0 + g * (t1 - t0));
  }
  return total;
}

MeasuredOps measured_ops(const std::vector<const MeasurementFile*>& files) {
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>> gemm, gate_up, wait;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<std::pair<double, double>>> qkv;
  std::map<int, std::vector<std::pair<double, double>>> elem;
  std::map<std::tuple<int, int, int>, std::map<int, std::vector<std::pair<double, double>>>> dec, pre;
  for (const MeasurementFile* f : files) {
    if (f->kind == MeasurementFile::Attention) {
      for (const OpSample& s : f->samples) {
        const std::tuple<int, int, int> heads{s.q_heads, s.kv_heads, s.head_dim};
        if (s.new_tokens <= 1)
          dec[heads][s.batch].push_back({double(s.context), s.measured_s / std::max(1, s.batch)});
        else if (s.batch == 1)
          pre[heads][s.context - s.new_tokens].push_back({double(s.new_tokens), s.measured_s});
      }
      continue;
    }
    if (f->kind != MeasurementFile::Mlp || f->kernels != StepKernels::LoomCpu) continue;
    // A wait of 0 (no rank behind at any meeting) kept as 0.1 us: the log curve needs seconds > 0.
    for (const OpSample& s : f->ulysses_waits)
      wait[{key(s.k), key(s.n)}].push_back({s.m, std::max(s.measured_s, 1e-7)});
    for (const OpSample& s : f->samples) {
      switch (s.kind) {
        case SampleOp::QkvProj: qkv[{key(s.k), key(s.n), key(s.n2)}].push_back({s.m, s.measured_s}); break;
        case SampleOp::UpProj:
          if (s.n2 != 0) gate_up[{key(s.k), key(s.n)}].push_back({s.m, s.measured_s});
          break;
        case SampleOp::PostProj:
        case SampleOp::DownProj: gemm[{key(s.k), key(s.n)}].push_back({s.m, s.measured_s}); break;
        default: {
          const int k = elementwise_kind(s.kind);
          if (k >= 0) elem[k].push_back({s.k, s.measured_s});
        }
      }
    }
  }
  MeasuredOps out;
  for (auto& [k, p] : gemm) out.gemm[k] = LogCurve::from_points(std::move(p), /*economies_of_scale=*/true);
  for (auto& [k, p] : gate_up) out.gate_up[k] = LogCurve::from_points(std::move(p), true);
  for (auto& [k, p] : qkv) out.qkv[k] = LogCurve::from_points(std::move(p), true);
  for (auto& [k, p] : elem) out.elementwise[k] = LogCurve::from_points(std::move(p));
  for (auto& [k, p] : wait) out.ulysses_wait[k] = LogCurve::from_points(std::move(p));
  for (auto& [heads, by_batch] : dec)
    for (auto& [b, p] : by_batch) out.attention[heads].decode_per_seq[b] = LogCurve::from_points(std::move(p));
  for (auto& [heads, by_before] : pre)
    for (auto& [b, p] : by_before) out.attention[heads].prefill[b] = LogCurve::from_points(std::move(p));
  return out;
}

}  // namespace loom::sim
