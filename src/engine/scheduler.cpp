#include "engine/scheduler.h"

#include <unordered_map>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/error.h"

namespace loom {

void SchedulerConfig::validate() const {
  if (max_num_seqs < 1) fail("scheduler: max_num_seqs must be >= 1, found ", max_num_seqs);
  if (max_tokens_per_step < 1)
    fail("scheduler: max_tokens_per_step must be >= 1, found ", max_tokens_per_step);
  if (block_size < 1) fail("scheduler: block_size must be >= 1, found ", block_size);
  if (pool_shapes.empty() && num_blocks < 1) fail("scheduler: num_blocks must be >= 1, found ", num_blocks);
  for (const KvPoolShape& p : pool_shapes)
    if (p.blocks_per_pool < 1 || p.dp < 1 || p.kvp < 1)
      fail("scheduler: KV pools ", p.to_string(), " need at least one block per pool");
  if (max_model_len < 2) fail("scheduler: max_model_len must be >= 2, found ", max_model_len);
  if (!(watermark >= 0 && watermark < 1))
    fail("scheduler: watermark must be in [0, 1), found ", watermark);
  if (phases != PhaseMode::None) SeesawTier::validate(*this);
}

namespace {
// Validated, with the one pool of num_blocks when no shapes are given.
SchedulerConfig normalized(const SchedulerConfig& c) {
  c.validate();
  SchedulerConfig n = c;
  if (n.pool_shapes.empty()) n.pool_shapes.push_back(KvPoolShape{1, 1, c.num_blocks});
  return n;
}
int64_t blocks_for(int64_t tokens, int block_size) {
  return (tokens + block_size - 1) / block_size;
}
// The connector the configuration asks for (null: none).
std::unique_ptr<SchedKvConnector> make_connector(const SchedulerConfig& c) {
  if (c.phases != PhaseMode::None) return std::make_unique<SeesawTier>(c);
  return nullptr;
}
}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(normalized(config)),
      connector_(make_connector(config_)),
      // A connector that keeps KV resident across plans: the last plan's pools (Seesaw: the decode
      // plan's, the resident sequences' home, seesaw_tier.h).
      pools_(keeps_kv_resident() ? config_.pool_shapes.back() : config_.pool_shapes.front()) {
  set_watermark();
}

bool Scheduler::fits(const std::vector<int>& need) const {
  const int watermark = running_.empty() ? 0 : watermark_blocks_;
  for (size_t p = 0; p < need.size(); ++p)
    if (pools_.num_free(int(p)) - need[p] < watermark) return false;
  return true;
}

void Scheduler::insert_running(Sequence* s) {
  auto at = std::upper_bound(running_.begin(), running_.end(), s,
                             [&](const Sequence* a, const Sequence* c) { return more_urgent(*a, *c); });
  running_.insert(at, s);
}

void Scheduler::run(Sequence* s) {
  s->status = SeqStatus::kRunning;
  insert_running(s);
}

void Scheduler::park(Sequence* s) {
  release_blocks(s);
  running_.erase(std::find(running_.begin(), running_.end(), s));
}

void Scheduler::set_watermark() {
  watermark_blocks_ = int(std::floor(config_.watermark * pools_.shape().blocks_per_pool));
}

bool Scheduler::holds_in(const Sequence& s, const std::vector<int>& pools) const {
  for (BlockId b : s.block_table.blocks())
    if (std::find(pools.begin(), pools.end(), pools_.pool_of_id(b)) != pools.end()) return true;
  return false;
}

std::vector<SeqExtent> Scheduler::kv_extents() const {
  std::vector<SeqExtent> out;
  for (const Sequence* s : running_)
    if (s->num_computed > 0) out.push_back(SeqExtent{s->id(), s->num_computed});
  return out;
}

std::vector<int> Scheduler::admission_need(const Sequence& s, int tokens) const {
  std::vector<int> need = s.block_table.pool_needs(tokens, pools_.shape(), s.id());
  if (connector_)
    if (const int extra = connector_->extra_blocks(blocks_for(tokens, config_.block_size)); extra > 0)
      need[size_t(pools_.shape().pool_of(s.id(), 0))] += extra;
  return need;
}

void Scheduler::release_blocks(Sequence* s) {
  s->block_table.release(pools_);
  if (connector_) connector_->released(*s, pools_);
}

std::vector<RequestId> Scheduler::rehome(const KvPoolShape& shape, StepBatch& batch) {
  LOOM_CHECK(!keeps_kv_resident(), "the KV connector keeps the KV resident: no rehome");
  // Release everything, then take it again from the new pools in urgency order.
  std::vector<int> slots;
  for (Sequence* s : running_) {
    slots.push_back(s->block_table.num_slots());
    s->block_table.release(pools_);
  }
  pools_ = KvBlockPools(shape);
  set_watermark();
  std::vector<Sequence*> out;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* s = running_[i];
    if (!s->block_table.append_slots(slots[i], pools_, s->id())) out.push_back(s);
  }
  std::vector<RequestId> ids;
  for (Sequence* s : out) {
    ids.push_back(s->id());
    preempt(s);
  }
  if (!ids.empty()) {
    std::vector<ScheduledSeq> keep;
    batch.num_tokens = batch.num_prefill_tokens = batch.num_decode_tokens = batch.num_sampled = 0;
    for (ScheduledSeq& e : batch.seqs) {
      if (std::find(ids.begin(), ids.end(), e.seq_id) != ids.end()) continue;
      batch.num_tokens += e.num_tokens;
      (e.is_prefill ? batch.num_prefill_tokens : batch.num_decode_tokens) += e.num_tokens;
      batch.num_sampled += e.sample ? 1 : 0;
      keep.push_back(std::move(e));
    }
    batch.seqs = std::move(keep);
    batch.preempted.insert(batch.preempted.end(), ids.begin(), ids.end());
    std::erase_if(batch.swap_in, [&](const SeqExtent& e) { return std::find(ids.begin(), ids.end(), e.id) != ids.end(); });
  }
  if (config_.record_block_ids)
    for (ScheduledSeq& e : batch.seqs) {
      const Sequence* s = find(e.seq_id);
      if (s) e.block_ids = s->block_table.blocks();
    }
  return ids;
}

