#include "engine/rank_engine.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>

#include "comm/single.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/op_timing.h"
#include "core/rng.h"
#include "device/cpu_device.h"
#include "kernels/kernels.h"

namespace loom {

int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, int64_t position,
                     const std::vector<std::pair<TokenId, int32_t>>& output_counts) {
  thread_local std::vector<float> adjusted;
  if (p.adjusts_logits()) {
    adjusted.assign(logits, logits + vocab);
    for (const auto& [id, bias] : p.logit_bias)
      if (id >= 0 && id < vocab) adjusted[size_t(id)] += bias;
    for (const auto& [id, count] : output_counts)
      if (id >= 0 && id < vocab && count > 0)
        adjusted[size_t(id)] -= p.frequency_penalty * float(count) + p.presence_penalty;
    logits = adjusted.data();
  }
  if (p.temperature <= 0.0f) return kernels::argmax(logits, vocab);
  kernels::SamplingParams kp;
  kp.temperature = p.temperature;
  kp.top_k = p.top_k;
  kp.top_p = p.top_p;
  Rng rng(p.seed * 0x9e3779b97f4a7c15ull + uint64_t(position));
  return kernels::sample(logits, vocab, kp, rng.uniform());
}

void token_logprobs(const float* logits, int vocab, TokenId chosen, int top_n, TokenLogprobs* out) {
  LOOM_CHECK(vocab > 0 && chosen >= 0 && chosen < vocab, "token_logprobs: token ", chosen, " of ", vocab);
  float m = logits[0];
  for (int i = 1; i < vocab; ++i) m = std::max(m, logits[i]);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - double(m));
  const double lse = double(m) + std::log(sum);
  out->token = chosen;
  out->logprob = float(double(logits[chosen]) - lse);
  out->top.clear();
  const int n = std::min(std::max(top_n, 0), vocab);
  if (n == 0) return;
  thread_local std::vector<int32_t> ids;
  ids.resize(size_t(vocab));
  for (int i = 0; i < vocab; ++i) ids[size_t(i)] = i;
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), before);
  out->top.reserve(size_t(n));
  for (int i = 0; i < n; ++i) out->top.emplace_back(ids[size_t(i)], float(double(logits[ids[size_t(i)]]) - lse));
}

namespace {

// Bytes of one sampler rank's part of the step's token gather: its SampledTokens in batch order,
// then, for those whose request asked for logprobs, f32 logprob and k x (i32 id, f32 logprob)
// (k = min(logprobs, vocab)). Every rank computes every part's size from the batch alone.
size_t logprob_bytes(const ScheduledSeq& s, int vocab) {
  if (s.sampling.logprobs < 0) return 0;
  return sizeof(float) + size_t(std::min(s.sampling.logprobs, vocab)) * (sizeof(int32_t) + sizeof(float));
}

}  // namespace

void to_forward_batch(const StepBatch& batch, ForwardBatch& fb) {
  fb.tokens.clear();
  fb.seqs.clear();
  for (const ScheduledSeq& s : batch.seqs) {
    LOOM_CHECK(int(s.token_ids.size()) == s.num_tokens);
    fb.tokens.insert(fb.tokens.end(), s.token_ids.begin(), s.token_ids.end());
    fb.seqs.push_back(ForwardSeq{s.seq_id, s.start, s.num_tokens, s.sample});
  }
}

void check_block_sizes(const std::vector<Plan>& plans, int block_size) {
  for (const Plan& p : plans)
    if (p.kvp > 1 && p.kv_block % block_size != 0)
      fail("plan ", p.to_string(), ": the Helix block of ", p.kv_block, " tokens is not a multiple of the KV block of ",
           block_size, " tokens (--block-size); give block=", block_size, " or a multiple");
}

