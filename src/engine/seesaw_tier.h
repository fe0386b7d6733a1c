// SeesawTier: the Scheduler's KV connector under Seesaw's phases (../shared/papers/004 §4.2, §5.2):
// the phase machine and the CPU tier's accounting, at the points of sched_kv_connector.h. The ranks'
// side (the copies) is kv/kv_tier.h TierSwaps, run by the CPU-tier connector of kv/kv_connector.h.
//
// Phases (config.phases != None): every step is all prefill (under the prefill plan c_p) or all
// decode (under c_d), and a prefilled sequence leaves the device KV for the CPU tier (swap-out,
// listed in the next step's batch.swap_out; its blocks are free at once, status kSwapped) and comes
// back when a decode step has blocks for it (onboarding, batch.swap_in, first in first out). Phase
// changes:
//   PREFILL -> DECODE when no prefill chunk is left and the first waiting sequence cannot be
//     admitted (the tier is full for it, the device KV is, or nothing waits) while something can
//     decode;
//   DECODE -> PREFILL by config.phases: Seesaw (transition-minimizing, 4.2) once the tier is empty
//     and the first waiting sequence fits, with the running sequences resident; PrefillFirst (vLLM,
//     Orca: 2.2 "prefill-prioritizing") as soon as it fits; DecodeFirst (FasterTransformer:
//     "decode-prioritizing") once nothing runs and the tier is empty. Either way when nothing is
//     left to decode.
// The tier is accounted as the KvTier (kv/kv_tier.h) fills it: tokens reserved at admission
// (bump: freed only when the tier is empty) against config.tier_tokens.
// Resident sequences (4.2 "prefill again, with running sequences resident"): a phase change moves
// no KV. A running sequence's KV stays in the placement of the plan that computed it: a decoding
// sequence in c_d's (it was swapped in, or decoded, under c_d), a prefilling one in c_p's (it
// leaves for the tier once prefilled, so none is left when decode starts). Prefill steps never
// step the resident decoders, and decode steps never meet a prefilling sequence, so no step reads a
// sequence outside its placement (keeps_kv_resident(): the step descriptor of a switch lists no
// sequence to migrate). The ranks' stores then hold two placements at once, so the block accounting
// does too: the pools have c_d's shape (config.pool_shapes.back(), the residents' home), and a
// sequence admitted for prefill under c_p (pool_shapes.front()) is charged, on top of its blocks,
// the c_d blocks that cover its c_p pages on the least roomy rank: k blocks under c_p cost
// ceil(k * B_d / B_p) of the pool's blocks in all (B: blocks_per_pool of each shape; B_p < B_d
// when a pipeline stage holds more of each block than a c_d rank, e.g. uneven stages). Since every
// rank r pays at most pages_r / B of each shape per block, n_d / B_d + n_p / B_p <= 1 keeps every
// rank's pages within its store. Both shapes have the same DP (check_seesaw_plans) and no KVP, so a
// sequence's pool is the same under both.
// Asynchronous swaps (config.async_swaps, the engine; ../shared/papers/004 §5.2, W10/W11): the
// batch's swap_out / swap_in only start copies, and StepResult::swapped_out / swapped_in report
// which completed on every rank. A swapped-out sequence is onboarded only once its swap-out is
// complete (a prefix of the swap-out order, so onboarding stays first in first out); onboarding
// reserves its blocks and starts the prefetch (status kSwapped, "prefetching"), and the sequence
// decodes from the step after its swap-in completed. Decode is not left while a prefetch is in
// flight (so a plan switch never meets a half-copied sequence), the tier is accounted empty only
// when no copy is in flight (cancelled sequences' copies included), and a step with nothing to run
// while copies are in flight waits for them (batch.await_swaps). Off (the simulator), a swap is
// complete when its step runs.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/sched_kv_connector.h"

namespace loom {

// Seesaw scheduling modes (see the top of this file).
enum class PhaseMode { None, Seesaw, PrefillFirst, DecodeFirst };
enum class Phase { Prefill, Decode };

class SeesawTier final : public SchedKvConnector {
 public:
  // `config`: validated, pool_shapes filled (the Scheduler's).
  explicit SeesawTier(const SchedulerConfig& config);
  // Throws loom::Error naming the field when the Seesaw part of `config` is out of range.
  static void validate(const SchedulerConfig& config);

  std::string reject_reason(const Request& r, int64_t total_tokens) const override;
  bool room_for(int64_t tokens) const override { return reserved_ + tokens <= tier_tokens_; }
  int extra_blocks(int64_t blocks) const override { return prefill_surcharge(blocks); }
  bool keeps_kv_resident() const override { return true; }
  bool holds_any() const override { return !offloaded_.empty() || !prefetching_.empty(); }

  StepKinds begin_schedule(StepBatch& b, KvConnectorHost& h) override;
  void admitted(Sequence& s, int tokens, KvBlockPools& pools) override;
  void end_schedule(StepBatch& b) override;
  void step_done(const StepResult& r, KvConnectorHost& h) override;
  void computed(Sequence& s, const ScheduledSeq& e, KvConnectorHost& h) override;
  void released(Sequence& s, KvBlockPools& pools) override;
  void forget(Sequence& s) override;
  std::vector<Sequence*> step_failed() override;

  // Blocks of the pools charged, beyond its own, to a sequence of `blocks` blocks prefilled under
  // c_p (see "Resident sequences"); 0 unless c_p's shape is roomier per block than c_d's.
  int prefill_surcharge(int64_t blocks) const;
  Phase phase() const { return phase_; }
  int64_t phase_switches() const { return phase_switches_; }
  int num_swapped() const { return int(offloaded_.size() + prefetching_.size()); }  // in the CPU tier
  int num_prefetching() const { return int(prefetching_.size()); }  // swap-in started, not complete
  int64_t num_await_steps() const { return num_await_steps_; }      // steps that only waited for copies
  int64_t reserved_tokens() const { return reserved_; }
  int64_t num_swapped_out() const { return num_swapped_out_; }
  int64_t num_swapped_in() const { return num_swapped_in_; }

 private:
  bool busy() const { return !unacked_out_.empty() || !unacked_in_.empty(); }
  void maybe_reset();
  void update_phase(KvConnectorHost& h);
  void onboard(StepBatch& b, KvConnectorHost& h);
  void offload(Sequence& s, KvConnectorHost& h);

  PhaseMode mode_;
  int64_t tier_tokens_;
  bool async_;
  int64_t blocks_p_, blocks_d_;  // blocks_per_pool of c_p's and c_d's shapes
  int block_size_;
  Phase phase_ = Phase::Prefill;
  int64_t phase_switches_ = 0;
  std::deque<Sequence*> offloaded_;            // kSwapped, in swap-out order
  std::vector<SeqExtent> pending_swap_out_;    // for the next non-empty batch
  std::unordered_set<RequestId> reserved_by_;  // admitted with tier room, not swapped out yet
  int64_t reserved_ = 0;
  int64_t num_swapped_out_ = 0, num_swapped_in_ = 0;
  std::unordered_map<RequestId, std::vector<BlockId>> surcharge_;  // prefilling under c_p (see the top)
  // Asynchronous swaps
  std::vector<Sequence*> prefetching_;  // onboarded: blocks reserved, swap-in not complete everywhere
  // Copies not complete on every rank (swap-out: from offload, including not yet issued; swap-in:
  // from onboarding); ids outlive a sequence cancelled meanwhile, whose copies still run.
  std::unordered_set<RequestId> unacked_out_, unacked_in_;
  int64_t num_await_steps_ = 0;
};

}  // namespace loom
