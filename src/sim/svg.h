// A minimal SVG plot writer for the simulator's figures (latency CDFs, throughput, plan per step,
// Pareto frontiers): one plot area with 5 ticks per axis, polylines, markers and a legend.
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace loom::sim {

struct Svg {
  std::ostringstream os;
  double w = 720, h = 420, l = 70, rgt = 20, top = 30, bot = 50;
  Svg(const std::string& title) {
    os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
       << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
       << "<text x=\"" << w / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">" << esc(title) << "</text>\n";
  }
  // Text as XML character data: &, < and > escaped.
  static std::string esc(const std::string& t) {
    std::string o;
    for (char c : t) o += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
    return o;
  }
  double px(double fx) const { return l + fx * (w - l - rgt); }
  double py(double fy) const { return h - bot - fy * (h - top - bot); }
  void axes(const std::string& xl, const std::string& yl, double x0, double x1, double y0, double y1, bool logx,
            bool logy = false) {
    os << "<rect x=\"" << l << "\" y=\"" << top << "\" width=\"" << w - l - rgt << "\" height=\"" << h - top - bot
       << "\" fill=\"none\" stroke=\"black\"/>\n";
    for (int i = 0; i <= 4; ++i) {
      const double f = i / 4.0;
      const double xv = logx ? std::pow(10, std::log10(x0) + f * (std::log10(x1) - std::log10(x0))) : x0 + f * (x1 - x0);
      os << "<text x=\"" << px(f) << "\" y=\"" << h - bot + 16 << "\" text-anchor=\"middle\">" << fmt(xv) << "</text>\n";
      const double yv = logy ? std::pow(10, std::log10(y0) + f * (std::log10(y1) - std::log10(y0))) : y0 + f * (y1 - y0);
      os << "<text x=\"" << l - 6 << "\" y=\"" << py(f) + 4 << "\" text-anchor=\"end\">" << fmt(yv)
         << "</text>\n";
    }
    os << "<text x=\"" << w / 2 << "\" y=\"" << h - 12 << "\" text-anchor=\"middle\">" << esc(xl) << "</text>\n";
    os << "<text x=\"16\" y=\"" << h / 2 << "\" transform=\"rotate(-90 16 " << h / 2 << ")\" text-anchor=\"middle\">"
       << esc(yl) << "</text>\n";
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
  void legend(int i, const std::string& text, const std::string& color) {
    os << "<text x=\"" << l + 10 << "\" y=\"" << top + 16 + 14 * i << "\" fill=\"" << color << "\">" << esc(text)
       << "</text>\n";
  }
  std::string done() {
    os << "</svg>\n";
    return os.str();
  }
};


}  // namespace loom::sim
