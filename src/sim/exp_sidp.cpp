// SiDP's experiments (../shared/papers/001; PAPERS-NOTES.md section 1): KV capacity under vLLM-style
// budgets (gpu_memory_utilization, PAPERS-NOTES 1.4.10), WaS/CaS step times over batch size and B_th
// (S11), the CaS ladder in the tail (Fig. 14) and the offline job's throughput with its
// shrinking-batch tail (abstract), the last two through the discrete-event simulator with the
// engine's sidp policy and price_sidp (sim/sidp_cost.h). Our copy of the paper lost almost every
// number (PAPERS-NOTES "[stripped]"): rows carry a paper value only where the text prints one or
// the public abstract states it (external). The workload assumptions and the bands the tests
// assert are in tests/sim/sidp_bands.h.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "sim/cost_model.h"
#include "sim/experiments.h"
#include "sim/hardware.h"
#include "sim/model_catalog.h"
#include "sim/sidp_cost.h"
#include "sim/simulator.h"
#include "engine/policy.h"
#include "engine/policy_registry.h"

namespace loom::sim {

namespace {

constexpr double kBf16 = 2.0;

struct Shapes {
  double attention = 0, ffn = 0, embed = 0;  // bytes (bf16) of the whole model
  double ffn_layer = 0;
  double kv_per_token = 0;  // bytes per token, all layers, all KV heads
};

Shapes shapes(const ModelConfig& c) {
  Shapes s;
  const double d = c.d_model, q = c.q_dim(), kv = c.kv_dim();
  s.ffn_layer = 3.0 * d * c.ffn_dim * kBf16;
  s.attention = c.n_layers * (d * q + 2 * d * kv + q * d) * kBf16;
  s.ffn = c.n_layers * s.ffn_layer;
  s.embed = double(c.vocab_size) * d * kBf16 * (c.tied_embeddings ? 1 : 2);
  s.kv_per_token = 2.0 * c.n_layers * kv * kBf16;
  return s;
}

// WaS cache slots of SiDP's plan (kSidpPlan below).
constexpr int kSidpSlots = 4;
// SiDP's plan: 4 WaS slots, "a small number" (4.2; issue 31: D - 1 = 7 slots cost 7% of a 70B
// model's KV budget), half of D (ASSUMPTION: the count is stripped; the CaS slots are "two"), so
// §4.2's peak shifting runs over 4-layer cycles, about two readers per owner at a time
// (sidp_layer_fetch_s).
const char* const kSidpPlan = "dp=8,weights=owner,slots=4";

// HBM as the paper's Table 1 prints it (H20 and H200 144 GB, B200 180 GB).
double table1_hbm(const std::string& gpu) { return gpu == "b200" ? 180e9 : 144e9; }

// KV tokens a node of 8 GPUs holds (all replicas), vLLM budget: util x HBM - weights - reserve.
// Plain DP x TP(t) x PP(p): a GPU holds 1/(t p) of the weights and of each token's KV (KV heads
// replicated when t > K). SiDP DP=D (TP=1): attention + embeddings + FFN/D + slots x one layer.
// Returns 0 when the weights do not fit.
double kv_tokens(const ModelConfig& c, double hbm, int tp, int pp, bool sidp, int dp, int slots,
                 double util = 0.9, double reserve = 2e9) {
  const Shapes s = shapes(c);
  const double model_parallel = double(tp) * pp;
  double weights;
  // SiDP with TP: ownership per TP group (PAPERS-NOTES 1.4.7), every piece split t ways.
  if (sidp) weights = (s.attention + s.embed + s.ffn / dp + slots * s.ffn_layer) / model_parallel;
  else weights = (s.attention + s.ffn + s.embed) / model_parallel;
  const double free = util * hbm - weights - reserve;
  if (free <= 0) return 0;
  const double kv_share = std::max(1.0, double(tp) / std::max(1, c.n_kv_heads));  // replicated KV heads
  // A replica's t x p GPUs together hold (t p free) / (kv x share) tokens; 8 / (t p) replicas.
  return 8.0 * free / (s.kv_per_token * kv_share);
}

}  // namespace

namespace {

CostModel gpu_model(const std::string& model, const std::string& gpu) {
  NodeSpec node = parse_node(gpu + "x8");
  node.gpu.hbm_bytes = table1_hbm(gpu);
  return CostModel(find_model(model), node);
}

ExperimentResult run_fig5() {
  ExperimentResult r;
  r.name = "sidp-fig5";
  r.title = "SiDP 5.2 / Fig. 5: KV token capacity of an 8-GPU H20 node (144 GB as Table 1), BF16, util 0.9";
  for (const std::string model : {"qwen3-32b", "llama-3.1-70b", "qwen2.5-72b"}) {
    const ModelConfig c = find_model(model);
    const double hbm = table1_hbm("h20");
    struct Cfg {
      std::string name;
      int tp, pp;
    };
    const Cfg cfgs[] = {{"dp8", 1, 1}, {"dp4tp2", 2, 1}, {"dp2tp4", 4, 1}, {"tp8", 8, 1}, {"tp4pp2", 4, 2}, {"tp2pp4", 2, 4}};
    double best = 0;
    for (const Cfg& g : cfgs) {
      const double k = kv_tokens(c, hbm, g.tp, g.pp, false, 8 / (g.tp * g.pp), 0);
      best = std::max(best, k);
      r.rows.push_back({"kv_tokens_" + model, g.name, k,
                        g.name == "dp8" && model != "qwen3-32b" ? std::optional<double>(0.0) : std::nullopt,
                        g.name == "dp8" && model != "qwen3-32b" ? "text: vLLM cannot sustain it at TP=1, DP=8"
                                                                : "plotted only"});
    }
    const double sidp = kv_tokens(c, hbm, 1, 1, true, 8, kSidpSlots);
    r.rows.push_back({"kv_tokens_" + model, "sidp-dp8", sidp, std::nullopt,
                      "text: SiDP supports [stripped] M KV tokens at TP=1, DP=8"});
    r.rows.push_back({"kv_ratio_" + model, "sidp/best", sidp / std::max(best, 1.0), std::nullopt,
                      "abstract: up to [stripped] (external: 1.8x)"});
  }
  r.notes.push_back(cat("SiDP: attention + embeddings replicated, FFN / 8, ", kSidpSlots,
                        " WaS slots of one FFN layer (4.2: \"a small number\"; sim/exp_sidp.cpp kSidpSlots)."));
  r.notes.push_back("Model shapes from the catalog (public configs); KV heads replicated when TP > K.");
  return r;
}

// WaS, CaS and plain DP per decode step of every replica at batch b and context `context`.
struct StepTimes {
  double dp_s = 0, was_s = 0, cas_s = 0;
};

StepTimes step_times(const CostModel& cm, int dp, int b, int context) {
  const std::vector<std::vector<SeqWork>> work(size_t(dp), std::vector<SeqWork>(size_t(b), SeqWork{1, context, true}));
  StepTimes t;
  t.dp_s = cm.price(Plan::make_tp(1), work.front()).total_s;
  const PricedPlan was = cm.prepare(Plan::parse(cat("dp=", dp, ",weights=owner,slots=", std::max(1, dp / 2))));
  t.was_s = price_sidp(cm, was, work, SidpVariant::Was).total_s;
  t.cas_s = price_sidp(cm, was, work, SidpVariant::CasV3).total_s;
  return t;
}

ExperimentResult run_fig11() {
  ExperimentResult r;
  r.name = "sidp-fig11";
  r.title = "SiDP 5.3 / Fig. 11: WaS vs CaS time per decode step over the per-replica batch (Qwen3-32B, H20 x8, DP=8, 4K context)";
  const CostModel cm = gpu_model("qwen3-32b", "h20");
  int crossover = -1;
  for (int b : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}) {
    const StepTimes t = step_times(cm, 8, b, 4096);
    r.rows.push_back({"step_ms_b" + std::to_string(b), "vllm-dp", t.dp_s * 1e3, std::nullopt, "plotted only"});
    r.rows.push_back({"step_ms_b" + std::to_string(b), "was", t.was_s * 1e3, std::nullopt, "plotted only"});
    r.rows.push_back({"step_ms_b" + std::to_string(b), "cas", t.cas_s * 1e3, std::nullopt, "plotted only"});
    if (crossover < 0 && t.was_s <= t.cas_s) crossover = b;
  }
  const Plan dp8 = Plan::parse(kSidpPlan);
  for (const std::string gpu : {"h20", "h200", "b200"}) {
    const SidpThreshold th = derive_sidp_threshold(gpu_model("qwen3-32b", gpu), dp8, 4096);
    r.rows.push_back({"b_th", gpu, double(th.threshold), std::nullopt, "text: threshold from offline profiling ([stripped])"});
    const SidpThreshold x = derive_sidp_crossover(gpu_model("qwen3-32b", gpu), dp8, 4096);
    r.rows.push_back({"policy_threshold", gpu, double(x.threshold), std::nullopt,
                      "the sidp policy's: the batch below which CaS is faster (issue 31)"});
  }
  r.rows.push_back({"crossover_batch", "was<=cas", double(crossover), std::nullopt, "text: [stripped]"});
  r.notes.push_back("price_sidp (sim/sidp_cost.h): WaS = each replica's layers waiting on its prefetcher (peak shifting, "
                    "lookahead 7, one NVLink read per layer); CaS = per layer the slowest replica's attention, each "
                    "non-owner's rows to the owner and back, and the owner's one GEMM chain over all 8b rows.");
  r.notes.push_back("B_th: the smallest b whose plain step hides fetching the 56 non-owned FFN layers (S11); the "
                    "policy switches at the crossover below it, where CaS is faster (policy_threshold).");
  return r;
}

// ---- the offline jobs (tests/sim/sidp_bands.h states their assumptions) ----

// vLLM 0.10.1's defaults for an offline job (the LLM class) on a GPU of >= 70 GiB that is not an
// A100 (vllm/engine/arg_utils.py, _set_default_args_v1): max_num_seqs 1024, max_num_batched_tokens
// 16384; 256 / 8192 otherwise. Every GPU of these experiments (H20, H200, B200) is of the first kind.
constexpr int kVllmMaxNumSeqs = 1024;
constexpr int kVllmMaxBatchedTokens = 16384;

// Requests of mean total length S (prompt ~S/4, output ~3S/4 with a 10% long tail), all at t = 0.
std::vector<TraceRequest> offline_job(int S, int64_t n, uint64_t seed = 14) {
  Rng rng(seed + uint64_t(S));
  const double p = S / 4.0, o = 0.65 * S;
  std::vector<TraceRequest> out;
  for (int64_t i = 0; i < n; ++i) {
    TraceRequest t;
    t.prompt_len = std::max(1, int(std::lround(p * (0.5 + rng.uniform_double()))));
    const double scale = rng.uniform_double() < 0.1 ? 2.5 : 1.0;  // the long tail (§3.2)
    t.output_len = std::max(2, int(std::lround(o * scale * (0.5 + rng.uniform_double()))));
    out.push_back(t);
  }
  return out;
}

// The mean final length (prompt + output) of offline_job(S, ...), for sizing.
double job_mean_len(int S) { return S / 4.0 + 0.65 * S * (0.9 + 0.1 * 2.5); }

// Sequences `plan` holds at once on `cm`'s node: its replicas times the fewer of max_num_seqs and
// what one replica's KV holds at the job's mean final length; 0 when the weights do not fit.
int64_t concurrency(const CostModel& cm, const std::string& plan, double mean_len) {
  try {
    std::vector<PricedPlan> resident;
    const Plan p = Plan::parse(plan);
    for (const Plan& q : policy_plans(p.weights == WeightSource::FetchFromOwner ? "sidp" : "fixed", {p}))
      resident.push_back(cm.prepare(q));
    const MemoryPlan mem = cm.memory(resident);
    const int64_t per_replica = std::min<int64_t>(kVllmMaxNumSeqs, int64_t(double(mem.kv_capacity_tokens) / mean_len));
    return int64_t(p.dp) * per_replica;
  } catch (const Error&) {
    return 0;
  }
}

struct JobRun {
  bool fits = false;
  double tok_s = 0, makespan_s = 0;
  int64_t concurrency = 0;  // sequences the plan holds at once (concurrency())
  // Fig. 15 (§5.5 counts engine iterations), per engine and the same way in both modes: a
  // replica's own WaS step is one iteration of its engine; a lockstep group step (CaS, or WaS
  // given back by the policy) is one iteration of every engine of the group, D in all (loom's
  // engine runs the group's descriptor on every rank, RankEngine::step; under CaS an idle replica
  // still serves its owned layers, S10).
  int64_t was_steps = 0, cas_steps = 0, b_th = -1;
  int64_t was_own_steps = 0, cas_group_steps = 0;  // own WaS steps of all replicas; CaS group steps
};

JobRun run_job(const CostModel& cm, const std::string& plan, const std::string& policy,
               const std::vector<TraceRequest>& trace, SimConfig cfg = {}) {
  cfg.plan = Plan::parse(plan);
  cfg.policy = policy;
  cfg.dp_mode = DpMode::Independent;  // vLLM replicas (SiDP: WaS replicas on their own, CaS in lockstep)
  cfg.max_num_seqs = kVllmMaxNumSeqs;
  cfg.max_tokens_per_step = kVllmMaxBatchedTokens;
  int longest = 0;
  double total = 0;
  for (const TraceRequest& t : trace) longest = std::max(longest, t.prompt_len + t.output_len), total += t.prompt_len + t.output_len;
  cfg.max_model_len = longest;
  JobRun j;
  j.concurrency = concurrency(cm, plan, trace.empty() ? 1.0 : total / double(trace.size()));
  SimResult res;
  try {
    res = Simulator(cm, cfg).run(trace);
  } catch (const Error&) {
    return j;  // the weights do not fit
  }
  j.fits = true;
  j.tok_s = res.total_tokens_per_s;
  j.makespan_s = res.makespan_s;
  j.b_th = res.policy_threshold;
  // PlanUse counts an own step or a group step as one step of its plan (the engine's PlanStats).
  int64_t was_plan = 0, cas_plan = 0;
  for (const PlanUse& u : res.plan_use) (u.config.find("sidp=cas") != std::string::npos ? cas_plan : was_plan) += u.steps;
  for (const auto& st : res.metrics.steps()) j.was_own_steps += st.lockstep ? 0 : 1;
  const int64_t D = cfg.plan.dp;
  j.cas_group_steps = cas_plan;
  j.cas_steps = D * cas_plan;
  j.was_steps = j.was_own_steps + D * (was_plan - j.was_own_steps);  // own + D x lockstep WaS group steps
  return j;
}

// The plain DP x TP plans the baselines take the best of (the first, on a tie).
const char* const kDpTpPlans[] = {"dp=8", "dp=4,tp=2", "dp=2,tp=4", "tp=8"};

// One job, several configurations on one node: the job is three times the most sequences any of
// them holds at once (sidp_bands.h), the configurations simulated concurrently.
struct Job {
  const CostModel* cm = nullptr;
  int S = 4096;
  std::vector<std::pair<std::string, std::string>> configs;  // (plan, policy)
  std::vector<TraceRequest> trace;
  std::vector<JobRun> runs;
};

void size_job(Job& j) {
  int64_t most = 1;
  for (const auto& [plan, policy] : j.configs) most = std::max(most, concurrency(*j.cm, plan, job_mean_len(j.S)));
  j.trace = offline_job(j.S, 3 * most);
}

void run_jobs(std::vector<Job>& jobs, const std::function<void(SimConfig&, size_t job, size_t config)>& tune = {}) {
  std::vector<std::pair<size_t, size_t>> tasks;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].trace.empty()) size_job(jobs[j]);
    jobs[j].runs.assign(jobs[j].configs.size(), JobRun{});
    for (size_t c = 0; c < jobs[j].configs.size(); ++c) tasks.push_back({j, c});
  }
  parallel_for_each_index(tasks.size(), [&](size_t i) {
    const auto [j, c] = tasks[i];
    SimConfig cfg;
    if (tune) tune(cfg, j, c);
    jobs[j].runs[c] = run_job(*jobs[j].cm, jobs[j].configs[c].first, jobs[j].configs[c].second, jobs[j].trace, cfg);
  });
}

