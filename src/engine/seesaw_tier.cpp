#include "engine/seesaw_tier.h"

#include <algorithm>

#include "core/error.h"
#include "engine/scheduler.h"

namespace loom {

void SeesawTier::validate(const SchedulerConfig& c) {
  if (c.tier_tokens < 1)
    fail("scheduler: Seesaw phases need a CPU KV tier of at least one token, found ", c.tier_tokens);
  // Resident sequences (see the top): the prefill plan's pools then the decode plan's, one DP.
  if (c.pool_shapes.size() > 2)
    fail("scheduler: Seesaw phases take the KV pools of two plans (prefill, decode), found ", c.pool_shapes.size());
  for (const KvPoolShape& p : c.pool_shapes)
    if (p.kvp != 1 || p.dp != c.pool_shapes.front().dp)
      fail("scheduler: Seesaw phases need KV pools of one DP degree and no KV parallelism, found ", p.to_string());
}

SeesawTier::SeesawTier(const SchedulerConfig& c)
    : mode_(c.phases),
      tier_tokens_(c.tier_tokens),
      async_(c.async_swaps),
      blocks_p_(c.pool_shapes.front().blocks_per_pool),
      blocks_d_(c.pool_shapes.back().blocks_per_pool),
      block_size_(c.block_size) {
  LOOM_CHECK(mode_ != PhaseMode::None, "SeesawTier without phases");
}

int SeesawTier::prefill_surcharge(int64_t blocks) const {
  if (blocks_p_ >= blocks_d_) return 0;  // a c_p block costs no rank more than a c_d block does
  return int((blocks * blocks_d_ + blocks_p_ - 1) / blocks_p_ - blocks);
}

std::string SeesawTier::reject_reason(const Request& r, int64_t total) const {
  if (total - 1 <= tier_tokens_) return {};
  return cat("request ", r.id, ": prompt + max_tokens = ", total, " tokens needs ", total - 1,
             " tokens of the CPU KV tier, which holds ", tier_tokens_);
}

StepKinds SeesawTier::begin_schedule(StepBatch& b, KvConnectorHost& h) {
  maybe_reset();
  update_phase(h);
  if (phase_ == Phase::Decode) onboard(b, h);
  return StepKinds{phase_ == Phase::Decode, phase_ == Phase::Prefill};
}

void SeesawTier::admitted(Sequence& s, int tokens, KvBlockPools& pools) {
  if (const int extra = prefill_surcharge((tokens + block_size_ - 1) / block_size_); extra > 0) {
    std::vector<BlockId>& held = surcharge_[s.id()];
    for (int i = 0; i < extra; ++i) held.push_back(pools.allocate(pools.shape().pool_of(s.id(), 0)));
  }
  reserved_ += tokens;
  reserved_by_.insert(s.id());
}

void SeesawTier::end_schedule(StepBatch& b) {
  if (async_ || !b.seqs.empty()) {
    b.swap_out.insert(b.swap_out.begin(), pending_swap_out_.begin(), pending_swap_out_.end());
    pending_swap_out_.clear();
  }
  if (async_ && b.seqs.empty() && b.swap_out.empty() && b.swap_in.empty() && busy()) {
    b.await_swaps = true;  // nothing runs before copies in flight complete
    ++num_await_steps_;
  }
}

void SeesawTier::released(Sequence& s, KvBlockPools& pools) {
  if (auto it = surcharge_.find(s.id()); it != surcharge_.end()) {
    for (BlockId b : it->second) pools.free(b);
    surcharge_.erase(it);
  }
  reserved_by_.erase(s.id());
}

void SeesawTier::forget(Sequence& s) {
  if (auto it = std::find(prefetching_.begin(), prefetching_.end(), &s); it != prefetching_.end()) {
    prefetching_.erase(it);  // its copies still run: unacked_in_ keeps the id until they complete
    return;
  }
  auto it = std::find(offloaded_.begin(), offloaded_.end(), &s);
  LOOM_CHECK(it != offloaded_.end(), "sequence ", s.id(), " is not in the CPU tier");
  offloaded_.erase(it);
  // Not issued yet: no copy will ever run or complete for it.
  if (std::erase_if(pending_swap_out_, [&](const SeqExtent& e) { return e.id == s.id(); }) > 0)
    unacked_out_.erase(s.id());
}

std::vector<Sequence*> SeesawTier::step_failed() {
  if (!async_) return {};
  // The ranks' tier copies will never be reported complete: the sequences whose KV is in the tier
  // or on its way fail too, and nothing waits for copies any more (else the loop would only ever
  // schedule steps that wait for them).
  std::vector<Sequence*> tiered(offloaded_.begin(), offloaded_.end());
  tiered.insert(tiered.end(), prefetching_.begin(), prefetching_.end());
  unacked_out_.clear();
  unacked_in_.clear();
  return tiered;
}

// ---- Seesaw phases (004 §4.2) ----

void SeesawTier::maybe_reset() {
  // Bump accounting, like the KvTier: room comes back only when the tier is empty.
  // Asynchronously: also no prefetch, and no copy in flight on any rank (the KvTier resets then).
  if (offloaded_.empty() && reserved_by_.empty() && prefetching_.empty() && !busy()) reserved_ = 0;
}

void SeesawTier::update_phase(KvConnectorHost& h) {
  bool prefilling = false, resident_decodes = false;
  for (const Sequence* s : h.running()) {
    if (s->is_decode()) {
      resident_decodes = true;
    } else if (s->num_uncomputed() > 0) {
      prefilling = true;
    }
  }
  const bool decodable = resident_decodes || !offloaded_.empty() || !prefetching_.empty();
  Phase next = phase_;
  if (phase_ == Phase::Prefill) {
    if (!prefilling && decodable && !h.head_admissible()) next = Phase::Decode;
  } else if (!h.waiting().empty()) {
    bool go = !decodable;
    switch (mode_) {
      case PhaseMode::Seesaw: go = go || (offloaded_.empty() && h.head_admissible()); break;
      case PhaseMode::PrefillFirst: go = go || h.head_admissible(); break;
      case PhaseMode::DecodeFirst: go = go || (offloaded_.empty() && h.running().empty() && h.head_admissible()); break;
      case PhaseMode::None: break;
    }
    if (!prefetching_.empty()) go = false;  // async: no plan switch meets a half-copied sequence
    if (go) next = Phase::Prefill;
  }
  if (next != phase_) {
    // Nothing prefilled under c_p is left on the device when decode starts (offloaded or finished).
    LOOM_CHECK(next == Phase::Prefill || surcharge_.empty(), "decode starts with ", surcharge_.size(),
               " sequences charged for prefill");
    phase_ = next;
    ++phase_switches_;
  }
}

void SeesawTier::onboard(StepBatch& b, KvConnectorHost& h) {
  // Continuous batching from the tier (W6): the oldest swapped sequence first, while the device
  // pools hold it (its context and the token this step decodes) above the watermark.
  KvBlockPools& pools = h.block_pools();
  const int max_seqs = h.config().max_num_seqs;
  while (!offloaded_.empty() && int(h.running().size() + prefetching_.size()) < max_seqs) {
    Sequence* s = offloaded_.front();
    // Async: its swap-out must be complete on every rank (a prefix of offloaded_: copies complete
    // in order).
    if (unacked_out_.count(s->id())) break;
    if (!h.fits(s->block_table.pool_needs(s->num_tokens(), pools.shape(), s->id()))) break;
    const bool ok = s->block_table.append_slots(s->num_tokens(), pools, s->id());
    LOOM_CHECK(ok);
    offloaded_.pop_front();
    b.swap_in.push_back(SeqExtent{s->id(), s->num_computed});
    ++num_swapped_in_;
    if (async_) {  // W11: a prefetch task; the sequence decodes once it is complete everywhere
      prefetching_.push_back(s);
      unacked_in_.insert(s->id());
      continue;
    }
    h.run(s);
  }
}

void SeesawTier::computed(Sequence& s, const ScheduledSeq& e, KvConnectorHost& h) {
  // Prefilled under c_p (its last chunk sampled, or a recomputation of prompt + outputs ended one
  // token short of sampling): a decoder now, it leaves for the tier (decode must find it in c_d's
  // placement; nothing migrates, see the top).
  if (e.is_prefill && phase_ == Phase::Prefill && s.is_decode()) offload(s, h);
}

void SeesawTier::offload(Sequence& s, KvConnectorHost& h) {
  // Prefilled: its KV goes to the tier before the next step (W6, W10 swap-out), its blocks now.
  h.park(&s);
  s.status = SeqStatus::kSwapped;
  offloaded_.push_back(&s);
  pending_swap_out_.push_back(SeqExtent{s.id(), s.num_computed});
  if (async_) unacked_out_.insert(s.id());
  ++num_swapped_out_;
}

void SeesawTier::step_done(const StepResult& result, KvConnectorHost& h) {
  if (!async_) return;
  for (RequestId id : result.swapped_out) {
    LOOM_CHECK(unacked_out_.erase(id) == 1, "swap-out of sequence ", id, " reported complete, none was in flight");
  }
  for (RequestId id : result.swapped_in) {
    LOOM_CHECK(unacked_in_.erase(id) == 1, "swap-in of sequence ", id, " reported complete, none was in flight");
    auto it = std::find_if(prefetching_.begin(), prefetching_.end(), [&](const Sequence* s) { return s->id() == id; });
    if (it == prefetching_.end()) continue;  // cancelled meanwhile
    Sequence* s = *it;
    prefetching_.erase(it);
    h.run(s);
  }
}

}  // namespace loom
