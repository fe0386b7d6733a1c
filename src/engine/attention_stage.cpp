#include "engine/attention_stage.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "engine/transformer.h"

namespace loom {

std::vector<HeadRun> make_head_runs(int q_begin, int n_q, int kv_begin, int n_kv, int group_size) {
  for (int h = 0; h < n_q; ++h) {
    const int kv = (q_begin + h) / group_size;
    LOOM_CHECK(kv >= kv_begin && kv < kv_begin + n_kv, "query head ", q_begin + h, " needs kv head ", kv);
  }
  std::vector<HeadRun> runs;
  bool uniform = n_q % n_kv == 0;
  for (int h = 0; uniform && h < n_q; ++h) uniform = (q_begin + h) / group_size - kv_begin == h / (n_q / n_kv);
  if (uniform) {
    runs.push_back({0, n_q, 0, n_kv});
    return runs;
  }
  for (int h = 0; h < n_q; ++h) {
    const int kv = (q_begin + h) / group_size - kv_begin;
    if (!runs.empty() && runs.back().kv_begin == kv) {
      ++runs.back().n_q;
    } else {
      runs.push_back({h, 1, kv, 1});
    }
  }
  return runs;
}

kernels::RopeParams rope_params(const ModelConfig& c) {
  kernels::RopeParams r;
  r.head_dim = c.head_dim;
  r.theta = c.rope_theta;
  r.interleaved = c.rope_style == RopeStyle::Interleaved;
  r.llama3 = c.rope_scaling.llama3;
  r.factor = c.rope_scaling.factor;
  r.low_freq_factor = c.rope_scaling.low_freq_factor;
  r.high_freq_factor = c.rope_scaling.high_freq_factor;
  r.original_max_position = c.rope_scaling.original_max_position;
  if (!c.rope_scaling.freq_factors.empty()) {
    LOOM_CHECK(int(c.rope_scaling.freq_factors.size()) == c.head_dim / 2, "rope freq_factors size");
    r.freq_factors = c.rope_scaling.freq_factors.data();
  }
  return r;
}

void store_kv_and_attend(const ForwardBatch& batch, const KvLayout& lay, float* k_layer, float* v_layer,
                         const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv,
                         const std::vector<HeadRun>& head_runs, const int32_t* pos, float* out, int64_t ldo,
                         ThreadPool* pool) {
  const int64_t dh = lay.head_dim;
  const int hk = lay.n_kv_heads;
  const float scale = 1.0f / std::sqrt(float(dh));
  // Scatter the new K/V into the paged cache: [block][head][pos in block][head_dim].
  int64_t t0 = 0;
  for (const ForwardSeq& s : batch.seqs) {
    for (int i = 0; i < s.n_tokens; ++i) {
      const int64_t t = t0 + i, p = s.start_pos + i;
      const int64_t blk = s.block_table[p / lay.block_size];
      const int in_blk = int(p % lay.block_size);
      for (int h = 0; h < hk; ++h) {
        const int64_t off = lay.offset_in_layer(blk, h, in_blk);
        std::memcpy(k_layer + off, k + t * ldkv + h * dh, size_t(dh) * sizeof(float));
        std::memcpy(v_layer + off, v + t * ldkv + h * dh, size_t(dh) * sizeof(float));
      }
    }
    t0 += s.n_tokens;
  }
  // Causal attention per sequence over its pages, one kernel call per head run.
  t0 = 0;
  for (const ForwardSeq& s : batch.seqs) {
    for (const HeadRun& run : head_runs) {
      if (s.n_tokens == 0) break;
      kernels::KvView view;
      view.k = k_layer + run.kv_begin * lay.floats_per_head_block();
      view.v = v_layer + run.kv_begin * lay.floats_per_head_block();
      view.block_table = s.block_table;
      view.block_size = lay.block_size;
      view.block_stride = lay.floats_per_block();
      view.head_stride = lay.floats_per_head_block();
      view.pos_stride = dh;
      const kernels::AttentionShape shape{run.n_q, run.n_kv, int(dh), scale};
      kernels::attention(q + t0 * ldq + run.q_begin * dh, s.n_tokens, ldq, pos + t0, view, 0,
                         s.start_pos + s.n_tokens, shape, out + t0 * ldo + run.q_begin * dh, ldo, nullptr, pool);
    }
    t0 += s.n_tokens;
  }
}

}  // namespace loom