// The best plain DP x TP run of a job (by tokens/s) and its plan.
std::pair<const JobRun*, std::string> best_dp_tp(const Job& j) {
  const JobRun* best = nullptr;
  std::string plan;
  for (size_t c = 0; c < j.configs.size(); ++c) {
    if (!is_default_policy(j.configs[c].second) || j.configs[c].first.find("weights=owner") != std::string::npos) continue;
    if (j.runs[c].fits && (!best || j.runs[c].tok_s > best->tok_s)) best = &j.runs[c], plan = j.configs[c].first;
  }
  return {best, plan};
}

const JobRun& run_of(const Job& j, const std::string& plan, const std::string& policy) {
  for (size_t c = 0; c < j.configs.size(); ++c)
    if (j.configs[c].first == plan && j.configs[c].second == policy) return j.runs[c];
  fail("no run ", plan, " / ", policy);
}

std::string s_name(int S) { return cat(S / 1024, "K"); }

// Fig. 14: the steps the sidp policy ran in CaS, priced under each rung of the ladder.
ExperimentResult run_fig14() {
  ExperimentResult r;
  r.name = "sidp-fig14";
  r.title = "SiDP 5.4 / Fig. 14: CaS optimisations in the tail (Qwen3-32B, H20 x8, DP=8, 4K job): FSDP, V1 async "
            "P2P, V2 + GEMM fusion, V3 + dummy skipping";
  const CostModel cm = gpu_model("qwen3-32b", "h20");
  const SidpVariant rungs[] = {SidpVariant::Fsdp, SidpVariant::CasV1, SidpVariant::CasV2, SidpVariant::CasV3};
  double tail[4] = {0, 0, 0, 0}, priced_cas = 0;
  int64_t steps = 0;
  double active = 0, rows = 0;
  SimConfig cfg;
  cfg.on_step = [&](const PricedPlan& pl, const std::vector<std::vector<SeqWork>>& work, const StepCost& c) {
    if (!pl.full.sidp_cas) return;
    ++steps;
    priced_cas += c.total_s;
    for (int i = 0; i < 4; ++i) tail[i] += price_sidp(cm, pl, work, rungs[i]).total_s;
    for (const auto& w : work)
      if (!w.empty()) active += 1, rows += double(w.size());
  };
  // The 4K job of sidp-mechanism (its configurations size it).
  Job job;
  job.cm = &cm;
  job.S = 4096;
  job.configs = {{kSidpPlan, "sidp"}, {"dp=8", "fixed"}};
  for (const char* p : kDpTpPlans) job.configs.push_back({p, "fixed"});
  size_job(job);
  const JobRun run = run_job(cm, kSidpPlan, "sidp", job.trace, cfg);
  const char* names[] = {"fsdp", "cas-v1", "cas-v2", "cas-v3"};
  const double paper_s[] = {33, 25, 19, 12};
  for (int i = 0; i < 4; ++i)
    r.rows.push_back({"tail_s", names[i], tail[i], std::nullopt,
                      cat("text: ", paper_s[i], " s (the tail's size is stripped: compare the ratios)")});
  auto ratio = [&](int a, int b) { return tail[b] > 0 ? tail[a] / tail[b] : 0.0; };
  r.rows.push_back({"speedup", "fsdp/v1", ratio(0, 1), 33.0 / 25.0, "text: 33 s -> 25 s"});
  r.rows.push_back({"speedup", "v1/v2", ratio(1, 2), 25.0 / 19.0, "text: 25 s -> 19 s"});
  r.rows.push_back({"speedup", "v2/v3", ratio(2, 3), 19.0 / 12.0, "text: 19 s -> 12 s"});
  r.rows.push_back({"speedup", "fsdp/v3", ratio(0, 3), 33.0 / 12.0, "text: 33 s -> 12 s"});
  r.rows.push_back({"cas_steps", "tail", double(steps), std::nullopt, "text: batch size [stripped]"});
  r.rows.push_back({"active_replicas", "mean", steps ? active / double(steps) : 0, std::nullopt, "not printed"});
  r.rows.push_back({"batch_per_active", "mean", active > 0 ? rows / active : 0, std::nullopt, "not printed"});
  r.rows.push_back({"cas_busy_s", "sim", priced_cas, std::nullopt, "the simulator's own CaS time (= cas-v3)"});
  r.notes.push_back(cat("The tail: the ", steps, " steps the sidp policy (threshold ", run.b_th, ") ran in CaS in the 4K job of ",
                        job.trace.size(), " requests (sidp-mechanism's; sidp_bands.h)."));
  r.notes.push_back("FSDP: each layer's FFN all-gathered over the 8 GPUs on every rank (dummies too), not overlapped; "
                    "V1: rows to the owner, one GEMM chain per sender, dummies send one row; V2: one fused GEMM chain; "
                    "V3: dummies send nothing (S10). The senders' copies to an owner run at once (S9).");
  return r;
}

