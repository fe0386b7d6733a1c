#include "server/connection_probe.h"

#include "server/http_front.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace loom::server {

bool socket_endpoint(const sockaddr_storage& ss, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) return false;
    *port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

ConnectionProbe ConnectionProbe::find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                      int remote_port) {
  ConnectionProbe p;
  if (local_port <= 0 || remote_port <= 0) return p;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return p;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == ::dirfd(d)) continue;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    std::string pa, sa;
    int pp = 0, sp = 0;
    if (!socket_endpoint(peer, &pa, &pp) || !socket_endpoint(self, &sa, &sp)) continue;
    if (pp == remote_port && sp == local_port && pa == remote_addr && (local_addr.empty() || sa == local_addr)) {
      p.fd_ = fd;
      break;
    }
  }
  ::closedir(d);
  return p;
}

ConnectionProbe ConnectionProbe::current() {
  ConnectionProbe p;
  if (const Connection* c = current_connection()) p.fd_ = c->fd;
  return p;
}

PeerState ConnectionProbe::state() const {
  if (fd_ < 0) return PeerState::kOpen;
  char c;
  const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return PeerState::kOpen;
  if (n == 0) {
    // After the peer's FIN recv() keeps returning 0 even once a reset has arrived (the socket
    // is "done"); the TCP state tells: CLOSE_WAIT = only the FIN, CLOSE = reset since.
    tcp_info ti{};
    socklen_t len = sizeof ti;
    if (::getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == TCP_CLOSE) return PeerState::kGone;
    return PeerState::kEof;
  }
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? PeerState::kOpen : PeerState::kGone;
}

bool ConnectionProbe::send_interim_continue() const {
  if (fd_ < 0) return true;
  static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
  return ::send(fd_, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT) == ssize_t(sizeof kContinue - 1);
}

}  // namespace loom::server
