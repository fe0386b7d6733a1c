#include "engine/transformer.h"

#include "engine/attention_stage.h"
#include "engine/shard_weights.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace loom {

std::vector<ShardLayerWeights> shard_views(const Model& model, const ShardSpec& shard) {
  const int64_t dh = model.config.head_dim;
  std::vector<ShardLayerWeights> out;
  for (const LayerWeights& L : model.layers) {
    ShardLayerWeights s;
    s.wq = L.wq.row_block(int64_t(shard.q_head_begin) * dh, int64_t(shard.n_q_heads) * dh);
    s.wk = L.wk.row_block(int64_t(shard.kv_head_begin) * dh, int64_t(shard.n_kv_heads) * dh);
    s.wv = L.wv.row_block(int64_t(shard.kv_head_begin) * dh, int64_t(shard.n_kv_heads) * dh);
    s.wo = L.wo.col_block(int64_t(shard.q_head_begin) * dh, int64_t(shard.n_q_heads) * dh);
    s.w_gate = L.w_gate.row_block(shard.ffn_begin, shard.ffn_len);
    s.w_up = L.w_up.row_block(shard.ffn_begin, shard.ffn_len);
    s.w_down = L.w_down.col_block(shard.ffn_begin, shard.ffn_len);
    if (L.bq.present()) {
      s.bq = L.bq.f32() + shard.q_head_begin * dh;
      s.bk = L.bk.f32() + shard.kv_head_begin * dh;
      s.bv = L.bv.f32() + shard.kv_head_begin * dh;
    }
    out.push_back(s);
  }
  return out;
}

Transformer::Transformer(std::shared_ptr<const Model> model, ShardSpec shard, ThreadPool* pool,
                         AllReduce all_reduce)
    : Transformer(model, shard, pool, std::move(all_reduce), shard_views(*model, shard)) {
  // The views checked, the shard's own copy in the decode layout (or the views, tiling off).
  ShardWeightSet w = decode_shard(layers_, pool_);
  layers_ = std::move(w.layers);
  keep_alive_ = std::move(w.storage);
}

Transformer::Transformer(std::shared_ptr<const Model> model, ShardSpec shard, ThreadPool* pool, AllReduce all_reduce,
                         std::vector<ShardLayerWeights> weights, std::shared_ptr<const void> keep_alive)
    : model_(std::move(model)),
      shard_(shard),
      pool_(pool),
      all_reduce_(std::move(all_reduce)),
      layers_(std::move(weights)),
      keep_alive_(std::move(keep_alive)),
      output_(model_->decode_output(pool_)) {
  const ModelConfig& c = model_->config;
  const int dh = c.head_dim;
  LOOM_CHECK(shard_.n_q_heads > 0 && shard_.n_kv_heads > 0 && shard_.ffn_len > 0);
  LOOM_CHECK(shard_.q_head_begin + shard_.n_q_heads <= c.n_heads);
  LOOM_CHECK(shard_.kv_head_begin + shard_.n_kv_heads <= c.n_kv_heads);
  LOOM_CHECK(shard_.ffn_begin + shard_.ffn_len <= c.ffn_dim);
  // Every local query head must find its KV head locally (PLANS.md TP: q uses kv head q / G).
  head_runs_ = make_head_runs(shard_.q_head_begin, shard_.n_q_heads, shard_.kv_head_begin, shard_.n_kv_heads,
                              c.group_size());
  LOOM_CHECK(layers_.size() == model_->layers.size(), "shard weights for ", layers_.size(), " of ",
             model_->layers.size(), " layers");
  for (const LayerShard& s : layers_) {
    LOOM_CHECK(s.wq.rows == int64_t(shard_.n_q_heads) * dh && s.wk.rows == int64_t(shard_.n_kv_heads) * dh &&
                   s.wv.rows == s.wk.rows && s.wo.cols == s.wq.rows && s.w_gate.rows == shard_.ffn_len &&
                   s.w_up.rows == shard_.ffn_len && s.w_down.cols == shard_.ffn_len && s.wo.rows == c.d_model,
               "shard weights do not match the shard's sizes");
  }
  rope_ = rope_params(c);
}

void Transformer::ensure_scratch(int64_t n) {
  if (n <= scratch_tokens_) return;
  const ModelConfig& c = config();
  const int64_t d = c.d_model, q = int64_t(shard_.n_q_heads) * c.head_dim,
                kv = int64_t(shard_.n_kv_heads) * c.head_dim, f = shard_.ffn_len;
  x_.resize(size_t(n * d));
  xn_.resize(size_t(n * d));
  q_.resize(size_t(n * q));
  k_.resize(size_t(n * kv));
  v_.resize(size_t(n * kv));
  att_.resize(size_t(n * q));
  proj_.resize(size_t(n * d));
  gate_.resize(size_t(n * f));
  up_.resize(size_t(n * f));
  scratch_tokens_ = n;
}

