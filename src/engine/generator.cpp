#include "engine/generator.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"

namespace loom {

GenerateResult generate(SingleRankModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
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
  const KvStore& kv = model.kv();
  if (kv.block_size() != opts.block_size ||
      (max_pos + kv.block_size() - 1) / kv.block_size() * int64_t(c.n_layers) * c.n_kv_heads > kv.free_pages())
    fail("the model's KV store (", kv.free_pages(), " free pages of ", kv.block_size(), " tokens) cannot hold ",
         max_pos, " positions");
  struct Release {
    SingleRankModel& m;
    ~Release() { m.engine().release({0}); }
  } release{model};
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
    const ForwardSeq s{0, pos, int(n), pos + n == n_prompt};
    b.seqs.push_back(s);
    model.forward(b, logits);
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
    b.seqs.push_back(ForwardSeq{0, pos, 1, true});
    model.forward(b, logits);
    ++pos;
    next = pick(logits.data());
  }
  res.decode_s = now_seconds() - t_start;
  return res;
}

GenerateResult generate(std::shared_ptr<const Model> model, ThreadPool* pool, const std::vector<int32_t>& prompt,
                        const GenerateOptions& opts, const std::function<bool(int32_t)>& on_token) {
  // Sized for the request, but never past the context (generate() rejects that, naming both).
  const int64_t tokens = std::min<int64_t>(int64_t(prompt.size()) + std::max(opts.max_new_tokens, 1),
                                           int64_t(model->config.max_seq_len) + 1);
  SingleRankModel m(std::move(model), pool, tokens, opts.block_size);
  return generate(m, prompt, opts, on_token);
}

}  // namespace loom
