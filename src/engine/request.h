// Requests (what a client asks for) and sequences (the scheduler's state for one request).
//
// One sequence per request (no n > 1 / beam search yet): the sequence id IS the request id.
// Token positions of a sequence: [0, prompt_len) is the prompt, then the generated tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/block_allocator.h"

namespace loom {

using RequestId = int64_t;
using TokenId = int32_t;

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // nucleus mass in (0, 1]; 1 = off
  int top_k = 0;             // 0 = off
  uint64_t seed = 0;         // the executor derives the stream from (seed, position)
  // OpenAI's logit adjustments, applied to the raw logits before temperature, top-k/top-p and
  // greedy alike (OpenAI API reference, "frequency and presence penalties"):
  //   logit[t] += logit_bias[t] - frequency_penalty * c[t] - presence_penalty * (c[t] > 0)
  // with c[t] the times t occurs in the sequence's output so far.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::pair<TokenId, float>> logit_bias;  // (token id, bias); ids unique
  // OpenAI's logprobs (completions `logprobs: N`, chat `logprobs: true` + `top_logprobs: N`):
  // -1 = off; N >= 0 = with each sampled token, its log-probability and the N most likely tokens'
  // (rank_engine.h token_logprobs). Computed only for the requests that ask.
  int logprobs = -1;
  static constexpr int kMaxLogprobs = 20;  // N at most (vLLM's default max_logprobs)
  bool adjusts_logits() const { return presence_penalty != 0.0f || frequency_penalty != 0.0f || !logit_bias.empty(); }
  bool has_penalties() const { return presence_penalty != 0.0f || frequency_penalty != 0.0f; }
};

struct StopConditions {
  std::vector<TokenId> eos_ids;                     // any of these ends the request (reason stop)
  bool ignore_eos = false;                          // benchmarks/simulation: run to max_tokens
  std::vector<std::vector<TokenId>> stop_token_seqs;  // output ends with one -> stop
  // Checked by the caller who detokenises (Scheduler::set_stop_check); the scheduler only stores
  // them for that callback.
  std::vector<std::string> stop_strings;
};

// Optional latency objective (used by SLO-aware policies and reported by Metrics).
struct Slo {
  double ttft_ms = 0;  // time to first token
  double tpot_ms = 0;  // time per output token after the first
};

struct Request {
  RequestId id = 0;  // unique among the scheduler's live and finished requests
  std::vector<TokenId> prompt;
  // Length-only requests (simulator, synthetic load): when `prompt` is empty the prompt is
  // `synthetic_prompt_len` tokens of id 0 (never materialised by the scheduler).
  int synthetic_prompt_len = 0;
  int max_tokens = 16;  // >= 1 output tokens at most
  StopConditions stop;
  SamplingParams sampling;
  int priority = 0;  // lower = more urgent (vLLM convention); ties broken by arrival then id
  std::optional<Slo> slo;
  int tier = -1;  // SLO tier (an index of the server's cluster::SloTiers); -1: none
  double arrival_s = 0;  // on the loop's Clock (seconds)

  int prompt_len() const { return prompt.empty() ? synthetic_prompt_len : int(prompt.size()); }
};

enum class SeqStatus : uint8_t {
  kWaiting,    // queued, never admitted
  kRunning,    // admitted: holds KV blocks, scheduled each step
  kPreempted,  // evicted by recomputation: no blocks, waiting again, num_computed == 0
  kSwapped,    // prefilled, its KV in the CPU tier (Seesaw phases): no blocks, onboarded to decode
  kFinished,
};
enum class FinishReason : uint8_t {
  kNone,      // not finished
  kStop,      // eos, stop token sequence or stop string
  kLength,    // max_tokens (or max_model_len) reached
  kAbort,     // cancelled by the client
  kError,     // the executor failed on it
  kRejected,  // could never run (too long for the cache / max_model_len, bad parameters)
};
std::string_view status_name(SeqStatus s);
std::string_view finish_reason_name(FinishReason r);  // "stop", "length", "abort", ...

// Scheduler state of one request.
// Invariants: 0 <= num_computed <= num_tokens(); num_computed positions have their K/V in the
// cache (written by completed steps); block_table.num_slots() >= num_computed while running;
// a sequence that is not running holds no blocks.
struct Sequence {
  Request request;
  std::vector<TokenId> output;  // generated tokens (including a matched stop sequence)
  int num_computed = 0;         // positions [0, num_computed) are in the KV cache
  SeqStatus status = SeqStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  std::string finish_detail;  // human-readable why (rejection reason, which stop matched)
  BlockTable block_table;
  int num_preemptions = 0;
  int64_t admit_order = -1;  // order of first admission (for stable tie breaks)
  // The step (StepBatch::step_index) whose batch Scheduler::schedule() last put it in; -1: none.
  int64_t batched_in = -1;

  RequestId id() const { return request.id; }
  int prompt_len() const { return request.prompt_len(); }
  int num_output() const { return int(output.size()); }
  int num_tokens() const { return prompt_len() + num_output(); }
  // Token at position pos (< num_tokens()).
  TokenId token_at(int pos) const;
  // Positions not yet in the KV cache.
  int num_uncomputed() const { return num_tokens() - num_computed; }
  // Decode = exactly the last sampled token is left to compute. Anything else with uncomputed
  // positions (the prompt, or prompt + outputs after a preemption) is a prefill.
  bool is_decode() const { return num_output() > 0 && num_uncomputed() == 1; }
  bool finished() const { return status == SeqStatus::kFinished; }
};

}  // namespace loom
