#include "checks.h"

#include <cstdint>
#include <cstring>
#include <numeric>

#include "core/error.h"

namespace loom::test {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 32;
  return x;
}

std::uint8_t byte_value(int src, int dst, std::size_t k) {
  return static_cast<std::uint8_t>(mix((static_cast<std::uint64_t>(src) << 48) ^
                                       (static_cast<std::uint64_t>(dst) << 40) ^ k) >> 13);
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The contract: ((x_0 + x_1) + x_2) + ... in f32, in the order given.
float rank_order_sum(const std::vector<int>& ranks, std::size_t i) {
  float s = comm_value(ranks[0], i);
  for (std::size_t k = 1; k < ranks.size(); ++k) s += comm_value(ranks[k], i);
  return s;
}

std::vector<int> all_ranks(int n) {
  std::vector<int> r(static_cast<std::size_t>(n));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

std::string mismatch_f32(const char* what, std::size_t n, std::size_t i, float got, float want) {
  return cat(what, "(n=", n, "): element ", i, " is ", got, " (0x", std::hex, bits(got),
             ") but the rank-order sum is ", want, " (0x", bits(want), ")", std::dec);
}

}  // namespace

const std::vector<std::size_t>& comm_sizes() {
  static const std::vector<std::size_t> sizes = {0, 1, 7, 97, 1000003};
  return sizes;
}

std::size_t per_rank_count(std::size_t n, int n_ranks) {
  return n < 1000 ? n : (n / static_cast<std::size_t>(n_ranks)) | 1;
}

float comm_value(int r, std::size_t i) {
  const std::uint64_t h = mix((static_cast<std::uint64_t>(r) + 1) * 0x9e3779b97f4a7c15ull + i);
  // Integers in [-10^6, 10^6] / 4096, scaled per rank: sums of a few of these round in f32.
  const auto v = static_cast<std::int64_t>(h % 2000001) - 1000000;
  return static_cast<float>(v) * (1.0f / 4096.0f) * (1.0f + 0.37f * static_cast<float>(r));
}

std::string check_all_reduce(Communicator& c, std::size_t n) {
  std::vector<float> data(n);
  for (std::size_t i = 0; i < n; ++i) data[i] = comm_value(c.rank(), i);
  c.all_reduce_sum(data.data(), n);
  const auto ranks = all_ranks(c.size());
  for (std::size_t i = 0; i < n; ++i) {
    const float want = rank_order_sum(ranks, i);
    if (bits(data[i]) != bits(want)) return mismatch_f32("all_reduce_sum", n, i, data[i], want);
  }
  return "";
}

std::string check_reduce_scatter(Communicator& c, std::size_t m) {
  const std::size_t p = static_cast<std::size_t>(c.size());
  std::vector<float> send(p * m), recv(m, -1.0f);
  for (std::size_t j = 0; j < send.size(); ++j) send[j] = comm_value(c.rank(), j);
  c.reduce_scatter_sum(send.data(), recv.data(), m);
  const auto ranks = all_ranks(c.size());
  const std::size_t off = static_cast<std::size_t>(c.rank()) * m;
  for (std::size_t i = 0; i < m; ++i) {
    const float want = rank_order_sum(ranks, off + i);
    if (bits(recv[i]) != bits(want)) return mismatch_f32("reduce_scatter_sum", m, i, recv[i], want);
  }
  return "";
}

std::string check_reduce_scatter_v(Communicator& c, std::size_t base) {
  const int p = c.size();
  // Uneven counts, some zero: rank q gets base + 3q, except every third rank gets nothing.
  std::vector<std::size_t> counts(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q) counts[q] = q % 3 == 1 ? 0 : base + 3 * static_cast<std::size_t>(q);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  std::size_t off = 0;
  for (int q = 0; q < c.rank(); ++q) off += counts[q];
  std::vector<float> send(total), recv(counts[c.rank()], -1.0f);
  for (std::size_t j = 0; j < total; ++j) send[j] = comm_value(c.rank(), j);
  c.reduce_scatter_sum_v(send.data(), recv.data(), counts);
  const auto ranks = all_ranks(p);
  for (std::size_t i = 0; i < recv.size(); ++i) {
    const float want = rank_order_sum(ranks, off + i);
    if (bits(recv[i]) != bits(want)) {
      return mismatch_f32("reduce_scatter_sum_v", base, i, recv[i], want);
    }
  }
  return "";
}

std::string check_all_gather(Communicator& c, std::size_t m) {
  const int p = c.size();
  std::vector<float> send(m), recv(static_cast<std::size_t>(p) * m, -1.0f);
  for (std::size_t i = 0; i < m; ++i) send[i] = comm_value(c.rank(), i);
  c.all_gather(send.data(), recv.data(), m);
  for (int q = 0; q < p; ++q) {
    for (std::size_t i = 0; i < m; ++i) {
      const float got = recv[static_cast<std::size_t>(q) * m + i];
      if (bits(got) != bits(comm_value(q, i))) {
        return cat("all_gather(n=", m, "): element ", i, " from rank ", q, " is ", got,
                   ", expected ", comm_value(q, i));
      }
    }
  }
  return "";
}

std::string check_all_gather_in_place(Communicator& c, std::size_t b) {
  const int p = c.size();
  std::vector<std::uint8_t> buf(static_cast<std::size_t>(p) * b, 0xee);
  std::uint8_t* mine = buf.data() + static_cast<std::size_t>(c.rank()) * b;
  for (std::size_t k = 0; k < b; ++k) mine[k] = byte_value(c.rank(), 0, k);
  c.all_gather_bytes(mine, buf.data(), b);
  for (int q = 0; q < p; ++q) {
    for (std::size_t k = 0; k < b; ++k) {
      if (buf[static_cast<std::size_t>(q) * b + k] != byte_value(q, 0, k)) {
        return cat("all_gather_bytes in place (", b, " bytes): byte ", k, " from rank ", q,
                   " is wrong");
      }
    }
  }
  return "";
}

std::string check_all_gather_v(Communicator& c, std::size_t base) {
  const int p = c.size();
  std::vector<std::size_t> counts(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q) counts[q] = q % 2 == 1 ? base / 2 : base + static_cast<std::size_t>(q);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  std::vector<float> send(counts[c.rank()]), recv(total, -1.0f);
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = comm_value(c.rank(), i);
  c.all_gather_v(send.data(), recv.data(), counts);
  std::size_t off = 0;
  for (int q = 0; q < p; ++q) {
    for (std::size_t i = 0; i < counts[q]; ++i) {
      if (bits(recv[off + i]) != bits(comm_value(q, i))) {
        return cat("all_gather_v(base=", base, "): element ", i, " from rank ", q, " is ",
                   recv[off + i], ", expected ", comm_value(q, i));
      }
    }
    off += counts[q];
  }
  return "";
}

std::string check_all_to_all(Communicator& c, std::size_t m) {
  const int p = c.size();
  const std::size_t total = static_cast<std::size_t>(p) * m;
  // Element i of the chunk rank s sends to rank d is comm_value(64*s + d, i).
  std::vector<float> send(total), recv(total, -1.0f);
  for (std::size_t j = 0; j < total; ++j) {
    send[j] = comm_value(64 * c.rank() + static_cast<int>(j / m), j % m);
  }
  c.all_to_all(send.data(), recv.data(), m);
  for (std::size_t j = 0; j < total; ++j) {
    const int s = static_cast<int>(j / m);
    const float want = comm_value(64 * s + c.rank(), j % m);
    if (bits(recv[j]) != bits(want)) {
      return cat("all_to_all(n=", m, "): element ", j % m, " from rank ", s, " is ", recv[j],
                 ", expected ", want);
    }
  }
  return "";
}

std::string check_all_to_all_v(Communicator& c, std::size_t base) {
  const int p = c.size(), me = c.rank();
  // Bytes from rank s to rank d: uneven, some zero.
  auto nbytes = [&](int s, int d) -> std::size_t {
    return (s + 2 * d) % 4 == 3 ? 0 : base + static_cast<std::size_t>(5 * s + 3 * d);
  };
  // Send regions in reverse destination order with 5-byte gaps; receive regions in source order
  // with 3-byte gaps, so displacements matter.
  std::vector<std::size_t> sb(p), sd(p), rb(p), rd(p);
  std::size_t soff = 0, roff = 0;
  for (int d = p - 1; d >= 0; --d) {
    sb[d] = nbytes(me, d);
    sd[d] = soff;
    soff += sb[d] + 5;
  }
  for (int s = 0; s < p; ++s) {
    rb[s] = nbytes(s, me);
    rd[s] = roff;
    roff += rb[s] + 3;
  }
  std::vector<std::uint8_t> send(soff, 0xaa), recv(roff, 0xee);
  for (int d = 0; d < p; ++d) {
    for (std::size_t k = 0; k < sb[d]; ++k) send[sd[d] + k] = byte_value(me, d, k);
  }
  c.all_to_all_v_bytes(send.data(), sb, sd, recv.data(), rb, rd);
  for (int s = 0; s < p; ++s) {
    for (std::size_t k = 0; k < rb[s]; ++k) {
      if (recv[rd[s] + k] != byte_value(s, me, k)) {
        return cat("all_to_all_v_bytes(base=", base, "): byte ", k, " from rank ", s, " is wrong");
      }
    }
    for (std::size_t k = rb[s]; k < rb[s] + 3; ++k) {
      if (recv[rd[s] + k] != 0xee) {
        return cat("all_to_all_v_bytes(base=", base, "): the gap after rank ", s,
                   "'s bytes was written");
      }
    }
  }
  return "";
}

std::string check_broadcast(Communicator& c, std::size_t bytes, int root) {
  std::vector<std::uint8_t> data(bytes, 0xee);
  if (c.rank() == root) {
    for (std::size_t k = 0; k < bytes; ++k) data[k] = byte_value(root, 99, k);
  }
  c.broadcast(data.data(), bytes, root);
  for (std::size_t k = 0; k < bytes; ++k) {
    if (data[k] != byte_value(root, 99, k)) {
      return cat("broadcast(", bytes, " bytes, root ", root, "): byte ", k, " is wrong");
    }
  }
  return "";
}

std::string check_send_recv(Communicator& c, std::size_t bytes) {
  const int p = c.size(), me = c.rank();
  if (p == 1) return "";
  // Ring: send two messages (tags 5 and 6, different sizes) to the right, receive from the
  // left. Even ranks send first and odd ranks receive first, so synchronous sends cannot
  // deadlock.
  const int right = (me + 1) % p, left = (me - 1 + p) % p;
  std::vector<std::uint8_t> a(bytes), b(bytes / 2 + 1), ra(bytes, 0xee), rb(bytes / 2 + 1, 0xee);
  for (std::size_t k = 0; k < a.size(); ++k) a[k] = byte_value(me, 5, k);
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = byte_value(me, 6, k);
  auto do_send = [&] {
    c.send(right, 5, a.data(), a.size());
    c.send(right, 6, b.data(), b.size());
  };
  auto do_recv = [&] {
    c.recv(left, 5, ra.data(), ra.size());
    c.recv(left, 6, rb.data(), rb.size());
  };
  if (me % 2 == 0) {
    do_send();
    do_recv();
  } else {
    do_recv();
    do_send();
  }
  for (std::size_t k = 0; k < ra.size(); ++k) {
    if (ra[k] != byte_value(left, 5, k)) return cat("recv(tag 5, ", bytes, " bytes): byte ", k);
  }
  for (std::size_t k = 0; k < rb.size(); ++k) {
    if (rb[k] != byte_value(left, 6, k)) return cat("recv(tag 6, ", rb.size(), " bytes): byte ", k);
  }
  return "";
}

std::string check_get(Communicator& c, std::size_t bytes) {
  const int p = c.size(), me = c.rank();
  // Each rank exposes a buffer of its own size: bytes + rank.
  std::vector<std::uint8_t> mine(bytes + static_cast<std::size_t>(me));
  for (std::size_t k = 0; k < mine.size(); ++k) mine[k] = byte_value(me, 77, k);
  c.register_buffer(7, mine.data(), mine.size());
  std::string err;
  for (int k = 0; k < p && err.empty(); ++k) {
    const int src = (me + k) % p;  // staggered, like SiDP's peak shifting
    const std::size_t size = bytes + static_cast<std::size_t>(src);
    const std::size_t off = size / 3, len = size - off;
    std::vector<std::uint8_t> got(len, 0xee);
    c.get(src, 7, off, got.data(), len);
    for (std::size_t j = 0; j < len; ++j) {
      if (got[j] != byte_value(src, 77, off + j)) {
        err = cat("get(rank ", src, ", bytes [", off, ", ", off + len, ")): byte ", off + j,
                  " is wrong");
        break;
      }
    }
    c.get(src, 7, size, got.data(), 0);  // empty range at the end is valid
    try {
      c.get(src, 7, off, got.data(), len + 1);
      err = cat("get past the end of rank ", src, "'s ", size, "-byte buffer did not throw");
    } catch (const Error&) {
    }
  }
  c.barrier();  // nobody reads any more before the buffers go
  c.deregister_buffer(7);
  return err;
}

std::string check_split(Communicator& c, std::size_t n) {
  const int p = c.size(), me = c.rank();
  // Two groups by parity, ordered by descending parent rank (key = -rank).
  auto sub = c.split(me % 2, -me);
  if (!sub) return "split(parity): got no communicator";
  std::vector<int> members;
  for (int q = p - 1; q >= 0; --q) {
    if (q % 2 == me % 2) members.push_back(q);
  }
  if (sub->size() != static_cast<int>(members.size())) {
    return cat("split(parity): size ", sub->size(), ", expected ", members.size());
  }
  int want_rank = 0;
  while (members[want_rank] != me) ++want_rank;
  if (sub->rank() != want_rank) return cat("split(parity): rank ", sub->rank(), ", expected ", want_rank);
  // The sum runs in the sub-group's rank order, i.e. descending parent rank.
  std::vector<float> data(n);
  for (std::size_t i = 0; i < n; ++i) data[i] = comm_value(me, i);
  sub->all_reduce_sum(data.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    const float want = rank_order_sum(members, i);
    if (bits(data[i]) != bits(want)) return mismatch_f32("split all_reduce_sum", n, i, data[i], want);
  }
  // Nested: split the sub-group again into halves by its rank, and rank 0 of the parent opts out.
  const int half = sub->rank() < (sub->size() + 1) / 2 ? 0 : 1;
  auto sub2 = sub->split(me == 0 ? -1 : half, sub->rank());
  if (me == 0) {
    if (sub2) return "split(color -1) returned a communicator";
  } else {
    std::vector<int> m2;
    for (int k = 0; k < sub->size(); ++k) {
      const int parent = members[k];
      const int h = k < (sub->size() + 1) / 2 ? 0 : 1;
      if (parent != 0 && h == half) m2.push_back(parent);
    }
    if (!sub2 || sub2->size() != static_cast<int>(m2.size())) return "nested split: wrong size";
    std::vector<float> d2(7);
    for (std::size_t i = 0; i < d2.size(); ++i) d2[i] = comm_value(me, i);
    sub2->all_reduce_sum(d2.data(), d2.size());
    for (std::size_t i = 0; i < d2.size(); ++i) {
      const float want = rank_order_sum(m2, i);
      if (bits(d2[i]) != bits(want)) return mismatch_f32("nested split all_reduce", 7, i, d2[i], want);
    }
  }
  // The parent is still usable after the groups were made.
  c.barrier();
  return "";
}

std::string check_agreement_detects(Communicator& c) {
  try {
    c.check_agreement("plan", 0x1234abcdull);
  } catch (const Error& e) {
    return cat("check_agreement threw on equal hashes: ", e.what());
  }
  if (c.size() == 1) return "";
  const std::uint64_t h = c.rank() == 1 ? 0xbadull : 0x600dull;
  try {
    c.check_agreement("plan", h);
    return "check_agreement did not throw when rank 1 disagrees";
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.find("ranks disagree on plan") == std::string::npos ||
        msg.find("rank 1 has 0xbad") == std::string::npos ||
        msg.find(c.size() == 2 ? "rank 0 has 0x600d" : "have 0x600d") == std::string::npos) {
      return cat("check_agreement message does not name the ranks and values: ", msg);
    }
  }
  // The group is still usable afterwards.
  c.barrier();
  return "";
}

std::string check_everything(Communicator& c) {
  std::string all;
  auto add = [&](const std::string& e) {
    if (!e.empty()) all += cat("rank ", c.rank(), "/", c.size(), ": ", e, "\n");
  };
  for (std::size_t n : comm_sizes()) {
    const std::size_t m = per_rank_count(n, c.size());
    add(check_all_reduce(c, n));
    add(check_reduce_scatter(c, m));
    add(check_reduce_scatter_v(c, m));
    add(check_all_gather(c, m));
    add(check_all_gather_in_place(c, m));
    add(check_all_gather_v(c, m));
    add(check_all_to_all(c, m));
    add(check_all_to_all_v(c, m));
    for (int root = 0; root < c.size(); ++root) add(check_broadcast(c, n, root));
    add(check_send_recv(c, n));
    add(check_get(c, n));
  }
  add(check_split(c, 97));
  add(check_agreement_detects(c));
  return all;
}

}  // namespace loom::test
