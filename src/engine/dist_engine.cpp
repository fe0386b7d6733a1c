#include "engine/dist_engine.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>

#include "comm/world.h"
#include "core/error.h"
#include "core/weight_tiles.h"
#include "engine/dist_executor.h"
#include "engine/policy.h"
#include "engine/shift_executor.h"
#include "kv/block_allocator.h"
#include "model/loader.h"

namespace loom {

namespace {

using nlohmann::json;

// ---- small collectives on strings (control messages: not on the per-step path) ----

// Every rank of `c` ends with rank 0's `s`.
void broadcast_string(Communicator& c, std::string& s) {
  uint64_t n = s.size();
  c.broadcast(&n, sizeof n, 0);
  s.resize(size_t(n));
  if (n) c.broadcast(s.data(), size_t(n), 0);
}

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

// ---- requests and results as JSON (sent once per run() to the replica leaders) ----

json to_json(const Request& r) {
  json j = {{"id", r.id},
            {"prompt", r.prompt},
            {"synthetic_prompt_len", r.synthetic_prompt_len},
            {"max_tokens", r.max_tokens},
            {"eos_ids", r.stop.eos_ids},
            {"ignore_eos", r.stop.ignore_eos},
            {"stop_token_seqs", r.stop.stop_token_seqs},
            {"stop_strings", r.stop.stop_strings},
            {"temperature", r.sampling.temperature},
            {"top_p", r.sampling.top_p},
            {"top_k", r.sampling.top_k},
            {"seed", r.sampling.seed},
            {"priority", r.priority},
            {"arrival_s", r.arrival_s}};
  if (r.slo) j["slo"] = {r.slo->ttft_ms, r.slo->tpot_ms};
  return j;
}

Request request_from_json(const json& j) {
  Request r;
  r.id = j.at("id");
  r.prompt = j.at("prompt").get<std::vector<TokenId>>();
  r.synthetic_prompt_len = j.at("synthetic_prompt_len");
  r.max_tokens = j.at("max_tokens");
  r.stop.eos_ids = j.at("eos_ids").get<std::vector<TokenId>>();
  r.stop.ignore_eos = j.at("ignore_eos");
  r.stop.stop_token_seqs = j.at("stop_token_seqs").get<std::vector<std::vector<TokenId>>>();
  r.stop.stop_strings = j.at("stop_strings").get<std::vector<std::string>>();
  r.sampling.temperature = j.at("temperature");
  r.sampling.top_p = j.at("top_p");
  r.sampling.top_k = j.at("top_k");
  r.sampling.seed = j.at("seed");
  r.priority = j.at("priority");
  r.arrival_s = j.at("arrival_s");
  if (j.contains("slo")) r.slo = Slo{j["slo"][0], j["slo"][1]};
  return r;
}

// ---- the per-rank state ----

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

std::string engine_fingerprint(const Plan& plan, const Model& m, const EngineConfig& e) {
  const ModelConfig& c = m.config;
  return cat("plan ", plan.to_string(), "; model ", c.summary(), " d=", c.d_model, " layers=", c.n_layers,
             " heads=", c.n_heads, "/", c.n_kv_heads, " head_dim=", c.head_dim, " ffn=", c.ffn_dim,
             " vocab=", c.vocab_size, " ctx=", c.max_seq_len, " eps=", c.rms_eps, " theta=", c.rope_theta,
             " tied=", c.tied_embeddings, " bias=", c.qkv_bias, " wdtype=", dtype_name(m.layers.at(0).w_down.dtype),
             " embd=", dtype_name(m.tok_embd.dtype), "; engine seqs=", e.max_num_seqs, " budget=",
             e.max_tokens_per_step, " block=", e.block_size, " chunked=", e.enable_chunked_prefill,
             " max_len=", e.max_model_len);
}

std::string unsupported(const Plan& p) {
  std::string s;
  auto add = [&](bool on, const std::string& what) {
    if (on) s += cat(s.empty() ? "" : ", ", what);
  };
  add(p.pp > 1, cat("pp=", p.pp));
  add(p.kvp > 1, cat("kvp=", p.kvp));
  add(p.weights == WeightSource::FetchFromOwner, "weights=owner");
  return s;
}

struct RankState {
  std::string backend;
  int world_size = 1, world_rank = 0;
  Plan plan;
  RankLayout layout;
  std::shared_ptr<const Model> model;
  EngineConfig config;  // resolved (max_model_len set)
  int threads = 1;
  int num_blocks = 0;
  std::unique_ptr<Communicator> tp;       // this replica's TP group (rank = tp index)
  std::unique_ptr<Communicator> leaders;  // replica leaders (rank = dp index); null on followers
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Transformer> tf;
  std::unique_ptr<KvStorage> kv;
  // Plans with sp (Shift): the replica group is `tp` (s*t ranks, rank sp*t + tp); this rank's
  // base and/or shift config over one KV cache; the layout policy (leaders).
  ModelShape shape;
  int replica_rank = 0;
  std::unique_ptr<ShiftRank> shift;
  std::unique_ptr<LayoutPolicy> policy;
  std::vector<std::string> info;  // start-up report (world rank 0)
};

void set_up(const DistOptions& o, Communicator& world, RankState& st) {
  st.backend = std::string(world.backend());
  st.world_size = world.size();
  st.world_rank = world.rank();
  // 1. the plan, agreed before anything is loaded
  st.plan = Plan::parse(o.plan);
  const std::string plan_text = st.plan.to_string();
  agree_on_text(world, "the plan", plan_text);
  if (st.plan.size() != world.size())
    fail("plan ", plan_text, " needs ", st.plan.size(), " ranks, but the ", st.backend, " world has ", world.size(),
         " (give --ranks ", st.plan.size(), " or mpirun -np ", st.plan.size(), ")");
  if (std::string u = unsupported(st.plan); !u.empty())
    fail("plan ", plan_text, ": the engine executes tp, dp and sp x tp (Shift) so far, not ", u);
  const bool switching = policy_switches(o.policy);
  {
    // The policy decides which configs every rank builds: all ranks must agree on it.
    make_layout_policy(o.policy, Plan::make_sp_tp(2, 1), 0);  // validates the name
    if (switching && (st.plan.sp < 2 || st.plan.shift))
      fail("--policy ", o.policy, " switches between an sp x tp base and its shift config: give the base plan, e.g. "
           "--plan sp=2,tp=2 (got ", plan_text, ")");
    parse_shift_weights(o.shift_weights);
    agree_on_text(world, "the layout policy", cat(o.policy, " weights=", o.shift_weights));
  }

  // 2. the model (memory-mapped), the plan against its sizes, agreement on everything
  st.model = o.load_model ? o.load_model(world.rank()) : std::shared_ptr<const Model>(load_model(o.model_path));
  LOOM_CHECK(st.model != nullptr, "load_model returned no model");
  const ModelConfig& c = st.model->config;
  const ModelShape shape = ModelShape::from(c, weight_block_elems(*st.model));
  validate(st.plan, shape);
  st.config = o.engine;
  st.config.validate(c);
  if (st.config.max_model_len == 0) st.config.max_model_len = c.max_seq_len;
  const std::string fp = engine_fingerprint(st.plan, *st.model, st.config);
  agree_on_text(world, "the model and engine config", fp);
  st.layout = rank_layout(st.plan, shape, world.rank());
  st.shape = shape;
  st.threads = resolve_threads(o, world.size());

  // The Shift threshold: world rank 0's, so every replica switches at the same step size.
  int64_t threshold = o.shift_threshold;
  if (o.policy == "shift") {
    if (threshold < 0 && world.rank() == 0) {
      if (!o.default_shift_threshold) fail("--policy shift needs --shift-threshold (no default threshold given)");
      Plan replica_plan = st.plan;
      replica_plan.dp = 1;
      threshold = o.default_shift_threshold(*st.model, replica_plan, st.threads);
    }
    world.broadcast(&threshold, sizeof threshold, 0);
  }

  // 3. groups and the KV cache size. The replica group: its TP group, or all s*t ranks (sp).
  const int t = st.plan.tp;
  const bool sp_plan = st.plan.sp > 1;
  st.replica_rank = sp_plan ? st.layout.sp * t + st.layout.tp : st.layout.tp;
  const int replica_size = sp_plan ? st.plan.sp * t : t;
  st.tp = world.split(st.layout.dp, st.replica_rank);
  st.leaders = world.split(st.replica_rank == 0 ? 0 : -1, st.layout.dp);
  LOOM_CHECK(st.tp && st.tp->size() == replica_size && st.tp->rank() == st.replica_rank, "replica group of rank ",
             world.rank());

  KvLayout lay;
  lay.n_layers = c.n_layers;
  lay.n_kv_heads = int(st.layout.kv_heads.size());
  lay.head_dim = c.head_dim;
  lay.block_size = st.config.block_size;
  const int64_t per_block = kv_bytes_per_block(lay, DType::F32);
  int64_t blocks;
  if (st.config.kv_cache_bytes) {
    blocks = kv_cache_num_blocks(per_block, st.config.kv_cache_bytes);
  } else {
    const int sharing = st.backend == "local" ? world.size() : 1;  // ranks of this process
    // The shards' decode copies (shard_weights.h) are made after this and come out of the same
    // memory: leave them out of the budget (an estimate: this process's share of the layer
    // matrices, twice for Shift's separate copies, plus the classifier once).
    int64_t layer_bytes = 0;
    for (const LayerWeights& L : st.model->layers)
      for (const WeightView* w : L.matrices()) layer_bytes += w->bytes();
    const bool two_copies = st.plan.sp > 1 && o.shift_weights == "separate";
    const int64_t copies = (st.backend == "local" ? int64_t(st.plan.dp) * layer_bytes
                                                  : layer_bytes / std::max(1, world.size() / st.plan.dp)) *
                               (two_copies ? 2 : 1) +
                           st.model->output.bytes();
    int64_t avail = mem_available_bytes();
    if (decode_copy_affordable(copies)) avail -= copies;
    const int64_t budget = int64_t(double(avail) * st.config.kv_cache_fraction / double(sharing));
    blocks = kv_cache_num_blocks(per_block, budget);
    const int64_t useful = int64_t(st.config.max_num_seqs) *
                           ((st.config.max_model_len + lay.block_size - 1) / lay.block_size);
    blocks = std::min(blocks, useful);
  }
  blocks = std::min<int64_t>(blocks, INT32_MAX);
  std::vector<int64_t> all(size_t(world.size()));
  world.all_gather_bytes(&blocks, all.data(), sizeof blocks);
  st.num_blocks = int(*std::min_element(all.begin(), all.end()));
  lay.num_blocks = st.num_blocks;

  // 4. the shard
  st.pool = std::make_unique<ThreadPool>(st.threads);
  Plan replica_plan = st.plan;
  replica_plan.dp = 1;
  if (st.replica_rank == 0) st.policy = make_layout_policy(o.policy, replica_plan, threshold);
  if (sp_plan) {
    ShiftRankOptions so;
    so.base = switching || !st.plan.shift;
    so.shift = switching || st.plan.shift;
    so.weights = parse_shift_weights(o.shift_weights);
    st.shift = std::make_unique<ShiftRank>(st.model, Plan::make_sp_tp(st.plan.sp, t), *st.tp, st.pool.get(), lay, so);
    // Start-up report: weight bytes of every rank (Shift 3.3.2: w/t + w/P separate, w/t slice).
    const ShiftRankMemory& mm = st.shift->memory();
    const int64_t mine[3] = {mm.base_shard_bytes, mm.shift_shard_bytes, mm.owned_bytes};
    std::vector<int64_t> all_mem(size_t(3 * world.size()));
    world.all_gather_bytes(mine, all_mem.data(), sizeof mine);
    if (world.rank() == 0) {
      st.info.push_back(cat("shift: plan ", plan_text, ", policy ", st.policy->describe(), ", configs ",
                            so.base ? st.shift->base_name() : "", so.base && so.shift ? " + " : "",
                            so.shift ? st.shift->shift_name() : "", ", weights ",
                            so.base && so.shift ? shift_weights_name(so.weights) : "views of the model file"));
      for (int r = 0; r < world.size(); ++r)
        st.info.push_back(cat("shift: rank ", r, " weights: base shard ", all_mem[size_t(3 * r)],
                              " bytes (w/t), shift shard ", all_mem[size_t(3 * r + 1)], " bytes (w/P), owned copies ",
                              all_mem[size_t(3 * r + 2)], " bytes"));
    }
    return;
  }
  ShardSpec shard;
  shard.q_head_begin = st.layout.q_heads.front();
  shard.n_q_heads = int(st.layout.q_heads.size());
  shard.kv_head_begin = st.layout.kv_heads.front();
  shard.n_kv_heads = int(st.layout.kv_heads.size());
  shard.ffn_begin = st.layout.ffn.begin;
  shard.ffn_len = st.layout.ffn.size();
  Transformer::AllReduce reduce = nullptr;
  if (t > 1) {
    Communicator* g = st.tp.get();
    reduce = [g](float* data, int64_t n) { g->all_reduce_sum(data, size_t(n)); };
  }
  st.tf = std::make_unique<Transformer>(st.model, shard, st.pool.get(), std::move(reduce));
  st.kv = std::make_unique<KvStorage>(lay);
}

// A replica's rank 0: scheduler, loop and the distributed executor; world rank 0's one is also
// the driver's DistEngine.
class Leader final : public DistEngine {
 public:
  explicit Leader(RankState& st) : st_(st) {
    if (st.shift) {
      sexec_ = std::make_unique<ShiftExecutor>(*st.tp, *st.shift, st.shape);
      exec_ = sexec_.get();
    } else {
      dexec_ = std::make_unique<DistExecutor>(*st.tp, *st.tf, *st.kv);
      exec_ = dexec_.get();
    }
    SchedulerConfig sc;
    sc.max_num_seqs = st.config.max_num_seqs;
    sc.max_tokens_per_step = st.config.max_tokens_per_step;
    sc.block_size = st.config.block_size;
    sc.num_blocks = st.num_blocks;
    sc.max_model_len = st.config.max_model_len;
    sc.enable_chunked_prefill = st.config.enable_chunked_prefill;
    sched_ = std::make_unique<Scheduler>(sc);
    loop_ = std::make_unique<EngineLoop>(*sched_, *exec_, clock_, metrics_);
    // The layout policy names the config of every step (StepBatch::plan -> StepMetrics::plan).
    loop_->on_batch = [this](StepBatch& b) { b.plan = st_.policy->choose(b); };
  }

