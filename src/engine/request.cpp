#include "engine/request.h"

#include "core/error.h"

namespace loom {

std::string_view status_name(SeqStatus s) {
  switch (s) {
    case SeqStatus::kWaiting: return "waiting";
    case SeqStatus::kRunning: return "running";
    case SeqStatus::kPreempted: return "preempted";
    case SeqStatus::kSwapped: return "swapped";
    case SeqStatus::kFinished: return "finished";
  }
  return "?";
}

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
    case FinishReason::kRejected: return "rejected";
  }
  return "?";
}

TokenId Sequence::token_at(int pos) const {
  LOOM_CHECK(pos >= 0 && pos < num_tokens(), "position ", pos, " of ", num_tokens());
  const int p = prompt_len();
  if (pos < p) return request.prompt.empty() ? 0 : request.prompt[size_t(pos)];
  return output[size_t(pos - p)];
}

}  // namespace loom
