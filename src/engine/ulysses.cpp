#include "engine/ulysses.h"

#include "engine/attention_stage.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace loom {

UlyssesRank UlyssesRank::of(const Plan& plan, const ModelShape& shape, int rank) {
  if (plan.sp < 1 || plan.shift || plan.helix() || plan.pp > 1)
    fail("plan ", plan.to_string(), " is not an sp x tp base config (Ulysses runs sp x tp, with dp)");
  const RankLayout L = rank_layout(plan, shape, rank);
  UlyssesRank r;
  r.s = plan.sp;
  r.t = plan.tp;
  r.sp = L.sp;
  r.tp = L.tp;
  r.proj.q_head_begin = L.proj_q_heads.front();
  r.proj.n_q_heads = int(L.proj_q_heads.size());
  r.proj.kv_head_begin = L.proj_kv_heads.front();
  r.proj.n_kv_heads = int(L.proj_kv_heads.size());
  r.proj.ffn_begin = L.ffn.begin;
  r.proj.ffn_len = L.ffn.size();
  r.attn_q_begin = L.q_heads.front();
  r.attn_n_q = int(L.q_heads.size());
  r.attn_kv_begin = L.kv_heads.front();
  r.attn_n_kv = int(L.kv_heads.size());
  for (int j = 0; j < r.s; ++j) {
    const RankLayout peer = rank_layout(plan, shape, rank + (j - r.sp) * r.t);
    LOOM_CHECK(peer.tp == r.tp && peer.sp == j && int(peer.kv_heads.size()) == r.attn_n_kv,
               "SP peer ", j, " of rank ", rank);
    // The peer's KV heads come from this TP shard's projection (PLANS.md: they are KV heads of
    // the TP shard's query heads).
    LOOM_CHECK(peer.kv_heads.front() >= r.proj.kv_head_begin &&
               peer.kv_heads.back() < r.proj.kv_head_begin + r.proj.n_kv_heads);
    r.peer_kv_begin.push_back(peer.kv_heads.front());
  }
  return r;
}

UlyssesTransformer::UlyssesTransformer(std::shared_ptr<const Model> model, UlyssesRank rank, ThreadPool* pool,
                                       Communicator* sp_group, AllReduce tp_all_reduce,
                                       std::vector<ShardLayerWeights> weights, std::shared_ptr<const void> keep_alive)
    : model_(std::move(model)),
      r_(std::move(rank)),
      pool_(pool),
      sp_(sp_group),
      all_reduce_(std::move(tp_all_reduce)),
      layers_(std::move(weights)),
      keep_alive_(std::move(keep_alive)),
      output_(model_->decode_output(pool_)) {
  const ModelConfig& c = model_->config;
  const int64_t dh = c.head_dim;
  LOOM_CHECK(sp_ != nullptr && sp_->size() == r_.s && sp_->rank() == r_.sp, "SP group of sp rank ", r_.sp);
  LOOM_CHECK(r_.t == 1 || all_reduce_, "TP all-reduce missing for tp=", r_.t);
  LOOM_CHECK(r_.attn_n_q * r_.s == r_.proj.n_q_heads, "query heads after the all-to-all");
  if (layers_.empty()) layers_ = shard_views(*model_, r_.proj);
  LOOM_CHECK(layers_.size() == model_->layers.size());
  for (const ShardLayerWeights& s : layers_)
    LOOM_CHECK(s.wq.rows == r_.proj.n_q_heads * dh && s.wk.rows == r_.proj.n_kv_heads * dh &&
                   s.wo.cols == s.wq.rows && s.w_gate.rows == r_.proj.ffn_len && s.w_down.cols == r_.proj.ffn_len,
               "Ulysses shard weights do not match the TP shard");
  // Attention runs: as in Transformer (a query head q uses model KV head q / G).
  head_runs_ = make_head_runs(r_.attn_q_begin, r_.attn_n_q, r_.attn_kv_begin, r_.attn_n_kv, c.group_size());
  rope_ = rope_params(c);
}

void UlyssesTransformer::ensure_scratch(int64_t m) {
  if (m <= scratch_) return;
  const ModelConfig& c = config();
  const int64_t d = c.d_model, dh = c.head_dim, s = r_.s;
  const int64_t q = r_.proj.n_q_heads * dh, kv = r_.proj.n_kv_heads * dh, f = r_.proj.ffn_len;
  const int64_t qa = r_.attn_n_q * dh, ka = r_.attn_n_kv * dh, row = qa + 2 * ka;
  x_.resize(size_t(m * d));
  xn_.resize(size_t(m * d));
  q_.resize(size_t(m * q));
  k_.resize(size_t(m * kv));
  v_.resize(size_t(m * kv));
  send_.resize(size_t(s * m * row));
  recv_.resize(size_t(s * m * row));
  qa_.resize(size_t(s * m * qa));
  ka_.resize(size_t(s * m * ka));
  va_.resize(size_t(s * m * ka));
  att_.resize(size_t(s * m * qa));
  att_slice_.resize(size_t(m * q));
  proj_.resize(size_t(m * d));
  gate_.resize(size_t(m * f));
  up_.resize(size_t(m * f));
  scratch_ = m;
}

