#include "sim/simulator.h"
#include "sim/svg.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <ostream>
#include <queue>
#include <sstream>

#include "core/clock.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/dist_engine.h"
#include "engine/engine_loop.h"
#include "engine/plan_executor.h"
#include "engine/policy.h"
#include "engine/policy_registry.h"
#include "parallel/plan_set.h"
#include "engine/scheduler.h"
#include "engine/seesaw.h"
#include "engine/sidp_coordinator.h"
#include "engine/sidp_replicas.h"
#include "engine/step.h"
#include "sim/sidp_cost.h"

namespace loom::sim {

namespace {

// The simulator's StepExecutor: prices the batch under the plan the engine's PlanControl chose
// (StepBatch::plan_id; a lockstep DP step as its busiest replica), plus the KV migration when the
// step carries the KV extents of a placement change (StepBatch::kv_seqs), and samples token 0 for
// every sampling sequence (requests run with ignore_eos, so lengths come from the trace).
class CostModelExecutor : public StepExecutor {
 public:
  CostModelExecutor(const CostModel& model, const std::vector<PricedPlan>& plans, bool lockstep, bool seesaw,
                    const SimConfig& config)
      : model_(model), plans_(plans), lockstep_(lockstep), seesaw_(seesaw), config_(config) {}
  StepResult execute(const StepBatch& batch) override {
    StepResult res;
    const PricedPlan& pl = plans_.at(size_t(batch.plan_id));
    const int replicas = lockstep_ ? pl.dp : 1;
    work_.assign(size_t(replicas), {});
    for (const auto& s : batch.seqs) {
      work_[size_t(replica_of(s.seq_id, replicas))].push_back(SeqWork{s.num_tokens, s.context_len(), s.sample});
      if (s.sample) res.sampled.push_back(SampledToken{s.seq_id, 0});
    }
    last_ = replicas > 1 ? model_.price_lockstep(pl, work_) : model_.price(pl, work_.front());
    last_.plan = pl.name;
    if (config_.on_step) config_.on_step(pl, work_, last_);
    switched_ = prev_ >= 0 && batch.plan_id != prev_;
    // A steady-state pipeline (CostModel::price) fills at the first step and after a switch
    // drained it.
    if (prev_ < 0 || switched_) last_.total_s += last_.pipeline_fill_s;
    if (switched_ && !batch.kv_seqs.empty()) {
      // Stop-and-migrate before the step (Nitsum 3.2.2): the KV every sequence holds now.
      last_.switch_s = model_.switch_s(plans_.at(size_t(prev_)), pl, batch.kv_seqs, batch.block_size,
                                       &last_.kv_bytes_moved);
      last_.total_s += last_.switch_s;
    }
    if (seesaw_) {
      // Swaps over every GPU's host link, overlapped with the step (Seesaw 5.2, W10); the weights
      // of the new plan a GPU lacks, reloaded from host memory at a transition (W5).
      int64_t tokens = 0;
      for (const SeqExtent& e : batch.swap_out) tokens += e.n_tokens;
      for (const SeqExtent& e : batch.swap_in) tokens += e.n_tokens;
      last_.total_s = std::max(last_.total_s, model_.kv_swap_s(tokens, pl.world_ranks));
      if (switched_) {
        const double reload = model_.reshard_s(plans_.at(size_t(prev_)), pl);
        last_.switch_s += reload;
        last_.total_s += reload;
      }
    }
    prev_ = batch.plan_id;
    return res;
  }
  const StepCost& last() const { return last_; }
  bool last_switched() const { return switched_; }

