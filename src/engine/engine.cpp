#include "engine/engine.h"

#include <algorithm>

#include "core/error.h"
#include "comm/single.h"
#include "core/weight_tiles.h"
#include "engine/sidp.h"
#include "parallel/sharding.h"
#include "kv/block_allocator.h"

namespace loom {

void EngineConfig::validate(const ModelConfig& m) const {
  if (threads < 0) fail("threads must be >= 0, got ", threads);
  if (max_num_seqs < 1) fail("max_num_seqs must be >= 1, got ", max_num_seqs);
  if (max_tokens_per_step < 1) fail("max_tokens_per_step must be >= 1, got ", max_tokens_per_step);
  if (block_size < 1) fail("block_size must be >= 1, got ", block_size);
  if (max_model_len < 0 || max_model_len > m.max_seq_len)
    fail("max_model_len = ", max_model_len, " must be in [1, ", m.max_seq_len, "] (the model's context)");
  if (kv_cache_bytes && *kv_cache_bytes <= 0) fail("kv cache bytes must be > 0, got ", *kv_cache_bytes);
  if (rank_memory_bytes && *rank_memory_bytes <= 0) fail("--rank-memory-bytes must be > 0, got ", *rank_memory_bytes);
  if (rank_memory_bytes && kv_cache_bytes)
    fail("give --kv-cache-bytes (the KV cache itself) or --rank-memory-bytes (weights + KV per rank), not both");
  if (!(kv_cache_fraction > 0 && kv_cache_fraction <= 1))
    fail("kv cache fraction must be in (0, 1], got ", kv_cache_fraction);
  if (cpu_kv_bytes < 0) fail("--cpu-kv-bytes must be >= 0, got ", cpu_kv_bytes);
}

PolicyEnv policy_env(const ModelConfig& model, const EngineConfig& config) {
  PolicyEnv env;
  env.model = &model;
  env.max_model_len = config.max_model_len;
  env.cpu_kv_bytes = config.cpu_kv_bytes;
  return env;
}

SchedulerConfig scheduler_config(const EngineConfig& config, int scale, const KvPoolShape& pool,
                                 const std::string& plan_name) {
  if (pool.blocks_per_pool < 1)
    fail("plan ", plan_name, ": the KV budget of some rank holds no block of ", config.block_size,
         " tokens for its layers and KV heads; raise --kv-cache-bytes");
  SchedulerConfig sc;
  sc.max_num_seqs = config.max_num_seqs * scale;
  sc.max_tokens_per_step = config.max_tokens_per_step * scale;
  sc.block_size = config.block_size;
  sc.max_model_len = config.max_model_len;
  sc.enable_chunked_prefill = config.enable_chunked_prefill;
  sc.pool_shapes = {pool};
  sc.num_blocks = int(pool.total_blocks());
  return sc;
}

EngineCore::EngineCore(RankEngine& rank, Communicator& world, const EngineConfig& config,
                       std::unique_ptr<LayoutPolicy> policy, int dp_scale)
    : rank_(rank) {
  exec_ = std::make_unique<PlanExecutor>(world, rank);
  std::vector<KvPoolShape> pools;
  for (int id = 0; id < rank.plans().size(); ++id) pools.push_back(rank.pools(id));
  SchedulerConfig sc = scheduler_config(config, dp_scale, pools[0], rank.plans().name(0));
  for (int id = 1; id < rank.plans().size(); ++id)  // every plan's pool holds a block
    (void)scheduler_config(config, dp_scale, pools[size_t(id)], rank.plans().name(id));
  sc.pool_shapes = pools;
  sc.num_blocks = int(pools[0].total_blocks());
  policy->configure(sc, policy_env(rank.model().config, config));
  // The RankEngine's tier copies run on threads and report completion (kv_tier.h TierSwaps): the
  // scheduler waits for it (SchedulerConfig::async_swaps; the simulator's swaps are priced, not run).
  if (sc.phases != PhaseMode::None) sc.async_swaps = true;
  if (sc.phases != PhaseMode::None)
    LOOM_CHECK(rank.tier() != nullptr, "--policy ", policy->describe(), ": world rank 0 has no CPU KV tier");
  sched_ = std::make_unique<Scheduler>(sc);
  control_ = std::make_unique<PlanControl>(rank.plans(), pools, std::move(policy), *sched_);
  loop_ = std::make_unique<EngineLoop>(*sched_, *exec_, clock_, metrics_, control_.get());
}

std::vector<Sequence> EngineCore::run(std::vector<Request> requests) {
  const int vocab = rank_.model().config.vocab_size;
  for (const Request& r : requests)
    for (TokenId t : r.prompt)
      // Every rank embeds the tokens: a bad id would fail the whole group mid-step.
      if (t < 0 || t >= vocab) fail("request ", r.id, ": token id ", t, " is outside the vocabulary [0, ", vocab, ")");
  std::vector<Sequence> done;
  auto prev = loop_->on_finish;
  loop_->on_finish = [&](const Sequence& s) {
    done.push_back(s);
    if (prev) prev(s);
  };
  const double t0 = clock_.now();
  for (Request& r : requests) {
    r.arrival_s += t0;
    loop_->add_arrival(std::move(r));
  }
  try {
    loop_->run_until_idle();
  } catch (...) {
    loop_->on_finish = prev;
    throw;
  }
  loop_->on_finish = prev;
  if (exec_->broken()) fail(exec_->error());
  return done;
}

int64_t kv_pages_for(const EngineConfig& config, const PlanSet& plans, int rank, int head_dim, int64_t budget_bytes) {
  const int64_t page_bytes = 2 * int64_t(config.block_size) * head_dim * int64_t(sizeof(float));
  int64_t pages = budget_bytes / page_bytes;
  if (pages < 1)
    fail("the KV cache budget of ", budget_bytes, " bytes holds no page (one page, ", config.block_size,
         " tokens of one KV head, is ", page_bytes, " bytes); raise --kv-cache-bytes");
  // No point holding more than every sequence slot at full context under any plan.
  const int64_t blocks = (config.max_model_len + config.block_size - 1) / config.block_size;
  int64_t useful = 0;
  for (int id = 0; id < plans.size(); ++id) {
    const RankLayout L = rank_layout(plans.plan(id), plans.shape(), rank);
    useful = std::max(useful, int64_t(config.max_num_seqs) * plans.plan(id).dp * blocks * L.layers.size() *
                                  int64_t(L.kv_heads.size()));
  }
  return std::min({pages, useful, int64_t(INT32_MAX)});
}

RankWeightBytes rank_weight_bytes(const Model& model, const PlanSet& plans, int rank, bool lazy_weights) {
  int64_t layer_bytes = 0;
  for (const LayerWeights& L : model.layers)
    for (const WeightView* w : L.matrices()) layer_bytes += w->bytes();
  const int64_t full_elems = weight_shards(Plan::make_tp(1), plans.shape(), 0).elems();
  RankWeightBytes b;
  bool views_of_full = false;
  std::vector<WeightShards> copied;  // RankWeights copies a distinct resident shard once
  int64_t resident_max = 0;          // lazy_weights: one resident plan's copy at a time
  std::vector<int> owner_dps;
  for (const Plan& p : plans.plans()) {
    switch (p.weights) {
      case WeightSource::SliceOfFull:
        views_of_full = true;
        break;
      case WeightSource::FetchFromOwner: {
        // The attention copy and the owned FFN are shared by the plans of one D (a WaS plan and its
        // CaS twin, RankWeights / OwnerWeights::shared); the cache slots are each plan's.
        const sidp::Memory m = sidp::memory(model, p, rank);
        if (std::find(owner_dps.begin(), owner_dps.end(), p.dp) == owner_dps.end()) {
          owner_dps.push_back(p.dp);
          b.copied += m.attention + m.ffn_owned;
        }
        b.copied += m.slots;
        break;
      }
      case WeightSource::Resident: {
        const WeightShards ws = weight_shards(p, plans.shape(), rank);
        const int64_t bytes = int64_t(double(layer_bytes) * double(ws.elems()) / double(std::max<int64_t>(full_elems, 1)));
        if (lazy_weights) {
          resident_max = std::max(resident_max, bytes);
          break;
        }
        if (std::find(copied.begin(), copied.end(), ws) != copied.end()) break;
        copied.push_back(ws);
        b.copied += bytes;
        break;
      }
    }
  }
  b.copied += resident_max;
  // Embedding and classifier: replicated on every rank (one decode copy of the classifier per
  // process, model/weights.h, counted by kv_budget_bytes).
  b.held = b.copied + (views_of_full ? layer_bytes : 0) + model.output.bytes();
  return b;
}

int64_t kv_budget_bytes(const EngineConfig& config, const Model& model, const PlanSet& plans, int rank, int first_rank,
                        int ranks_here, bool lazy_weights) {
  if (config.kv_cache_bytes) return *config.kv_cache_bytes;
  if (config.rank_memory_bytes) {
    const int64_t held = rank_weight_bytes(model, plans, rank, lazy_weights).held;
    if (held >= *config.rank_memory_bytes)
      fail("--rank-memory-bytes ", *config.rank_memory_bytes, " leaves no room for KV on rank ", rank, ": its weights under ",
           plans.to_string(), " take ", held, " bytes");
    return *config.rank_memory_bytes - held;
  }
  int64_t copies = model.output.bytes();
  for (int r = first_rank; r < first_rank + ranks_here; ++r) copies += rank_weight_bytes(model, plans, r, lazy_weights).copied;
  int64_t avail = mem_available_bytes();
  if (decode_copy_affordable(copies)) avail -= copies;
  return int64_t(double(std::max<int64_t>(avail, 0)) * config.kv_cache_fraction / double(std::max(ranks_here, 1)));
}

Engine::Engine(std::shared_ptr<const Model> model, const EngineConfig& config)
    : model_(std::move(model)), config_(config) {
  const ModelConfig& c = model_->config;
  config_.validate(c);
  if (config_.max_model_len == 0) config_.max_model_len = c.max_seq_len;
  world_ = std::make_unique<SingleCommunicator>();
  pool_ = std::make_unique<ThreadPool>(config_.threads > 0 ? config_.threads : default_thread_count());
  const PlanSet plans = PlanSet::make({Plan::make_tp(1)}, ModelShape::from(c, weight_block_elems(*model_)));
  // The weights first: their decode copy (shard_weights.h) comes out of the memory the KV budget
  // is a fraction of. The store is sized after the copy: build with no pages, then size.
  RankEngineOptions o;
  o.block_size = config_.block_size;
  o.numerics = config_.resolved_numerics();
  o.kv_pages = kv_pages_for(config_, plans, 0, c.head_dim, kv_budget_bytes(config_, *model_, plans, 0, 0, 1));
  rank_ = std::make_unique<RankEngine>(model_, plans, *world_, pool_.get(), o);
  core_ = std::make_unique<EngineCore>(*rank_, *world_, config_, make_layout_policy("fixed", plans, 0));
  num_blocks_ = core_->scheduler().num_blocks();
}

Engine::~Engine() = default;

}  // namespace loom