std::optional<Sequence> Scheduler::extract(RequestId id) {
  auto it = live_.find(id);
  if (it == live_.end()) return std::nullopt;
  Sequence* s = it->second.get();
  if (s->status == SeqStatus::kSwapped) return std::nullopt;
  release_blocks(s);
  if (s->status == SeqStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), s));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
  }
  Sequence out = std::move(*s);
  out.block_table = BlockTable(config_.block_size);
  live_.erase(it);
  return out;
}

bool Scheduler::adopt(Sequence seq) {
  const RequestId id = seq.id();
  if (live_.count(id)) fail("adopt: sequence ", id, " is already live in this scheduler");
  known_ids_.insert(id);
  auto owned = std::make_unique<Sequence>(std::move(seq));
  Sequence* s = owned.get();
  s->block_table = BlockTable(config_.block_size);
  if (std::string reason = reject_reason(s->request); !reason.empty()) {
    // It could never run here (a smaller cache than where it came from): rejected, not stuck.
    s->status = SeqStatus::kFinished;
    s->finish_reason = FinishReason::kRejected;
    s->finish_detail = std::move(reason);
    finished_.push_back(std::move(*s));
    return false;
  }
  live_.emplace(id, std::move(owned));
  if (s->status == SeqStatus::kRunning && s->num_computed > 0 &&
      s->block_table.append_slots(s->num_tokens(), pools_, id)) {
    insert_running(s);
    return true;
  }
  if (s->num_computed > 0) {
    s->num_computed = 0;
    s->status = SeqStatus::kPreempted;
    ++s->num_preemptions;
    ++num_preemptions_;
  } else if (s->status == SeqStatus::kRunning) {
    s->status = s->num_output() > 0 ? SeqStatus::kPreempted : SeqStatus::kWaiting;
  }
  insert_waiting(s);
  return false;
}

