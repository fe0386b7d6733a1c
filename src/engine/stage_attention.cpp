// Attention stages (stage.h): head-parallel (TP, shift config, single rank) and Ulysses (SP x TP),
// the shared paged KV write + attention, and the stage factory.
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "core/op_timing.h"
#include "engine/stage.h"

namespace loom {

// ---------------------------------------------------------------------------------------------
// rows, RoPE, KV + attention

void make_step_rows(const ForwardBatch& batch, const TokenShare& share, StepRows& rows) {
  rows.seqs.clear();
  rows.seq_row.clear();
  rows.tokens.clear();
  rows.pos.clear();
  int64_t t = 0;
  for (const ForwardSeq& s : batch.seqs) {
    LOOM_CHECK(s.n_tokens >= 0 && t + s.n_tokens <= int64_t(batch.tokens.size()), "batch rows");
    const bool mine = share.dp_degree == 1 || ((s.seq_id % share.dp_degree) + share.dp_degree) % share.dp_degree ==
                                                  share.dp_index;
    if (mine && s.n_tokens > 0) {
      rows.seqs.push_back(s);
      rows.seq_row.push_back(int64_t(rows.tokens.size()));
      for (int i = 0; i < s.n_tokens; ++i) {
        rows.tokens.push_back(batch.tokens[size_t(t + i)]);
        rows.pos.push_back(int32_t(s.start_pos + i));
      }
    }
    t += s.n_tokens;
  }
  LOOM_CHECK(t == int64_t(batch.tokens.size()), "sequences cover ", t, " of ", batch.tokens.size(), " tokens");
  rows.n = int64_t(rows.tokens.size());
  rows.slice = sp_token_slice(rows.n, share.sp_degree, share.sp_index);
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

void store_kv_and_attend(const StepRows& rows, int layer, KvStore& kv, const std::vector<int>& q_heads,
                         const std::vector<int>& kv_heads, int group_size, const float* q, int64_t ldq,
                         const float* k, const float* v, int64_t ldkv, float* out, int64_t ldo, ThreadPool* pool) {
  optime::Scope timed(optime::Op::Attention);
  const int64_t dh = kv.head_dim(), B = kv.block_size();
  const float scale = 1.0f / std::sqrt(float(dh));
  // Scatter the new K/V rows into their pages: [block_size][head_dim] per (layer, kv head, block).
  for (size_t i = 0; i < rows.seqs.size(); ++i) {
    const ForwardSeq& s = rows.seqs[i];
    const int64_t r0 = rows.seq_row[i];
    for (size_t j = 0; j < kv_heads.size(); ++j) {
      const std::span<const int32_t> table = kv.table(s.seq_id, layer, kv_heads[j]);
      for (int t = 0; t < s.n_tokens; ++t) {
        const int64_t p = s.start_pos + t, blk = p / B;
        LOOM_CHECK(blk < int64_t(table.size()) && table[size_t(blk)] != kNoPage, "no KV page for sequence ",
                   s.seq_id, " layer ", layer, " kv head ", kv_heads[j], " block ", blk);
        const int32_t page = table[size_t(blk)];
        std::memcpy(kv.k(page) + (p % B) * dh, k + (r0 + t) * ldkv + int64_t(j) * dh, size_t(dh) * sizeof(float));
        std::memcpy(kv.v(page) + (p % B) * dh, v + (r0 + t) * ldkv + int64_t(j) * dh, size_t(dh) * sizeof(float));
      }
    }
  }
  // Head runs: the local query heads that share one KV head (q uses kv head q / G).
  struct Run {
    int kv_local, q_begin, n_q;
  };
  std::vector<Run> runs;
  for (size_t x = 0; x < q_heads.size(); ++x) {
    const int kvh = q_heads[x] / group_size;
    int j = -1;
    for (size_t y = 0; y < kv_heads.size(); ++y)
      if (kv_heads[y] == kvh) j = int(y);
    LOOM_CHECK(j >= 0, "query head ", q_heads[x], " needs kv head ", kvh, ", which this rank does not hold");
    if (!runs.empty() && runs.back().kv_local == j && runs.back().q_begin + runs.back().n_q == int(x)) {
      ++runs.back().n_q;
    } else {
      runs.push_back({j, int(x), 1});
    }
  }
  // One kernel call per (sequence, run): long prefills split inside the call over (query, head),
  // the small ones (decodes) are spread over the pool as whole calls.
  struct Job {
    size_t seq;
    Run run;
  };
  const int nth = pool ? pool->size() : 1;
  std::vector<Job> small;
  auto call = [&](const Job& jb, ThreadPool* p) {
    const ForwardSeq& s = rows.seqs[jb.seq];
    const int64_t r0 = rows.seq_row[jb.seq];
    const std::span<const int32_t> table = kv.table(s.seq_id, layer, kv_heads[size_t(jb.run.kv_local)]);
    const kernels::KvView view = page_view(kv, table.data());
    const kernels::AttentionShape shape{jb.run.n_q, 1, int(dh), scale};
    kernels::attention(q + r0 * ldq + int64_t(jb.run.q_begin) * dh, s.n_tokens, ldq, rows.pos.data() + r0, view, 0,
                       s.start_pos + s.n_tokens, shape, out + r0 * ldo + int64_t(jb.run.q_begin) * dh, ldo, nullptr,
                       p);
  };
  for (size_t i = 0; i < rows.seqs.size(); ++i)
    for (const Run& r : runs) {
      const Job jb{i, r};
      if (nth > 1 && int64_t(rows.seqs[i].n_tokens) * r.n_q >= 4 * int64_t(nth)) {
        call(jb, pool);
      } else {
        small.push_back(jb);
      }
    }
  if (small.empty()) return;
  std::atomic<size_t> next{0};
  parallel_run(small.size() > 1 ? pool : nullptr, [&](int, int) {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < small.size();) call(small[i], nullptr);
  });
}

// q = xn Wq^T (+bq), k, v likewise, then RoPE on q and k at positions pos.  // [m, hq*dh], [m, hk*dh]
void project_qkv(const ShardLayerWeights& W, const float* xn, int64_t m, int64_t d, int hq, int hk, int64_t dh,
                 const int32_t* pos, const kernels::RopeParams& rope, float* q, float* k, float* v, ThreadPool* pool,
                 kernels::Numerics numerics) {
  const int64_t q_dim = hq * dh, kv_dim = hk * dh;
  {
    optime::Scope timed(optime::Op::Matmul);
    kernels::matmul(xn, m, d, W.wq, q, q_dim, pool, false, numerics);
    kernels::matmul(xn, m, d, W.wk, k, kv_dim, pool, false, numerics);
    kernels::matmul(xn, m, d, W.wv, v, kv_dim, pool, false, numerics);
  }
  optime::Scope timed(optime::Op::Elementwise);
  if (W.bq) {
    kernels::add_bias(q, m, q_dim, W.bq, q_dim);
    kernels::add_bias(k, m, kv_dim, W.bk, kv_dim);
    kernels::add_bias(v, m, kv_dim, W.bv, kv_dim);
  }
  kernels::rope(q, m, q_dim, hq, pos, rope);
  kernels::rope(k, m, kv_dim, hk, pos, rope);
}

kernels::KvView page_view(const KvStore& kv, const int32_t* pages) {
  kernels::KvView view;
  view.k = kv.k_base();
  view.v = kv.v_base();
  view.block_table = pages;
  view.block_size = kv.block_size();
  view.block_stride = kv.page_floats();
  view.head_stride = 0;
  view.pos_stride = kv.head_dim();
  return view;
}

namespace {

void all_reduce(Communicator& g, float* data, int64_t n) {
  optime::Scope timed(optime::Op::Collective);
  if (g.size() > 1) g.all_reduce_sum(data, size_t(n));
}

// ---------------------------------------------------------------------------------------------
// HeadParallel: TP (PLANS.md "TP(t)"), the shift config (Shift 3.3.1), a single rank.

class HeadParallelAttention final : public AttentionStage {
 public:
  explicit HeadParallelAttention(const StageContext& c) : c_(c), reduce_(c.groups->get("ffn-tp")) {
    const RankLayout& L = c_.layout;
    LOOM_CHECK(L.tokens.sp_degree == 1 && L.kv_shards == 1, "head-parallel attention with SP or KVP");
    LOOM_CHECK(L.q_heads == L.proj_q_heads && L.kv_heads == L.proj_kv_heads && L.out_heads == L.proj_q_heads,
               "head-parallel attention needs one head set for projection, attention and Wo");
  }
  const char* name() const override { return "head-parallel"; }

