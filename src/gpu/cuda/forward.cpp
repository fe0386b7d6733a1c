#include "gpu/cuda/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gpu/cuda/ops.h"

namespace loom::gpu {
namespace {

DeviceBuffer upload_f32(const WeightView& w) {
  if (w.data == nullptr || w.rows * w.cols == 0) return {};
  LOOM_CHECK(w.dtype == DType::F32, "norm / bias vectors are f32");
  DeviceBuffer b(std::size_t(w.rows * w.cols) * sizeof(float));
  std::vector<float> host(std::size_t(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r)
    std::memcpy(host.data() + r * w.cols, static_cast<const char*>(w.data) + r * w.row_stride, std::size_t(w.cols) * 4);
  b.upload(host.data(), host.size() * sizeof(float));
  return b;
}

DeviceBuffer ones(int64_t n) {
  std::vector<float> h(std::size_t(n), 1.0f);
  DeviceBuffer b(h.size() * sizeof(float));
  b.upload(h.data(), h.size() * sizeof(float));
  return b;
}

}  // namespace

std::size_t DeviceModel::weight_bytes() const {
  std::size_t b = tok_embd.bytes() + (output.empty() ? 0 : output.bytes()) + out_norm.bytes();
  for (const auto& l : layers) {
    for (const DeviceWeight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) b += w->bytes();
    b += l.attn_norm.bytes() + l.ffn_norm.bytes() + l.bq.bytes() + l.bk.bytes() + l.bv.bytes();
  }
  return b;
}

DeviceModel DeviceModel::upload(const Model& m) {
  DeviceModel d;
  d.config = m.config;
  d.tok_embd = DeviceWeight(m.tok_embd);
  if (m.output.data != m.tok_embd.data) d.output = DeviceWeight(m.output);
  d.out_norm = upload_f32(m.out_norm);
  d.layers.resize(m.layers.size());
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const LayerWeights& s = m.layers[i];
    DeviceLayer& l = d.layers[i];
    l.attn_norm = upload_f32(s.attn_norm);
    l.ffn_norm = upload_f32(s.ffn_norm);
    l.bq = upload_f32(s.bq);
    l.bk = upload_f32(s.bk);
    l.bv = upload_f32(s.bv);
    l.wq = DeviceWeight(s.wq);
    l.wk = DeviceWeight(s.wk);
    l.wv = DeviceWeight(s.wv);
    l.wo = DeviceWeight(s.wo);
    l.w_gate = DeviceWeight(s.w_gate);
    l.w_up = DeviceWeight(s.w_up);
    l.w_down = DeviceWeight(s.w_down);
  }
  return d;
}

DeviceModel DeviceModel::random(const ModelConfig& c, DType dt, uint64_t seed) {
  DeviceModel d;
  d.config = c;
  const int64_t D = c.d_model, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim;
  const float sd = 1.0f / std::sqrt(float(D)), sf = 1.0f / std::sqrt(float(F));
  d.tok_embd = DeviceWeight::random(dt, c.vocab_size, D, seed++, 1.0f);
  if (!c.tied_embeddings) d.output = DeviceWeight::random(dt, c.vocab_size, D, seed++, sd);
  d.out_norm = ones(D);
  d.layers.resize(std::size_t(c.n_layers));
  for (auto& l : d.layers) {
    l.attn_norm = ones(D);
    l.ffn_norm = ones(D);
    l.wq = DeviceWeight::random(dt, Q, D, seed++, sd);
    l.wk = DeviceWeight::random(dt, KV, D, seed++, sd);
    l.wv = DeviceWeight::random(dt, KV, D, seed++, sd);
    l.wo = DeviceWeight::random(dt, D, Q, seed++, sd);
    l.w_gate = DeviceWeight::random(dt, F, D, seed++, sd);
    l.w_up = DeviceWeight::random(dt, F, D, seed++, sd);
    l.w_down = DeviceWeight::random(dt, D, F, seed++, sf);
  }
  return d;
}

DeviceForward::DeviceForward(const DeviceModel& model, const kernels::RopeParams& rope, int64_t max_rows,
                             int block_size, int64_t kv_pages, bool f32_activations)
    : m_(model),
      rope_(rope),
      max_rows_(max_rows),
      block_(block_size),
      n_pages_(kv_pages),
      precision_(f32_activations ? GemmPrecision::F32Activations : GemmPrecision::Native),
      gemm_(stream_.get()) {
  const ModelConfig& c = m_.config;
  LOOM_CHECK(max_rows > 0 && block_size > 0 && kv_pages > 0, "max_rows=", max_rows, " block=", block_size,
             " pages=", kv_pages);
  const std::size_t page = std::size_t(c.n_layers) * std::size_t(c.kv_dim()) * std::size_t(block_size) * 4;
  k_.allocate(page * std::size_t(kv_pages));
  v_.allocate(page * std::size_t(kv_pages));
  for (int64_t p = kv_pages - 1; p >= 0; --p) free_.push_back(int32_t(p));  // lowest id first
  std::vector<float> inv(std::size_t(c.head_dim / 2));
  kernels::rope_inv_freq(rope_, inv.data());
  inv_freq_.allocate(inv.size() * 4);
  inv_freq_.upload(inv.data(), inv.size() * 4);
  const std::size_t R = std::size_t(max_rows);
  x_.allocate(R * std::size_t(c.d_model) * 4);
  xn_.allocate(R * std::size_t(c.d_model) * 4);
  q_.allocate(R * std::size_t(c.q_dim()) * 4);
  kk_.allocate(R * std::size_t(c.kv_dim()) * 4);
  vv_.allocate(R * std::size_t(c.kv_dim()) * 4);
  att_.allocate(R * std::size_t(c.q_dim()) * 4);
  gate_.allocate(R * std::size_t(c.ffn_dim) * 4);
  up_.allocate(R * std::size_t(c.ffn_dim) * 4);
  tok_.allocate(R * 4);
  pos_.allocate(R * 4);
}

void DeviceForward::reserve(int64_t seq, int64_t n_positions) {
  SeqState& s = seqs_[seq];
  const int64_t need = (n_positions + block_ - 1) / block_;
  if (int64_t(s.pages.size()) >= need) return;
  if (need - int64_t(s.pages.size()) > int64_t(free_.size()))
    fail("GPU KV cache full: sequence ", seq, " needs ", need, " pages of ", block_, " tokens, ", free_.size(), " free of ",
         n_pages_);
  while (int64_t(s.pages.size()) < need) {
    s.pages.push_back(free_.back());
    free_.pop_back();
  }
  s.table.allocate(s.pages.size() * 4);
  s.table.upload(s.pages.data(), s.pages.size() * 4);
}

void DeviceForward::release(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (auto p = it->second.pages.rbegin(); p != it->second.pages.rend(); ++p) free_.push_back(*p);
  seqs_.erase(it);
}

std::vector<int32_t> DeviceForward::step(const std::vector<DeviceStepSeq>& seqs, std::vector<float>* logits) {
  const ModelConfig& c = m_.config;
  const int64_t D = c.d_model, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim, V = c.vocab_size;
  const int hd = c.head_dim;
  cudaStream_t s = stream_.get();
  std::vector<int32_t> tokens, pos, last;
  std::vector<int64_t> row0;
  for (const auto& q : seqs) {
    LOOM_CHECK(!q.tokens.empty(), "sequence ", q.seq, " has no tokens this step");
    row0.push_back(int64_t(tokens.size()));
    for (std::size_t i = 0; i < q.tokens.size(); ++i) {
      tokens.push_back(q.tokens[i]);
      pos.push_back(int32_t(q.pos0 + int64_t(i)));
    }
    last.push_back(int32_t(tokens.size() - 1));
    reserve(q.seq, q.pos0 + int64_t(q.tokens.size()));
  }
  const int64_t n = int64_t(tokens.size());
  if (n > max_rows_) fail("GPU step of ", n, " tokens exceeds max_rows ", max_rows_);
  LOOM_CUDA_CHECK(cudaMemcpyAsync(tok_.data(), tokens.data(), std::size_t(n) * 4, cudaMemcpyHostToDevice, s));
  LOOM_CUDA_CHECK(cudaMemcpyAsync(pos_.data(), pos.data(), std::size_t(n) * 4, cudaMemcpyHostToDevice, s));
  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  embed_rows(m_.tok_embd.data(), m_.tok_embd.dtype(), D, tok_.as<int32_t>(), n, x, s);
  const float scale = 1.0f / std::sqrt(float(hd));
  const int64_t layer_floats = KV * block_;                          // one layer of one page
  const int64_t page_floats = int64_t(c.n_layers) * layer_floats;  // one page
  for (int l = 0; l < c.n_layers; ++l) {
    const DeviceLayer& L = m_.layers[std::size_t(l)];
    rmsnorm(xn, x, L.attn_norm.as<float>(), n, D, c.rms_eps, s);
    gemm_.matmul(xn, n, D, L.wq, q_.as<float>(), Q, false, precision_);
    gemm_.matmul(xn, n, D, L.wk, kk_.as<float>(), KV, false, precision_);
    gemm_.matmul(xn, n, D, L.wv, vv_.as<float>(), KV, false, precision_);
    if (L.bq.bytes()) {
      add_bias(q_.as<float>(), n, Q, L.bq.as<float>(), Q, s);
      add_bias(kk_.as<float>(), n, KV, L.bk.as<float>(), KV, s);
      add_bias(vv_.as<float>(), n, KV, L.bv.as<float>(), KV, s);
    }
    rope(q_.as<float>(), n, Q, c.n_heads, hd, pos_.as<int32_t>(), inv_freq_.as<float>(), rope_.interleaved, s);
    rope(kk_.as<float>(), n, KV, c.n_kv_heads, hd, pos_.as<int32_t>(), inv_freq_.as<float>(), rope_.interleaved, s);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const SeqState& st = seqs_.at(seqs[i].seq);
      const int64_t r0 = row0[i], nr = int64_t(seqs[i].tokens.size());
      float* kl = k_.as<float>() + int64_t(l) * layer_floats;
      float* vl = v_.as<float>() + int64_t(l) * layer_floats;
      store_kv(kk_.as<float>() + r0 * KV, vv_.as<float>() + r0 * KV, nr, KV, pos_.as<int32_t>() + r0, c.n_kv_heads, hd,
               kl, vl, st.table.as<int32_t>(), block_, page_floats, int64_t(block_) * hd, hd, s);
      DeviceKvView kv;
      kv.k = kl;
      kv.v = vl;
      kv.block_table = st.table.as<int32_t>();
      kv.block_size = block_;
      kv.block_stride = page_floats;
      kv.head_stride = int64_t(block_) * hd;
      kv.pos_stride = hd;
      attention(q_.as<float>() + r0 * Q, nr, Q, pos_.as<int32_t>() + r0, kv, 0, seqs[i].pos0 + nr, c.n_heads,
                c.n_kv_heads, hd, scale, att_.as<float>() + r0 * Q, Q, nullptr, s);
    }
    gemm_.matmul(att_.as<float>(), n, Q, L.wo, x, D, /*accumulate=*/true, precision_);  // x += attn
    rmsnorm(xn, x, L.ffn_norm.as<float>(), n, D, c.rms_eps, s);
    gemm_.matmul(xn, n, D, L.w_gate, gate_.as<float>(), F, false, precision_);
    gemm_.matmul(xn, n, D, L.w_up, up_.as<float>(), F, false, precision_);
    swiglu(gate_.as<float>(), gate_.as<float>(), up_.as<float>(), n * F, s);
    gemm_.matmul(gate_.as<float>(), n, F, L.w_down, x, D, /*accumulate=*/true, precision_);  // x += ffn
  }
  // The sampling rows: the last row of each sequence.
  const int64_t ns = int64_t(seqs.size());
  last_.reserve(std::size_t(ns) * 4);
  xl_.reserve(std::size_t(ns * D) * 4);
  logits_.reserve(std::size_t(ns * V) * 4);
  next_.reserve(std::size_t(ns) * 4);
  LOOM_CUDA_CHECK(cudaMemcpyAsync(last_.data(), last.data(), std::size_t(ns) * 4, cudaMemcpyHostToDevice, s));
  gather_rows(x, D, last_.as<int32_t>(), ns, xl_.as<float>(), s);
  rmsnorm(xl_.as<float>(), xl_.as<float>(), m_.out_norm.as<float>(), ns, D, c.rms_eps, s);
  const DeviceWeight& out = m_.output.empty() ? m_.tok_embd : m_.output;
  gemm_.matmul(xl_.as<float>(), ns, D, out, logits_.as<float>(), V, false, precision_);
  argmax_rows(logits_.as<float>(), ns, V, int(V), next_.as<int32_t>(), s);
  std::vector<int32_t> next(static_cast<std::size_t>(ns));
  LOOM_CUDA_CHECK(cudaMemcpyAsync(next.data(), next_.data(), std::size_t(ns) * 4, cudaMemcpyDeviceToHost, s));
  if (logits) {
    logits->resize(std::size_t(ns * V));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(logits->data(), logits_.data(), logits->size() * 4, cudaMemcpyDeviceToHost, s));
  }
  stream_.sync();
  return next;
}

}  // namespace loom::gpu
