#include "cluster/grouping.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace loom::cluster {

const char* role_name(Role r) {
  switch (r) {
    case Role::Prefill: return "prefill";
    case Role::Decode: return "decode";
    case Role::Both: return "both";
  }
  return "?";
}

std::string InstanceSpec::to_string() const {
  return cat(tier < 0 ? std::string("spare") : cat("t", tier), ":", role_name(role), ":tp", tp, "@", first_rank);
}

namespace {
bool pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }
}  // namespace

std::vector<int> candidate_tp_degrees(int num_ranks, int min_tp, int max_tp) {
  if (num_ranks < 1) fail("pool of ", num_ranks, " ranks: need at least 1 rank");
  if (!pow2(min_tp) || !pow2(max_tp) || min_tp > max_tp)
    fail("TP degrees ", min_tp, "..", max_tp, ": both must be powers of two, the first <= the second");
  if (num_ranks < min_tp || num_ranks % min_tp != 0)
    fail("pool of ", num_ranks, " ranks: no grouping fits (the smallest TP degree the model allows is ", min_tp,
         "; the pool must be a multiple of it)");
  std::vector<int> out;
  for (int t = min_tp; t <= max_tp && t <= num_ranks; t *= 2) out.push_back(t);
  return out;
}

std::vector<RankGroup> all_candidate_groups(int num_ranks, const std::vector<int>& tp_degrees) {
  std::vector<RankGroup> g;
  for (int t : tp_degrees)
    for (int r = 0; r + t <= num_ranks; r += t) g.push_back({r, t});
  return g;
}

bool place_instances(std::vector<InstanceSpec>* instances, int num_ranks, const std::vector<InstanceSpec>& previous) {
  std::vector<InstanceSpec> v = *instances;
  std::vector<char> used(size_t(num_ranks), 0);
  auto free_at = [&](int r, int t) {
    if (r % t != 0 || r + t > num_ranks) return false;
    for (int k = r; k < r + t; ++k)
      if (used[size_t(k)]) return false;
    return true;
  };
  auto take = [&](int r, int t) {
    for (int k = r; k < r + t; ++k) used[size_t(k)] = 1;
  };
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a].tp > v[b].tp; });
  for (auto& x : v) x.first_rank = -1;
  // Keep previous groups first (same tier, role, tp), so a small change moves little.
  std::vector<char> prev_used(previous.size(), 0);
  for (size_t i : order) {
    for (size_t p = 0; p < previous.size(); ++p) {
      const auto& q = previous[p];
      if (prev_used[p] || q.tier != v[i].tier || q.role != v[i].role || q.tp != v[i].tp || q.first_rank < 0) continue;
      if (!free_at(q.first_rank, q.tp)) continue;
      v[i].first_rank = q.first_rank;
      take(q.first_rank, q.tp);
      prev_used[p] = 1;
      break;
    }
  }
  for (size_t i : order) {
    if (v[i].first_rank >= 0) continue;
    const int t = v[i].tp;
    if (!pow2(t)) return false;
    int found = -1;
    for (int r = 0; r + t <= num_ranks && found < 0; r += t)
      if (free_at(r, t)) found = r;
    if (found < 0) return false;
    v[i].first_rank = found;
    take(found, t);
  }
  *instances = std::move(v);
  return true;
}

std::vector<int> ranks_regrouped(const std::vector<InstanceSpec>& before, const std::vector<InstanceSpec>& after,
                                 int num_ranks) {
  auto groups = [&](const std::vector<InstanceSpec>& v) {
    std::vector<std::pair<int, int>> g(size_t(num_ranks), {-1, 0});
    for (const auto& x : v)
      if (x.first_rank >= 0)
        for (int r = x.first_rank; r < x.first_rank + x.tp && r < num_ranks; ++r) g[size_t(r)] = {x.first_rank, x.tp};
    return g;
  };
  const auto a = groups(before), b = groups(after);
  std::vector<int> out;
  for (int r = 0; r < num_ranks; ++r)
    if (a[size_t(r)] != b[size_t(r)]) out.push_back(r);
  return out;
}

}  // namespace loom::cluster
