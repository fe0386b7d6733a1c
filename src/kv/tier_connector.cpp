#include "kv/tier_connector.h"

#include "core/error.h"

namespace loom {

TierConnector::TierConnector(int n_layers, int n_kv_heads, int head_dim, int block_size, int host,
                             std::shared_ptr<KvTierArena> arena, Device& dev, bool overlap)
    : pinned_(dev.pin_host(arena->data, size_t(arena->bytes))),  // a GPU's swaps
      swaps_(std::make_unique<TierSwaps>(n_layers, n_kv_heads, head_dim, block_size, host, std::move(arena))),
      overlap_(overlap) {}

void TierConnector::begin(const std::vector<KvOp>& ops, KvOpContext& ctx) {
  swaps_->reap(*ctx.store);
  for (const KvOp& op : ops)
    if ((op.kind == KvOpKind::SwapOut || op.kind == KvOpKind::SwapIn) && !op.seqs.empty()) {
      swaps_->sync();  // the reader's half of the tier's ordering (kv_tier.h)
      break;
    }
}

void TierConnector::run(const KvOp& op, KvOpContext& ctx) {
  KvStore& store = *ctx.store;
  switch (op.kind) {
    case KvOpKind::SwapOut:
      for (const SeqExtent& e : op.seqs) swaps_->swap_out(e, *ctx.from, ctx.me, store);  // W8/W10
      return;
    case KvOpKind::SwapIn: {
      const std::vector<KvEntry>& holds = ctx.to->entries(ctx.me);
      for (const SeqExtent& e : op.seqs) {  // W11: pages now, the prefetcher copies
        swaps_->make_room(store.pages_to_reserve(e.id, e.n_tokens, holds), store);
        swaps_->swap_in(e, *ctx.to, ctx.me, store);
      }
      return;
    }
    case KvOpKind::Await: {
      if (!overlap_) swaps_->wait_all(store);
      if (op.seqs.empty()) {
        // Nothing to overlap: the step exists to complete copies. One is enough for progress (the
        // rank with the fewest done has one queued): the first ready sequences run in the next
        // step while the later ones copy.
        swaps_->wait_next(store);
      } else {
        const std::vector<KvEntry>& holds = ctx.to->entries(ctx.me);
        int64_t pages = 0;
        for (const SeqExtent& e : op.seqs) {
          if (swaps_->swapping_in(e.id)) {
            ++unready_decodes_;
            swaps_->wait_for(e.id, store);
          }
          pages += store.pages_to_reserve(e.id, e.n_tokens, holds);
        }
        swaps_->make_room(pages, store);  // pages of finished swap-outs, the oldest first
      }
      overlap_out_ = swaps_->out_pending();
      overlap_in_ = swaps_->in_pending();
      return;
    }
    case KvOpKind::Migrate: break;
  }
  LOOM_CHECK(false, "the CPU tier runs no ", kv_op_name(op.kind));
}

std::vector<int64_t> TierConnector::prepare_migration(int64_t pages, KvStore& store) {
  LOOM_CHECK(swaps_->in_pending() == 0, "a plan switch while ", swaps_->in_pending(), " swap-ins are in flight");
  swaps_->make_room(pages, store);
  return swaps_->parked();
}

}  // namespace loom
