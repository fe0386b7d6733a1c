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

// HOP-B (2.1.3, Figure 3): chunk c's attention takes attn_s[c], then its all-to-all takes
// comm_s[c]; all-to-alls run one at a time on the link. With HOP-B the all-to-all of chunk c
// starts as soon as its attention and the previous all-to-all are done, while chunk c+1's
// attention runs; without it every attention runs first, then every all-to-all (no overlap).
// Returns the span from the first attention to the last all-to-all. Figure 3: 8 chunks of 2
// units of attention and 1.2 of communication span 25.6 units without HOP-B and 17.2 with it
// (the figure rounds to 17; PAPERS-NOTES.md ambiguity 8).
double hopb_span(const std::vector<double>& attn_s, const std::vector<double>& comm_s, bool hopb);
// The communication the span leaves exposed: hopb_span - sum(attn_s).
double hopb_exposed(const std::vector<double>& attn_s, const std::vector<double>& comm_s, bool hopb);

}  // namespace loom::sim
