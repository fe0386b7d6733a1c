#include "engine/generator.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"

namespace loom {

GenerateResult generate(Transformer& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                        const std::function<bool(int32_t)>& on_token) {
  const ModelConfig& c = model.config();
  const int64_t n_prompt = int64_t(prompt.size());
  if (n_prompt == 0) fail("the prompt is empty (no tokens after tokenisation)");
  if (n_prompt > c.max_seq_len)
    fail("prompt has ", n_prompt, " tokens, over the model's context of ", c.max_seq_len);
  if (opts.max_new_tokens < 0) fail("-n must be >= 0, got ", opts.max_new_tokens);
  if (n_prompt + opts.max_new_tokens > c.max_seq_len)
    fail("prompt (", n_prompt, " tokens) + -n ", opts.max_new_tokens, " = ", n_prompt + opts.max_new_tokens,
         " exceeds the model's context of ", c.max_seq_len, " tokens");
  for (int32_t t : prompt)
    if (t < 0 || t >= c.vocab_size) fail("prompt token id ", t, " outside the vocabulary (", c.vocab_size, ")");

  // The last generated token is sampled but never fed back, so the cache holds at most
  // n_prompt + max_new_tokens - 1 positions.
  const int64_t max_pos = n_prompt + std::max(opts.max_new_tokens, 1);
  KvLayout lay;
  lay.n_layers = c.n_layers;
  lay.n_kv_heads = model.shard().n_kv_heads;
  lay.head_dim = c.head_dim;
  lay.block_size = opts.block_size;
  lay.num_blocks = (max_pos + lay.block_size - 1) / lay.block_size;
  KvStorage kv(lay);
  std::vector<int32_t> table(size_t(lay.num_blocks));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);

  GenerateResult res;
  Rng rng(opts.seed);
  std::vector<float> logits;
  auto pick = [&](const float* row) {
    return opts.sampling.temperature <= 0.0f ? kernels::argmax(row, c.vocab_size)
                                             : kernels::sample(row, c.vocab_size, opts.sampling, rng.uniform());
  };

  // Prefill in chunks; only the last chunk asks for logits.
  double t_start = now_seconds();
  int64_t pos = 0;
  int32_t next = -1;
  while (pos < n_prompt) {
    const int64_t n = std::min<int64_t>(std::max(opts.prefill_chunk, 1), n_prompt - pos);
    ForwardBatch b;
    b.tokens.assign(prompt.begin() + pos, prompt.begin() + pos + n);
    ForwardSeq s;
    s.start_pos = pos;
    s.n_tokens = int(n);
    s.block_table = table.data();
    s.n_blocks = int(table.size());
    s.want_logits = pos + n == n_prompt;
    b.seqs.push_back(s);
    model.forward(b, kv, logits);
    pos += n;
    if (s.want_logits) next = pick(logits.data());
  }
  res.prefill_s = now_seconds() - t_start;

  t_start = now_seconds();
  for (int i = 0; i < opts.max_new_tokens; ++i) {
    res.tokens.push_back(next);
    const bool stop = std::find(opts.stop_ids.begin(), opts.stop_ids.end(), next) != opts.stop_ids.end();
    if (on_token && !on_token(next)) break;
    if (stop) {
      res.stopped = true;
      break;
    }
    if (i + 1 == opts.max_new_tokens) break;
    ForwardBatch b;
    b.tokens = {next};
    ForwardSeq s;
    s.start_pos = pos;
    s.n_tokens = 1;
    s.block_table = table.data();
    s.n_blocks = int(table.size());
    s.want_logits = true;
    b.seqs.push_back(s);
    model.forward(b, kv, logits);
    ++pos;
    next = pick(logits.data());
  }
  res.decode_s = now_seconds() - t_start;
  return res;
}

}  // namespace loom
