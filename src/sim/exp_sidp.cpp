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
    const double sidp = kv_tokens(c, hbm, 1, 1, true, 8, 7);
    r.rows.push_back({"kv_tokens_" + model, "sidp-dp8", sidp, std::nullopt,
                      "text: SiDP supports [stripped] M KV tokens at TP=1, DP=8"});
    r.rows.push_back({"kv_ratio_" + model, "sidp/best", sidp / std::max(best, 1.0), std::nullopt,
                      "abstract: up to [stripped] (external: 1.8x)"});
  }
  r.notes.push_back("SiDP: attention + embeddings replicated, FFN / 8, 7 WaS slots of one FFN layer (PAPERS-NOTES 1.4.3).");
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
  const PricedPlan was = cm.prepare(Plan::parse(cat("dp=", dp, ",weights=owner")));
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
  const Plan dp8 = Plan::parse("dp=8,weights=owner");
  for (const std::string gpu : {"h20", "h200", "b200"}) {
    const SidpThreshold th = derive_sidp_threshold(gpu_model("qwen3-32b", gpu), dp8, 4096);
    r.rows.push_back({"b_th", gpu, double(th.threshold), std::nullopt, "text: threshold from offline profiling ([stripped])"});
  }
  r.rows.push_back({"crossover_batch", "was<=cas", double(crossover), std::nullopt, "text: [stripped]"});
  r.notes.push_back("price_sidp (sim/sidp_cost.h): WaS = each replica's layers waiting on its prefetcher (peak shifting, "
                    "lookahead 7, one NVLink read per layer); CaS = per layer the slowest replica's attention, each "
                    "non-owner's rows to the owner and back, and the owner's one GEMM chain over all 8b rows.");
  r.notes.push_back("B_th: the smallest b whose plain step hides fetching the 56 non-owned FFN layers (S11).");
  return r;
}

// ---- the offline job (tests/sim/sidp_bands.h states its assumptions) ----

constexpr int kJobRequests = 1024;

std::vector<TraceRequest> offline_job() {
  Rng rng(14);
  std::vector<TraceRequest> out;
  for (int i = 0; i < kJobRequests; ++i) {
    TraceRequest t;
    t.prompt_len = 768 + int(rng.below(513));
    // The long tail (§3.2): 1 request in 10 is about three times as long.
    t.output_len = rng.uniform_double() < 0.1 ? 6144 + int(rng.below(2049)) : 1536 + int(rng.below(1537));
    out.push_back(t);
  }
  return out;
}

