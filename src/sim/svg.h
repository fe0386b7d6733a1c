// A minimal SVG plot writer for the simulator's figures (latency CDFs, throughput, plan over time,
// Pareto frontiers, simulated vs paper): one plot area with round ticks (1, 2 or 5 x 10^k steps on
// linear axes, decades on log axes) and light grid lines, a title, axis labels with units, and a
// legend in the right margin, outside the plot area, so it never covers data.
//
// Callers map data to the unit square themselves (fx, fy in [0, 1] over the ranges given to
// axes()); px/py turn those into pixels.
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace loom::sim {

// Round tick values inside [lo, hi] (linear): the step is 1, 2 or 5 x 10^k giving 3 to 7 ticks.
inline std::vector<double> nice_ticks(double lo, double hi) {
  std::vector<double> out;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag * 10;
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  const double eps = step * 1e-9;
  for (double v = std::ceil((lo - eps) / step) * step; v <= hi + eps; v += step) out.push_back(std::abs(v) < eps ? 0 : v);
  return out;
}

// Tick values of a log axis over [lo, hi] (> 0): the powers of 10 inside it, with 2 and 5 times
// them when it spans fewer than two decades.
inline std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> out;
  if (!(lo > 0) || !(hi > lo)) return {lo};
  const bool fine = std::log10(hi / lo) < 2;
  for (int e = int(std::floor(std::log10(lo))); e <= int(std::ceil(std::log10(hi))); ++e)
    for (double m : {1.0, 2.0, 5.0}) {
      if (m != 1.0 && !fine) continue;
      const double v = m * std::pow(10, e);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push_back(v);
    }
  if (out.size() < 2) out = {lo, hi};
  return out;
}

struct Svg {
  std::ostringstream os;
  double w = 860, h = 420, l = 70, rgt = 190, top = 30, bot = 50;
  // `height` and `left` (the margin for y labels) for plots with many named rows.
  explicit Svg(const std::string& title, double height = 420, double left = 70) : h(height), l(left) {
    os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
       << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
       << "<text x=\"" << (l + w - rgt) / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">" << esc(title)
       << "</text>\n";
  }
  // Text as XML character data: &, < and > escaped.
  static std::string esc(const std::string& t) {
    std::string o;
    for (char c : t) o += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
    return o;
  }
  double px(double fx) const { return l + fx * (w - l - rgt); }
  double py(double fy) const { return h - bot - fy * (h - top - bot); }
  // The frame, round ticks with grid lines, and the axis labels (give units in them).
  void axes(const std::string& xl, const std::string& yl, double x0, double x1, double y0, double y1, bool logx,
            bool logy = false) {
    os << "<rect x=\"" << l << "\" y=\"" << top << "\" width=\"" << w - l - rgt << "\" height=\"" << h - top - bot
       << "\" fill=\"none\" stroke=\"black\"/>\n";
    auto frac = [](double v, double a, double b, bool lg) {
      return lg ? (std::log10(v) - std::log10(a)) / (std::log10(b) - std::log10(a)) : (v - a) / (b - a);
    };
    if (x1 > x0)
      for (double v : logx ? log_ticks(x0, x1) : nice_ticks(x0, x1)) {
        const double x = px(frac(v, x0, x1, logx));
        os << "<line x1=\"" << x << "\" y1=\"" << top << "\" x2=\"" << x << "\" y2=\"" << h - bot
           << "\" stroke=\"#e5e5e5\"/>\n<text x=\"" << x << "\" y=\"" << h - bot + 16 << "\" text-anchor=\"middle\">"
           << fmt(v) << "</text>\n";
      }
    if (y1 > y0)
      for (double v : logy ? log_ticks(y0, y1) : nice_ticks(y0, y1)) {
        const double y = py(frac(v, y0, y1, logy));
        os << "<line x1=\"" << l << "\" y1=\"" << y << "\" x2=\"" << w - rgt << "\" y2=\"" << y
           << "\" stroke=\"#e5e5e5\"/>\n<text x=\"" << l - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
           << fmt(v) << "</text>\n";
      }
    xlabel(xl);
    os << "<text x=\"16\" y=\"" << h / 2 << "\" transform=\"rotate(-90 16 " << h / 2 << ")\" text-anchor=\"middle\">"
       << esc(yl) << "</text>\n";
  }
  void xlabel(const std::string& xl) {
    os << "<text x=\"" << (l + w - rgt) / 2 << "\" y=\"" << h - 12 << "\" text-anchor=\"middle\">" << esc(xl)
       << "</text>\n";
  }
  static std::string fmt(double v) {
    std::ostringstream s;
    s.precision(v != 0 && (std::abs(v) < 0.01 || std::abs(v) >= 1e5) ? 2 : 4);
    s << v;
    return s.str();
  }
  void polyline(const std::vector<std::pair<double, double>>& pts, const std::string& color) {
    os << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
    for (const auto& [x, y] : pts) os << px(x) << "," << py(y) << " ";
    os << "\"/>\n";
  }
  void dots(const std::vector<std::pair<double, double>>& pts, const std::string& color) {
    for (const auto& [x, y] : pts) os << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"3\" fill=\"" << color << "\"/>\n";
  }
  // Legend entry i in the right margin (outside the plot area).
  void legend(int i, const std::string& text, const std::string& color) {
    const double x = w - rgt + 12, y = top + 10 + 16 * i;
    os << "<rect x=\"" << x << "\" y=\"" << y - 4 << "\" width=\"14\" height=\"4\" fill=\"" << color << "\"/>\n"
       << "<text x=\"" << x + 20 << "\" y=\"" << y + 1 << "\">" << esc(text.size() > 26 ? text.substr(0, 25) + "~" : text)
       << "</text>\n";
  }
  std::string done() {
    os << "</svg>\n";
    return os.str();
  }
};

}  // namespace loom::sim