RankEngine::RankEngine(std::shared_ptr<const Model> model, const PlanSet& plans, Communicator& world, ThreadPool* pool,
                       const RankEngineOptions& options)
    : model_(std::move(model)),
      plans_(plans),
      world_(world),
      pool_(pool),
      options_(options),
      own_dev_(options.device ? nullptr : make_cpu_device(pool)),
      dev_(options.device ? options.device : own_dev_.get()),
      groups_(world),
      weights_(model_, pool, options.shift_weights) {
  const ModelConfig& c = model_->config;
  if (world.size() != plans_.n_ranks())
    fail("plan ", plans_.name(0), " needs ", plans_.n_ranks(), " ranks, the world has ", world.size());
  check_block_sizes(plans_.plans(), options.block_size);
  if (options.kv) {
    LOOM_CHECK(options.kv->num_pages() == options.kv_pages && options.kv->block_size() == options.block_size &&
                   options.kv->n_layers() == c.n_layers && options.kv->n_kv_heads() == c.n_kv_heads &&
                   options.kv->head_dim() == c.head_dim && (!options.device || &options.kv->device() == dev_),
               "the shared KV store does not match the engine's options, device and model");
    kv_ = options.kv;
  } else {
    kv_ = std::make_shared<KvStore>(c.n_layers, c.n_kv_heads, c.head_dim, options.block_size, options.kv_pages, dev_);
  }
  // The KV connectors: rank-to-rank migration, and the CPU tier when there is one.
  kv_ops_.add(std::make_unique<MigrationConnector>(options.block_size, c.head_dim, options.transfer));
  if (options.tier) {
    auto tier = std::make_unique<TierConnector>(c.n_layers, c.n_kv_heads, c.head_dim, options.block_size,
                                                plans_.n_ranks(), options.tier, *dev_, options.overlap_swaps);
    if (options.tier_copy_hook) tier->swaps().set_before_task(options.tier_copy_hook);
    tier_ = tier.get();
    kv_ops_.add(std::move(tier));
  }
  // Every rank's page budget, for the pool shapes (equal on every rank).
  std::vector<int64_t> pages(size_t(world.size()));
  const int64_t mine = options.kv_pages;
  world.all_gather_bytes(&mine, pages.data(), sizeof mine);

  // The CPU computes on host copies of the shards (row tiles, shard_weights.h); other devices on
  // their own copies, uploaded once per distinct shard (plans with equal shards share them).
  const bool host_copies = dev_->kind() == DeviceKind::Cpu;
  const kernels::RopeParams rope = rope_params(c);
  const kernels::Numerics numerics = options.numerics ? *options.numerics : kernels::default_numerics();
  const ModelShape& shape = plans_.shape();
  for (int id = 0; id < plans_.size(); ++id) {
    const Plan& plan = plans_.plan(id);
    auto in = std::make_unique<Instance>();
    in->layout = rank_layout(plan, shape, world.rank());
    in->groups = PlanGroups(plan, groups_);  // collective: same plans in the same order everywhere
    const WeightShards shards = weight_shards(plan, shape, world.rank());
    in->shards = shards;
    in->lazy = options.lazy_weights && plan.weights == WeightSource::Resident && host_copies;
    if (!host_copies) {
      // A GPU copies what it computes with (upload_layers): the host side stays views of the model.
      in->weights = shard_views(*model_, shards);
      memory_.push_back(PlanMemory{shard_matrix_bytes(in->weights), 0});
    } else if (in->lazy) {
      // Only the initial plan's copy now; the others at a switch into them (reshard_to).
      const std::vector<ShardLayerWeights> views = shard_views(*model_, shards);
      if (id == current_) {
        held_ = reshard(*model_, shards, nullptr, nullptr, pool_);
        in->weights = held_.layers;
      } else {
        in->weights.assign(views.size(), ShardLayerWeights{});
      }
      memory_.push_back(PlanMemory{shard_matrix_bytes(views), id == current_ ? held_.owned_bytes : 0, true});
    } else {
      const int64_t owned_before = weights_.owned_bytes();
      const ShardWeightSet& set = weights_.get(shards, plan.weights);
      in->weights = set.layers;
      memory_.push_back(PlanMemory{shard_matrix_bytes(set.layers), weights_.owned_bytes() - owned_before});
    }
    in->on_device = upload_layers(*dev_, *model_, in->weights, in->layout.layers, &uploads_);
    StageContext ctx;
    ctx.model = model_;
    ctx.plan = plan;
    ctx.shape = shape;
    ctx.layout = in->layout;
    ctx.groups = &in->groups;
    ctx.pool = pool_;
    ctx.dev = dev_;
    ctx.uploads = &uploads_;
    ctx.kv = kv_.get();
    ctx.weights = &in->on_device;
    ctx.rope = rope;
    ctx.numerics = numerics;
    // What this rank stores: its entries of the plan's placement, and nothing else.
    in->forward = std::make_unique<RankForward>(ctx, plans_.placement(id).entries(world.rank()));
    // Pools: blocks = pages / (layers x KV heads) of the least roomy rank.
    int64_t per_pool = INT32_MAX;
    in->sampler_replica.assign(size_t(world.size()), -1);
    for (int r = 0; r < world.size(); ++r) {
      const RankLayout lr = rank_layout(plan, shape, r);
      const int64_t cost = lr.layers.size() * int64_t(lr.kv_heads.size());
      per_pool = std::min(per_pool, pages[size_t(r)] / std::max<int64_t>(cost, 1));
      if (is_sampler(lr, plan)) in->sampler_replica[size_t(r)] = lr.dp;
    }
    pools_.push_back(KvPoolShape{plan.dp, plan.kvp, int(per_pool), plan.kvp > 1 ? plan.kv_block / options.block_size : 1});
    instances_.push_back(std::move(in));
  }
}