struct JobRun {
  bool fits = false;
  double tok_s = 0, makespan_s = 0;
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
  int longest = 0;
  for (const TraceRequest& t : trace) longest = std::max(longest, t.prompt_len + t.output_len);
  cfg.max_model_len = longest;
  JobRun j;
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

struct Best {
  double tok_s = 0;
  std::string plan;
};

// The plain DP x TP plans the headline's baseline takes the best of (the first, on a tie).
const char* const kDpTpPlans[] = {"dp=8", "dp=4,tp=2", "dp=2,tp=4", "tp=8"};

// Fig. 14: the steps the sidp policy ran in CaS, priced under each rung of the ladder.
ExperimentResult run_fig14() {
  ExperimentResult r;
  r.name = "sidp-fig14";
  r.title = "SiDP 5.4 / Fig. 14: CaS optimisations in the tail (Qwen3-32B, H20 x8, DP=8): FSDP, V1 async P2P, "
            "V2 + GEMM fusion, V3 + dummy skipping";
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
  const JobRun job = run_job(cm, "dp=8,weights=owner", "sidp", offline_job(), cfg);
  const char* names[] = {"fsdp", "cas-v1", "cas-v2", "cas-v3"};
  const double paper_s[] = {33, 25, 19, 12};
  for (int i = 0; i < 4; ++i)
    r.rows.push_back({"tail_s", names[i], tail[i], std::nullopt,
                      cat("text: ", paper_s[i], " s (the tail's size is stripped: compare the ratios)")});
  r.rows.push_back({"speedup", "fsdp/v1", tail[0] / tail[1], 33.0 / 25.0, "text: 33 s -> 25 s"});
  r.rows.push_back({"speedup", "v1/v2", tail[1] / tail[2], 25.0 / 19.0, "text: 25 s -> 19 s"});
  r.rows.push_back({"speedup", "v2/v3", tail[2] / tail[3], 19.0 / 12.0, "text: 19 s -> 12 s"});
  r.rows.push_back({"speedup", "fsdp/v3", tail[0] / tail[3], 33.0 / 12.0, "text: 33 s -> 12 s"});
  r.rows.push_back({"cas_steps", "tail", double(steps), std::nullopt, "text: batch size [stripped]"});
  r.rows.push_back({"active_replicas", "mean", steps ? active / double(steps) : 0, std::nullopt, "not printed"});
  r.rows.push_back({"batch_per_active", "mean", active > 0 ? rows / active : 0, std::nullopt, "not printed"});
  r.rows.push_back({"cas_busy_s", "sim", priced_cas, std::nullopt, "the simulator's own CaS time (= cas-v3)"});
  r.notes.push_back(cat("The tail: the ", steps, " steps the sidp policy (B_th ", job.b_th,
                        ") ran in CaS in the sidp-headline job (1024 requests, S ~ 4K, 10% long outputs)."));
  r.notes.push_back("FSDP: each layer's FFN all-gathered over the 8 GPUs on every rank (dummies too), not overlapped; "
                    "V1: rows to the owner, one GEMM chain per sender, dummies send one row; V2: one fused GEMM chain; "
                    "V3: dummies send nothing (S10). The senders' copies to an owner run at once (S9).");
  return r;
}

ExperimentResult run_headline() {
  ExperimentResult r;
  r.name = "sidp-headline";
  r.title = "SiDP abstract: KV capacity (same DP x TP) and offline-job throughput (vs the best DP+TP) on 8 GPUs, util 0.9";
  const std::vector<TraceRequest> job = offline_job();
  for (const std::string gpu : {"h20", "h200", "b200"})
    for (const std::string model : {"qwen3-32b", "llama-3.1-70b", "qwen2.5-72b"}) {
      const ModelConfig c = find_model(model);
      const double hbm = table1_hbm(gpu);
      double best = 0;
      std::string at;
      for (int tp : {2, 4}) {  // configurations where plain DP x TP fits
        const int dp = 8 / tp;
        const double plain = kv_tokens(c, hbm, tp, 1, false, dp, 0);
        const double sidp = kv_tokens(c, hbm, tp, 1, true, dp, dp - 1);
        if (plain > 0 && sidp / plain > best) best = sidp / plain, at = cat("dp", dp, "tp", tp);
      }
      r.rows.push_back({"kv_capacity_x", gpu + ":" + model + ":" + at, best, 1.8, "external (arXiv abstract): up to 1.8x"});
    }
  // The nine (GPU, model) cells' simulations (each fixed DP x TP plan, the sidp policy, and WaS only
  // on H20 / Qwen3-32B) are independent and deterministic: simulated concurrently, one task each.
  struct Cell {
    Best base;
    JobRun sidp, was_only;
  };
  struct Task {
    size_t cell;
    std::string plan, policy;
  };
  std::vector<CostModel> models;
  std::vector<Task> tasks;
  for (const std::string gpu : {"h20", "h200", "b200"})
    for (const std::string model : {"qwen3-32b", "llama-3.1-70b", "qwen2.5-72b"}) {
      const size_t cell = models.size();
      models.push_back(gpu_model(model, gpu));
      tasks.push_back({cell, "dp=8,weights=owner", "sidp"});
      if (gpu == "h20" && model == "qwen3-32b") tasks.push_back({cell, "dp=8,weights=owner", "sidp:was"});
      for (const char* plan : kDpTpPlans) tasks.push_back({cell, plan, "fixed"});
    }
  std::vector<JobRun> runs(tasks.size());
  parallel_for_each_index(tasks.size(), [&](size_t i) {
    runs[i] = run_job(models[tasks[i].cell], tasks[i].plan, tasks[i].policy, job);
  });
  std::vector<Cell> cells(models.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    Cell& c = cells[tasks[i].cell];
    const JobRun& j = runs[i];
    if (tasks[i].policy == "sidp") c.sidp = j;
    else if (tasks[i].policy == "sidp:was") c.was_only = j;
    else if (j.fits && j.tok_s > c.base.tok_s) c.base = {j.tok_s, tasks[i].plan};
  }
  size_t next = 0;
  for (const std::string gpu : {"h20", "h200", "b200"})
    for (const std::string model : {"qwen3-32b", "llama-3.1-70b", "qwen2.5-72b"}) {
      const Cell& cell = cells[next++];
      const Best& base = cell.base;
      const JobRun& s = cell.sidp;
      const std::string key = gpu + ":" + model;
      r.rows.push_back({"tok_s_best_dp_tp", key + ":" + base.plan, base.tok_s, std::nullopt, "plotted only"});
      r.rows.push_back({"tok_s_sidp", key, s.tok_s, std::nullopt, "plotted only"});
      r.rows.push_back({"throughput_x", key, base.tok_s > 0 ? s.tok_s / base.tok_s : 0, 1.5,
                        "external (arXiv abstract): up to 1.5x"});
      r.rows.push_back({"sidp_steps_was", key, double(s.was_steps), std::nullopt, "Fig. 15: most iterations in WaS"});
      r.rows.push_back({"sidp_steps_cas", key, double(s.cas_steps), std::nullopt, "Fig. 15"});
      r.rows.push_back({"sidp_own_steps_was", key, double(s.was_own_steps), std::nullopt, "not printed"});
      r.rows.push_back({"sidp_group_steps_cas", key, double(s.cas_group_steps), std::nullopt, "not printed"});
      r.rows.push_back({"sidp_b_th", key, double(s.b_th), std::nullopt, "[stripped]"});
      if (gpu == "h20" && model == "qwen3-32b")
        r.rows.push_back({"tok_s_sidp_was_only", key, cell.was_only.tok_s, std::nullopt, "Fig. 13: WaS only"});
    }
  r.notes.push_back("KV rows: SiDP at the same DP x TP as plain DP (ownership per TP group, PAPERS-NOTES 1.4.7), "
                    "arithmetic only; at TP=1, DP=8 plain DP does not fit the 70B models (sidp-fig5).");
  r.notes.push_back("Throughput: 1024 requests at t=0, prompts 768-1280, outputs 1536-3072 (10%: 6144-8192), BF16; "
                    "the best of dp8 / dp4tp2 / dp2tp4 / tp8 as independent vLLM replicas against dp=8,weights=owner "
                    "under the sidp policy (WaS replicas step on their own, CaS in lockstep; B_th from the cost model); "
                    "total tokens / makespan. Fig. 15's steps are engine iterations: an own WaS step is one, a "
                    "lockstep group step one per engine (8).");
  r.notes.push_back("Below 1x by the mechanism, not the pricing (tests/sim/sidp_sim_test.cpp SidpHeadline."
                    "HandWorkedOperatingPoint, Llama-3.1-70B on H200): a WaS step reads 70 x 1.41 GB over NVLink, "
                    ">= 231.7 ms whatever the batch, against ~55 ms of compute at the 128 sequences a replica holds; "
                    "CaS runs 8 replicas' FFN on one owner per layer (>= 80 x 2.1 ms at 1024 rows); the baseline is "
                    "bounded by max_num_seqs, not KV, in this 1024-request job.");
  return r;
}

}  // namespace

std::vector<Experiment> sidp_experiments() {
  return {
      {"sidp-fig5", "SiDP 5.2 / Fig. 5: KV token capacity, DP+TP / TP+PP vs SiDP DP=8 (H20, three models)", run_fig5},
      {"sidp-fig11", "SiDP 5.3 / Fig. 11: WaS vs CaS step time over batch; B_th on H20/H200/B200", run_fig11},
      {"sidp-fig14", "SiDP 5.4 / Fig. 14: the CaS ladder in the tail (FSDP, V1, V2, V3; H20)", run_fig14},
      {"sidp-headline", "SiDP abstract: KV capacity and offline throughput vs the best DP+TP (H20/H200/B200)",
       run_headline},
  };
}

}  // namespace loom::sim
