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

}  // namespace loom::sim::nitsum_bands