void RankEngine::release(const std::vector<RequestId>& seqs) {
  for (RequestId id : seqs) {
    kv_ops_.release(id, *kv_);  // after its copies here, if any are in flight
    kv_->release(id);
  }
}

TierStats RankEngine::tier_stats() const {
  TierStats t;
  if (!tier_) return t;
  const TierSwapCounters c = tier_->swaps().counters();
  t.swapped_out = c.swapped_out;
  t.swapped_in = c.swapped_in;
  t.bytes_out = c.bytes_out;
  t.bytes_in = c.bytes_in;
  t.copy_s = c.copy_s;
  t.issue_s = c.issue_s;
  t.wait_s = c.wait_s;
  t.waits = c.waits;
  t.unready_decodes = tier_->unready_decodes();
  return t;
}

KvOpContext RankEngine::kv_context(int plan, KvOpsResult* result) {
  KvOpContext ctx;
  ctx.me = world_.rank();
  ctx.from = &plans_.placement(current_);
  ctx.to = &plans_.placement(plan);
  ctx.store = kv_.get();
  ctx.world = &world_;
  ctx.result = result;
  return ctx;
}

bool RankEngine::migrates(int plan, const std::vector<SeqExtent>& seqs, bool resident) const {
  return plan != current_ && !plans_.same_placement(current_, plan) && !(resident && seqs.empty());
}

std::vector<KvOp> RankEngine::kv_ops(const StepBatch& b) const {
  std::vector<KvOp> ops;
  if (!b.swap_out.empty()) ops.push_back(KvOp{KvOpKind::SwapOut, b.swap_out, false});
  if (migrates(b.plan_id, b.kv_seqs, b.kv_resident)) ops.push_back(KvOp{KvOpKind::Migrate, b.kv_seqs, b.kv_resident});
  if (!b.swap_in.empty()) ops.push_back(KvOp{KvOpKind::SwapIn, b.swap_in, false});
  KvOp await{KvOpKind::Await, {}, false};
  for (const ScheduledSeq& s : b.seqs) await.seqs.push_back(SeqExtent{s.seq_id, s.start + s.num_tokens});
  ops.push_back(std::move(await));
  return ops;
}

void RankEngine::switch_plan(int plan, SwitchResult* r) {
  if (plan == current_) return;
  reshard_to(plan, r);
  current_ = plan;
}

SwitchResult RankEngine::switch_to(int plan, const std::vector<SeqExtent>& seqs, bool resident) {
  if (plan < 0 || plan >= plans_.size()) fail("plan id ", plan, " outside the set of ", plans_.size());
  SwitchResult r;
  if (plan == current_) return r;
  if (migrates(plan, seqs, resident)) {
    KvOpsResult kr;
    KvOpContext ctx = kv_context(plan, &kr);
    kv_ops_.run_one(KvOp{KvOpKind::Migrate, seqs, resident}, ctx);
    r.moved = kr.moved;
    r.total_bytes = kr.total_bytes;
    r.transfer = kr.transfer;
  }
  switch_plan(plan, &r);
  return r;
}

