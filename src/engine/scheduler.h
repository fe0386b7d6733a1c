// Continuous-batching scheduler shared by the engine and the simulator.
//
// Iteration-level scheduling (Orca, section 4.2): the batch is rebuilt every step, so requests
// join and leave between steps. Chunked prefill under a per-step token budget with decodes
// piggybacked in the same step (Sarathi-Serve, section 4: stall-free batching). Paged KV blocks
// with admission bounded by free blocks and preemption by recomputation (vLLM/PagedAttention,
// section 4.5).
//
// Usage (one thread; EngineLoop does this):
//   add_request(r) ...                     // any time
//   StepBatch b = schedule();              // decide step k
//   StepResult res = executor.execute(b);  // run it
//   StepOutcome o = on_step_done(b, res);  // apply sampled tokens, stop conditions
//   drain_finished()                       // collect finished / rejected / cancelled sequences
//
// Policy of schedule(), in this order, within max_tokens_per_step tokens and max_num_seqs
// sequences:
//   1. Decodes of running sequences, most urgent first (priority, then arrival, then id). A
//      decode that needs a new block when none is free preempts the least urgent running
//      sequence not yet in this batch (itself when it is the least urgent): its blocks are
//      freed, num_computed = 0, and it waits again (sorted by priority, then arrival: ahead of
//      later arrivals of its priority). Victims are recomputed as a prefill of prompt+outputs.
//   2. Continuing prefill chunks of running sequences (their blocks were reserved at admission),
//      each min(remaining, budget left) tokens (whole remainder when chunking is off, except
//      for a recomputation after preemption, which is always chunked so it can run again).
//   3. Admission of waiting sequences by (priority, arrival, id), strictly in that order (the
//      first that does not fit stops admission: no overtaking, so big requests do not starve).
//      A sequence is admitted when, after reserving blocks for all its current tokens, at least
//      watermark_blocks stay free (the watermark is waived when nothing is running, so any
//      request that fits the cache can always run), a sequence slot is free, and budget is left
//      (chunking off: the whole prompt must fit the budget).
// KV pools: under a DP or Helix plan a logical block costs memory only on the ranks of its pool
// (SchedulerConfig::pool_shapes); admission, decode growth and the watermark are then per pool, and a
// decode that needs a block preempts a sequence that frees one in that pool.
// KV connectors (sched_kv_connector.h): KV kept or moved outside the device pools between steps is
// a connector's (Seesaw's phases and CPU tier: seesaw_tier.h, with config.phases != None). The
// Scheduler asks it for room at admission and calls it at the points of a step listed there; it
// writes the step's KV operations (StepBatch::swap_out / swap_in / await_swaps). The Scheduler
// keeps no state of its own for them.
// Rejection (at add_request, the request alone, with a reason): prompt_len == 0, max_tokens < 1,
// prompt_len + max_tokens > max_model_len, blocks for prompt_len + max_tokens > a pool,
// or (chunking off) prompt_len > max_tokens_per_step. Such a request never blocks others.
// Never crashes on load: with any cache size >= one maximal request it makes progress.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/request.h"
#include "engine/sched_kv_connector.h"
#include "engine/seesaw_tier.h"
#include "engine/step.h"
#include "kv/block_allocator.h"

namespace loom {

struct SchedulerConfig {
  int max_num_seqs = 256;          // running sequences (and sequences per step) at most
  int max_tokens_per_step = 2048;  // token budget of one step (prefill + decode tokens)
  int block_size = kDefaultKvBlockSize;
  int num_blocks = 0;              // KV cache size in blocks (one pool; see pool_shapes)
  int max_model_len = 4096;        // prompt + output tokens at most
  bool enable_chunked_prefill = true;
  double watermark = 0.01;  // fraction of num_blocks kept free when admitting (vLLM's watermark)
  // KV pools (kv/block_allocator.h KvPoolShape): empty = one pool of num_blocks. Otherwise [0] is
  // the initial shape and every shape the engine may switch to (rehome) is listed: a request is
  // rejected when it could not fit under one of them. num_blocks is then ignored.
  std::vector<KvPoolShape> pool_shapes;
  // Seesaw (seesaw_tier.h): phases (None: mixed steps), the CPU KV tier's capacity in tokens of the
  // whole model's KV, and whether swaps complete only when StepResult says so.
  PhaseMode phases = PhaseMode::None;
  int64_t tier_tokens = 0;
  bool async_swaps = false;
  // Copy each sequence's block table into ScheduledSeq::block_ids every step. Executors find KV
  // pages by sequence id and do not read them; tests that check the block accounting turn it on
  // (the copy was 14% of a long simulation).
  bool record_block_ids = false;

