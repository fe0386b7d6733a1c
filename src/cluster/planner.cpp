#include "cluster/planner.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "core/error.h"

namespace loom::cluster {

std::string Candidate::to_string() const {
  if (!split) return cat("t", tier, ":", n_p, "x both tp", tp_p, " (", capacity_rps, " rps)");
  return cat("t", tier, ":", n_p, "x prefill tp", tp_p, " + ", n_d, "x decode tp", tp_d, " (", capacity_rps, " rps)");
}

double ge_reconstructed(double capacity_rps, double unmet_rps, int ranks) {
  return ranks > 0 ? std::min(capacity_rps, std::max(0.0, unmet_rps)) / ranks : 0.0;
}
double score_unmet_weighted(double ge, double unmet_rps, double) { return std::max(0.0, unmet_rps) * ge; }
double score_plain(double ge, double, double) { return ge; }

std::string ClusterPlan::to_string() const {
  std::string s;
  for (const auto& x : instances) {
    if (!s.empty()) s += ' ';
    s += x.to_string();
  }
  return s;
}

std::vector<Candidate> enumerate_candidates(const ProfileTable& table, const SloTiers& tiers,
                                            const PlannerOptions& o) {
  const std::vector<int> tps = o.tp_degrees.empty() ? table.tp_degrees() : o.tp_degrees;
  std::vector<Candidate> out;
  for (int i = 0; i < int(tiers.size()); ++i) {
    if (tiers[size_t(i)].background) continue;
    const int fixed = size_t(i) < o.fixed_tp.size() ? o.fixed_tp[size_t(i)] : 0;
    auto allowed = [&](int t) { return table.has(t) && (fixed <= 0 || t == fixed); };
    std::set<std::tuple<int, int, int, int>> seen;
    if (o.allow_split)
      for (int tp_p : tps)
        for (int tp_d : tps) {
          if (!allowed(tp_p) || !allowed(tp_d)) continue;
          const double P = table.at(i, tp_p).prefill_rps, D = table.at(i, tp_d).decode_rps;
          if (P <= 0 || D <= 0) continue;
          auto add = [&](int n_p, int n_d) {
            if (!seen.insert({tp_p, tp_d, n_p, n_d}).second) return;
            Candidate c;
            c.tier = i;
            c.split = true;
            c.tp_p = tp_p, c.tp_d = tp_d, c.n_p = n_p, c.n_d = n_d;
            c.capacity_rps = std::min(n_p * P, n_d * D);
            c.ranks = n_p * tp_p + n_d * tp_d;
            out.push_back(c);
          };
          // Balance n_P * P = n_D * D, rounding the binding stage up (PAPERS-NOTES 2.4.3).
          for (int n = 1; n <= o.max_unit; ++n) {
            add(n, std::max(1, int(std::ceil(n * P / D - 1e-9))));
            add(std::max(1, int(std::ceil(n * D / P - 1e-9))), n);
          }
        }
    if (o.allow_colocated)
      for (int t : tps) {
        if (!allowed(t) || table.at(i, t).both_rps <= 0) continue;
        Candidate c;
        c.tier = i;
        c.split = false;
        c.tp_p = t, c.n_p = 1, c.n_d = 0, c.tp_d = t;
        c.capacity_rps = table.at(i, t).both_rps;
        c.ranks = t;
        out.push_back(c);
      }
  }
  return out;
}

namespace {

void add_unit(std::vector<InstanceSpec>* v, const Candidate& c) {
  if (!c.split) {
    for (int k = 0; k < c.n_p; ++k) v->push_back({c.tier, Role::Both, c.tp_p, -1});
    return;
  }
  for (int k = 0; k < c.n_p; ++k) v->push_back({c.tier, Role::Prefill, c.tp_p, -1});
  for (int k = 0; k < c.n_d; ++k) v->push_back({c.tier, Role::Decode, c.tp_d, -1});
}

}  // namespace

namespace {

// One weighted-greedy run.
ClusterPlan plan_once(const ProfileTable& table, const SloTiers& tiers, const std::vector<double>& demand, int num_ranks,
                      const PlannerOptions& o, const std::vector<Candidate>& cands, int min_tp,
                      const std::vector<InstanceSpec>& previous) {
  ClusterPlan plan;
  plan.demand_rps = demand;
  plan.provisioned_rps.assign(tiers.size(), 0.0);
  plan.capacity_rps.assign(tiers.size(), 0.0);
  std::vector<InstanceSpec> inst;
  int free_ranks = num_ranks;
  std::vector<char> unplaceable(cands.size(), 0);
  // Buddy allocation of power-of-two groups into a power-of-two pool never fragments (largest
  // first): any set of instances whose ranks sum to at most the pool fits, so the placement
  // check per greedy step is needed only for other pool sizes.
  const bool always_fits = (num_ranks & (num_ranks - 1)) == 0;

  // One greedy pass towards `target[i]` per tier.
  auto greedy = [&](const std::vector<double>& target) {
    for (;;) {
      int best = -1;
      double best_score = 0;
      for (size_t k = 0; k < cands.size(); ++k) {
        const Candidate& c = cands[k];
        if (unplaceable[k] || c.ranks > free_ranks) continue;
        const double unmet = target[size_t(c.tier)] - plan.capacity_rps[size_t(c.tier)];
        if (unmet <= 1e-9) continue;
        const double ge = o.ge(c.capacity_rps, unmet, c.ranks);
        const double s = o.score(ge, unmet, target[size_t(c.tier)]);
        // Ties: the smaller unit, then the earlier candidate (deterministic).
        if (s > best_score * (1 + 1e-12) + 1e-15 ||
            (best >= 0 && std::abs(s - best_score) <= 1e-12 * best_score && c.ranks < cands[size_t(best)].ranks)) {
          best = int(k);
          best_score = s;
        }
      }
      if (best < 0 || best_score <= 0) return;
      std::vector<InstanceSpec> trial = inst;
      add_unit(&trial, cands[size_t(best)]);
      if (!always_fits && !place_instances(&trial, num_ranks)) {
        unplaceable[size_t(best)] = 1;
        continue;
      }
      const Candidate& c = cands[size_t(best)];
      inst = std::move(trial);
      free_ranks -= c.ranks;
      plan.capacity_rps[size_t(c.tier)] += c.capacity_rps;
      plan.units.push_back(c);
    }
  };
  greedy(demand);
  // Leftover ranks: headroom for the tiers when no background work waits (the window's rate is
  // an estimate; bursts inside the next window land on this headroom), then spares.
  const int bg = tiers.background();
  const bool background_waiting = bg >= 0 && demand[size_t(bg)] > 0;
  if (!background_waiting && o.headroom_factor > 1) {
    std::vector<double> target(demand);
    for (auto& x : target) x *= o.headroom_factor;
    std::fill(unplaceable.begin(), unplaceable.end(), 0);
    greedy(target);
  }
  for (size_t i = 0; i < tiers.size(); ++i) plan.provisioned_rps[i] = std::min(plan.capacity_rps[i], demand[i]);
  // Spares: the smallest degree over whatever is left.
  for (;;) {
    std::vector<InstanceSpec> trial = inst;
    trial.push_back({bg, Role::Both, min_tp, -1});
    if (free_ranks < min_tp || (!always_fits && !place_instances(&trial, num_ranks))) break;
    inst = std::move(trial);
    free_ranks -= min_tp;
    plan.spare_ranks += min_tp;
  }
  // Final placement, keeping the previous window's groups where the same instance survives.
  std::vector<InstanceSpec> placed = inst;
  if (previous.empty() || !place_instances(&placed, num_ranks, previous)) {
    placed = inst;
    LOOM_CHECK(place_instances(&placed, num_ranks), "the greedy's instances do not fit ", num_ranks, " ranks");
  }
  plan.instances = std::move(placed);
  return plan;
}

}  // namespace

ClusterPlan plan_cluster(const ProfileTable& table, const SloTiers& tiers, const std::vector<double>& demand,
                         int num_ranks, const PlannerOptions& o, const std::vector<InstanceSpec>& previous) {
  LOOM_CHECK(demand.size() == tiers.size(), demand.size(), " demands for ", tiers.size(), " tiers");
  LOOM_CHECK(table.num_tiers() == int(tiers.size()));
  const std::vector<int> tps = o.tp_degrees.empty() ? table.tp_degrees() : o.tp_degrees;
  LOOM_CHECK(!tps.empty());
  const int min_tp = *std::min_element(tps.begin(), tps.end());
  candidate_tp_degrees(num_ranks, min_tp, *std::max_element(tps.begin(), tps.end()));  // throws when none fits
  const std::vector<Candidate> cands = enumerate_candidates(table, tiers, o);
  ClusterPlan best = plan_once(table, tiers, demand, num_ranks, o, cands, min_tp, previous);
  return best;
}

}  // namespace loom::cluster
