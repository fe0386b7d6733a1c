// SLO tiers of a Nitsum cluster (Nitsum 3.1, 3.3.2; paper file 002): each tier has a name, a TTFT
// and a TPOT target, or is the background tier (no targets, served best-effort on spare ranks).
// A request names its tier; the first tier is the default.
//
// Syntax (CLI `--tiers`, or one tier per line / comma in a text file):
//     strict=300/10,loose=300/20,batch=background
// i.e. NAME=TTFT_MS/TPOT_MS or NAME=background. A JSON file holds an array (or {"tiers": [...]})
// of {"name", "ttft_ms", "tpot_ms"} or {"name", "background": true}.
// Goodput of a tier = its requests meeting both their TTFT and TPOT targets, per second
// (Nitsum 1); background requests never count toward goodput.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::cluster {

struct SloTier {
  std::string name;
  double ttft_s = 0;  // target time to first token; 0 for the background tier
  double tpot_s = 0;  // target time per output token after the first; 0 for background
  bool background = false;
  // Meets both targets (background: never, it has none).
  bool met(double ttft_s_measured, double tpot_s_measured) const {
    return !background && ttft_s_measured <= ttft_s && tpot_s_measured <= tpot_s;
  }
};

class SloTiers {
 public:
  SloTiers() = default;
  // Validates: at least one tier, unique names of [A-Za-z0-9_.-], positive finite targets, at most
  // one background tier. Throws loom::Error naming the value and the limit.
  explicit SloTiers(std::vector<SloTier> tiers);

  const std::vector<SloTier>& tiers() const { return tiers_; }
  size_t size() const { return tiers_.size(); }
  const SloTier& operator[](size_t i) const { return tiers_[i]; }
  // Index of the tier named `name`; "" gives the default (first) tier. Throws loom::Error
  // "unknown tier 'x' (known: a, b)" otherwise.
  int find(const std::string& name) const;
  // Index of the background tier, -1 when none.
  int background() const;
  std::string to_string() const;  // in the CLI syntax
  nlohmann::json to_json() const;

 private:
  std::vector<SloTier> tiers_;
};

// `spec` in the CLI syntax, or a path to a file (JSON or the CLI syntax, one tier per line or
// comma-separated; '#' starts a comment). Throws loom::Error naming the bad value.
SloTiers parse_tiers(const std::string& spec);
SloTiers tiers_from_json(const nlohmann::json& j, const std::string& where);

// A tier mix "NAME:WEIGHT,..." over `tiers` -> one weight per tier (absent tiers 0); "" puts
// everything in the first tier. Throws loom::Error on an unknown tier or a weight that is not a
// positive number.
std::vector<double> parse_tier_mix(const SloTiers& tiers, const std::string& mix);
// The tier of each of n requests by smooth weighted round-robin: deterministic, and every prefix
// holds the shares up to one request per tier.
std::vector<int> assign_tiers(size_t n, const std::vector<double>& weights);

}  // namespace loom::cluster
