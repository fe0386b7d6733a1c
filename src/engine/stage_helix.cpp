// Helix KVP(k) x TPA(a) attention (Helix 2.1; PLANS.md "Helix"), an attention stage of stage.h:
//
//   1. redundant QKV (H2): every KVP rank projects Q/K/V of ALL the step's rows for its TPA heads
//      (proj heads [tpa*H/a, (tpa+1)*H/a) and their KV heads; a <= K, so no KV head on two TPA
//      ranks);
//   2. round-robin KV (H10, ambiguity 2): position p is in Helix block floor(p / block), stored
//      on KVP rank block mod k; the rank writes the K/V of the rows it owns and no others, so a
//      token's K/V is stored once and enters only its owner's softmax (ambiguity 3);
//   3. local attention (H3) over the rank's own blocks, causal by global position, giving a
//      normalised partial output o_i and lse_i per (row, head); a rank holding none of a row's
//      keys gives lse = -inf and weight 0 (TRT-LLM #15383). The kernel sees the rank's blocks as one
//      compact sequence: its pages in block order, and each query's position replaced by the count
//      of its keys held here minus one (so causality by global position becomes a prefix);
//   4. one all-to-all over "kvp" (H4): the a-shard's H/a heads are cut into k chunks of H/N heads;
//      KVP rank j receives chunk j (o rows and lse) from every peer and merges them exactly,
//      LSE = log sum exp(lse_i), o = sum exp(lse_i - LSE) o_i (kernels::merge_attention);
//   5. Wo as TP(N) over out_heads (H6): rank (kvp, tpa) holds heads tpa*H/a + kvp*H/N + [0, H/N),
//      the slice of TP(N) shard tpa*k + kvp — the order of the "ffn-tp" group, whose all-reduce
//      follows (TRT-LLM #10350 mixed these up).
// HOP-B (2.1.3): the step's sequences are cut into chunks; the all-to-all of chunk c is started
// (Communicator::start_all_to_all_v_bytes) before the attention of chunk c+1 runs, and waited on
// after it. Each row's arithmetic is the same either way, so on and off give the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/clock.h"
#include "core/error.h"
#include "engine/stage.h"

namespace loom {

namespace {

class HelixAttention final : public AttentionStage {
 public:
  explicit HelixAttention(const StageContext& c)
      : c_(c), kvp_(c.groups->get("kvp")), reduce_(c.groups->get("ffn-tp")) {
    const RankLayout& L = c_.layout;
    k_deg_ = L.kv_shards;
    LOOM_CHECK(k_deg_ > 1 && kvp_.size() == k_deg_ && kvp_.rank() == L.kvp, "KVP group of kvp rank ", L.kvp);
    LOOM_CHECK(L.tokens.sp_degree == 1 && L.q_heads == L.proj_q_heads && L.kv_heads == L.proj_kv_heads,
               "Helix projects and attends one head set");
    LOOM_CHECK(int(L.q_heads.size()) % k_deg_ == 0 && int(L.out_heads.size()) * k_deg_ == int(L.q_heads.size()),
               "Helix chunks of H/N heads");
    // Pinned: the Wo heads are chunk `kvp` of the TPA heads, and the FFN / Wo group rank is
    // tpa * k + kvp (rank order after the merge == Wo shard order).
    LOOM_CHECK(L.out_heads.front() == L.q_heads[size_t(L.kvp) * L.out_heads.size()], "Wo heads of rank ", L.rank);
    LOOM_CHECK(reduce_.rank() == L.tp * k_deg_ + L.kvp && reduce_.size() == k_deg_ * int(c_.plan.tp),
               "TP(N) rank of (kvp ", L.kvp, ", tpa ", L.tp, ") is ", reduce_.rank());
    pages_per_block_ = L.kv_block / c_.kv->block_size();
    LOOM_CHECK(pages_per_block_ >= 1 && L.kv_block % c_.kv->block_size() == 0, "Helix block of ", L.kv_block,
               " tokens over KV pages of ", c_.kv->block_size());
    for (DeviceArray<float>* b : {&q_, &k_, &v_, &part_, &merged_, &lse_, &send_, &recv_}) b->bind(*c_.dev);
  }
  const char* name() const override { return "helix"; }
  double exposed_comm_s() const override { return exposed_s_; }

