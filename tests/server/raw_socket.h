// Raw-socket helpers for the server tests: what a hostile or unusual client sends, byte by byte.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>

namespace loom::server::test {

inline int connect_raw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

// Reads until the peer closes or timeout.
inline std::string read_to_eof(int fd, double timeout_s) {
  std::string out;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

// Reads one response: its head and, when it has a Content-Length, that many body bytes (or until
// the peer closes, or timeout). Interim 1xx responses are skipped. Bytes read past it (the next
// response of a pipelined exchange) are kept in *carry, and read from there first next time.
inline std::string read_response(int fd, double timeout_s, std::string* carry = nullptr) {
  std::string out;
  if (carry) out.swap(*carry);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  while (std::chrono::steady_clock::now() < end) {
    while (out.rfind("HTTP/1.1 1", 0) == 0 && out.find("\r\n\r\n") != std::string::npos)
      out.erase(0, out.find("\r\n\r\n") + 4);
    const size_t head = out.find("\r\n\r\n");
    if (head != std::string::npos) {
      const size_t cl = out.find("Content-Length: ");
      if (cl != std::string::npos && cl < head) {
        const size_t n = size_t(std::atoll(out.c_str() + cl + 16));
        if (out.size() >= head + 4 + n) {
          if (carry) *carry = out.substr(head + 4 + n);
          return out.substr(0, head + 4 + n);
        }
      }
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

// Whether the server has sent anything or closed: false while the connection waits quietly.
inline bool server_said_something(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

// The status code of the first response in `resp` (0 when none).
inline int status_of(const std::string& resp) {
  if (resp.rfind("HTTP/1.", 0) != 0 || resp.size() < 12) return 0;
  return std::atoi(resp.substr(9, 3).c_str());
}

}  // namespace loom::server::test
