#include "model/random_model.h"

#include <cmath>
#include <cstring>

#include "core/buffer.h"
#include "core/error.h"

namespace loom {

namespace {

// splitmix64 of (seed, index): a value in [-1, 1).
inline float unit(uint64_t seed, uint64_t i) {
  uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

struct Builder {
  Model& m;
  DType dt;
  uint64_t seed;
  ThreadPool* pool;
  uint64_t next = 1;

  WeightView matrix(int64_t rows, int64_t cols, float scale, DType t) {
    LOOM_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16, "random_model: dtype ", dtype_name(t),
               " (f32, f16 or bf16)");
    const int64_t rb = dtype_row_bytes(t, cols);
    auto buf = std::make_shared<AlignedBuffer<uint8_t>>(size_t(rows * rb));
    uint8_t* base = buf->data();
    const uint64_t s = seed * 0x100000001b3ull + next++;
    parallel_run(pool, [&](int w, int n) {
      for (int64_t r = rows * w / n; r < rows * (w + 1) / n; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const float v = unit(s, uint64_t(r * cols + c)) * scale;
          uint8_t* p = base + r * rb;
          if (t == DType::F32) std::memcpy(p + c * 4, &v, 4);
          else {
            const uint16_t h = t == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
            std::memcpy(p + c * 2, &h, 2);
          }
        }
    });
    m.storage.push_back(buf);
    WeightView w;
    w.data = base;
    w.dtype = t;
    w.rows = rows;
    w.cols = cols;
    w.row_stride = rb;
    return w;
  }
  WeightView ones(int64_t n) {
    auto buf = std::make_shared<AlignedBuffer<float>>(size_t(n));
    for (int64_t i = 0; i < n; ++i) (*buf)[size_t(i)] = 1.0f;
    m.storage.push_back(buf);
    return WeightView{buf->data(), DType::F32, 1, n, n * 4};
  }
};

}  // namespace

std::shared_ptr<Model> random_model(const ModelConfig& c, DType dtype, uint64_t seed, ThreadPool* pool) {
  auto m = std::make_shared<Model>();
  m->config = c;
  m->path = "random";
  m->format = "random";
  Builder b{*m, dtype, seed, pool};
  const int64_t D = c.d_model, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim;
  const float sd = 1.0f / std::sqrt(float(D)), sq = 1.0f / std::sqrt(float(Q)), sf = 1.0f / std::sqrt(float(F));
  m->tok_embd = b.matrix(c.vocab_size, D, 1.0f, dtype);
  m->out_norm = b.ones(D);
  m->output = c.tied_embeddings ? m->tok_embd : b.matrix(c.vocab_size, D, sd, dtype);
  m->layers.resize(size_t(c.n_layers));
  for (LayerWeights& L : m->layers) {
    L.attn_norm = b.ones(D);
    L.ffn_norm = b.ones(D);
    L.wq = b.matrix(Q, D, sd, dtype);
    L.wk = b.matrix(KV, D, sd, dtype);
    L.wv = b.matrix(KV, D, sd, dtype);
    L.wo = b.matrix(D, Q, sq, dtype);
    if (c.qkv_bias) {
      L.bq = b.matrix(1, Q, 0.02f, DType::F32);
      L.bk = b.matrix(1, KV, 0.02f, DType::F32);
      L.bv = b.matrix(1, KV, 0.02f, DType::F32);
    }
    L.w_gate = b.matrix(F, D, sd, dtype);
    L.w_up = b.matrix(F, D, sd, dtype);
    L.w_down = b.matrix(D, F, sf, dtype);
  }
  return m;
}

}  // namespace loom
