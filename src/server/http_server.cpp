#include "server/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <csignal>
#include <optional>
#include <ctime>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/log.h"
#include "core/sysmem.h"
#include "server/connection_probe.h"
#include "server/http_front.h"
#include "server/openai_api.h"

namespace loom::server {

using nlohmann::json;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);  // how often a waiting handler checks its client

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, error_json(e)); }

ApiError make_error(int status, std::string message, std::string type, std::string param = "",
                    std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::string sse(const json& j) { return "data: " + j.dump() + "\n\n"; }

// The error a finished-but-failed request reports (rejected by the scheduler: 400; failed in
// the engine: 500).
ApiError finish_error(const RequestStream::Update& u) {
  if (u.reason == FinishReason::kRejected)
    return make_error(400, "the request was rejected: " + u.detail, "invalid_request_error");
  if (u.reason == FinishReason::kAbort)
    return make_error(503, "the request was aborted: " + u.detail, "server_error", "", "aborted");
  return make_error(500, u.detail.empty() ? "the engine failed on this request" : u.detail, "server_error", "",
                    "internal_error");
}

bool is_failure(FinishReason r) { return r != FinishReason::kStop && r != FinishReason::kLength; }

// Whether a non-streaming request's client has gone (issue 19, defect 12). An end of stream is
// ambiguous: a client that shut down only its write side after the request (legal HTTP/1.1)
// still reads the answer. The first time it is seen, an interim "100 Continue" (which HTTP/1.1
// clients must accept before the final response, RFC 9110 section 15.2) is sent: a client that
// closed completely answers it with a reset, which the following probes see; a half-closed one
// ignores it and gets its response. HTTP/1.0 clients get no interim response: for them only a
// reset counts.
bool client_gone(const ConnectionProbe& probe, const httplib::Request& req, bool* eof_probed) {
  const PeerState ps = probe.state();
  if (ps == PeerState::kGone) return true;
  if (ps == PeerState::kEof && !*eof_probed) {
    *eof_probed = true;
    if (req.version == "HTTP/1.1" && !probe.send_interim_continue()) return true;
  }
  return false;
}

}  // namespace

std::vector<TokenId> serving_eos_ids(const Tokenizer& tok, const std::string& model_format, int bos_id) {
  std::vector<TokenId> ids;
  for (int i = 0; i < tok.vocab_size(); ++i)
    if (tok.is_eog(i)) ids.push_back(i);
  if (model_format == "llama2c" && bos_id >= 0) ids.push_back(bos_id);
  return ids;
}

// cpp-httplib's Server does the routing and the HTTP framing of one request over a Stream; the
// connections themselves belong to the FrontEnd (http_front.h), which hands a handler thread a
// connection only once its request has arrived whole. process_request is protected: this
// exposes it. svr_sock_ stands for "not shutting down" in cpp-httplib's chunked writer (a
// streaming response ends when it becomes INVALID_SOCKET), so it mirrors the front end's
// listening socket while it runs.
class ListeningServer : public httplib::Server {
 public:
  bool serve(httplib::Stream& strm, bool close_connection, bool& connection_closed) {
    return process_request(strm, close_connection, connection_closed, nullptr);
  }
  void set_running(int fd) { svr_sock_ = fd; }
  void set_stopped() { svr_sock_ = INVALID_SOCKET; }
};

struct HttpServer::Impl {
  ServingEngine& engine;
  const Tokenizer& tok;
  HttpServerOptions opt;
  ListeningServer svr;
  std::unique_ptr<MemoryBudget> budget;
  std::unique_ptr<FrontEnd> front;
  std::thread thread;
  std::mt19937_64 id_rng{std::random_device{}()};
  std::mutex rng_mu;

  Impl(ServingEngine& e, const Tokenizer& t, HttpServerOptions o) : engine(e), tok(t), opt(std::move(o)) {}

  uint64_t random_u64() {
    std::lock_guard<std::mutex> lock(rng_mu);
    return id_rng();
  }

  std::string make_id(const char* prefix) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%s-%016llx", prefix, static_cast<unsigned long long>(random_u64()));
    return buf;
  }

  // Longest span of input bytes one token can stand for (see check_text_fits).
  size_t max_token_bytes = 4;

  void routes();
  void check_text_fits(size_t bytes, const std::optional<int>& max_tokens, Endpoint ep);
  void generate(Endpoint ep, const httplib::Request& req, httplib::Response& res);
  std::vector<TokenId> prompt_tokens(const ApiRequest& a);
  void check_fits(int prompt_len, int max_tokens, Endpoint ep);
};

