#include "sim/validate_engine.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/op_timing.h"
#include "core/rng.h"
#include "engine/dist_engine.h"
#include "engine/policy.h"
#include "engine/policy_registry.h"
#include "engine/seesaw.h"
#include "engine/sidp_coordinator.h"
#include "engine/sidp_replicas.h"
#include "parallel/plan_set.h"
#include "model/loader.h"
#include "sim/shift_threshold.h"
#include "sim/sidp_cost.h"
#include "sim/simulator.h"

namespace loom::sim {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The engine's requests for the trace: id = trace index, prompt ids uniform over the vocabulary
// from Rng(seed, index) (the prompts' values do not change the work), output to the trace's
// length (ignore_eos), greedy, arrival times of the trace.
std::vector<Request> engine_requests(const std::vector<TraceRequest>& trace, uint64_t seed, int vocab) {
  std::vector<Request> out;
  for (size_t i = 0; i < trace.size(); ++i) {
    Request r;
    r.id = RequestId(i);
    Rng rng(seed * 0x9e3779b97f4a7c15ull ^ uint64_t(i) * 0xd1b54a32d192ed03ull);
    r.prompt.resize(size_t(trace[i].prompt_len));
    for (auto& t : r.prompt) t = TokenId(rng.below(uint64_t(vocab)));
    r.max_tokens = std::max(1, trace[i].output_len);
    r.stop.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    r.arrival_s = trace[i].arrival_s;
    out.push_back(std::move(r));
  }
  return out;
}

// Every step's batch by (replica, the replica scheduler's step index): its sequences and their
// token counts (a step record's composition).
using Batches = std::map<std::pair<int, int64_t>, std::vector<std::pair<RequestId, int>>>;

void record_batch(const StepBatch& b, int dp, Batches& out) {
  if (b.seqs.empty()) return;
  std::vector<std::pair<RequestId, int>>& v = out[{replica_of(b.seqs.front().seq_id, dp), b.step_index}];
  v.clear();
  for (const ScheduledSeq& q : b.seqs) v.emplace_back(q.seq_id, q.num_tokens);
}

struct EngineRun {
  Metrics metrics;
  Batches batches;  // when asked for
  int64_t num_kv_blocks = 0;
  int threads_per_rank = 0;
  std::string backend;
};

// The one place that drives the engine (engine/dist_engine.h): the plan on plan.size() ranks as
// threads of this process, the layout policy and threshold given, every rank's KV cache of
// kv_cache_bytes, then the requests run to completion.
EngineRun run_on_engine(std::shared_ptr<const Model> model, const EngineValidationOptions& o, const EnginePlan& p,
                        int threads_per_rank, int64_t shift_threshold, int64_t sidp_threshold,
                        int64_t cpu_kv_bytes, std::vector<Request> requests,
                        PricedSidpBackend::Pricer sidp_priced_clock = nullptr, bool record_batches = false) {
  DistOptions d;
  d.comm = "local";
  d.ranks = Plan::parse(p.plan).size();
  d.plans = p.plans();
  d.model_path = o.model_path;
  d.load_model = [model](int) { return model; };
  d.engine.threads = threads_per_rank;
  d.engine.max_num_seqs = o.max_num_seqs;
  d.engine.max_tokens_per_step = o.max_tokens_per_step;
  d.engine.block_size = o.block_size;
  d.engine.max_model_len = o.max_model_len;
  d.engine.kv_cache_bytes = o.kv_cache_bytes;
  d.engine.cpu_kv_bytes = cpu_kv_bytes;
  d.policy = p.policy;
  d.shift_threshold = shift_threshold;
  d.sidp_threshold = sidp_threshold;
  d.sidp_priced_clock = std::move(sidp_priced_clock);
  EngineRun run;
  run_distributed(d, [&](DistEngine& e) {
    run.num_kv_blocks = e.num_kv_blocks();
    run.threads_per_rank = e.threads_per_rank();
    run.backend = std::string(e.backend());
    if (record_batches) {
      const int dp = e.num_replicas();
      e.loop().on_batch = [&run, dp](const StepBatch& b) { record_batch(b, dp, run.batches); };
    }
    e.run(std::move(requests));
    run.metrics = e.metrics();
  });
  return run;
}

// One step record as both sides compare it.
struct StepRecord {
  int replica = -1;
  bool lockstep = false;
  std::string plan;
  double start_s = 0, end_s = 0;
  std::vector<std::pair<RequestId, int>> seqs;  // the batch: sequence, tokens
  bool operator==(const StepRecord&) const = default;
};

std::vector<StepRecord> step_records(const Metrics& m, const Batches& batches) {
  std::vector<StepRecord> out;
  for (const StepMetrics& st : m.steps()) {
    StepRecord r{st.replica, st.lockstep, st.plan, st.start_s, st.end_s, {}};
    auto it = batches.find({st.replica, st.index});
    if (it != batches.end()) r.seqs = it->second;
    out.push_back(std::move(r));
  }
  return out;
}

std::string describe(const StepRecord& r) {
  std::string s = cat("replica ", r.replica, r.lockstep ? " lockstep" : " own", ", plan ", r.plan, ", [", r.start_s,
                      ", ", r.end_s, ") s, batch");
  for (const auto& [id, n] : r.seqs) s += cat(" ", id, ":", n);
  return s;
}

// The engine's step records on the simulator's clock against the simulator's (PlanValidation).
void compare_step_records(const std::vector<StepRecord>& e, const std::vector<StepRecord>& s, PlanValidation& v) {
  v.step_records = int64_t(e.size());
  v.step_records_identical = true;
  for (size_t i = 0; i < std::max(e.size(), s.size()); ++i) {
    if (i < e.size() && i < s.size() && e[i] == s[i]) continue;
    v.step_records_identical = false;
    v.step_record_mismatch = cat("step ", i, ": engine ", i < e.size() ? describe(e[i]) : std::string("none"),
                                 "; simulator ", i < s.size() ? describe(s[i]) : std::string("none"));
    return;
  }
}

std::vector<std::pair<std::string, int64_t>> steps_per_plan(const Metrics& m) {
  std::map<std::string, int64_t> n;
  for (const StepMetrics& s : m.steps()) ++n[s.plan];
  return {n.begin(), n.end()};
}

std::vector<MetricComparison> compare(const MetricsSummary& e, const MetricsSummary& s) {
  auto tput = [](const MetricsSummary& x) {
    return x.duration_s > 0 ? double(x.num_prompt_tokens + x.num_output_tokens) / x.duration_s : 0.0;
  };
  return {{"throughput_tok_s", tput(e), tput(s)}, {"ttft_p50_ms", e.ttft_ms.p50, s.ttft_ms.p50},
          {"ttft_p90_ms", e.ttft_ms.p90, s.ttft_ms.p90},  {"tpot_p50_ms", e.tpot_ms.p50, s.tpot_ms.p50},
          {"tpot_p90_ms", e.tpot_ms.p90, s.tpot_ms.p90},  {"steps", double(e.num_steps), double(s.num_steps)}};
}

// Median step durations (decode-only steps, steps with prefill) and gaps between consecutive
// steps of one replica (ms).
std::vector<MetricComparison> step_diagnostics(const Metrics& e, const Metrics& s) {
  auto stats = [](const Metrics& m, double out[3]) {
    std::vector<double> dec, pf, gap;
    double prev_end = -1;
    for (const StepMetrics& st : m.steps()) {
      (st.num_prefill_tokens > 0 ? pf : dec).push_back((st.end_s - st.start_s) * 1e3);
      if (prev_end >= 0 && st.start_s >= prev_end) gap.push_back((st.start_s - prev_end) * 1e3);
      prev_end = st.end_s;
    }
    out[0] = percentile(dec, 50), out[1] = percentile(pf, 50), out[2] = percentile(gap, 50);
  };
  double a[3], b[3];
  stats(e, a);
  stats(s, b);
  return {{"decode_step_p50_ms", a[0], b[0]}, {"prefill_step_p50_ms", a[1], b[1]}, {"step_gap_p50_ms", a[2], b[2]}};
}

// Same completed requests on both sides: ids, prompt lengths, output token counts.
void check_requests(const Metrics& engine, const Metrics& sim, PlanValidation& v) {
  struct R {
    int prompt, output;
    FinishReason reason;
  };
  auto table = [](const Metrics& m) {
    std::map<RequestId, R> t;
    for (const RequestMetrics& r : m.requests()) t[r.id] = R{r.prompt_len, r.num_output(), r.finish_reason};
    return t;
  };
  const auto a = table(engine), b = table(sim);
  v.num_requests = int64_t(a.size());
  v.same_requests = true;
  if (a.size() != b.size()) {
    v.same_requests = false;
    v.request_mismatch = cat("engine has ", a.size(), " requests, simulator ", b.size());
    return;
  }
  for (const auto& [id, x] : a) {
    auto it = b.find(id);
    if (it == b.end() || it->second.prompt != x.prompt || it->second.output != x.output ||
        it->second.reason != x.reason) {
      v.same_requests = false;
      v.request_mismatch =
          it == b.end() ? cat("request ", id, " is missing in the simulator")
                        : cat("request ", id, ": engine prompt ", x.prompt, " output ", x.output, " (",
                              finish_reason_name(x.reason), "), simulator prompt ", it->second.prompt, " output ",
                              it->second.output, " (", finish_reason_name(it->second.reason), ")");
      return;
    }
  }
}

}  // namespace

