#include "core/suggest.h"

#include <algorithm>
#include <cctype>

namespace loom {

namespace {
std::string lower(const std::string& s) {
  std::string r = s;
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}
}  // namespace

int edit_distance(const std::string& a_in, const std::string& b_in) {
  const std::string a = lower(a_in), b = lower(b_in);
  const size_t n = a.size(), m = b.size();
  // Optimal string alignment: three rows of the table.
  std::vector<int> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = int(j);
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = int(i);
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    prev2.swap(prev);
    prev.swap(cur);
  }
  return prev[m];
}

std::string closest_name(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.empty()) return {};
  const int limit = std::max<int>(1, int(word.size()) / 3);
  const std::string w = lower(word);
  std::string best;
  int best_d = limit + 1;
  for (const std::string& c : candidates) {
    if (c.empty()) continue;
    int d = edit_distance(word, c);
    // A prefix of a longer name ("--max-tok" for "--max-tokens") counts as close.
    const std::string lc = lower(c);
    const size_t dashes = w.find_first_not_of('-');
    if (d > limit && dashes != std::string::npos && w.size() - dashes >= 3 && lc.size() > w.size() &&
        lc.compare(0, w.size(), w) == 0)
      d = limit;
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string c = closest_name(word, candidates);
  return c.empty() ? std::string() : " (did you mean " + c + "?)";
}

}  // namespace loom