// The KV capacity rows of the abstract (arithmetic, PAPERS-NOTES 1.4.10): SiDP at the same DP x TP
// as plain DP (ownership per TP group, 1.4.7).
void add_kv_rows(ExperimentResult& r) {
  for (const std::string gpu : {"h20", "h200", "b200"})
    for (const std::string model : {"qwen3-32b", "llama-3.1-70b", "qwen2.5-72b"}) {
      const ModelConfig c = find_model(model);
      const double hbm = table1_hbm(gpu);
      double best = 0;
      std::string at;
      for (int tp : {2, 4}) {  // configurations where plain DP x TP fits
        const int dp = 8 / tp;
        const double plain = kv_tokens(c, hbm, tp, 1, false, dp, 0);
        const double sidp = kv_tokens(c, hbm, tp, 1, true, dp, std::min(dp - 1, kSidpSlots));
        if (plain > 0 && sidp / plain > best) best = sidp / plain, at = cat("dp", dp, "tp", tp);
      }
      r.rows.push_back({"kv_capacity_x", gpu + ":" + model + ":" + at, best, 1.8, "external (arXiv abstract): up to 1.8x"});
    }
  r.notes.push_back("KV rows: SiDP at the same DP x TP as plain DP (ownership per TP group, PAPERS-NOTES 1.4.7), "
                    "arithmetic only; at TP=1, DP=8 plain DP does not fit the 70B models (sidp-fig5).");
}