std::vector<std::string> EnginePlan::plans() const {
  std::vector<std::string> out{plan};
  out.insert(out.end(), more_plans.begin(), more_plans.end());
  return out;
}

std::string EnginePlan::label() const {
  std::string s = plan;
  for (const auto& m : more_plans) s += "|" + m;
  return is_default_policy(policy) ? s : s + " @" + policy;
}

EnginePlan EnginePlan::parse(const std::string& text, const std::string& default_policy) {
  EnginePlan p;
  const auto at = text.find('@');
  const std::string plans = text.substr(0, at);
  p.policy = at == std::string::npos ? default_policy : text.substr(at + 1);
  // Nitsum's pool is not a plan of one engine: `loom serve --policy nitsum` re-plans a pool of
  // instances (cluster/pool.h) with a control-plane rank, while the simulator prices it only in
  // the nitsum experiments; there is no DistEngine run and no Simulator run to compare.
  if (policy_runs_pool(p.policy))
    fail("validate-engine: --policy ", p.policy, " cannot be compared: Nitsum's pool (loom serve --policy ", p.policy,
         ") is a pool of re-planned instances, not a plan of one engine the simulator runs");
  std::vector<std::string> texts;
  for (size_t b = 0;;) {
    const auto bar = plans.find('|', b);
    texts.push_back(plans.substr(b, bar == std::string::npos ? std::string::npos : bar - b));
    if (bar == std::string::npos) break;
    b = bar + 1;
  }
  // Names a bad plan or policy up front (before any model loads).
  const std::vector<Plan> set = PlanSet::parse(texts);
  p.plan = set.front().to_string();
  for (size_t i = 1; i < set.size(); ++i) p.more_plans.push_back(set[i].to_string());
  policy_plans(p.policy, set);  // the policy's name and plans (Seesaw: two plans of one DP degree)
  return p;
}