void RankEngine::reshard_to(int plan, SwitchResult* r) {
  Instance& from = *instances_[size_t(current_)];
  Instance& to = *instances_[size_t(plan)];
  if (!from.lazy && !to.lazy) return;
  const double t0 = now_seconds();
  const int64_t before = held_.owned_bytes;
  ShardWeightSet next;
  int64_t built = 0;
  if (to.lazy) next = reshard(*model_, to.shards, from.lazy ? &held_ : nullptr, from.lazy ? &from.shards : nullptr,
                              pool_, &built);
  if (from.lazy) {  // no view outlives its copy
    from.weights.assign(from.weights.size(), ShardLayerWeights{});
    from.on_device.assign(from.on_device.size(), DeviceLayerWeights{});
  }
  held_ = std::move(next);  // frees every part of the old copy the new one does not share
  if (to.lazy) {
    to.weights = held_.layers;
    to.on_device = upload_layers(*dev_, *model_, to.weights, to.layout.layers, &uploads_);
  }
  r->weight_bytes_built = built;
  r->weight_bytes_freed = before + built - held_.owned_bytes;
  r->reshard_s = now_seconds() - t0;
}

int RankEngine::forward(const ForwardBatch& batch, std::vector<float>* logits) {
  return instances_[size_t(current_)]->forward->forward(batch, logits);
}

StepResult RankEngine::step_replica(const StepBatch& batch, const std::vector<RequestId>& released) {
  LOOM_CHECK(batch.block_size == options_.block_size, "step ", batch.step_index, " uses KV blocks of ",
             batch.block_size, " tokens, this rank's store ", options_.block_size);
  LOOM_CHECK(batch.swap_out.empty() && batch.swap_in.empty() && batch.kv_seqs.empty(), "step ", batch.step_index,
             ": a replica's own step moves no KV");
  if (batch.plan_id < 0 || batch.plan_id >= plans_.size())
    fail("step ", batch.step_index, ": plan id ", batch.plan_id, " outside the set of ", plans_.size());
  const Plan& plan = plans_.plan(batch.plan_id);
  LOOM_CHECK(plan.size() == plan.dp && plans_.same_placement(current_, batch.plan_id) &&
                 !instances_[size_t(batch.plan_id)]->lazy && !instances_[size_t(current_)]->lazy,
             "step ", batch.step_index, ": plan ", plans_.name(batch.plan_id), " cannot step one replica alone");
  release(released);
  KvOpContext ctx = kv_context(batch.plan_id, nullptr);
  kv_ops_.run({}, ctx);  // no operation: the connectors' begin (the tier frees completed swap-outs' pages)
  last_switch_ = switch_to(batch.plan_id, {}, false);  // the same placement: only the id flips
  StepResult res;
  if (batch.seqs.empty()) return res;  // a release only: no forward, no step
  to_forward_batch(batch, fb_);
  Instance& in = *instances_[size_t(current_)];
  const int n_rows = in.forward->forward(fb_, &logits_);
  const int vocab = model_->config.vocab_size;
  const int me = world_.rank();
  const int my_replica = in.sampler_replica[size_t(me)];
  const int dp = plan.dp;
  LOOM_CHECK(my_replica >= 0, "rank ", me, " samples no replica under ", plans_.name(current_));
  int row = 0;
  for (const ScheduledSeq& s : batch.seqs) {
    LOOM_CHECK(replica_of(s.seq_id, dp) == my_replica, "step ", batch.step_index, ": sequence ", s.seq_id,
               " is not of replica ", my_replica);
    if (!s.sample) continue;
    LOOM_CHECK(row < n_rows, "step ", batch.step_index, ": ", n_rows, " logit rows for more samples");
    const float* row_logits = logits_.data() + int64_t(row) * vocab;
    res.sampled.push_back({s.seq_id, sample_token(row_logits, vocab, s.sampling, s.start + s.num_tokens, s.output_counts)});
    if (s.sampling.logprobs >= 0) {
      TokenLogprobs& l = res.logprobs.emplace_back();
      l.seq_id = s.seq_id;
      token_logprobs(row_logits, vocab, res.sampled.back().token, s.sampling.logprobs, &l);
    }
    ++row;
  }
  if (after_step) after_step(*this, batch, released);
  return res;
}

