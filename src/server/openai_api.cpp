#include "server/openai_api.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/json_bounded.h"
#include "model/bpe_pretokenize.h"

namespace loom::server {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message, const std::string& code = "") {
  ApiError e;
  e.status = 400;
  e.param = param;
  e.message = message;
  e.code = code;
  throw e;
}

bool present(const json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

// Error messages quote the client's values through json_excerpt: capped, and rendered without
// recursion (a value nested 52k deep once crashed the handler thread through dump()).
std::string shown(const json& v) { return json_excerpt(v, 64); }

// Integer field: JSON integers, and floats with an integral value (some clients send 16.0).
// Integers above 2^63-1 (JSON allows them; nlohmann reads them as unsigned) are reported with
// their true value, not wrapped to a negative one.
int64_t get_int(const json& v, const std::string& name) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(name, cat("'", name, "' = ", v.get<uint64_t>(), " is out of range (at most 2^63-1)"));
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d)) {
      if (std::fabs(d) < 9.0e18) return int64_t(d);
      bad(name, cat("'", name, "' = ", shown(v), " is out of range (at most 2^63-1)"));
    }
  }
  bad(name, cat("'", name, "' must be an integer, got ", shown(v)));
}

double get_number(const json& v, const std::string& name) {
  if (!v.is_number()) bad(name, cat("'", name, "' must be a number, got ", shown(v)));
  const double d = v.get<double>();
  if (!std::isfinite(d)) bad(name, cat("'", name, "' must be finite"));
  return d;
}

bool get_bool(const json& v, const std::string& name) {
  if (!v.is_boolean()) bad(name, cat("'", name, "' must be a boolean, got ", shown(v)));
  return v.get<bool>();
}

std::string get_string(const json& v, const std::string& name) {
  if (!v.is_string()) bad(name, cat("'", name, "' must be a string, got ", shown(v)));
  return v.get<std::string>();
}

constexpr int kMaxLogprobs = SamplingParams::kMaxLogprobs;

// A logprobs count (completions' logprobs, chat's top_logprobs): an integer in [0, kMaxLogprobs].
int get_logprobs_count(const json& v, const std::string& name) {
  const int64_t n = get_int(v, name);
  if (n < 0 || n > kMaxLogprobs) bad(name, cat("'", name, "' must be in [0, ", kMaxLogprobs, "], got ", n));
  return int(n);
}

std::vector<TokenId> get_token_ids(const json& v, const std::string& name) {
  std::vector<TokenId> ids;
  ids.reserve(v.size());
  for (const json& x : v) {
    if (!x.is_number_integer()) bad(name, cat("'", name, "' token ids must be integers, got ", shown(x)));
    if (x.is_number_unsigned() ? x.get<uint64_t>() > uint64_t(std::numeric_limits<TokenId>::max())
                               : (x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<TokenId>::max()))
      bad(name, cat("'", name, "' token id ", shown(x), " is out of range [0, ",
                    std::numeric_limits<TokenId>::max(), "]"));
    ids.push_back(TokenId(x.get<int64_t>()));
  }
  return ids;
}

void parse_prompt(const json& p, ApiRequest* r) {
  auto set_text = [&](const json& s) {
    r->prompt_text = s.get<std::string>();
    r->prompt_is_ids = false;
  };
  if (p.is_string()) return set_text(p);
  if (!p.is_array())
    bad("prompt", cat("'prompt' must be a string, a list of token ids, or a list of one of those; got ",
                      p.type_name()));
  if (p.empty()) bad("prompt", "'prompt' must not be empty");
  if (p[0].is_number_integer()) {
    r->prompt_ids = get_token_ids(p, "prompt");
    r->prompt_is_ids = true;
    return;
  }
  // A batch of prompts: only one (n = 1, one choice).
  if (p.size() != 1)
    bad("prompt", cat("batched prompts are not supported: 'prompt' has ", p.size(),
                      " entries, expected 1"));
  if (p[0].is_string()) return set_text(p[0]);
  if (p[0].is_array()) {
    if (p[0].empty()) bad("prompt", "'prompt' must not be empty");
    r->prompt_ids = get_token_ids(p[0], "prompt");
    r->prompt_is_ids = true;
    return;
  }
  bad("prompt", cat("'prompt' entries must be strings or token id lists, got ", p[0].type_name()));
}

