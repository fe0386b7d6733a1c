#include "server/http_server.h"

#include <httplib.h>

#include <csignal>
#include <ctime>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/log.h"
#include "server/connection_probe.h"
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

}  // namespace

std::vector<TokenId> serving_eos_ids(const Tokenizer& tok, const std::string& model_format, int bos_id) {
  std::vector<TokenId> ids;
  for (int i = 0; i < tok.vocab_size(); ++i)
    if (tok.is_eog(i)) ids.push_back(i);
  if (model_format == "llama2c" && bos_id >= 0) ids.push_back(bos_id);
  return ids;
}

// cpp-httplib 0.11 listens with a backlog of 5: a burst of concurrent connections overflows the
// accept queue and the kernel drops some of them. Its listening socket is a protected member;
// this exposes it so bind() can re-listen with the system's maximum backlog (listen() on a
// listening socket only changes the backlog).
class ListeningServer : public httplib::Server {
 public:
  void widen_backlog() {
    const auto fd = svr_sock_.load();
    if (fd != INVALID_SOCKET) ::listen(fd, SOMAXCONN);
  }
};

struct HttpServer::Impl {
  ServingEngine& engine;
  const Tokenizer& tok;
  HttpServerOptions opt;
  ListeningServer svr;
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

  void routes();
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
    } catch (const loom::Error& e) {
      send_error(res, make_error(400, e.what(), "invalid_request_error"));
    } catch (const std::exception& e) {
      send_error(res, make_error(500, cat("internal error: ", e.what()), "server_error", "", "internal_error"));
    } catch (...) {
      send_error(res, make_error(500, "internal error", "server_error", "", "internal_error"));
    }
  };
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
      prompt = tok.encode(a.prompt_text, tok.vocab().add_bos);
    }
  } else {
    // The template writes BOS itself where its format has one.
    const std::string text = apply_chat_template(tok.vocab(), a.messages, /*add_generation_prompt=*/true);
    prompt = tok.encode(text, /*add_bos=*/false);
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
  ApiRequest a = parse_api_request(ep, req.body);
  if (!a.model.empty() && a.model != opt.model_name)
    throw make_error(404,
                     cat("The model `", text_excerpt(a.model), "` does not exist (this server serves `",
                         opt.model_name, "`)."),  // the client's name capped: it may be megabytes
                     "invalid_request_error", "model", "model_not_found");
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
    throw make_error(400, cat("'tier' is '", a.tier, "' but this server has no SLO tiers (start it with --tiers)"),
                     "invalid_request_error", "tier");
  }

  const std::string id = make_id(ep == Endpoint::kChat ? "chatcmpl" : "cmpl");
  const int64_t created = int64_t(std::time(nullptr));
  const std::string model = opt.model_name;
  std::shared_ptr<RequestStream> st = engine.submit(std::move(r), tier);  // OverloadError -> 429
  const RequestId rid = st->id();
  const ConnectionProbe probe =
      ConnectionProbe::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);

  if (!a.stream) {
    std::string text;
    RequestStream::Update u;
    auto next_probe = std::chrono::steady_clock::now() + kPoll;
    for (;;) {
      if (st->next(&u, kPoll)) {
        text += u.text;
        if (u.finished) break;
      }
      // Tokens may keep coming faster than kPoll: probe on time, not only on timeouts.
      const auto now = std::chrono::steady_clock::now();
      if (now < next_probe) continue;
      next_probe = now + kPoll;
      if (probe.closed()) {
        engine.cancel(rid);  // nobody will read the answer
        res.status = 499;    // (nginx's "client closed request"; never seen by the client)
        return;
      }
    }
    if (is_failure(u.reason)) throw finish_error(u);
    const json body = ep == Endpoint::kChat
                          ? chat_response(id, created, model, text, u.reason, prompt_len, u.num_output)
                          : completion_response(id, created, model, text, u.reason, prompt_len, u.num_output);
    send_json(res, 200, body);
    return;
  }

  struct StreamState {
    std::shared_ptr<RequestStream> st;
    ConnectionProbe probe;
    std::chrono::steady_clock::time_point next_probe = std::chrono::steady_clock::now() + kPoll;
    bool role_sent = false;
    bool done = false;
  };
  auto ss = std::make_shared<StreamState>();
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
            if (ss->probe.closed()) {
              eng->cancel(rid);
              return false;
            }
          }
          if (!got) {
            if (out.empty()) return true;  // called again at once; next() waits
          } else {
            if (!u.text.empty())
              out += sse(stream_chunk(ep, id, created, model, u.text, nullptr, false, include_usage));
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
  svr.Get("/health", guarded([](const httplib::Request&, httplib::Response& r) {
            send_json(r, 200, json{{"status", "ok"}});
          }));
  svr.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& r) {
            r.status = 200;
            r.set_content(engine.render_metrics(), "text/plain; version=0.0.4; charset=utf-8");
          }));
  // Unmatched routes (and httplib's own 4xx, e.g. 413) get an OpenAI error body; responses that
  // already have one keep it.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, make_error(404, cat("no route ", req.method, " ", req.path), "invalid_request_error", "",
                                 "not_found"));
    else
      send_error(res, make_error(res.status, cat("HTTP error ", res.status, " for ", req.method, " ", req.path),
                                 "invalid_request_error"));
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
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
  if (threads <= 0) threads = engine.engine_config().max_num_seqs + engine.options().max_queue + 16;
  impl_->svr.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  impl_->svr.set_tcp_nodelay(true);
  impl_->svr.set_payload_max_length(impl_->opt.max_body_bytes);
  impl_->routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const std::string& host = impl_->opt.host;
  if (impl_->opt.port == 0) {
    port_ = impl_->svr.bind_to_any_port(host);
    if (port_ <= 0) fail("cannot bind ", host, " on any port");
  } else {
    if (!impl_->svr.bind_to_port(host, impl_->opt.port))
      fail("cannot bind ", host, ":", impl_->opt.port, " (in use, or not an address of this machine)");
    port_ = impl_->opt.port;
  }
  impl_->svr.widen_backlog();
  return port_;
}

bool HttpServer::listen() { return impl_->svr.listen_after_bind(); }

int HttpServer::start() {
  const int p = bind();
  impl_->thread = std::thread([this] { impl_->svr.listen_after_bind(); });
  for (int i = 0; i < 2000 && !impl_->svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return p;
}

void HttpServer::stop() {
  impl_->svr.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace loom::server
