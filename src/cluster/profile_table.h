// Goodput-efficiency profile table of a Nitsum cluster (Nitsum 3.3.1; paper file 002): for every
// (SLO tier, TP degree) the most requests per second ONE instance of that degree can serve while
// meeting the tier's targets, per stage:
//   prefill_rps / prefill_batch: P_max and B_P, the prefill throughput (and the batch that reaches
//     it) whose time to first token stays within the tier's TTFT;
//   decode_rps / decode_batch:   D_max and B_D, the decode throughput (and batch) whose time per
//     output token stays within the tier's TPOT;
//   both_rps / both_batch:       the same instance running prefill and decode together (no P/D
//     disaggregation).
// The paper's symbols for P_max/D_max/B_P/B_D are stripped in our copy (PAPERS-NOTES 2.4.1); the
// names here are ours. Units: requests per second at the tier's mean prompt and output lengths
// (PAPERS-NOTES 2.4.2: token throughput converted with the window's mean lengths). 0 means the
// degree cannot meet the tier's target at all.
// Filled by src/sim (nitsum_profile_table: the cost model of GPU nodes, or of a `loom profile`
// folder for CPU ranks) or by hand in tests.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::cluster {

struct StageProfile {
  double prefill_rps = 0;
  int prefill_batch = 0;
  double decode_rps = 0;
  int decode_batch = 0;
  double both_rps = 0;
  int both_batch = 0;
};

class ProfileTable {
 public:
  ProfileTable() = default;
  ProfileTable(int num_tiers, std::vector<int> tp_degrees);

  int num_tiers() const { return num_tiers_; }
  const std::vector<int>& tp_degrees() const { return tps_; }
  bool has(int tp) const;
  StageProfile& at(int tier, int tp);              // LOOM_CHECK on a tier / degree outside the table
  const StageProfile& at(int tier, int tp) const;  // idem
  nlohmann::json to_json() const;
  static ProfileTable from_json(const nlohmann::json& j);

 private:
  int num_tiers_ = 0;
  std::vector<int> tps_;
  std::vector<StageProfile> v_;  // [tier][tp index]
};

}  // namespace loom::cluster