StepResult RankEngine::step(const StepBatch& batch, const std::vector<RequestId>& released, SwitchResult* sw) {
  LOOM_CHECK(batch.block_size == options_.block_size, "step ", batch.step_index, " uses KV blocks of ",
             batch.block_size, " tokens, this rank's store ", options_.block_size);
  if (batch.plan_id < 0 || batch.plan_id >= plans_.size())
    fail("plan id ", batch.plan_id, " outside the set of ", plans_.size());
  const std::vector<KvOp> ops = kv_ops(batch);
  kv_ops_.check(ops, batch.step_index);
  // 1. release
  release(released);
  // 2. KV operations: swap-outs under the current plan, the migration to the step's plan's
  // placement, swap-ins under it, the waits the step needs (kv/kv_connector.h)
  KvOpsResult moved;
  KvOpContext ctx = kv_context(batch.plan_id, &moved);
  kv_ops_.run(ops, ctx);
  // 3. switch: the step's plan current, its weights (lazy re-shard)
  last_switch_ = SwitchResult{};
  last_switch_.moved = moved.moved;
  last_switch_.total_bytes = moved.total_bytes;
  last_switch_.transfer = moved.transfer;
  switch_plan(batch.plan_id, &last_switch_);
  if (sw) *sw = last_switch_;
  // 4. forward, 5. sample
  to_forward_batch(batch, fb_);
  const int n_rows = instances_[size_t(current_)]->forward->forward(fb_, &logits_);
  return sample(batch, released, n_rows);
}

