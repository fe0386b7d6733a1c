// Local backend: ranks as threads, collectives through a shared arena of per-rank slots plus a
// barrier. See local.h for the design and the fault behaviour.
#include "comm/local.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "core/error.h"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

enum class Op : std::uint8_t {
  Barrier,
  AllReduce,
  ReduceScatter,
  ReduceScatterV,
  AllGather,
  AllGatherV,
  AllToAll,
  AllToAllV,
  Broadcast,
  Register,
  Deregister,
  Split,
};

const char* op_name(Op op) {
  switch (op) {
    case Op::Barrier: return "barrier";
    case Op::AllReduce: return "all_reduce_sum";
    case Op::ReduceScatter: return "reduce_scatter_sum";
    case Op::ReduceScatterV: return "reduce_scatter_sum_v";
    case Op::AllGather: return "all_gather";
    case Op::AllGatherV: return "all_gather_v";
    case Op::AllToAll: return "all_to_all";
    case Op::AllToAllV: return "all_to_all_v";
    case Op::Broadcast: return "broadcast";
    case Op::Register: return "register_buffer";
    case Op::Deregister: return "deregister_buffer";
    case Op::Split: return "split";
  }
  return "?";
}

// What one rank publishes for one collective. Peers read it between the barrier it was
// published for and that rank's next publish of the same parity (see cross()).
struct Slot {
  Op op = Op::Barrier;
  std::size_t size = 0;  // the size every rank must agree on (count or bytes); 0 if none
  int root = 0;          // broadcast root
  int id = 0;            // buffer id
  int color = 0, key = 0;
  std::size_t bytes = 0;  // register_buffer: this rank's size
  const void* src = nullptr;
  void* dst = nullptr;
  const std::size_t* a = nullptr;  // counts / send_bytes (size() entries)
  const std::size_t* b = nullptr;  // send_displs
  std::shared_ptr<struct Group> group;  // split: the new group, published by its leader
};

struct WorldState {
  WorldState(int n, double timeout) : timeout_s(timeout), exited(new std::atomic<bool>[n]) {
    for (int r = 0; r < n; ++r) exited[r] = false;
  }

  // First failure wins; later ones (mostly "rank R failed" echoes) are dropped.
  void fail(int world_rank, const std::string& msg, std::exception_ptr error) {
    std::lock_guard<std::mutex> lk(mu);
    if (failed.load()) return;
    failed_rank = world_rank;
    failed_msg = msg;
    first_error = error;
    failed.store(true);
  }

  double timeout_s;
  std::atomic<bool> failed{false};
  std::mutex mu;
  int failed_rank = -1;
  std::string failed_msg;
  std::exception_ptr first_error;
  std::unique_ptr<std::atomic<bool>[]> exited;  // [world rank]: its function has returned
};

struct Message {
  Message(int s, int t, const void* d, std::size_t b) : src(s), tag(t), data(d), bytes(b) {}
  int src;
  int tag;
  const void* data;
  std::size_t bytes;
  std::atomic<int> state{0};  // 0 posted, 1 taken by the receiver, 2 copied
  std::string error;          // set by the receiver before state 2 when sizes disagree
};

struct Group {
  Group(std::shared_ptr<WorldState> w, std::vector<int> ranks)
      : world(std::move(w)),
        n(static_cast<int>(ranks.size())),
        world_ranks(std::move(ranks)),
        entered(new std::atomic<std::uint64_t>[static_cast<std::size_t>(n)]),
        reading(new std::atomic<int>[static_cast<std::size_t>(n)]),
        inbox(static_cast<std::size_t>(n)) {
    for (int r = 0; r < n; ++r) entered[r] = 0;
    for (int r = 0; r < n; ++r) reading[r] = 0;
    for (auto& s : slots) s.resize(static_cast<std::size_t>(n));
  }