// Wraps a handler: nothing escapes it.
template <typename F>
httplib::Server::Handler guarded(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const OverloadError& e) {
      if (e.status == 429)
        send_error(res, make_error(429, e.message, "rate_limit_error", "", "server_overloaded"));
      else
        send_error(res, make_error(e.status, e.message, "server_error", "", "unavailable"));
      res.set_header("Retry-After", "1");
    } catch (const loom::Error& e) {
      send_error(res, make_error(400, e.what(), "invalid_request_error"));
    } catch (const std::bad_alloc&) {
      send_error(res, make_error(503, "the server ran out of memory handling this request; retry later",
                                 "server_error", "", "unavailable"));
      res.set_header("Retry-After", "1");
    } catch (const std::exception& e) {
      send_error(res, make_error(500, cat("internal error: ", describe_exception(e)), "server_error", "",
                                 "internal_error"));
    } catch (...) {
      send_error(res, make_error(500, "internal error", "server_error", "", "internal_error"));
    }
  };
}

// Text too long for the context is refused before tokenizing it (a 50 MB prompt took 2 GB and
// 10-20 s to tokenize before context_length_exceeded; issue 19, defect 8). The bound: loom's
// tokenizers (Spm and byte-level BPE, model/tokenizer.h) never drop input bytes, and each token
// covers at most max_token_bytes of them (its stored piece is at least as long as the bytes it
// stands for: ' ' -> U+2581, a byte -> its GPT-2 alphabet character or "<0xAB>"; an unknown
// code point -> one unk token, hence at least 4), so text of B bytes is at least
// ceil(B / max_token_bytes) tokens.
void HttpServer::Impl::check_text_fits(size_t bytes, const std::optional<int>& max_tokens, Endpoint ep) {
  const int64_t min_tokens = int64_t((bytes + max_token_bytes - 1) / max_token_bytes);
  const int64_t completion = max_tokens ? *max_tokens : 1;
  const int max_len = engine.max_model_len();
  if (min_tokens + completion <= max_len) return;
  const char* where = ep == Endpoint::kChat ? "messages" : "prompt";
  throw make_error(400,
                   cat("This model's maximum context length is ", max_len, " tokens. However, the ", where, " is ",
                       bytes, " bytes, which is at least ", min_tokens, " tokens (no token of this vocabulary spans more than ",
                       max_token_bytes, " bytes), plus ", completion,
                       " in the completion. Please reduce the length of the ", where, " or the completion."),
                   "invalid_request_error",
                   // As check_fits: the prompt alone too long names it; else the completion's share.
                   min_tokens + 1 > max_len || ep == Endpoint::kChat ? where : "max_tokens", "context_length_exceeded");
}

std::vector<TokenId> HttpServer::Impl::prompt_tokens(const ApiRequest& a) {
  std::vector<TokenId> prompt;
  if (a.endpoint == Endpoint::kCompletions) {
    if (a.prompt_is_ids) {
      for (TokenId id : a.prompt_ids)
        if (id >= tok.vocab_size())
          throw make_error(400, cat("prompt token id ", id, " is out of the vocabulary (size ", tok.vocab_size(), ")"),
                           "invalid_request_error", "prompt");
      prompt = a.prompt_ids;
    } else {
      check_text_fits(a.prompt_text.size(), a.max_tokens, a.endpoint);
      prompt = tok.encode(a.prompt_text, tok.vocab().add_bos);
    }
  } else {
    size_t content = 0;
    for (const ChatMessage& m : a.messages) content += m.content.size();
    check_text_fits(content, a.max_tokens, a.endpoint);
    // The template writes BOS itself where its format has one.
    const ChatPrompt chat = render_chat(tok.vocab(), a.messages, /*add_generation_prompt=*/true);
    check_text_fits(chat.text.size(), a.max_tokens, a.endpoint);
    prompt = opt.parse_special_in_content ? tok.encode(chat.text, /*add_bos=*/false)
                                          : tok.encode(chat.text, /*add_bos=*/false, chat.content);
  }
  if (prompt.empty())
    throw make_error(400, "the prompt is empty (no tokens)", "invalid_request_error",
                     a.endpoint == Endpoint::kChat ? "messages" : "prompt");
  return prompt;
}

