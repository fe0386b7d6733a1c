// Nitsum's global reconfiguration for one control window (Nitsum 3.3.1; paper file 002): from the
// profile table, each tier's arrival rate in the past window and its SLOs, how many instances of
// which TP degree serve each tier's prefill and decode stages in the next window.
//
// 1. Candidate configurations per tier (N10): for prefill degree t_P and decode degree t_D, a unit
//    of n_P prefill and n_D decode instances balanced so that n_P * P_max ~= n_D * D_max ("balance
//    the prefill and decode resource ratio"; integer counts rounded up on the binding stage,
//    PAPERS-NOTES 2.4.3), capacity min(n_P P_max, n_D D_max); or one colocated instance (no P/D).
// 2. Goodput efficiency GE(c, i): Eq. (1) is stripped in our copy; the RECONSTRUCTION of
//    PAPERS-NOTES N10.d, min(capacity, demand) / ranks, is the default and PlannerOptions::ge
//    swaps it.
// 3. Weighted greedy (N11): repeatedly add the unit with the highest score until the ranks run
//    out or every tier's demand is met. The weighted score is stripped too; the RECONSTRUCTION
//    score = unmet_i * GE (unmet_i = demand_i - provisioned_i) is the default, swappable through
//    PlannerOptions::score; score_plain is the naive greedy the paper says starves the less
//    efficient tiers.
// 4. Leftover ranks: spare instances of the smallest degree that take background requests and
//    spills (N12) or, with no background demand, headroom units for the tiers (up to
//    headroom_factor x demand) before that.
// The plan is a value; placement on aligned groups is place_instances (grouping.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cluster/grouping.h"
#include "cluster/profile_table.h"
#include "cluster/tiers.h"

namespace loom::cluster {

// One candidate unit of a tier.
struct Candidate {
  int tier = 0;
  bool split = true;  // prefill and decode instances (P/D); false: n_p colocated instances of tp_p
  int tp_p = 1, tp_d = 1, n_p = 1, n_d = 0;
  double capacity_rps = 0;  // goodput the unit can deliver when fed enough
  int ranks = 0;            // tp_p * n_p + tp_d * n_d
  std::string to_string() const;
};

// GE(capacity, demand still unmet, ranks) -> goodput per rank.
using GeFunction = std::function<double(double capacity_rps, double unmet_rps, int ranks)>;
// score(GE, unmet_rps, demand_rps) -> the greedy's key.
using ScoreFunction = std::function<double(double ge, double unmet_rps, double demand_rps)>;

double ge_reconstructed(double capacity_rps, double unmet_rps, int ranks);   // min(cap, unmet) / ranks
double score_unmet_weighted(double ge, double unmet_rps, double demand_rps);  // unmet * GE
double score_plain(double ge, double unmet_rps, double demand_rps);           // GE

struct PlannerOptions {
  bool allow_split = true;       // P/D disaggregated units
  bool allow_colocated = false;  // colocated units (the no-P/D baseline sets only this)
  int max_unit = 4;              // n_P (or n_D) up to this in a unit
  std::vector<int> tp_degrees;   // empty: the table's
  // Per tier: the only degree it may use (static per-tier TP); empty or 0: any.
  std::vector<int> fixed_tp;
  GeFunction ge = ge_reconstructed;
  ScoreFunction score = score_unmet_weighted;
  double headroom_factor = 1.5;  // leftover ranks first provision tiers up to this x demand
};

struct ClusterPlan {
  std::vector<InstanceSpec> instances;   // placed (first_rank set)
  std::vector<double> demand_rps;        // per tier, what the plan was made for
  std::vector<double> provisioned_rps;   // per tier, goodput capacity of its units (capped by demand)
  std::vector<double> capacity_rps;      // per tier, uncapped capacity of its units
  std::vector<Candidate> units;          // in the order the greedy chose them
  int spare_ranks = 0;                   // ranks in spare instances
  std::string to_string() const;
};

// Every candidate unit of every tier under `options` (background tiers have none).
std::vector<Candidate> enumerate_candidates(const ProfileTable& table, const SloTiers& tiers,
                                            const PlannerOptions& options);

// The weighted greedy. `demand_rps[i]`: tier i's arrivals per second in the past window.
// Throws loom::Error when num_ranks is not covered by the table's degrees.
ClusterPlan plan_cluster(const ProfileTable& table, const SloTiers& tiers, const std::vector<double>& demand_rps,
                         int num_ranks, const PlannerOptions& options = {},
                         const std::vector<InstanceSpec>& previous = {});

}  // namespace loom::cluster
