#include "core/parse_number.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/json_bounded.h"

namespace loom {

namespace {

std::string bound_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e18) return cat(int64_t(v));
  return cat(v);
}

}  // namespace

std::string range_text(double lo, double hi) { return cat("[", bound_text(lo), ", ", bound_text(hi), "]"); }

int64_t parse_int(std::string_view text, const std::string& what, int64_t lo, int64_t hi) {
  const std::string s(text.substr(0, 64));
  char* end = nullptr;
  errno = 0;
  const long long v = text.size() <= 64 && !s.empty() && !std::isspace(static_cast<unsigned char>(s[0]))
                          ? std::strtoll(s.c_str(), &end, 10)
                          : 0;
  if (end == nullptr || end == s.c_str() || *end != '\0')
    fail(what, " '", text_excerpt(text, 32), "' is not an integer");
  if (errno == ERANGE || v < lo || v > hi)
    fail(what, " ", text_excerpt(text, 32), " is out of range ", range_text(double(lo), double(hi)));
  return v;
}

double parse_double(std::string_view text, const std::string& what, double lo, double hi) {
  const std::string s(text.substr(0, 64));
  char* end = nullptr;
  errno = 0;
  const double v = text.size() <= 64 && !s.empty() && !std::isspace(static_cast<unsigned char>(s[0]))
                       ? std::strtod(s.c_str(), &end)
                       : 0;
  if (end == nullptr || end == s.c_str() || *end != '\0') fail(what, " '", text_excerpt(text, 32), "' is not a number");
  if (!std::isfinite(v)) fail(what, " ", text_excerpt(text, 32), " is not finite");
  if (errno == ERANGE && v != 0) fail(what, " ", text_excerpt(text, 32), " is out of range ", range_text(lo, hi));
  if (v < lo || v > hi) fail(what, " ", text_excerpt(text, 32), " is out of range ", range_text(lo, hi));
  return v;
}

std::string human_bytes(int64_t bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes);
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 5) v /= 1024.0, ++u;
  if (u == 0) return std::to_string(bytes) + " bytes";
  char buf[48];
  std::snprintf(buf, sizeof buf, v == double(int64_t(v)) ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace loom
