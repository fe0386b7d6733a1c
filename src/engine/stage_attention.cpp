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

void store_kv_and_attend(Device& dev, const StepRows& rows, int layer, KvStore& kv, const std::vector<int>& q_heads,
                         const std::vector<int>& kv_heads, int group_size, const float* q, int64_t ldq,
                         const float* k, const float* v, int64_t ldkv, float* out, int64_t ldo) {
  optime::Scope timed(optime::Op::Attention);
  const int64_t dh = kv.head_dim(), B = kv.block_size(), pf = kv.page_floats();
  const float scale = 1.0f / std::sqrt(float(dh));
  // Scatter the new K/V rows into their pages: [block_size][head_dim] per (layer, kv head, block).
  thread_local std::vector<CopySpan> spans;
  spans.clear();
  for (size_t i = 0; i < rows.seqs.size(); ++i) {
    const ForwardSeq& s = rows.seqs[i];
    const int64_t r0 = rows.seq_row[i];
    for (size_t j = 0; j < kv_heads.size(); ++j) {
      const std::span<const int32_t> table = kv.table(s.seq_id, layer, kv_heads[j]);
      for (int t = 0; t < s.n_tokens; ++t) {
        const int64_t p = s.start_pos + t, blk = p / B;
        LOOM_CHECK(blk < int64_t(table.size()) && table[size_t(blk)] != kNoPage, "no KV page for sequence ",
                   s.seq_id, " layer ", layer, " kv head ", kv_heads[j], " block ", blk);
        spans.push_back({int64_t(table[size_t(blk)]) * pf + (p % B) * dh, (r0 + t) * ldkv + int64_t(j) * dh, dh});
      }
    }
  }
  dev.copy_spans(kv.k_pages(), k, spans);
  dev.copy_spans(kv.v_pages(), v, spans);
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
  // One job per (sequence, run).
  thread_local std::vector<AttentionJob> jobs;
  jobs.clear();
  for (size_t i = 0; i < rows.seqs.size(); ++i) {
    const ForwardSeq& s = rows.seqs[i];
    const int64_t r0 = rows.seq_row[i];
    for (const Run& r : runs) {
      const std::span<const int32_t> table = kv.table(s.seq_id, layer, kv_heads[size_t(r.kv_local)]);
      AttentionJob jb;
      jb.q = q + r0 * ldq + int64_t(r.q_begin) * dh;
      jb.ldq = ldq;
      jb.n_q = s.n_tokens;
      jb.q_pos = rows.pos.data() + r0;
      jb.pages = table.data();
      jb.n_pages = int64_t(table.size());
      jb.kv_end = s.start_pos + s.n_tokens;
      jb.n_heads = r.n_q;
      jb.out = out + r0 * ldo + int64_t(r.q_begin) * dh;
      jb.ldo = ldo;
      jobs.push_back(jb);
    }
  }
  dev.attention(paged_kv(kv), jobs, scale);
}

// q = xn Wq^T (+bq), k, v likewise, then RoPE on q and k at positions pos.  // [m, hq*dh], [m, hk*dh]
void project_qkv(Device& dev, const DeviceLayerWeights& W, const float* xn, int64_t m, int64_t d, int hq, int hk,
                 int64_t dh, const int32_t* pos, const kernels::RopeParams& rope, float* q, float* k, float* v,
                 kernels::Numerics numerics) {
  const int64_t q_dim = hq * dh, kv_dim = hk * dh;
  {
    optime::Scope timed(optime::Op::Matmul);
    dev.matmul(xn, m, d, W.wq, q, q_dim, false, numerics);
    dev.matmul(xn, m, d, W.wk, k, kv_dim, false, numerics);
    dev.matmul(xn, m, d, W.wv, v, kv_dim, false, numerics);
  }
  optime::Scope timed(optime::Op::Elementwise);
  if (W.bq.present()) {
    dev.add_bias(q, m, q_dim, W.bq.f32(), q_dim);
    dev.add_bias(k, m, kv_dim, W.bk.f32(), kv_dim);
    dev.add_bias(v, m, kv_dim, W.bv.f32(), kv_dim);
  }
  dev.rope(q, m, q_dim, hq, pos, rope);
  dev.rope(k, m, kv_dim, hk, pos, rope);
}

PagedKv paged_kv(const KvStore& kv) {
  PagedKv p;
  p.k = kv.k_pages();
  p.v = kv.v_pages();
  p.block_size = kv.block_size();
  p.head_dim = kv.head_dim();
  p.page_floats = kv.page_floats();
  return p;
}

