#include "engine/shift_executor.h"

#include <algorithm>
#include <exception>

#include "core/error.h"
#include "core/weight_tiles.h"
#include "engine/dist_executor.h"
#include "engine/step_codec.h"
#include "parallel/kv_migration.h"

namespace loom {

namespace {

ShardSpec spec_of(const RankLayout& L) {
  ShardSpec s;
  s.q_head_begin = L.q_heads.front();
  s.n_q_heads = int(L.q_heads.size());
  s.kv_head_begin = L.kv_heads.front();
  s.n_kv_heads = int(L.kv_heads.size());
  s.ffn_begin = L.ffn.begin;
  s.ffn_len = L.ffn.size();
  return s;
}

Transformer::AllReduce reduce_over(Communicator* c) {
  if (!c || c->size() == 1) return nullptr;
  return [c](float* data, int64_t n) { c->all_reduce_sum(data, size_t(n)); };
}

}  // namespace

ShiftRank::ShiftRank(std::shared_ptr<const Model> model, const Plan& base, Communicator& replica, ThreadPool* pool,
                     const KvLayout& kv_layout, ShiftRankOptions options)
    : model_(std::move(model)), base_(base.normalized()) {
  if (base_.sp < 2 || base_.shift || base_.helix() || base_.dp != 1 || base_.pp != 1)
    fail("plan ", base_.to_string(), " is not the sp x tp base config of one replica (sp > 1, no dp/pp/kvp)");
  LOOM_CHECK(options.base || options.shift, "ShiftRank with neither config");
  shift_ = base_.shift_config();
  base_name_ = base_.to_string();
  shift_name_ = shift_.to_string();
  const ModelShape shape = ModelShape::from(model_->config, weight_block_elems(*model_));
  validate(base_, shape);
  if (replica.size() != base_.size())
    fail("plan ", base_name_, " needs ", base_.size(), " ranks per replica, the group has ", replica.size());
  const int rank = replica.rank();
  urank_ = UlyssesRank::of(base_, shape, rank);
  const RankLayout sl = rank_layout(shift_, shape, rank);
  shift_index_ = sl.ffn_index;
  // Shift 3.3.1: the shift rank on this global rank attends the same heads as the base rank.
  LOOM_CHECK(sl.q_heads.front() == urank_.attn_q_begin && sl.kv_heads.front() == urank_.attn_kv_begin &&
                 int(sl.kv_heads.size()) == urank_.attn_n_kv,
             "shift and base configs disagree on rank ", rank, "'s heads");
  LOOM_CHECK(kv_layout.n_kv_heads == urank_.attn_n_kv, "KV layout holds ", kv_layout.n_kv_heads, " heads, rank ", rank,
             " stores ", urank_.attn_n_kv);

  // Groups (collective over the replica, same order on every rank): SP = equal tp ordered by sp,
  // TP = equal sp ordered by tp, SP_TP = everyone ordered by shift index (Shift 3.3.2).
  sp_ = replica.split(urank_.tp, urank_.sp);
  tp_ = replica.split(urank_.sp, urank_.tp);
  sptp_ = replica.split(0, shift_index_);
  LOOM_CHECK(sp_->size() == urank_.s && tp_->size() == urank_.t && sptp_->rank() == shift_index_);

  const ShardSpec shift_spec = spec_of(sl);
  const std::vector<ShardLayerWeights> base_views = shard_views(*model_, urank_.proj);
  const std::vector<ShardLayerWeights> shift_views = shard_views(*model_, shift_spec);
  mem_.base_shard_bytes = shard_matrix_bytes(base_views);
  mem_.shift_shard_bytes = shard_matrix_bytes(shift_views);
  // Copies in the decode layout (row tiles) where they can be; "slice" cuts the shift shard out
  // of the base copy, so that copy keeps plain rows (views of row tiles are not possible).
  const bool tile = weight_tiles_enabled();
  if (options.base && options.shift) {
    const bool slice = options.weights == ShiftWeights::Slice;
    base_w_ = copy_shard(base_views, tile && !slice, pool);
    shift_w_ = slice ? slice_shard(base_w_, shift_slice_of_base(base_, shape, rank))
                     : copy_shard(shift_views, tile, pool);
  } else {
    if (options.base) base_w_ = decode_shard(base_views, pool);
    if (options.shift) shift_w_ = decode_shard(shift_views, pool);
  }
  mem_.owned_bytes = base_w_.owned_bytes + shift_w_.owned_bytes;
  if (options.base)
    base_tf_ = std::make_unique<UlyssesTransformer>(model_, urank_, pool, sp_.get(), reduce_over(tp_.get()),
                                                    base_w_.layers, base_w_.storage);
  if (options.shift)
    shift_tf_ = std::make_unique<Transformer>(model_, shift_spec, pool, reduce_over(sptp_.get()), shift_w_.layers,
                                              shift_w_.storage);
  kv_ = std::make_unique<KvStorage>(kv_layout);
}

bool ShiftRank::runs_base(const std::string& plan_name) const {
  const bool base = plan_name.empty() || plan_name == base_name_;
  if (!base && plan_name != shift_name_)
    fail("step plan '", plan_name, "' is neither the base config ", base_name_, " nor its shift config ",
         shift_name_);
  if (base && !base_tf_) fail("step plan ", base_name_, ": this engine runs only ", shift_name_);
  if (!base && !shift_tf_) fail("step plan ", shift_name_, ": this engine runs only ", base_name_);
  return base;
}

int ShiftRank::forward(const std::string& plan_name, const ForwardBatch& fb, std::vector<float>* logits) {
  if (runs_base(plan_name)) return base_tf_->forward(fb, *kv_, logits);
  if (logits) return shift_tf_->forward(fb, *kv_, *logits);
  // Off rank 0 the shift config computes no logits (the classifier is not sharded).
  no_logits_.tokens = fb.tokens;
  no_logits_.seqs = fb.seqs;
  for (ForwardSeq& s : no_logits_.seqs) s.want_logits = false;
  std::vector<float> none;
  return shift_tf_->forward(no_logits_, *kv_, none);
}

KvMigration check_free_switch(const std::string& from, const std::string& to, const ModelShape& shape,
                              const std::vector<SeqExtent>& seqs, int block_size) {
  const KvPlacement a = kv_placement(Plan::parse(from), shape), b = kv_placement(Plan::parse(to), shape);
  KvMigration m = kv_migration(a, b, seqs, block_size, kv_bytes_per_token(shape.head_dim, DType::F32));
  if (m.total_bytes != 0 || m.dropped_bytes != 0)
    fail("switching ", from, " -> ", to, " would move ", m.total_bytes, " KV bytes and drop ", m.dropped_bytes,
         " (Shift 3.3.1 needs equal placements): ", m.summary());
  return m;
}

ShiftExecutor::ShiftExecutor(Communicator& replica, ShiftRank& rank, const ModelShape& shape)
    : leader_(replica), rank_(rank), shape_(shape) {
  LOOM_CHECK(replica.rank() == 0, "the ShiftExecutor runs on replica rank 0, not ", replica.rank());
}

StepResult ShiftExecutor::execute(const StepBatch& batch) {
  leader_.check_usable();
  const std::string plan = batch.plan.empty() ? rank_.base_name() : batch.plan;
  const bool base = rank_.runs_base(plan);  // a bad plan fails here, before anything is sent
  if (!prev_plan_.empty() && plan != prev_plan_) {
    // Shift 3.3.1: the switch is free. Checked on the KV that exists once this step has run.
    std::vector<SeqExtent> seqs;
    for (const ScheduledSeq& s : batch.seqs) seqs.push_back({s.seq_id, s.context_len()});
    const KvMigration m = check_free_switch(prev_plan_, plan, shape_, seqs, batch.block_size);
    bytes_moved_ += m.total_bytes;
    ++switches_;
  }
  return leader_.run(batch, [&] {
    to_forward_batch(batch, int(rank_.kv().layout.num_blocks), true, fb_);
    const int n_rows = rank_.forward(plan, fb_, &logits_);
    prev_plan_ = plan;
    ++(base ? steps_base_ : steps_shift_);
    return sample_step(batch, logits_.data(), n_rows, rank_.vocab_size());
  });
}

int64_t run_shift_follower(Communicator& replica, ShiftRank& rank,
                           const std::function<void(const StepBatch&)>& before_step) {
  // Logits as scheduled: ShiftRank::forward itself drops them off the rank that samples.
  return follow_steps(replica, rank.kv(), true, before_step,
                      [&](const StepBatch& b, const ForwardBatch& fb) { rank.forward(b.plan, fb, nullptr); });
}

}  // namespace loom
