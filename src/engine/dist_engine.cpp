#include "engine/dist_engine.h"

#include "gpu/device.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "comm/world.h"
#include "core/error.h"
#include "core/op_timing.h"
#include "core/parse_number.h"
#include "core/weight_tiles.h"
#include "engine/policy.h"
#include "engine/sidp.h"
#include "engine/sidp_replicas.h"
#include "gpu/device.h"
#include "kv/kv_tier.h"
#include "kv/block_allocator.h"
#include "model/loader.h"

namespace loom {

namespace {

// ---- small collectives on strings (control messages: not on the per-step path) ----

// Every rank gets every rank's string, in rank order.
std::vector<std::string> all_gather_strings(Communicator& c, const std::string& mine) {
  std::vector<uint64_t> sizes(size_t(c.size()));
  const uint64_t n = mine.size();
  c.all_gather_bytes(&n, sizes.data(), sizeof n);
  std::vector<size_t> bytes(sizes.begin(), sizes.end());
  size_t total = 0;
  for (size_t b : bytes) total += b;
  std::string all(total, '\0');
  c.all_gather_v_bytes(mine.data(), all.data(), bytes);
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t b : bytes) {
    out.push_back(all.substr(at, b));
    at += b;
  }
  return out;
}

// check_agreement on `text`, but naming the values: when ranks disagree (every rank then takes
// this path, and the group stays usable), the texts are gathered and the error lists each
// distinct one with the ranks holding it.
void agree_on_text(Communicator& c, const std::string& what, const std::string& text) {
  try {
    c.check_agreement(what, hash_bytes(text.data(), text.size()));
    return;
  } catch (const Error&) {
  }
  const std::vector<std::string> all = all_gather_strings(c, text);
  std::vector<std::pair<std::string, std::string>> distinct;  // value, ranks
  for (size_t r = 0; r < all.size(); ++r) {
    auto it = std::find_if(distinct.begin(), distinct.end(), [&](const auto& d) { return d.first == all[r]; });
    if (it == distinct.end()) {
      distinct.push_back({all[r], cat(r)});
    } else {
      it->second += cat(",", r);
    }
  }
  std::string msg = cat("ranks disagree on ", what, ":");
  for (const auto& [value, ranks] : distinct) msg += cat(" rank(s) ", ranks, " have '", value, "';");
  fail(msg);
}

int resolve_threads(const DistOptions& o, int world_size) {
  if (o.engine.threads > 0) return o.engine.threads;
  if (o.comm == "local" && world_size > 1) return 1;
  if (o.comm == "mpi") {
    int local = 1;
    if (const char* s = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::max(1, std::atoi(s));
    return std::max(1, default_thread_count() / local);
  }
  return default_thread_count();
}

std::string engine_fingerprint(const std::string& plans, const Model& m, const EngineConfig& e) {
  const ModelConfig& c = m.config;
  return cat("plans ", plans, "; model ", c.summary(), " d=", c.d_model, " layers=", c.n_layers,
             " heads=", c.n_heads, "/", c.n_kv_heads, " head_dim=", c.head_dim, " ffn=", c.ffn_dim,
             " vocab=", c.vocab_size, " ctx=", c.max_seq_len, " eps=", c.rms_eps, " theta=", c.rope_theta,
             " tied=", c.tied_embeddings, " bias=", c.qkv_bias, " wdtype=", dtype_name(m.layers.at(0).w_down.dtype),
             " embd=", dtype_name(m.tok_embd.dtype), "; engine numerics=", kernels::numerics_name(e.resolved_numerics()), " seqs=", e.max_num_seqs, " budget=",
             e.max_tokens_per_step, " block=", e.block_size, " chunked=", e.enable_chunked_prefill,
             " max_len=", e.max_model_len);
}

// The policy's start-up inputs from the options (the defaults bound to this model and rank).
PolicyInputs policy_inputs(const DistOptions& o, const Model& model, int threads) {
  PolicyInputs in;
  in.shift_threshold = o.shift_threshold;
  in.sidp_threshold = o.sidp_threshold;
  if (o.default_shift_threshold)
    in.default_shift_threshold = [&o, &model, threads](const Plan& p) { return o.default_shift_threshold(model, p, threads); };
  if (o.default_sidp_threshold)
    in.default_sidp_threshold = [&o, &model, threads](const Plan& p) { return o.default_sidp_threshold(model, p, threads); };
  return in;
}

struct RankState {
  std::string backend;
  int world_size = 1, world_rank = 0;
  PlanSet plans;
  std::shared_ptr<const Model> model;
  EngineConfig config;  // resolved (max_model_len set)
  int threads = 1;
  PolicyParams policy;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Device> dev;  // before `rank`: the engine's memory lives on it
  std::unique_ptr<RankEngine> rank;
  std::vector<std::string> info;  // start-up report (world rank 0)
};

// Local ranks on GPUs: one GPU each, exchanging through NCCL, when the host has a GPU per rank
// (LOOM_GPU_SHARE=1 keeps them on GPU 0); otherwise threads sharing GPU 0 through the local backend.
bool gpu_per_rank(const DistOptions& o) {
  if (o.device != DeviceKind::Cuda || o.comm != "local" || o.ranks < 2) return false;
  const char* share = std::getenv("LOOM_GPU_SHARE");
  if (share && std::string(share) == "1") return false;
  return gpu::cuda_device_count() >= o.ranks;
}

// The GPU of a rank: its local rank modulo the host's GPUs under MPI; its rank with a GPU per local
// rank; else GPU 0, shared.
int device_ordinal(const DistOptions& o, const Communicator& world) {
  if (o.device == DeviceKind::Cpu) return 0;
  if (world.backend() == "mpi") {
    const int n = std::max(gpu::cuda_device_count(), 1);
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    return (local ? std::atoi(local) : world.rank()) % n;
  }
  return gpu_per_rank(o) ? world.rank() : 0;
}

void set_up(const DistOptions& o, Communicator& world, int ordinal, RankState& st, std::shared_ptr<KvTierArena> tier) {
  st.backend = std::string(world.backend());
  st.world_size = world.size();
  st.world_rank = world.rank();
  // 1. the plans and the policy, agreed before anything is loaded
  const std::vector<Plan> plans = policy_plans(o.policy, PlanSet::parse(o.plan_texts()));
  std::string set_text;
  for (const Plan& p : plans) set_text += cat(set_text.empty() ? "" : " | ", p.to_string());
  agree_on_text(world, "the plans", set_text);
  if (plans[0].size() != world.size())
    fail("plan ", plans[0].to_string(), " needs ", plans[0].size(), " ranks, but the ", st.backend, " world has ",
         world.size(), " (give --ranks ", plans[0].size(), " or mpirun -np ", plans[0].size(), ")");
  parse_shift_weights(o.shift_weights);
  agree_on_text(world, "the layout policy", cat(o.policy, " weights=", o.shift_weights));
  check_block_sizes(plans, o.engine.block_size);

  // 2. the model (memory-mapped), the plans against its sizes, agreement on everything
  st.model = o.load_model ? o.load_model(world.rank()) : std::shared_ptr<const Model>(load_model(o.model_path));
  LOOM_CHECK(st.model != nullptr, "load_model returned no model");
  const ModelConfig& c = st.model->config;
  // A pipeline whose stage count does not divide the layers splits them unevenly (the first
  // stages one layer more, as vLLM), reported at start; layers= in the plan chooses another split.
  std::vector<Plan> split = plans;
  for (Plan& p : split) {
    const Plan s = p.with_layer_split(c.n_layers);
    if (s.stage_layers != p.stage_layers && world.rank() == 0) {
      std::string parts;
      for (int n : s.stage_layers) parts += cat(parts.empty() ? "" : "+", n);
      st.info.push_back(cat("pp=", p.pp, " does not divide the model's ", c.n_layers, " layers: stages of ", parts,
                            " layers (", s.to_string(), "; give layers=... in the plan for another split)"));
    }
    p = s;
  }
  st.plans = PlanSet::make(split, ModelShape::from(c, weight_block_elems(*st.model)));
  st.config = o.engine;
  st.config.validate(c);
  if (st.config.max_model_len == 0) st.config.max_model_len = c.max_seq_len;
  agree_on_text(world, "the model and engine config", engine_fingerprint(st.plans.to_string(), *st.model, st.config));
  st.threads = resolve_threads(o, world.size());
  // The policy's checks on every rank (Seesaw: the CPU tier holds a sequence), its parameters
  // (thresholds, defaults from the cost model) on world rank 0, before anything is built.
  check_policy_setup(o.policy, st.plans, policy_env(c, st.config));
  if (world.rank() == 0) st.policy = resolve_policy_params(o.policy, st.plans, policy_inputs(o, *st.model, st.threads));

  // 3. this rank's KV store and the RankEngine of every plan
  // The local backend's ranks share this process's memory (its world is "local", "local+cuda" over
  // one GPU, or NCCL over the local threads with a GPU each).
  const bool local = o.comm == "local";
  const bool lazy = policy_lazy_weights(o.policy);
  if (o.device == DeviceKind::Cuda && !st.config.kv_cache_bytes && !st.config.rank_memory_bytes) {
    // As vLLM's gpu_memory_utilization: the ranks on this GPU share 90% of what is free; each
    // rank's KV is its share less its weights (kv_budget_bytes).
    const int sharing = local && !gpu_per_rank(o) ? world.size() : 1;
    st.config.rank_memory_bytes = int64_t(0.9 * double(gpu::cuda_free_bytes(ordinal)) / double(sharing));
  }
  const int64_t budget = kv_budget_bytes(st.config, *st.model, st.plans, world.rank(), local ? 0 : world.rank(),
                                         local ? world.size() : 1, lazy);
  RankEngineOptions ro;
  ro.block_size = st.config.block_size;
  ro.numerics = st.config.resolved_numerics();
  ro.kv_pages = kv_pages_for(st.config, st.plans, world.rank(), c.head_dim, budget);
  ro.shift_weights = parse_shift_weights(o.shift_weights);
  if (o.migration_buffer_bytes > 0) ro.transfer.buffer_bytes = o.migration_buffer_bytes;
  if (st.config.cpu_kv_bytes > 0)
    ro.tier = o.comm == "mpi" ? KvTierArena::host_shared(world, st.config.cpu_kv_bytes) : tier;
  ro.lazy_weights = lazy;  // Seesaw: one plan's weight copy at a time
  if (o.rank_options) o.rank_options(world.rank(), ro);
  // The local backend's ranks are threads of this process: each on cores of its own when they
  // fit (core/thread_pool.h bind_to_own_cores; under mpirun the launcher binds the processes).
  if (local && world.size() > 1) bind_to_own_cores(world.rank(), world.size(), st.threads);
  st.pool = std::make_unique<ThreadPool>(st.threads);
  st.dev = o.make_device ? o.make_device(world.rank(), st.pool.get()) : gpu::make_device(o.device, ordinal, st.pool.get());
  ro.device = st.dev.get();
  st.rank = std::make_unique<RankEngine>(st.model, st.plans, world, st.pool.get(), ro);
  if (o.after_step)
    st.rank->after_step = [&o, r = world.rank()](RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
      o.after_step(r, e, b, rel);
    };

  // Start-up report: weight bytes of every rank per plan (Shift 3.3.2: separate w/t + w/P, slice
  // w/t; weights=full: nothing copied).
  const int n_plans = st.plans.size();
  std::vector<int64_t> mine;
  for (int id = 0; id < n_plans; ++id) {
    mine.push_back(st.rank->memory(id).shard_bytes);
    mine.push_back(st.rank->memory(id).owned_bytes);
  }
  mine.push_back(st.rank->kv().bytes());
  std::vector<int64_t> all(mine.size() * size_t(world.size()));
  world.all_gather_bytes(mine.data(), all.data(), mine.size() * sizeof(int64_t));
  if (world.rank() == 0) {
    st.info.push_back(cat("plans: ", st.plans.to_string(), "; policy ", o.policy,
                          st.policy.threshold >= 0 ? cat(" (threshold ", st.policy.threshold, " ", st.policy.threshold_unit, ")")
                                                   : std::string(),
                          n_plans > 1 ? cat("; weights ", o.shift_weights) : std::string()));
    for (int r = 0; r < world.size(); ++r) {
      std::string line = cat("rank ", r, ":");
      for (int id = 0; id < n_plans; ++id) {
        const int64_t shard = all[size_t(r) * mine.size() + size_t(2 * id)];
        const int64_t owned = all[size_t(r) * mine.size() + size_t(2 * id + 1)];
        // Lazy re-shard (Seesaw): the same on every rank; one plan's copy is held at a time.
        const std::string lazy = st.rank->memory(id).lazy ? "; built at a switch into it, freed at a switch out" : "";
        line += cat(id ? ";" : "", " ", st.plans.name(id), " shard ", shard, " bytes (",
                    owned > 0 ? cat("copied ", owned) : std::string("no copy"), lazy, ")");
      }
      const int64_t kv = all[size_t(r) * mine.size() + mine.size() - 1];
      line += cat("; KV store ", kv, " bytes", kv >= 1024 ? cat(" (", human_bytes(kv), ")") : std::string());
      st.info.push_back(line);
    }
    for (int id = 0; id < n_plans; ++id)
      for (const std::string& line : describe_plan_weights(*st.model, st.plans.plan(id), world.size()))
        st.info.push_back(line);
    if (st.config.rank_memory_bytes) {
      std::string line = cat("rank memory ", *st.config.rank_memory_bytes, " bytes = weights held + KV budget:");
      for (int r = 0; r < world.size(); ++r) {
        const int64_t held = rank_weight_bytes(*st.model, st.plans, r, lazy).held;
        line += cat(" rank ", r, " ", held, " + ", *st.config.rank_memory_bytes - held, ";");
      }
      st.info.push_back(line);
    }
  }
}

// World rank 0: scheduler, loop and executor over its RankEngine (or SiDP's replicas, each with
// its own); the driver's DistEngine.
class Leader final : public DistEngine {
 public:
  Leader(RankState& st, Communicator& world, const std::string& policy,
         std::vector<std::unique_ptr<Communicator>> channels, double keepalive_s,
         PricedSidpBackend::Pricer sidp_priced_clock)
      : st_(st), policy_name_(policy) {
    if (!channels.empty())
      replicas_ = std::make_unique<SidpReplicas>(*st.rank, std::move(channels), st.config,
                                                 make_layout_policy(policy, st.plans, st.policy), keepalive_s,
                                                 std::move(sidp_priced_clock));
    else
      core_ = std::make_unique<EngineCore>(*st.rank, world, st.config, make_layout_policy(policy, st.plans, st.policy),
                                           st.plans.max_dp());
  }

  const ModelConfig& model_config() const override { return st_.model->config; }
  std::shared_ptr<const Model> model() const override { return st_.model; }
  const Plan& plan() const override { return st_.plans.plan(0); }
  const PlanSet& plans() const override { return st_.plans; }
  std::string_view backend() const override { return st_.backend; }
  int world_size() const override { return st_.world_size; }
  int num_replicas() const override { return st_.plans.plan(0).dp; }
  int threads_per_rank() const override { return st_.threads; }
  int num_kv_blocks() const override { return replicas_ ? replicas_->coordinator().num_blocks() : core_->scheduler().num_blocks(); }
  const EngineConfig& config() const override { return st_.config; }
  const std::vector<std::string>& start_info() const override { return st_.info; }
  std::string policy() const override {
    return replicas_ ? replicas_->coordinator().policy().describe() : core_->control().policy().describe();
  }
  std::vector<PlanStats> plan_stats() const override {
    return replicas_ ? replicas_->coordinator().plan_stats() : core_->executor().stats();
  }
  std::string fault() const override {
    if (replicas_) return replicas_->fault();
    return core_->executor().broken() ? core_->executor().error() : std::string();
  }
  void heartbeat() override {
    if (!replicas_) core_->executor().heartbeat();
  }
  TierStats tier_stats() const override { return st_.rank->tier_stats(); }
  Scheduler& scheduler() override { return replicas_ ? replicas_->coordinator().scheduler(0) : core_->scheduler(); }
  LiveLoop& loop() override { return replicas_ ? static_cast<LiveLoop&>(replicas_->coordinator()) : core_->loop(); }
  Clock& clock() override { return replicas_ ? replicas_->clock() : core_->clock(); }
  Metrics& metrics() override { return replicas_ ? replicas_->coordinator().metrics() : core_->metrics(); }
  SidpReplicas* sidp_replicas() override { return replicas_.get(); }

  std::vector<Sequence> run(std::vector<Request> requests) override {
    std::map<RequestId, int> seen;
    for (const Request& r : requests)
      if (!seen.emplace(r.id, 0).second) fail("request id ", r.id, " is given twice");
    return replicas_ ? replicas_->run(std::move(requests)) : core_->run(std::move(requests));
  }
  void shut_down() {
    if (replicas_) replicas_->shut_down();
    else core_->executor().stop();
  }

 private:
  RankState& st_;
  std::string policy_name_ = "fixed";
  std::unique_ptr<EngineCore> core_;
  std::unique_ptr<SidpReplicas> replicas_;
};

void run_rank(const DistOptions& o, Communicator& started, const std::function<void(DistEngine&)>& driver,
              std::shared_ptr<KvTierArena> tier) {
  // Ranks with a GPU each (MPI, or local with a GPU per rank) exchange device buffers through NCCL
  // (gpu/device.h device_world); ranks sharing GPU 0 through the local backend's device memory.
  const int ordinal = device_ordinal(o, started);
  std::unique_ptr<Communicator> on_device;
  if (o.device == DeviceKind::Cuda && (started.backend() == "mpi" || gpu_per_rank(o)))
    on_device = gpu::device_world(o.device, started, ordinal);
  Communicator& world = on_device ? *on_device : started;
  RankState st;
  optime::set_rank(world.rank());
  set_up(o, world, ordinal, st, std::move(tier));
  // SiDP under WaS: replicas step on their own over channels {0, j} (sidp_replicas.h).
  std::vector<std::unique_ptr<Communicator>> channels;
  if (!o.sidp_lockstep && sidp_independent(st.plans, o.policy)) channels = split_replica_channels(world);
  if (world.rank() != 0) {
    std::function<void(const StepBatch&)> hook;
    if (o.follower_before_step) hook = [&o, r = world.rank()](const StepBatch& b) { o.follower_before_step(r, b); };
    std::function<void()> beat;
    if (o.follower_heartbeat) beat = [&o, r = world.rank()] { o.follower_heartbeat(r); };
    if (!channels.empty()) follow_replica(*channels[size_t(world.rank())], *st.rank, hook);
    else follow_steps(world, *st.rank, hook, beat);
    return;
  }
  // A keep-alive well inside the communicator's timeout.
  const double keepalive_s = std::clamp(o.comm_options.timeout_s / 4, 0.05, 5.0);
  Leader leader(st, world, o.policy, std::move(channels), keepalive_s, o.sidp_priced_clock);
  driver(leader);
  leader.shut_down();
}

}  // namespace

void run_distributed(const DistOptions& options, const std::function<void(DistEngine&)>& driver) {
  if (options.ranks < 0) fail("--ranks must be >= 0, got ", options.ranks);
  if (options.device == DeviceKind::Cuda) gpu::require_device(options.device);
  std::unique_ptr<World> world =
      make_world(options.comm, options.ranks, options.comm_options,
                 options.rank_memory ? options.rank_memory
                                     : gpu_per_rank(options) ? nullptr : gpu::rank_memory(options.device));
  // Seesaw's CPU KV tier: the ranks of this process share one arena (mpi: set_up maps the host's).
  std::shared_ptr<KvTierArena> tier;
  if (options.engine.cpu_kv_bytes > 0 && options.comm != "mpi") tier = KvTierArena::allocate(options.engine.cpu_kv_bytes);
  world->run([&](Communicator& comm) { run_rank(options, comm, driver, tier); });
}

}  // namespace loom