int UlyssesTransformer::forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>* logits) {
  const ModelConfig& c = config();
  const int64_t n = int64_t(batch.tokens.size());
  const int64_t d = c.d_model, dh = c.head_dim, s = r_.s;
  const int hq = r_.proj.n_q_heads, hk = r_.proj.n_kv_heads;
  const int hqa = r_.attn_n_q, hka = r_.attn_n_kv;
  const int64_t q_dim = hq * dh, kv_dim = hk * dh, qa_dim = hqa * dh, ka_dim = hka * dh, ffn = r_.proj.ffn_len;
  const int64_t row = qa_dim + 2 * ka_dim;  // one token of one peer's all-to-all chunk
  const KvLayout& lay = kv.layout;
  LOOM_CHECK(lay.n_kv_heads == hka && lay.head_dim == dh && lay.n_layers == c.n_layers, "kv layout mismatch");
  if (logits) logits->clear();
  if (n == 0) return 0;

  // Token split (PLANS.md): n' = m*s, this rank's padded slice [sp*m, sp*m + m).
  const TokenSlice slice = sp_token_slice(n, int(s), r_.sp);
  const int64_t m = slice.padded.size(), n_pad = m * s;
  ensure_scratch(m);

  pos_.resize(size_t(n));
  {
    int64_t t = 0;
    for (const ForwardSeq& q : batch.seqs) {
      LOOM_CHECK(q.n_tokens >= 0 && t + q.n_tokens <= n);
      const int64_t need_blocks = (q.start_pos + q.n_tokens + lay.block_size - 1) / lay.block_size;
      LOOM_CHECK(q.n_blocks >= need_blocks, "sequence needs ", need_blocks, " blocks, has ", q.n_blocks);
      for (int i = 0; i < q.n_tokens; ++i) pos_[size_t(t + i)] = int32_t(q.start_pos + i);
      t += q.n_tokens;
    }
    LOOM_CHECK(t == n, "sequences cover ", t, " of ", n, " tokens");
  }
  slice_pos_.assign(size_t(m), 0);
  for (int64_t g = slice.real.begin; g < slice.real.end; ++g) slice_pos_[size_t(g - slice.padded.begin)] = pos_[size_t(g)];

  // Embeddings of the slice; padded rows are zeros (rmsnorm keeps them zero).
  float* x = x_.data();
  std::memset(x, 0, size_t(m * d) * sizeof(float));
  for (int64_t g = slice.real.begin; g < slice.real.end; ++g) {
    const int32_t tok = batch.tokens[size_t(g)];
    LOOM_CHECK(tok >= 0 && tok < c.vocab_size, "token id ", tok);
    dequantize_row(model_->tok_embd.dtype, model_->tok_embd.row(tok), x + (g - slice.padded.begin) * d, d);
  }

  const size_t chunk = size_t(m * row);  // floats per peer, first all-to-all

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& LW = model_->layers[size_t(l)];
    const ShardLayerWeights& L = layers_[size_t(l)];
    float* kl = kv.k.data() + l * lay.floats_per_layer();
    float* vl = kv.v.data() + l * lay.floats_per_layer();

    // --- Algorithm 1 line 3: Q/K/V of the slice with the TP shard  // [m, hq*dh], [m, hk*dh] x2
    kernels::rmsnorm(xn_.data(), x, LW.attn_norm.f32(), m, d, c.rms_eps);
    kernels::matmul(xn_.data(), m, d, L.wq, q_.data(), q_dim, pool_);
    kernels::matmul(xn_.data(), m, d, L.wk, k_.data(), kv_dim, pool_);
    kernels::matmul(xn_.data(), m, d, L.wv, v_.data(), kv_dim, pool_);
    if (L.bq) {
      kernels::add_bias(q_.data(), m, q_dim, L.bq, q_dim);
      kernels::add_bias(k_.data(), m, kv_dim, L.bk, kv_dim);
      kernels::add_bias(v_.data(), m, kv_dim, L.bv, kv_dim);
    }
    kernels::rope(q_.data(), m, q_dim, hq, slice_pos_.data(), rope_);
    kernels::rope(k_.data(), m, kv_dim, hk, slice_pos_.data(), rope_);

    // --- line 4: one fused all-to-all. Chunk j, per token: peer j's query heads (TP-local
    // [j*hqa, (j+1)*hqa)), then k and v of its KV heads (GQA replication: a KV head of this
    // shard may go to several peers, Shift 3.2.1).  // send [s][m][row]
    for (int64_t j = 0; j < s; ++j) {
      const int64_t kv_local = r_.peer_kv_begin[size_t(j)] - r_.proj.kv_head_begin;
      float* dst = send_.data() + j * int64_t(chunk);
      for (int64_t t = 0; t < m; ++t, dst += row) {
        std::memcpy(dst, q_.data() + t * q_dim + j * qa_dim, size_t(qa_dim) * sizeof(float));
        std::memcpy(dst + qa_dim, k_.data() + t * kv_dim + kv_local * dh, size_t(ka_dim) * sizeof(float));
        std::memcpy(dst + qa_dim + ka_dim, v_.data() + t * kv_dim + kv_local * dh, size_t(ka_dim) * sizeof(float));
      }
    }
    sp_->all_to_all(send_.data(), recv_.data(), chunk);
    // Chunk i came from SP rank i: its slice, i.e. padded tokens [i*m, (i+1)*m).  // [n', ...]
    for (int64_t i = 0; i < s; ++i) {
      const float* src = recv_.data() + i * int64_t(chunk);
      for (int64_t t = 0; t < m; ++t, src += row) {
        const int64_t g = i * m + t;
        std::memcpy(qa_.data() + g * qa_dim, src, size_t(qa_dim) * sizeof(float));
        std::memcpy(ka_.data() + g * ka_dim, src + qa_dim, size_t(ka_dim) * sizeof(float));
        std::memcpy(va_.data() + g * ka_dim, src + qa_dim + ka_dim, size_t(ka_dim) * sizeof(float));
      }
    }

    // --- line 5: K/V of the n real tokens into the cache, causal attention per sequence.
    store_kv_and_attend(batch, lay, kl, vl, qa_.data(), qa_dim, ka_.data(), va_.data(), ka_dim, head_runs_,
                        pos_.data(), att_.data(), qa_dim, pool_);
    // Padded rows carry zeros back (never used, kept finite and deterministic).
    std::memset(att_.data() + n * qa_dim, 0, size_t((n_pad - n) * qa_dim) * sizeof(float));

    // --- line 6: back to the token split. att_ rows [j*m, (j+1)*m) are peer j's slice.
    sp_->all_to_all(att_.data(), recv_.data(), size_t(m * qa_dim));
    // From SP rank i: heads TP-local [i*hqa, (i+1)*hqa) of this slice.  // [m, hq*dh]
    for (int64_t t = 0; t < m; ++t)
      for (int64_t i = 0; i < s; ++i)
        std::memcpy(att_slice_.data() + t * q_dim + i * qa_dim, recv_.data() + (i * m + t) * qa_dim,
                    size_t(qa_dim) * sizeof(float));

    // --- lines 7-11: Wo, TP all-reduce, FFN, TP all-reduce, on the slice.
    kernels::matmul(att_slice_.data(), m, q_dim, L.wo, proj_.data(), d, pool_);
    if (all_reduce_) all_reduce_(proj_.data(), m * d);
    for (int64_t i = 0; i < m * d; ++i) x[i] += proj_[size_t(i)];
    kernels::rmsnorm(xn_.data(), x, LW.ffn_norm.f32(), m, d, c.rms_eps);
    kernels::matmul(xn_.data(), m, d, L.w_gate, gate_.data(), ffn, pool_);
    kernels::matmul(xn_.data(), m, d, L.w_up, up_.data(), ffn, pool_);
    kernels::swiglu(gate_.data(), gate_.data(), up_.data(), m * ffn);
    kernels::matmul(gate_.data(), m, ffn, L.w_down, proj_.data(), d, pool_);
    if (all_reduce_) all_reduce_(proj_.data(), m * d);
    for (int64_t i = 0; i < m * d; ++i) x[i] += proj_[size_t(i)];
  }

  // --- line 13, for the sampled rows only: after the TP all-reduce every TP rank holds the same
  // hidden states, so the SP group of tp == 0 gathers them to replica rank 0.
  if (r_.tp != 0) return 0;
  std::vector<size_t> counts(size_t(s), 0);
  std::vector<int64_t> mine;
  {
    int64_t t0 = 0;
    for (const ForwardSeq& q : batch.seqs) {
      t0 += q.n_tokens;
      if (!q.want_logits || q.n_tokens == 0) continue;
      const int64_t g = t0 - 1;
      counts[size_t(g / m)] += size_t(d);
      if (slice.padded.contains(g)) mine.push_back(g - slice.padded.begin);
    }
  }
  size_t total = 0;
  for (size_t k : counts) total += k;
  if (total == 0) return 0;
  // Rows of this slice, then the gathered rows in row order (= sequence order).
  for (size_t i = 0; i < mine.size(); ++i)
    std::memcpy(xn_.data() + int64_t(i) * d, x + mine[i] * d, size_t(d) * sizeof(float));
  std::vector<float> rows(total);
  sp_->all_gather_v(xn_.data(), rows.data(), counts);
  if (r_.sp != 0 || !logits) return 0;
  const int64_t n_out = int64_t(total) / d;
  kernels::rmsnorm(rows.data(), rows.data(), model_->out_norm.f32(), n_out, d, c.rms_eps);
  logits->resize(size_t(n_out) * size_t(c.vocab_size));
  kernels::matmul(rows.data(), n_out, d, output_, logits->data(), c.vocab_size, pool_);
  return int(n_out);
}

}  // namespace loom