bool Scheduler::more_urgent(const Sequence& a, const Sequence& b) const {
  if (a.request.priority != b.request.priority) return a.request.priority < b.request.priority;
  if (a.request.arrival_s != b.request.arrival_s) return a.request.arrival_s < b.request.arrival_s;
  return a.id() < b.id();
}

void Scheduler::insert_waiting(Sequence* s) {
  auto it = std::upper_bound(waiting_.begin(), waiting_.end(), s,
                             [&](const Sequence* a, const Sequence* b) { return more_urgent(*a, *b); });
  waiting_.insert(it, s);
}

std::string Scheduler::reject_reason(const Request& r) const {
  const int64_t total = int64_t(r.prompt_len()) + r.max_tokens;
  std::string reason;
  if (r.prompt_len() <= 0) {
    reason = cat("request ", r.id, ": empty prompt");
  } else if (r.max_tokens < 1) {
    reason = cat("request ", r.id, ": max_tokens must be >= 1, found ", r.max_tokens);
  } else if (total > config_.max_model_len) {
    reason = cat("request ", r.id, ": prompt (", r.prompt_len(), ") + max_tokens (", r.max_tokens,
                 ") = ", total, " tokens exceeds max_model_len ", config_.max_model_len);
  } else if (const KvPoolShape* p = [&]() -> const KvPoolShape* {
               for (const KvPoolShape& sh : config_.pool_shapes)
                 if (sh.max_pool_blocks(blocks_for(total, config_.block_size)) > sh.blocks_per_pool) return &sh;
               return nullptr;
             }()) {
    reason = cat("request ", r.id, ": prompt + max_tokens = ", total, " tokens needs ",
                 p->max_pool_blocks(blocks_for(total, config_.block_size)), " KV blocks of one pool, ",
                 p->n_pools() == 1 ? "the whole cache has " : "a pool has ", p->blocks_per_pool);
  } else if (std::string why = connector_ ? connector_->reject_reason(r, total) : std::string(); !why.empty()) {
    reason = std::move(why);
  } else if (!config_.enable_chunked_prefill && r.prompt_len() > config_.max_tokens_per_step) {
    reason = cat("request ", r.id, ": prompt of ", r.prompt_len(),
                 " tokens exceeds max_tokens_per_step ", config_.max_tokens_per_step,
                 " and chunked prefill is off");
  }
  return reason;
}

AddResult Scheduler::add_request(Request request) {
  if (known_ids_.count(request.id)) fail("request id ", request.id, " is already in use");
  known_ids_.insert(request.id);
  auto seq = std::make_unique<Sequence>();
  seq->request = std::move(request);
  seq->block_table = BlockTable(config_.block_size);
  const std::string reason = reject_reason(seq->request);
  if (!reason.empty()) {
    seq->status = SeqStatus::kFinished;
    seq->finish_reason = FinishReason::kRejected;
    seq->finish_detail = reason;
    finished_.push_back(std::move(*seq));
    return {false, reason};
  }
  Sequence* s = seq.get();
  live_.emplace(s->id(), std::move(seq));
  insert_waiting(s);
  return {};
}

void Scheduler::preempt(Sequence* s) {
  release_blocks(s);
  s->num_computed = 0;
  s->status = SeqStatus::kPreempted;
  ++s->num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), s));
  insert_waiting(s);
}

