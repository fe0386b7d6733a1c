#include "cluster/profile_table.h"

#include <algorithm>

#include "core/error.h"

namespace loom::cluster {

ProfileTable::ProfileTable(int num_tiers, std::vector<int> tp_degrees)
    : num_tiers_(num_tiers), tps_(std::move(tp_degrees)), v_(size_t(num_tiers) * tps_.size()) {
  LOOM_CHECK(num_tiers >= 0);
}

bool ProfileTable::has(int tp) const { return std::find(tps_.begin(), tps_.end(), tp) != tps_.end(); }

StageProfile& ProfileTable::at(int tier, int tp) {
  return const_cast<StageProfile&>(static_cast<const ProfileTable&>(*this).at(tier, tp));
}

const StageProfile& ProfileTable::at(int tier, int tp) const {
  const auto it = std::find(tps_.begin(), tps_.end(), tp);
  LOOM_CHECK(tier >= 0 && tier < num_tiers_ && it != tps_.end(), "tier ", tier, " tp ", tp);
  return v_[size_t(tier) * tps_.size() + size_t(it - tps_.begin())];
}

nlohmann::json ProfileTable::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (int i = 0; i < num_tiers_; ++i)
    for (int t : tps_) {
      const auto& s = at(i, t);
      rows.push_back({{"tier", i}, {"tp", t}, {"prefill_rps", s.prefill_rps}, {"prefill_batch", s.prefill_batch},
                      {"decode_rps", s.decode_rps}, {"decode_batch", s.decode_batch}, {"both_rps", s.both_rps},
                      {"both_batch", s.both_batch}});
    }
  return {{"num_tiers", num_tiers_}, {"tp_degrees", tps_}, {"rows", rows}};
}

ProfileTable ProfileTable::from_json(const nlohmann::json& j) {
  ProfileTable t(j.at("num_tiers").get<int>(), j.at("tp_degrees").get<std::vector<int>>());
  for (const auto& r : j.at("rows")) {
    auto& s = t.at(r.at("tier").get<int>(), r.at("tp").get<int>());
    s.prefill_rps = r.value("prefill_rps", 0.0);
    s.prefill_batch = r.value("prefill_batch", 0);
    s.decode_rps = r.value("decode_rps", 0.0);
    s.decode_batch = r.value("decode_batch", 0);
    s.both_rps = r.value("both_rps", 0.0);
    s.both_batch = r.value("both_batch", 0);
  }
  return t;
}

}  // namespace loom::cluster