  void forward(int layer, const StepRows& rows, const float* xn, float* out) override {
    const ModelConfig& cfg = c_.model->config;
    const RankLayout& L = c_.layout;
    const DeviceLayerWeights& W = c_.layer(layer);
    Device& dev = *c_.dev;
    const int64_t n = rows.n, d = cfg.d_model, dh = cfg.head_dim;
    const int hq = int(L.q_heads.size()), hk = int(L.kv_heads.size()), hc = hq / k_deg_;  // hc = H/N
    const int64_t q_dim = hq * dh, kv_dim = hk * dh;
    grow(n, q_dim, kv_dim, hq);

    // 1. redundant QKV of all rows for the TPA heads.
    project_qkv(dev, W, xn, n, d, hq, hk, dh, rows.pos.data(), c_.rope, q_.data(), k_.data(), v_.data(), c_.numerics);

    // 2. the K/V of the rows whose block this rank owns.
    KvStore& kv = *c_.kv;
    const int64_t B = kv.block_size(), pf = kv.page_floats();
    spans_.clear();
    for (size_t i = 0; i < rows.seqs.size(); ++i) {
      const ForwardSeq& s = rows.seqs[i];
      for (int t = 0; t < s.n_tokens; ++t) {
        const int64_t p = s.start_pos + t;
        if (!owns(p)) continue;
        for (int j = 0; j < hk; ++j) {
          const int32_t page = kv.page(s.seq_id, layer, L.kv_heads[size_t(j)], p / B);
          LOOM_CHECK(page != kNoPage, "no KV page for sequence ", s.seq_id, " position ", p);
          const int64_t r = rows.seq_row[i] + t;
          spans_.push_back({int64_t(page) * pf + (p % B) * dh, r * kv_dim + j * dh, dh});
        }
      }
    }
    dev.copy_spans(kv.k_pages(), k_.data(), spans_);
    dev.copy_spans(kv.v_pages(), v_.data(), spans_);

    // 3-4 per chunk of sequences (HOP-B): local attention, then the all-to-all of the chunk.
    const int n_chunks = L.kv_shards > 1 && c_.plan.hopb ? int(std::min<size_t>(rows.seqs.size(), kMaxChunks)) : 1;
    chunks_.clear();
    chunks_.resize(size_t(n_chunks));
    for (int ch = 0; ch < n_chunks; ++ch) {
      Chunk& C = chunks_[size_t(ch)];
      C.seq_begin = rows.seqs.size() * size_t(ch) / size_t(n_chunks);
      C.seq_end = rows.seqs.size() * size_t(ch + 1) / size_t(n_chunks);
      C.row_begin = C.seq_begin < rows.seqs.size() ? rows.seq_row[C.seq_begin] : n;
      C.row_end = C.seq_end < rows.seqs.size() ? rows.seq_row[C.seq_end] : n;
    }
    const int64_t elems_per_row = int64_t(hc) * (dh + 1);  // a chunk of heads: o rows, then lse
    // All chunks' buffers up front: a started all-to-all keeps pointers into them.
    send_.resize(size_t(n * k_deg_ * elems_per_row));
    recv_.resize(send_.size());
    for (int ch = 0; ch < n_chunks; ++ch) {
      attend(layer, rows, chunks_[size_t(ch)], hq, hk, dh);
      start(chunks_[size_t(ch)], hc, dh, elems_per_row);
      if (ch > 0) finish(chunks_[size_t(ch - 1)], hc, dh, elems_per_row);
      if (!c_.plan.hopb) finish(chunks_[size_t(ch)], hc, dh, elems_per_row);  // n_chunks == 1
    }
    if (c_.plan.hopb) finish(chunks_[size_t(n_chunks - 1)], hc, dh, elems_per_row);

    // 5. Wo over the H/N merged heads, all-reduce over TP(N).
    dev.matmul(merged_.data(), n, int64_t(hc) * dh, W.wo, out, d, false, c_.numerics);
    if (reduce_.size() > 1) reduce_.all_reduce_sum(out, size_t(n * d));
  }