ExperimentResult run_kv() {
  ExperimentResult r;
  r.name = "sidp-kv";
  r.title = "SiDP abstract: KV capacity of SiDP against plain DP at the same DP x TP (8 GPUs, util 0.9)";
  add_kv_rows(r);
  return r;
}

// The abstract's throughput (REPORTED, not gated: sidp_bands.h says why a roofline cannot put SiDP
// dp8 above TP4/TP8): on each GPU and model, the 4K job against the best DP+TP.
ExperimentResult run_headline() {
  ExperimentResult r;
  r.name = "sidp-headline";
  r.title = "SiDP abstract: KV capacity (same DP x TP) and 4K offline-job throughput (vs the best DP+TP) on 8 GPUs, "
            "util 0.9, vLLM 0.10.1 defaults";
  add_kv_rows(r);
  std::vector<CostModel> models;
  std::vector<std::string> keys;
  for (const std::string gpu : {"h20", "h200", "b200"})
    for (const std::string model : {"qwen3-32b", "llama-3.1-70b", "qwen2.5-72b"}) models.push_back(gpu_model(model, gpu)), keys.push_back(gpu + ":" + model);
  std::vector<Job> jobs(models.size());
  for (size_t i = 0; i < models.size(); ++i) {
    jobs[i].cm = &models[i];
    jobs[i].configs = {{kSidpPlan, "sidp"}};
    for (const char* p : kDpTpPlans) jobs[i].configs.push_back({p, "fixed"});
  }
  run_jobs(jobs);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto [base, plan] = best_dp_tp(jobs[i]);
    const JobRun& s = jobs[i].runs[0];
    const double b = base ? base->tok_s : 0;
    r.rows.push_back({"tok_s_best_dp_tp", keys[i] + ":" + plan, b, std::nullopt, "plotted only"});
    r.rows.push_back({"tok_s_sidp", keys[i], s.tok_s, std::nullopt, "plotted only"});
    r.rows.push_back({"throughput_x", keys[i], b > 0 ? s.tok_s / b : 0, 1.5,
                      "external (arXiv abstract): up to 1.5x (reported, not gated: sidp_bands.h)"});
    r.rows.push_back({"requests", keys[i], double(jobs[i].trace.size()), std::nullopt, "3 x the most sequences held at once"});
    r.rows.push_back({"concurrency_sidp", keys[i], double(s.concurrency), std::nullopt, "sequences SiDP holds at once"});
    if (base) r.rows.push_back({"concurrency_best_dp_tp", keys[i], double(base->concurrency), std::nullopt, "sequences held at once"});
  }
  r.notes.push_back("Throughput: the 4K job of sidp_bands.h (all at t = 0, three times the most sequences any "
                    "configuration holds), total tokens / makespan; the best of dp8 / dp4tp2 / dp2tp4 / tp8 as "
                    "independent vLLM 0.10.1 replicas (max_num_seqs 1024, 16384 batched tokens) against "
                    "dp=8,weights=owner under the sidp policy.");
  r.notes.push_back("Why not gated (tests/sim/sidp_bands.h): SiDP dp8 holds less KV than dp2tp4 on these nodes and "
                    "reads every non-owned FFN layer over NVLink on top of its own HBM reads; a roofline prices no "
                    "cost that would put it above TP4/TP8.");
  return r;
}

