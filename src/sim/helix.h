// Helix Parallelism (../shared/papers/003, "Helix Parallelism: Rethinking Sharding Strategies for
// Interactive Multi-Million-Token LLM Decoding") as pure functions for the simulator:
//  - Appendix A's roofline DRAM-read times T_KV and T_W, verbatim (Figure 1), and the
//    "as-described" weight-read variant of 2.2 (W_Q/W_K/W_V by TPA, replicated on every KVP rank;
//    W_O and the FFN by N = KVP x TPA; PAPERS-NOTES.md Helix ambiguity 4);
//  - the HOP-B pipeline of 2.1.3 / Figure 3: the all-to-all of chunk c overlaps the attention of
//    chunk c+1, so only what the attention cannot hide is exposed.
// Units: seconds and bytes. No state; safe to call from anywhere.
#pragma once

#include <vector>

#include "sim/hardware.h"

namespace loom::sim {

// Appendix A's symbols (B, Q, K, Hsz, S, H = Q x Hsz, F, TPA, TPF, KVP, bytes_param, MemBW).
struct HelixRoofline {
  double batch = 8;          // B
  int q_heads = 128;         // Q
  int kv_heads = 8;          // K
  int head_size = 128;       // Hsz
  double seq_len = 1e6;      // S (KV sequence length)
  double ffn = 65536;        // F
  int tpa = 1;               // TP width for attention
  int tpf = 1;               // TP width for the FFN
  int kvp = 1;               // KVP width
  double bytes_param = 0.5;  // FP4
  double mem_bw = 8000e9;    // "Figure 1 assumes MemBW = 8000 GB/s"
  double hidden() const { return double(q_heads) * head_size; }  // H = Q x Hsz
};

// Appendix A, KV-cache read time per layer ("assumes individual K and V heads"):
//   T_KV = B x 2 x ceil(K/TPA) x Hsz x (S/KVP) x bytes_param / MemBW
double helix_t_kv(const HelixRoofline& r);
// Appendix A, weight read time per layer ("assumes SwiGLU activation in FFN block"), verbatim:
//   T_W = (2 x H x (Q/TPA) x Hsz + 2 x H x ceil(K/TPA) x Hsz + 3 x H x F / TPF) x bytes_param / MemBW
// (the first term is W_Q and W_O, both sharded by TPA).
double helix_t_w(const HelixRoofline& r);
// The same read with W_O sharded by N = KVP x TPA as 2.2 describes ("a shard of the projection
// weight matrix of shape H/N x H"): H x (Q/TPA) x Hsz + H x (Q/N) x Hsz + 2 x H x ceil(K/TPA) x
// Hsz + 3 x H x F / TPF. Equal to helix_t_w when KVP = 1.
double helix_t_w_as_described(const HelixRoofline& r);

// The pricing of the paper's simulator (3.1: it "accounts for both compute and communication
// costs, including latency from inter-GPU NVLink transfers, DRAM bandwidth constraints, and FLOP
// throughput"), as a Calibration of the cost model (sim/cost_model.h), for the Figure 5-7
// experiments:
//  - every kernel's work at the roofline of the datasheet figures, max(FLOPs / peak, bytes /
//    MemBW): Appendix A prices DRAM reads at the datasheet "MemBW = 8000 GB/s" with no efficiency
//    factor, and 3.1 lists FLOP throughput, not a GEMM efficiency curve; FP4 arithmetic for every
//    GEMM and for MLA's absorbed attention ("All model weights, KV states, and arithmetic
//    operations are assumed to use FP4", 3.1; GQA decode attention, 64 FLOPs per KV byte for
//    Llama-405B, is bound by DRAM at any peak, and the cost model prices it at the BF16 one);
//  - the same fixed cost per kernel every other plan's pricing carries (issue 31): the A100 fit's
//    per-kernel latencies (default_calibration(): a GEMM's, each element-wise kind's, an attention
//    kernel's), added once per kernel the step launches, as the cost model counts them per layer
//    from the stage (a Helix layer: one attention, one all-to-all and one merge per HOP-B chunk);
//    no per-step host overhead (3.1 lists none; a CUDA-graph decode loop);
//  - every collective inside the NVLink domain: one fixed latency plus the bytes on its busiest
//    link at the datasheet NVLink bandwidth (GpuSpec::link_bw, 900 GB/s each way on GB200).
// `collective_latency_s` is that one latency, the same for all-reduce, all-to-all and all-gather
// (one-shot exchanges through peer memory inside one NVLink domain).
Calibration helix_paper_calibration(double collective_latency_s);

// The latency of a small collective inside a Blackwell NVLink domain: NVIDIA's NCCL 2.27
// announcement ("Enabling Fast Inference and Resilient Training with NCCL 2.27", NVIDIA developer
// blog, 2025, Figure 1: low-latency symmetric-memory kernels) gives about 6.3 us for a
// small-message all-reduce over 32 Blackwell GPUs in one NVLink domain (the figure's value as
// quoted in NVIDIA/nccl-tests issue #333). The one free constant of the Figure 5-7 pricing, fixed
// from that public figure, not fitted to the paper's factors.
constexpr double kBlackwellNvlinkCollectiveLatencyS = 6.3e-6;

// HOP-B (2.1.3, Figure 3): chunk c's attention takes attn_s[c], then its all-to-all takes
// comm_s[c], then its merge (the rescale-and-sum of the KVP partials, kernels::merge_attention)
// takes merge_s[c] on the compute stream; all-to-alls run one at a time on the link.
//  - on: the all-to-all of chunk c starts as soon as its attention and the previous all-to-all
//    are done, while the compute stream runs chunk c+1's attention and then chunk c's merge (loom's
//    order, engine/stage_helix.cpp: attend c+1, start it, finish c); a merge waits for its
//    all-to-all;
//  - off, as Figure 3 draws it ("strictly sequentially", 3.3): the same chunks, every attention,
//    then every all-to-all one after another, then the merges: nothing overlaps.
// Returns the span from the first attention to the last merge. Figure 3 (no merge): 8 chunks of 2
// units of attention and 1.2 of communication span 25.6 units without HOP-B and 17.2 with it (the
// figure rounds to 17; PAPERS-NOTES.md ambiguity 8).
double hopb_span(const std::vector<double>& attn_s, const std::vector<double>& comm_s,
                 const std::vector<double>& merge_s, bool hopb);
// Without merges (Figure 3's drawing).
double hopb_span(const std::vector<double>& attn_s, const std::vector<double>& comm_s, bool hopb);
// The communication the span leaves exposed: hopb_span - sum(attn_s) (no merges).
double hopb_exposed(const std::vector<double>& attn_s, const std::vector<double>& comm_s, bool hopb);

}  // namespace loom::sim