void parse_messages(const json& m, ApiRequest* r) {
  if (!m.is_array()) bad("messages", cat("'messages' must be a list, got ", m.type_name()));
  if (m.empty()) bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < m.size(); ++i) {
    const json& x = m[i];
    const std::string where = cat("messages[", i, "]");
    if (!x.is_object()) bad(where, cat("'", where, "' must be an object, got ", x.type_name()));
    if (!present(x, "role")) bad(where + ".role", cat("'", where, ".role' is missing"));
    ChatMessage msg;
    msg.role = get_string(x["role"], where + ".role");
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "developer")
      bad(where + ".role",
          cat("'", where, ".role' must be system, developer, user or assistant, got '", text_excerpt(msg.role),
              "'"));
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for the system role
    if (!present(x, "content")) {
      if (msg.role == "assistant") {
        r->messages.push_back(msg);
        continue;
      }
      bad(where + ".content", cat("'", where, ".content' is missing"));
    }
    const json& c = x["content"];
    if (c.is_string()) {
      msg.content = c.get<std::string>();
    } else if (c.is_array()) {
      for (const json& part : c) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string())
          bad(where + ".content", cat("'", where, ".content' parts must be {\"type\": \"text\", \"text\": ...}"));
        msg.content += part["text"].get<std::string>();
      }
    } else {
      bad(where + ".content", cat("'", where, ".content' must be a string or a list of text parts"));
    }
    r->messages.push_back(std::move(msg));
  }
}

// Issue 19, defect 10: the OpenAI fields loom implements (logit_bias, presence_penalty,
// frequency_penalty: engine/request.h SamplingParams; user: accepted, not used; logprobs and
// top_logprobs: parse_api_request) and the ones it
// does not (a 400 naming the field, as vLLM answers what it does not support, rather than
// silently ignoring them).
void parse_logit_fields(const json& b, ApiRequest* r) {
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (!present(b, key)) continue;
    const double v = get_number(b[key], key);
    if (v < -2 || v > 2) bad(key, cat("'", key, "' must be in [-2, 2], got ", v));
    (std::string(key) == "presence_penalty" ? r->sampling.presence_penalty : r->sampling.frequency_penalty) = float(v);
  }
  if (present(b, "logit_bias")) {
    const json& lb = b["logit_bias"];
    if (!lb.is_object()) bad("logit_bias", cat("'logit_bias' must be an object {token id: bias}, got ", lb.type_name()));
    if (lb.size() > ApiRequest::kMaxLogitBias)
      bad("logit_bias", cat("'logit_bias' has ", lb.size(), " entries, more than ", ApiRequest::kMaxLogitBias));
    for (auto it = lb.begin(); it != lb.end(); ++it) {
      const std::string& k = it.key();
      const std::string shown = k.size() > 24 ? k.substr(0, 24) + "..." : k;
      if (k.empty() || k.size() > 10 || k.find_first_not_of("0123456789") != std::string::npos ||
          (k.size() > 1 && k[0] == '0'))
        bad("logit_bias", cat("'logit_bias' keys must be token ids (decimal integers), got '", shown, "'"));
      const int64_t id = std::stoll(k);
      if (id > std::numeric_limits<TokenId>::max())
        bad("logit_bias", cat("'logit_bias' token id ", k, " is out of range"));
      const double v = get_number(it.value(), "logit_bias");
      if (v < -100 || v > 100) bad("logit_bias", cat("'logit_bias' values must be in [-100, 100], got ", v, " for ", k));
      r->sampling.logit_bias.emplace_back(TokenId(id), float(v));
    }
  }
  if (present(b, "user")) get_string(b["user"], "user");  // accepted (OpenAI: an end-user id), unused
  // Not implemented: refused by name rather than ignored.
  if (present(b, "suffix")) {
    const json& sfx = b["suffix"];
    if (!(sfx.is_string() && sfx.get<std::string>().empty()))
      bad("suffix", "'suffix' (insertion after the completion) is not supported");
  }
  for (const char* key : {"tools", "functions"}) {
    if (!present(b, key)) continue;
    if (!(b[key].is_array() && b[key].empty()))
      bad(key, cat("'", key, "' (tool and function calling) is not supported"));
  }
  for (const char* key : {"tool_choice", "function_call"}) {
    if (!present(b, key)) continue;
    if (!(b[key].is_string() && b[key].get<std::string>() == "none"))
      bad(key, cat("'", key, "' (tool and function calling) is not supported"));
  }
  if (present(b, "response_format")) {
    const json& rf = b["response_format"];
    const bool text = rf.is_object() && rf.contains("type") && rf["type"].is_string() && rf["type"] == "text";
    if (!text)
      bad("response_format", "'response_format' other than {\"type\": \"text\"} (JSON mode, JSON schema) is not supported");
  }
}

}  // namespace

