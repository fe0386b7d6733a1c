#include "cluster/tiers.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/mmap_file.h"

namespace loom::cluster {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

double parse_ms(const std::string& v, const std::string& what, const std::string& tier) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    fail("tier '", tier, "': ", what, " '", v, "' is not a number of milliseconds");
  }
  std::string rest = trim(v.substr(used));
  if (!rest.empty() && rest != "ms") fail("tier '", tier, "': ", what, " '", v, "' is not a number of milliseconds");
  return x * 1e-3;
}

SloTier parse_one(const std::string& item) {
  const auto eq = item.find('=');
  if (eq == std::string::npos)
    fail("tier '", item, "': expected NAME=TTFT_MS/TPOT_MS or NAME=background");
  SloTier t;
  t.name = trim(item.substr(0, eq));
  const std::string v = trim(item.substr(eq + 1));
  if (v == "background" || v == "bg") {
    t.background = true;
    return t;
  }
  const auto slash = v.find('/');
  if (slash == std::string::npos) fail("tier '", t.name, "': '", v, "' is not TTFT_MS/TPOT_MS or background");
  t.ttft_s = parse_ms(trim(v.substr(0, slash)), "TTFT", t.name);
  t.tpot_s = parse_ms(trim(v.substr(slash + 1)), "TPOT", t.name);
  return t;
}

SloTiers parse_text(const std::string& text) {
  std::vector<SloTier> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (const auto h = line.find('#'); h != std::string::npos) line = line.substr(0, h);
    std::istringstream items(line);
    std::string item;
    while (std::getline(items, item, ',')) {
      // ';' also separates tiers.
      std::istringstream parts(item);
      std::string part;
      while (std::getline(parts, part, ';'))
        if (!trim(part).empty()) out.push_back(parse_one(trim(part)));
    }
  }
  return SloTiers(std::move(out));
}

}  // namespace

SloTiers::SloTiers(std::vector<SloTier> tiers) : tiers_(std::move(tiers)) {
  if (tiers_.empty()) fail("no SLO tier given (expected e.g. strict=300/10,loose=300/20,batch=background)");
  std::set<std::string> seen;
  int backgrounds = 0;
  for (const auto& t : tiers_) {
    if (t.name.empty()) fail("an SLO tier has an empty name");
    for (char c : t.name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
        fail("tier name '", t.name, "': only letters, digits, '_', '-' and '.' are allowed");
    if (!seen.insert(t.name).second) fail("tier '", t.name, "' is given twice");
    if (t.background) {
      if (++backgrounds > 1) fail("tier '", t.name, "': at most one background tier (another is given)");
      continue;
    }
    if (!(std::isfinite(t.ttft_s) && t.ttft_s > 0))
      fail("tier '", t.name, "': TTFT target ", t.ttft_s * 1e3, " ms must be positive");
    if (!(std::isfinite(t.tpot_s) && t.tpot_s > 0))
      fail("tier '", t.name, "': TPOT target ", t.tpot_s * 1e3, " ms must be positive");
  }
}

int SloTiers::find(const std::string& name) const {
  if (name.empty()) return 0;
  for (size_t i = 0; i < tiers_.size(); ++i)
    if (tiers_[i].name == name) return int(i);
  std::string known;
  for (const auto& t : tiers_) known += (known.empty() ? "" : ", ") + t.name;
  fail("unknown tier '", text_excerpt(name, 64), "' (known: ", known, ")");
}

int SloTiers::background() const {
  for (size_t i = 0; i < tiers_.size(); ++i)
    if (tiers_[i].background) return int(i);
  return -1;
}

std::string SloTiers::to_string() const {
  std::string s;
  for (const auto& t : tiers_) {
    if (!s.empty()) s += ",";
    s += t.name + "=";
    if (t.background)
      s += "background";
    else
      s += cat(t.ttft_s * 1e3, "/", t.tpot_s * 1e3);
  }
  return s;
}

nlohmann::json SloTiers::to_json() const {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& t : tiers_) {
    if (t.background)
      a.push_back({{"name", t.name}, {"background", true}});
    else
      a.push_back({{"name", t.name}, {"ttft_ms", t.ttft_s * 1e3}, {"tpot_ms", t.tpot_s * 1e3}});
  }
  return a;
}

SloTiers tiers_from_json(const nlohmann::json& j0, const std::string& where) {
  const nlohmann::json& j = j0.is_object() && j0.contains("tiers") ? j0.at("tiers") : j0;
  if (!j.is_array()) fail(where, ": expected an array of tiers (or {\"tiers\": [...]})");
  std::vector<SloTier> out;
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("name") || !e.at("name").is_string())
      fail(where, ": every tier needs a \"name\" string");
    SloTier t;
    t.name = e.at("name").get<std::string>();
    t.background = e.value("background", false);
    if (!t.background) {
      for (const char* k : {"ttft_ms", "tpot_ms"})
        if (!e.contains(k) || !e.at(k).is_number()) fail(where, ": tier '", t.name, "' needs a number \"", k, "\"");
      t.ttft_s = e.at("ttft_ms").get<double>() * 1e-3;
      t.tpot_s = e.at("tpot_ms").get<double>() * 1e-3;
    }
    out.push_back(t);
  }
  return SloTiers(std::move(out));
}

std::vector<double> parse_tier_mix(const SloTiers& tiers, const std::string& mix) {
  std::vector<double> w(tiers.size(), 0.0);
  if (w.empty()) return w;
  if (trim(mix).empty()) {
    w[0] = 1;
    return w;
  }
  std::stringstream ss(mix);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) fail("tier mix item '", item, "' is not NAME:WEIGHT");
    const int t = tiers.find(trim(item.substr(0, colon)));
    double x = 0;
    try {
      x = std::stod(item.substr(colon + 1));
    } catch (const std::exception&) {
      fail("tier mix item '", item, "': the weight is not a number");
    }
    if (!(x > 0) || !std::isfinite(x)) fail("tier mix item '", item, "': the weight must be positive");
    w[size_t(t)] = x;
  }
  return w;
}

std::vector<int> assign_tiers(size_t n, const std::vector<double>& weights) {
  std::vector<int> out(n, -1);
  double total = 0;
  for (double x : weights) total += x;
  if (weights.empty() || !(total > 0)) return out;
  std::vector<double> credit(weights.size(), 0.0);
  for (size_t i = 0; i < n; ++i) {
    size_t best = 0;
    for (size_t k = 0; k < credit.size(); ++k) {
      credit[k] += weights[k];
      if (credit[k] > credit[best]) best = k;
    }
    credit[best] -= total;
    out[i] = int(best);
  }
  return out;
}

SloTiers parse_tiers(const std::string& spec) {
  std::error_code ec;
  if (std::filesystem::exists(spec, ec)) {
    // A tier file: a regular file of at most 1 MiB (a FIFO or /dev/zero is refused unread).
    const std::string text = read_text_file(spec, size_t(1) << 20, "tier file");
    const std::string t = trim(text);
    if (!t.empty() && (t[0] == '[' || t[0] == '{')) {
      const nlohmann::json j = parse_json_bounded(text, spec, JsonLimits{size_t(1) << 20, 8});
      return tiers_from_json(j, spec);
    }
    return parse_text(text);
  }
  return parse_text(spec);
}

}  // namespace loom::cluster
