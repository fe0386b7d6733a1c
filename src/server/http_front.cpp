#include "server/http_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include <nlohmann/json.hpp>
#include "server/connection_probe.h"

namespace loom::server {

namespace {

thread_local const Connection* t_current = nullptr;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t seconds_ns(double s) { return int64_t(s * 1e9); }

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string error_message(int status, size_t max_header, size_t max_body) {
  switch (status) {
    case 408: return "the request did not arrive in time (header or body deadline); connection closed";
    case 413: return cat("the request body is larger than the server's limit of ", max_body, " bytes");
    case 431: return cat("the request headers are larger than the server's limit of ", max_header, " bytes");
    case 503: return "the server has too many open connections; retry later";
    default: return "malformed request";
  }
}

// Best effort, never blocks: an answer to a connection the front end closes itself. 503s carry
// Retry-After (the budget or the connection cap frees within seconds), 415 the codings accepted.
void send_status(int fd, int status, const std::string& message) {
  const std::string body =
      nlohmann::json{{"error",
                      {{"message", message},
                       {"type", status >= 500 && status != 501 ? "server_error" : "invalid_request_error"},
                       {"param", nullptr},
                       {"code", nullptr}}}}
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string resp = cat("HTTP/1.1 ", status, " ", reason_phrase(status),
                               "\r\nContent-Type: application/json\r\nConnection: close\r\n",
                               status == 503 ? "Retry-After: 1\r\n" : "",
                               status == 415 ? "Accept-Encoding: identity\r\n" : "", "Content-Length: ",
                               body.size(), "\r\n\r\n", body);
  (void)::send(fd, resp.data(), resp.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

bool iequals_prefix(const char* p, size_t n, const char* name) {
  const size_t k = std::strlen(name);
  if (n < k) return false;
  for (size_t i = 0; i < k; ++i)
    if (std::tolower(static_cast<unsigned char>(p[i])) != name[i]) return false;
  return true;
}

bool wait_fd(int fd, short events, time_t timeout_s) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, int(timeout_s * 1000));
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

}  // namespace

const Connection* current_connection() { return t_current; }

int default_max_connections() {
  rlimit rl{};
  int64_t soft = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) soft = int64_t(rl.rlim_cur);
  if (rl.rlim_cur == RLIM_INFINITY) soft = 1 << 20;
  return int(std::max<int64_t>(16, std::min<int64_t>(8192, soft - 128)));
}

// ---- ConnectionStream ----

bool ConnectionStream::is_readable() const {
  return off_ < c_.buf.size() || wait_fd(c_.fd, POLLIN, read_timeout_s_);
}

bool ConnectionStream::is_writable() const { return wait_fd(c_.fd, POLLOUT, write_timeout_s_); }

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (off_ < c_.buf.size()) {
    const size_t n = std::min(size, c_.buf.size() - off_);
    std::memcpy(ptr, c_.buf.data() + off_, n);
    off_ += n;
    return ssize_t(n);
  }
  if (c_.peer_half_closed) return 0;
  for (;;) {
    if (!wait_fd(c_.fd, POLLIN, read_timeout_s_)) return -1;
    const ssize_t n = ::recv(c_.fd, ptr, size, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    return n;
  }
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::send(c_.fd, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(c_.fd, POLLOUT, write_timeout_s_)) return -1;
      continue;
    }
    return -1;
  }
  return ssize_t(done);
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = c_.remote_addr;
  port = c_.remote_port;
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  ip = c_.local_addr;
  port = c_.local_port;
}

// ---- FrontEnd ----

FrontEnd::FrontEnd(FrontEndOptions o, Serve serve) : opt_(std::move(o)), serve_(std::move(serve)) {
  if (opt_.max_connections <= 0) opt_.max_connections = default_max_connections();
  if (opt_.threads < 1) opt_.threads = 1;
}

FrontEnd::~FrontEnd() {
  stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

int FrontEnd::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || !res)
    fail("cannot bind ", host, ":", port, " (not an address of this machine)");
  int fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) break;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) fail("cannot bind ", host, ":", port, " (in use, or not an address of this machine)");
  sockaddr_storage ss{};
  socklen_t sl = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl);
  std::string addr;
  int bound = port;
  socket_endpoint(ss, &addr, &bound);
  listen_fd_ = fd;
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) fail("cannot create the server's event loop: ", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  return bound;
}

