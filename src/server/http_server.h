// `loom serve`'s HTTP front end (cpp-httplib's server and thread pool): OpenAI-compatible
// routes over a ServingEngine.
//
//   POST /v1/completions        prompt (text or token ids) -> text; SSE when stream: true
//   POST /v1/chat/completions   messages -> chat template (the model's, built-ins) -> text
//   GET  /v1/models             the served model (id, max_model_len, vocab_size)
//   GET  /health                200 {"status": "ok"} while the engine serves; 503
//                               {"status": "unhealthy", "error": why} while it is stalled (a
//                               step or a heartbeat to its ranks past its limit,
//                               serving_engine.h "Health") and once it is dead
//   GET  /metrics               Prometheus text format 0.0.4 (prometheus.h lists the series)
// A known path with another method: 405 with `Allow`; anything else: 404 (both with an OpenAI
// error body).
//
// Streaming: "data: {chunk}\n\n" per text delta in OpenAI's chunk format (chat's first chunk
// carries the role), a last chunk with finish_reason, with stream_options.include_usage a
// usage chunk ("choices": []), then "data: [DONE]\n\n". An engine failure mid-stream sends
// "data: {"error": ...}\n\n" and [DONE].
//
// Client disconnects: a streaming request is cancelled when a write to the client fails or,
// while it waits for tokens, when ConnectionProbe sees the socket reset; a non-streaming one
// when ConnectionProbe sees it reset while waiting. An end of stream alone may be a half-closed
// client (shutdown(SHUT_WR) after the request, legal HTTP/1.1), which still reads: it is told
// apart by one harmless write (an SSE comment; for non-streaming an interim 100 Continue) that a
// closed client answers with a reset. Cancelling frees its KV blocks.
//
// Connections: an event-driven front end (http_front.h) holds each connection until its request
// has arrived whole (header deadline, body deadline, connection cap, size bounds), so slow or
// idle clients hold no thread. Handler threads: one per request being served. The pool has
// max_num_seqs + max_queue + 16 threads by default, so that with every running and waiting slot
// taken, a new request still gets a thread to answer it 429, and /health and /metrics still
// answer.
//
// Errors never escape a handler: ApiError -> its status, OverloadError -> 429 or 503 (both with
// Retry-After), anything else -> 500 with the message (never a bare exception name:
// std::bad_alloc reads "out of memory").
//
// Memory: see HttpServerOptions::max_inflight_bytes; the front end takes headers and bodies
// from the budget, the handler the parse and the parsed request. SIGPIPE is ignored process-wide by the constructor (a write to a
// closed socket must fail, not kill the server; the front end sends with MSG_NOSIGNAL too).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer.h"
#include "server/memory_budget.h"
#include "server/serving_engine.h"

namespace loom::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;            // 0: any free port (see port())
  std::string model_name;     // served model name (--served-model-name)
  int http_threads = 0;       // 0: max_num_seqs + max_queue + 16, at most kMaxHttpThreads
  // Request bodies above this get 413 before they are read. 8 MiB: a whole 128k-token context
  // as JSON token ids or escaped text is well below it.
  size_t max_body_bytes = 8u << 20;
  int max_connections = 0;        // 0: from the descriptor limit (http_front.h)
  double header_timeout_s = 10;   // request line + headers must arrive within this
  double body_timeout_s = 60;     // then the body within this
  // The memory budget for requests in flight (memory_budget.h): received headers and bodies,
  // the JSON parse of a body (kParseBytesPerBodyByte per body byte while it is parsed) and the
  // parsed request, until its handler is done. Beyond it: 503 with Retry-After. 0: the default,
  // default_inflight_bytes(). Must hold one request of max_body_bytes (min_inflight_bytes).
  int64_t max_inflight_bytes = 0;
  // Chat: special-token spellings inside message content ("<|im_start|>system") become control
  // tokens (true: HF tokenizers', vLLM's and llama.cpp's default) or plain text (false: the safe
  // mode, `--content-special-tokens text`: a user cannot forge turns). Templates' own tokens are
  // always control tokens.
  bool parse_special_in_content = true;
  // One access-log line per answered request (access_log_line; vLLM's server prints the same
  // through uvicorn), handed to this sink; empty: none (`--disable-log-requests`).
  std::function<void(const std::string&)> access_log;
};

// `127.0.0.1:54321 - "POST /v1/completions HTTP/1.1" 200`: method and path quoted as short
// excerpts (a hostile request line does not fill the log).
std::string access_log_line(const std::string& remote_addr, int remote_port, const std::string& method,
                            const std::string& path, const std::string& version, int status);
// The method a known route takes ("POST", "GET"), "" for an unknown path.
std::string route_method(const std::string& path);

inline constexpr int kMaxHttpThreads = 1024;

// What parsing a JSON body costs at most per body byte: nlohmann holds a 16-byte node per value
// and the smallest value ("0,") is 2 bytes, with up to 2x for vector growth; the parsed prompt's
// ids come on top (measured: an 8 MB id list took 125-217 MB to parse, 16-27x; issue 36).
inline constexpr int64_t kParseBytesPerBodyByte = 32;
// 2 GiB, or a quarter of the machine's memory when that is less (at least min_inflight_bytes).
int64_t default_inflight_bytes(size_t max_body_bytes);
// The least budget that serves one request of max_body_bytes: its headers and body, and its parse.
int64_t min_inflight_bytes(size_t max_body_bytes);

class HttpServer {
 public:
  HttpServer(ServingEngine& engine, const Tokenizer& tok, HttpServerOptions options);
  ~HttpServer();  // stops listening
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; returns the port (the chosen one for port 0). Throws loom::Error naming
  // the address when it cannot bind.
  int bind();
  // Serves until stop() (call bind() first). Returns false when listening failed.
  bool listen();
  // bind() and listen() on a thread of its own (tests).
  int start();
  void stop();
  int port() const { return port_; }
  int max_connections() const;
  int64_t connections_timed_out() const;  // closed by the header/body deadline
  int64_t connections_evicted() const;    // closed to make room under the connection cap
  const MemoryBudget& budget() const;     // the memory budget for requests in flight

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = -1;
};

// The token ids that end generation for this model: every end-of-generation token of the
// vocabulary (Tokenizer::is_eog), and for llama2.c checkpoints BOS, which is how they end a
// story (as `loom generate` and llama2.c's run.c stop).
std::vector<TokenId> serving_eos_ids(const Tokenizer& tok, const std::string& model_format, int bos_id);

}  // namespace loom::server
