// A byte message of any length over point-to-point send/recv, which need equal sizes on both
// sides: the length (8 bytes) first, then the bytes. Used by the control channels that carry
// step descriptors and tokens (engine/sidp_replicas.cpp, cluster/pool.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"

namespace loom {

inline void send_message(Communicator& c, int dst, int tag, const std::vector<uint8_t>& b) {
  const uint64_t n = b.size();
  c.send(dst, tag, &n, sizeof n);
  if (n) c.send(dst, tag, b.data(), b.size());
}

// Fails naming `what` when the announced length is over 4 GiB (a corrupt or hostile header).
inline std::vector<uint8_t> recv_message(Communicator& c, int src, int tag, const char* what) {
  uint64_t n = 0;
  c.recv(src, tag, &n, sizeof n);
  if (n > (uint64_t(1) << 32)) fail(what, " of ", n, " bytes");
  std::vector<uint8_t> b(size_t(n), 0);
  if (n) c.recv(src, tag, b.data(), b.size());
  return b;
}

}  // namespace loom