double MetricComparison::error() const {
  if (!(engine != 0) || std::isnan(engine) || std::isnan(simulated)) return std::numeric_limits<double>::quiet_NaN();
  return (simulated - engine) / engine;
}

double PlanValidation::median_abs_error() const {
  std::vector<double> e;
  for (const auto& m : metrics)
    if (!std::isnan(m.error())) e.push_back(std::abs(m.error()));
  return e.empty() ? std::numeric_limits<double>::quiet_NaN() : percentile(e, 50);
}

double PlanValidation::max_abs_error() const {
  double worst = std::numeric_limits<double>::quiet_NaN();
  for (const auto& m : metrics)
    if (!std::isnan(m.error())) worst = std::isnan(worst) ? std::abs(m.error()) : std::max(worst, std::abs(m.error()));
  return worst;
}

std::vector<PlanValidation> validate_engine(const MachineProfile& profile, const EngineValidationOptions& o,
                                            const std::vector<EnginePlan>& plans,
                                            const std::function<void(const std::string&)>& progress) {
  if (o.trace.empty()) fail("validate-engine: the trace holds no request");
  if (plans.empty()) fail("validate-engine: give at least one --plan");
  std::shared_ptr<const Model> model = load_model(o.model_path);
  const ModelConfig& mc = model->config;
  const DType weight_dtype = model->layers.at(0).w_up.dtype;
  const int max_len = o.max_model_len > 0 ? o.max_model_len : mc.max_seq_len;
  for (size_t i = 0; i < o.trace.size(); ++i)
    if (o.trace[i].prompt_len + o.trace[i].output_len > max_len)
      fail("validate-engine: request ", i, " needs ", o.trace[i].prompt_len + o.trace[i].output_len,
           " tokens, the context is ", max_len, " (clip the trace)");
  // Every plan against the model before anything runs (the engine's rule and message).
  const ModelShape shape = ModelShape::from(mc, dtype_block_elems(weight_dtype));
  for (const EnginePlan& p : plans)
    for (const std::string& t : p.plans()) validate(Plan::parse(t), shape);
  if (!o.steps_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.steps_dir, ec);
    if (ec) fail("validate-engine: cannot create --steps-dir ", o.steps_dir, ": ", ec.message());
  }
  std::vector<PlanValidation> out;
  for (const EnginePlan& p : plans) {
    const Plan plan = Plan::parse(p.plan);
    PlanValidation v;
    v.plan = p;
    v.ranks = plan.size();
    Plan replica = plan;
    replica.dp = 1;
    // The cost model of this machine for the plan's ranks, calibrated by the profile.
    const CostModel cm = profile_cost_model(profile, mc, weight_dtype, replica.size(), "local", plan.size());
    // (the node has a replica's ranks; all plan.size() ranks compute at once)
    const PolicyThreshold takes = policy_threshold(p.policy);
    int64_t threshold = o.shift_threshold;
    if (takes == PolicyThreshold::Tokens && threshold < 0)
      threshold = derive_shift_threshold(cm, replica.sp, replica.tp, o.max_tokens_per_step).threshold;
    v.shift_threshold = takes == PolicyThreshold::Tokens ? threshold : -1;
    // SiDP's threshold (the crossover): as the simulator derives it (sim/simulator.cpp), at the mean
    // context of the trace's decode steps, so that both sides switch at the same batch.
    int64_t sidp_threshold = o.sidp_threshold;
    if (takes == PolicyThreshold::SequencesPerReplica && sidp_threshold < 0) {
      double rows = 0, ctx = 0;
      for (const TraceRequest& t : o.trace)
        rows += t.output_len, ctx += double(t.output_len) * (t.prompt_len + (t.output_len + 1) / 2.0);
      const int context = int(std::clamp(rows > 0 ? ctx / rows : 1.0, 1.0, double(max_len)));
      sidp_threshold = derive_sidp_crossover(cm, plan, context).threshold;
    }
    v.sidp_threshold = takes == PolicyThreshold::SequencesPerReplica ? sidp_threshold : -1;
    // Seesaw's CPU tier.
    const int64_t cpu_kv = is_seesaw_policy(p.policy)
                               ? (o.cpu_kv_bytes > 0 ? o.cpu_kv_bytes : o.kv_cache_bytes * plan.size())
                               : 0;
    v.cpu_kv_bytes = cpu_kv;

    // The engine.
    if (optime::enabled()) optime::reset();
    const auto t0 = std::chrono::steady_clock::now();
    EngineRun er = run_on_engine(model, o, p, profile.threads_per_rank, std::max<int64_t>(threshold, 0),
                                 sidp_threshold, cpu_kv, engine_requests(o.trace, o.seed, mc.vocab_size));
    v.engine_wall_s = seconds_since(t0);
    v.backend = er.backend;
    v.threads_per_rank = er.threads_per_rank;
    v.num_kv_blocks = er.num_kv_blocks;
    optime::Totals rank0;
    if (optime::enabled())
      for (const optime::Totals& t : optime::snapshot())
        if (t.rank == 0) rank0 = t;
    StepCost priced;

    // The simulator with the engine's limits and cache size.
    SimConfig sc;
    sc.plan = plan;
    for (const std::string& t : p.more_plans) sc.more_plans.push_back(Plan::parse(t));
    sc.policy = p.policy;
    sc.sidp_threshold = sidp_threshold;
    sc.sidp_window_s = 0;  // the engine's window: kSidpWindow observations (its policy has no window in seconds)
    sc.cpu_kv_bytes = double(cpu_kv);
    // loom's engine steps its DP replicas together; SiDP WaS replicas step on their own on both
    // sides (engine/sidp_replicas.h; the simulator follows sidp_independent whatever dp_mode says),
    // and both record one step per replica and step, so the step counts compare like with like.
    sc.dp_mode = DpMode::Lockstep;
    sc.shift_threshold = std::max<int64_t>(threshold, 0);
    sc.max_num_seqs = o.max_num_seqs;
    sc.max_tokens_per_step = o.max_tokens_per_step;
    sc.block_size = o.block_size;
    sc.max_model_len = max_len;
    sc.num_blocks = er.num_kv_blocks / plan.dp;  // the engine's blocks under the plan, all replicas
    sc.on_step = [&priced](const PricedPlan&, const std::vector<std::vector<SeqWork>>&, const StepCost& c) {
      priced.gemm_s += c.gemm_s, priced.attention_s += c.attention_s, priced.elementwise_s += c.elementwise_s;
      priced.comm_s += c.comm_s, priced.overhead_s += c.overhead_s, priced.total_s += c.total_s;
    };
    // SiDP replicas stepping on their own: both sides' batches, and the engine once more on the
    // simulator's clock (PlanValidation::step_records).
    const PlanSet set = PlanSet::make(sc.plan_set(), cm.shape());
    const bool sidp_records = plan.weights == WeightSource::FetchFromOwner && sidp_independent(set, p.policy);
    Batches sim_batches;
    if (sidp_records) sc.on_batch = [&sim_batches, dp = plan.dp](const StepBatch& b) { record_batch(b, dp, sim_batches); };
    const auto t1 = std::chrono::steady_clock::now();
    const SimResult sr = Simulator(cm, sc).run(o.trace);
    v.sim_wall_s = seconds_since(t1);
    if (sidp_records) {
      std::vector<PricedPlan> priced;
      for (const Plan& q : set.plans()) priced.push_back(cm.prepare(q));
      std::vector<std::vector<SeqWork>> work;
      auto price = [&](int id, const std::vector<const StepBatch*>& parts) {
        sidp_step_work(parts, work);
        return price_sidp(cm, priced.at(size_t(id)), work).total_s;
      };
      const EngineRun on_sim_clock =
          run_on_engine(model, o, p, profile.threads_per_rank, std::max<int64_t>(threshold, 0), sidp_threshold, cpu_kv,
                        engine_requests(o.trace, o.seed, mc.vocab_size), price, true);
      compare_step_records(step_records(on_sim_clock.metrics, on_sim_clock.batches), step_records(sr.metrics, sim_batches),
                           v);
    }

    if (!o.steps_dir.empty()) {
      std::string name;  // the plan's label, safe in a file name ("sp=2 @shift" -> "sp=2_@shift")
      for (char c : p.label()) name += std::isalnum(static_cast<unsigned char>(c)) || std::strchr("=.-@+", c) ? c : '_';
      const std::string stem = cat(o.steps_dir, "/", out.size() + 1, "_", name);
      for (const auto& [side, m] : {std::pair<const char*, const Metrics*>{"engine", &er.metrics}, {"sim", &sr.metrics}}) {
        std::ofstream f(cat(stem, "_", side, ".csv"));
        m->write_steps_csv(f);
        if (!f) fail("validate-engine: cannot write ", stem, "_", side, ".csv");
      }
    }
    v.engine_summary = er.metrics.summary();
    v.simulated_summary = sr.summary;
    v.metrics = compare(v.engine_summary, v.simulated_summary);
    v.diagnostics = step_diagnostics(er.metrics, sr.metrics);
    if (optime::enabled()) {
      using optime::Op;
      auto s = [&](Op op) { return rank0.seconds[size_t(op)]; };
      double steps_e = 0, steps_s = 0;
      for (const StepMetrics& st : er.metrics.steps()) steps_e += st.end_s - st.start_s;
      for (const StepMetrics& st : sr.metrics.steps()) steps_s += st.end_s - st.start_s;
      v.op_breakdown = {{"matmul_s", s(Op::Matmul), priced.gemm_s},
                        {"attention_s", s(Op::Attention), priced.attention_s},
                        {"elementwise_s", s(Op::Elementwise), priced.elementwise_s},
                        {"comm_s", s(Op::Collective) + s(Op::Descriptor), priced.comm_s},
                        {"overhead_s", s(Op::Schedule) + s(Op::Sampling) + s(Op::Step), priced.overhead_s},
                        {"sum_of_steps_s", steps_e, steps_s},
                        {"(schedule_s)", s(Op::Schedule), std::nan("")},
                        {"(sampling_s)", s(Op::Sampling), std::nan("")},
                        {"(step_other_s)", s(Op::Step), std::nan("")},
                        {"(descriptor_s)", s(Op::Descriptor), std::nan("")}};
    }
    v.engine_plan_steps = steps_per_plan(er.metrics);
    v.simulated_plan_steps = steps_per_plan(sr.metrics);
    check_requests(er.metrics, sr.metrics, v);
    if (progress)
      progress(cat(p.label(), ": engine ", v.engine_wall_s, " s, simulator ", v.sim_wall_s, " s, median |error| ",
                   v.median_abs_error() * 100, "%"));
    out.push_back(std::move(v));
  }
  return out;
}

