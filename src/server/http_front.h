// `loom serve`'s connection front end: one event-driven thread (epoll) owns the listening socket
// and every connection while its request is still arriving; handler threads only ever see
// connections whose request (headers and body) has arrived whole.
//
// Why: with cpp-httplib's own accept loop every accepted connection takes a pool thread while
// it reads the request, with a per-read timeout only, so a slowloris client (one header line
// every few seconds, never finishing) holds a thread for as long as it likes, and a few hundred
// of them take every thread: /health and completions go unanswered (issue 19, defect 3).
// Here a connection costs a buffer and an epoll entry until its request is complete, and:
//   - header deadline: the request line and headers must arrive within header_timeout_s of
//     the connection's first byte being awaited (accept, or the end of the previous response on
//     a kept-alive connection); then the body within body_timeout_s. Late: 408 and closed.
//   - connection cap: at most max_connections open connections; a new one beyond it evicts the
//     connection that has waited longest for its request (a client that has sent nothing
//     complete yet); when every connection is being served the new one gets 503 and is closed.
//   - size bounds: headers beyond max_header_bytes get 431, a Content-Length beyond
//     max_body_bytes gets 413, both without reading the rest.
//   - framing (http_framing.h, RFC 9112): malformed header lines, differing Content-Lengths,
//     Transfer-Encoding with Content-Length: 400; a transfer coding other than chunked: 501; a
//     Content-Encoding other than identity: 415 (bodies are never inflated). A chunked body is
//     decoded here as it arrives (its decoded size against max_body_bytes) and is complete only
//     after the last chunk and the trailer's empty line, so the body deadline holds for chunked
//     bodies too; the handler gets the request rewritten with a Content-Length. A connection that
//     ends before its body is complete gets 400.
//   - memory budget (memory_budget.h, optional): the bytes buffered for a connection (headers,
//     body; a Content-Length body in full when its head arrives) are taken from the server-wide
//     budget before they are read; when it is spent the connection gets 503 with Retry-After and
//     is closed. They go back when the handler is done with the request or the connection closes.
// A complete request goes to a queue that `threads` handler threads take from; each runs
// `serve` (cpp-httplib's request processing over a Stream that first returns the buffered
// bytes). After the response a kept-alive connection comes back to the front end for its next
// request, so idle keep-alive connections hold no thread either.
//
// Half-closed clients (shutdown(SHUT_WR) after the request, legal in HTTP/1.1): the EOF after a
// complete request is remembered (Connection::peer_half_closed) and the request is served; the
// connection closes after the response.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http_framing.h"
#include "server/memory_budget.h"

namespace loom::server {

struct FrontEndOptions {
  int threads = 16;               // handler threads
  int max_connections = 0;        // 0: from the descriptor limit (see default_max_connections)
  double header_timeout_s = 10;   // request line + headers
  double body_timeout_s = 60;     // the body, after the headers
  size_t max_header_bytes = 64u << 10;
  size_t max_body_bytes = 8u << 20;
  int max_requests_per_connection = 100;
  time_t read_timeout_s = 5;      // per read/write while a handler serves (cpp-httplib's default)
  time_t write_timeout_s = 5;
  MemoryBudget* budget = nullptr;  // not owned; nullptr: no budget
};

// min(8192, RLIMIT_NOFILE soft limit - 128), at least 16: leaves descriptors for model files,
// the engine and MPI.
int default_max_connections();

// One client connection.
struct Connection {
  int fd = -1;
  std::string buf;         // received, not yet consumed by a handler
  size_t head_end = 0;     // bytes of request line + headers (0: not complete yet)
  int served = 0;          // requests answered on it
  bool peer_half_closed = false;
  int64_t wait_start_ns = 0;  // when the front end began waiting for its current request
  int64_t deadline_ns = 0;
  std::string remote_addr, local_addr;
  int remote_port = 0, local_port = 0;
  // The body of the request being received (set when its head is complete).
  BodyFraming framing = BodyFraming::kNone;
  uint64_t content_length = 0;
  std::unique_ptr<ChunkedDecoder> chunked;  // chunked framing: the decoder
  std::string body;                         // chunked framing: the decoded body so far
  int error_status = 0;                     // why the request is refused (request_complete)
  std::string error_message;
  int64_t reserved = 0;                     // bytes taken from the memory budget
};

// What a handler thread reads from and writes to: the buffered bytes first, then the socket.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(Connection& c, time_t read_timeout_s, time_t write_timeout_s)
      : c_(c), read_timeout_s_(read_timeout_s), write_timeout_s_(write_timeout_s) {}
  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return c_.fd; }

 private:
  Connection& c_;
  size_t off_ = 0;  // consumed from c_.buf
  time_t read_timeout_s_, write_timeout_s_;
  friend class FrontEnd;
};

class FrontEnd {
 public:
  // serve(stream, close_connection, &connection_closed) answers one request; returns false when
  // the connection must close (cpp-httplib's Server::process_request contract).
  using Serve = std::function<bool(httplib::Stream&, bool close_connection, bool& connection_closed)>;
  FrontEnd(FrontEndOptions o, Serve serve);
  ~FrontEnd();  // stop()
  FrontEnd(const FrontEnd&) = delete;
  FrontEnd& operator=(const FrontEnd&) = delete;

  // Binds and listens (backlog SOMAXCONN); port 0 picks a free one. Returns the port; throws
  // loom::Error naming the address when it cannot bind.
  int bind(const std::string& host, int port);
  int listen_fd() const { return listen_fd_; }
  // Runs the event loop and the handler threads until stop(). Returns false if not bound.
  bool run();
  void stop();
  bool running() const { return running_.load(); }
  int max_connections() const { return opt_.max_connections; }

  // Counters (tests, logs).
  int64_t evicted() const { return evicted_.load(); }
  int64_t timed_out() const { return timed_out_.load(); }
  int open_connections() const { return open_.load(); }

 private:
  void loop();
  void worker();
  void accept_all();
  void read_conn(int fd);
  bool request_complete(Connection& c);
  bool reserve(Connection& c, int64_t bytes);
  void release_to(Connection& c, int64_t keep);
  void to_worker(int fd);
  void close_conn(int fd, int status);
  void evict_one();
  void expire();
  void rearm(std::unique_ptr<Connection> c);

  FrontEndOptions opt_;
  Serve serve_;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1, spare_fd_ = -1;
  std::atomic<bool> stop_{false}, running_{false};
  std::atomic<int> open_{0};
  std::atomic<int64_t> evicted_{0}, timed_out_{0};

  // Event-loop thread only: connections still receiving their request, by descriptor.
  std::vector<std::unique_ptr<Connection>> reading_;  // index = fd
  int num_reading_ = 0;

  // Complete requests for the handlers; connections handed back by them.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Connection>> ready_;
  std::vector<std::unique_ptr<Connection>> returned_;
  std::vector<std::thread> workers_;
};

// The connection the calling handler thread is serving (nullptr outside a handler): lets a
// handler probe its own client (ConnectionProbe::current()).
const Connection* current_connection();

}  // namespace loom::server
