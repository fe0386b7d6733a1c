// Public kernel entry points: argument checks, threading over the pool, and the dispatch to the
// active path's table (dispatch.h). Kernels that gain nothing from hand-written SIMD (rope,
// add_bias, merge_attention, argmax, sample) are written once here.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace loom::kernels {

void detail::fail_out_of_memory(int64_t bytes) {
  fail("kernels: cannot allocate ", bytes, " bytes of scratch for a gemm panel");
}

// ---------------------------------------------------------------- numerics
const char* numerics_name(Numerics n) { return n == Numerics::exact ? "exact" : "fast"; }

Numerics parse_numerics(const char* name, const char* what) {
  if (std::strcmp(name, "exact") == 0) return Numerics::exact;
  if (std::strcmp(name, "fast") == 0) return Numerics::fast;
  fail(what, "='", name, "' is not a numerics mode (expected exact or fast)");
}

namespace {
std::atomic<int> g_numerics{-1};  // -1: not read yet
}  // namespace

Numerics default_numerics() {
  int v = g_numerics.load(std::memory_order_acquire);
  if (v < 0) {
    const char* env = std::getenv("LOOM_NUMERICS");
    v = int(env && *env ? parse_numerics(env, "LOOM_NUMERICS") : Numerics::fast);
    g_numerics.store(v, std::memory_order_release);
  }
  return Numerics(v);
}

void set_default_numerics(Numerics n) { g_numerics.store(int(n), std::memory_order_release); }

bool numerics_applies(Numerics numerics, DType dtype) {
  return numerics == Numerics::fast && (dtype_is_quantized(dtype) || dtype == DType::BF16);
}

void quantize_activations_q8(const float* x, int64_t cols, int8_t* q, float* d, int32_t* qsum) {
  for (int64_t b = 0; b < cols / kQ8BlockSize; ++b) {
    const float* xb = x + b * kQ8BlockSize;
    float amax = 0.0f;
    for (int i = 0; i < kQ8BlockSize; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    d[b] = amax / 127.0f;
    int32_t s = 0;
    for (int i = 0; i < kQ8BlockSize; ++i) {
      // x * (127 / amax) is within [-127, 127] up to one rounding: the clamp only catches that.
      const float v = std::nearbyint(xb[i] * id);
      const int32_t qi = v > 127.0f ? 127 : v < -127.0f ? -127 : int32_t(v);
      q[b * kQ8BlockSize + i] = int8_t(qi);
      s += qi;
    }
    qsum[b] = s;
  }
}

uint16_t round_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays (quiet) NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return uint16_t(u >> 16);
}

