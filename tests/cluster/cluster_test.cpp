// src/cluster: SLO tiers, aligned groupings, the Nitsum planner (weighted greedy over a profile
// table) and the global/local request scheduling, on synthetic profiles (pure logic: exact
// expectations, derived by hand in the comments, not from the code under test).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "cluster/global_scheduler.h"
#include "cluster/grouping.h"
#include "cluster/planner.h"
#include "cluster/tiers.h"
#include "core/error.h"

using namespace loom;
using namespace loom::cluster;

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / name;
  std::ofstream(p) << text;
  return p.string();
}

// Two tiers; per TP1 instance tier 0 ("a") serves 10 rps of prefill and 10 of decode, tier 1
// ("b") 5 and 5: a balanced 1P+1D unit of 2 ranks has GE 5 for a and 2.5 for b.
ProfileTable two_tier_table() {
  ProfileTable t(2, {1, 2});
  t.at(0, 1) = {10, 4, 10, 8, 5, 8};
  t.at(1, 1) = {5, 4, 5, 8, 2.5, 8};
  // TP2 is less efficient per rank for both (no reason to pick it here).
  t.at(0, 2) = {12, 4, 12, 8, 6, 8};
  t.at(1, 2) = {6, 4, 6, 8, 3, 8};
  return t;
}

double provisioned_capacity(const ClusterPlan& p, const ProfileTable& t, int tier) {
  double pre = 0, dec = 0;
  for (const auto& x : p.instances) {
    if (x.tier != tier) continue;
    if (x.role == Role::Prefill) pre += t.at(tier, x.tp).prefill_rps;
    if (x.role == Role::Decode) dec += t.at(tier, x.tp).decode_rps;
  }
  return std::min(pre, dec);
}

}  // namespace

TEST(ClusterTiers, ParsesCliSyntaxAndFiles) {
  const SloTiers t = parse_tiers("strict=300/10, loose=300/20,batch=background");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name, "strict");
  EXPECT_DOUBLE_EQ(t[0].ttft_s, 0.3);
  EXPECT_DOUBLE_EQ(t[1].tpot_s, 0.02);
  EXPECT_TRUE(t[2].background);
  EXPECT_EQ(t.find(""), 0);  // a request naming no tier gets the first
  EXPECT_EQ(t.find("loose"), 1);
  EXPECT_EQ(t.background(), 2);
  EXPECT_TRUE(t[0].met(0.3, 0.01));
  EXPECT_FALSE(t[0].met(0.31, 0.01));
  EXPECT_FALSE(t[2].met(0, 0));  // background never counts toward goodput
  const SloTiers j = parse_tiers(temp_file("loom_tiers.json",
      R"({"tiers": [{"name": "t1", "ttft_ms": 200, "tpot_ms": 10}, {"name": "bg", "background": true}]})"));
  EXPECT_EQ(j.to_string(), "t1=200/10,bg=background");
  const SloTiers x = parse_tiers(temp_file("loom_tiers.txt", "# Table 1, 8B on H100\nstrict=300/10\nloose=300/20\n"));
  EXPECT_EQ(x.to_string(), "strict=300/10,loose=300/20");
}