json error_json(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

ApiRequest parse_api_request(Endpoint endpoint, const std::string& body) {
  json b;
  try {
    // Depth- and size-bounded (core/json_bounded.h); a number out of the double range (1e400)
    // and invalid UTF-8 are parse errors here, answered with 400 like any other.
    b = parse_json_bounded(body, "the request body", kRequestJsonLimits);
  } catch (const Error& e) {
    bad("", e.what(), "invalid_json");
  }
  if (!b.is_object()) bad("", cat("the request body must be a JSON object, got ", b.type_name()));
  ApiRequest r;
  r.endpoint = endpoint;
  if (present(b, "model")) r.model = get_string(b["model"], "model");

  if (endpoint == Endpoint::kCompletions) {
    if (!present(b, "prompt")) bad("prompt", "'prompt' is required");
    parse_prompt(b["prompt"], &r);
    if (present(b, "echo") && get_bool(b["echo"], "echo")) bad("echo", "'echo' is not supported");
    if (present(b, "best_of") && get_int(b["best_of"], "best_of") != 1)
      bad("best_of", "'best_of' must be 1 (one sequence per request)");
    // OpenAI's legacy form: logprobs = N, the number of most likely tokens to return with each
    // token (0: the sampled token's only); false or null: off.
    if (present(b, "logprobs")) {
      const json& lp = b["logprobs"];
      if (lp.is_boolean()) {
        if (lp.get<bool>())
          bad("logprobs", cat("'logprobs' on /v1/completions is a number of tokens in [0, ", kMaxLogprobs,
                              "], not true"));
      } else {
        r.sampling.logprobs = get_logprobs_count(lp, "logprobs");
      }
    }
    if (present(b, "top_logprobs"))
      bad("top_logprobs", cat("'top_logprobs' is a chat completions field; /v1/completions takes 'logprobs': N (0 to ",
                              kMaxLogprobs, ")"));
  } else {
    if (!present(b, "messages")) bad("messages", "'messages' is required");
    parse_messages(b["messages"], &r);
    // Chat: logprobs = true returns the sampled tokens' log-probabilities, top_logprobs = N (which
    // requires logprobs = true, as OpenAI's API does) the N most likely tokens' with each.
    const bool want = present(b, "logprobs") && get_bool(b["logprobs"], "logprobs");
    int top = 0;
    if (present(b, "top_logprobs")) {
      top = get_logprobs_count(b["top_logprobs"], "top_logprobs");
      if (!want) bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    }
    if (want) r.sampling.logprobs = top;
  }

  // max_completion_tokens (chat) supersedes max_tokens, as in OpenAI's API.
  const char* max_key = "max_tokens";
  if (endpoint == Endpoint::kChat && present(b, "max_completion_tokens")) max_key = "max_completion_tokens";
  if (present(b, max_key)) {
    const int64_t m = get_int(b[max_key], max_key);
    if (m < 1) bad(max_key, cat("'", max_key, "' must be >= 1, got ", m));
    // Reported as given: clamping first made 1e12 read as 2147483647 in the context error.
    if (m > std::numeric_limits<int>::max())
      bad(max_key, cat("'", max_key, "' = ", m, " is more than any context length (at most ",
                       std::numeric_limits<int>::max(), ")"), "context_length_exceeded");
    r.max_tokens = int(m);
  }
  if (present(b, "temperature")) {
    const double t = get_number(b["temperature"], "temperature");
    if (t < 0) bad("temperature", cat("'temperature' must be >= 0, got ", t));
    if (t > double(std::numeric_limits<float>::max()))  // it is kept as a float
      bad("temperature", cat("'temperature' = ", t, " is outside the float range"));
    r.sampling.temperature = float(t);
  }
  if (present(b, "top_p")) {
    const double p = get_number(b["top_p"], "top_p");
    if (!(p > 0 && p <= 1)) bad("top_p", cat("'top_p' must be in (0, 1], got ", p));
    r.sampling.top_p = float(p);
  }
  if (present(b, "top_k")) {
    const int64_t k = get_int(b["top_k"], "top_k");
    if (k < -1) bad("top_k", cat("'top_k' must be -1 (off), 0 (off) or positive, got ", k));
    r.sampling.top_k = k < 0 ? 0 : int(std::min<int64_t>(k, std::numeric_limits<int>::max()));
  }
  if (present(b, "seed")) {
    r.sampling.seed = uint64_t(get_int(b["seed"], "seed"));
    r.has_seed = true;
  }
  if (present(b, "n")) {
    const int64_t n = get_int(b["n"], "n");
    if (n != 1) bad("n", cat("'n' must be 1 (one choice per request), got ", n));
  }
  if (present(b, "stop")) {
    const json& s = b["stop"];
    if (s.is_array() && s.size() > ApiRequest::kMaxStopStrings)
      bad("stop", cat("'stop' has ", s.size(), " strings; at most ", ApiRequest::kMaxStopStrings, " are allowed"));
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const json& x : s) r.stop.push_back(get_string(x, "stop"));
    } else {
      bad("stop", cat("'stop' must be a string or a list of strings, got ", s.type_name()));
    }
    for (const std::string& x : r.stop) {
      if (x.empty()) bad("stop", "'stop' strings must not be empty");
      if (x.size() > ApiRequest::kMaxStopBytes)
        bad("stop", cat("a 'stop' string of ", x.size(), " bytes ('", text_excerpt(x, 24), "'); at most ",
                        ApiRequest::kMaxStopBytes, " bytes are allowed"));
    }
  }
  if (present(b, "stream")) r.stream = get_bool(b["stream"], "stream");
  if (present(b, "stream_options")) {
    const json& so = b["stream_options"];
    if (!so.is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (present(so, "include_usage"))
      r.include_usage = get_bool(so["include_usage"], "stream_options.include_usage");
  }
  if (present(b, "ignore_eos")) r.ignore_eos = get_bool(b["ignore_eos"], "ignore_eos");
  if (present(b, "priority")) {
    const int64_t p = get_int(b["priority"], "priority");
    if (p < std::numeric_limits<int>::min() || p > std::numeric_limits<int>::max())
      bad("priority", cat("'priority' ", p, " is out of the int range"));
    r.priority = int(p);
  }
  if (present(b, "tier")) {
    if (!b["tier"].is_string()) bad("tier", cat("'tier' must be a string naming an SLO tier, got ", b["tier"].type_name()));
    r.tier = b["tier"].get<std::string>();
    if (r.tier.size() > 256) bad("tier", cat("'tier' is ", r.tier.size(), " bytes ('", text_excerpt(r.tier, 24),
                                             "'); SLO tier names are at most 256 bytes"));
  }
  if (present(b, "slo")) {
    const json& s = b["slo"];
    if (!s.is_object()) bad("slo", cat("'slo' must be an object {ttft_ms, tpot_ms}, got ", s.type_name()));
    Slo slo;
    if (present(s, "ttft_ms")) slo.ttft_ms = get_number(s["ttft_ms"], "slo.ttft_ms");
    if (present(s, "tpot_ms")) slo.tpot_ms = get_number(s["tpot_ms"], "slo.tpot_ms");
    if (slo.ttft_ms < 0) bad("slo.ttft_ms", cat("'slo.ttft_ms' must be >= 0, got ", slo.ttft_ms));
    if (slo.tpot_ms < 0) bad("slo.tpot_ms", cat("'slo.tpot_ms' must be >= 0, got ", slo.tpot_ms));
    r.slo = slo;
  }
  parse_logit_fields(b, &r);
  return r;
}

