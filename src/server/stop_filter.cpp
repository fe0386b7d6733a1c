#include "server/stop_filter.h"

#include <algorithm>

namespace loom::server {

StopFilter::StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
  for (const auto& s : stops_) max_stop_len_ = std::max(max_stop_len_, s.size());
}

bool StopFilter::append(std::string_view more) {
  if (stopped_) return true;
  text_.append(more);
  if (stops_.empty()) return false;
  // A match must end in the new text, so it starts at or after searched_ (a start before that
  // would have ended within the old text and been found already).
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    const size_t p = text_.find(s, searched_);
    if (p != std::string::npos && p < best) {
      best = p;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    text_.resize(best);
    stopped_ = true;
    return true;
  }
  searched_ = text_.size() >= max_stop_len_ ? text_.size() - max_stop_len_ + 1 : 0;
  return false;
}

size_t StopFilter::held_back() const {
  size_t best = 0;
  for (const auto& s : stops_) {
    const size_t lim = std::min(s.size() - 1, text_.size() - taken_);
    for (size_t k = lim; k > best; --k) {
      if (std::string_view(text_).substr(text_.size() - k) == std::string_view(s).substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

std::string StopFilter::take_ready() {
  const size_t end = stopped_ ? text_.size() : text_.size() - held_back();
  if (end <= taken_) return {};
  std::string out = text_.substr(taken_, end - taken_);
  taken_ = end;
  return out;
}

std::string StopFilter::take_all() {
  std::string out = taken_ < text_.size() ? text_.substr(taken_) : std::string();
  taken_ = text_.size();
  return out;
}

}  // namespace loom::server
