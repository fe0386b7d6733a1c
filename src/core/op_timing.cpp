#include "core/op_timing.h"

#include <chrono>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

namespace loom::optime {

namespace detail {
struct ThreadState {
  Totals totals;
  double inner = 0;
};
}  // namespace detail

namespace {
std::mutex g_mu;
std::vector<std::shared_ptr<detail::ThreadState>>& registry() {
  static std::vector<std::shared_ptr<detail::ThreadState>> r;
  return r;
}
}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::Matmul: return "matmul";
    case Op::Attention: return "attention";
    case Op::Elementwise: return "elementwise";
    case Op::Collective: return "collective";
    case Op::Sampling: return "sampling";
    case Op::Descriptor: return "descriptor";
    case Op::Schedule: return "schedule";
    case Op::Step: return "step_other";
    case Op::kCount: break;
  }
  return "?";
}

bool enabled() {
  static const bool on = [] {
    const char* e = std::getenv("LOOM_OP_TIMING");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return on;
}

bool cpu_clock() {
  static const bool cpu = [] {
    const char* e = std::getenv("LOOM_OP_TIMING");
    return e && std::strcmp(e, "cpu") == 0;
  }();
  return cpu;
}

namespace detail {

ThreadState* state() {
  thread_local ThreadState* s = [] {
    auto p = std::make_shared<ThreadState>();
    std::lock_guard<std::mutex> lk(g_mu);
    registry().push_back(p);  // kept alive after the thread ends, for snapshot()
    return p.get();
  }();
  return s;
}

double now() {
  if (cpu_clock()) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

double& inner_slot(ThreadState* s) { return s->inner; }

void add(ThreadState* s, Op op, double t0, double t1, double inner) {
  s->totals.seconds[size_t(op)] += (t1 - t0) - inner;
  ++s->totals.calls[size_t(op)];
}

}  // namespace detail

void set_rank(int rank) {
  if (enabled()) detail::state()->totals.rank = rank;
}

std::vector<Totals> snapshot() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::vector<Totals> out;
  for (const auto& s : registry()) {
    bool any = false;
    for (int64_t c : s->totals.calls) any = any || c > 0;
    if (any) out.push_back(s->totals);
  }
  return out;
}

void reset() {
  std::lock_guard<std::mutex> lk(g_mu);
  for (const auto& s : registry()) {
    const int rank = s->totals.rank;
    s->totals = Totals{};
    s->totals.rank = rank;
  }
}

}  // namespace loom::optime