namespace {

// The fast mode's activations of one call (per thread: ranks may be threads of one process).
struct FastScratch {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> s;
  std::vector<float> m;
  std::vector<int32_t> s16;
  std::vector<uint32_t> b;
  std::vector<float> f;
};
thread_local FastScratch t_fast;

// Fills a.xq/xd/xs (q8_0) or a.xb (bf16) from x.
void quantize_for(detail::MatmulArgs& a) {
  FastScratch& f = t_fast;
  const int64_t n = a.n, cols = a.cols;
  if (dtype_is_quantized(a.dtype)) {
    const int64_t nb = cols / kQ8BlockSize;
    if (int64_t(f.q.size()) < n * cols) f.q.resize(size_t(n * cols));
    if (int64_t(f.d.size()) < n * nb) {
      f.d.resize(size_t(n * nb));
      f.s.resize(size_t(n * nb));
    }
    auto quant = detail::active_table().quantize_q8;
    if (!quant) quant = &quantize_activations_q8;
    for (int64_t t = 0; t < n; ++t) quant(a.x + t * a.ldx, cols, f.q.data() + t * cols, f.d.data() + t * nb, f.s.data() + t * nb);
    a.xq = f.q.data();
    a.xd = f.d.data();
    a.xs = f.s.data();
    if (a.dtype != DType::Q8_0) {
      // kernels_quant_impl.h: xm = d * float(qsum) per block, xs16 = the sums of each 16 values.
      if (int64_t(f.m.size()) < n * nb) {
        f.m.resize(size_t(n * nb));
        f.s16.resize(size_t(2 * n * nb));
      }
      for (int64_t i = 0; i < n * nb; ++i) {
        f.m[size_t(i)] = f.d[size_t(i)] * float(f.s[size_t(i)]);
        const int8_t* q = f.q.data() + i * kQ8BlockSize;
        int32_t lo = 0;
        for (int k = 0; k < 16; ++k) lo += q[k];
        f.s16[size_t(2 * i)] = lo;
        f.s16[size_t(2 * i + 1)] = f.s[size_t(i)] - lo;
      }
      a.xm = f.m.data();
      a.xs16 = f.s16.data();
    }
  } else {
    if (int64_t(f.b.size()) < n * cols / 2) f.b.resize(size_t(n * cols / 2));
    if (n > 1 && int64_t(f.f.size()) < n * cols) f.f.resize(size_t(n * cols));
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = a.x + t * a.ldx;
      uint32_t* o = f.b.data() + t * cols / 2;
      for (int64_t c = 0; c < cols; c += 32)
        for (int j = 0; j < 16; ++j)
          o[c / 2 + j] = uint32_t(round_to_bf16(xt[c + j])) | (uint32_t(round_to_bf16(xt[c + j + 16])) << 16);
      if (n > 1) {
        float* xf = f.f.data() + t * cols;
        for (int64_t c = 0; c < cols; c += 32)
          for (int j = 0; j < 16; ++j) {
            const uint32_t lo = o[c / 2 + j] << 16, hi = o[c / 2 + j] & 0xFFFF0000u;
            std::memcpy(xf + c + j, &lo, 4);
            std::memcpy(xf + c + j + 16, &hi, 4);
          }
      }
    }
    a.xb = f.b.data();
    a.xf = n > 1 ? f.f.data() : nullptr;
  }
}

}  // namespace

// ---------------------------------------------------------------- matmul
void matmul(const float* x, int64_t n, int64_t ldx, const WeightView& w, float* y, int64_t ldy,
            ThreadPool* pool, bool accumulate, Numerics numerics) {
  LOOM_CHECK(n >= 0 && w.rows >= 0 && w.cols >= 0, "n=", n, " rows=", w.rows, " cols=", w.cols);
  LOOM_CHECK(w.cols % dtype_split_elems(w.dtype) == 0 && w.col_offset % dtype_split_elems(w.dtype) == 0 &&
                 w.col_offset >= 0 && w.col_offset < dtype_block_elems(w.dtype),
             "cols=", w.cols, " col_offset=", w.col_offset, " dtype=", dtype_name(w.dtype));
  LOOM_CHECK(dtype_is_k_quant(w.dtype) || w.col_offset == 0, "col_offset=", w.col_offset, " ", dtype_name(w.dtype));
  LOOM_CHECK(n <= 1 || (ldx >= w.cols && ldy >= w.rows), "ldx=", ldx, " ldy=", ldy);
  if (n == 0 || w.rows == 0) return;
  detail::MatmulArgs a;
  a.x = x;
  a.n = n;
  a.ldx = ldx;
  a.w = static_cast<const uint8_t*>(w.data);
  a.dtype = w.dtype;
  a.rows = w.rows;
  a.cols = w.cols;
  a.row_stride = w.row_stride;
  a.tile_rows = w.tile_rows;
  a.tile_stride = w.tile_stride;
  a.col_offset = w.col_offset;
  LOOM_CHECK(!w.tiled() || w.tile_rows == kTileRows, "tile_rows=", w.tile_rows);
  a.y = y;
  a.ldy = ldy;
  a.accumulate = accumulate;
  const detail::KernelTable& tab = detail::active_table();
  auto rows_fn = tab.matmul_rows;
  // Fast mode: bf16 needs whole 32-column chunks (else the call stays exact).
  if (numerics_applies(numerics, w.dtype) && w.cols > 0 && (w.dtype != DType::BF16 || w.cols % 32 == 0)) {
    quantize_for(a);
    rows_fn = w.dtype == DType::Q8_0 ? tab.q8_fast_rows : w.dtype == DType::BF16 ? tab.bf16_fast_rows : tab.quant_fast_rows;
  }
  // Small products stay on the calling thread: waking workers costs more than they save.
  const bool small = double(n) * double(w.rows) * double(w.cols) < 64.0 * 1024;
  if (small || !pool || pool->size() == 1 || w.rows < 32) {
    rows_fn(a, 0, w.rows);
    return;
  }
  // Threads take chunks of rows from a shared counter rather than fixed shares, so a worker
  // that is descheduled (cores shared with other ranks or processes) delays only its current
  // chunk. Chunks are whole 16-row units (so they start on row-tile boundaries), about 8 per thread; the gemm packs x once per chunk,
  // so its chunks are at least 64 rows.
  const int nth = pool->size();
  constexpr int64_t kUnit = 16;
  const int64_t min_rows = n > 4 ? 64 : 32;
  int64_t chunk = (w.rows + int64_t(nth) * 8 - 1) / (int64_t(nth) * 8);
  chunk = std::max(min_rows, (chunk + kUnit - 1) / kUnit * kUnit);
  std::atomic<int64_t> next{0};
  pool->run([&](int, int) {
    for (;;) {
      const int64_t r0 = next.fetch_add(chunk, std::memory_order_relaxed);
      if (r0 >= w.rows) break;
      rows_fn(a, r0, std::min(w.rows, r0 + chunk));
    }
  });
}

