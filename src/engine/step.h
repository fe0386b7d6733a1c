// The step descriptor, and the two interfaces through which the shared scheduler drives either
// real kernels (engine) or a cost model (simulator):
//   StepExecutor: executes one StepBatch (engine: forward pass on ranks + sampling; simulator:
//                 prices the batch and advances its simulated clock).
//   Clock:        the time base of the loop (WallClock in the engine, a simulated clock in sim).
// Neither depends on kernels or models (ARCHITECTURE.md: the engine and the simulator share the
// scheduler and the policies).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "kv/block_allocator.h"
#include "parallel/kv_placement.h"

namespace loom {

// One sequence's work in a step: compute positions [start, start + num_tokens), writing their
// K/V into the slots given by block_ids (position p lives in block_ids[p / block_size] at offset
// p % block_size) and attending over [0, start + num_tokens) causally.
struct ScheduledSeq {
  RequestId seq_id = 0;
  int start = 0;       // first position computed this step (== tokens already in the KV cache)
  int num_tokens = 0;  // >= 1
  bool is_prefill = false;  // a prompt (or recomputation) chunk; false = one decode token
  // True when start + num_tokens == the sequence's length: this step samples its next token
  // (last chunk of a prefill, or a decode). Intermediate prefill chunks sample nothing.
  bool sample = false;
  std::vector<TokenId> token_ids;   // [num_tokens]: the tokens at positions [start, start+n)
  // The scheduler's KV blocks covering at least [0, start + num_tokens) (its accounting; ranks find
  // their pages by sequence id, so these do not travel in the step descriptor). Filled only with
  // SchedulerConfig::record_block_ids; empty otherwise.
  std::vector<BlockId> block_ids;
  SamplingParams sampling;          // used by the executor when `sample`
  // With sampling.has_penalties() and `sample`: each distinct output token so far and its count
  // (the penalties need them on whichever rank samples; empty otherwise).
  std::vector<std::pair<TokenId, int32_t>> output_counts;
  int priority = 0;                 // copied from the request (for policies / cost models)

  int context_len() const { return start + num_tokens; }
};

// Everything one forward step does. Built by Scheduler::schedule(), possibly annotated by a
// layout policy (plan), broadcast by rank 0, executed by a StepExecutor.
// Order of `seqs`: decodes first, then prefill chunks (continuing, then newly admitted).
struct StepBatch {
  int64_t step_index = 0;  // 0, 1, 2, ... per scheduler
  std::vector<ScheduledSeq> seqs;
  int block_size = kDefaultKvBlockSize;
  int num_tokens = 0;          // sum of seqs[i].num_tokens (<= max_tokens_per_step)
  int num_prefill_tokens = 0;  // of which in prefill chunks
  int num_decode_tokens = 0;   // of which decodes
  int num_sampled = 0;         // sequences with sample == true
  std::vector<RequestId> preempted;  // sequences preempted while building this batch (info)
  // The plan that runs the step: its id in the engine's PlanSet (set by the layout policy; 0 = the
  // initial plan) and its name (for metrics; not on the wire).
  int plan_id = 0;
  std::string plan;
  // When the step switches to a plan whose KV placement differs from the previous step's: the
  // sequences whose KV moves to the new placement and their computed lengths, for the migration
  // before the step runs. kv_resident false: they are every sequence holding KV (the ranks check
  // that they then hold exactly the new placement); true (Seesaw phases, seesaw_tier.h "Resident
  // sequences"): the sequences not listed stay where they are, in the placement that computed them.
  std::vector<SeqExtent> kv_seqs;
  bool kv_resident = false;
  // Seesaw phases (seesaw_tier.h PhaseMode): sequences whose KV leaves the ranks' stores for the CPU
  // tier before the step (swap-out, under the placement of the plan that computed it), and
  // sequences whose KV comes back from the tier under this step's plan (swap-in), with their lengths.
  // With asynchronous swaps (SchedulerConfig::async_swaps) both only start copies: a swapped-in
  // sequence decodes in a later step, once StepResult::swapped_in says every rank has it.
  std::vector<SeqExtent> swap_out, swap_in;
  // Asynchronous swaps: nothing can run until copies in flight complete; the step only waits for
  // them (not on the wire: every rank waits for its copies in a step without sequences).
  bool await_swaps = false;

  // Nothing to execute (no sequence, no swap to start or wait for).
  bool empty() const { return seqs.empty() && swap_out.empty() && swap_in.empty() && !await_swaps; }
};

struct SampledToken {
  RequestId seq_id = 0;
  TokenId token = 0;
};

// The log-probabilities of a sampled token, for a sequence with sampling.logprobs >= 0
// (rank_engine.h token_logprobs).
struct TokenLogprobs {
  RequestId seq_id = 0;
  TokenId token = 0;  // the sampled token
  float logprob = 0;  // its log-probability
  // The min(sampling.logprobs, vocab) most likely tokens and their log-probabilities, most likely
  // first (equal values: lower id first).
  std::vector<std::pair<TokenId, float>> top;
};

// Result of one step: exactly one token for every sequence of the batch with sample == true
// (any order). It is the executor's job to sample (with ScheduledSeq::sampling).
struct StepResult {
  std::vector<SampledToken> sampled;
  // One per sampled sequence whose sampling.logprobs >= 0 (any order); executors that do not
  // compute logits (the simulator) leave it empty.
  std::vector<TokenLogprobs> logprobs;
  // Asynchronous swaps (Seesaw §5.2): sequences whose swap-out / swap-in completed on every rank by
  // the end of this step (ready to be swapped in / ready to decode).
  std::vector<RequestId> swapped_out, swapped_in;
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Executes one non-empty batch. Must not keep references into `batch` after returning.
  // Throws on failure (the loop then finishes the batch's sequences with FinishReason::kError).
  virtual StepResult execute(const StepBatch& batch) = 0;
  // A sequence left the running set for good (finished, cancelled, rejected) or was preempted:
  // drop any per-sequence state (its blocks are already back in the allocator). Optional.
  virtual void release(RequestId /*seq_id*/) {}
};

// Seconds on a monotonic time base.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double now() = 0;
  // Returns once now() >= t (wall clock: sleeps; simulated clock: jumps). Used by the loop
  // when it is idle until the next arrival.
  virtual void wait_until(double t) = 0;
};

// Monotonic wall time, 0 at construction.
class WallClock : public Clock {
 public:
  WallClock();
  double now() override;
  void wait_until(double t) override;

 private:
  double origin_s_;
};

// A clock that moves only when told to: tests and the simulator (whose executor calls
// advance(step duration) inside execute()).
class ManualClock : public Clock {
 public:
  explicit ManualClock(double t0 = 0) : t_(t0) {}
  double now() override { return t_; }
  void wait_until(double t) override {
    if (t > t_) t_ = t;
  }
  void advance(double dt_s) { t_ += dt_s; }
  void set(double t) { t_ = t; }

 private:
  double t_;
};

}  // namespace loom