void Scheduler::finish(Sequence* s, FinishReason reason, std::string detail) {
  release_blocks(s);
  if (s->status == SeqStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), s));
  } else if (s->status == SeqStatus::kSwapped) {
    connector_->forget(*s);  // held by the connector (Seesaw: in the CPU tier or on its way back)
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
  }
  s->status = SeqStatus::kFinished;
  s->finish_reason = reason;
  s->finish_detail = std::move(detail);
  auto it = live_.find(s->id());
  LOOM_CHECK(it != live_.end());
  finished_.push_back(std::move(*it->second));
  live_.erase(it);
}

bool Scheduler::may_chunk(const Sequence& s) const {
  // A recomputation (prompt + outputs) can outgrow the budget even when the prompt fit it, so it
  // is chunked even with chunking off; otherwise it could never run again.
  return config_.enable_chunked_prefill || s.num_preemptions > 0;
}

ScheduledSeq Scheduler::make_entry(const Sequence& s, int n) const {
  ScheduledSeq e;
  e.seq_id = s.id();
  e.start = s.num_computed;
  e.num_tokens = n;
  e.is_prefill = !s.is_decode();
  e.sample = e.start + n == s.num_tokens();
  LOOM_CHECK(e.start >= 0 && n >= 0 && e.start + n <= s.num_tokens(), "positions [", e.start, ",", e.start + n,
             ") of ", s.num_tokens());
  // Sequence::token_at over [start, start + n), a range at a time: the prompt's (id 0 for a
  // synthetic prompt), then the outputs'.
  e.token_ids.reserve(size_t(n));
  const int p_len = s.prompt_len(), end = e.start + n;
  if (e.start < p_len) {
    const int to = std::min(end, p_len);
    if (s.request.prompt.empty()) e.token_ids.insert(e.token_ids.end(), size_t(to - e.start), TokenId(0));
    else e.token_ids.insert(e.token_ids.end(), s.request.prompt.begin() + e.start, s.request.prompt.begin() + to);
  }
  if (end > p_len) {
    const int from = std::max(e.start, p_len);
    e.token_ids.insert(e.token_ids.end(), s.output.begin() + (from - p_len), s.output.begin() + (end - p_len));
  }
  if (config_.record_block_ids) e.block_ids = s.block_table.blocks();
  e.sampling = s.request.sampling;
  if (e.sample && e.sampling.has_penalties()) {
    std::unordered_map<TokenId, int32_t> counts;
    for (TokenId t : s.output) ++counts[t];
    e.output_counts.assign(counts.begin(), counts.end());
  }
  e.priority = s.request.priority;
  LOOM_CHECK(s.block_table.num_slots() >= e.start + n, "seq ", s.id(), " has ",
             s.block_table.num_slots(), " slots, step needs ", e.start + n);
  return e;
}

