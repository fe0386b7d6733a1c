// Naive reference kernels: the definitions the optimised kernels are tested against.
//
// Plain loops in the order the math is written, accumulating in double so the reference is
// (much) more accurate than any f32 kernel; the tests then bound |optimised - reference| by the
// f32 rounding of the optimised accumulation order only. Never call these on a hot path.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/weight_tiles.h"
#include "kernels/kernels.h"

namespace loom::kernels {

void matmul_ref(const float* x, int64_t n, int64_t ldx, const WeightView& w, float* y, int64_t ldy,
                bool accumulate) {
  const int64_t rows = w.rows, cols = w.cols;
  LOOM_CHECK(cols % dtype_split_elems(w.dtype) == 0, "cols=", cols);
  std::vector<float> wrow(size_t(std::max<int64_t>(cols, 1)));  // [cols] one dequantized row of W
  std::vector<uint8_t> raw(size_t(std::max<int64_t>(w.row_bytes(), 1)));  // the row's bytes
  for (int64_t r = 0; r < rows; ++r) {
    read_weight_row(w, r, raw.data());
    dequantize_span(w.dtype, raw.data(), w.col_offset, wrow.data(), cols);
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * ldx;
      double acc = 0.0;
      for (int64_t k = 0; k < cols; ++k) acc += double(xi[k]) * double(wrow[size_t(k)]);
      float& out = y[i * ldy + r];
      out = accumulate ? float(double(out) + acc) : float(acc);
    }
  }
}

void matmul_fast_ref(const float* x, int64_t n, int64_t ldx, const WeightView& w, float* y, int64_t ldy,
                     bool accumulate) {
  const int64_t cols = w.cols;
  // Every block type takes the q8 activations (kernels.h, kernels_quant_impl.h).
  const bool q8 = dtype_is_quantized(w.dtype), bf16 = w.dtype == DType::BF16 && cols % 32 == 0;
  std::vector<float> xs(size_t(std::max<int64_t>(n * cols, 1)));  // x as the fast mode sees it
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < cols; b += 32) {
      const float* xi = x + i * ldx + b;
      float* o = xs.data() + i * cols + b;
      const int64_t m = std::min<int64_t>(32, cols - b);
      if (q8) {
        // kernels.h: d = amax / 127, q = round-to-even(x * (127 / amax)); x seen as d * q.
        double amax = 0.0;
        for (int64_t k = 0; k < m; ++k) amax = std::max(amax, double(std::fabs(xi[k])));
        const float famax = float(amax);
        const float d = famax / 127.0f, id = famax > 0.0f ? 127.0f / famax : 0.0f;
        for (int64_t k = 0; k < m; ++k) {
          float q = std::nearbyint(xi[k] * id);
          q = std::min(127.0f, std::max(-127.0f, q));
          o[k] = float(double(d) * double(q));  // exact: 24-bit d times a 7-bit integer
        }
      } else if (bf16) {
        for (int64_t k = 0; k < m; ++k) {
          uint32_t u;
          std::memcpy(&u, &xi[k], 4);
          if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
            o[k] = xi[k];
            continue;
          }
          const uint32_t lsb = (u >> 16) & 1u;
          u = (u + 0x7FFFu + lsb) & 0xFFFF0000u;
          std::memcpy(&o[k], &u, 4);
        }
      } else {
        for (int64_t k = 0; k < m; ++k) o[k] = xi[k];
      }
    }
  // d * q is exact in f32, and the dequantized weights are exact f32 values, so the double
  // products below are the exact products of the quantized values.
  matmul_ref(xs.data(), n, cols, w, y, ldy, accumulate);
}

void rmsnorm_ref(float* out, const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * dim;
    float* ot = out + t * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += double(xt[i]) * double(xt[i]);
    const double inv = 1.0 / std::sqrt(ss / double(dim) + double(eps));
    for (int64_t i = 0; i < dim; ++i) ot[i] = float(double(xt[i]) * inv * double(weight[i]));
  }
}

void swiglu_ref(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = float(g / (1.0 + std::exp(-g)) * double(up[i]));
  }
}

void rope_ref(float* x, int64_t n_tokens, int64_t ld, int n_heads, const int32_t* pos, const RopeParams& p) {
  const int head_dim = p.head_dim, half = head_dim / 2;
  LOOM_CHECK(head_dim > 0 && head_dim % 2 == 0, "head_dim=", head_dim);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  rope_inv_freq(p, inv_freq.data());
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + t * ld + int64_t(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double angle = double(pos[t]) * double(inv_freq[size_t(i)]);
        const double c = std::cos(angle), s = std::sin(angle);
        float* a = p.interleaved ? &v[2 * i] : &v[i];
        float* b = p.interleaved ? &v[2 * i + 1] : &v[i + half];
        const double av = *a, bv = *b;
        *a = float(av * c - bv * s);
        *b = float(av * s + bv * c);
      }
    }
  }
}