nlohmann::json to_json(const PlanValidation& v) {
  nlohmann::json m = nlohmann::json::array();
  for (const auto& x : v.metrics) {
    const double e = x.error();
    m.push_back({{"metric", x.name},
                 {"engine", x.engine},
                 {"simulated", x.simulated},
                 {"error", std::isnan(e) ? nlohmann::json(nullptr) : nlohmann::json(e)}});
  }
  auto steps = [](const std::vector<std::pair<std::string, int64_t>>& s) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, n] : s) j[k.empty() ? "default" : k] = n;
    return j;
  };
  nlohmann::json diag = nlohmann::json::array();
  for (const auto& x : v.diagnostics) diag.push_back({{"metric", x.name}, {"engine", x.engine}, {"simulated", x.simulated}});
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& x : v.op_breakdown)
    ops.push_back({{"metric", x.name},
                   {"engine", x.engine},
                   {"simulated", std::isnan(x.simulated) ? nlohmann::json(nullptr) : nlohmann::json(x.simulated)}});
  nlohmann::json j = {{"plan", v.plan.plan},
                      {"plans", v.plan.plans()},
                      {"diagnostics", diag},
                      {"policy", v.plan.policy},
                      {"backend", v.backend},
                      {"ranks", v.ranks},
                      {"threads_per_rank", v.threads_per_rank},
                      {"kv_blocks_per_rank", v.num_kv_blocks},
                      {"num_requests", v.num_requests},
                      {"same_requests", v.same_requests},
                      {"metrics", m},
                      {"median_abs_error", std::isnan(v.median_abs_error()) ? nlohmann::json(nullptr)
                                                                            : nlohmann::json(v.median_abs_error())},
                      {"max_abs_error", std::isnan(v.max_abs_error()) ? nlohmann::json(nullptr)
                                                                      : nlohmann::json(v.max_abs_error())},
                      {"engine_steps_per_plan", steps(v.engine_plan_steps)},
                      {"simulated_steps_per_plan", steps(v.simulated_plan_steps)},
                      {"engine_wall_s", v.engine_wall_s},
                      {"sim_wall_s", v.sim_wall_s}};
  if (!ops.empty()) j["op_breakdown"] = ops;
  if (v.shift_threshold >= 0) j["shift_threshold"] = v.shift_threshold;
  if (v.sidp_threshold >= 0) j["sidp_threshold"] = v.sidp_threshold;
  if (v.cpu_kv_bytes > 0) j["cpu_kv_bytes"] = v.cpu_kv_bytes;
  if (!v.same_requests) j["request_mismatch"] = v.request_mismatch;
  if (v.step_records >= 0) {
    j["step_records"] = v.step_records;
    j["step_records_identical"] = v.step_records_identical;
    if (!v.step_records_identical) j["step_record_mismatch"] = v.step_record_mismatch;
  }
  return j;
}