  const ModelConfig& model_config() const override { return st_.model->config; }
  std::shared_ptr<const Model> model() const override { return st_.model; }
  const Plan& plan() const override { return st_.plan; }
  std::string_view backend() const override { return st_.backend; }
  int world_size() const override { return st_.world_size; }
  int num_replicas() const override { return st_.plan.dp; }
  int threads_per_rank() const override { return st_.threads; }
  int num_kv_blocks() const override { return st_.num_blocks; }
  const EngineConfig& config() const override { return st_.config; }
  const std::vector<std::string>& start_info() const override { return st_.info; }
  std::string policy() const override { return st_.policy->describe(); }
  ShiftStats shift_stats() const override {
    ShiftStats s;
    if (sexec_) {
      s.base_steps = sexec_->steps_base();
      s.shift_steps = sexec_->steps_shift();
      s.switches = sexec_->num_switches();
      s.kv_bytes_moved = sexec_->kv_bytes_moved();
    }
    return s;
  }
  Scheduler& scheduler() override { return *sched_; }
  EngineLoop& loop() override { return *loop_; }
  Clock& clock() override { return clock_; }
  Metrics& metrics() override { return metrics_; }

  std::vector<Sequence> run(std::vector<Request> requests) override {
    LOOM_CHECK(st_.world_rank == 0, "DistEngine::run is world rank 0's");
    const int dp = st_.plan.dp;
    std::map<RequestId, Request> by_id;
    const int vocab = st_.model->config.vocab_size;
    for (const Request& r : requests) {
      if (!by_id.emplace(r.id, r).second) fail("request id ", r.id, " is given twice");
      // Every rank embeds the tokens: a bad id would fail the whole group mid-step, so it is
      // rejected here, before anything is sent.
      for (TokenId t : r.prompt)
        if (t < 0 || t >= vocab) fail("request ", r.id, ": token id ", t, " is outside the vocabulary [0, ", vocab, ")");
    }
    if (dp > 1) {
      json cmd = {{"cmd", "run"}, {"requests", json::array()}};
      for (const Request& r : requests)
        if (replica_of(r.id, dp) != 0) cmd["requests"].push_back(to_json(r));
      std::string text = cmd.dump();
      broadcast_string(*st_.leaders, text);
    }
    std::vector<Request> mine;
    for (Request& r : requests)
      if (replica_of(r.id, dp) == 0) mine.push_back(std::move(r));
    LocalRun local = run_local(std::move(mine));
    // (finish time on this clock, sequence)
    std::vector<std::pair<double, Sequence>> done;
    for (Sequence& s : local.done) {
      const RequestMetrics* m = metrics_.find(s.id());
      done.push_back({m ? m->finish_s : 0.0, std::move(s)});
    }
    if (dp > 1) {
      const std::vector<std::string> results = all_gather_strings(*st_.leaders, "");
      for (int r = 1; r < dp; ++r) merge(json::parse(results[size_t(r)]), local.t0, by_id, done);
    }
    std::stable_sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Sequence> out;
    for (auto& d : done) out.push_back(std::move(d.second));
    return out;
  }

