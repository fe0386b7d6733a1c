// SiDP priced by the simulator (../shared/papers/001 §4; PAPERS-NOTES.md section 1, S1-S13): plans
// dp=D,weights=owner, whose FFN of layer l only DP rank l mod D holds (engine/sidp.h). As loom's
// engine runs them (engine/sidp_replicas.h), a WaS replica steps on its own (the simulator prices
// it here with the other replicas' work empty) and the group steps in lockstep under CaS (every
// replica's part; CostModel::price_lockstep calls price_sidp too). Per replica r with m_r rows,
// `rest_r` is its plain-DP step less its FFN (CostModel::price of the same replica with resident
// weights, minus L x ffn(m_r)).
//
//  WaS (sidp=was, §4.2, S4-S7): replica r computes its layers in order; the FFN of a non-owned
//    layer waits until the layer sits in a cache slot. The prefetcher walks the rank's fetch order
//    (sidp::fetch_order: peak shifting when the lookahead covers a cycle, else layer order), one
//    one-sided read at a time, at most `lookahead` fetched layers ahead of compute (the engine's
//    OwnerFfnStage rule), across step boundaries. A read of one layer's FFN costs a send/recv of
//    its bytes; without peak shifting the D-1 non-owners read the same owner at once, so each gets
//    1/(D-1) of its egress (the incast of §4.2); with it, every owner has one reader (S7 (ii)).
//    The step time is the steady state of that timeline (the third of three identical steps).
//  CaS (sidp=cas, §4.3, S8-S10): per layer, every active replica's pre-FFN part (lockstep: the
//    slowest one's), then every active non-owner's rows go to the owner (the senders' copies at
//    once, §4.3 "P2P transfers are issued by non-owners": one latency, all their bytes over the
//    owner's ingress), the owner's one GEMM chain over all rows, and the rows back the same way
//    over its egress. A replica without rows is a dummy and sends nothing.
//  Fig. 14's ladder (§5.4), for the tail experiment:
//    FSDP  (§3.2, S13): every rank, dummies included, all-gathers each layer's FFN before it
//          (a group collective per layer, not overlapped) and computes its own rows;
//    CaS V1: P2P to the owner as CaS, but the owner runs one GEMM chain per sender (its own rows
//          included), and dummy replicas take part with one row (vLLM's dummy batch); its
//          copies run at once as V2's (the rung is "async P2P");
//    CaS V2: V1 with the senders' rows fused into one GEMM chain (S9);
//    CaS V3: V2 with dummy skipping (S10): SiDP's CaS above.
//
// Memory (S2, S12; PAPERS-NOTES 1.4.10): a rank holds attention, norms, embedding and classifier
// as plain DP, the FFN of the layers it owns, and `slots` cache slots of one FFN layer for WaS
// (none when D = 1 or for CaS alone); the KV budget is the vLLM one of CostModel::memory.
//
// B_th (S11; PAPERS-NOTES S11 per-iteration form): the smallest per-replica batch b whose plain
// forward time T_fwd(b) at the given context hides fetching the non-owned FFN layers once,
// T_fetch = (their bytes) / (the fetch bandwidth of the plan: incast without peak shifting).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/step.h"
#include "sim/cost_model.h"

namespace loom::sim {

enum class SidpVariant {
  AsPlanned,  // the plan's mode: WaS or CaS (= CasV3)
  Was,
  Fsdp,
  CasV1,
  CasV2,
  CasV3,
};
const char* sidp_variant_name(SidpVariant v);  // "plan", "was", "fsdp", "cas-v1", "cas-v2", "cas-v3"

// A lockstep step of every replica of a weights=owner plan (replica_seqs[r]: replica r's work).
// A SiDP step's rows as price_sidp's per-replica work: parts[j] is replica j's part of the step (an
// own step: one non-null entry), or null (engine/sidp_coordinator.h PricedSidpBackend::Pricer).
void sidp_step_work(const std::vector<const StepBatch*>& parts, std::vector<std::vector<SeqWork>>& work);
StepCost price_sidp(const CostModel& cm, const PricedPlan& pl, const std::vector<std::vector<SeqWork>>& replica_seqs,
                    SidpVariant v = SidpVariant::AsPlanned);

// Seconds one non-owner takes to read one FFN layer from its owner under `full` (incast shared
// by dp - 1 readers without peak shifting; by ceil((dp - 1) / k) readers with a lookahead of
// 2 <= k < dp - 1 slots, §4.2's k-layer cycles).
double sidp_layer_fetch_s(const CostModel& cm, const Plan& full);
// Bytes of one layer's FFN (gate, up, down) in the model's weight dtype.
double sidp_ffn_layer_bytes(const CostModel& cm);

// Weight elements rank `rank` holds when every plan of `resident` is weights=owner (one owned
// copy shared by the set's plans, plus the largest WaS slot count of the set), as CostModel::memory
// counts them.
double sidp_rank_weight_elems(const CostModel& cm, const std::vector<PricedPlan>& resident, int rank);

struct SidpThreshold {
  int64_t threshold = 0;        // B_th, sequences per replica
  bool crossed = false;         // some b <= max_b hides the fetch
  double fwd_s = 0, fetch_s = 0;  // T_fwd(B_th) and T_fetch
  int context = 0;
  std::string explain;          // one line: where it comes from
};

// B_th for `plan` (dp=D,weights=owner) on `cm` at decode context `context`: the smallest b in
// 1..max_b with T_fwd(b) >= T_fetch; max_b + 1 (never in WaS) when none does.
SidpThreshold derive_sidp_threshold(const CostModel& cm, const Plan& plan, int context, int64_t max_b = 4096);

// The sidp policy's threshold (engine/policy.h; issue 31): the per-replica batch b below which a CaS
// step of the group is faster than the WaS step, every replica decoding b sequences at `context`
// (price_sidp of both modes; §4.3 Fig. 11: SiDP "effectively takes" the faster mode, and CaS is for
// the tail "when many engines are underutilized"). The smallest b in 1..max_b whose WaS step is no
// slower than its CaS step (the difference falls with b: WaS is fetch-bound and flat at small
// batches, CaS grows with every replica's rows on one owner); max_b + 1 (always CaS) when none.
// `fwd_s` / `fetch_s` hold the WaS and CaS step times at it.
SidpThreshold derive_sidp_crossover(const CostModel& cm, const Plan& plan, int context, int64_t max_b = 4096);

// The engine's default threshold (`loom generate --policy sidp` without --sidp-threshold): the
// crossover (derive_sidp_crossover), as default_shift_threshold (sim/shift_threshold.h): from the
// cost model of a loom profile of this machine when `profile_dir` is given, else from
// cpu_cost_model with the measured memcpy bandwidth and FMA peak; at decode context `context`.
SidpThreshold default_sidp_threshold(const ModelConfig& model, DType weight_dtype, const Plan& plan,
                                     const std::string& profile_dir, const std::string& backend,
                                     double memcpy_bytes_per_s, double peak_flops, int context);

}  // namespace loom::sim