 private:
  static constexpr size_t kMaxChunks = 8;

  struct Chunk {
    size_t seq_begin = 0, seq_end = 0;
    int64_t row_begin = 0, row_end = 0;
    std::unique_ptr<CommRequest> req;
    bool done = false;
  };

  bool owns(int64_t pos) const {
    return (pos / c_.layout.kv_block) % c_.layout.kv_shards == c_.layout.kv_shard;
  }

  // Local attention of the chunk's rows over the rank's blocks: part_[row][head][dh], lse_[row][head].
  void attend(int layer, const StepRows& rows, const Chunk& C, int hq, int hk, int64_t dh) {
    const RankLayout& L = c_.layout;
    KvStore& kv = *c_.kv;
    const int64_t B = kv.block_size(), q_dim = hq * dh, G = c_.model->config.group_size();
    const float scale = 1.0f / std::sqrt(float(dh));
    // Host metadata of every job of the chunk, kept until the device has read it.
    const size_t n_seqs = C.seq_end - C.seq_begin;
    vpos_.resize(n_seqs);
    compact_.resize(n_seqs * size_t(hk));
    jobs_.clear();
    for (size_t i = C.seq_begin; i < C.seq_end; ++i) {
      const ForwardSeq& s = rows.seqs[i];
      const int64_t r0 = rows.seq_row[i], ctx = s.start_pos + s.n_tokens;
      // The held keys of [0, ctx) as one compact sequence: vpos[t] = held keys at or before the
      // query's position, minus one (-1: none held here).
      std::vector<int32_t>& vpos = vpos_[i - C.seq_begin];
      vpos.resize(size_t(s.n_tokens));
      for (int t = 0; t < s.n_tokens; ++t) vpos[size_t(t)] = int32_t(held_before(s.start_pos + t + 1) - 1);
      const int64_t n_keys = held_before(ctx);
      for (int j = 0; j < hk; ++j) {
        const int kvh = L.kv_heads[size_t(j)];
        const std::span<const int32_t> table = kv.table(s.seq_id, layer, kvh);
        std::vector<int32_t>& compact = compact_[(i - C.seq_begin) * size_t(hk) + size_t(j)];
        compact.clear();
        for (int64_t b = 0; b * B < ctx; ++b)
          if (b < int64_t(table.size()) && table[size_t(b)] != kNoPage) compact.push_back(table[size_t(b)]);
        LOOM_CHECK(int64_t(compact.size()) * B >= n_keys, "sequence ", s.seq_id, " misses held pages");
        // The query heads of this KV head (q uses kv head q / G): a contiguous run.
        int q0 = -1, nq = 0;
        for (int x = 0; x < hq; ++x)
          if (L.q_heads[size_t(x)] / G == kvh) {
            if (q0 < 0) q0 = x;
            ++nq;
          }
        AttentionJob jb;
        jb.q = q_.data() + r0 * q_dim + int64_t(q0) * dh;
        jb.ldq = q_dim;
        jb.n_q = s.n_tokens;
        jb.q_pos = vpos.data();
        jb.pages = compact.data();
        jb.n_pages = int64_t(compact.size());
        jb.kv_end = n_keys;
        jb.n_heads = nq;
        jb.out = part_.data() + r0 * q_dim + int64_t(q0) * dh;
        jb.ldo = q_dim;
        jb.lse = lse_.data() + r0 * hq + q0;
        jb.ld_lse = hq;
        jobs_.push_back(jb);
      }
    }
    c_.dev->attention(paged_kv(kv), jobs_, scale);
  }

  int64_t held_before(int64_t end) const {
    return helix_keys_held(end, c_.layout.kv_block, c_.layout.kv_shards, c_.layout.kv_shard);
  }