  void forward(int layer, const StepRows& rows, const float* xn, float* out) override {
    const ModelConfig& cfg = c_.model->config;
    const ShardLayerWeights& W = c_.layer(layer);
    const int64_t n = rows.n, d = cfg.d_model, dh = cfg.head_dim;
    const int hq = int(c_.layout.q_heads.size()), hk = int(c_.layout.kv_heads.size());
    const int64_t q_dim = hq * dh, kv_dim = hk * dh;
    grow(n, q_dim, kv_dim);
    ThreadPool* pool = c_.pool;
    project_qkv(W, xn, n, d, hq, hk, dh, rows.pos.data(), c_.rope, q_.data(), k_.data(), v_.data(), pool, c_.numerics);
    store_kv_and_attend(rows, layer, *c_.kv, c_.layout.q_heads, c_.layout.kv_heads, cfg.group_size(), q_.data(),
                        q_dim, k_.data(), v_.data(), kv_dim, att_.data(), q_dim, pool);
    {
      optime::Scope timed(optime::Op::Matmul);
      kernels::matmul(att_.data(), n, q_dim, W.wo, out, d, pool, false, c_.numerics);
    }
    all_reduce(reduce_, out, n * d);
  }

 private:
  void grow(int64_t n, int64_t q_dim, int64_t kv_dim) {
    if (n <= rows_) return;
    q_.resize(size_t(n * q_dim));
    k_.resize(size_t(n * kv_dim));
    v_.resize(size_t(n * kv_dim));
    att_.resize(size_t(n * q_dim));
    rows_ = n;
  }
  StageContext c_;
  Communicator& reduce_;
  int64_t rows_ = 0;
  AlignedBuffer<float> q_, k_, v_, att_;
};

// ---------------------------------------------------------------------------------------------
// Ulysses: SP(s) x TP(t) (Shift 3.2, Algorithm 1; PLANS.md "SP(s) x TP(t)").

class UlyssesAttention final : public AttentionStage {
 public:
  explicit UlyssesAttention(const StageContext& c)
      : c_(c), sp_(c.groups->get("sp")), reduce_(c.groups->get("ffn-tp")) {
    const RankLayout& L = c_.layout;
    const int s = L.tokens.sp_degree;
    LOOM_CHECK(s > 1 && sp_.size() == s && sp_.rank() == L.sp, "SP group of sp rank ", L.sp);
    LOOM_CHECK(int(L.q_heads.size()) * s == int(L.proj_q_heads.size()), "query heads after the all-to-all");
    LOOM_CHECK(L.out_heads == L.proj_q_heads, "Ulysses Wo is the TP shard's");
    // SP peer j's attention KV heads: they come from this TP shard's projection (PLANS.md).
    const std::vector<int> peers = c_.plan.mesh().group(L.rank, Axis::Sp);
    for (int j = 0; j < s; ++j) {
      const RankLayout peer = rank_layout(c_.plan, c_.shape, peers[size_t(j)]);
      LOOM_CHECK(peer.tp == L.tp && peer.sp == j && peer.kv_heads.size() == L.kv_heads.size(), "SP peer ", j);
      LOOM_CHECK(peer.kv_heads.front() >= L.proj_kv_heads.front() && peer.kv_heads.back() <= L.proj_kv_heads.back(),
                 "SP peer ", j, "'s KV heads are not in this TP shard");
      peer_kv_local_.push_back(peer.kv_heads.front() - L.proj_kv_heads.front());
    }
  }
  const char* name() const override { return "ulysses"; }