 private:
  const CostModel& model_;
  const std::vector<PricedPlan>& plans_;
  bool lockstep_;
  bool seesaw_;
  const SimConfig& config_;
  int prev_ = -1;
  bool switched_ = false;
  std::vector<std::vector<SeqWork>> work_;
  StepCost last_;
};

struct Event {
  double t = 0;
  int priority = 0;  // 0: step done, 1: arrival
  int64_t seq = 0;
  int replica = 0;   // step done
  int64_t index = 0; // arrival: trace index
  bool operator>(const Event& o) const {
    if (t != o.t) return t > o.t;
    if (priority != o.priority) return priority > o.priority;
    return seq > o.seq;
  }
};

// One scheduler with its executor, clock and the engine's plan control: an independent DP
// replica, or (lockstep) the whole world.
struct Replica {
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<CostModelExecutor> exec;
  std::unique_ptr<PlanControl> control;
  ManualClock clock;
  bool busy = false;
  StepBatch batch;
  double step_start = 0;
};

// Applies a simulated step to its scheduler (every sampled row gets a token at `end`) and returns
// its step record, as the engine's EngineLoop::end_step writes it. Both simulation loops use it.
// Request i of the trace as both simulation loops admit it: its id is its index, a synthetic
// prompt of its length, exactly its output tokens (EOS ignored).
Request request_of(const std::vector<TraceRequest>& trace, int64_t i) {
  const TraceRequest& tr = trace[size_t(i)];
  Request req;
  req.id = i;
  req.synthetic_prompt_len = tr.prompt_len;
  req.max_tokens = std::max(1, tr.output_len);
  req.stop.ignore_eos = true;
  req.arrival_s = tr.arrival_s;
  return req;
}

StepMetrics apply_step(Scheduler& sched, const StepBatch& batch, double start, double end, Metrics& metrics) {
  StepResult res;
  for (const auto& s : batch.seqs)
    if (s.sample) res.sampled.push_back(SampledToken{s.seq_id, 0});
  const StepOutcome o = sched.on_step_done(batch, res);
  for (const auto& tok : o.tokens) metrics.on_token(tok.seq_id, end);
  StepMetrics sm = step_record(batch, sched.num_used_blocks());
  sm.start_s = start;
  sm.end_s = end;
  return sm;
}

// SiDP replicas stepping on their own, as the engine runs them: the engine's own coordinator
// (engine/sidp_coordinator.h: routing, own steps, the policy's observations, draining, the group
// step, the records and plan statistics) on the event clock (PricedSidpBackend), every step priced
// by price_sidp over each replica's rows in it (../shared/papers/001 §4.2-§4.3, PAPERS-NOTES.md
// S4, S11, S13):
//   - an own step (WaS) over that replica's work alone (the other replicas' entries empty): nothing
//     in a WaS forward couples the replicas (one-sided gets, the owner oblivious, S4), and with
//     peak shifting each owner has one reader at a time (S7 (ii)), so a replica's fetches do not
//     contend with the others' (without it, sidp_layer_fetch_s already charges the D - 1 readers'
//     incast);
//   - a group step over every replica's part under the plan the policy chose (a replica with
//     nothing is a dummy, S10).
// PlanUse: the coordinator's PlanStats (an own step or a group step is one step of its plan) with
// the priced seconds of those steps.
void run_sidp_replicas(const CostModel& model, const SimConfig& config, const PlanSet& set,
                       const std::vector<PricedPlan>& priced, SchedulerConfig sc, int64_t per_replica,
                       const PolicyParams& params, const std::vector<TraceRequest>& trace, SimResult& out) {
  const int D = set.plan(0).dp;
  sc.pool_shapes = {KvPoolShape{1, 1, int(per_replica), 1}};
  sc.num_blocks = int(per_replica);
  std::vector<double> busy(priced.size(), 0.0);
  std::vector<std::vector<SeqWork>> work(static_cast<size_t>(D));
  PricedSidpBackend backend(D, [&](int plan, const std::vector<const StepBatch*>& parts) {
    const PricedPlan& pl = priced.at(size_t(plan));
    sidp_step_work(parts, work);
    StepCost c = price_sidp(model, pl, work);
    c.plan = pl.name;
    if (config.on_step) config.on_step(pl, work, c);
    busy[size_t(plan)] += c.total_s;
    return c.total_s;
  });
  SidpCoordinator coord(set, sc, make_layout_policy(config.policy, set, params), backend);
  int64_t finished = 0, steps = 0;
  const int64_t total = int64_t(trace.size());
  coord.on_finish = [&](const Sequence&) { ++finished; };
  if (config.on_batch) coord.on_batch = [&](const StepBatch& b) { config.on_batch(b); };
  coord.on_step = [&] {
    if (config.progress && config.progress_every > 0 && ++steps % config.progress_every == 0)
      config.progress(backend.clock().now(), finished, total);
  };
  std::vector<Request> requests;
  requests.reserve(trace.size());
  for (int64_t i = 0; i < total; ++i) requests.push_back(request_of(trace, i));
  coord.run(std::move(requests));
  out.metrics = std::move(coord.metrics());
  for (const StepMetrics& sm : out.metrics.steps()) out.step_replica.push_back(sm.replica);
  std::map<std::string, PlanUse> use;
  const std::vector<PlanStats> stats = coord.plan_stats();
  for (size_t id = 0; id < stats.size(); ++id) {
    if (stats[id].steps == 0) continue;
    PlanUse& u = use[priced[id].name];
    u.config = priced[id].name;
    u.steps += stats[id].steps;
    u.busy_s += busy[id];
    u.switches_to += stats[id].switches;
    out.num_switches += stats[id].switches;
  }
  for (auto& [k, v] : use) out.plan_use.push_back(v);
}

}  // namespace

std::vector<Plan> SimConfig::plan_set() const {
  std::vector<Plan> in = {plan.normalized()};
  for (const Plan& p : more_plans) {
    const Plan q = p.normalized();
    if (std::find(in.begin(), in.end(), q) == in.end()) in.push_back(q);
  }
  check_policy_name(policy);
  return policy_plans(policy, in);
}

std::string SimConfig::describe() const {
  std::string s = plan.to_string();
  for (const Plan& p : more_plans) s += " | " + p.to_string();
  const PolicyThreshold th = policy_threshold(policy);
  if (th == PolicyThreshold::Tokens) return cat(s, ", policy ", policy, "(threshold=", shift_threshold, ")");
  if (th == PolicyThreshold::SequencesPerReplica && sidp_threshold >= 0)
    return cat(s, ", policy ", policy, "(threshold=", sidp_threshold, ", window=", sidp_window_s, " s)");
  return s + ", policy " + policy;
}

Simulator::Simulator(CostModel model, SimConfig config) : model_(std::move(model)), config_(std::move(config)) {}

SimResult Simulator::run(const std::vector<TraceRequest>& trace) const {
  const double wall0 = now_seconds();
  const std::string plan_name = config_.describe();
  // SiDP replicas step together (see the header).
  const bool sidp = config_.plan.weights == WeightSource::FetchFromOwner;
  const bool lockstep = config_.dp_mode == DpMode::Lockstep || sidp;
  SimResult out;
  // The plan set, priced once; steps name plans by id. Independent replicas run the replica
  // plans (dp = 1) of a set that shares one DP degree.
  std::vector<Plan> set_plans = config_.plan_set();
  const int dp = set_plans.front().dp;
  if (!lockstep) {
    for (Plan& p : set_plans) {
      if (p.dp != dp)
        fail("plans ", plan_name, " mix DP degrees (", dp, " and ", p.dp,
             "): independent replicas share one; loom's lockstep DP (DpMode::Lockstep) does not need to");
      p.dp = 1;
    }
  }
  const PlanSet set = PlanSet::make(set_plans, model_.shape());
  // SiDP WaS replicas step on their own, as the engine runs them (sidp_independent,
  // engine/sidp_replicas.h; run_sidp_replicas above); a CaS-only set stays lockstep.
  const bool own_steps = sidp && sidp_independent(set, config_.policy);
  std::vector<PricedPlan> priced;
  for (const Plan& p : set.plans()) priced.push_back(model_.prepare(p));
  const PhaseMode phases = seesaw_phase_mode(config_.policy);
  if (phases == PhaseMode::None) {
    out.memory = model_.memory(priced);
  } else {
    // One plan's weights at a time: the tighter of the two.
    out.memory = model_.memory({priced.front()});
    for (const PricedPlan& p : priced) {
      const MemoryPlan m = model_.memory({p});
      if (m.kv_capacity_tokens < out.memory.kv_capacity_tokens) out.memory = m;
    }
  }

  SchedulerConfig sc;
  const int scale = lockstep && !own_steps ? set.max_dp() : 1;  // per-replica limits times the largest DP degree
  sc.max_num_seqs = config_.max_num_seqs * scale;
  sc.max_tokens_per_step = config_.max_tokens_per_step * scale;
  sc.block_size = config_.block_size;
  sc.enable_chunked_prefill = config_.enable_chunked_prefill;
  sc.max_model_len = config_.max_model_len > 0 ? config_.max_model_len : model_.model().max_seq_len;
  const int64_t blocks = out.memory.kv_capacity_tokens / config_.block_size;
  if (blocks < 1)
    fail("plan ", plan_name, ": no room for a single KV block after the weights (",
         out.memory.free_bytes_per_gpu / 1e9, " GB free per GPU)");
  // As the engine sizes its cache: no more than max_num_seqs sequences of max_model_len can use.
  const int64_t useful = int64_t(config_.max_num_seqs) * ((sc.max_model_len + sc.block_size - 1) / sc.block_size);
  int64_t per_replica = std::min<int64_t>({blocks, useful, int64_t(1) << 30});
  if (config_.num_blocks > 0) per_replica = std::min<int64_t>(config_.num_blocks, int64_t(1) << 30);
  // KV pools per plan (kv/block_allocator.h): one per replica of a lockstep plan.
  std::vector<KvPoolShape> pools;
  for (const Plan& p : set.plans()) pools.push_back(KvPoolShape{lockstep ? p.dp : 1, 1, int(per_replica)});
  sc.pool_shapes = pools;
  sc.num_blocks = int(pools.front().total_blocks());
  if (phases != PhaseMode::None) {
    sc.phases = phases;
    sc.tier_tokens = seesaw_tier_tokens(config_.policy, int64_t(config_.cpu_kv_bytes),
                                        int64_t(std::ceil(model_.kv_bytes_per_token())), sc.max_model_len);
  }
  out.num_blocks_per_replica = per_replica;
  out.num_replicas = dp;
  auto wrap_up = [&](SimResult& res) {
    res.summary = res.metrics.summary();
    res.makespan_s = res.summary.duration_s;
    if (res.makespan_s > 0)
      res.total_tokens_per_s = double(res.summary.num_prompt_tokens + res.summary.num_output_tokens) / res.makespan_s;
    res.wall_s = now_seconds() - wall0;
    res.sim_requests_per_s = res.wall_s > 0 ? double(trace.size()) / res.wall_s : 0;
    if (config_.progress) config_.progress(res.makespan_s, res.summary.num_completed, int64_t(trace.size()));
  };

  const int n_schedulers = lockstep ? 1 : dp;
  std::vector<Replica> reps(static_cast<size_t>(n_schedulers));
  // The policy's parameters, resolved by the policy code the engine uses (engine/policy.h): the
  // configured thresholds, SiDP's default B_th from this cost model at the mean context of the
  // job's decode steps (each output token at its context).
  PolicyInputs in;
  in.shift_threshold = config_.shift_threshold;
  in.sidp_threshold = config_.sidp_threshold;
  in.sidp_window_s = config_.sidp_window_s;
  in.default_sidp_threshold = [&](const Plan& p) {
    double rows = 0, ctx = 0;
    for (const TraceRequest& t : trace)
      rows += t.output_len, ctx += double(t.output_len) * (t.prompt_len + (t.output_len + 1) / 2.0);
    const int context = int(std::clamp(rows > 0 ? ctx / rows : 1.0, 1.0, double(sc.max_model_len)));
    return derive_sidp_crossover(model_, p, context).threshold;
  };
  const PolicyParams params = resolve_policy_params(config_.policy, set, in);
  out.policy_threshold = params.threshold;
  out.policy_threshold_unit = params.threshold_unit;
  if (own_steps) {
    run_sidp_replicas(model_, config_, set, priced, sc, per_replica, params, trace, out);
    wrap_up(out);
    ++simulations_finished().done;
    return out;
  }
  for (auto& r : reps) {
    r.sched = std::make_unique<Scheduler>(sc);
    std::unique_ptr<LayoutPolicy> policy = make_layout_policy(config_.policy, set, params);
    // The engine's control: the policy's choice, KV pools re-homed and the KV extents put in the
    // step when the placement changes (engine/plan_executor.h).
    r.control = std::make_unique<PlanControl>(set, pools, std::move(policy), *r.sched);
    r.exec = std::make_unique<CostModelExecutor>(model_, priced, lockstep, phases != PhaseMode::None, config_);
  }
  std::map<std::string, PlanUse> use;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q;
  int64_t seq = 0;
  for (int64_t i = 0; i < int64_t(trace.size()); ++i) q.push(Event{trace[size_t(i)].arrival_s, 1, seq++, 0, i});

  Metrics& metrics = out.metrics;
  int64_t finished = 0, steps = 0;
  const int64_t total = int64_t(trace.size());

  auto collect = [&](Replica& r, double t) {
    for (const Sequence& s : r.sched->drain_finished()) {
      r.exec->release(s.id());
      metrics.on_finish(s, t);
      ++finished;
    }
  };
  // Starts the next step of an idle replica at time t, if it has work that fits.
  auto try_start = [&](int ri, double t) {
    Replica& r = reps[size_t(ri)];
    if (r.busy || !r.sched->has_unfinished()) return;
    r.clock.set(t);
    r.batch = r.sched->schedule();
    collect(r, t);  // rejections at admission
    if (r.batch.empty()) return;
    r.control->choose_plan(r.batch);  // may preempt (rehome) and empty the batch
    collect(r, t);
    if (r.batch.empty()) return;
    if (config_.on_batch) config_.on_batch(r.batch);
    r.exec->execute(r.batch);  // result re-derived at completion (sampled = every sample seq)
    const StepCost& c = r.exec->last();
    r.busy = true;
    r.step_start = t;
    auto& u = use[r.batch.plan];
    u.config = r.batch.plan;
    ++u.steps;
    u.busy_s += c.total_s;
    if (r.exec->last_switched()) {
      ++u.switches_to;
      u.kv_bytes_moved += c.kv_bytes_moved;
      u.switch_s += c.switch_s;
      ++out.num_switches;
      out.kv_bytes_moved += c.kv_bytes_moved;
    }
    q.push(Event{t + c.total_s, 0, seq++, ri, 0});
  };

  while (!q.empty()) {
    const Event e = q.top();
    q.pop();
    if (e.priority == 1) {
      Request req = request_of(trace, e.index);
      const int ri = lockstep ? 0 : replica_of(req.id, dp);  // the engine's routing (parallel/plan.h)
      metrics.on_arrival(req, e.t);
      Replica& r = reps[size_t(ri)];
      r.clock.set(std::max(r.clock.now(), e.t));
      r.sched->add_request(std::move(req));
      collect(r, e.t);
      try_start(ri, e.t);
      continue;
    }
    Replica& r = reps[size_t(e.replica)];
    r.clock.set(e.t);
    metrics.on_step(apply_step(*r.sched, r.batch, r.step_start, e.t, metrics));
    out.step_replica.push_back(e.replica);
    collect(r, e.t);
    r.busy = false;
    ++steps;
    if (config_.progress && config_.progress_every > 0 && steps % config_.progress_every == 0)
      config_.progress(e.t, finished, total);
    try_start(e.replica, e.t);
  }
  for (auto& r : reps)
    if (r.sched->has_unfinished())
      fail("simulation stalled: a replica holds requests that never fit (", r.sched->num_waiting(),
           " waiting with ", r.sched->num_free_blocks(), " free KV blocks)");

  out.summary = metrics.summary();
  out.makespan_s = out.summary.duration_s;
  if (out.makespan_s > 0)
    out.total_tokens_per_s = double(out.summary.num_prompt_tokens + out.summary.num_output_tokens) / out.makespan_s;
  for (auto& [k, v] : use) out.plan_use.push_back(v);
  out.wall_s = now_seconds() - wall0;
  out.sim_requests_per_s = out.wall_s > 0 ? double(total) / out.wall_s : 0;
  if (config_.progress) config_.progress(out.makespan_s, finished, total);
  ++simulations_finished().done;
  return out;
}

nlohmann::json summary_json(const SimResult& r, const Simulator& sim) {
  const auto& m = sim.cost_model();
  nlohmann::json j;
  j["model"] = m.model().summary();
  j["hardware"] = m.node().name();
  j["dtype"] = sim_dtype_name(m.options().weight_dtype);
  j["plan"] = sim.config().plan.to_string();
  j["policy"] = sim.config().describe();
  if (r.policy_threshold >= 0) j["policy_threshold"] = {{"value", r.policy_threshold}, {"unit", r.policy_threshold_unit}};
  j["calibration"] = m.calibration().fitted_on;
  j["summary"] = to_json(r.summary);
  j["makespan_s"] = r.makespan_s;
  j["total_tokens_per_s"] = r.total_tokens_per_s;
  j["memory"] = {{"weight_gb_per_gpu", r.memory.weight_bytes_per_gpu / 1e9},
                 {"kv_bytes_per_token_per_gpu", r.memory.kv_bytes_per_token_per_gpu},
                 {"kv_capacity_tokens_per_replica", r.memory.kv_capacity_tokens},
                 {"kv_blocks_per_replica", r.num_blocks_per_replica},
                 {"replicas", r.num_replicas}};
  nlohmann::json use = nlohmann::json::array();
  for (const auto& u : r.plan_use)
    use.push_back({{"config", u.config}, {"steps", u.steps}, {"busy_s", u.busy_s}, {"switches_to", u.switches_to},
                   {"kv_bytes_moved", u.kv_bytes_moved}, {"switch_s", u.switch_s}});
  j["plan_use"] = use;
  j["switches"] = r.num_switches;
  j["kv_bytes_moved"] = r.kv_bytes_moved;
  j["wall_s"] = r.wall_s;
  j["simulated_requests_per_s"] = r.sim_requests_per_s;
  return j;
}

void write_requests_csv(const SimResult& r, std::ostream& os) { r.metrics.write_requests_csv(os); }


std::string svg_latency_cdf(const SimResult& r) {
  std::vector<double> ttft, tpot;
  for (const auto& q : r.metrics.requests()) {
    if (q.finish_reason != FinishReason::kStop && q.finish_reason != FinishReason::kLength) continue;
    if (q.num_output() > 0) ttft.push_back(std::max(1e-3, q.ttft_s() * 1e3));
    if (auto t = q.tpot_s()) tpot.push_back(std::max(1e-3, *t * 1e3));
  }
  std::sort(ttft.begin(), ttft.end());
  std::sort(tpot.begin(), tpot.end());
  double lo = 1e300, hi = 0;
  for (const auto* v : {&ttft, &tpot})
    if (!v->empty()) lo = std::min(lo, v->front()), hi = std::max(hi, v->back());
  Svg s("Latency CDF (TTFT, TPOT)");
  if (hi <= 0) return s.done();
  lo = std::pow(10, std::floor(std::log10(lo)));
  hi = std::pow(10, std::ceil(std::log10(hi)));
  if (hi <= lo) hi = lo * 10;
  s.axes("milliseconds (log)", "fraction of requests", lo, hi, 0, 1, true);
  auto curve = [&](const std::vector<double>& v) {
    std::vector<std::pair<double, double>> pts;
    const size_t step = std::max<size_t>(1, v.size() / 400);
    for (size_t i = 0; i < v.size(); i += step)
      pts.push_back({(std::log10(v[i]) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)), double(i + 1) / v.size()});
    if (!v.empty()) pts.push_back({(std::log10(v.back()) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)), 1.0});
    return pts;
  };
  s.polyline(curve(ttft), "#d62728");
  s.polyline(curve(tpot), "#1f77b4");
  s.legend(0, "TTFT", "#d62728");
  s.legend(1, "TPOT", "#1f77b4");
  return s.done();
}