bool FrontEnd::run() {
  if (listen_fd_ < 0) return false;
  running_ = true;
  for (int i = 0; i < opt_.threads; ++i) workers_.emplace_back([this] { worker(); });
  loop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  // Whatever is still queued or handed back closes.
  for (auto& c : ready_) {
    ::close(c->fd);
    release_to(*c, 0);
    --open_;
  }
  ready_.clear();
  for (auto& c : returned_) {
    ::close(c->fd);
    release_to(*c, 0);
    --open_;
  }
  returned_.clear();
  running_ = false;
  return true;
}

void FrontEnd::stop() {
  stop_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
  cv_.notify_all();
}

void FrontEnd::loop() {
  // A spare descriptor: when accept fails for want of descriptors (EMFILE), closing it lets the
  // loop accept and close the connection instead of spinning on a listening socket that stays
  // readable.
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<epoll_event> events(256);
  int64_t next_expire = now_ns();
  while (!stop_) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), int(events.size()), 100);
    if (stop_) break;
    for (int i = 0; i < n; ++i) {
      const int fd = events[size_t(i)].data.fd;
      if (fd == listen_fd_) {
        accept_all();
      } else if (fd == wake_fd_) {
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof v);
        std::vector<std::unique_ptr<Connection>> back;
        {
          std::lock_guard<std::mutex> lock(mu_);
          back.swap(returned_);
        }
        for (auto& c : back) rearm(std::move(c));
      } else {
        read_conn(fd);
      }
    }
    const int64_t t = now_ns();
    if (t >= next_expire) {
      expire();
      next_expire = t + seconds_ns(0.05);
    }
  }
  if (spare_fd_ >= 0) ::close(spare_fd_);
  spare_fd_ = -1;
  for (auto& c : reading_)
    if (c) {
      ::close(c->fd);
      release_to(*c, 0);
      --open_;
    }
  reading_.clear();
  num_reading_ = 0;
}

void FrontEnd::accept_all() {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t pl = sizeof peer;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: drop the connection that has waited longest for its request,
        // then try again once.
        if (num_reading_ > 0) {
          evict_one();
          continue;
        }
        if (spare_fd_ >= 0) {
          ::close(spare_fd_);
          const int f = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
          if (f >= 0) {
            send_status(f, 503, error_message(503, 0, 0));
            ::close(f);
          }
          spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
          if (f >= 0) continue;
        }
      }
      return;
    }
    if (open_.load() >= opt_.max_connections) {
      if (num_reading_ > 0) {
        evict_one();
      } else {
        send_status(fd, 503, error_message(503, 0, 0));
        ::close(fd);
        continue;
      }
    }
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    socket_endpoint(peer, &c->remote_addr, &c->remote_port);
    sockaddr_storage self{};
    socklen_t sl = sizeof self;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl) == 0) socket_endpoint(self, &c->local_addr, &c->local_port);
    int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    ++open_;
    rearm(std::move(c));
  }
}

void FrontEnd::rearm(std::unique_ptr<Connection> c) {
  const int fd = c->fd;
  c->head_end = 0;
  c->wait_start_ns = now_ns();
  c->deadline_ns = c->wait_start_ns + seconds_ns(opt_.header_timeout_s);
  if (size_t(fd) >= reading_.size()) reading_.resize(size_t(fd) + 1);
  reading_[size_t(fd)] = std::move(c);
  ++num_reading_;
  // A pipelined request may already be buffered whole.
  Connection& rc = *reading_[size_t(fd)];
  rc.framing = BodyFraming::kNone;
  rc.content_length = 0;
  rc.chunked.reset();
  rc.body.clear();
  rc.error_status = 0;
  rc.error_message.clear();
  if (request_complete(rc)) {
    to_worker(fd);
    return;
  }
  if (rc.error_status != 0) {
    close_conn(fd, rc.error_status);
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) close_conn(fd, 0);
}

// Budget for a connection's buffers: `bytes` more than it holds, taken in steps of at least
// 16 KiB, one read.
bool FrontEnd::reserve(Connection& c, int64_t bytes) {
  if (!opt_.budget || bytes <= 0) return true;
  const int64_t step = std::max<int64_t>(bytes, 16 << 10);
  if (opt_.budget->try_take(step)) {
    c.reserved += step;
    return true;
  }
  if (step > bytes && opt_.budget->try_take(bytes)) {
    c.reserved += bytes;
    return true;
  }
  return false;
}

void FrontEnd::release_to(Connection& c, int64_t keep) {
  if (!opt_.budget || c.reserved <= keep) return;
  opt_.budget->give(c.reserved - std::max<int64_t>(keep, 0));
  c.reserved = std::max<int64_t>(keep, 0);
}