int Transformer::forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>& logits) {
  const ModelConfig& c = config();
  const int64_t n_tokens = int64_t(batch.tokens.size());
  const int64_t d = c.d_model, dh = c.head_dim;
  const int hq = shard_.n_q_heads, hk = shard_.n_kv_heads;
  const int64_t q_dim = hq * dh, kv_dim = hk * dh, ffn = shard_.ffn_len;
  const KvLayout& lay = kv.layout;
  LOOM_CHECK(lay.n_kv_heads == hk && lay.head_dim == dh && lay.n_layers == c.n_layers, "kv layout mismatch");
  if (n_tokens == 0) return 0;
  ensure_scratch(n_tokens);

  // Absolute position of every token; validate the sequences cover the batch.
  pos_.resize(size_t(n_tokens));
  {
    int64_t t = 0;
    for (const ForwardSeq& s : batch.seqs) {
      LOOM_CHECK(s.n_tokens >= 0 && t + s.n_tokens <= n_tokens);
      const int64_t need_blocks = (s.start_pos + s.n_tokens + lay.block_size - 1) / lay.block_size;
      LOOM_CHECK(s.n_blocks >= need_blocks, "sequence needs ", need_blocks, " blocks, has ", s.n_blocks);
      for (int i = 0; i < s.n_tokens; ++i) pos_[size_t(t + i)] = int32_t(s.start_pos + i);
      t += s.n_tokens;
    }
    LOOM_CHECK(t == n_tokens, "sequences cover ", t, " of ", n_tokens, " tokens");
  }

  // Embedding lookup: x[t] = dequantize(tok_embd[token t])  // [T, d]
  float* x = x_.data();
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int32_t tok = batch.tokens[size_t(t)];
    LOOM_CHECK(tok >= 0 && tok < c.vocab_size, "token id ", tok);
    dequantize_row(model_->tok_embd.dtype, model_->tok_embd.row(tok), x + t * d, d);
  }


  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& LW = model_->layers[size_t(l)];
    const LayerShard& L = layers_[size_t(l)];
    float* kl = kv.k.data() + l * lay.floats_per_layer();
    float* vl = kv.v.data() + l * lay.floats_per_layer();

    // --- attention block
    kernels::rmsnorm(xn_.data(), x, LW.attn_norm.f32(), n_tokens, d, c.rms_eps);
    kernels::matmul(xn_.data(), n_tokens, d, L.wq, q_.data(), q_dim, pool_);
    kernels::matmul(xn_.data(), n_tokens, d, L.wk, k_.data(), kv_dim, pool_);
    kernels::matmul(xn_.data(), n_tokens, d, L.wv, v_.data(), kv_dim, pool_);
    if (L.bq) {
      kernels::add_bias(q_.data(), n_tokens, q_dim, L.bq, q_dim);
      kernels::add_bias(k_.data(), n_tokens, kv_dim, L.bk, kv_dim);
      kernels::add_bias(v_.data(), n_tokens, kv_dim, L.bv, kv_dim);
    }
    kernels::rope(q_.data(), n_tokens, q_dim, hq, pos_.data(), rope_);
    kernels::rope(k_.data(), n_tokens, kv_dim, hk, pos_.data(), rope_);

    // Store the new K/V into the paged cache, then attend per sequence.
    store_kv_and_attend(batch, lay, kl, vl, q_.data(), q_dim, k_.data(), v_.data(), kv_dim, head_runs_, pos_.data(),
                        att_.data(), q_dim, pool_);
    kernels::matmul(att_.data(), n_tokens, q_dim, L.wo, proj_.data(), d, pool_);
    if (all_reduce_) all_reduce_(proj_.data(), n_tokens * d);
    for (int64_t i = 0; i < n_tokens * d; ++i) x[i] += proj_[size_t(i)];

    // --- feed-forward block (SwiGLU)
    kernels::rmsnorm(xn_.data(), x, LW.ffn_norm.f32(), n_tokens, d, c.rms_eps);
    kernels::matmul(xn_.data(), n_tokens, d, L.w_gate, gate_.data(), ffn, pool_);
    kernels::matmul(xn_.data(), n_tokens, d, L.w_up, up_.data(), ffn, pool_);
    kernels::swiglu(gate_.data(), gate_.data(), up_.data(), n_tokens * ffn);
    kernels::matmul(gate_.data(), n_tokens, ffn, L.w_down, proj_.data(), d, pool_);
    if (all_reduce_) all_reduce_(proj_.data(), n_tokens * d);
    for (int64_t i = 0; i < n_tokens * d; ++i) x[i] += proj_[size_t(i)];
  }

  // Final norm and classifier, only for the last token of each sampling sequence.
  int n_out = 0;
  for (const ForwardSeq& s : batch.seqs) n_out += s.want_logits && s.n_tokens > 0;
  logits.resize(size_t(n_out) * size_t(c.vocab_size));
  // Gather the last hidden state of each sampling sequence, then one batched classifier matmul
  // (the classifier is streamed once per step, not once per sequence). Every rank holds the
  // whole classifier (it is not sharded), so no reduction is needed.
  int row = 0;
  int64_t t0 = 0;
  for (const ForwardSeq& s : batch.seqs) {
    t0 += s.n_tokens;
    if (!s.want_logits || s.n_tokens == 0) continue;
    std::memcpy(xn_.data() + int64_t(row) * d, x + (t0 - 1) * d, size_t(d) * sizeof(float));
    ++row;
  }
  kernels::rmsnorm(xn_.data(), xn_.data(), model_->out_norm.f32(), n_out, d, c.rms_eps);
  if (n_out > 0)
    kernels::matmul(xn_.data(), n_out, d, output_, logits.data(), c.vocab_size, pool_);
  return n_out;
}

}  // namespace loom