std::string svg_throughput(const SimResult& r, int bins) {
  const auto& steps = r.metrics.steps();
  Svg s("Throughput over time (all replicas)");
  if (steps.empty()) return s.done();
  double t0 = 1e300, t1 = 0;
  for (const auto& st : steps) t0 = std::min(t0, st.start_s), t1 = std::max(t1, st.end_s);
  if (t1 <= t0) t1 = t0 + 1;
  bins = std::max(1, bins);
  std::vector<double> out(size_t(bins), 0.0), all(size_t(bins), 0.0);
  const double bw = (t1 - t0) / bins;
  for (const auto& st : steps) {
    const int b = std::min(bins - 1, int((st.end_s - t0) / bw));
    out[size_t(b)] += st.num_decode_tokens + (st.num_tokens > 0 ? 0 : 0);
    all[size_t(b)] += st.num_tokens;
  }
  double ymax = 1;
  for (int b = 0; b < bins; ++b) out[size_t(b)] /= bw, all[size_t(b)] /= bw, ymax = std::max(ymax, all[size_t(b)]);
  s.axes("simulated time (s)", "tokens per second", t0, t1, 0, ymax, false);
  std::vector<std::pair<double, double>> po, pa;
  for (int b = 0; b < bins; ++b) {
    po.push_back({(b + 0.5) / bins, out[size_t(b)] / ymax});
    pa.push_back({(b + 0.5) / bins, all[size_t(b)] / ymax});
  }
  s.polyline(pa, "#2ca02c");
  s.polyline(po, "#1f77b4");
  s.legend(0, "all tokens (prefill + decode)", "#2ca02c");
  s.legend(1, "decode tokens", "#1f77b4");
  return s.done();
}

