// Public kernel entry points (first version: forwards to the references so the forward pass links).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/kernels.h"

namespace loom::kernels {

void matmul(const float* x, int64_t n, int64_t ldx, const WeightView& w, float* y, int64_t ldy,
            ThreadPool* pool, bool accumulate) {
  matmul_ref(x, n, ldx, w, y, ldy, accumulate);
}

void rmsnorm(float* out, const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps) {
  rmsnorm_ref(out, x, weight, n_tokens, dim, eps);
}

void swiglu(float* out, const float* gate, const float* up, int64_t n) { swiglu_ref(out, gate, up, n); }

void add_bias(float* x, int64_t n, int64_t ldx, const float* bias, int64_t cols) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c) x[i * ldx + c] += bias[c];
}

void rope_inv_freq(const RopeParams& p, float* inv_freq) {
  const int half = p.head_dim / 2;
  for (int i = 0; i < half; ++i) {
    double f = std::pow(double(p.theta), -2.0 * i / double(p.head_dim));
    if (p.llama3) {
      // HF transformers _compute_llama3_parameters.
      const double pi = 3.14159265358979323846;
      const double low_wavelen = p.original_max_position / p.low_freq_factor;
      const double high_wavelen = p.original_max_position / p.high_freq_factor;
      const double wavelen = 2.0 * pi / f;
      if (wavelen < high_wavelen) {
        // high frequency: kept
      } else if (wavelen > low_wavelen) {
        f = f / p.factor;
      } else {
        const double smooth = (p.original_max_position / wavelen - p.low_freq_factor) /
                              (p.high_freq_factor - p.low_freq_factor);
        f = (1.0 - smooth) * f / p.factor + smooth * f;
      }
    }
    inv_freq[i] = float(f);
  }
}

void rope(float* x, int64_t n_tokens, int64_t ld, int n_heads, const int32_t* pos, const RopeParams& p) {
  rope_ref(x, n_tokens, ld, n_heads, pos, p);
}

void attention(const float* q, int64_t n_q, int64_t ldq, const int32_t* q_pos, const KvView& kv,
               int64_t kv_begin, int64_t kv_end, const AttentionShape& s, float* out, int64_t ldo,
               float* lse, ThreadPool* pool) {
  attention_ref(q, n_q, ldq, q_pos, kv, kv_begin, kv_end, s, out, ldo, lse);
}

void merge_attention(const float* const* parts, const float* const* lses, int n_parts, int64_t n_rows,
                     int head_dim, float* out, float* out_lse) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < n_rows; ++r) {
    float m = ninf;
    for (int i = 0; i < n_parts; ++i) m = std::max(m, lses[i][r]);
    float* o = out + r * head_dim;
    if (m == ninf) {  // no part saw a key
      std::fill(o, o + head_dim, 0.0f);
      if (out_lse) out_lse[r] = ninf;
      continue;
    }
    double total = 0.0;
    for (int i = 0; i < n_parts; ++i) total += std::exp(double(lses[i][r]) - m);
    std::vector<double> acc(static_cast<size_t>(head_dim), 0.0);
    for (int i = 0; i < n_parts; ++i) {
      const double wgt = std::exp(double(lses[i][r]) - m) / total;
      if (wgt == 0.0) continue;
      const float* pi = parts[i] + r * head_dim;
      for (int d = 0; d < head_dim; ++d) acc[size_t(d)] += wgt * pi[d];
    }
    for (int d = 0; d < head_dim; ++d) o[d] = float(acc[size_t(d)]);
    if (out_lse) out_lse[r] = float(m + std::log(total));
  }
}

int argmax(const float* logits, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int sample(const float* logits, int n, const SamplingParams& p, float u) { return sample_ref(logits, n, p, u); }

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
#if defined(__x86_64__)
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    c.avx512f = __builtin_cpu_supports("avx512f");
    c.avx512bw = __builtin_cpu_supports("avx512bw");
#endif
    return c;
  }();
  return f;
}

const char* kernel_path() { return "scalar"; }

}  // namespace loom::kernels
