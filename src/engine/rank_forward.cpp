#include "engine/rank_forward.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/op_timing.h"

namespace loom {

namespace {
constexpr int kTagActivations = 101;  // pipeline hand-off between stages
}

bool is_sampler(const RankLayout& L, const Plan& plan) {
  return L.sp == 0 && L.kvp == 0 && L.tp == 0 && L.pp == plan.pp - 1;
}

RankForward::RankForward(const StageContext& ctx, std::vector<KvEntry> holds)
    : ctx_(ctx), holds_(std::move(holds)) {
  const RankLayout& L = ctx_.layout;
  LOOM_CHECK(ctx_.weights && int64_t(ctx_.weights->size()) == L.layers.size(), "weights for ", ctx_.weights->size(),
             " layers, the stage has ", L.layers.size());
  first_stage_ = L.pp == 0;
  last_stage_ = L.pp == ctx_.plan.pp - 1;
  sampler_ = is_sampler(L, ctx_.plan);
  LOOM_CHECK(ctx_.dev && ctx_.kv, "a rank's forward needs its device and KV store");
  attn_ = make_attention_stage(ctx_);
  ffn_ = make_ffn_stage(ctx_);
  Device& dev = *ctx_.dev;
  for (DeviceArray<float>* b : {&x_, &xn_, &proj_, &gathered_, &logits_}) b->bind(dev);
  auto up = [&](const WeightView& w) { return ctx_.uploads ? ctx_.uploads->get(dev, w) : dev.upload(w); };
  if (first_stage_) embed_ = up(ctx_.model->tok_embd);
  if (last_stage_ && sampler_) {
    out_norm_ = up(ctx_.model->out_norm);
    // The CPU computes on the decode layout (row tiles); a GPU copies plain rows.
    output_ = up(dev.kind() == DeviceKind::Cpu ? ctx_.model->decode_output(ctx_.pool) : ctx_.model->output);
  }
}

std::vector<Range> pipeline_micro_batches(const std::vector<int64_t>& tokens, int p) {
  std::vector<Range> out;
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return out;
  int64_t total = 0;
  for (int64_t t : tokens) total += t;
  const int64_t k = std::min<int64_t>(std::max(p, 1), n);
  // Cut i ends once the running token count reaches i/k of the total (each part >= 1 sequence,
  // and enough sequences left for the parts after it).
  int64_t begin = 0, acc = 0;
  for (int64_t i = 1; i <= k; ++i) {
    int64_t end = begin;
    if (i == k) {
      end = n;
    } else {
      do acc += tokens[size_t(end++)];
      while (end < n - (k - i) && acc * k < total * i);
    }
    out.push_back(Range{begin, end});
    begin = end;
  }
  return out;
}

int RankForward::forward(const ForwardBatch& batch, std::vector<float>* logits) {
  if (logits) logits->clear();
  const RankLayout& L = ctx_.layout;
  if (ctx_.plan.pp == 1) {
    const int rows = forward_micro(batch, logits);
    ctx_.dev->sync();  // the step's K/V writes are done when the step returns (tier copies read them)
    return rows;
  }
  // Pipeline (Seesaw 5.1, W9: "each decoding step processes 1/PP of the sequences"): the
  // replica's sequences, in batch order, cut into up to PP micro-batches of about equal tokens.
  // Every rank of the replica cuts the same way; stage s runs micro-batch k while stage s + 1 runs
  // k - 1 (the send of k's activations completes once the next stage has taken them), so the
  // stages overlap after a fill of PP - 1 micro-batches. The last stage appends each micro-batch's
  // logits, which keeps the replica's batch order.
  mb_seqs_.clear();
  std::vector<int64_t> tokens;
  std::vector<int64_t> first_token;
  int64_t at = 0;
  for (const ForwardSeq& s : batch.seqs) {
    const int64_t dp = L.tokens.dp_degree;
    if (replica_of(s.seq_id, dp) == L.tokens.dp_index) {
      mb_seqs_.push_back(s);
      tokens.push_back(s.n_tokens);
      first_token.push_back(at);
    }
    at += s.n_tokens;
  }
  int rows = 0;
  for (const Range& part : pipeline_micro_batches(tokens, L.tokens.micro_batches)) {
    mb_.seqs.assign(mb_seqs_.begin() + part.begin, mb_seqs_.begin() + part.end);
    mb_.tokens.clear();
    for (int64_t i = part.begin; i < part.end; ++i)
      mb_.tokens.insert(mb_.tokens.end(), batch.tokens.begin() + first_token[size_t(i)],
                        batch.tokens.begin() + first_token[size_t(i)] + mb_seqs_[size_t(i)].n_tokens);
    rows += forward_micro(mb_, logits);
  }
  ctx_.dev->sync();
  return rows;
}

int RankForward::forward_micro(const ForwardBatch& batch, std::vector<float>* logits) {
  const Model& model = *ctx_.model;
  const ModelConfig& c = model.config;
  const RankLayout& L = ctx_.layout;
  const int64_t d = c.d_model;
  make_step_rows(batch, L.tokens, rows_);
  const StepRows& rows = rows_;
  ffn_->begin_step(batch);
  if (rows.n == 0) {  // nothing of this replica in the step (DP)
    ffn_->idle(L.layers);
    return 0;
  }
  for (size_t i = 0; i < rows.seqs.size(); ++i) {
    const ForwardSeq& s = rows.seqs[i];
    ctx_.kv->reserve(s.seq_id, s.start_pos + s.n_tokens, holds_);
  }
  const int64_t m = rows.m();
  Device& dev = *ctx_.dev;
  x_.resize(size_t(m * d));
  xn_.resize(size_t(m * d));
  proj_.resize(size_t(m * d));
  float* x = x_.data();
  Communicator& pp = ctx_.groups->get("pp");
  if (first_stage_) {
    optime::Scope timed(optime::Op::Elementwise);
    // Embedding of the rank's rows; padded rows (SP) are zeros and stay so through rmsnorm.
    dev.fill_zero(x, size_t(m * d) * sizeof(float));
    for (int64_t g = rows.slice.real.begin; g < rows.slice.real.end; ++g) {
      const int32_t tok = rows.tokens[size_t(g)];
      LOOM_CHECK(tok >= 0 && tok < c.vocab_size, "token id ", tok);
    }
    dev.embed(embed_, rows.tokens.data() + rows.slice.real.begin, rows.slice.real.size(),
              x + (rows.slice.real.begin - rows.slice.padded.begin) * d, d);
  } else {
    optime::Scope timed(optime::Op::Collective);
    pp.recv(L.pp - 1, kTagActivations, x, size_t(m * d) * sizeof(float));
  }

  for (int64_t l = L.layers.begin; l < L.layers.end; ++l) {
    const DeviceLayerWeights& LW = ctx_.layer(int(l));
    {
      optime::Scope timed(optime::Op::Elementwise);
      dev.rmsnorm(xn_.data(), x, LW.attn_norm.f32(), m, d, c.rms_eps);
    }
    attn_->forward(int(l), rows, xn_.data(), proj_.data());
    {
      optime::Scope timed(optime::Op::Elementwise);
      dev.add(x, proj_.data(), m * d);
      dev.rmsnorm(xn_.data(), x, LW.ffn_norm.f32(), m, d, c.rms_eps);
    }
    ffn_->forward(int(l), m, xn_.data(), proj_.data());
    optime::Scope timed(optime::Op::Elementwise);
    dev.add(x, proj_.data(), m * d);
  }

  if (!last_stage_) {
    optime::Scope timed(optime::Op::Collective);
    pp.send(L.pp + 1, kTagActivations, x, size_t(m * d) * sizeof(float));
    return 0;
  }
  // The last hidden state of every sampling sequence, in batch order, to the sampler. With SP the
  // rows are spread over the slices: the SP group of tp == 0 gathers them (Shift Algorithm 1 line
  // 13, restricted to those rows). After the TP all-reduce every TP rank holds the same states.
  if (L.tp != 0 || L.kvp != 0) return 0;
  const int s = L.tokens.sp_degree;
  std::vector<size_t> counts(size_t(s), 0);
  int64_t n_out = 0, mine = 0;
  spans_.clear();
  for (size_t i = 0; i < rows.seqs.size(); ++i) {
    if (!rows.seqs[i].want_logits) continue;
    const int64_t g = rows.seq_row[i] + rows.seqs[i].n_tokens - 1;
    counts[size_t(g / m)] += size_t(d);
    if (rows.slice.padded.contains(g)) {
      spans_.push_back({mine * d, (g - rows.slice.padded.begin) * d, d});
      ++mine;
    }
    ++n_out;
  }
  if (n_out == 0) return 0;
  dev.copy_spans(xn_.data(), x, spans_);
  float* out_rows = xn_.data();
  if (s > 1) {
    gathered_.resize(size_t(n_out * d));
    optime::Scope timed(optime::Op::Collective);
    ctx_.groups->get("sp").all_gather_v(xn_.data(), gathered_.data(), counts);
    out_rows = gathered_.data();
  }
  if (!sampler_ || !logits) return 0;
  {
    optime::Scope timed(optime::Op::Elementwise);
    dev.rmsnorm(out_rows, out_rows, out_norm_.f32(), n_out, d, c.rms_eps);
  }
  optime::Scope timed(optime::Op::Matmul);
  const size_t before = logits->size();  // logits of earlier micro-batches stay in front
  const size_t n_logits = size_t(n_out) * size_t(c.vocab_size);
  logits_.resize(n_logits);
  dev.matmul(out_rows, n_out, d, output_, logits_.data(), c.vocab_size, false, ctx_.numerics);
  logits->resize(before + n_logits);
  dev.to_host(logits->data() + before, logits_.data(), n_logits * sizeof(float));
  return int(n_out);
}

}  // namespace loom