std::string svg_plan_per_step(const SimResult& r) {
  const auto& steps = r.metrics.steps();
  Svg s("Plan over time (a band: steps under that plan)", 420, 150);
  if (steps.empty()) return s.done();
  std::vector<std::string> names;
  for (const auto& u : r.plan_use) names.push_back(u.config);
  for (const auto& st : steps)
    if (std::find(names.begin(), names.end(), st.plan) == names.end()) names.push_back(st.plan);
  double t0 = 1e300, t1 = 0;
  for (const auto& st : steps) t0 = std::min(t0, st.start_s), t1 = std::max(t1, st.end_s);
  if (t1 <= t0) t1 = t0 + 1;
  // Time ticks only; the rows are named at the left.
  s.axes("simulated time (s)", "", t0, t1, 0, 0, false);
  const double rows = double(std::max<size_t>(1, names.size()));
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  for (size_t i = 0; i < names.size(); ++i)
    s.os << "<text x=\"" << s.l - 6 << "\" y=\"" << s.py((double(i) + 0.5) / rows) + 4 << "\" text-anchor=\"end\">"
         << Svg::esc(names[i].size() > 22 ? names[i].substr(0, 21) + "~" : names[i]) << "</text>\n";
  // Steps in start order (replicas interleave); a band per maximal run under one plan, closed where
  // another plan's step starts. Runs shorter than a pixel still get one.
  std::vector<const StepMetrics*> order;
  for (const auto& st : steps) order.push_back(&st);
  std::stable_sort(order.begin(), order.end(), [](const StepMetrics* a, const StepMetrics* b) { return a->start_s < b->start_s; });
  auto band = [&](const std::string& plan, double a, double b) {
    const size_t row = size_t(std::find(names.begin(), names.end(), plan) - names.begin());
    const double x0 = s.px((a - t0) / (t1 - t0)), x1 = std::max(x0 + 1, s.px((b - t0) / (t1 - t0)));
    const double y0 = s.py((double(row) + 0.85) / rows), y1 = s.py((double(row) + 0.15) / rows);
    s.os << "<rect class=\"band\" x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << x1 - x0 << "\" height=\"" << y1 - y0
         << "\" fill=\"" << colors[row % 6] << "\"/>\n";
  };
  std::string cur = order.front()->plan;
  double run_start = order.front()->start_s, run_end = order.front()->end_s;
  for (const StepMetrics* st : order) {
    if (st->plan != cur) {
      band(cur, run_start, std::max(run_end, run_start));
      cur = st->plan, run_start = st->start_s, run_end = st->end_s;
    } else {
      run_end = std::max(run_end, st->end_s);
    }
  }
  band(cur, run_start, run_end);
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t n = 0;
    for (const auto& st : steps) n += st.plan == names[i];
    s.legend(int(i), names[i] + " (" + std::to_string(n) + " steps)", colors[i % 6]);
  }
  return s.done();
}

}  // namespace loom::sim