json usage_json(int prompt_tokens, int completion_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

json finish_reason_json(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    default: return nullptr;
  }
}

namespace {

// Bytes as UTF-8 text, each invalid or incomplete sequence as U+FFFD.
std::string utf8_lossy(const std::string& b) {
  std::string out;
  for (size_t i = 0; i < b.size();) {
    int len = 1;
    const uint32_t cp = utf8_decode(b, i, &len);
    utf8_append(out, cp);
    i += size_t(len);
  }
  return out;
}

json byte_list(const std::string& b) {
  json a = json::array();
  for (unsigned char c : b) a.push_back(int(c));
  return a;
}

}  // namespace

json LogprobsJson::add(const std::vector<TokenLogprobs>& tokens) {
  if (tokens.empty()) return nullptr;
  json content = json::array();
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprobs& t : tokens) {
    const std::string bytes = tok_->token_piece_bytes(prev_, t.token);
    if (endpoint_ == Endpoint::kChat) {
      json top = json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string b = tok_->token_piece_bytes(prev_, id);
        top.push_back({{"token", utf8_lossy(b)}, {"logprob", lp}, {"bytes", byte_list(b)}});
      }
      content.push_back(
          {{"token", utf8_lossy(bytes)}, {"logprob", t.logprob}, {"bytes", byte_list(bytes)}, {"top_logprobs", top}});
    } else {
      toks.push_back(utf8_lossy(bytes));
      lps.push_back(t.logprob);
      json top = json::object();
      for (const auto& [id, lp] : t.top) {
        const std::string key = utf8_lossy(tok_->token_piece_bytes(prev_, id));
        if (!top.contains(key)) top[key] = lp;  // most likely first: the first of a string wins
      }
      tops.push_back(std::move(top));
      offsets.push_back(offset_);
    }
    // The text so far grows by this token's bytes; count the characters they complete.
    partial_ += bytes;
    size_t i = 0;
    while (i < partial_.size()) {
      const int need = utf8_seq_len(static_cast<unsigned char>(partial_[i]));
      if (need > 1 && i + size_t(need) > partial_.size()) {
        // An incomplete character: wait for its other bytes, unless what follows cannot be one.
        bool continues = true;
        for (size_t k = i + 1; k < partial_.size(); ++k)
          continues = continues && (static_cast<unsigned char>(partial_[k]) & 0xc0) == 0x80;
        if (continues) break;
      }
      int len = 1;
      utf8_decode(partial_, i, &len);
      i += size_t(len);
      ++offset_;
    }
    partial_.erase(0, i);
    prev_ = t.token;
  }
  if (endpoint_ == Endpoint::kChat) return json{{"content", std::move(content)}};
  return json{{"tokens", std::move(toks)},
              {"token_logprobs", std::move(lps)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

json completion_response(const std::string& id, int64_t created, const std::string& model,
                         const std::string& text, FinishReason reason, int prompt_tokens,
                         int completion_tokens, const json& logprobs) {
  json choice = {{"index", 0}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_reason_json(reason)}};
  return json{{"id", id},
              {"object", "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array({choice})},
              {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

json chat_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                   FinishReason reason, int prompt_tokens, int completion_tokens, const json& logprobs) {
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", text}}},
                 {"logprobs", logprobs},
                 {"finish_reason", finish_reason_json(reason)}};
  return json{{"id", id},
              {"object", "chat.completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array({choice})},
              {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

json stream_chunk(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                  const std::string& text, const json& finish, bool role_only, bool include_usage,
                  const json& logprobs) {
  json choice;
  if (endpoint == Endpoint::kCompletions) {
    choice = {{"index", 0}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish}};
  } else {
    json delta = json::object();
    if (role_only) {
      delta = {{"role", "assistant"}, {"content", ""}};
    } else if (!text.empty()) {
      delta = {{"content", text}};
    }
    choice = {{"index", 0}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish}};
  }
  json c = {{"id", id},
            {"object", endpoint == Endpoint::kCompletions ? "text_completion" : "chat.completion.chunk"},
            {"created", created},
            {"model", model},
            {"choices", json::array({choice})}};
  if (include_usage) c["usage"] = nullptr;
  return c;
}

json stream_usage_chunk(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                        int prompt_tokens, int completion_tokens) {
  return json{{"id", id},
              {"object", endpoint == Endpoint::kCompletions ? "text_completion" : "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"choices", json::array()},
              {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

}  // namespace loom::server