  // Wakes sleeping waiters after a state change (entered counter, message state, inbox).
  void notify() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers.load() > 0) {
      { std::lock_guard<std::mutex> lk(mu); }
      cv.notify_all();
    }
  }

  std::shared_ptr<WorldState> world;
  int n;
  std::vector<int> world_ranks;                          // [group rank] -> world rank
  std::unique_ptr<std::atomic<std::uint64_t>[]> entered;  // barriers each rank has entered
  std::unique_ptr<std::atomic<int>[]> reading;            // 1 while a rank reads peers' buffers
  std::vector<Slot> slots[2];                            // [barrier parity][group rank]
  std::mutex mu;                                         // for cv only
  std::condition_variable cv;
  std::atomic<int> sleepers{0};
  std::mutex mail_mu;                   // guards inbox
  std::vector<std::deque<Message*>> inbox;  // [dst group rank], in send order
};

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) s += cat(i ? "," : "", ranks[i]);
  return s;
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<Group> group, int rank, std::shared_ptr<RankMemory> mem)
      : g_(std::move(group)), rank_(rank), mem_(std::move(mem)) {
    backend_ = mem_->name() == "host" ? std::string("local") : cat("local+", mem_->name());
  }

  int rank() const override { return rank_; }
  int size() const override { return g_->n; }
  std::string_view backend() const override { return backend_; }

  void all_reduce_sum(float* data, std::size_t count) override {
    guarded([&] {
      const int n = g_->n;
      Slot& s = publish(Op::AllReduce, count);
      s.dst = data;
      const auto t = cross("all_reduce_sum");
      check_peers(t, true);
      // Phase 1: rank r sums chunk r of every peer's buffer, in rank order, into its own chunk r.
      // Peers read only their own chunks of this buffer, so writing chunk r is safe.
      const std::size_t lo = chunk_begin(count, n, rank_), hi = chunk_begin(count, n, rank_ + 1);
      std::vector<const float*> in(static_cast<std::size_t>(n));
      for (int q = 0; q < n; ++q) in[q] = static_cast<const float*>(slot(t, q).dst) + lo;
      begin_read();
      mem_->reduce_sum(data + lo, in.data(), n, hi - lo);
      end_read();
      cross("all_reduce_sum (gather phase)");
      begin_read();
      // Phase 2: copy every other chunk from its owner (nobody writes owners' chunks now).
      for (int q = 0; q < n; ++q) {
        if (q == rank_) continue;
        const std::size_t qlo = chunk_begin(count, n, q), qhi = chunk_begin(count, n, q + 1);
        copy(data + qlo, static_cast<const float*>(slot(t, q).dst) + qlo, (qhi - qlo) * 4);
      }
      end_read();
      cross("all_reduce_sum (end)");
    });
  }

  void reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) override {
    guarded([&] {
      const int n = g_->n;
      Slot& s = publish(Op::ReduceScatter, recv_count);
      s.src = send;
      const auto t = cross("reduce_scatter_sum");
      check_peers(t, true);
      std::vector<const float*> in(static_cast<std::size_t>(n));
      for (int q = 0; q < n; ++q) {
        in[q] = static_cast<const float*>(slot(t, q).src) + static_cast<std::size_t>(rank_) * recv_count;
      }
      begin_read();
      mem_->reduce_sum(recv, in.data(), n, recv_count);
      end_read();
      cross("reduce_scatter_sum (end)");
    });
  }

  void reduce_scatter_sum_v(const float* send, float* recv,
                            std::span<const std::size_t> counts) override {
    guarded([&] {
      const int n = g_->n;
      check_span(counts, "reduce_scatter_sum_v", "counts");
      const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      Slot& s = publish(Op::ReduceScatterV, total);
      s.src = send;
      s.a = counts.data();
      const auto t = cross("reduce_scatter_sum_v");
      check_peers(t, true);
      begin_read();
      check_same_vector(t, counts, "reduce_scatter_sum_v", "counts");
      std::size_t off = 0;
      for (int q = 0; q < rank_; ++q) off += counts[q];
      std::vector<const float*> in(static_cast<std::size_t>(n));
      for (int q = 0; q < n; ++q) in[q] = static_cast<const float*>(slot(t, q).src) + off;
      mem_->reduce_sum(recv, in.data(), n, counts[rank_]);
      end_read();
      cross("reduce_scatter_sum_v (end)");
    });
  }

  void all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override {
    guarded([&] {
      Slot& s = publish(Op::AllGather, bytes_per_rank);
      s.src = send;
      const auto t = cross("all_gather");
      check_peers(t, true);
      begin_read();
      for (int q = 0; q < g_->n; ++q) {
        copy(static_cast<char*>(recv) + static_cast<std::size_t>(q) * bytes_per_rank, slot(t, q).src,
             bytes_per_rank);
      }
      end_read();
      cross("all_gather (end)");
    });
  }

  void all_gather_v_bytes(const void* send, void* recv,
                          std::span<const std::size_t> recv_bytes) override {
    guarded([&] {
      check_span(recv_bytes, "all_gather_v_bytes", "recv_bytes");
      const std::size_t total =
          std::accumulate(recv_bytes.begin(), recv_bytes.end(), std::size_t{0});
      Slot& s = publish(Op::AllGatherV, total);
      s.src = send;
      s.a = recv_bytes.data();
      const auto t = cross("all_gather_v");
      check_peers(t, true);
      begin_read();
      check_same_vector(t, recv_bytes, "all_gather_v_bytes", "recv_bytes");
      std::size_t off = 0;
      for (int q = 0; q < g_->n; ++q) {
        copy(static_cast<char*>(recv) + off, slot(t, q).src, recv_bytes[q]);
        off += recv_bytes[q];
      }
      end_read();
      cross("all_gather_v (end)");
    });
  }

  void all_to_all_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override {
    guarded([&] {
      Slot& s = publish(Op::AllToAll, bytes_per_rank);
      s.src = send;
      const auto t = cross("all_to_all");
      check_peers(t, true);
      begin_read();
      for (int q = 0; q < g_->n; ++q) {
        copy(static_cast<char*>(recv) + static_cast<std::size_t>(q) * bytes_per_rank,
             static_cast<const char*>(slot(t, q).src) +
                 static_cast<std::size_t>(rank_) * bytes_per_rank,
             bytes_per_rank);
      }
      end_read();
      cross("all_to_all (end)");
    });
  }

  void all_to_all_v_bytes(const void* send, std::span<const std::size_t> send_bytes,
                          std::span<const std::size_t> send_displs, void* recv,
                          std::span<const std::size_t> recv_bytes,
                          std::span<const std::size_t> recv_displs) override {
    guarded([&] {
      check_span(send_bytes, "all_to_all_v_bytes", "send_bytes");
      check_span(send_displs, "all_to_all_v_bytes", "send_displs");
      check_span(recv_bytes, "all_to_all_v_bytes", "recv_bytes");
      check_span(recv_displs, "all_to_all_v_bytes", "recv_displs");
      Slot& s = publish(Op::AllToAllV, 0);
      s.src = send;
      s.a = send_bytes.data();
      s.b = send_displs.data();
      const auto t = cross("all_to_all_v");
      check_peers(t, true);
      begin_read();
      // Check every size before copying anything.
      for (int q = 0; q < g_->n; ++q) {
        const Slot& p = slot(t, q);
        if (p.a[rank_] != recv_bytes[q]) {
          fail("all_to_all_v_bytes: ", who(q), " sends ", p.a[rank_], " bytes to ", who(rank_),
               ", which expects recv_bytes[", q, "] = ", recv_bytes[q]);
        }
      }
      for (int q = 0; q < g_->n; ++q) {
        const Slot& p = slot(t, q);
        copy(static_cast<char*>(recv) + recv_displs[q],
             static_cast<const char*>(p.src) + p.b[rank_], recv_bytes[q]);
      }
      end_read();
      cross("all_to_all_v (end)");
    });
  }

  void send(int dst, int tag, const void* data, std::size_t bytes) override {
    check_peer(dst, "send");
    check_tag(tag, "send");
    mem_->fence();  // the bytes are complete before the receiver copies them
    Message m(rank_, tag, data, bytes);
    {
      std::lock_guard<std::mutex> lk(g_->mail_mu);
      g_->inbox[dst].push_back(&m);
    }
    g_->notify();
    try {
      wait([&] { return m.state.load() == 2; }, "send", [&] { return std::vector<int>{dst}; });
    } catch (...) {
      // Take the message back unless the receiver holds it; then let it finish the copy.
      bool taken;
      {
        std::lock_guard<std::mutex> lk(g_->mail_mu);
        auto& box = g_->inbox[dst];
        auto it = std::find(box.begin(), box.end(), &m);
        taken = it == box.end();
        if (!taken) box.erase(it);
      }
      while (taken && m.state.load() != 2) std::this_thread::yield();
      throw;
    }
    if (!m.error.empty()) throw Error(m.error);
  }

  void recv(int src, int tag, void* data, std::size_t bytes) override {
    check_peer(src, "recv");
    check_tag(tag, "recv");
    Message* m = nullptr;
    wait(
        [&] {
          std::lock_guard<std::mutex> lk(g_->mail_mu);
          auto& box = g_->inbox[rank_];
          for (auto it = box.begin(); it != box.end(); ++it) {
            if ((*it)->src == src && (*it)->tag == tag) {
              m = *it;
              m->state.store(1);
              box.erase(it);
              return true;
            }
          }
          return false;
        },
        "recv", [&] { return std::vector<int>{src}; });
    std::string error;
    if (m->bytes != bytes) {
      error = cat("send/recv size mismatch: ", who(src), " sends ", m->bytes, " bytes with tag ",
                  tag, ", ", who(rank_), " receives ", bytes);
      m->error = error;
    } else {
      try {
        copy(data, m->data, bytes);
        mem_->fence();  // complete before the sender may return and reuse its buffer
      } catch (const std::exception& e) {
        error = cat("recv from ", who(src), ": ", e.what());
        m->error = error;
      }
    }
    m->state.store(2);  // after this the sender may return and m dies
    g_->notify();
    if (!error.empty()) throw Error(error);
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    guarded([&] {
      check_peer_or_self(root, "broadcast");
      Slot& s = publish(Op::Broadcast, bytes);
      s.root = root;
      s.src = data;
      const auto t = cross("broadcast");
      check_peers(t, true);
      begin_read();
      if (rank_ != root) copy(data, slot(t, root).src, bytes);
      end_read();
      cross("broadcast (end)");
    });
  }

  void barrier() override {
    guarded([&] {
      publish(Op::Barrier, 0);
      const auto t = cross("barrier");
      check_peers(t, true);
    });
  }

  void register_buffer(int id, void* ptr, std::size_t bytes) override {
    guarded([&] {
      if (buffers_.count(id)) fail("register_buffer: id ", id, " is already registered");
      Slot& s = publish(Op::Register, 0);
      s.id = id;
      s.src = ptr;
      s.bytes = bytes;
      const auto t = cross("register_buffer");
      check_peers(t, true);
      auto& regions = buffers_[id];
      for (int q = 0; q < g_->n; ++q) regions.push_back({slot(t, q).src, slot(t, q).bytes});
    });
  }

  void deregister_buffer(int id) override {
    guarded([&] {
      if (!buffers_.count(id)) fail("deregister_buffer: id ", id, " is not registered");
      Slot& s = publish(Op::Deregister, 0);
      s.id = id;
      const auto t = cross("deregister_buffer");
      check_peers(t, true);
      buffers_.erase(id);
    });
  }

  void get(int src_rank, int id, std::size_t offset, void* dst, std::size_t bytes) override {
    check_peer_or_self(src_rank, "get");
    auto it = buffers_.find(id);
    if (it == buffers_.end()) fail("get: buffer id ", id, " is not registered");
    const Region& r = it->second[src_rank];
    if (offset > r.bytes || bytes > r.bytes - offset) {
      fail("get: bytes [", offset, ", ", offset + bytes, ") of buffer ", id, " on ",
           who(src_rank), " are out of range (it registered ", r.bytes, " bytes)");
    }
    copy(dst, static_cast<const char*>(r.ptr) + offset, bytes);
    mem_->fence();
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    return guarded([&]() -> std::unique_ptr<Communicator> {
      Slot& s = publish(Op::Split, 0);
      s.color = color;
      s.key = key;
      const auto t = cross("split");
      check_peers(t, true);
      // Members in new rank order: (key, old rank) ascending.
      std::vector<std::pair<int, int>> members;
      for (int q = 0; q < g_->n; ++q) {
        if (color >= 0 && slot(t, q).color == color) members.push_back({slot(t, q).key, q});
      }
      std::sort(members.begin(), members.end());
      int leader = -1;
      for (auto& m : members) leader = leader < 0 ? m.second : std::min(leader, m.second);
      if (leader == rank_) {
        std::vector<int> world_ranks;
        for (auto& m : members) world_ranks.push_back(g_->world_ranks[m.second]);
        Slot& h = g_->slots[(t + 1) & 1][rank_];
        h = Slot{};
        h.op = Op::Split;
        h.group = std::make_shared<Group>(g_->world, std::move(world_ranks));
      }
      // Barrier t+1 hands the leaders' groups over; slot t+1 is not overwritten before every
      // rank has passed barrier t+2, i.e. finished this call.
      cross("split (hand-over)");
      if (color < 0) return nullptr;
      std::shared_ptr<Group> group = slot(t + 1, leader).group;
      int new_rank = 0;
      while (members[new_rank].second != rank_) ++new_rank;
      return std::make_unique<LocalCommunicator>(std::move(group), new_rank, mem_);
    });
  }

 private:
  struct Region {
    const void* ptr;
    std::size_t bytes;
  };

  void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes != 0 && dst != src) mem_->copy(dst, src, bytes);
  }

  // "rank 3", or "rank 1 (world rank 3)" in a sub-group.
  std::string who(int q) const {
    const int w = g_->world_ranks[q];
    return w == q ? cat("rank ", q) : cat("rank ", q, " (world rank ", w, ")");
  }

  void check_span(std::span<const std::size_t> s, const char* what, const char* name) const {
    if (s.size() != static_cast<std::size_t>(g_->n)) {
      fail(what, ": ", name, " has ", s.size(), " entries, expected ", g_->n, " (group size)");
    }
  }
  void check_peer(int q, const char* what) const {
    if (q < 0 || q >= g_->n || q == rank_) {
      fail(what, ": peer rank ", q, " is not another rank of this group (", who(rank_),
           " of ", g_->n, ")");
    }
  }
  void check_peer_or_self(int q, const char* what) const {
    if (q < 0 || q >= g_->n) fail(what, ": rank ", q, " is not in this group of ", g_->n, " ranks");
  }
  static void check_tag(int tag, const char* what) {
    if (tag < 0 || tag > 32767) fail(what, ": tag ", tag, " is outside [0, 32767]");
  }

  // Runs the body of a collective. When it throws (a timeout, a disagreement, a failed peer),
  // the world is marked failed with this rank's message before the exception leaves, and this
  // rank waits until no peer is still reading its buffers (read phases are plain copies and
  // end quickly): the caller's buffers may die during unwinding.
  template <typename Body>
  auto guarded(Body body) -> decltype(body()) {
    try {
      return body();
    } catch (const std::exception& e) {
      abandon(e.what());
      throw;
    } catch (...) {
      abandon("unknown exception");
      throw;
    }
  }

  void abandon(const char* msg) {
    // Copies this rank issued out of peers' buffers complete before it stops announcing reads.
    try {
      mem_->fence();
    } catch (...) {
    }
    g_->reading[rank_].store(0);
    g_->world->fail(g_->world_ranks[rank_], msg, std::current_exception());
    g_->notify();
    for (int q = 0; q < g_->n; ++q) {
      while (g_->reading[q].load() != 0) std::this_thread::yield();
    }
  }

  // Brackets every access to peers' buffers. The order (announce, then check the failure flag;
  // abandon(): set the flag, then wait for announcements to clear; all seq_cst) guarantees
  // that a failing rank never leaves while a peer reads its memory.
  void begin_read() {
    g_->reading[rank_].store(1);
    if (g_->world->failed.load()) {
      g_->reading[rank_].store(0);
      throw_failed();
    }
  }
  // Copies and sums out of peers' buffers complete before the peers learn this rank is done.
  void end_read() {
    mem_->fence();
    g_->reading[rank_].store(0);
  }

  // This rank's slot for the next barrier, reset and stamped with the operation.
  Slot& publish(Op op, std::size_t size) {
    mem_->fence();  // this rank's earlier work on its buffers is complete before peers read them
    const std::uint64_t t = g_->entered[rank_].load() + 1;
    Slot& s = g_->slots[t & 1][rank_];
    s = Slot{};
    s.op = op;
    s.size = size;
    return s;
  }

  const Slot& slot(std::uint64_t t, int q) const { return g_->slots[t & 1][q]; }

  static std::string describe(const Slot& s) {
    std::string d = cat(op_name(s.op), "(");
    switch (s.op) {
      case Op::Broadcast: d += cat(s.size, " bytes, root ", s.root); break;
      case Op::Register:
      case Op::Deregister: d += cat("id ", s.id); break;
      case Op::Barrier:
      case Op::Split:
      case Op::AllToAllV: break;
      default: d += cat(s.size); break;
    }
    return d + ")";
  }

  // After barrier t: every rank must have published the same operation and sizes.
  void check_peers(std::uint64_t t, bool same_size) const {
    const Slot& mine = slot(t, rank_);
    for (int q = 0; q < g_->n; ++q) {
      const Slot& p = slot(t, q);
      const bool same = p.op == mine.op && (!same_size || p.size == mine.size) &&
                        p.root == mine.root && p.id == mine.id;
      if (!same) {
        fail("ranks disagree on collective #", t, " of a group of ", g_->n, ": ", who(rank_),
             " called ", describe(mine), ", ", who(q), " called ", describe(p));
      }
    }
  }

  void check_same_vector(std::uint64_t t, std::span<const std::size_t> v, const char* what,
                         const char* name) const {
    for (int q = 0; q < g_->n; ++q) {
      const std::size_t* p = slot(t, q).a;
      for (int i = 0; i < g_->n; ++i) {
        if (p[i] != v[i]) {
          fail("ranks disagree on ", what, " ", name, "[", i, "]: ", who(rank_), " has ", v[i],
               ", ", who(q), " has ", p[i]);
        }
      }
    }
  }

  // Enters the next barrier and waits until every rank has entered it; returns its number.
  std::uint64_t cross(const char* what) {
    const std::uint64_t t = g_->entered[rank_].load() + 1;
    g_->entered[rank_].store(t);
    g_->notify();
    auto missing = [&] {
      std::vector<int> m;
      for (int q = 0; q < g_->n; ++q) {
        if (g_->entered[q].load() < t) m.push_back(q);
      }
      return m;
    };
    wait(
        [&] {
          for (int q = 0; q < g_->n; ++q) {
            if (g_->entered[q].load() < t) return false;
          }
          return true;
        },
        what, missing);
    return t;
  }

  [[noreturn]] void throw_failed() const {
    std::lock_guard<std::mutex> lk(g_->world->mu);
    throw Error(cat("rank ", g_->world->failed_rank, " failed: ", g_->world->failed_msg));
  }

  // Waits until ready() (spin briefly, then sleep in slices of at most 10 ms), throwing when the
  // world failed, when a rank it waits for (missing()) has returned, or at the deadline.
  template <typename Ready, typename Missing>
  void wait(Ready ready, const char* what, Missing missing) {
    WorldState& w = *g_->world;
    const auto spin_end = Clock::now() + std::chrono::microseconds(50);
    for (int i = 0;; ++i) {
      if (ready()) return;
      if (w.failed.load()) throw_failed();
      if (i >= 16) {
        if (Clock::now() > spin_end) break;
        std::this_thread::yield();
      }
    }
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(w.timeout_s));
    std::unique_lock<std::mutex> lk(g_->mu);
    g_->sleepers.fetch_add(1);
    struct Leave {
      std::atomic<int>& s;
      ~Leave() { s.fetch_sub(1); }
    } leave{g_->sleepers};
    std::atomic_thread_fence(std::memory_order_seq_cst);
    while (!ready()) {
      if (w.failed.load()) throw_failed();
      const std::vector<int> m = missing();
      for (int q : m) {
        if (w.exited[g_->world_ranks[q]].load()) {
          fail(who(q), " returned while ", who(rank_), " waits for it in ", what,
               " (ranks called different operations)");
        }
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        std::vector<int> names;
        for (int q : m) names.push_back(g_->world_ranks[q]);
        fail(who(rank_), ": ", what, " timed out after ", w.timeout_s, " s waiting for rank(s) ",
             rank_list(names), " (world ranks; a rank is stuck or called a different operation)");
      }
      g_->cv.wait_for(lk, std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(10)));
    }
  }

  std::shared_ptr<Group> g_;
  int rank_;
  std::shared_ptr<RankMemory> mem_;
  std::string backend_;
  std::map<int, std::vector<Region>> buffers_;  // id -> [group rank] region
};

}  // namespace