  // Replica leaders other than world rank 0: run what world rank 0 sends until told to stop.
  void serve() {
    while (true) {
      std::string text;
      broadcast_string(*st_.leaders, text);
      const json cmd = json::parse(text);
      if (cmd.at("cmd") == "stop") return;
      std::vector<Request> mine;
      for (const json& j : cmd.at("requests")) {
        Request r = request_from_json(j);
        if (replica_of(r.id, st_.plan.dp) == st_.layout.dp) mine.push_back(std::move(r));
      }
      const size_t steps_before = metrics_.steps().size();
      std::vector<RequestId> ids;
      for (const Request& r : mine) ids.push_back(r.id);
      LocalRun local = run_local(std::move(mine));
      all_gather_strings(*st_.leaders, encode(local, ids, steps_before));
    }
  }

  // World rank 0, after the driver: release the other leaders, then this replica's followers.
  void shut_down() {
    if (st_.plan.dp > 1) {
      std::string text = json{{"cmd", "stop"}}.dump();
      broadcast_string(*st_.leaders, text);
    }
    stop_followers();
  }
  void stop_followers() {
    if (sexec_) sexec_->stop();
    if (dexec_) dexec_->stop();
  }

 private:
  struct LocalRun {
    double t0 = 0;
    std::vector<Sequence> done;
  };