// ---------------------------------------------------------------- elementwise
void rmsnorm(float* out, const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps) {
  detail::active_table().rmsnorm(out, x, weight, n_tokens, dim, eps);
}

void swiglu(float* out, const float* gate, const float* up, int64_t n) {
  detail::active_table().swiglu(out, gate, up, n);
}

void add_bias(float* x, int64_t n, int64_t ldx, const float* bias, int64_t cols) {
  for (int64_t i = 0; i < n; ++i) {
    float* xi = x + i * ldx;
    for (int64_t c = 0; c < cols; ++c) xi[c] += bias[c];
  }
}

// ---------------------------------------------------------------- RoPE
void rope_inv_freq(const RopeParams& p, float* inv_freq) {
  LOOM_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0, "head_dim=", p.head_dim);
  const int half = p.head_dim / 2;
  for (int i = 0; i < half; ++i) {
    double f = std::pow(double(p.theta), -2.0 * i / double(p.head_dim));
    if (p.llama3) {
      // HF transformers' _compute_llama3_parameters: high frequencies (short wavelengths) kept,
      // low frequencies divided by `factor`, a linear blend in between.
      const double pi = 3.14159265358979323846;
      const double orig = p.original_max_position;
      const double low_wavelen = orig / p.low_freq_factor, high_wavelen = orig / p.high_freq_factor;
      const double wavelen = 2.0 * pi / f;
      if (wavelen < high_wavelen) {
        // kept
      } else if (wavelen > low_wavelen) {
        f = f / p.factor;
      } else {
        const double smooth = (orig / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
        f = (1.0 - smooth) * f / p.factor + smooth * f;
      }
    }
    if (p.freq_factors) f /= double(p.freq_factors[i]);
    inv_freq[i] = float(f);
  }
}