StepBatch Scheduler::schedule() {
  StepBatch b;
  b.step_index = next_step_++;
  b.block_size = config_.block_size;
  int budget = config_.max_tokens_per_step;
  // In this batch already (Sequence::batched_in: no set to build per step).
  auto in_batch = [&](const Sequence* s) { return s->batched_in == b.step_index; };
  auto add = [&](Sequence* s, int n) {
    b.seqs.push_back(make_entry(*s, n));
    const ScheduledSeq& e = b.seqs.back();
    s->batched_in = b.step_index;
    budget -= n;
    b.num_tokens += n;
    (e.is_prefill ? b.num_prefill_tokens : b.num_decode_tokens) += n;
    b.num_sampled += e.sample ? 1 : 0;
  };
  auto seq_slot_left = [&] { return int(b.seqs.size()) < config_.max_num_seqs; };
  const StepKinds kinds = connector_ ? connector_->begin_schedule(b, *this) : StepKinds{};
  const bool decodes = kinds.decodes, prefills = kinds.prefills;

  // 1. Decodes, most urgent first; preempt the least urgent unscheduled sequence when a decode
  // needs a block and none is free (vLLM 4.5: recomputation).
  const std::vector<Sequence*> order = decodes ? running_ : std::vector<Sequence*>{};
  for (Sequence* s : order) {
    if (s->status != SeqStatus::kRunning || !s->is_decode()) continue;
    if (budget < 1 || !seq_slot_left()) break;
    const int need = std::max(s->num_tokens() - s->block_table.num_slots(), 0);
    while (!s->block_table.append_slots(need, pools_, s->id())) {
      // The pools short of a block: preempt the least urgent unscheduled sequence holding one.
      const std::vector<int> want = s->block_table.pool_needs(need, pools_.shape(), s->id());
      std::vector<int> short_pools;
      for (size_t p = 0; p < want.size(); ++p)
        if (want[p] > pools_.num_free(int(p))) short_pools.push_back(int(p));
      Sequence* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        if (!in_batch(*it) && (*it == s || holds_in(**it, short_pools))) {
          victim = *it;
          break;
        }
      }
      LOOM_CHECK(victim != nullptr, "seq ", s->id(), " is itself unscheduled");
      b.preempted.push_back(victim->id());
      std::erase_if(b.swap_in, [&](const SeqExtent& e) { return e.id == victim->id(); });
      preempt(victim);
      if (victim == s) break;
    }
    if (s->status != SeqStatus::kRunning) continue;
    add(s, 1);
  }

  // 2. Continuing prefill chunks (blocks reserved at admission) (Sarathi 4: chunked prefill).
  for (Sequence* s : prefills ? std::vector<Sequence*>(running_) : std::vector<Sequence*>{}) {
    if (in_batch(s) || s->is_decode() || s->num_uncomputed() <= 0) continue;
    if (budget < 1 || !seq_slot_left()) break;
    const int n = may_chunk(*s) ? std::min(s->num_uncomputed(), budget) : s->num_uncomputed();
    if (n > budget) continue;
    add(s, n);
  }

  // 3. Admission, strictly by (priority, arrival, id); none in a step that preempted (the cache
  // is short: admitting would only preempt again).
  while (prefills && b.preempted.empty() && !waiting_.empty()) {
    Sequence* s = waiting_.front();
    if (budget < 1 || !seq_slot_left() || int(running_.size()) >= config_.max_num_seqs) break;
    const int tokens = s->num_tokens();
    if (connector_ && !connector_->room_for(tokens)) break;  // the connector is full for it
    const int n = may_chunk(*s) ? std::min(tokens, budget) : tokens;
    if (n > budget) break;
    if (!fits(admission_need(*s, tokens))) break;
    const bool ok = s->block_table.append_slots(tokens, pools_, s->id());
    LOOM_CHECK(ok);
    if (connector_) connector_->admitted(*s, tokens, pools_);
    waiting_.pop_front();
    if (s->admit_order < 0) s->admit_order = next_admit_++;
    run(s);
    add(s, n);
  }
  if (connector_) connector_->end_schedule(b);  // the KV operations it holds for this step
  return b;
}

bool Scheduler::head_admissible() const {
  if (waiting_.empty() || int(running_.size()) >= config_.max_num_seqs) return false;
  const Sequence* s = waiting_.front();
  const int tokens = s->num_tokens();
  if (connector_ && !connector_->room_for(tokens)) return false;
  return fits(admission_need(*s, tokens));
}

bool Scheduler::apply_stops(Sequence* s) {
  const TokenId tok = s->output.back();
  const StopConditions& st = s->request.stop;
  if (!st.ignore_eos && std::find(st.eos_ids.begin(), st.eos_ids.end(), tok) != st.eos_ids.end()) {
    finish(s, FinishReason::kStop, cat("eos token ", tok));
    return true;
  }
  for (size_t i = 0; i < st.stop_token_seqs.size(); ++i) {
    const auto& q = st.stop_token_seqs[i];
    if (q.empty() || q.size() > s->output.size()) continue;
    if (std::equal(q.rbegin(), q.rend(), s->output.rbegin())) {
      finish(s, FinishReason::kStop, cat("stop token sequence ", i));
      return true;
    }
  }
  if (stop_check_ && stop_check_(*s)) {
    finish(s, FinishReason::kStop, "stop string");
    return true;
  }
  if (s->num_output() >= s->request.max_tokens) {
    finish(s, FinishReason::kLength, cat("max_tokens ", s->request.max_tokens));
    return true;
  }
  if (s->num_tokens() >= config_.max_model_len) {
    finish(s, FinishReason::kLength, cat("max_model_len ", config_.max_model_len));
    return true;
  }
  return false;
}