void FrontEnd::read_conn(int fd) {
  if (size_t(fd) >= reading_.size() || !reading_[size_t(fd)]) return;
  Connection& c = *reading_[size_t(fd)];
  char chunk[16384];
  bool eof = false;
  for (int rounds = 0; rounds < 8; ++rounds) {
    // Room for one more read within the budget, first.
    const int64_t held = int64_t(c.buf.size() + c.body.size());
    if (held + int64_t(sizeof chunk) > c.reserved && !reserve(c, held + int64_t(sizeof chunk) - c.reserved)) {
      c.error_status = 503;
      c.error_message = cat("the server's memory for requests in flight (", opt_.budget->limit(),
                            " bytes) is taken; retry later");
      close_conn(fd, 503);
      return;
    }
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) {
      c.buf.append(chunk, size_t(n));
      // Never buffer more than one request can be (a pipelining client waits for answers).
      if (c.buf.size() > opt_.max_header_bytes + opt_.max_body_bytes + 64) break;
      continue;
    }
    if (n == 0) {
      eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    close_conn(fd, 0);  // reset
    return;
  }
  const bool complete = request_complete(c);
  if (eof) c.peer_half_closed = true;
  if (complete) {
    to_worker(fd);
  } else if (c.error_status != 0) {
    close_conn(fd, c.error_status);
  } else if (eof) {
    // Gone before its request was whole: a client that only half-closed still reads the answer.
    if (c.head_end > 0) {
      c.error_status = 400;
      c.error_message = c.framing == BodyFraming::kChunked
                            ? cat("the connection ended before the chunked body's last chunk (", c.body.size(),
                                  " body bytes received)")
                            : cat("the connection ended after ", c.buf.size() - c.head_end, " of the ",
                                  c.content_length, " body bytes (Content-Length)");
      close_conn(fd, 400);
    } else {
      c.error_status = c.buf.empty() ? 0 : 400;
      c.error_message = "the connection ended before the request headers were complete";
      close_conn(fd, c.buf.empty() ? 0 : 400);
    }
  }
}

bool FrontEnd::request_complete(Connection& c) {
  c.error_status = 0;
  auto refuse = [&c](int status, std::string message) {
    c.error_status = status;
    c.error_message = std::move(message);
    return false;
  };
  if (c.head_end == 0) {
    // Empty lines before a request line are ignored (RFC 9112 2.2).
    size_t lead = 0;
    while (lead < c.buf.size() && (c.buf[lead] == '\r' || c.buf[lead] == '\n')) ++lead;
    if (lead > 0) c.buf.erase(0, lead);
    size_t pos = c.buf.find("\r\n\r\n");
    size_t end = pos == std::string::npos ? std::string::npos : pos + 4;
    const size_t lf = c.buf.find("\n\n");
    if (lf != std::string::npos && (end == std::string::npos || lf + 2 < end)) end = lf + 2;
    if (end == std::string::npos) {
      if (c.buf.size() > opt_.max_header_bytes) return refuse(431, error_message(431, opt_.max_header_bytes, 0));
      return false;
    }
    if (end > opt_.max_header_bytes) return refuse(431, error_message(431, opt_.max_header_bytes, 0));
    const FramingLimits limits{opt_.max_header_bytes, opt_.max_body_bytes};
    const HeadInfo h = check_request_head(std::string_view(c.buf).substr(0, end), limits);
    if (h.status != 0) return refuse(h.status, h.message);
    // A Content-Length body is taken from the budget whole before any of it is read: a
    // refusal costs the client nothing.
    if (h.framing == BodyFraming::kLength) {
      const int64_t need = int64_t(end + h.content_length) - c.reserved;
      if (need > 0 && !reserve(c, need))
        return refuse(503, cat("the server's memory for requests in flight (", opt_.budget->limit(),
                               " bytes) cannot take this request's ", h.content_length, "-byte body now; retry later"));
    }
    // The request line and headers are in: the body has its own deadline. An "Expect:
    // 100-continue" client waits for a go-ahead before sending the body: give it here and drop
    // the header (the handler would send a second one).
    if (h.expect_continue) {
      size_t line = c.buf.find('\n');
      while (line != std::string::npos && line + 1 < end) {
        const size_t start = line + 1;
        const size_t next = c.buf.find('\n', start);
        if (iequals_prefix(c.buf.data() + start, next - start, "expect:")) {
          c.buf.erase(start, next + 1 - start);
          end -= next + 1 - start;
          if (h.framing != BodyFraming::kNone) {
            static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
            (void)::send(c.fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
          }
          break;
        }
        line = next;
      }
    }
    c.head_end = end;
    c.framing = h.framing;
    c.content_length = h.content_length;
    c.body.clear();
    c.chunked = h.framing == BodyFraming::kChunked ? std::make_unique<ChunkedDecoder>(limits) : nullptr;
    c.deadline_ns = now_ns() + seconds_ns(opt_.body_timeout_s);
  }
  switch (c.framing) {
    case BodyFraming::kNone: return true;
    case BodyFraming::kLength: return c.buf.size() - c.head_end >= c.content_length;
    case BodyFraming::kChunked: break;
  }
  // Decode what arrived; the wire bytes consumed leave the buffer (the decoded body holds them).
  const size_t used = c.chunked->feed(std::string_view(c.buf).substr(c.head_end), &c.body);
  c.buf.erase(c.head_end, used);
  if (c.chunked->state() == ChunkedDecoder::State::kError) return refuse(c.chunked->status(), c.chunked->message());
  if (c.chunked->state() != ChunkedDecoder::State::kDone) return false;
  // Complete: the handler gets the request with a Content-Length, then whatever follows it.
  std::string rest = c.buf.substr(c.head_end);
  std::string head = head_with_length(std::string_view(c.buf).substr(0, c.head_end), c.body.size());
  c.head_end = head.size();
  c.buf = std::move(head);
  c.buf += c.body;
  c.buf += rest;
  c.content_length = c.body.size();
  c.framing = BodyFraming::kLength;
  std::string().swap(c.body);
  c.chunked.reset();
  return true;
}

void FrontEnd::to_worker(int fd) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  std::unique_ptr<Connection> c = std::move(reading_[size_t(fd)]);
  --num_reading_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(std::move(c));
  }
  cv_.notify_one();
}

