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

StepResult KernelExecutor::execute(const StepBatch& batch) {
  LOOM_CHECK(batch.block_size == kv_.layout.block_size, "block size ", batch.block_size, " vs cache ",
             kv_.layout.block_size);
  fb_.tokens.clear();
  fb_.seqs.clear();
  for (const ScheduledSeq& s : batch.seqs) {
    LOOM_CHECK(int(s.token_ids.size()) == s.num_tokens);
    fb_.tokens.insert(fb_.tokens.end(), s.token_ids.begin(), s.token_ids.end());
    ForwardSeq f;
    f.start_pos = s.start;
    f.n_tokens = s.num_tokens;
    f.block_table = s.block_ids.data();
    f.n_blocks = int(s.block_ids.size());
    f.want_logits = s.sample;
    for (BlockId b : s.block_ids) LOOM_CHECK(b >= 0 && b < kv_.layout.num_blocks, "block id ", b);
    fb_.seqs.push_back(f);
  }
  const int n_rows = model_.forward(fb_, kv_, logits_);
  const int vocab = model_.config().vocab_size;
  StepResult res;
  int row = 0;
  for (const ScheduledSeq& s : batch.seqs) {
    if (!s.sample) continue;
    LOOM_CHECK(row < n_rows);
    // The sampled token will sit at position start + num_tokens.
    res.sampled.push_back({s.seq_id, sample_token(logits_.data() + int64_t(row) * vocab, vocab, s.sampling,
                                                  s.start + s.num_tokens)});
    ++row;
  }
  ++num_steps_;
  return res;
}

}  // namespace loom