// What the scheduler would reject at add_request, answered up front with the numbers.
void HttpServer::Impl::check_fits(int prompt_len, int max_tokens, Endpoint ep) {
  const int max_len = engine.max_model_len();
  const char* where = ep == Endpoint::kChat ? "messages" : "prompt";
  if (int64_t(prompt_len) + max_tokens > max_len)
    throw make_error(400,
                     cat("This model's maximum context length is ", max_len, " tokens. However, you requested ",
                         int64_t(prompt_len) + max_tokens, " tokens (", prompt_len, " in the ", where, ", ",
                         max_tokens, " in the completion). Please reduce the length of the ", where,
                         " or the completion."),
                     "invalid_request_error", ep == Endpoint::kChat ? "messages" : "max_tokens",
                     "context_length_exceeded");
  const EngineConfig& c = engine.engine_config();
  const int64_t blocks = (int64_t(prompt_len) + max_tokens + c.block_size - 1) / c.block_size;
  if (blocks > engine.num_kv_blocks())
    throw make_error(400,
                     cat("the request needs ", blocks, " KV-cache blocks (", prompt_len, " prompt + ", max_tokens,
                         " completion tokens, ", c.block_size, " per block) but the cache holds ",
                         engine.num_kv_blocks(), "; reduce the length or raise --kv-cache-bytes"),
                     "invalid_request_error", "max_tokens", "context_length_exceeded");
  if (!c.enable_chunked_prefill && prompt_len > c.max_tokens_per_step)
    throw make_error(400, cat("the prompt has ", prompt_len, " tokens, more than --max-tokens-per-step ",
                              c.max_tokens_per_step, " (chunked prefill is off)"),
                     "invalid_request_error", where);
}