// Mechanisms the text prints (sidp_bands.h), on H20: SiDP against plain DP at equal DP x TP over
// S = 1K, 2K, 4K (Qwen3-32B, the one model plain DP=8 fits), SiDP against the best DP+TP for the
// three models at 4K, and Figs. 13 / 15 on the 4K Qwen3-32B job.
ExperimentResult run_mechanism() {
  ExperimentResult r;
  r.name = "sidp-mechanism";
  r.title = "SiDP 5.2 / 5.4 mechanisms on H20 x8 (util 0.9, vLLM 0.10.1 defaults): SiDP vs plain DP over S, vs the "
            "best DP+TP over model size, CaS on/off and iterations per mode";
  std::vector<CostModel> models = {gpu_model("qwen3-32b", "h20"), gpu_model("llama-3.1-70b", "h20"),
                                   gpu_model("qwen2.5-72b", "h20")};
  std::vector<Job> jobs;
  for (int S : {1024, 2048, 4096}) {
    Job j;
    j.cm = &models[0];
    j.S = S;
    j.configs = {{kSidpPlan, "sidp"}, {"dp=8", "fixed"}};
    if (S == 4096) {
      for (const char* p : kDpTpPlans)
        if (std::string(p) != "dp=8") j.configs.push_back({p, "fixed"});
      j.configs.push_back({kSidpPlan, "sidp:was"});
    }
    jobs.push_back(j);
  }
  for (size_t m = 1; m < models.size(); ++m) {
    Job j;
    j.cm = &models[m];
    j.S = 4096;
    j.configs = {{kSidpPlan, "sidp"}};
    for (const char* p : kDpTpPlans) j.configs.push_back({p, "fixed"});
    jobs.push_back(j);
  }
  run_jobs(jobs);
  for (size_t k = 0; k < 3; ++k) {
    const Job& j = jobs[k];
    const std::string at = "qwen3-32b@" + s_name(j.S);
    const JobRun &s = run_of(j, kSidpPlan, "sidp"), &dp = run_of(j, "dp=8", "fixed");
    r.rows.push_back({"tok_s", at + ":sidp", s.tok_s, std::nullopt, "plotted only"});
    r.rows.push_back({"tok_s", at + ":dp=8", dp.tok_s, std::nullopt, "plotted only"});
    r.rows.push_back({"gain_vs_dp", at, dp.tok_s > 0 ? s.tok_s / dp.tok_s : 0, std::nullopt,
                      "5.2: SiDP above DP at equal DP x TP when DP is KV-bound; closely matches at 1K"});
    r.rows.push_back({"dp_kv_bound", at, dp.concurrency < 8 * kVllmMaxNumSeqs ? 1.0 : 0.0, std::nullopt,
                      cat("plain dp=8 holds ", dp.concurrency, " sequences at once (max_num_seqs 8 x 1024)")});
    r.rows.push_back({"concurrency", at + ":sidp", double(s.concurrency), std::nullopt, "sequences held at once"});
    r.rows.push_back({"concurrency", at + ":dp=8", double(dp.concurrency), std::nullopt, "sequences held at once"});
    r.rows.push_back({"requests", at, double(j.trace.size()), std::nullopt, "3 x the most sequences held at once"});
  }
  const std::string names[] = {"qwen3-32b", "llama-3.1-70b", "qwen2.5-72b"};
  for (size_t m = 0; m < 3; ++m) {
    const Job& j = jobs[m == 0 ? 2 : 2 + m];
    const auto [base, plan] = best_dp_tp(j);
    const JobRun& s = run_of(j, kSidpPlan, "sidp");
    r.rows.push_back({"gain_vs_best_dp_tp", names[m] + "@4K", base ? s.tok_s / base->tok_s : 0, std::nullopt,
                      cat("5.2: the benefit grows with model size (best DP+TP: ", plan, ")")});
  }
  // Figs. 13 and 15 on the 4K Qwen3-32B job.
  const Job& j4 = jobs[2];
  const JobRun &s4 = run_of(j4, kSidpPlan, "sidp"), &was_only = run_of(j4, kSidpPlan, "sidp:was");
  r.rows.push_back({"tok_s_sidp_was_only", "qwen3-32b@4K", was_only.tok_s, std::nullopt, "Fig. 13: WaS only"});
  r.rows.push_back({"cas_over_was_only", "qwen3-32b@4K", was_only.tok_s > 0 ? s4.tok_s / was_only.tok_s : 0,
                    std::nullopt, "Fig. 13: enabling CaS never reduces throughput against WaS only"});
  r.rows.push_back({"sidp_steps_was", "qwen3-32b@4K", double(s4.was_steps), std::nullopt, "Fig. 15: most iterations in WaS"});
  r.rows.push_back({"sidp_steps_cas", "qwen3-32b@4K", double(s4.cas_steps), std::nullopt, "Fig. 15"});
  r.rows.push_back({"sidp_own_steps_was", "qwen3-32b@4K", double(s4.was_own_steps), std::nullopt, "not printed"});
  r.rows.push_back({"sidp_group_steps_cas", "qwen3-32b@4K", double(s4.cas_group_steps), std::nullopt, "not printed"});
  r.rows.push_back({"sidp_threshold", "qwen3-32b@4K", double(s4.b_th), std::nullopt, "[stripped]"});
  r.notes.push_back("Jobs of sidp_bands.h: mean total length S, all at t = 0, three times the most sequences any "
                    "compared configuration holds; independent vLLM 0.10.1 replicas (max_num_seqs 1024, 16384 "
                    "batched tokens); SiDP dp=8,weights=owner under the sidp policy.");
  return r;
}