void attention_ref(const float* q, int64_t n_q, int64_t ldq, const int32_t* q_pos, const KvView& kv,
                   int64_t kv_begin, int64_t kv_end, const AttentionShape& s, float* out, int64_t ldo,
                   float* lse) {
  const int n_heads = s.n_heads, n_kv_heads = s.n_kv_heads, head_dim = s.head_dim;
  LOOM_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "n_heads=", n_heads, " n_kv_heads=", n_kv_heads);
  const int group = n_heads / n_kv_heads;
  std::vector<double> scores, acc(static_cast<size_t>(head_dim));
  for (int64_t t = 0; t < n_q; ++t) {
    const int64_t end = std::min<int64_t>(int64_t(q_pos[t]) + 1, kv_end);
    for (int h = 0; h < n_heads; ++h) {
      const float* qh = q + t * ldq + int64_t(h) * head_dim;
      float* oh = out + t * ldo + int64_t(h) * head_dim;
      const int kvh = h / group;
      if (end <= kv_begin) {
        for (int d = 0; d < head_dim; ++d) oh[d] = 0.0f;
        if (lse) lse[t * n_heads + h] = -std::numeric_limits<float>::infinity();
        continue;
      }
      scores.assign(size_t(end - kv_begin), 0.0);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = kv_begin; j < end; ++j) {
        const float* k = kv.k_at(j, kvh);
        double dot = 0.0;
        for (int d = 0; d < head_dim; ++d) dot += double(qh[d]) * double(k[d]);
        scores[size_t(j - kv_begin)] = dot * double(s.scale);
        m = std::max(m, scores[size_t(j - kv_begin)]);
      }
      double l = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = kv_begin; j < end; ++j) {
        const double pj = std::exp(scores[size_t(j - kv_begin)] - m);
        l += pj;
        const float* v = kv.v_at(j, kvh);
        for (int d = 0; d < head_dim; ++d) acc[size_t(d)] += pj * double(v[d]);
      }
      for (int d = 0; d < head_dim; ++d) oh[d] = float(acc[size_t(d)] / l);
      if (lse) lse[t * n_heads + h] = float(m + std::log(l));
    }
  }
}

int sample_ref(const float* logits, int n, const SamplingParams& p, float u) {
  LOOM_CHECK(n > 0, "n=", n);
  if (p.temperature <= 0.0f || p.top_k == 1) {
    int best = 0;
    for (int i = 1; i < n; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  // 1. Sort all indices by logit, descending, ties by lower index (a total order).
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[size_t(i)] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  // 2. top-k: keep the first k.
  int kept = n;
  if (p.top_k > 0 && p.top_k < n) kept = p.top_k;
  // 3. Softmax of logit/temperature over the kept set; the normaliser sums in index order.
  const double inv_t = 1.0 / double(p.temperature);
  const double zmax = double(logits[order[0]]) * inv_t;
  std::vector<char> in_set(static_cast<size_t>(n), 0);
  for (int r = 0; r < kept; ++r) in_set[size_t(order[size_t(r)])] = 1;
  std::vector<double> prob(static_cast<size_t>(n), 0.0);
  double total = 0.0;
  for (int i = 0; i < n; ++i) {
    if (!in_set[size_t(i)]) continue;
    prob[size_t(i)] = std::exp(double(logits[i]) * inv_t - zmax);
    total += prob[size_t(i)];
  }
  // 4. top-p: the shortest sorted prefix whose probability mass reaches top_p (at least 1).
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    int r = 0;
    while (r < kept) {
      cum += prob[size_t(order[size_t(r)])] / total;
      ++r;
      if (cum >= double(p.top_p)) break;
    }
    for (int q = r; q < kept; ++q) in_set[size_t(order[size_t(q)])] = 0;
    kept = r;
  }
  // 5. Draw: walk the kept set in index order; pick the first token whose cumulative mass
  //    exceeds u * (kept mass).
  double mass = 0.0;
  for (int i = 0; i < n; ++i)
    if (in_set[size_t(i)]) mass += prob[size_t(i)];
  const double target = double(u) * mass;
  double cum = 0.0;
  int last = -1;
  for (int i = 0; i < n; ++i) {
    if (!in_set[size_t(i)]) continue;
    cum += prob[size_t(i)];
    last = i;
    if (cum > target) return i;
  }
  return last;
}

}  // namespace loom::kernels
