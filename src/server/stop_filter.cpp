#include "server/stop_filter.h"

#include <algorithm>

namespace loom::server {

StopFilter::StopFilter(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (s.empty()) continue;
    Pattern p;
    p.s = std::move(s);
    p.border.assign(p.s.size(), 0);
    for (size_t i = 1, k = 0; i < p.s.size(); ++i) {
      while (k > 0 && p.s[i] != p.s[k]) k = p.border[k - 1];
      if (p.s[i] == p.s[k]) ++k;
      p.border[i] = uint32_t(k);
    }
    stops_.push_back(std::move(p));
  }
}

bool StopFilter::append(std::string_view more) {
  if (stopped_) return true;
  const size_t base = text_.size();
  text_.append(more);
  if (stops_.empty()) return false;
  // Every occurrence ending in the new text (none ended before: the filter would have stopped);
  // the earliest start wins, then the earlier stop string in the list.
  size_t best = std::string::npos;
  for (Pattern& p : stops_) {
    uint32_t state = p.state;
    const uint32_t len = uint32_t(p.s.size());
    for (size_t i = base; i < text_.size(); ++i) {
      const char c = text_[i];
      while (state > 0 && p.s[state] != c) {
        state = p.border[state - 1];
        ++work_;
      }
      ++work_;
      if (p.s[state] == c) ++state;
      if (state == len) {
        const size_t start = i + 1 - len;
        if (start < best) {
          best = start;
          matched_ = p.s;
        }
        break;  // this string's first occurrence is its earliest start
      }
    }
    p.state = state;
  }
  if (best != std::string::npos) {
    text_.resize(best);
    stopped_ = true;
    return true;
  }
  return false;
}

size_t StopFilter::held_back() const {
  const size_t avail = text_.size() - taken_;
  size_t best = 0;
  for (const Pattern& p : stops_) {
    uint32_t k = p.state;
    while (k > avail) k = p.border[k - 1];  // the longest border that is still not taken
    best = std::max(best, size_t(k));
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
