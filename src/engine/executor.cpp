#include "engine/executor.h"

#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"

namespace loom {

int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, int64_t position) {
  if (p.temperature <= 0.0f) return kernels::argmax(logits, vocab);
  kernels::SamplingParams kp;
  kp.temperature = p.temperature;
  kp.top_k = p.top_k;
  kp.top_p = p.top_p;
  Rng rng(p.seed * 0x9e3779b97f4a7c15ull + uint64_t(position));
  return kernels::sample(logits, vocab, kp, rng.uniform());
}

KernelExecutor::KernelExecutor(Transformer& model, KvStorage& kv) : model_(model), kv_(kv) {}

void to_forward_batch(const StepBatch& batch, int num_blocks, bool with_logits, ForwardBatch& fb) {
  fb.tokens.clear();
  fb.seqs.clear();
  for (const ScheduledSeq& s : batch.seqs) {
    LOOM_CHECK(int(s.token_ids.size()) == s.num_tokens);
    fb.tokens.insert(fb.tokens.end(), s.token_ids.begin(), s.token_ids.end());
    for (BlockId b : s.block_ids) LOOM_CHECK(b >= 0 && b < num_blocks, "block id ", b, " of ", num_blocks);
    ForwardSeq f;
    f.start_pos = s.start;
    f.n_tokens = s.num_tokens;
    f.block_table = s.block_ids.data();
    f.n_blocks = int(s.block_ids.size());
    f.want_logits = with_logits && s.sample;
    fb.seqs.push_back(f);
  }
}

StepResult sample_step(const StepBatch& batch, const float* logits, int n_rows, int vocab) {
  StepResult res;
  int row = 0;
  for (const ScheduledSeq& s : batch.seqs) {
    if (!s.sample) continue;
    LOOM_CHECK(row < n_rows, "step ", batch.step_index, ": ", n_rows, " logit rows for more samples");
    // The sampled token will sit at position start + num_tokens.
    res.sampled.push_back(
        {s.seq_id, sample_token(logits + int64_t(row) * vocab, vocab, s.sampling, s.start + s.num_tokens)});
    ++row;
  }
  return res;
}

StepResult KernelExecutor::execute(const StepBatch& batch) {
  LOOM_CHECK(batch.block_size == kv_.layout.block_size, "block size ", batch.block_size, " vs cache ",
             kv_.layout.block_size);
  to_forward_batch(batch, int(kv_.layout.num_blocks), true, fb_);
  const int n_rows = model_.forward(fb_, kv_, logits_);
  ++num_steps_;
  return sample_step(batch, logits_.data(), n_rows, model_.config().vocab_size);
}

}  // namespace loom