  // Throws loom::Error naming the field when a value is out of range.
  void validate() const;
};

struct AddResult {
  bool accepted = true;
  std::string reason;  // why it was rejected (empty when accepted)
};

// One token produced by a step, after stop conditions.
struct TokenEvent {
  RequestId seq_id = 0;
  TokenId token = 0;
  bool finished = false;  // this token ended the sequence
  FinishReason reason = FinishReason::kNone;
  // Its log-probabilities when the request asked (sampling.logprobs >= 0) and the executor gave
  // them (StepResult::logprobs).
  std::optional<TokenLogprobs> logprobs;
};

struct StepOutcome {
  std::vector<TokenEvent> tokens;  // one per sampled sequence still live at step end
  int num_finished = 0;
};

// Called after each sampled token is appended (after the eos and stop-token-sequence checks,
// before max_tokens): return true to stop the sequence with FinishReason::kStop. This is the hook
// for stop strings: the caller detokenises seq.output and matches seq.request.stop.stop_strings.
using StopCheck = std::function<bool(const Sequence& seq)>;

class Scheduler : private KvConnectorHost {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  const SchedulerConfig& config() const override { return config_; }

  // Queues a request. Rejected requests finish at once (FinishReason::kRejected) and appear in
  // drain_finished(). Throws loom::Error when the id is already known.
  AddResult add_request(Request request);

  // Builds the next step (possibly empty when there is nothing to do or nothing fits). Reserves
  // the blocks of every scheduled sequence; may preempt (batch.preempted).
  StepBatch schedule();

  // Applies the executor's result for `batch` (the last value returned by schedule()):
  // num_computed advances by each scheduled count, sampled tokens are appended and the stop
  // conditions applied in this order: eos (unless ignore_eos), stop token sequence, stop
  // check callback, max_tokens / max_model_len. Finished sequences free their blocks.
  // Sequences cancelled since schedule() are skipped. LOOM_CHECK when a sampling sequence has
  // no token in `result`.
  StepOutcome on_step_done(const StepBatch& batch, const StepResult& result);

  // The step failed: every live sequence of `batch` finishes with kError, blocks freed.
  void on_step_failed(const StepBatch& batch, const std::string& what);

  // Cancels a request in any state: frees every block it holds, finishes it with kAbort.
  // Returns false when the id is unknown or already finished.
  bool cancel(RequestId id);

  void set_stop_check(StopCheck check) { stop_check_ = std::move(check); }

  // Finished sequences since the last call (in finishing order), removed from the scheduler.
  std::vector<Sequence> drain_finished();

  // Live (unfinished) sequence, or nullptr.
  const Sequence* find(RequestId id) const;