  // Runs this replica's requests to completion (as Engine::run).
  LocalRun run_local(std::vector<Request> requests) {
    LocalRun out;
    auto prev = loop_->on_finish;
    loop_->on_finish = [&](const Sequence& s) {
      out.done.push_back(s);
      if (prev) prev(s);
    };
    out.t0 = clock_.now();
    for (Request& r : requests) {
      r.arrival_s += out.t0;
      loop_->add_arrival(std::move(r));
    }
    try {
      loop_->run_until_idle();
    } catch (...) {
      loop_->on_finish = prev;
      throw;
    }
    loop_->on_finish = prev;
    if (broken()) fail("replica ", st_.layout.dp, " failed: ", error());
    return out;
  }

  std::string encode(const LocalRun& run, const std::vector<RequestId>& ids, size_t steps_before) const {
    json j = {{"t0", run.t0}, {"seqs", json::array()}, {"requests", json::array()}, {"steps", json::array()}};
    for (const Sequence& s : run.done)
      j["seqs"].push_back({{"id", s.id()},
                           {"output", s.output},
                           {"reason", int(s.finish_reason)},
                           {"detail", s.finish_detail},
                           {"preemptions", s.num_preemptions},
                           {"computed", s.num_computed}});
    for (RequestId id : ids) {
      const RequestMetrics* m = metrics_.find(id);
      if (!m) continue;
      j["requests"].push_back({{"id", id}, {"arrival", m->arrival_s}, {"tokens", m->token_s}, {"finish", m->finish_s}});
    }
    for (size_t i = steps_before; i < metrics_.steps().size(); ++i) {
      const StepMetrics& s = metrics_.steps()[i];
      j["steps"].push_back({s.index, s.start_s, s.end_s, s.num_tokens, s.num_seqs, s.num_prefill_tokens,
                            s.num_decode_tokens, s.kv_blocks_used, s.num_preempted, s.plan});
    }
    return j.dump();
  }

