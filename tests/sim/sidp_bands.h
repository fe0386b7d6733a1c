// SiDP simulator figures (issue 14, revised by issue 31): the tolerance bands the tests assert.
// The issue-14 bands were fixed before the reproduced figures were first computed; the issue-31
// gates below (mechanisms, Figs. 9, 10, 12, the headline as a report) were committed before the
// issue-31 pricing changes (switch rule, KV-bound job, prefetch slots, GEMM transfer).
// Paper: ../shared/papers/001; printed numbers only (PAPERS-NOTES.md section 1.2) and the
// external arXiv abstract (1.8x KV capacity, 1.5x throughput).
//
// Band rule for a ratio the paper prints (or the abstract states): simulated / paper in
// [0.8, 1.25] (a factor 1.25 either way), plus the paper's qualitative claims as hard checks.
//
// Workload assumptions (the paper strips them; stated here, not fitted):
//  - the offline jobs (issue 31): "conversation evaluation" lengths of mean total S = 1K, 2K or 4K
//    (§5.1: summarization 1K, code 2K, conversation 4K): prompts uniform in [0.5, 1.5] x S/4,
//    outputs uniform in [0.5, 1.5] x 3S/4 for 90% of the requests and 2.5x that for 10% (the long
//    tail of §3.2: "10% of samples ... up to half of total generation time"); fixed seeds; BF16;
//    all requests at t = 0; as many requests as three times the largest number of sequences any
//    compared configuration holds at once (the job is KV-bound for every baseline that is, §5.2:
//    the DP baseline "enters a memory-bound regime"); every configuration is a set of independent
//    vLLM 0.10.1 replicas with its defaults for offline jobs on GPUs of >= 70 GiB that are not
//    A100s (max_num_seqs 1024, max_num_batched_tokens 16384; vllm/engine/arg_utils.py), KV budget
//    gpu_memory_utilization 0.9 (Fig. 12: ~80 GB a GPU) less the weights and 2 GB of activations;
//    SiDP is dp=8,weights=owner under the sidp policy (thresholds from the cost model).
//  - the Fig. 14 tail (batch size stripped): the steps the sidp policy ran in CaS during the 4K
//    job for Qwen3-32B on H20 (Figs. 13-15 are H20), priced under FSDP, CaS V1, V2 and V3.
#pragma once

namespace loom::sim::sidp_bands {

constexpr double kLow = 0.8, kHigh = 1.25;  // simulated / paper

inline bool in_band(double simulated, double paper) {
  return simulated >= kLow * paper && simulated <= kHigh * paper;
}

// ---- Fig. 14 (§5.4): 33 s -> 25 s -> 19 s -> 12 s; ratios computed from the printed seconds.
constexpr double kFsdpOverV1 = 33.0 / 25.0;  // 1.32
constexpr double kV1OverV2 = 25.0 / 19.0;    // 1.32
constexpr double kV2OverV3 = 19.0 / 12.0;    // 1.58
constexpr double kFsdpOverV3 = 33.0 / 12.0;  // 2.75
// Hard: every rung faster than the one before (FSDP > V1 > V2 > V3).

// ---- Abstract (external): KV capacity up to 1.8x (banded), throughput up to 1.5x (REPORTED, not
// gated, issue 31). Why the throughput is not gated: a roofline model cannot put SiDP dp8 above
// TP4 or TP8 on these nodes. SiDP dp8 runs TP=1 replicas; per GPU it holds the whole attention
// and one eighth of the FFN, where a TP4 GPU holds a quarter of everything: for the 70B models a
// TP4 GPU's weights are 35 GB against SiDP's ~52 GB (attention 24 GB + embeddings 4 GB + FFN/8
// 14 GB + slots), so a dp2tp4 node holds MORE KV than SiDP dp8 (2.25M against 1.84M tokens on
// H200), and per decoded token a TP4 replica reads each weight once for its batch while a SiDP
// replica reads every non-owned FFN layer over NVLink (450 GB/s, a ninth of HBM) on top of its own
// batch's reads; a roofline prices neither NVLink below HBM speed nor TP's all-reduces above their
// bytes, so SiDP's fetch can only be hidden, never win, and dp2tp4 wins on both capacity and bytes
// per token. The paper's 1.5x is against the DP+TP it ran (vLLM 0.10.1 with its overheads, at
// its batch limits), which the abstract's number cannot separate from the mechanism.
constexpr double kKvCapacityMax = 1.8;  // max over GPU x model of SiDP / plain DP x TP (same DP x TP)
constexpr double kThroughputMax = 1.5;  // reported beside the simulated value

// ---- Mechanisms the text prints (issue 31 gates), on H20 (Figs. 13-15's node):
// Hard (§5.2, §3.1): at equal DP x TP, when the plain-DP baseline is KV-bound (the sequences it
// holds at once fall short of max_num_seqs), SiDP's throughput is above it: Qwen3-32B dp=8 (the
// one model plain DP=8 fits) at S = 4K, SiDP / plain dp=8 in [kAboveDp, inf).
constexpr double kAboveDp = 1.0;
// Hard (§4.2, §5.3 "Prefetch is overlappable"): a WaS step equals the plain-DP step (within
// kWasEqualsDp) exactly at the batches whose iteration hides the fetch of the non-owned layers;
// below them WaS is slower by more than that. Counted over a batch sweep: mismatches in [0, 0].
constexpr double kWasEqualsDp = 0.01;
// Hard (§5.2): "The benefit of SiDP grows with both model size and sequence length: at short
// sequences (1K) ... SiDP closely matches [DP's] throughput": SiDP / plain DP (Qwen3-32B dp=8)
// non-decreasing from S = 1K to 2K to 4K (each step's ratio >= kGrowSlack of the previous), and at
// 1K within the band rule of 1 ("closely matches"); SiDP / best DP+TP of the 70B-class models
// (Llama-3.1-70B, Qwen2.5-72B) at 4K at least that of Qwen3-32B.
constexpr double kGrowSlack = 1.0;

// ---- Fig. 9 (§5.3), plotted only: iteration time against the fetch of ALL FFN weights once
// ("Fetch-1" NVLink 4 on H20/H200, "Fetch-2" NVLink 5 on B200), Qwen3-32B, B = 64 ... 512. Hard:
// the iteration time grows with B while the fetch stays constant; the batch at which the iteration
// first exceeds the fetch is smallest on H20 ("already exceeds ... at"), then H200 ("slightly
// surpasses"), then B200 ("approaches or exceeds ... near" the largest batch).

// ---- Fig. 10 (§5.3), plotted only: peak shifting's throughput gain (with / without) at DP=4 and
// DP=8. Hard: above 1 at both, larger at DP=8 ("at DP=8 the improvement grows").

// ---- Fig. 12 (§5.3), plotted only: Llama-3.1-70B and Qwen2.5-72B under ~80 GB a GPU (the util
// that leaves 80 GB of an H20's 144), S = 1K, 2K, 4K, best DP+TP (pure TP and TP+PP omitted, as
// the paper does) against SiDP. Hard: "SiDP improves throughput ... across all evaluated sequence
// lengths": SiDP / best DP+TP in [1, inf) at every (model, S).
constexpr double kFig12Gb = 80e9;

// ---- Figs. 13, 15 (§5.4), on the 4K Qwen3-32B H20 job: hard: "no configuration where enabling
// CaS reduces overall throughput relative to WaS-only" (sidp / sidp:was >= 1); "more than [stripped]
// of iterations remain in the WaS-enabled regime": WaS engine iterations / CaS ones >= 1.

}  // namespace loom::sim::sidp_bands