void HttpServer::Impl::generate(Endpoint ep, const httplib::Request& req, httplib::Response& res) {
  // The parse's memory from the budget first (the body itself is the front end's).
  MemoryBudget::Hold parse_hold(budget.get(), int64_t(req.body.size()) * kParseBytesPerBodyByte);
  if (!parse_hold.ok())
    throw OverloadError{cat("the server's memory for requests in flight (", budget->limit(),
                            " bytes) cannot take the parse of this ", req.body.size(), "-byte body now; retry later"),
                        503};
  ApiRequest a = parse_api_request(ep, req.body);
  // Parsed: what the request holds until its handler is done (its texts, ids and stop strings;
  // the tokenized prompt is bounded by the context below), instead of the parse's share.
  int64_t held = int64_t(a.prompt_text.size() + a.prompt_ids.size() * sizeof(TokenId) + a.model.size());
  for (const ChatMessage& m : a.messages) held += int64_t(m.content.size() + m.role.size());
  for (const std::string& x : a.stop) held += int64_t(x.size());
  MemoryBudget::Hold request_hold(budget.get(), held);
  parse_hold.release();
  if (!request_hold.ok())
    throw OverloadError{cat("the server's memory for requests in flight (", budget->limit(), " bytes) is taken; retry later"),
                        503};
  if (!a.model.empty() && a.model != opt.model_name)
    throw make_error(404,
                     cat("The model `", text_excerpt(a.model), "` does not exist (this server serves `",
                         opt.model_name, "`)."),  // the client's name capped: it may be megabytes
                     "invalid_request_error", "model", "model_not_found");
  for (const auto& [id, bias] : a.sampling.logit_bias)
    if (id >= tok.vocab_size())
      throw make_error(400, cat("'logit_bias' token id ", id, " is out of the vocabulary (size ", tok.vocab_size(), ")"),
                       "invalid_request_error", "logit_bias");
  std::vector<TokenId> prompt = prompt_tokens(a);
  const int prompt_len = int(prompt.size());
  int max_tokens = 0;
  if (a.max_tokens) {
    max_tokens = *a.max_tokens;
  } else if (ep == Endpoint::kCompletions) {
    max_tokens = 16;  // OpenAI's default for completions
  } else {
    max_tokens = engine.max_model_len() - prompt_len;  // chat: the rest of the context (vLLM)
    if (max_tokens < 1)
      throw make_error(400, cat("This model's maximum context length is ", engine.max_model_len(),
                                " tokens and the messages already use ", prompt_len, "; no room for a completion."),
                       "invalid_request_error", "messages", "context_length_exceeded");
  }
  check_fits(prompt_len, max_tokens, ep);

  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.stop.stop_strings = a.stop;
  r.stop.ignore_eos = a.ignore_eos;
  r.sampling = a.sampling;
  if (!a.has_seed) r.sampling.seed = random_u64();
  r.priority = a.priority;
  r.slo = a.slo;
  // SLO tier (Nitsum): the named tier, else the first; its targets are the request's SLO unless
  // the request gives its own.
  int tier = -1;
  const cluster::SloTiers& tiers = engine.options().tiers;
  if (!tiers.tiers().empty()) {
    try {
      tier = tiers.find(a.tier);
    } catch (const Error& e) {
      throw make_error(400, e.what(), "invalid_request_error", "tier");
    }
    const cluster::SloTier& t = tiers[size_t(tier)];
    if (!r.slo && !t.background) r.slo = Slo{t.ttft_s * 1e3, t.tpot_s * 1e3};
  } else if (!a.tier.empty()) {
    throw make_error(400, cat("'tier' is '", text_excerpt(a.tier, 64), "' but this server has no SLO tiers (start it with --tiers)"),
                     "invalid_request_error", "tier");
  }

  const std::string id = make_id(ep == Endpoint::kChat ? "chatcmpl" : "cmpl");
  const int64_t created = int64_t(std::time(nullptr));
  const std::string model = opt.model_name;
  std::shared_ptr<RequestStream> st = engine.submit(std::move(r), tier);  // OverloadError -> 429
  const RequestId rid = st->id();
  const ConnectionProbe probe = ConnectionProbe::current();

  const bool want_logprobs = a.sampling.logprobs >= 0;
  if (!a.stream) {
    std::string text;
    std::vector<TokenLogprobs> lps;
    RequestStream::Update u;
    bool eof_probed = false;
    auto next_probe = std::chrono::steady_clock::now() + kPoll;
    for (;;) {
      if (st->next(&u, kPoll)) {
        text += u.text;
        for (TokenLogprobs& l : u.logprobs) lps.push_back(std::move(l));
        if (u.finished) break;
      }
      // Tokens may keep coming faster than kPoll: probe on time, not only on timeouts.
      const auto now = std::chrono::steady_clock::now();
      if (now < next_probe) continue;
      next_probe = now + kPoll;
      if (client_gone(probe, req, &eof_probed)) {
        engine.cancel(rid);  // nobody will read the answer
        res.status = 499;    // (nginx's "client closed request"; never seen by the client)
        return;
      }
    }
    if (is_failure(u.reason)) throw finish_error(u);
    json logprobs = nullptr;
    if (want_logprobs) {
      logprobs = LogprobsJson(ep, tok).add(lps);
      if (logprobs.is_null())  // no token with logprobs (an eos first): the empty form
        logprobs = ep == Endpoint::kChat ? json{{"content", json::array()}}
                                         : json{{"tokens", json::array()},
                                                {"token_logprobs", json::array()},
                                                {"top_logprobs", json::array()},
                                                {"text_offset", json::array()}};
    }
    const json body =
        ep == Endpoint::kChat
            ? chat_response(id, created, model, text, u.reason, prompt_len, u.num_output, logprobs)
            : completion_response(id, created, model, text, u.reason, prompt_len, u.num_output, logprobs);
    send_json(res, 200, body);
    return;
  }

  struct StreamState {
    std::shared_ptr<RequestStream> st;
    ConnectionProbe probe;
    std::chrono::steady_clock::time_point next_probe = std::chrono::steady_clock::now() + kPoll;
    bool role_sent = false;
    bool done = false;
    bool eof_probed = false;
    std::optional<LogprobsJson> logprobs;  // when the request asked for them
  };
  auto ss = std::make_shared<StreamState>();
  if (want_logprobs) ss->logprobs.emplace(ep, tok);
  ss->st = st;
  ss->probe = probe;
  ServingEngine* eng = &engine;
  const bool include_usage = a.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.status = 200;
  res.set_chunked_content_provider(
      "text/event-stream",
      [=](size_t, httplib::DataSink& sink) -> bool {
        try {
          if (ss->done) return false;
          std::string out;
          if (ep == Endpoint::kChat && !ss->role_sent) {
            out += sse(stream_chunk(ep, id, created, model, "", nullptr, /*role_only=*/true, include_usage));
            ss->role_sent = true;
          }
          RequestStream::Update u;
          const bool got = ss->st->next(&u, out.empty() ? kPoll : std::chrono::milliseconds(0));
          // While nothing is written (queued, or text held back for a stop string) only the
          // probe can tell that the client left; probe on time.
          const auto now = std::chrono::steady_clock::now();
          if (now >= ss->next_probe) {
            ss->next_probe = now + kPoll;
            const PeerState ps = ss->probe.state();
            if (ps == PeerState::kEof && !ss->eof_probed) {
              // Closed or only half-closed? An SSE comment (ignored by every SSE parser) tells:
              // a closed client answers it with a reset, which the next probe sees.
              ss->eof_probed = true;
              static const char kComment[] = ": probe\n\n";
              if (!sink.write(kComment, sizeof kComment - 1)) {
                eng->cancel(rid);
                return false;
              }
            } else if (ps == PeerState::kGone) {
              eng->cancel(rid);
              return false;
            }
          }
          if (!got) {
            if (out.empty()) return true;  // called again at once; next() waits
          } else {
            // A chunk per update with text or logprobs; each carries the logprobs of its tokens.
            const json lp = ss->logprobs ? ss->logprobs->add(u.logprobs) : json(nullptr);
            if (!u.text.empty() || !lp.is_null())
              out += sse(stream_chunk(ep, id, created, model, u.text, nullptr, false, include_usage, lp));
            if (u.finished) {
              if (is_failure(u.reason)) {
                out += sse(error_json(finish_error(u)));
              } else {
                out += sse(stream_chunk(ep, id, created, model, "", finish_reason_json(u.reason), false,
                                        include_usage));
                if (include_usage) out += sse(stream_usage_chunk(ep, id, created, model, prompt_len, u.num_output));
              }
              out += "data: [DONE]\n\n";
            }
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            eng->cancel(rid);  // the client is gone
            return false;
          }
          if (u.finished) {
            ss->done = true;
            sink.done();
          }
          return true;
        } catch (...) {
          eng->cancel(rid);
          return false;
        }
      },
      [ss, eng, rid](bool /*success*/) {
        if (!ss->done) eng->cancel(rid);  // the connection ended before the request did
      });
}