  // Adds another replica's result (times shifted onto this clock) to metrics_ and `done`.
  void merge(const json& j, double t0, const std::map<RequestId, Request>& by_id,
             std::vector<std::pair<double, Sequence>>& done) {
    const double shift = t0 - double(j.at("t0"));
    std::map<RequestId, Sequence> seqs;
    for (const json& s : j.at("seqs")) {
      const RequestId id = s.at("id");
      auto it = by_id.find(id);
      LOOM_CHECK(it != by_id.end(), "replica returned unknown request ", id);
      Sequence q;
      q.request = it->second;
      q.request.arrival_s += t0;
      q.output = s.at("output").get<std::vector<TokenId>>();
      q.finish_reason = FinishReason(int(s.at("reason")));
      q.finish_detail = s.at("detail");
      q.num_preemptions = s.at("preemptions");
      q.num_computed = s.at("computed");
      q.status = SeqStatus::kFinished;
      seqs.emplace(id, std::move(q));
    }
    for (const json& m : j.at("requests")) {
      const RequestId id = m.at("id");
      auto s = seqs.find(id);
      if (s == seqs.end()) continue;
      Request r = s->second.request;
      metrics_.on_arrival(r, double(m.at("arrival")) + shift);
      for (double t : m.at("tokens")) metrics_.on_token(id, t + shift);
      const double fin = double(m.at("finish")) + shift;
      metrics_.on_finish(s->second, fin);
      done.push_back({fin, std::move(s->second)});
      seqs.erase(s);
    }
    for (auto& [id, s] : seqs) done.push_back({t0, std::move(s)});  // no metrics record (not expected)
    for (const json& a : j.at("steps")) {
      StepMetrics s;
      s.index = a[0];
      s.start_s = double(a[1]) + shift;
      s.end_s = double(a[2]) + shift;
      s.num_tokens = a[3];
      s.num_seqs = a[4];
      s.num_prefill_tokens = a[5];
      s.num_decode_tokens = a[6];
      s.kv_blocks_used = a[7];
      s.num_preempted = a[8];
      s.plan = a[9];
      metrics_.on_step(s);
    }
  }

