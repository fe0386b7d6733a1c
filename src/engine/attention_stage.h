// The attention stage every executor shares (ARCHITECTURE.md "stage kernels"): which query
// heads attend over which KV heads in one kernel call, the RoPE parameters of a model, and the
// step itself — store the step's K/V rows into the paged cache, then causal attention per
// sequence. Used by the TP/single-rank Transformer and by the Ulysses (SP x TP) forward, which
// differ only in how Q/K/V reach the rank (local projection vs all-to-all).
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kv/kv_layout.h"
#include "model/config.h"

namespace loom {

struct ForwardBatch;

// Query heads that share one KV-head mapping in one attention call: local query heads
// [q_begin, q_begin + n_q) use local KV heads [kv_begin, kv_begin + n_kv) with the kernel's
// rule q -> q / (n_q / n_kv). One run covers the shard when that rule gives every local query
// head its model KV head (q / G); otherwise (a TP shard that holds part of a KV head's group,
// e.g. 24 heads / 6 KV heads at t=4, plan.h) there is one run per KV head.
struct HeadRun {
  int q_begin = 0, n_q = 0, kv_begin = 0, n_kv = 0;
};

// Runs for local query heads [q_begin, q_begin + n_q) (model numbering) over local KV heads
// [kv_begin, kv_begin + n_kv), `group_size` query heads per KV head. LOOM_CHECKs that every
// query head's KV head (q / group_size) is local.
std::vector<HeadRun> make_head_runs(int q_begin, int n_q, int kv_begin, int n_kv, int group_size);

// RoPE parameters of the model (both conventions, Llama-3 scaling, GGUF per-frequency factors;
// the factors point into `c`, which must outlive the result).
kernels::RopeParams rope_params(const ModelConfig& c);

// One layer's attention for a step: for every sequence of `batch` (its tokens consecutive in the
// rows of q/k/v, at positions pos[]), writes the K/V rows of its tokens into the paged layer
// cache (k_layer/v_layer: one layer of the KvLayout arena, n_kv_heads local heads), then runs
// causal attention over [0, start + n) for each head run. Shapes: q [T, ldq] (local query heads
// x head_dim), k/v [T, ldkv] (local KV heads x head_dim), out [T, ldo].
void store_kv_and_attend(const ForwardBatch& batch, const KvLayout& lay, float* k_layer, float* v_layer,
                         const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv,
                         const std::vector<HeadRun>& head_runs, const int32_t* pos, float* out, int64_t ldo,
                         ThreadPool* pool);

}  // namespace loom