  int num_waiting() const { return int(waiting_.size()); }  // including preempted
  int num_running() const { return int(running_.size()); }
  int num_free_blocks() const { return pools_.num_free(); }
  int num_used_blocks() const { return pools_.num_used(); }
  int num_blocks() const { return pools_.num_blocks(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  int64_t num_steps() const { return next_step_; }
  bool has_unfinished() const {
    return !waiting_.empty() || !running_.empty() || (connector_ && connector_->holds_any());
  }
  const KvBlockPools& pools() const { return pools_; }
  int watermark_blocks() const { return watermark_blocks_; }  // per pool

  // A plan switch moves no KV (the connector says so: Seesaw's resident sequences); rehome() is not used.
  bool keeps_kv_resident() const { return connector_ && connector_->keeps_kv_resident(); }

  // A plan switch to KV pools of another shape (a plan of another placement): every running
  // sequence's blocks are taken again from the new pools, most urgent first; those that no longer
  // fit are preempted (recomputed later), removed from `batch` (the step about to run) and listed
  // in batch.preempted. Returns the preempted ids.
  std::vector<RequestId> rehome(const KvPoolShape& shape, StepBatch& batch);
  // The sequences whose K/V is in the cache and how many tokens of each (running, num_computed > 0).
  std::vector<SeqExtent> kv_extents() const;

  // Hand-over between schedulers (a Nitsum pool moves requests between instances: cluster/pool.h).
  // extract(): takes a live sequence out (its blocks freed, out of the waiting / running sets)
  // and returns it with its state (request, output, num_computed, status); nullopt when `id` is
  // not live or is in the CPU tier (Seesaw). The K/V it had is the caller's to move or drop.
  std::optional<Sequence> extract(RequestId id);
  // adopt(): takes over a sequence extracted elsewhere. A running one (num_computed > 0) gets
  // blocks for all its tokens, like an admission (the watermark waived), and adopt returns true:
  // its K/V is to be moved here. When the pools cannot hold it, it is preempted instead
  // (num_computed = 0, it waits to be recomputed) and adopt returns false, as for a waiting one
  // (queued by urgency): any K/V it had is to be dropped. One that could never run here (the
  // rejection rules of add_request: e.g. a smaller cache than where it came from) finishes as
  // kRejected instead (drain_finished), also false. Throws loom::Error when the id is live here.
  bool adopt(Sequence seq);

  // The KV connector (null: none), and Seesaw's when it is one (SeesawTier: phases, tier counters).
  const SchedKvConnector* connector() const { return connector_.get(); }
  const SeesawTier* seesaw() const { return dynamic_cast<const SeesawTier*>(connector_.get()); }
  // Seesaw's state and counters (0 / Prefill without phases), read through seesaw().
  Phase phase() const { return seesaw() ? seesaw()->phase() : Phase::Prefill; }
  int64_t phase_switches() const { return seesaw() ? seesaw()->phase_switches() : 0; }
  int num_swapped() const { return seesaw() ? seesaw()->num_swapped() : 0; }
  int num_prefetching() const { return seesaw() ? seesaw()->num_prefetching() : 0; }
  int64_t num_await_steps() const { return seesaw() ? seesaw()->num_await_steps() : 0; }
  int64_t tier_reserved_tokens() const { return seesaw() ? seesaw()->reserved_tokens() : 0; }
  int64_t num_swapped_out() const { return seesaw() ? seesaw()->num_swapped_out() : 0; }
  int64_t num_swapped_in() const { return seesaw() ? seesaw()->num_swapped_in() : 0; }
  int prefill_surcharge(int64_t blocks) const { return seesaw() ? seesaw()->prefill_surcharge(blocks) : 0; }

 private:
  bool more_urgent(const Sequence& a, const Sequence& b) const;
  std::string reject_reason(const Request& r) const;  // "" when it may run (see Rejection above)
  void insert_waiting(Sequence* s);
  void preempt(Sequence* s);
  void finish(Sequence* s, FinishReason reason, std::string detail);
  bool may_chunk(const Sequence& s) const;
  ScheduledSeq make_entry(const Sequence& s, int n) const;
  bool apply_stops(Sequence* s);
  bool holds_in(const Sequence& s, const std::vector<int>& pools) const;
  void set_watermark();
  std::vector<int> admission_need(const Sequence& s, int tokens) const;  // per pool, with the connector's charge
  void release_blocks(Sequence* s);  // its block table, then the connector's charge
  void insert_running(Sequence* s);

  // KvConnectorHost (sched_kv_connector.h)
  const std::vector<Sequence*>& running() const override { return running_; }
  const std::deque<Sequence*>& waiting() const override { return waiting_; }
  KvBlockPools& block_pools() override { return pools_; }
  bool fits(const std::vector<int>& need) const override;
  bool head_admissible() const override;
  void run(Sequence* s) override;
  void park(Sequence* s) override;

  SchedulerConfig config_;
  std::unique_ptr<SchedKvConnector> connector_;  // null: none
  KvBlockPools pools_;
  int watermark_blocks_ = 0;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> live_;
  std::deque<Sequence*> waiting_;   // sorted by urgency
  std::vector<Sequence*> running_;  // sorted by urgency
  std::vector<Sequence> finished_;
  std::unordered_set<RequestId> known_ids_;  // every id ever added (duplicate check)
  StopCheck stop_check_;
  int64_t next_step_ = 0;
  int64_t next_admit_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace loom