  bool broken() const { return sexec_ ? sexec_->broken() : dexec_->broken(); }
  const std::string& error() const { return sexec_ ? sexec_->error() : dexec_->error(); }

  RankState& st_;
  std::unique_ptr<DistExecutor> dexec_;
  std::unique_ptr<ShiftExecutor> sexec_;
  StepExecutor* exec_ = nullptr;
  std::unique_ptr<Scheduler> sched_;
  WallClock clock_;
  Metrics metrics_;
  std::unique_ptr<EngineLoop> loop_;
};

void run_rank(const DistOptions& o, Communicator& world, const std::function<void(DistEngine&)>& driver) {
  RankState st;
  set_up(o, world, st);
  if (st.replica_rank != 0) {
    std::function<void(const StepBatch&)> hook;
    if (o.follower_before_step) hook = [&o, r = world.rank()](const StepBatch& b) { o.follower_before_step(r, b); };
    if (st.shift) {
      run_shift_follower(*st.tp, *st.shift, hook);
    } else {
      run_follower(*st.tp, *st.tf, *st.kv, hook);
    }
    return;
  }
  Leader leader(st);
  if (world.rank() == 0) {
    driver(leader);
    leader.shut_down();
  } else {
    leader.serve();
    leader.stop_followers();
  }
}

}  // namespace

void run_distributed(const DistOptions& options, const std::function<void(DistEngine&)>& driver) {
  if (options.ranks < 0) fail("--ranks must be >= 0, got ", options.ranks);
  std::unique_ptr<World> world = make_world(options.comm, options.ranks, options.comm_options);
  world->run([&](Communicator& comm) { run_rank(options, comm, driver); });
}

}  // namespace loom
