// Backend-independent parts of Communicator: typed wrappers, check_agreement, the rank-order sum.
#include "comm/communicator.h"

#include <cstdlib>
#include <map>
#include <vector>

#include "core/error.h"

namespace loom {

double CommOptions::default_timeout_s() {
  const char* env = std::getenv("LOOM_COMM_TIMEOUT_S");
  if (env == nullptr || *env == '\0') return 60.0;
  char* end = nullptr;
  double v = std::strtod(env, &end);
  // At most a week: the timeout becomes a duration in nanoseconds (1e10 s overflowed it).
  if (end == env || *end != '\0' || !(v > 0) || !(v <= 604800)) {
    fail("LOOM_COMM_TIMEOUT_S='", env, "' is not a number of seconds in (0, 604800]");
  }
  return v;
}

void Communicator::all_gather(const float* send, float* recv, std::size_t count_per_rank) {
  all_gather_bytes(send, recv, count_per_rank * sizeof(float));
}

void Communicator::all_gather_v(const float* send, float* recv,
                                std::span<const std::size_t> counts) {
  std::vector<std::size_t> bytes(counts.begin(), counts.end());
  for (auto& b : bytes) b *= sizeof(float);
  all_gather_v_bytes(send, recv, bytes);
}

void Communicator::all_to_all(const float* send, float* recv, std::size_t count_per_rank) {
  all_to_all_bytes(send, recv, count_per_rank * sizeof(float));
}

namespace {

// all_to_all_v_bytes run when the request is waited on.
class DeferredAllToAll final : public CommRequest {
 public:
  DeferredAllToAll(Communicator& c, const void* send, std::span<const std::size_t> send_bytes,
                   std::span<const std::size_t> send_displs, void* recv, std::span<const std::size_t> recv_bytes,
                   std::span<const std::size_t> recv_displs)
      : c_(c),
        send_(send),
        recv_(recv),
        send_bytes_(send_bytes.begin(), send_bytes.end()),
        send_displs_(send_displs.begin(), send_displs.end()),
        recv_bytes_(recv_bytes.begin(), recv_bytes.end()),
        recv_displs_(recv_displs.begin(), recv_displs.end()) {}
  void wait() override {
    if (done_) return;
    done_ = true;
    c_.all_to_all_v_bytes(send_, send_bytes_, send_displs_, recv_, recv_bytes_, recv_displs_);
  }

 private:
  Communicator& c_;
  const void* send_;
  void* recv_;
  std::vector<std::size_t> send_bytes_, send_displs_, recv_bytes_, recv_displs_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<CommRequest> Communicator::start_all_to_all_v_bytes(const void* send,
                                                                    std::span<const std::size_t> send_bytes,
                                                                    std::span<const std::size_t> send_displs,
                                                                    void* recv,
                                                                    std::span<const std::size_t> recv_bytes,
                                                                    std::span<const std::size_t> recv_displs) {
  return std::make_unique<DeferredAllToAll>(*this, send, send_bytes, send_displs, recv, recv_bytes, recv_displs);
}

void Communicator::check_agreement(const std::string& what, std::uint64_t hash) {
  const int n = size();
  std::vector<std::uint64_t> all(static_cast<std::size_t>(n));
  all_gather_bytes(&hash, all.data(), sizeof(hash));
  bool equal = true;
  for (int r = 1; r < n; ++r) equal = equal && all[static_cast<std::size_t>(r)] == all[0];
  if (equal) return;
  // Each distinct value with the ranks that hold it, in order of first appearance.
  std::vector<std::uint64_t> order;
  std::map<std::uint64_t, std::vector<int>> holders;
  for (int r = 0; r < n; ++r) {
    auto v = all[static_cast<std::size_t>(r)];
    if (holders.find(v) == holders.end()) order.push_back(v);
    holders[v].push_back(r);
  }
  std::ostringstream os;
  os << "ranks disagree on " << what << " (group of " << n << " ranks):";
  for (auto v : order) {
    const auto& h = holders[v];
    os << (h.size() == 1 ? " rank" : " ranks");
    for (std::size_t i = 0; i < h.size(); ++i) os << (i ? "," : " ") << h[i];
    os << (h.size() == 1 ? " has 0x" : " have 0x") << std::hex << v << std::dec << ";";
  }
  throw Error(os.str());
}

std::uint64_t hash_bytes(const void* data, std::size_t bytes, std::uint64_t seed) {
  auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = seed;
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

void reduce_sum_rank_order(float* out, const float* const* in, int n_inputs, std::size_t count) {
  LOOM_CHECK(n_inputs >= 1);
  // Blocks keep the partial sums in L1 while each input streams through once; within an
  // element the order is strictly in[0], in[1], ... (the contract), across elements the
  // compiler may vectorise freely.
  constexpr std::size_t kBlock = 1024;
  float acc[kBlock];
  for (std::size_t b = 0; b < count; b += kBlock) {
    const std::size_t m = count - b < kBlock ? count - b : kBlock;
    const float* x0 = in[0] + b;
    for (std::size_t i = 0; i < m; ++i) acc[i] = x0[i];
    for (int r = 1; r < n_inputs; ++r) {
      const float* x = in[r] + b;
      for (std::size_t i = 0; i < m; ++i) acc[i] += x[i];
    }
    float* o = out + b;
    for (std::size_t i = 0; i < m; ++i) o[i] = acc[i];
  }
}

std::size_t chunk_begin(std::size_t count, int n, int r) {
  const std::size_t un = static_cast<std::size_t>(n), ur = static_cast<std::size_t>(r);
  const std::size_t base = count / un, extra = count % un;
  return base * ur + (ur < extra ? ur : extra);
}

std::shared_ptr<void> Communicator::allocate_host_shared(std::size_t, void**, std::function<void()>*) {
  fail("the ", backend(), " backend has no host shared memory: its ranks share the process (allocate it there)");
}

}  // namespace loom
