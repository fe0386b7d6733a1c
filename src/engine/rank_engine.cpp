#include "engine/rank_engine.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "comm/single.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
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
      groups_(world),
      weights_(model_, pool, options.shift_weights) {
  const ModelConfig& c = model_->config;
  if (world.size() != plans_.n_ranks())
    fail("plan ", plans_.name(0), " needs ", plans_.n_ranks(), " ranks, the world has ", world.size());
  check_block_sizes(plans_.plans(), options.block_size);
  if (options.kv) {
    LOOM_CHECK(options.kv->num_pages() == options.kv_pages && options.kv->block_size() == options.block_size &&
                   options.kv->n_layers() == c.n_layers && options.kv->n_kv_heads() == c.n_kv_heads &&
                   options.kv->head_dim() == c.head_dim,
               "the shared KV store does not match the engine's options and model");
    kv_ = options.kv;
  } else {
    kv_ = std::make_shared<KvStore>(c.n_layers, c.n_kv_heads, c.head_dim, options.block_size, options.kv_pages);
  }
  if (options.tier) tier_ = std::make_unique<KvTier>(c.n_layers, c.n_kv_heads, c.head_dim, options.tier);
  // Every rank's page budget, for the pool shapes (equal on every rank).
  std::vector<int64_t> pages(size_t(world.size()));
  const int64_t mine = options.kv_pages;
  world.all_gather_bytes(&mine, pages.data(), sizeof mine);

  const kernels::RopeParams rope = rope_params(c);
  const kernels::Numerics numerics = options.numerics ? *options.numerics : kernels::default_numerics();
  const ModelShape& shape = plans_.shape();
  for (int id = 0; id < plans_.size(); ++id) {
    const Plan& plan = plans_.plan(id);
    auto in = std::make_unique<Instance>();
    in->layout = rank_layout(plan, shape, world.rank());
    in->groups = PlanGroups(plan, groups_);  // collective: same plans in the same order everywhere
    const WeightShards shards = weight_shards(plan, shape, world.rank());
    const int64_t owned_before = weights_.owned_bytes();
    const ShardWeightSet& set = weights_.get(shards, plan.weights);
    in->weights = set.layers;
    memory_.push_back(PlanMemory{shard_matrix_bytes(set.layers), weights_.owned_bytes() - owned_before});
    StageContext ctx;
    ctx.model = model_;
    ctx.plan = plan;
    ctx.shape = shape;
    ctx.layout = in->layout;
    ctx.groups = &in->groups;
    ctx.pool = pool_;
    ctx.kv = kv_.get();
    ctx.weights = &in->weights;
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
    kv_->release(id);
    if (tier_) tier_->release(id);
  }
}

SwitchResult RankEngine::switch_to(int plan, const std::vector<SeqExtent>& seqs) {
  if (plan < 0 || plan >= plans_.size()) fail("plan id ", plan, " outside the set of ", plans_.size());
  SwitchResult r;
  if (plan == current_) return r;
  if (!plans_.same_placement(current_, plan)) {
    const ModelConfig& c = model_->config;
    const KvMigration mig = kv_migration(plans_.placement(current_), plans_.placement(plan), seqs,
                                         options_.block_size, kv_bytes_per_token(c.head_dim, DType::F32));
    r.moved = true;
    r.total_bytes = mig.total_bytes;
    r.transfer = execute_kv_migration(mig, plans_.placement(plan), seqs, *kv_, world_, options_.transfer,
                                      &transfer_scratch_);
  }
  current_ = plan;
  return r;
}

int RankEngine::forward(const ForwardBatch& batch, std::vector<float>* logits) {
  return instances_[size_t(current_)]->forward->forward(batch, logits);
}

StepResult RankEngine::step(const StepBatch& batch, const std::vector<RequestId>& released, SwitchResult* sw) {
  LOOM_CHECK(batch.block_size == options_.block_size, "step ", batch.step_index, " uses KV blocks of ",
             batch.block_size, " tokens, this rank's store ", options_.block_size);
  const bool tier_touched = tier_ && (!tier_->empty() || !batch.swap_out.empty());
  const double t0 = now_seconds();
  release(released);
  if (!batch.swap_out.empty() || !batch.swap_in.empty())
    LOOM_CHECK(tier_ != nullptr, "step ", batch.step_index, " swaps KV, this rank has no CPU KV tier");
  for (const SeqExtent& e : batch.swap_out) {  // Seesaw W8 swap-out, under the plan that computed it
    tier_->reserve(e.id, e.n_tokens);
    tier_stats_.bytes_out += tier_swap_out(e, plans_.placement(current_), world_.rank(), *kv_, *tier_).bytes;
    ++tier_stats_.swapped_out;
  }
  double swap_s = now_seconds() - t0;
  const SwitchResult s = switch_to(batch.plan_id, batch.kv_seqs);
  if (sw) *sw = s;
  const double t1 = now_seconds();
  if (!batch.swap_in.empty()) {
    world_.barrier();  // every swap-out of this and earlier steps is written
    for (const SeqExtent& e : batch.swap_in) {  // W8 swap-in, under this step's plan
      tier_stats_.bytes_in += tier_swap_in(e, plans_.placement(current_), world_.rank(), *kv_, *tier_).bytes;
      tier_->release(e.id);
      ++tier_stats_.swapped_in;
    }
  }
  if (tier_touched && tier_->empty()) world_.barrier();  // the fill is over on every rank
  swap_s += now_seconds() - t1;
  if (tier_) tier_stats_.seconds += swap_s;
  to_forward_batch(batch, fb_);
  Instance& in = *instances_[size_t(current_)];
  const int n_rows = in.forward->forward(fb_, &logits_);
  const int vocab = model_->config.vocab_size;
  const int me = world_.rank();
  const int my_replica = in.sampler_replica[size_t(me)];
  const int dp = plans_.plan(current_).dp;
  StepResult res;
  if (my_replica >= 0) {
    int row = 0;
    for (const ScheduledSeq& s : batch.seqs) {
      if (!s.sample || int(((s.seq_id % dp) + dp) % dp) != my_replica) continue;
      LOOM_CHECK(row < n_rows, "step ", batch.step_index, ": ", n_rows, " logit rows for more samples");
      res.sampled.push_back({s.seq_id, sample_token(logits_.data() + int64_t(row) * vocab, vocab, s.sampling,
                                                    s.start + s.num_tokens, s.output_counts)});
      ++row;
    }
  }
  if (after_step) after_step(*this, batch, released);
  // Tokens to world rank 0 when another rank samples (DP replicas, the last pipeline stage).
  bool gather = false;
  for (size_t r = 1; r < in.sampler_replica.size(); ++r) gather = gather || in.sampler_replica[r] >= 0;
  if (!gather) return res;
  std::vector<size_t> bytes(in.sampler_replica.size(), 0);
  for (size_t r = 0; r < bytes.size(); ++r) {
    const int rep = in.sampler_replica[r];
    if (rep < 0) continue;
    for (const ScheduledSeq& s : batch.seqs)
      if (s.sample && int(((s.seq_id % dp) + dp) % dp) == rep) bytes[r] += sizeof(SampledToken);
  }
  LOOM_CHECK(bytes[size_t(me)] == res.sampled.size() * sizeof(SampledToken), "sampled tokens of rank ", me);
  size_t total = 0;
  for (size_t b : bytes) total += b;
  StepResult all;
  all.sampled.resize(total / sizeof(SampledToken));
  static_assert(std::is_trivially_copyable_v<SampledToken>);
  world_.all_gather_v_bytes(res.sampled.data(), all.sampled.data(), bytes);
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
