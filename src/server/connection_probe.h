// Tells whether the client of an HTTP request has gone away, while a handler waits for the
// engine and writes nothing.
//
// cpp-httplib 0.11 (Debian 12's) has no Request::is_connection_closed (added in later
// versions as `!is_socket_alive(sock)`, a non-blocking MSG_PEEK). This does the same check on
// the connection's socket, which the handler is not given: find() looks the socket up once
// among the process's descriptors by its two endpoints (our local address and port, the
// client's address and port, which Request carries; a live TCP connection is unique by them,
// and the descriptor stays the connection's for as long as the handler runs).
// closed(): recv(MSG_PEEK | MSG_DONTWAIT) returns 0 (the client closed or shut down its side)
// or fails with anything but EAGAIN (reset). Bytes waiting (a pipelined request) mean alive.
// When the socket cannot be found (another transport), closed() is always false and the
// server falls back to noticing the disconnect when a write fails.
#pragma once

#include <sys/socket.h>

#include <string>

namespace loom::server {

// Address text and port of a socket address (IPv4 or IPv6), as cpp-httplib writes them; false for
// any other family.
bool socket_endpoint(const sockaddr_storage& ss, std::string* addr, int* port);

enum class PeerState { kOpen, kEof, kGone };

class ConnectionProbe {
 public:
  ConnectionProbe() = default;
  // The connection the calling handler thread serves (http_front.h's current_connection()).
  static ConnectionProbe current();
  static ConnectionProbe find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                              int remote_port);
  bool found() const { return fd_ >= 0; }
  // kEof: the client shut down its sending side: closed, or only half-closed (it may still
  // read; the caller tells them apart, http_server.cpp client_gone). kGone: reset or error.
  PeerState state() const;
  bool closed() const { return state() != PeerState::kOpen; }
  // Writes "HTTP/1.1 100 Continue\r\n\r\n" (non-blocking); false when it cannot be sent.
  bool send_interim_continue() const;

 private:
  int fd_ = -1;
};

}  // namespace loom::server