std::string route_method(const std::string& path) {
  if (path == "/v1/completions" || path == "/v1/chat/completions") return "POST";
  if (path == "/v1/models" || path == "/health" || path == "/metrics") return "GET";
  return "";
}

std::string access_log_line(const std::string& remote_addr, int remote_port, const std::string& method,
                            const std::string& path, const std::string& version, int status) {
  return cat(remote_addr.empty() ? std::string("-") : remote_addr, ":", remote_port, " - \"",
             text_excerpt(method, 16), " ", text_excerpt(path, 128), " ", text_excerpt(version, 16), "\" ", status);
}

void HttpServer::Impl::routes() {
  svr.Post("/v1/completions", guarded([this](const httplib::Request& q, httplib::Response& r) {
             generate(Endpoint::kCompletions, q, r);
           }));
  svr.Post("/v1/chat/completions", guarded([this](const httplib::Request& q, httplib::Response& r) {
             generate(Endpoint::kChat, q, r);
           }));
  svr.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& r) {
            json card = {{"id", opt.model_name},
                         {"object", "model"},
                         {"created", int64_t(std::time(nullptr))},
                         {"owned_by", "loom"},
                         {"root", opt.model_name},
                         {"max_model_len", engine.max_model_len()},
                         {"vocab_size", tok.vocab_size()}};
            send_json(r, 200, json{{"object", "list"}, {"data", json::array({card})}});
          }));
  // 503 while the engine is stalled (a step or a heartbeat past its limit: ServingEngine "Health"),
  // and once it is dead (ServingEngine::dead_reason): load balancers and supervisors take the
  // replica out; a dead engine also shuts the server down.
  svr.Get("/health", guarded([this](const httplib::Request&, httplib::Response& r) {
            const Health h = engine.health();
            if (h.ok)
              send_json(r, 200, json{{"status", "ok"}});
            else
              send_json(r, 503, json{{"status", "unhealthy"}, {"error", h.error}});
          }));
  svr.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& r) {
            r.status = 200;
            r.set_content(engine.render_metrics(), "text/plain; version=0.0.4; charset=utf-8");
          }));
  // Unmatched routes (and httplib's own 4xx, e.g. 413) get an OpenAI error body; responses that
  // already have one keep it.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    // A known path asked with another method: 405 and the method it takes (RFC 9110 15.5.6),
    // as vLLM's server (FastAPI) answers; HEAD is GET's (httplib routes it to the GET handler).
    const std::string allow = route_method(req.path);
    if (res.status == 404 && !allow.empty()) {
      res.status = 405;
      res.set_header("Allow", allow);
      send_error(res, make_error(405, cat(text_excerpt(req.method, 16), " ", req.path, " is not allowed: use ", allow),
                                 "invalid_request_error", "", "method_not_allowed"));
    } else if (res.status == 404)
      send_error(res, make_error(404, cat("no route ", text_excerpt(req.method, 16), " ", text_excerpt(req.path, 64)),
                                 "invalid_request_error", "", "not_found"));
    else
      send_error(res, make_error(res.status, cat("HTTP error ", res.status, " for ", text_excerpt(req.method, 16), " ",
                                                 text_excerpt(req.path, 64)),
                                 "invalid_request_error"));
  });
  if (opt.access_log)
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      opt.access_log(access_log_line(req.remote_addr, req.remote_port, req.method, req.path, req.version, res.status));
    });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = describe_exception(e);
    } catch (...) {
    }
    send_error(res, make_error(500, "internal error: " + what, "server_error", "", "internal_error"));
  });
}

