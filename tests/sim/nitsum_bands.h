// Nitsum simulator figures (issue 15): the tolerance bands the tests assert. Committed before any
// change to the modelling in this branch. Honest note: nitsum-fig14 and nitsum-goodput existed on
// main before this file and their outputs had been seen (fig14: 0.02 0.00 3.25 3.56 14.69 2.04
// 16.73; goodput: see the issue-15 report); the band RULE is the project's standing one (the SiDP
// bands, tests/sim/sidp_bands.h), not chosen to fit those numbers, and no band is widened after.
// Paper: ../shared/papers/002; printed numbers only (PAPERS-NOTES.md section 2.2).
//
// Band rule for a ratio the paper prints: simulated / paper in [0.8, 1.25]; qualitative claims
// of the text are hard checks with the constants below.
//
// A band missed after honest modelling carries a KnownMiss with the measured value and the cause
// (tests/sim/paper_bands.h, issue 31; it was a DISABLED_ test before).
#pragma once

namespace loom::sim::nitsum_bands {

constexpr double kLow = 0.8, kHigh = 1.25;  // simulated / paper

inline bool in_band(double simulated, double paper) {
  return simulated >= kLow * paper && simulated <= kHigh * paper;
}

// "Collapse" / "drops to 0 goodput": below this fraction of the full Nitsum at the same point
// (the paper prints exactly 0; a simulator that keeps a handful of lucky requests is still a
// collapse).
constexpr double kCollapseFrac = 0.05;

// ---- Fig. 14 ablation (4.2.1; Qwen-14B, 8 H100, 70 req/s): 13.2, 0, 16.7, 17.2, 28.0, 0, 33.3.
constexpr double kStep1 = 13.2, kStep3 = 16.7, kStep4 = 17.2, kStep5 = 28.0, kStep7 = 33.3;
constexpr double kFullOverSched = kStep7 / kStep5;       // 1.19: efficient dynamic TP over static TP + scheduler
constexpr double kSchedOverPerTier = kStep5 / kStep4;    // 1.63: Nitsum's scheduler over per-tier partition
constexpr double kPerTierOverSloRule = kStep4 / kStep3;  // 1.03: "only a small gain"
constexpr double kSloRuleOverVanilla = kStep3 / kStep1;  // 1.27
constexpr double kFullOverVanilla = kStep7 / kStep1;     // 2.52
// Hard: step 2 (static P/D) and step 6 (naive dynamic TP) collapse (kCollapseFrac of step 7);
// step 7 is the highest of the ladder; step 5 above steps 1, 3 and 4.

// ---- Fig. 10 goodput vs rate (4.1.1; Llama-3.1-8B, 4 A100, Azure conv + code, Table 1 tiers).
// Plotted only; the text's claims as hard checks:
//  - "Nitsum is also the only system that has consistently increasing goodput as system load
//    increases": each rate's goodput >= kMonotoneSlack x the previous rate's.
constexpr double kMonotoneSlack = 0.95;
//  - "all the baselines except for Split drops to 0 goodput beyond 40 incoming RPS for the 8B
//    model running on 4 A100 GPUs": SGLang (static TP, no P/D) and SGLang (PD) below
//    kCollapseFrac of Nitsum at every rate above 40; Split above it.
constexpr double kCollapseBeyondRps = 40;
//  - "Overall, Nitsum achieves the highest goodput among all the systems": Nitsum >= every
//    baseline at every rate.
//  - "At low system load, all the systems perform similarly": at the lowest rate every system's
//    goodput / Nitsum's in [kLow, kHigh] (the band rule).

// ---- Fig. 7 (3.2.2; Llama-3.1-8B fp16 KV, 0.5 and 5 GB = 4096 and 40960 tokens). ADDED AFTER
// nitsum-fig7's values had been seen (they predate this branch); the same band rule, nothing in
// the migration pricing is changed after (a miss carries a KnownMiss with its cause).
constexpr double kPagedLoS = 0.88, kPagedHiS = 9.25;    // cudaMemcpyAsync, seconds
constexpr double kAggLoMs = 3.6, kAggHiMs = 24.8;       // Nitsum, ms (unit stripped; PAPERS-NOTES)
constexpr double kSpeedupLo = 245, kSpeedupHi = 376;    // x

// ---- Issue 31, committed before the Table 1 calibration was applied to the experiments. Same
// band rule; the workloads are ServeGen's m-mid clients (../shared/data/servegen, engine/trace.h
// read_servegen: noon of day 1, 129600 s, a 60 s window, scaled to the rate; the two (three) tiers
// alternate over the requests in arrival order, ASSUMPTION) unless said otherwise. The busiest
// clients' length files are missing from our copy (they borrow lengths: ServeGenStats), so every
// ServeGen figure carries that caveat.
//
// Table 1 (4): a decode step t(b) = the cost model's step with its memory efficiency e (GEMM and
// attention reads) and its per-step overhead o free, fitted to both rows of each setup (batch 1
// and batch 128 at 1260 tokens of context). Hard: 0 < e <= 1 and o >= 0 for each setup (a split
// a GPU can have).
constexpr double kTable1Eff[2] = {0.0, 1.0};
// Fig. 14 on ServeGen (4.2.1: "the ServeGen workload and the 14B model using 8 H100 GPUs"): the
// same ratios and claims as above (kFullOverSched ... kFullOverVanilla; collapses; ordering).
// Fig. 10 on ServeGen (4.1.1, 8B on 4 A100, rates 10-80): the same claims as the Azure Fig. 10.
// Fig. 11 (4.1.2): Nitsum's median TTFT and TPOT of each tier under its SLO at every rate, the p90
// too ("p90 under the SLOs"), and the p99 above it at the highest rate ("p99 violates at high
// RPS"): hard.
// Fig. 2 (2.2): decode per GPU, normalised to TP1, at batch 1: the best TP's gain "up to 3x":
// band rule on 3 (max over TP of tokens/s/GPU(TP) / tokens/s/GPU(TP1)), DeepSeek-R1-Distill-Qwen-14B
// on 8 A100.
constexpr double kFig2SmallBatchGain = 3.0;
// Fig. 3 (2.3): dynamic TP over the best static configuration (TP1, TP2, TP1 prefill + TP2
// decode) "23% to 29% higher overall goodput": band rule on 1.26 (Llama-3.1-8B on 4 A100, the
// Alibaba (ServeGen) trace at 40 req/s).
constexpr double kFig3DynamicGain = 1.26;
// SLO scale (4.2.2, 14B on 8 H100, scale 0.75-3): hard: Nitsum >= SGLang at every scale, and the
// gain at the loosest scale below the largest gain ("largest at moderate SLOs ... shrinks when loose").
// Three tiers (4.2.2, + 600 ms / 60 ms): hard: Nitsum >= every baseline at every rate; Split above
// SGLang at the highest rate and below it at the lowest.
// Fig. 17 (4.2.3-4.2.4): scaling 4 -> 32 GPUs at a fixed rate per GPU: each size's goodput per GPU
// over 8 GPUs' in the band rule of 1 ("near-linear"); the reconfiguration interval 0.25-4 s: the
// best at 0.5 or 1 s, and across 0.5-2 s the worst within kIntervalSpread of the best ("varies
// within 6%").
constexpr double kIntervalSpread = 0.94;

}  // namespace loom::sim::nitsum_bands