  // Packs the chunk's partials by destination (chunk of heads j -> KVP rank j) and starts the
  // all-to-all: per row, [hc heads][dh] of o, then [hc] lse.
  void start(Chunk& C, int hc, int64_t dh, int64_t elems_per_row) {
    Device& dev = *c_.dev;
    const int64_t rows = C.row_end - C.row_begin, hq = int64_t(hc) * k_deg_, q_dim = hq * dh;
    const size_t per_peer = size_t(rows * elems_per_row);
    const size_t base = size_t(C.row_begin * k_deg_ * elems_per_row);  // chunks in row order
    float* sb = send_.data() + base;
    for (int j = 0; j < k_deg_; ++j) {
      float* o = sb + size_t(j) * per_peer;
      float* l = o + rows * hc * dh;
      dev.copy_2d(o, hc * dh, part_.data() + C.row_begin * q_dim + int64_t(j) * hc * dh, q_dim, rows, hc * dh);
      dev.copy_2d(l, hc, lse_.data() + C.row_begin * hq + int64_t(j) * hc, hq, rows, hc);
    }
    counts_.assign(size_t(k_deg_), per_peer * sizeof(float));
    displs_.resize(size_t(k_deg_));
    for (int j = 0; j < k_deg_; ++j) displs_[size_t(j)] = (base + size_t(j) * per_peer) * sizeof(float);
    C.req = kvp_.start_all_to_all_v_bytes(send_.data(), counts_, displs_, recv_.data(), counts_, displs_);
  }

  // Waits for the chunk's all-to-all and merges the k partials of each (row, my head).
  void finish(Chunk& C, int hc, int64_t dh, int64_t elems_per_row) {
    if (C.done) return;
    const double t0 = now_seconds();
    C.req->wait();
    exposed_s_ += now_seconds() - t0;
    C.req.reset();
    C.done = true;
    const int64_t rows = C.row_end - C.row_begin;
    if (rows == 0) return;
    const size_t per_peer = size_t(rows * elems_per_row);
    const size_t base = size_t(C.row_begin * k_deg_ * elems_per_row);
    parts_.resize(size_t(k_deg_));
    lses_.resize(size_t(k_deg_));
    for (int i = 0; i < k_deg_; ++i) {
      parts_[size_t(i)] = recv_.data() + base + size_t(i) * per_peer;
      lses_[size_t(i)] = parts_[size_t(i)] + rows * hc * dh;
    }
    // Rows of (row, head) pairs: [rows * hc][dh] — the merged layout [rows][hc * dh] is the same.
    c_.dev->merge_attention(parts_.data(), lses_.data(), k_deg_, rows * hc, int(dh),
                            merged_.data() + C.row_begin * hc * dh, nullptr);
  }

  void grow(int64_t n, int64_t q_dim, int64_t kv_dim, int hq) {
    q_.resize(size_t(n * q_dim));
    k_.resize(size_t(n * kv_dim));
    v_.resize(size_t(n * kv_dim));
    part_.resize(size_t(n * q_dim));
    lse_.resize(size_t(n * hq));
    merged_.resize(size_t(n * q_dim / k_deg_));
  }

  StageContext c_;
  Communicator& kvp_;
  Communicator& reduce_;
  int k_deg_ = 1, pages_per_block_ = 1;
  double exposed_s_ = 0;
  DeviceArray<float> q_, k_, v_, part_, merged_, lse_, send_, recv_;
  std::vector<std::vector<int32_t>> vpos_, compact_;
  std::vector<CopySpan> spans_;
  std::vector<AttentionJob> jobs_;
  std::vector<Chunk> chunks_;
  std::vector<size_t> counts_, displs_;
  std::vector<const float*> parts_, lses_;
};

}  // namespace

int64_t helix_keys_held(int64_t end, int64_t block, int64_t kvp, int64_t kvp_index) {
  const int64_t full = end / block;  // whole Helix blocks before `end`
  int64_t held = (full / kvp) * block + (full % kvp > kvp_index ? block : 0);
  if (full % kvp == kvp_index) held += end - full * block;  // the partial block, when it is ours
  return held;
}

std::unique_ptr<AttentionStage> make_helix_attention(const StageContext& c) {
  return std::make_unique<HelixAttention>(c);
}

}  // namespace loom