void rope(float* x, int64_t n_tokens, int64_t ld, int n_heads, const int32_t* pos, const RopeParams& p) {
  const int head_dim = p.head_dim, half = head_dim / 2;
  LOOM_CHECK(head_dim > 0 && head_dim % 2 == 0 && ld >= int64_t(n_heads) * head_dim, "head_dim=", head_dim,
             " ld=", ld);
  std::vector<float> inv_freq(static_cast<size_t>(half)), cs(static_cast<size_t>(head_dim));
  rope_inv_freq(p, inv_freq.data());
  float* c = cs.data();
  float* s = cs.data() + half;
  for (int64_t t = 0; t < n_tokens; ++t) {
    // The angle in double (pos * inv_freq reaches 1e5 rad at long contexts), once per token.
    for (int i = 0; i < half; ++i) {
      const double angle = double(pos[t]) * double(inv_freq[size_t(i)]);
      c[i] = float(std::cos(angle));
      s[i] = float(std::sin(angle));
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + t * ld + int64_t(h) * head_dim;
      if (p.interleaved) {
        for (int i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c[i] - b * s[i];
          v[2 * i + 1] = a * s[i] + b * c[i];
        }
      } else {
        float* v2 = v + half;
        for (int i = 0; i < half; ++i) {  // vectorised by the compiler
          const float a = v[i], b = v2[i];
          v[i] = a * c[i] - b * s[i];
          v2[i] = a * s[i] + b * c[i];
        }
      }
    }
  }
}

// ---------------------------------------------------------------- attention
void attention(const float* q, int64_t n_q, int64_t ldq, const int32_t* q_pos, const KvView& kv,
               int64_t kv_begin, int64_t kv_end, const AttentionShape& s, float* out, int64_t ldo,
               float* lse, ThreadPool* pool) {
  LOOM_CHECK(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "n_heads=", s.n_heads,
             " n_kv_heads=", s.n_kv_heads);
  LOOM_CHECK(s.head_dim > 0 && s.head_dim <= detail::kMaxHeadDim, "head_dim=", s.head_dim, " limit ",
             detail::kMaxHeadDim);
  LOOM_CHECK(kv.block_size > 0, "block_size=", kv.block_size);
  detail::AttentionArgs a;
  a.q = q;
  a.ldq = ldq;
  a.q_pos = q_pos;
  a.kv = kv;
  a.kv_begin = kv_begin;
  a.kv_end = kv_end;
  a.n_heads = s.n_heads;
  a.n_kv_heads = s.n_kv_heads;
  a.head_dim = s.head_dim;
  a.scale = s.scale;
  a.out = out;
  a.ldo = ldo;
  a.lse = lse;
  const detail::KernelTable& tab = detail::active_table();
  if (n_q == 0 || s.n_heads == 0) return;
  const int nth = pool ? pool->size() : 1;
  // Heads of one GQA group share the K/V reads; split groups only to give every thread work.
  const int group = s.n_heads / s.n_kv_heads;
  int hpi = 1;
  for (int g = std::min(group, detail::kMaxHeadsPerItem); g > 1; --g)
    if (group % g == 0) {
      hpi = g;
      break;
    }
  while (hpi > 1 && n_q * (s.n_heads / hpi) < 4 * int64_t(nth)) {
    int next = hpi - 1;
    while (next > 1 && group % next != 0) --next;
    hpi = next;
  }
  a.heads_per_item = hpi;
  const int64_t items = n_q * (s.n_heads / hpi);
  if (nth == 1 || items == 1) {
    tab.attention_items(a, 0, items);
    return;
  }
  // Causal rows differ in length: threads take small chunks from a shared counter.
  std::atomic<int64_t> next{0};
  const int64_t chunk = std::max<int64_t>(1, items / (int64_t(nth) * 8));
  pool->run([&](int, int) {
    for (;;) {
      const int64_t i0 = next.fetch_add(chunk, std::memory_order_relaxed);
      if (i0 >= items) break;
      tab.attention_items(a, i0, std::min(items, i0 + chunk));
    }
  });
}