// Fig. 9 (§5.3): iteration time of a decode step of B sequences at context 4K on one GPU (plain
// TP=1, Qwen3-32B) against fetching ALL FFN weights once over NVLink ("pessimistic", §5.3).
ExperimentResult run_fig9() {
  ExperimentResult r;
  r.name = "sidp-fig9";
  r.title = "SiDP 5.3 / Fig. 9: decode iteration time over batch vs fetching all FFN weights once (Qwen3-32B, 4K)";
  for (const std::string gpu : {"h20", "h200", "b200"}) {
    const CostModel cm = gpu_model("qwen3-32b", gpu);
    const PricedPlan one = cm.prepare(Plan::make_tp(1));
    // One layer's FFN as one one-sided read (sidp_layer_fetch_s with one reader), every layer.
    const double fetch = cm.model().n_layers *
                         cm.collective_s(Collective::Get, sidp_ffn_layer_bytes(cm), 2, std::min(2, cm.node().gpus_per_node));
    auto iter = [&](int b) { return cm.price(one, std::vector<SeqWork>(size_t(b), SeqWork{1, 4096, true})).total_s; };
    r.rows.push_back({"fetch_all_ffn_ms", gpu, fetch * 1e3, std::nullopt, "plotted only (Fetch-1 NVLink 4, Fetch-2 NVLink 5)"});
    for (int b : {64, 128, 256, 512})
      r.rows.push_back({"iter_ms_b" + std::to_string(b), gpu, iter(b) * 1e3, std::nullopt, "plotted only"});
    int cross = -1;
    for (int b = 1; b <= 4096 && cross < 0; ++b)
      if (iter(b) >= fetch) cross = b;
    r.rows.push_back({"cross_b", gpu, double(cross), std::nullopt,
                      "text: the batch at which the iteration first exceeds the fetch ([stripped]; -1: none up to 4096)"});
  }
  r.notes.push_back("Fetch: every layer's FFN (gate, up, down) as one one-sided read over the GPU's NVLink each way "
                    "(the cost model's get: send/recv latency + bytes / link x efficiency), the paper's pessimistic "
                    "'all FFN weights once' (SiDP fetches only the non-owned 7/8).");
  return r;
}