void HostRankMemory::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
}

void HostRankMemory::reduce_sum(float* out, const float* const* in, int n_inputs, std::size_t count) {
  reduce_sum_rank_order(out, in, n_inputs, count);
}

void LocalWorld::run(int n_ranks, const std::function<void(Communicator&)>& fn,
                     const CommOptions& options) {
  run(n_ranks, fn, options, [](int) { return std::make_unique<HostRankMemory>(); });
}

void LocalWorld::run(int n_ranks, const std::function<void(Communicator&)>& fn,
                     const CommOptions& options, const RankMemoryFactory& memory) {
  if (n_ranks < 1) fail("LocalWorld::run: n_ranks = ", n_ranks, ", expected >= 1");
  if (!(options.timeout_s > 0)) {
    fail("LocalWorld::run: timeout_s = ", options.timeout_s, ", expected > 0 seconds");
  }
  auto world = std::make_shared<WorldState>(n_ranks, options.timeout_s);
  std::vector<int> ranks(static_cast<std::size_t>(n_ranks));
  std::iota(ranks.begin(), ranks.end(), 0);
  auto group = std::make_shared<Group>(world, ranks);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n_ranks));
  for (int r = 0; r < n_ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<RankMemory> mem = memory(r);
        if (!mem) fail("LocalWorld::run: the memory factory returned nothing for rank ", r);
        LocalCommunicator comm(group, r, std::move(mem));
        fn(comm);
      } catch (const std::exception& e) {
        world->fail(r, e.what(), std::current_exception());
      } catch (...) {
        world->fail(r, "unknown exception", std::current_exception());
      }
      world->exited[r].store(true);
      group->notify();
    });
  }
  for (auto& t : threads) t.join();
  if (world->first_error) std::rethrow_exception(world->first_error);
}

}  // namespace loom
