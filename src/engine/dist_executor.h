// SPMD execution of the engine's steps over a TP group (ARCHITECTURE.md "Ranks and the step
// loop"; PLANS.md "TP(t) — Megatron").
//
// Every rank of the group holds a Transformer over its shard (ShardSpec: its query heads, the KV
// heads they use, its FFN columns; Wo/W_down partial sums all-reduced over the group) and its own
// KvStorage with the SAME block ids as every other rank (same num_blocks; each stores only its KV
// heads). Rank 0 of the group owns the Scheduler and the EngineLoop; its StepExecutor is a
// DistExecutor:
//   execute(batch): 1. broadcast the step descriptor (step_codec.h) over the group;
//                   2. run its shard of the forward pass, which all-reduces with the followers;
//                   3. compute the logits of the sampled positions and sample (rank 0 only).
// Ranks 1.. run run_follower(): receive a descriptor, run the same forward pass without logits,
// repeat until the stop command.
//
// Descriptor transport: one broadcast of a fixed kInlineBytes buffer per step (size word +
// payload); a descriptor larger than that (long prefill chunks) follows in a second broadcast.
//
// Logits: the classifier is NOT sharded. After the last layer's all-reduce every rank holds the
// same final hidden states bit for bit (the all-reduce is deterministic and returns identical
// bits to all ranks), so rank 0 computes rmsnorm + classifier for the sampled rows itself and
// followers skip it. This costs rank 0 vocab*d MACs per sampled token that a vocab-sharded
// classifier would split t ways (plus a gather of logits); for the models this engine runs on CPU
// so far (vocab <= 128K, few sampled rows per step) the simpler form was chosen; sharding the
// classifier is a local change here.
//
// Failures: a communicator error (a peer failed or timed out) makes the group unusable; the
// executor remembers the first one (broken()) and fails every later step at once without touching
// the communicator, so the loop drains quickly and the caller can rethrow error().
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/step.h"
#include "engine/executor.h"
#include "engine/transformer.h"

namespace loom {

// Rank 0's side of the SPMD step loop, shared by every leader executor: sends each step's
// descriptor (or, once, the stop command) to the group, and remembers a failure. A step that
// fails midway leaves the followers inside it, so the group is unusable afterwards: every later
// step fails at once with the first error, and stop() sends nothing.
class StepLeader {
 public:
  explicit StepLeader(Communicator& group) : group_(group) {}
  // Throws the first failure's error when the group is broken.
  void check_usable() const;
  // Broadcasts `batch`, then runs `step()` (this rank's part); any exception marks the group
  // broken and is rethrown.
  template <typename F>
  StepResult run(const StepBatch& batch, F&& step) {
    check_usable();
    try {
      send(batch);
      return step();
    } catch (const std::exception& e) {
      broken_ = true;
      error_ = e.what();
      throw;
    }
  }
  void stop();
  bool broken() const { return broken_; }
  const std::string& error() const { return error_; }

 private:
  void send(const StepBatch& batch);
  Communicator& group_;
  std::vector<uint8_t> wire_, inline_;
  bool stopped_ = false;
  bool broken_ = false;
  std::string error_;
};

class DistExecutor : public StepExecutor {
 public:
  // Bytes of the per-step broadcast (a size word and up to kInlineBytes - 8 descriptor bytes).
  static constexpr std::size_t kInlineBytes = 4096;

  // `group` is the TP group (this rank is its rank 0); `model`/`kv` this rank's shard. All must
  // outlive the executor.
  DistExecutor(Communicator& group, Transformer& model, KvStorage& kv);

  StepResult execute(const StepBatch& batch) override;

  // Sends the stop command to the followers (once; later calls and calls on a broken group do
  // nothing). Call before the group is destroyed when the engine is done.
  void stop() { leader_.stop(); }

  bool broken() const { return leader_.broken(); }
  const std::string& error() const { return leader_.error(); }
  int64_t num_steps() const { return kernel_.num_steps(); }

 private:
  StepLeader leader_;
  KernelExecutor kernel_;
};

// The loop of a TP group's rank != 0: executes the descriptors broadcast by rank 0 with this
// rank's shard until the stop command. Returns the number of steps executed. Throws loom::Error
// when the group fails (a peer failed, a timeout) or a descriptor is malformed.
// `before_step`, when set, is called with each decoded batch before it executes (tracing, fault
// injection in tests).
int64_t run_follower(Communicator& group, Transformer& model, KvStorage& kv,
                     const std::function<void(const StepBatch&)>& before_step = nullptr);

// The loop every follower runs (run_follower, run_shift_follower): receives each descriptor from
// `group` rank 0, checks its KV block size against `kv`, calls `before_step`, builds the forward
// batch (want_logits as scheduled when `with_logits`, else off) and calls `forward`, until the
// stop command. Returns the number of steps executed.
int64_t follow_steps(Communicator& group, const KvStorage& kv, bool with_logits,
                     const std::function<void(const StepBatch&)>& before_step,
                     const std::function<void(const StepBatch&, const ForwardBatch&)>& forward);

// One step descriptor (step_codec.h) from `group` rank 0 to the others: on rank 0 `wire` holds
// the encoded descriptor, on the others it receives it; `inline_buf` is scratch (kInlineBytes).
// Used by every executor that leads a group (DistExecutor, ShiftExecutor).
void broadcast_descriptor(Communicator& group, std::vector<uint8_t>& wire, std::vector<uint8_t>& inline_buf);


}  // namespace loom