// Fig. 10 (§5.3): the 4K Qwen3-32B job on H20 at DP=4 and DP=8 with and without peak shifting.
ExperimentResult run_fig10() {
  ExperimentResult r;
  r.name = "sidp-fig10";
  r.title = "SiDP 5.3 / Fig. 10: peak shifting's throughput gain at DP=4 and DP=8 (Qwen3-32B, H20, 4K job)";
  const CostModel cm = gpu_model("qwen3-32b", "h20");
  std::vector<Job> jobs(1);
  jobs[0].cm = &cm;
  jobs[0].configs = {{"dp=4,weights=owner,slots=2", "sidp"}, {"dp=4,weights=owner,slots=2", "sidp"}, {kSidpPlan, "sidp"}, {kSidpPlan, "sidp"}};
  size_job(jobs[0]);
  // Every odd configuration without peak shifting (CostModelOptions::sidp_peak_shifting); both
  // DP degrees on the one 8-GPU job (DP=4 uses half the node, as the paper's scaling plot).
  std::vector<CostModel> off;
  CostModelOptions o = cm.options();
  o.sidp_peak_shifting = false;
  off.emplace_back(cm.model(), cm.node(), o, cm.calibration());
  std::vector<JobRun> runs(4);
  parallel_for_each_index(4, [&](size_t i) {
    runs[i] = run_job(i % 2 ? off[0] : cm, jobs[0].configs[i].first, "sidp", jobs[0].trace);
  });
  for (int k = 0; k < 2; ++k) {
    const std::string dp = k == 0 ? "dp4" : "dp8";
    r.rows.push_back({"tok_s", dp + ":peak-shifting", runs[size_t(2 * k)].tok_s, std::nullopt, "plotted only"});
    r.rows.push_back({"tok_s", dp + ":layer-order", runs[size_t(2 * k + 1)].tok_s, std::nullopt, "plotted only"});
    r.rows.push_back({"peak_shifting_gain", dp, runs[size_t(2 * k + 1)].tok_s > 0 ? runs[size_t(2 * k)].tok_s / runs[size_t(2 * k + 1)].tok_s : 0,
                      std::nullopt, k == 0 ? "text: at DP=4 roughly [stripped]" : "text: at DP=8 grows to [stripped]"});
  }
  r.notes.push_back("Without peak shifting every non-owner reads a layer from its owner at the same time: each read "
                    "gets 1/(D-1) of the owner's link (the incast of 4.2).");
  return r;
}