  void forward(int layer, const StepRows& rows, const float* xn, float* out) override {
    const ModelConfig& cfg = c_.model->config;
    const RankLayout& L = c_.layout;
    const ShardLayerWeights& W = c_.layer(layer);
    const int64_t d = cfg.d_model, dh = cfg.head_dim, s = L.tokens.sp_degree;
    const int hq = int(L.proj_q_heads.size()), hk = int(L.proj_kv_heads.size());
    const int hqa = int(L.q_heads.size()), hka = int(L.kv_heads.size());
    const int64_t q_dim = hq * dh, kv_dim = hk * dh, qa_dim = hqa * dh, ka_dim = hka * dh;
    const int64_t row = qa_dim + 2 * ka_dim;  // one token of one peer's all-to-all chunk
    const int64_t n = rows.n, m = rows.m(), n_pad = m * s;
    ThreadPool* pool = c_.pool;
    grow(m, s, q_dim, kv_dim, qa_dim, ka_dim);
    // Positions of the slice (padded rows at position 0: they write no KV and are never read).
    for (int64_t i = 0; i < m; ++i) {
      const int64_t g = rows.slice.padded.begin + i;
      slice_pos_[size_t(i)] = g < n ? rows.pos[size_t(g)] : 0;
    }
    // Algorithm 1 line 3: Q/K/V of the slice with the TP shard  // [m, hq*dh], [m, hk*dh] x2
    project_qkv(W, xn, m, d, hq, hk, dh, slice_pos_.data(), c_.rope, q_.data(), k_.data(), v_.data(), pool, c_.numerics);

    // Line 4: one fused all-to-all. Chunk j, per token: peer j's query heads (TP-local
    // [j*hqa, (j+1)*hqa)), then k and v of its KV heads (GQA replication in the send buffer,
    // Shift 3.2.1).  // send [s][m][row]
    const size_t chunk = size_t(m * row);
    std::optional<optime::Scope> pack(std::in_place, optime::Op::Elementwise);
    for (int64_t j = 0; j < s; ++j) {
      const int64_t kv_local = peer_kv_local_[size_t(j)];
      float* dst = send_.data() + j * int64_t(chunk);
      for (int64_t t = 0; t < m; ++t, dst += row) {
        std::memcpy(dst, q_.data() + t * q_dim + j * qa_dim, size_t(qa_dim) * sizeof(float));
        std::memcpy(dst + qa_dim, k_.data() + t * kv_dim + kv_local * dh, size_t(ka_dim) * sizeof(float));
        std::memcpy(dst + qa_dim + ka_dim, v_.data() + t * kv_dim + kv_local * dh, size_t(ka_dim) * sizeof(float));
      }
    }
    pack.reset();
    {
      optime::Scope timed(optime::Op::Collective);
      sp_.all_to_all(send_.data(), recv_.data(), chunk);
    }
    pack.emplace(optime::Op::Elementwise);
    // Chunk i came from SP rank i: padded tokens [i*m, (i+1)*m).  // [n', ...]
    for (int64_t i = 0; i < s; ++i) {
      const float* src = recv_.data() + i * int64_t(chunk);
      for (int64_t t = 0; t < m; ++t, src += row) {
        const int64_t g = i * m + t;
        std::memcpy(qa_.data() + g * qa_dim, src, size_t(qa_dim) * sizeof(float));
        std::memcpy(ka_.data() + g * ka_dim, src + qa_dim, size_t(ka_dim) * sizeof(float));
        std::memcpy(va_.data() + g * ka_dim, src + qa_dim + ka_dim, size_t(ka_dim) * sizeof(float));
      }
    }
    pack.reset();
    // Line 5: the n real tokens' K/V into the cache (the same heads TP(P) in the shift order stores
    // on this rank, Shift 3.3.1), causal attention per sequence.
    store_kv_and_attend(rows, layer, *c_.kv, L.q_heads, L.kv_heads, cfg.group_size(), qa_.data(), qa_dim,
                        ka_.data(), va_.data(), ka_dim, att_.data(), qa_dim, pool);
    std::memset(att_.data() + n * qa_dim, 0, size_t((n_pad - n) * qa_dim) * sizeof(float));
    // Line 6: back to the token split; from SP rank i come TP-local heads [i*hqa, (i+1)*hqa).
    {
      optime::Scope timed(optime::Op::Collective);
      sp_.all_to_all(att_.data(), recv_.data(), size_t(m * qa_dim));
    }
    pack.emplace(optime::Op::Elementwise);
    for (int64_t t = 0; t < m; ++t)
      for (int64_t i = 0; i < s; ++i)
        std::memcpy(att_slice_.data() + t * q_dim + i * qa_dim, recv_.data() + (i * m + t) * qa_dim,
                    size_t(qa_dim) * sizeof(float));
    pack.reset();
    // Lines 7-8: Wo (TP column shard), all-reduce over TP.
    {
      optime::Scope timed(optime::Op::Matmul);
      kernels::matmul(att_slice_.data(), m, q_dim, W.wo, out, d, pool, false, c_.numerics);
    }
    all_reduce(reduce_, out, m * d);
  }

