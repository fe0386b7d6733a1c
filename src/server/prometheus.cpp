#include "server/prometheus.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace loom::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 1; i < bounds_.size(); ++i) LOOM_CHECK(bounds_[i] > bounds_[i - 1], "bucket bounds must increase");
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;  // le: v <= bound falls in that bucket
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string* out, const std::string& name, const std::string& help,
                       const std::string& labels) const {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  const std::string sep = labels.empty() ? "" : ",";
  int64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? prom_number(bounds_[i]) : "+Inf";
    *out += name + "_bucket{" + labels + sep + "le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  *out += name + "_sum" + braces + " " + prom_number(sum_) + "\n";
  *out += name + "_count" + braces + " " + std::to_string(count_) + "\n";
}

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

std::string prom_escape(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

std::string prom_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(int64_t(v));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace loom::server