void merge_attention(const float* const* parts, const float* const* lses, int n_parts, int64_t n_rows,
                     int head_dim, float* out, float* out_lse) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> wgt(static_cast<size_t>(std::max(n_parts, 1)));
  for (int64_t r = 0; r < n_rows; ++r) {
    float m = ninf;
    for (int i = 0; i < n_parts; ++i) m = std::max(m, lses[i][r]);
    float* o = out + r * head_dim;
    if (m == ninf) {  // no part saw a key
      std::fill(o, o + head_dim, 0.0f);
      if (out_lse) out_lse[r] = ninf;
      continue;
    }
    // Weights relative to the largest LSE: exp(lse_i - m) in (0, 1], a -inf part weighs 0.
    double total = 0.0;
    for (int i = 0; i < n_parts; ++i) {
      wgt[size_t(i)] = float(std::exp(double(lses[i][r]) - double(m)));
      total += wgt[size_t(i)];
    }
    const float inv_total = float(1.0 / total);
    std::fill(o, o + head_dim, 0.0f);
    for (int i = 0; i < n_parts; ++i) {
      const float wi = wgt[size_t(i)] * inv_total;
      if (wi == 0.0f) continue;
      const float* pi = parts[i] + r * head_dim;
      for (int d = 0; d < head_dim; ++d) o[d] += wi * pi[d];
    }
    if (out_lse) out_lse[r] = float(double(m) + std::log(total));
  }
}

// ---------------------------------------------------------------- sampling
int argmax(const float* logits, int n) {
  LOOM_CHECK(n > 0, "n=", n);
  int best = 0;
  float bv = logits[0];
  for (int i = 1; i < n; ++i)
    if (logits[i] > bv) {
      bv = logits[i];
      best = i;
    }
  return best;
}

// Same procedure and the same floating-point operations as sample_ref (see kernels.h), without
// sorting the whole vocabulary: top-k selects with nth_element, top-p sorts a growing prefix.
int sample(const float* logits, int n, const SamplingParams& p, float u) {
  LOOM_CHECK(n > 0, "n=", n);
  if (p.temperature <= 0.0f || p.top_k == 1) return argmax(logits, n);
  auto before = [logits](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const int top = argmax(logits, n);
  const double inv_t = 1.0 / double(p.temperature);
  const double zmax = double(logits[top]) * inv_t;
  // The kept set is always a prefix of the order: token i is kept iff it is not after `last`.
  int last = -1;  // -1: all tokens kept
  std::vector<int> order;
  int kept = n;
  if (p.top_k > 0 && p.top_k < n) {
    order.resize(size_t(n));
    for (int i = 0; i < n; ++i) order[size_t(i)] = i;
    std::nth_element(order.begin(), order.begin() + (p.top_k - 1), order.end(), before);
    order.resize(size_t(p.top_k));
    kept = p.top_k;
    last = *std::max_element(order.begin(), order.end(), before);  // the k-th in the order
  }
  auto in_set = [&](int i) { return last < 0 || !before(last, i); };
  double total = 0.0;
  for (int i = 0; i < n; ++i)
    if (in_set(i)) total += std::exp(double(logits[i]) * inv_t - zmax);
  if (p.top_p < 1.0f) {
    if (order.empty()) {  // no top-k: candidates are all tokens
      order.resize(size_t(n));
      for (int i = 0; i < n; ++i) order[size_t(i)] = i;
    }
    // Sort a prefix of m candidates; if its mass does not reach top_p, sort a longer one.
    for (int m = std::min(kept, 64);; m = std::min(kept, m * 8)) {
      std::partial_sort(order.begin(), order.begin() + m, order.end(), before);
      double cum = 0.0;
      int r = 0;
      bool reached = false;
      while (r < m) {
        cum += std::exp(double(logits[order[size_t(r)]]) * inv_t - zmax) / total;
        ++r;
        if (cum >= double(p.top_p)) {
          reached = true;
          break;
        }
      }
      if (reached || m == kept) {
        last = order[size_t(r - 1)];
        break;
      }
    }
  }
  double mass = 0.0;
  for (int i = 0; i < n; ++i)
    if (in_set(i)) mass += std::exp(double(logits[i]) * inv_t - zmax);
  const double target = double(u) * mass;
  double cum = 0.0;
  int chosen = -1;
  for (int i = 0; i < n; ++i) {
    if (!in_set(i)) continue;
    cum += std::exp(double(logits[i]) * inv_t - zmax);
    chosen = i;
    if (cum > target) return i;
  }
  return chosen;
}

}  // namespace loom::kernels