HttpServer::HttpServer(ServingEngine& engine, const Tokenizer& tok, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tok, std::move(options))) {
  std::signal(SIGPIPE, SIG_IGN);
  if (impl_->opt.model_name.empty()) impl_->opt.model_name = engine.options().model_name;
  int threads = impl_->opt.http_threads;
  // The default gives every running and waiting slot a thread (so a new request still gets one to
  // answer it 429), capped at kMaxHttpThreads: beyond it complete requests wait in the front
  // end's queue for a thread (100000 threads ran the process out of memory; issue 36).
  if (threads <= 0)
    threads = int(std::min<int64_t>(kMaxHttpThreads, int64_t(engine.engine_config().max_num_seqs) +
                                                         engine.options().max_queue + 16));
  if (threads > kMaxHttpThreads) fail("--http-threads ", threads, " is more than ", kMaxHttpThreads);
  impl_->svr.set_payload_max_length(impl_->opt.max_body_bytes);
  {
    const int64_t least = min_inflight_bytes(impl_->opt.max_body_bytes);
    int64_t limit = impl_->opt.max_inflight_bytes;
    if (limit == 0) limit = default_inflight_bytes(impl_->opt.max_body_bytes);
    if (limit < least)
      fail("--max-inflight-bytes ", limit, " cannot hold one request of --max-body-bytes ", impl_->opt.max_body_bytes,
           " (its headers, body and parse need ", least, " bytes)");
    impl_->budget = std::make_unique<MemoryBudget>(limit);
  }
  for (const std::string& piece : tok.vocab().tokens) impl_->max_token_bytes = std::max(impl_->max_token_bytes, piece.size());
  impl_->routes();
  FrontEndOptions fo;
  fo.threads = threads;
  fo.max_connections = impl_->opt.max_connections;
  fo.header_timeout_s = impl_->opt.header_timeout_s;
  fo.body_timeout_s = impl_->opt.body_timeout_s;
  fo.max_body_bytes = impl_->opt.max_body_bytes;
  fo.budget = impl_->budget.get();
  Impl* im = impl_.get();
  impl_->front = std::make_unique<FrontEnd>(
      fo, [im](httplib::Stream& strm, bool close_connection, bool& connection_closed) {
        return im->svr.serve(strm, close_connection, connection_closed);
      });
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  port_ = impl_->front->bind(impl_->opt.host, impl_->opt.port);
  impl_->svr.set_running(impl_->front->listen_fd());
  return port_;
}

bool HttpServer::listen() {
  const bool ok = impl_->front->run();
  impl_->svr.set_stopped();
  return ok;
}

int HttpServer::start() {
  const int p = bind();
  impl_->thread = std::thread([this] { listen(); });
  for (int i = 0; i < 2000 && !impl_->front->running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return p;
}

void HttpServer::stop() {
  impl_->svr.set_stopped();
  impl_->front->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int HttpServer::max_connections() const { return impl_->front->max_connections(); }
int64_t HttpServer::connections_timed_out() const { return impl_->front->timed_out(); }
int64_t HttpServer::connections_evicted() const { return impl_->front->evicted(); }
const MemoryBudget& HttpServer::budget() const { return *impl_->budget; }

int64_t min_inflight_bytes(size_t max_body_bytes) {
  const int64_t body = int64_t(max_body_bytes);
  return (FrontEndOptions{}.max_header_bytes + body + (64 << 10)) + body * kParseBytesPerBodyByte;
}

int64_t default_inflight_bytes(size_t max_body_bytes) {
  int64_t limit = int64_t(2) << 30;
  if (const auto total = mem_total()) limit = std::min(limit, *total / 4);
  return std::max(limit, min_inflight_bytes(max_body_bytes));
}

}  // namespace loom::server