 private:
  void grow(int64_t m, int64_t s, int64_t q_dim, int64_t kv_dim, int64_t qa_dim, int64_t ka_dim) {
    if (m <= rows_) return;
    const int64_t row = qa_dim + 2 * ka_dim;
    q_.resize(size_t(m * q_dim));
    k_.resize(size_t(m * kv_dim));
    v_.resize(size_t(m * kv_dim));
    send_.resize(size_t(s * m * row));
    recv_.resize(size_t(s * m * row));
    qa_.resize(size_t(s * m * qa_dim));
    ka_.resize(size_t(s * m * ka_dim));
    va_.resize(size_t(s * m * ka_dim));
    att_.resize(size_t(s * m * qa_dim));
    att_slice_.resize(size_t(m * q_dim));
    slice_pos_.resize(size_t(m));
    rows_ = m;
  }
  StageContext c_;
  Communicator& sp_;
  Communicator& reduce_;
  std::vector<int> peer_kv_local_;
  int64_t rows_ = 0;
  AlignedBuffer<float> q_, k_, v_, send_, recv_, qa_, ka_, va_, att_, att_slice_;
  std::vector<int32_t> slice_pos_;
};

}  // namespace

std::unique_ptr<AttentionStage> make_helix_attention(const StageContext& c);  // stage_helix.cpp

std::unique_ptr<AttentionStage> make_attention_stage(const StageContext& c) {
  const RankLayout& L = c.layout;
  if (L.kv_shards > 1) return make_helix_attention(c);
  if (L.tokens.sp_degree > 1) return std::make_unique<UlyssesAttention>(c);
  return std::make_unique<HeadParallelAttention>(c);
}

}  // namespace loom
