// Shift simulator figures (issue 31, item 4): the bands of shift-4.3.1's statements, committed
// before the pricing changes (the GEMM transfer, the calibration of collectives).
// Paper: ../shared/papers/000 §4.3.1 / Figure 12 (Llama-70B and Qwen-32B, FP8, 8xH200, 4k in / 250
// out). The text prints ratios and losses, no absolute value but the TPOTs.
//
// Band rule (the rule this experiment's test used before, a factor within +-25%): simulated /
// paper in [0.75, 1.25] for every printed number, the losses included: a throughput LOSS against
// DP is banded as a loss (TP 46% / 45%, Shift 18% / 23%), not through the throughput it leaves
// (0.82 x DP), which would let Shift's 18% pass at 0% (issue 31: loom's Shift loss was 6%).
// Qwen's TTFT ratios: the text's "4.45x and 1.31x for Qwen" follow "lower than TP and DP"; taken
// in that order DP's TTFT would be below TP's, the reverse of Llama's (6x DP, 1.56x TP) and of the
// mechanism (DP prefills a 4k prompt on one GPU); read as 4.45x vs DP and 1.31x vs TP (ASSUMPTION).
// Hard: Shift's TTFT and TPOT the lowest, DP's throughput the highest, TP's the lowest.
#pragma once

namespace loom::sim::shift_bands {

constexpr double kLow = 0.75, kHigh = 1.25;  // simulated / paper

struct Panel {
  const char* prefix;  // shift-4.3.1's config prefix
  double tpot_ms, ttft_dp_x, ttft_tp_x, loss_tp, loss_shift;
};
constexpr Panel kPanels[] = {{"", 9.34, 6.0, 1.56, 0.46, 0.18}, {"qwen3-32b:", 8.68, 4.45, 1.31, 0.45, 0.23}};

}  // namespace loom::sim::shift_bands
