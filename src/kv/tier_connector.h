// TierConnector: the CPU tier's connector on one rank (Seesaw, ../shared/papers/004 §4.2 tiered KV
// buffering, §5.2 asynchronous swaps): runs the step's SwapOut, SwapIn and Await operations
// (kv_connector.h) with the rank's TierSwaps (kv_tier.h). The scheduler's side is
// engine/seesaw_tier.h (SeesawTier).
//   begin    frees the pages of swap-outs complete here; before a step that starts copies, the
//            reader's half of the tier's ordering (kv_tier.h: this descriptor follows the gathers
//            that reported the copies these depend on as complete);
//   SwapOut  each sequence's copies to the tier start on the swap-out thread, each rank writing its
//            cells under the placement that computed them (ctx.from); its pages stay held until the
//            copy is done, and the step goes on (the KV is not needed until decode: W8/W10);
//   SwapIn   pages under the step's placement (ctx.to), the prefetcher copies (W11); those
//            sequences decode in a later step;
//   Await    a step waits for a copy only when it needs it: free pages for what it writes (the
//            oldest swap-outs first), a sequence of the step whose swap-in is still copying (a
//            scheduler without asynchronous swaps lists it in the step that swaps it in), and, with
//            no sequence to run, the oldest copy in flight (a swap-in first), so the first sequences
//            are ready while the later ones still copy. overlap = false: every copy at once (the
//            baseline the Seesaw bench compares the overlap with).
// A migration leaves the pages of swap-outs still copying alone (prepare_migration); none runs while
// a swap-in is in flight (the scheduler does not leave decode then).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "device/device.h"
#include "kv/kv_connector.h"
#include "kv/kv_tier.h"

namespace loom {

class TierConnector final : public KvConnector {
 public:
  // `host` = the plan set's rank count (the tier's rank in the swap migrations). The arena is
  // pinned for `dev`'s copies (a GPU's; nothing on the CPU).
  TierConnector(int n_layers, int n_kv_heads, int head_dim, int block_size, int host,
                std::shared_ptr<KvTierArena> arena, Device& dev, bool overlap);

  bool runs(KvOpKind kind) const override { return kind != KvOpKind::Migrate; }
  void begin(const std::vector<KvOp>& ops, KvOpContext& ctx) override;
  void run(const KvOp& op, KvOpContext& ctx) override;
  std::vector<int64_t> prepare_migration(int64_t pages, KvStore& store) override;
  void release(int64_t seq, KvStore& store) override { swaps_->release(seq, store); }

  TierSwaps& swaps() { return *swaps_; }
  const TierSwaps& swaps() const { return *swaps_; }
  // Copies still running on the rank's threads when the last Await finished (its forward overlaps them).
  int64_t overlap_out() const { return overlap_out_; }
  int64_t overlap_in() const { return overlap_in_; }
  // Sequences a step needed while their swap-in was still in flight here (the step waited): 0 when
  // the scheduler onboards only ready sequences.
  int64_t unready_decodes() const { return unready_decodes_; }

 private:
  std::shared_ptr<void> pinned_;      // before swaps_: unpinned after its threads are joined
  std::unique_ptr<TierSwaps> swaps_;
  bool overlap_;
  int64_t overlap_out_ = 0, overlap_in_ = 0;
  int64_t unready_decodes_ = 0;
};

}  // namespace loom