std::string to_text(const std::vector<PlanValidation>& all) {
  std::ostringstream os;
  char b[256];
  for (const auto& v : all) {
    os << "plan " << v.plan.label() << " (" << v.ranks << " rank(s), " << v.backend << ", " << v.threads_per_rank
       << " thread(s) per rank, " << v.num_kv_blocks << " KV blocks per rank";
    if (v.shift_threshold >= 0) os << ", shift threshold " << v.shift_threshold;
    if (v.sidp_threshold >= 0) os << ", SiDP threshold " << v.sidp_threshold;
    if (v.cpu_kv_bytes > 0) os << ", CPU KV tier " << v.cpu_kv_bytes << " bytes";
    os << "): " << v.num_requests << " requests, " << (v.same_requests ? "same on both sides" : v.request_mismatch)
       << "\n";
    std::snprintf(b, sizeof b, "  %-18s %14s %14s %9s\n", "metric", "engine", "simulated", "error");
    os << b;
    for (const auto& m : v.metrics) {
      std::snprintf(b, sizeof b, "  %-18s %14.3f %14.3f %8.1f%%\n", m.name.c_str(), m.engine, m.simulated,
                    m.error() * 100);
      os << b;
    }
    std::snprintf(b, sizeof b, "  median |error| %.1f%%, max |error| %.1f%%\n", v.median_abs_error() * 100,
                  v.max_abs_error() * 100);
    os << b;
    if (v.step_records >= 0)
      os << "  step records (the engine on the simulator's clock): " << v.step_records << ", "
         << (v.step_records_identical ? "identical" : "differ: " + v.step_record_mismatch) << "\n";
    for (const auto& m : v.diagnostics) {
      std::snprintf(b, sizeof b, "  (%-16s %14.3f %14.3f %8.1f%%)\n", m.name.c_str(), m.engine, m.simulated,
                    m.error() * 100);
      os << b;
    }
    if (!v.op_breakdown.empty()) os << "  by operator class (LOOM_OP_TIMING; world rank 0, seconds over the run):\n";
    for (const auto& m : v.op_breakdown) {
      std::snprintf(b, sizeof b, "    %-18s %12.4f %12.4f %8.1f%%\n", m.name.c_str(), m.engine, m.simulated,
                    m.error() * 100);
      os << b;
    }
  }
  return os.str();
}

}  // namespace loom::sim
