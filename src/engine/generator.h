// Single-sequence generation on the single-rank model (rank_engine.h SingleRankModel): prefill the prompt (in chunks), then decode
// one token per step, streaming each token to a callback. This is the exact path the
// stories260K reference check runs (`next_tokens` of ../shared/models/stories260K/
// reference_greedy.jsonl); the batched engine must give the same tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/rng.h"
#include "engine/rank_engine.h"
#include "kernels/kernels.h"

namespace loom {

struct GenerateOptions {
  int max_new_tokens = 256;        // tokens to generate after the prompt
  int prefill_chunk = 512;         // prompt tokens per forward step
  kernels::SamplingParams sampling;  // temperature 0 = greedy
  uint64_t seed = 0;
  std::vector<int32_t> stop_ids;   // generation stops after producing one of these
  int block_size = kDefaultKvBlockSize;
};

struct GenerateResult {
  std::vector<int32_t> tokens;     // generated tokens (a stop token, if hit, is the last one)
  bool stopped = false;            // ended on a stop id (else on max_new_tokens)
  double prefill_s = 0, decode_s = 0;
};

// Generates from `prompt` (non-empty) as sequence 0 of `model` (whose KV store must hold prompt +
// max_new_tokens tokens; its KV is released at the end). `on_token(id)` is called as each token is
// produced; returning false stops generation. Throws loom::Error when prompt + max_new_tokens
// exceeds the model's context, naming both.
GenerateResult generate(SingleRankModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                        const std::function<bool(int32_t)>& on_token = nullptr);
// The same on a single-rank model built for this prompt (weights prepared, KV sized to fit).
GenerateResult generate(std::shared_ptr<const Model> model, ThreadPool* pool, const std::vector<int32_t>& prompt,
                        const GenerateOptions& opts, const std::function<bool(int32_t)>& on_token = nullptr);

}  // namespace loom
