// Light, opt-in timing of the engine's work by operator class (LOOM_OP_TIMING=1): where a step's
// wall time goes on each rank thread (matmuls, attention, element-wise ops, collectives, sampling,
// the step descriptor, scheduling), so that `loom sim validate-engine` can set it beside what the
// cost model prices for the same steps (sim/validate_engine.h diagnostics).
//
// Off (the default) a scope costs one load of a static flag and a branch. On, each scope reads the
// steady clock twice and adds to a per-thread accumulator (no lock on the hot path). Scopes nest:
// a class is charged only for the time its scope spends outside inner scopes (a collective inside
// a timed matmul scope is charged to the collective alone), so the classes of a thread add up to
// the time spent under its outermost scopes.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace loom::optime {

enum class Op : uint8_t {
  Matmul,       // kernels::matmul: projections, FFN, classifier
  Attention,    // KV scatter into the pages + the attention kernel
  Elementwise,  // rmsnorm, residual adds, RoPE, SwiGLU, embedding, Ulysses packing
  Collective,   // all-reduce, all-to-all, all-gather (incl. waiting for the slower ranks)
  Sampling,     // argmax / sampling over the logits, the token gather
  Descriptor,   // the step descriptor broadcast (world rank 0 and followers)
  Schedule,     // EngineLoop::begin_step (schedule, policy) and end_step (apply tokens, metrics)
  Step,         // the executor's whole step on world rank 0 (outermost; the rest is "other")
  kCount
};
constexpr int kNumOps = int(Op::kCount);
const char* op_name(Op op);

// True when LOOM_OP_TIMING is set to a value other than "" or "0" (read once, at first use).
// LOOM_OP_TIMING=cpu times with the calling thread's CPU clock (CLOCK_THREAD_CPUTIME_ID) instead
// of the steady clock: the work of a thread whatever else the machine runs (a rank of one thread
// computes on its own thread), without the time it waited for a core or for a peer.
bool enabled();
bool cpu_clock();

struct Totals {
  int rank = -1;                          // set_rank() of the thread (-1: none)
  std::array<double, kNumOps> seconds{};  // exclusive of nested scopes
  std::array<int64_t, kNumOps> calls{};
};

// Labels the calling thread's totals with its world rank (the engine's rank threads).
void set_rank(int rank);
// Each thread's totals since the last reset (threads that timed nothing are absent), in the order
// the threads first timed something. Call it when the timed threads are idle or joined (a thread
// writes its own totals without a lock).
std::vector<Totals> snapshot();
void reset();

namespace detail {
struct ThreadState;
ThreadState* state();
double now();
void add(ThreadState* s, Op op, double t0, double t1, double inner);
double& inner_slot(ThreadState* s);
}  // namespace detail

class Scope {
 public:
  explicit Scope(Op op) {
    if (!enabled()) return;
    s_ = detail::state();
    op_ = op;
    double& slot = detail::inner_slot(s_);
    saved_inner_ = slot;
    slot = 0;
    t0_ = detail::now();
  }
  ~Scope() {
    if (!s_) return;
    const double t1 = detail::now();
    double& slot = detail::inner_slot(s_);
    const double inner = slot;
    slot = saved_inner_ + (t1 - t0_);  // the parent sees this scope as inner time
    detail::add(s_, op_, t0_, t1, inner);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  detail::ThreadState* s_ = nullptr;
  Op op_ = Op::Matmul;
  double t0_ = 0, saved_inner_ = 0;
};

}  // namespace loom::optime