// Fig. 12 (§5.3): Llama-3.1-70B and Qwen2.5-72B on H20 with ~80 GB a GPU, S = 1K, 2K, 4K, the best
// DP+TP against SiDP.
constexpr double kFig12GpuBytes = 80e9;  // "about [stripped] GB per GPU, roughly matching common A100/H100 deployments"
ExperimentResult run_fig12() {
  ExperimentResult r;
  r.name = "sidp-fig12";
  r.title = "SiDP 5.3 / Fig. 12: tight memory (80 GB a GPU of H20), Llama-3.1-70B and Qwen2.5-72B, best DP+TP vs SiDP";
  std::vector<CostModel> models;
  for (const std::string model : {"llama-3.1-70b", "qwen2.5-72b"}) {
    NodeSpec node = parse_node("h20x8");
    node.gpu.hbm_bytes = table1_hbm("h20");
    CostModelOptions o;
    o.memory_utilization = kFig12GpuBytes / node.gpu.hbm_bytes;
    models.emplace_back(find_model(model), node, o);
  }
  std::vector<Job> jobs;
  std::vector<std::string> keys;
  for (size_t m = 0; m < models.size(); ++m)
    for (int S : {1024, 2048, 4096}) {
      Job j;
      j.cm = &models[m];
      j.S = S;
      j.configs = {{kSidpPlan, "sidp"}, {"dp=4,tp=2", "fixed"}, {"dp=2,tp=4", "fixed"}};
      jobs.push_back(j);
      keys.push_back(cat(m == 0 ? "llama-3.1-70b" : "qwen2.5-72b", "@", s_name(S)));
    }
  run_jobs(jobs);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto [base, plan] = best_dp_tp(jobs[i]);
    const JobRun& s = jobs[i].runs[0];
    r.rows.push_back({"gain_vs_best_dp_tp", keys[i], base && s.fits ? s.tok_s / base->tok_s : 0, std::nullopt,
                      cat("text: SiDP improves throughput by [stripped] across all sequence lengths (best DP+TP: ", plan, ")")});
    r.rows.push_back({"tok_s_sidp", keys[i], s.tok_s, std::nullopt, "plotted only"});
  }
  r.notes.push_back("Memory: utilization 80/144 of the H20's 144 GB (Table 1), i.e. 80 GB a GPU (the paper: "
                    "\"roughly matching common A100/H100 deployments\"); DP+TP: dp4tp2, dp2tp4 (pure TP and TP+PP "
                    "omitted, as the paper does; dp8 does not fit).");
  return r;
}

}  // namespace

std::vector<Experiment> sidp_experiments() {
  return {
      {"sidp-fig5", "SiDP 5.2 / Fig. 5: KV token capacity, DP+TP / TP+PP vs SiDP DP=8 (H20, three models)", run_fig5},
      {"sidp-fig9", "SiDP 5.3 / Fig. 9: decode iteration time vs fetching all FFN weights (H20, H200, B200)", run_fig9},
      {"sidp-fig10", "SiDP 5.3 / Fig. 10: peak shifting's throughput gain at DP=4 and DP=8 (H20)", run_fig10},
      {"sidp-fig11", "SiDP 5.3 / Fig. 11: WaS vs CaS step time over batch; B_th on H20/H200/B200", run_fig11},
      {"sidp-fig12", "SiDP 5.3 / Fig. 12: tight memory (80 GB a GPU), 70B-class models, best DP+TP vs SiDP", run_fig12},
      {"sidp-fig14", "SiDP 5.4 / Fig. 14: the CaS ladder in the tail (FSDP, V1, V2, V3; H20)", run_fig14},
      {"sidp-kv", "SiDP abstract: KV capacity at the same DP x TP (arithmetic)", run_kv},
      {"sidp-mechanism", "SiDP 5.2 / 5.4 mechanisms on H20: vs plain DP over S, vs best DP+TP over model size, Figs. 13/15",
       run_mechanism},
      {"sidp-headline", "SiDP abstract: KV capacity and 4K offline throughput vs the best DP+TP (H20/H200/B200; reported)",
       run_headline},
  };
}

}  // namespace loom::sim