void FrontEnd::close_conn(int fd, int status) {
  if (size_t(fd) >= reading_.size() || !reading_[size_t(fd)]) return;
  Connection& c = *reading_[size_t(fd)];
  if (status != 0)
    send_status(fd, status,
                !c.error_message.empty() && c.error_status == status
                    ? c.error_message
                    : error_message(status, opt_.max_header_bytes, opt_.max_body_bytes));
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  release_to(c, 0);
  reading_[size_t(fd)].reset();
  --num_reading_;
  --open_;
}

void FrontEnd::evict_one() {
  int oldest = -1;
  int64_t t = INT64_MAX;
  for (const auto& c : reading_)
    if (c && c->wait_start_ns < t) {
      t = c->wait_start_ns;
      oldest = c->fd;
    }
  if (oldest < 0) return;
  ++evicted_;
  close_conn(oldest, 503);
}

void FrontEnd::expire() {
  const int64_t t = now_ns();
  for (auto& c : reading_)
    if (c && t >= c->deadline_ns) {
      ++timed_out_;
      // A kept-alive connection idle between requests just closes; one in the middle of a
      // request is told why.
      close_conn(c->fd, c->buf.empty() && c->served > 0 ? 0 : 408);
    }
}

void FrontEnd::worker() {
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_.load() || !ready_.empty(); });
      if (stop_) return;
      c = std::move(ready_.front());
      ready_.pop_front();
    }
    ConnectionStream strm(*c, opt_.read_timeout_s, opt_.write_timeout_s);
    const bool close_connection =
        stop_.load() || c->peer_half_closed || c->served + 1 >= opt_.max_requests_per_connection;
    bool connection_closed = false;
    bool ok = false;
    t_current = c.get();
    try {
      ok = serve_(strm, close_connection, connection_closed);
    } catch (const std::exception& e) {
      log_warn("serve: a connection handler failed: ", e.what());
    } catch (...) {
      log_warn("serve: a connection handler failed");
    }
    t_current = nullptr;
    ++c->served;
    c->buf.erase(0, std::min(strm.off_, c->buf.size()));
    if (!ok || close_connection || connection_closed || stop_) {
      ::close(c->fd);
      release_to(*c, 0);
      --open_;
      continue;
    }
    release_to(*c, int64_t(c->buf.size()));  // the answered request's bytes go back
    {
      std::lock_guard<std::mutex> lock(mu_);
      returned_.push_back(std::move(c));
    }
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
}

}  // namespace loom::server