DeviceMatrix DeviceUploads::get(Device& dev, const WeightView& w) {
  const auto key = std::make_tuple(w.data, int(w.dtype), w.rows, w.cols, w.row_stride, w.tile_rows, w.tile_stride);
  auto it = held_.find(key);
  if (it != held_.end()) return it->second;
  return held_.emplace(key, dev.upload(w)).first->second;
}

std::vector<DeviceLayerWeights> upload_layers(Device& dev, const Model& model, const std::vector<ShardLayerWeights>& shard,
                                              const Range& layers, DeviceUploads* uploads) {
  LOOM_CHECK(int64_t(shard.size()) == layers.size(), "weights for ", shard.size(), " layers, the stage has ",
             layers.size());
  auto up = [&](const WeightView& w) { return uploads ? uploads->get(dev, w) : dev.upload(w); };
  std::vector<DeviceLayerWeights> out(shard.size());
  for (size_t i = 0; i < shard.size(); ++i) {
    const ShardLayerWeights& S = shard[i];
    DeviceLayerWeights& D = out[i];
    if (!S.wq.present()) continue;  // a lazy plan's layers before it is built (rank_engine.h)
    D.wq = up(S.wq);
    D.wk = up(S.wk);
    D.wv = up(S.wv);
    D.wo = up(S.wo);
    D.w_gate = up(S.w_gate);
    D.w_up = up(S.w_up);
    D.w_down = up(S.w_down);
    if (S.bq) {
      D.bq = up(WeightView{S.bq, DType::F32, 1, S.wq.rows, S.wq.rows * 4});
      D.bk = up(WeightView{S.bk, DType::F32, 1, S.wk.rows, S.wk.rows * 4});
      D.bv = up(WeightView{S.bv, DType::F32, 1, S.wv.rows, S.wv.rows * 4});
    }
    const LayerWeights& LW = model.layers[size_t(layers.begin) + i];
    D.attn_norm = up(LW.attn_norm);
    D.ffn_norm = up(LW.ffn_norm);
  }
  return out;
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
    for (DeviceArray<float>* b : {&q_, &k_, &v_, &att_}) b->bind(*c_.dev);
  }
  const char* name() const override { return "head-parallel"; }

  void forward(int layer, const StepRows& rows, const float* xn, float* out) override {
    const ModelConfig& cfg = c_.model->config;
    const DeviceLayerWeights& W = c_.layer(layer);
    Device& dev = *c_.dev;
    const int64_t n = rows.n, d = cfg.d_model, dh = cfg.head_dim;
    const int hq = int(c_.layout.q_heads.size()), hk = int(c_.layout.kv_heads.size());
    const int64_t q_dim = hq * dh, kv_dim = hk * dh;
    q_.resize(size_t(n * q_dim));
    k_.resize(size_t(n * kv_dim));
    v_.resize(size_t(n * kv_dim));
    att_.resize(size_t(n * q_dim));
    project_qkv(dev, W, xn, n, d, hq, hk, dh, rows.pos.data(), c_.rope, q_.data(), k_.data(), v_.data(), c_.numerics);
    store_kv_and_attend(dev, rows, layer, *c_.kv, c_.layout.q_heads, c_.layout.kv_heads, cfg.group_size(), q_.data(),
                        q_dim, k_.data(), v_.data(), kv_dim, att_.data(), q_dim);
    {
      optime::Scope timed(optime::Op::Matmul);
      dev.matmul(att_.data(), n, q_dim, W.wo, out, d, false, c_.numerics);
    }
    all_reduce(reduce_, out, n * d);
  }

 private:
  StageContext c_;
  Communicator& reduce_;
  DeviceArray<float> q_, k_, v_, att_;
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
    for (DeviceArray<float>* b : {&q_, &k_, &v_, &send_, &recv_, &qa_, &ka_, &va_, &att_, &att_slice_})
      b->bind(*c_.dev);
  }
  const char* name() const override { return "ulysses"; }

  void forward(int layer, const StepRows& rows, const float* xn, float* out) override {
    const ModelConfig& cfg = c_.model->config;
    const RankLayout& L = c_.layout;
    const DeviceLayerWeights& W = c_.layer(layer);
    Device& dev = *c_.dev;
    const int64_t d = cfg.d_model, dh = cfg.head_dim, s = L.tokens.sp_degree;
    const int hq = int(L.proj_q_heads.size()), hk = int(L.proj_kv_heads.size());
    const int hqa = int(L.q_heads.size()), hka = int(L.kv_heads.size());
    const int64_t q_dim = hq * dh, kv_dim = hk * dh, qa_dim = hqa * dh, ka_dim = hka * dh;
    const int64_t row = qa_dim + 2 * ka_dim;  // one token of one peer's all-to-all chunk
    const int64_t n = rows.n, m = rows.m(), n_pad = m * s;
    grow(m, s, q_dim, kv_dim, qa_dim, ka_dim);
    // Positions of the slice (padded rows at position 0: they write no KV and are never read).
    slice_pos_.resize(size_t(m));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t g = rows.slice.padded.begin + i;
      slice_pos_[size_t(i)] = g < n ? rows.pos[size_t(g)] : 0;
    }
    // Algorithm 1 line 3: Q/K/V of the slice with the TP shard  // [m, hq*dh], [m, hk*dh] x2
    project_qkv(dev, W, xn, m, d, hq, hk, dh, slice_pos_.data(), c_.rope, q_.data(), k_.data(), v_.data(),
                c_.numerics);

    // Line 4: one fused all-to-all. Chunk j, per token: peer j's query heads (TP-local
    // [j*hqa, (j+1)*hqa)), then k and v of its KV heads (GQA replication in the send buffer,
    // Shift 3.2.1).  // send [s][m][row]
    const size_t chunk = size_t(m * row);
    std::optional<optime::Scope> pack(std::in_place, optime::Op::Elementwise);
    for (int64_t j = 0; j < s; ++j) {
      const int64_t kv_local = peer_kv_local_[size_t(j)];
      float* dst = send_.data() + j * int64_t(chunk);
      dev.copy_2d(dst, row, q_.data() + j * qa_dim, q_dim, m, qa_dim);
      dev.copy_2d(dst + qa_dim, row, k_.data() + kv_local * dh, kv_dim, m, ka_dim);
      dev.copy_2d(dst + qa_dim + ka_dim, row, v_.data() + kv_local * dh, kv_dim, m, ka_dim);
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
      dev.copy_2d(qa_.data() + i * m * qa_dim, qa_dim, src, row, m, qa_dim);
      dev.copy_2d(ka_.data() + i * m * ka_dim, ka_dim, src + qa_dim, row, m, ka_dim);
      dev.copy_2d(va_.data() + i * m * ka_dim, ka_dim, src + qa_dim + ka_dim, row, m, ka_dim);
    }
    pack.reset();
    // Line 5: the n real tokens' K/V into the cache (the same heads TP(P) in the shift order stores
    // on this rank, Shift 3.3.1), causal attention per sequence.
    store_kv_and_attend(dev, rows, layer, *c_.kv, L.q_heads, L.kv_heads, cfg.group_size(), qa_.data(), qa_dim,
                        ka_.data(), va_.data(), ka_dim, att_.data(), qa_dim);
    dev.fill_zero(att_.data() + n * qa_dim, size_t((n_pad - n) * qa_dim) * sizeof(float));
    // Line 6: back to the token split; from SP rank i come TP-local heads [i*hqa, (i+1)*hqa).
    {
      optime::Scope timed(optime::Op::Collective);
      sp_.all_to_all(att_.data(), recv_.data(), size_t(m * qa_dim));
    }
    pack.emplace(optime::Op::Elementwise);
    for (int64_t i = 0; i < s; ++i)
      dev.copy_2d(att_slice_.data() + i * qa_dim, q_dim, recv_.data() + i * m * qa_dim, qa_dim, m, qa_dim);
    pack.reset();
    // Lines 7-8: Wo (TP column shard), all-reduce over TP.
    {
      optime::Scope timed(optime::Op::Matmul);
      dev.matmul(att_slice_.data(), m, q_dim, W.wo, out, d, false, c_.numerics);
    }
    all_reduce(reduce_, out, m * d);
  }

 private:
  void grow(int64_t m, int64_t s, int64_t q_dim, int64_t kv_dim, int64_t qa_dim, int64_t ka_dim) {
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
  }
  StageContext c_;
  Communicator& sp_;
  Communicator& reduce_;
  std::vector<int> peer_kv_local_;
  DeviceArray<float> q_, k_, v_, send_, recv_, qa_, ka_, va_, att_, att_slice_;
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
