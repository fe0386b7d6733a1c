// Nitsum (paper file 002) in the simulator: a pool of GPUs serving one model as several
// instances, driven by the SAME cluster scheduler code the engine uses (src/cluster: planner,
// global routing, local queues), with step times from the cost model. Experiments nitsum-fig7,
// nitsum-fig14, nitsum-goodput(-h100) and nitsum-planner (experiments.cpp registers them).
// LOOM_NITSUM_DEBUG=1 prints the profile table and per-configuration SLO counts to stderr.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cluster/global_scheduler.h"
#include "sim/cost_model.h"
#include "sim/experiments.h"

namespace loom::sim {

// DeepSeek-R1-Distill-Qwen-14B (the shape of Qwen2.5-14B, its published config.json: hidden
// 5120, 48 layers, 40 heads, 8 KV heads, head_dim 128, FFN 13824, vocab 152064).
ModelConfig nitsum_qwen14b();

// Bytes of one token's KV over all layers and KV heads at `kv_bytes` per element.
double kv_bytes_per_token_all(const ModelConfig& m, double kv_bytes = 2);

// Nitsum 3.2.2: moving `bytes` of KV between two GPUs.
//  - paged: one copy call per fragment (cudaMemcpyAsync per page: SGLang's default page of one
//    token, one fragment per (token, layer, K or V)), each `per_copy_s` (ASSUMPTION: 3 us, the
//    order of one small cudaMemcpyAsync), plus the bytes at link speed;
//  - aggregated: pack into one of two `buffer_bytes` buffers at memory bandwidth while the other
//    is on the wire (double buffering), unpack on arrival.
double kv_move_paged_s(const CostModel& cm, double bytes, double fragments, double per_copy_s = 3e-6);
double kv_move_aggregated_s(const CostModel& cm, double bytes, double buffer_bytes = 16.0 * (1 << 20));

// One request of a tiered trace.
struct TieredRequest {
  double arrival_s = 0;
  int prompt_len = 0, output_len = 0;
  int tier = 0;
};

// The profile table of Nitsum 3.3.1 from the cost model: for every (tier, TP degree) P_max, D_max,
// the colocated rate and their SLO-safe batches at the tier's mean prompt / output lengths
// (`lengths[tier]` = {prompt, output}). `cost_model(tp)` gives the cost model pricing TP(tp) (a
// GPU node, or a `loom profile` folder for CPU ranks). Prefill: the largest batch whose step fits
// half the TTFT (the other half for queueing; ASSUMPTION) or one prompt within the TTFT; decode:
// the largest batch whose step fits the TPOT at the mean context; colocated: prefill stalls
// stretch decode steps (TPOT_eff = step / (1 - rate * prefill_time)). Degrees the model cannot
// run (heads, memory) are left out of the table.
// P_max is read as a LOAD (3.3.1: "the maximum prefill ... throughput" that still meets the TTFT
// SLO): the Poisson arrival rate at which a fraction `ttft_quantile` of the prompts still meet the
// TTFT (4.1.2: Nitsum's "p90 TTFT and TPOT are still below the SLOs"), with the waiting time of an
// M/D/1 queue of the batch's per-request service time approximated by its exponential tail
// (Kingman: P(W > w) ~ rho exp(-2 (1 - rho) w / s)). 0: the raw batch throughput (no queueing).
// nitsum_profile_table's default is 0, the literal reading of 3.3.1 (P_max looked up in
// microbenchmark profiles "like those in Figure 2", TTFT per batch, no load); 0.9 is the
// alternative the experiments also print (rows p90plan-*).
double prefill_rate_at_quantile(double batch_s, int batch, double ttft_s, double quantile);

cluster::ProfileTable nitsum_profile_table(const std::function<CostModel(int tp)>& cost_model,
                                           const cluster::SloTiers& tiers,
                                           const std::vector<std::pair<double, double>>& lengths,
                                           const std::vector<int>& tp_degrees, double ttft_quantile = 0);

enum class SwitchMechanism {
  Nitsum,  // weights as views of a full copy (nothing loads), aggregated double-buffered KV
  Naive,   // the new TP shard reloaded from host memory, page-by-page KV copies
};

struct ClusterSimConfig {
  int num_ranks = 8;
  cluster::SchedulerOptions sched;
  // Installed at start; with sched.dynamic = false it stays (static baselines). Empty: the
  // planner's plan for the trace's mean rates.
  std::vector<cluster::InstanceSpec> static_instances;
  SwitchMechanism mechanism = SwitchMechanism::Nitsum;
  bool defer_late = false;    // a waiting request past its TTFT goes behind the others (Nitsum 4.2.1 step 3)
  int token_budget = 8192;    // prompt tokens per prefill step
  // Naive switch (Nitsum 3.2.1): every regrouped instance restarts its TP engine before serving.
  // The paper: "For Qwen-14B, reconfiguration can take about 30 seconds, excluding profiling steps
  // such as CUDA Graph capture and network initialization", weights cached in CPU memory. It is
  // an engine restart, not a PCIe copy (29.5 GB over PCIe Gen4 would take ~1.2 s), so the time is
  // this many seconds per byte of the full bf16 model: 30 s / Qwen-14B's bytes (for Qwen-14B
  // exactly the paper's 30 s; other models scaled by their weight bytes, ASSUMPTION). The 10 s to
  // 1 min+ of graph capture the paper also reports is left out (a lower bound).
  double naive_reload_s_per_byte = -1;  // < 0: the paper's 30 s for Qwen-14B, per byte
  double drain_s = 30;        // simulate this long after the last arrival
};

struct ClusterSimResult {
  std::vector<double> goodput_rps;  // per tier: requests meeting both targets / trace duration
  std::vector<int64_t> requests, met;
  double goodput_total_rps = 0;
  double duration_s = 0;
  int64_t windows = 0, reconfigurations = 0, ranks_regrouped = 0;
  double switch_pause_s = 0;   // summed pause of the regrouped instances
  double mean_plan_ms = 0;     // host time of plan_cluster per window
  int64_t unfinished = 0;
  std::vector<int64_t> ttft_met, tpot_met;  // per tier: requests meeting each target alone
  std::vector<std::vector<double>> ttft_s, tpot_s;  // per tier: every finished request's (Fig. 11)
  std::string first_plan;
  std::string last_plan;      // the last window's instances (ClusterPlan::to_string)
};

ClusterSimResult simulate_cluster(const std::function<CostModel(int tp)>& cost_model, const cluster::SloTiers& tiers,
                                  const cluster::ProfileTable& table, const std::vector<TieredRequest>& trace,
                                  const ClusterSimConfig& config);

ExperimentResult run_nitsum_fig7();
ExperimentResult run_nitsum_fig14();
ExperimentResult run_nitsum_goodput();
ExperimentResult run_nitsum_goodput_h100();
ExperimentResult run_nitsum_planner();
// Issue 31: on ServeGen (engine/trace.h read_servegen) and the paper's other figures.
ExperimentResult run_nitsum_fig14_servegen();
ExperimentResult run_nitsum_goodput_servegen();  // Fig. 10 and Fig. 11
ExperimentResult run_nitsum_table1();
ExperimentResult run_nitsum_fig2();
ExperimentResult run_nitsum_fig3();
ExperimentResult run_nitsum_slo_scale();
ExperimentResult run_nitsum_three_tier();
ExperimentResult run_nitsum_fig17();

// Table 1 (4): the decode step of a setup fitted to both its rows (batch 1 and batch 128 at the
// given context), with the memory efficiency `eff` of the weight and KV reads (GEMM mem_eff and
// attention mem_eff together) and the per-step overhead `overhead_s` free: the b = 1 row fixes the
// overhead for each efficiency, the b = 128 row picks the efficiency (bisection on the model's own
// step). `cm` prices TP(tp) of the setup. `with` gives the calibration at a given (eff, overhead).
struct Table1Fit {
  double eff = 0, overhead_s = 0;
  bool exact = false;  // both rows met (else the closest the efficiency range 0.05-1 gives)
  double b128_at_full_bw_s = 0;  // the b = 128 step with eff = 1 and the overhead the b = 1 row then needs
};
Table1Fit fit_table1(const ModelConfig& model, const std::string& node, int tp, double tpot_b1_s, double tpot_b128_s,
                     int context);
// A GPU calibration with `fit`'s efficiency and overhead in place of the A100 fit's.
Calibration table1_calibration(const Table1Fit& fit);

}  // namespace loom::sim
