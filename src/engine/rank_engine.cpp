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
  if (options.tier) {
    pinned_tier_ = dev_->pin_host(options.tier->data, size_t(options.tier->bytes));  // a GPU's swaps
    swaps_ = std::make_unique<TierSwaps>(c.n_layers, c.n_kv_heads, c.head_dim, options.block_size, plans_.n_ranks(),
                                         options.tier);
    if (options.tier_copy_hook) swaps_->set_before_task(options.tier_copy_hook);
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
    if (swaps_) swaps_->release(id, *kv_);  // after its copies here, if any are in flight
    kv_->release(id);
  }
}

TierStats RankEngine::tier_stats() const {
  TierStats t;
  if (!swaps_) return t;
  const TierSwapCounters c = swaps_->counters();
  t.swapped_out = c.swapped_out;
  t.swapped_in = c.swapped_in;
  t.bytes_out = c.bytes_out;
  t.bytes_in = c.bytes_in;
  t.copy_s = c.copy_s;
  t.issue_s = c.issue_s;
  t.wait_s = c.wait_s;
  t.waits = c.waits;
  t.unready_decodes = unready_decodes_;
  return t;
}

SwitchResult RankEngine::switch_to(int plan, const std::vector<SeqExtent>& seqs, bool resident) {
  if (plan < 0 || plan >= plans_.size()) fail("plan id ", plan, " outside the set of ", plans_.size());
  SwitchResult r;
  if (plan == current_) return r;
  if (!plans_.same_placement(current_, plan) && !(resident && seqs.empty())) {
    const ModelConfig& c = model_->config;
    const KvMigration mig = kv_migration(plans_.placement(current_), plans_.placement(plan), seqs,
                                         options_.block_size, kv_bytes_per_token(c.head_dim, DType::F32));
    r.moved = true;
    r.total_bytes = mig.total_bytes;
    // Sequences still being copied to the CPU tier keep their pages (under the old placement) and
    // take no part; the migration gets the free pages it needs (waiting for those copies if short).
    std::vector<int64_t> parked;
    if (swaps_) {
      LOOM_CHECK(swaps_->in_pending() == 0, "rank ", world_.rank(), ": a plan switch while ", swaps_->in_pending(),
                 " swap-ins are in flight");
      swaps_->make_room(migration_new_pages(mig, world_.rank(), *kv_), *kv_);
      parked = swaps_->parked();
    }
    KvTransferOptions transfer = options_.transfer;
    transfer.all_sequences = !resident;
    r.transfer = execute_kv_migration(mig, plans_.placement(plan), seqs, *kv_, world_, transfer,
                                      &transfer_scratch_, parked);
  }
  reshard_to(plan, &r);
  current_ = plan;
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

// Swap-ins (after the switch: under the step's plan) and the waits a step needs (see the top).
void RankEngine::prepare_swaps(const StepBatch& batch) {
  const int me = world_.rank();
  const std::vector<KvEntry>& holds = plans_.placement(current_).entries(me);
  for (const SeqExtent& e : batch.swap_in) {  // W11: pages now, the prefetcher copies
    swaps_->make_room(kv_->pages_to_reserve(e.id, e.n_tokens, holds), *kv_);
    swaps_->swap_in(e, plans_.placement(current_), me, *kv_);
  }
  if (!options_.overlap_swaps) swaps_->wait_all(*kv_);
  if (batch.seqs.empty()) {
    // Nothing to overlap: the step exists to complete copies. One is enough for progress (the
    // rank with the fewest done has one queued): the first ready sequences run in the next step
    // while the later ones copy.
    swaps_->wait_next(*kv_);
  } else {
    int64_t pages = 0;
    for (const ScheduledSeq& s : batch.seqs) {
      // A sequence decodes only after its swap-in is complete (the scheduler says so); a scheduler
      // without asynchronous swaps lists it in the same step: then this step needs the copy.
      if (swaps_->swapping_in(s.seq_id)) {
        ++unready_decodes_;
        swaps_->wait_for(s.seq_id, *kv_);
      }
      pages += kv_->pages_to_reserve(s.seq_id, s.start + s.num_tokens, holds);
    }
    swaps_->make_room(pages, *kv_);  // pages of finished swap-outs, the oldest first
  }
  overlap_ = SwapOverlap{swaps_->out_pending(), swaps_->in_pending()};
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
  if (swaps_) swaps_->reap(*kv_);
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
    LOOM_CHECK(int(((s.seq_id % dp) + dp) % dp) == my_replica, "step ", batch.step_index, ": sequence ", s.seq_id,
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
  if (!batch.swap_out.empty() || !batch.swap_in.empty())
    LOOM_CHECK(swaps_ != nullptr, "step ", batch.step_index, " swaps KV, this rank has no CPU KV tier");
  release(released);
  if (swaps_) {
    swaps_->reap(*kv_);
    // The reader's half of the tier's ordering (kv_tier.h): this descriptor follows the gathers
    // that reported the copies these depend on as complete.
    if (!batch.swap_out.empty() || !batch.swap_in.empty()) swaps_->sync();
    for (const SeqExtent& e : batch.swap_out)  // W8/W10: under the plan that computed it
      swaps_->swap_out(e, plans_.placement(current_), world_.rank(), *kv_);
  }
  last_switch_ = switch_to(batch.plan_id, batch.kv_seqs, batch.kv_resident);
  if (sw) *sw = last_switch_;
  if (swaps_) prepare_swaps(batch);
  to_forward_batch(batch, fb_);
  Instance& in = *instances_[size_t(current_)];
  const int n_rows = in.forward->forward(fb_, &logits_);
  const int vocab = model_->config.vocab_size;
  const int me = world_.rank();
  const int my_replica = in.sampler_replica[size_t(me)];
  const int dp = plans_.plan(current_).dp;
  StepResult res;
  std::optional<optime::Scope> sampling(std::in_place, optime::Op::Sampling);
  if (my_replica >= 0) {
    int row = 0;
    for (const ScheduledSeq& s : batch.seqs) {
      if (!s.sample || int(((s.seq_id % dp) + dp) % dp) != my_replica) continue;
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
  const bool track = swaps_ && swaps_->in_flight();
  if (!gather && !track) return res;
  constexpr size_t kCounters = 2 * sizeof(int64_t);
  std::vector<size_t> bytes(in.sampler_replica.size(), track ? kCounters : 0);
  for (size_t r = 0; r < bytes.size() && gather; ++r) {
    const int rep = in.sampler_replica[r];
    if (rep < 0) continue;
    for (const ScheduledSeq& s : batch.seqs)
      if (s.sample && int(((s.seq_id % dp) + dp) % dp) == rep)
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
    const std::array<int64_t, 2> done = swaps_->local_done();  // after the writer's fence
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
      if (s.sample && int(((s.seq_id % dp) + dp) % dp) == rep) ++n_tok;
    const size_t first = all.sampled.size();
    all.sampled.resize(first + n_tok);
    std::memcpy(all.sampled.data() + first, all_bytes.data() + at, n_tok * sizeof(SampledToken));
    const uint8_t* p = all_bytes.data() + at + n_tok * sizeof(SampledToken);
    size_t j = first;
    for (const ScheduledSeq& s : batch.seqs) {
      if (!s.sample || int(((s.seq_id % dp) + dp) % dp) != rep) continue;
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
  if (track) swaps_->advance(out_all, in_all, &all.swapped_out, &all.swapped_in);
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