TEST(ClusterTiers, BadInputIsOneClearError) {
  auto msg = [](const std::string& s) {
    try {
      parse_tiers(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("a=0/10").find("TTFT target 0 ms must be positive"), std::string::npos) << msg("a=0/10");
  EXPECT_NE(msg("a=100/-5").find("TPOT target -5 ms must be positive"), std::string::npos);
  EXPECT_NE(msg("a=100/x").find("not a number"), std::string::npos);
  EXPECT_NE(msg("a=1/1,a=2/2").find("given twice"), std::string::npos);
  EXPECT_NE(msg("").find("no SLO tier"), std::string::npos);
  EXPECT_NE(msg("a").find("NAME=TTFT_MS/TPOT_MS"), std::string::npos);
  EXPECT_NE(msg(temp_file("loom_bad_tiers.json", R"([{"name": "a", "ttft_ms": 10}])")).find("tpot_ms"),
            std::string::npos);
  const SloTiers t = parse_tiers("strict=300/10,loose=300/20");
  try {
    t.find("gold");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown tier 'gold' (known: strict, loose)");
  }
}

TEST(ClusterGrouping, BuddyAlignedCandidatesAndPoolErrors) {
  EXPECT_EQ(candidate_tp_degrees(8, 1, 8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(candidate_tp_degrees(6, 2, 8), (std::vector<int>{2, 4}));
  EXPECT_THROW(candidate_tp_degrees(6, 4, 8), Error);  // 6 ranks cannot be covered by TP4 groups
  EXPECT_THROW(candidate_tp_degrees(0, 1, 8), Error);
  EXPECT_THROW(candidate_tp_degrees(8, 3, 8), Error);
  try {
    candidate_tp_degrees(3, 2, 4);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pool of 3 ranks: no grouping fits"), std::string::npos);
  }
  // Every aligned group: 8 TP1 + 4 TP2 + 2 TP4 + 1 TP8.
  const auto g = all_candidate_groups(8, {1, 2, 4, 8});
  EXPECT_EQ(g.size(), 15u);
  for (const auto& x : g) EXPECT_EQ(x.first_rank % x.tp, 0);

  std::vector<InstanceSpec> v = {{0, Role::Prefill, 1}, {0, Role::Decode, 4}, {1, Role::Decode, 2}, {1, Role::Prefill, 1}};
  ASSERT_TRUE(place_instances(&v, 8));
  std::vector<int> owner(8, -1);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].first_rank % v[i].tp, 0) << v[i].to_string();
    for (int r = v[i].first_rank; r < v[i].first_rank + v[i].tp; ++r) {
      EXPECT_EQ(owner[size_t(r)], -1) << "rank " << r << " in two groups";
      owner[size_t(r)] = int(i);
    }
  }
  std::vector<InstanceSpec> too_many = {{0, Role::Both, 8}, {0, Role::Both, 1}};
  EXPECT_FALSE(place_instances(&too_many, 8));
  // A surviving instance keeps its group; only the regrouped ranks are reported.
  std::vector<InstanceSpec> next = {{0, Role::Decode, 4}, {0, Role::Prefill, 2}, {1, Role::Decode, 2}};
  ASSERT_TRUE(place_instances(&next, 8, v));
  EXPECT_EQ(next[0].first_rank, v[1].first_rank);
  const auto moved = ranks_regrouped(v, next, 8);
  // The TP1 prefill pair became one TP2 group: exactly those two ranks moved.
  EXPECT_EQ(moved.size(), 2u);
}

// The paper's claim (Nitsum 3.3.1): a naive greedy on GE starves the less efficient tier; the
// unmet-demand weighting serves every tier. Tier a: GE 5 per rank, demand 40 rps; tier b: GE 2.5,
// demand 40 rps; 8 ranks (4 units of 2). Plain: a's GE (capped by its unmet demand) stays 5 while
// it is unmet, above b's 2.5, so all 4 units go to a. Weighted (unmet x GE): a, a (40*5 = 200,
// 30*5 = 150 > 40*2.5), then a 20*5 = 100 ties b 100 (the tie keeps the earlier tier), then
// 10*5 = 50 < 100: b gets the last unit.
TEST(ClusterPlanner, WeightedGreedyServesEveryTierWherePlainStarves) {
  const SloTiers tiers = parse_tiers("a=300/10,b=600/30");
  const ProfileTable t = two_tier_table();
  PlannerOptions plain;
  plain.score = score_plain;
  plain.max_unit = 1;
  plain.headroom_factor = 1;
  const ClusterPlan p = plan_cluster(t, tiers, {40, 40}, 8, plain);
  EXPECT_DOUBLE_EQ(provisioned_capacity(p, t, 0), 40);
  EXPECT_DOUBLE_EQ(provisioned_capacity(p, t, 1), 0) << p.to_string();

  PlannerOptions weighted = plain;
  weighted.score = score_unmet_weighted;
  const ClusterPlan w = plan_cluster(t, tiers, {40, 40}, 8, weighted);
  EXPECT_DOUBLE_EQ(provisioned_capacity(w, t, 0), 30) << w.to_string();
  EXPECT_DOUBLE_EQ(provisioned_capacity(w, t, 1), 5) << w.to_string();
  // Swappable: a score that weighs the unmet fraction squared also serves both.
  PlannerOptions custom = plain;
  custom.score = [](double ge, double unmet, double demand) { return ge * (unmet / demand) * (unmet / demand); };
  const ClusterPlan c = plan_cluster(t, tiers, {40, 40}, 8, custom);
  EXPECT_GT(provisioned_capacity(c, t, 1), 0);
}

// Configurations balance prefill and decode: a tier whose decode instance serves a third of what
// a prefill instance does gets about three decode instances per prefill one, so neither stage's
// capacity exceeds the other's by more than one instance's worth.
TEST(ClusterPlanner, ConfigurationsBalancePrefillAndDecode) {
  const SloTiers tiers = parse_tiers("only=300/20");
  ProfileTable t(1, {1, 2});
  t.at(0, 1) = {9, 4, 3, 16, 2, 8};
  t.at(0, 2) = {10, 4, 4, 16, 2, 8};  // per rank worse at both stages
  for (int ranks : {4, 8, 16}) {
    PlannerOptions o;
    o.headroom_factor = 1;
    const ClusterPlan p = plan_cluster(t, tiers, {1000}, ranks, o);
    double pre = 0, dec = 0;
    int n_pre = 0, n_dec = 0;
    for (const auto& x : p.instances) {
      if (x.role == Role::Prefill) pre += t.at(0, x.tp).prefill_rps, ++n_pre;
      if (x.role == Role::Decode) dec += t.at(0, x.tp).decode_rps, ++n_dec;
    }
    EXPECT_EQ(n_pre * 3, n_dec) << ranks << " ranks: " << p.to_string();
    EXPECT_LE(std::abs(pre - dec), 9.0) << p.to_string();
    EXPECT_EQ(p.spare_ranks, 0);
  }
}

// TP is the knob (Nitsum 2.2): a tier whose TPOT only TP2 decode meets gets TP2 decode groups,
// and one that TP1 serves best per rank stays at TP1.
TEST(ClusterPlanner, PicksTheDegreeTheSloNeeds) {
  const SloTiers tiers = parse_tiers("strict=200/10,loose=200/15");
  ProfileTable t(2, {1, 2, 4});
  t.at(0, 1) = {8, 4, 0, 0, 0, 0};  // TP1 decode cannot meet 10 ms
  t.at(0, 2) = {14, 4, 12, 8, 0, 0};
  t.at(0, 4) = {24, 4, 18, 8, 0, 0};
  t.at(1, 1) = {8, 4, 8, 16, 0, 0};
  t.at(1, 2) = {14, 4, 12, 16, 0, 0};
  t.at(1, 4) = {24, 4, 18, 16, 0, 0};
  PlannerOptions o;
  o.headroom_factor = 1;
  const ClusterPlan p = plan_cluster(t, tiers, {8, 8}, 8, o);
  bool strict_decode = false;
  for (const auto& x : p.instances) {
    if (x.tier == 0 && x.role == Role::Decode) {
      EXPECT_GE(x.tp, 2) << p.to_string();
      strict_decode = true;
    }
    if (x.tier == 1) {
      EXPECT_EQ(x.tp, 1) << p.to_string();
    }
  }
  EXPECT_TRUE(strict_decode);
  EXPECT_GE(p.provisioned_rps[0], 8 - 1e-9);
  EXPECT_GE(p.provisioned_rps[1], 8 - 1e-9);
}

TEST(ClusterPlanner, LeftoverRanksBecomeSparesForBackground) {
  const SloTiers tiers = parse_tiers("a=300/10,bg=background");
  ProfileTable t(2, {1});
  t.at(0, 1) = {10, 4, 10, 8, 5, 8};
  const ClusterPlan p = plan_cluster(t, tiers, {10, 3}, 8, {});
  // a needs one 1P+1D unit; background work waits, so the other 6 ranks are spares of tier bg.
  EXPECT_EQ(p.spare_ranks, 6);
  int spares = 0;
  for (const auto& x : p.instances) spares += x.tier == 1 && x.role == Role::Both;
  EXPECT_EQ(spares, 6);
}

TEST(ClusterScheduler, RoutesFeasibleLeastLoadedThenSpillsRoundRobin) {
  const SloTiers tiers = parse_tiers("a=300/10,b=600/30,bg=background");
  ProfileTable t(3, {1, 2});
  t.at(0, 1) = {10, 4, 10, 8, 5, 8};  // in-flight limit of an a-prefill instance: 10 * 0.3 = 3
  t.at(1, 1) = {5, 4, 5, 8, 2.5, 8};  // b-prefill: 5 * 0.6 = 3
  SchedulerOptions o;
  GlobalScheduler g(tiers, t, 8, o);
  ClusterPlan p;
  p.instances = {{0, Role::Prefill, 1}, {0, Role::Prefill, 1}, {0, Role::Decode, 1}, {0, Role::Decode, 1},
                 {1, Role::Prefill, 1}, {1, Role::Decode, 1}, {2, Role::Both, 1},    {2, Role::Both, 1}};
  ASSERT_TRUE(place_instances(&p.instances, 8));
  g.install(p);
  ASSERT_EQ(g.instances()[0].inflight_limit, 3);
  // Six tier-a requests fill both a-prefill instances alternately (least loaded), all feasible.
  std::vector<int> count(8, 0);
  for (int k = 0; k < 6; ++k) {
    const Dispatch d = g.route(0);
    EXPECT_EQ(d.queue, QueueKind::Feasible);
    EXPECT_TRUE(d.instance == 0 || d.instance == 1);
    ++count[size_t(d.instance)];
  }
  EXPECT_EQ(count[0], 3);
  EXPECT_EQ(count[1], 3);
  // The seventh is infeasible and spills round-robin over every prefill-capable instance
  // (0, 1, 4, 6, 7).
  std::vector<int> spilled;
  for (int k = 0; k < 5; ++k) {
    const Dispatch d = g.route(0);
    EXPECT_EQ(d.queue, QueueKind::Infeasible);
    spilled.push_back(d.instance);
  }
  EXPECT_EQ(spilled, (std::vector<int>{0, 1, 4, 6, 7}));
  // Spills load an instance but do not use up its tier's SLO bandwidth: instance 0 holds 3
  // feasible + 1 spilled requests; one feasible completion makes it feasible again.
  EXPECT_EQ(g.instances()[0].outstanding, 4);
  EXPECT_EQ(g.instances()[0].feasible_outstanding, 3);
  g.complete(0, QueueKind::Infeasible);
  EXPECT_EQ(g.route(0).queue, QueueKind::Infeasible);  // still 3 feasible on both a-prefill instances
  g.complete(0, QueueKind::Feasible);
  const Dispatch again = g.route(0);
  EXPECT_EQ(again.queue, QueueKind::Feasible);
  EXPECT_EQ(again.instance, 0);
  // Background: round-robin over the background tier's instances.
  EXPECT_EQ(g.route(2).instance, 6);
  EXPECT_EQ(g.route(2).instance, 7);
  EXPECT_EQ(g.route(2).queue, QueueKind::Background);
  // P/D hand-off: least-loaded decode instance of the tier.
  const int d1 = g.route_decode(0), d2 = g.route_decode(0);
  EXPECT_NE(d1, d2);
  EXPECT_TRUE((d1 == 2 || d1 == 3) && (d2 == 2 || d2 == 3));
  EXPECT_EQ(g.route_decode(1), 5);
}

TEST(ClusterScheduler, LocalBatchFeasibleFirstCappedPerTier) {
  LocalQueues q;
  q.push(1, QueueKind::Background);
  q.push(2, QueueKind::Infeasible);
  q.push(3, QueueKind::Feasible);
  q.push(4, QueueKind::Feasible);
  EXPECT_EQ(q.admit(1, 4), (std::vector<int64_t>{3, 4, 2}));  // 1 running + 3 = the cap of 4
  EXPECT_EQ(q.admit(4, 4), (std::vector<int64_t>{}));
  EXPECT_EQ(q.admit(0, 4), (std::vector<int64_t>{1}));
  EXPECT_TRUE(q.empty());
}

// Every control window re-plans from the past window's arrivals: a shift of the mix from tier a
// to tier b moves ranks to b.
TEST(ClusterScheduler, ControlWindowFollowsTheMix) {
  const SloTiers tiers = parse_tiers("a=300/10,b=600/30");
  SchedulerOptions o;
  o.planner.headroom_factor = 1;
  GlobalScheduler g(tiers, two_tier_table(), 8, o);
  // Hysteresis: 30 then 31 a-requests per window keeps the installed plan (31 vs 30 provisioned
  // is within 5%).
  for (int k = 0; k < 30; ++k) g.record_arrival(0);
  g.end_window(1.0);
  EXPECT_DOUBLE_EQ(g.last_rates()[0], 30);
  EXPECT_DOUBLE_EQ(g.plan().provisioned_rps[0], 30);
  const auto before = g.plan().instances;
  for (int k = 0; k < 31; ++k) g.record_arrival(0);
  g.end_window(1.0);
  EXPECT_EQ(g.plan().instances, before);
  EXPECT_DOUBLE_EQ(g.plan().provisioned_rps[0], 30);
  for (int k = 0; k < 20; ++k) g.record_arrival(1);
  for (int k = 0; k < 5; ++k) g.record_arrival(0);
  const auto moved = g.end_window(1.0);
  EXPECT_DOUBLE_EQ(g.plan().provisioned_rps[0], 5);
  EXPECT_DOUBLE_EQ(g.plan().provisioned_rps[1], 15);  // 3 units of 5: the 6 ranks left after a's one unit
  int b_instances = 0;
  for (const auto& x : g.instances()) b_instances += x.spec.tier == 1;
  EXPECT_EQ(b_instances, 6);
  // Every group is TP1 in both windows: roles and tiers changed, no rank changed group.
  EXPECT_TRUE(moved.empty());
  EXPECT_EQ(g.windows(), 3);
}

// Goodput-aware batch composition: a step of cap 3 over running requests of mixed queues takes
// the feasible ones first (admission order), then best-effort, then background.
TEST(ClusterScheduler, BatchCompositionFeasibleFirst) {
  using Q = QueueKind;
  const std::vector<Q> running = {Q::Background, Q::Infeasible, Q::Feasible, Q::Infeasible, Q::Feasible};
  EXPECT_EQ(compose_batch(running, 3), (std::vector<size_t>{2, 4, 1}));
  EXPECT_EQ(compose_batch(running, 10), (std::vector<size_t>{2, 4, 1, 3, 0}));
  EXPECT_EQ(compose_batch(running, 0), (std::vector<size_t>{}));
}

TEST(ClusterTiers, MixSharesHoldInEveryPrefix) {
  const SloTiers t = parse_tiers("a=1/1,b=2/2,c=background");
  EXPECT_EQ(parse_tier_mix(t, ""), (std::vector<double>{1, 0, 0}));
  const std::vector<double> w = parse_tier_mix(t, "a:3, b:1,c:1");
  EXPECT_EQ(w, (std::vector<double>{3, 1, 1}));
  const std::vector<int> x = assign_tiers(50, w);
  std::vector<int> n(3, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    ++n[size_t(x[i])];
    const double done = double(i + 1);
    for (int k = 0; k < 3; ++k) EXPECT_LE(std::abs(n[size_t(k)] - done * w[size_t(k)] / 5), 1.0) << i;
  }
  EXPECT_EQ(n, (std::vector<int>{30, 10, 10}));
  EXPECT_THROW(parse_tier_mix(t, "d:1"), Error);
  EXPECT_THROW(parse_tier_mix(t, "a:0"), Error);
  EXPECT_THROW(parse_tier_mix(t, "a"), Error);
}
