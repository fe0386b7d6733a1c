// The layout the simulator prices: DP replicas, each running TP, PP, TP x PP, Ulysses SP x TP,
// or Shift (SP x TP base that switches to TP(SP*TP) for small steps, Shift 3.3 Algorithm 2).
//
// Parsed by loom::Plan (src/parallel/plan.h: "tp=4", "sp=3,tp=2", "shift:sp=3,tp=2", "dp=2",
// "pp=2", "tp=2,pp=2"), keeping the degrees the cost model prices; "shift:" is read as the Shift
// policy over that base, and "threshold=N" (simulator only) sets its switch point.
#pragma once

#include <string>

namespace loom::sim {

// Degrees of one replica's forward step.
struct ParallelConfig {
  int tp = 1;
  int sp = 1;
  int pp = 1;
  int gpus() const { return tp * sp * pp; }
  std::string name() const;  // "tp=8", "sp=8", "sp=4,tp=2", "tp=2,pp=2"
};

struct SimPlan {
  int dp = 1;  // independent replicas (own scheduler and KV cache each)
  ParallelConfig base;
  bool shift = false;       // Shift: base for steps with more than shift_threshold tokens
  int shift_threshold = 256;  // tokens per step (Shift 3.3 Algorithm 2: n > threshold -> base)

  int gpus() const { return dp * base.gpus(); }
  // The config used for a step of `num_tokens` tokens.
  ParallelConfig config_for(int num_tokens) const;
  ParallelConfig shift_config() const { return ParallelConfig{base.tp * base.sp, 1, base.pp}; }
  std::string name() const;

  // "tp=8", "dp=8", "sp=8", "sp=4,tp=2", "pp=2", "tp=2,pp=2", "dp=2,tp=4", "shift:sp=8",
  // "shift:sp=4,tp=2,threshold=512". Throws loom::Error naming the bad key or value.
  static SimPlan parse(const std::string& text);
};

}  // namespace loom::sim
