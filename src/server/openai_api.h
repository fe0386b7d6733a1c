// The OpenAI-compatible request and response bodies of `loom serve` (JSON only; no HTTP here).
//
// Requests (POST /v1/completions, /v1/chat/completions) are parsed and validated up front into
// an ApiRequest; anything wrong raises ApiError with the HTTP status and OpenAI's error shape
//   {"error": {"message": ..., "type": "invalid_request_error", "param": ..., "code": ...}}
// so the handler answers 4xx before the engine sees the request.
//
// Supported fields (OpenAI's names; vLLM extensions marked *):
//   model, prompt (completions: a string, a list of token ids, or a one-element list of either),
//   messages (chat: role + content string or [{type: "text", text}] parts),
//   max_tokens (>= 1; chat also max_completion_tokens, which wins), temperature (>= 0),
//   top_p (in (0, 1]), top_k* (>= -1; -1 and 0 = off), seed (integer), n (must be 1),
//   stop (string or list of at most 4 non-empty strings of at most 1024 bytes each: OpenAI's count
//   bound; the bytes bound keeps the stop filter's held-back text short), stream, stream_options.include_usage
//   (only with stream), ignore_eos*, priority* (int, lower = more urgent), and loom's
//   slo {ttft_ms, tpot_ms} (>= 0, ms).
//   presence_penalty, frequency_penalty (in [-2, 2]), logit_bias ({token id: bias in [-100, 100]},
//   ids checked against the vocabulary by the server), user (accepted, unused),
//   logprobs (completions: N in [0, 20]; chat: a boolean, with top_logprobs N in [0, 20], which
//   requires logprobs: true); see LogprobsJson for what comes back.
// Unknown fields are ignored (clients send many optional ones); fields that change the output
// in ways loom cannot honour (echo, best_of > 1, n != 1, suffix, tools,
// tool_choice, functions, function_call, response_format other than text) are rejected with a
// 400 naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "engine/step.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace loom::server {

// An error answered to the client. status: 400 (bad request), 404 (unknown route or model),
// 429 (queue full), 500 (the engine failed on the request).
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};

// {"error": {...}} for e.
nlohmann::json error_json(const ApiError& e);

enum class Endpoint { kCompletions, kChat };

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // "" when absent
  // Completions: the prompt as text, or as token ids (prompt_is_ids).
  std::string prompt_text;
  std::vector<TokenId> prompt_ids;
  bool prompt_is_ids = false;
  // Chat.
  std::vector<ChatMessage> messages;

  std::optional<int> max_tokens;  // absent: completions 16, chat the rest of the context
  SamplingParams sampling;        // temperature 1, top_p 1, top_k 0 unless given
  bool has_seed = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
  int priority = 0;
  std::optional<Slo> slo;
  std::string tier;  // SLO tier name (loom extension, Nitsum); "" = the server's first tier
  static constexpr size_t kMaxLogitBias = 1024;  // logit_bias entries at most
  static constexpr size_t kMaxStopStrings = 4;    // OpenAI's bound
  static constexpr size_t kMaxStopBytes = 1024;   // per stop string
};

// Parses and validates a request body. Throws ApiError (400) naming the field.
ApiRequest parse_api_request(Endpoint endpoint, const std::string& body);

// Usage block.
nlohmann::json usage_json(int prompt_tokens, int completion_tokens);

// "stop", "length", or null (json) for a reason that is not a normal finish.
nlohmann::json finish_reason_json(FinishReason r);

// A request's choices[0].logprobs, built token by token (one per request; streaming calls add()
// once per chunk, and text_offset continues across chunks). Shapes, as OpenAI's:
//   completions: {"tokens": [str], "token_logprobs": [float], "top_logprobs": [{str: float}],
//                 "text_offset": [int]}
//   chat:        {"content": [{"token": str, "logprob": float, "bytes": [int],
//                              "top_logprobs": [{"token", "logprob", "bytes"}]}]}
// A token's string is its bytes (Tokenizer::token_piece_bytes after the previous sampled token),
// invalid or incomplete UTF-8 replaced by U+FFFD (a byte-level token may hold part of a
// character); "bytes" has the exact bytes. text_offset: the code points of the completion text
// before the token (bytes of a character still incomplete are not counted). Completions'
// top_logprobs objects are keyed by token string: two alternatives with the same string keep the
// more likely one. The eos token that ends a request has no entry (it is not text); a stop string
// cuts the text but not the entries (they run through the token that completed it).
class LogprobsJson {
 public:
  LogprobsJson(Endpoint endpoint, const Tokenizer& tok) : endpoint_(endpoint), tok_(&tok) {}
  // The logprobs object for these tokens (continuing the earlier ones), or null when empty.
  nlohmann::json add(const std::vector<TokenLogprobs>& tokens);

 private:
  Endpoint endpoint_;
  const Tokenizer* tok_;
  int32_t prev_ = -1;     // the previous sampled token (-1: none yet)
  int64_t offset_ = 0;    // code points of the text so far
  std::string partial_;   // bytes of an incomplete character at the end of the text so far
};

// Non-streaming response bodies; logprobs: choices[0].logprobs (null: not asked for).
nlohmann::json completion_response(const std::string& id, int64_t created, const std::string& model,
                                   const std::string& text, FinishReason reason, int prompt_tokens,
                                   int completion_tokens, const nlohmann::json& logprobs = nullptr);
nlohmann::json chat_response(const std::string& id, int64_t created, const std::string& model,
                             const std::string& text, FinishReason reason, int prompt_tokens,
                             int completion_tokens, const nlohmann::json& logprobs = nullptr);

// One streaming chunk (the JSON after "data: "). text_or_null: the delta; finish: a reason or
// null; role_only (chat's first chunk): delta {"role": "assistant", "content": ""}. With
// include_usage every chunk carries "usage": null, as OpenAI's do. logprobs: those of the
// chunk's tokens (LogprobsJson::add), else null.
nlohmann::json stream_chunk(Endpoint endpoint, const std::string& id, int64_t created,
                            const std::string& model, const std::string& text,
                            const nlohmann::json& finish, bool role_only, bool include_usage,
                            const nlohmann::json& logprobs = nullptr);
// The usage chunk sent last when include_usage: "choices": [] and the usage.
nlohmann::json stream_usage_chunk(Endpoint endpoint, const std::string& id, int64_t created,
                                  const std::string& model, int prompt_tokens,
                                  int completion_tokens);

}  // namespace loom::server