StepOutcome Scheduler::on_step_done(const StepBatch& batch, const StepResult& result) {
  LOOM_CHECK(int(result.sampled.size()) == batch.num_sampled, "step ", batch.step_index,
             " sampled ", result.sampled.size(), " tokens, batch asks for ", batch.num_sampled);
  // The sampled tokens by sequence id (sorted: one allocation per step, not one per token).
  std::vector<std::pair<RequestId, TokenId>> tokens;
  tokens.reserve(result.sampled.size());
  for (const SampledToken& t : result.sampled) tokens.emplace_back(t.seq_id, t.token);
  std::sort(tokens.begin(), tokens.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < tokens.size(); ++i)
    LOOM_CHECK(tokens[i].first != tokens[i - 1].first, "two tokens for seq ", tokens[i].first);
  std::unordered_map<RequestId, const TokenLogprobs*> logprobs;
  for (const TokenLogprobs& l : result.logprobs) logprobs.emplace(l.seq_id, &l);
  if (connector_) connector_->step_done(result, *this);  // copies complete (Seesaw's swaps)
  StepOutcome out;
  for (const ScheduledSeq& e : batch.seqs) {
    auto it = live_.find(e.seq_id);
    if (it == live_.end()) continue;  // cancelled since schedule()
    Sequence* s = it->second.get();
    if (s->status != SeqStatus::kRunning || s->num_computed != e.start) continue;
    s->num_computed += e.num_tokens;
    if (!e.sample) {
      if (connector_) connector_->computed(*s, e, *this);
      continue;
    }
    auto t = std::lower_bound(tokens.begin(), tokens.end(), e.seq_id,
                              [](const std::pair<RequestId, TokenId>& x, RequestId id) { return x.first < id; });
    LOOM_CHECK(t != tokens.end() && t->first == e.seq_id, "no sampled token for seq ", e.seq_id);
    s->output.push_back(t->second);
    TokenEvent ev{e.seq_id, t->second, false, FinishReason::kNone, std::nullopt};
    if (auto l = logprobs.find(e.seq_id); l != logprobs.end()) ev.logprobs = *l->second;
    if (apply_stops(s)) {
      ev.finished = true;
      ev.reason = finished_.back().finish_reason;
      ++out.num_finished;
    } else if (connector_) {
      connector_->computed(*s, e, *this);  // e.g. its prefill completed (Seesaw: to the CPU tier)
    }
    out.tokens.push_back(ev);
  }
  return out;
}

void Scheduler::on_step_failed(const StepBatch& batch, const std::string& what) {
  for (const ScheduledSeq& e : batch.seqs) {
    auto it = live_.find(e.seq_id);
    if (it == live_.end()) continue;
    finish(it->second.get(), FinishReason::kError, what);
  }
  // The sequences the connector holds whose KV the failed step's copies were to move.
  if (connector_)
    for (Sequence* s : connector_->step_failed()) finish(s, FinishReason::kError, what);
}

bool Scheduler::cancel(RequestId id) {
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  finish(it->second.get(), FinishReason::kAbort, "cancelled");
  return true;
}

std::vector<Sequence> Scheduler::drain_finished() {
  std::vector<Sequence> out;
  out.swap(finished_);
  return out;
}

const Sequence* Scheduler::find(RequestId id) const {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : it->second.get();
}

}  // namespace loom
