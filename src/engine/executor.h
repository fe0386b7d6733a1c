// The engine's StepExecutor: runs a scheduler StepBatch as one batched forward pass (mixed
// prefill chunks and decode tokens) over the paged KV cache, then samples one token for every
// sequence that asks for it.
//
// Sampling is reproducible per request: the uniform draw for the token at position p of a
// request with seed s comes from Rng(hash(s, p)), so a preempted and recomputed sequence, or the
// same request in another batch, samples the same tokens.
#pragma once

#include <memory>
#include <vector>

#include "engine/step.h"
#include "engine/transformer.h"

namespace loom {

class KernelExecutor : public StepExecutor {
 public:
  // `kv` must have as many blocks as the scheduler hands out (SchedulerConfig::num_blocks).
  KernelExecutor(Transformer& model, KvStorage& kv);
  StepResult execute(const StepBatch& batch) override;

  // Steps executed and tokens processed (for metrics).
  int64_t num_steps() const { return num_steps_; }

 private:
  Transformer& model_;
  KvStorage& kv_;
  ForwardBatch fb_;
  std::vector<float> logits_;
  int64_t num_steps_ = 0;
};

// The token chosen from `logits[vocab]` for the sample at `position` of a request.
int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, int64_t position);

// Builds the forward batch of `batch` (block ids checked against `num_blocks`); want_logits
// follows ScheduledSeq::sample when `with_logits`, else is false everywhere. `fb` keeps pointers
// into `batch`.
void to_forward_batch(const StepBatch& batch, int num_blocks, bool with_logits, ForwardBatch& fb);

// One token for every sampling sequence of `batch`, from `logits` [n_rows, vocab] whose rows
// follow the sampling sequences in batch order (what Transformer::forward writes).
StepResult sample_step(const StepBatch& batch, const float* logits, int n_rows, int vocab);

}  // namespace loom