StepResult RankEngine::sample(const StepBatch& batch, const std::vector<RequestId>& released, int n_rows) {
  Instance& in = *instances_[size_t(current_)];
  const int vocab = model_->config.vocab_size;
  const int me = world_.rank();
  const int my_replica = in.sampler_replica[size_t(me)];
  const int dp = plans_.plan(current_).dp;
  StepResult res;
  std::optional<optime::Scope> sampling(std::in_place, optime::Op::Sampling);
  if (my_replica >= 0) {
    int row = 0;
    for (const ScheduledSeq& s : batch.seqs) {
      if (!s.sample || replica_of(s.seq_id, dp) != my_replica) continue;
      LOOM_CHECK(row < n_rows, "step ", batch.step_index, ": ", n_rows, " logit rows for more samples");
      const float* row_logits = logits_.data() + int64_t(row) * vocab;
      res.sampled.push_back(
          {s.seq_id, sample_token(row_logits, vocab, s.sampling, s.start + s.num_tokens, s.output_counts)});
      if (s.sampling.logprobs >= 0) {  // only for the requests that ask: no cost otherwise
        TokenLogprobs& l = res.logprobs.emplace_back();
        l.seq_id = s.seq_id;
        token_logprobs(row_logits, vocab, res.sampled.back().token, s.sampling.logprobs, &l);
      }
      ++row;
    }
  }
  sampling.reset();
  if (after_step) after_step(*this, batch, released);
  // Tokens to world rank 0 when another rank samples (DP replicas, the last pipeline stage), and the
  // tier copies' completion while any is in flight (the same decision on every rank: tasks are
  // issued by descriptors, and completion everywhere comes from these gathers).
  bool gather = false;
  for (size_t r = 1; r < in.sampler_replica.size(); ++r) gather = gather || in.sampler_replica[r] >= 0;
  TierSwaps* swaps = tier_ ? &tier_->swaps() : nullptr;
  const bool track = swaps && swaps->in_flight();
  if (!gather && !track) return res;
  constexpr size_t kCounters = 2 * sizeof(int64_t);
  std::vector<size_t> bytes(in.sampler_replica.size(), track ? kCounters : 0);
  for (size_t r = 0; r < bytes.size() && gather; ++r) {
    const int rep = in.sampler_replica[r];
    if (rep < 0) continue;
    for (const ScheduledSeq& s : batch.seqs)
      if (s.sample && replica_of(s.seq_id, dp) == rep)
        bytes[r] += sizeof(SampledToken) + logprob_bytes(s, vocab);
  }
  size_t my_tokens = 0;  // without a gather rank 0 keeps its tokens
  if (gather) {
    my_tokens = res.sampled.size() * sizeof(SampledToken);
    for (const TokenLogprobs& l : res.logprobs)
      my_tokens += sizeof(float) + l.top.size() * (sizeof(int32_t) + sizeof(float));
  }
  LOOM_CHECK(bytes[size_t(me)] == (track ? kCounters : 0) + my_tokens, "sampled tokens of rank ", me);
  static_assert(std::is_trivially_copyable_v<SampledToken>);
  std::vector<uint8_t> mine(bytes[size_t(me)]);
  if (track) {
    const std::array<int64_t, 2> done = swaps->local_done();  // after the writer's fence
    std::memcpy(mine.data(), done.data(), kCounters);
  }
  if (my_tokens) {
    uint8_t* p = mine.data() + (track ? kCounters : 0);
    std::memcpy(p, res.sampled.data(), res.sampled.size() * sizeof(SampledToken));
    p += res.sampled.size() * sizeof(SampledToken);
    for (const TokenLogprobs& l : res.logprobs) {  // in batch order, as the sizes above
      std::memcpy(p, &l.logprob, sizeof(float));
      p += sizeof(float);
      for (const auto& [id, lp] : l.top) {
        std::memcpy(p, &id, sizeof(int32_t));
        std::memcpy(p + sizeof(int32_t), &lp, sizeof(float));
        p += sizeof(int32_t) + sizeof(float);
      }
    }
  }
  size_t total = 0;
  for (size_t b : bytes) total += b;
  std::vector<uint8_t> all_bytes(total);
  optime::Scope gather_timed(optime::Op::Sampling);
  world_.all_gather_v_bytes(mine.data(), all_bytes.data(), bytes);
  StepResult all;
  int64_t out_all = INT64_MAX, in_all = INT64_MAX;
  size_t at = 0;
  for (size_t r = 0; r < bytes.size(); ++r) {
    size_t n = bytes[r];
    if (track) {
      int64_t done[2];
      std::memcpy(done, all_bytes.data() + at, kCounters);
      out_all = std::min(out_all, done[0]);
      in_all = std::min(in_all, done[1]);
      at += kCounters;
      n -= kCounters;
    }
    if (n == 0) continue;
    // Rank r's part: its sequences in batch order (their logprob sizes follow from the batch).
    const int rep = in.sampler_replica[r];
    size_t n_tok = 0;
    for (const ScheduledSeq& s : batch.seqs)
      if (s.sample && replica_of(s.seq_id, dp) == rep) ++n_tok;
    const size_t first = all.sampled.size();
    all.sampled.resize(first + n_tok);
    std::memcpy(all.sampled.data() + first, all_bytes.data() + at, n_tok * sizeof(SampledToken));
    const uint8_t* p = all_bytes.data() + at + n_tok * sizeof(SampledToken);
    size_t j = first;
    for (const ScheduledSeq& s : batch.seqs) {
      if (!s.sample || replica_of(s.seq_id, dp) != rep) continue;
      const SampledToken& t = all.sampled[j++];
      LOOM_CHECK(t.seq_id == s.seq_id, "step ", batch.step_index, ": rank ", r, " sent the token of ", t.seq_id,
                 " for ", s.seq_id);
      if (s.sampling.logprobs < 0) continue;
      TokenLogprobs& l = all.logprobs.emplace_back();
      l.seq_id = s.seq_id;
      l.token = t.token;
      std::memcpy(&l.logprob, p, sizeof(float));
      p += sizeof(float);
      l.top.resize(size_t(std::min(s.sampling.logprobs, vocab)));
      for (auto& [id, lp] : l.top) {
        std::memcpy(&id, p, sizeof(int32_t));
        std::memcpy(&lp, p + sizeof(int32_t), sizeof(float));
        p += sizeof(int32_t) + sizeof(float);
      }
    }
    LOOM_CHECK(p == all_bytes.data() + at + n, "step ", batch.step_index, ": the token gather's part of rank ", r);
    at += n;
  }
  if (!gather) {
    all.sampled = std::move(res.sampled);
    all.logprobs = std::move(res.logprobs);
  }
  if (track) swaps->advance(out_all, in_all, &all.swapped_out, &all.swapped_in);
  return all;
}

SingleRankModel::SingleRankModel(std::shared_ptr<const Model> model, ThreadPool* pool, int64_t kv_tokens,
                                 int block_size, const Plan& plan, std::optional<kernels::Numerics> numerics)
    : model_(std::move(model)), comm_(std::make_unique<SingleCommunicator>()) {
  const ModelConfig& c = model_->config;
  if (plan.size() != 1) fail("a single-rank model runs a one-rank plan, not ", plan.to_string());
  const PlanSet set = PlanSet::make({plan}, ModelShape::from(c, weight_block_elems(*model_)));
  RankEngineOptions o;
  o.block_size = block_size;
  o.numerics = numerics;
  o.kv_pages = (kv_tokens + block_size - 1) / block_size * int64_t(c.n_layers) * c.n_kv_heads;
  engine_ = std::make_unique<RankEngine>(model_, set, *comm_, pool, o);
}

SingleRankModel::~SingleRankModel() = default;

int SingleRankModel::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  return engine_->forward(batch, &logits);
}

}  // namespace loom
