#include "hyperoffload/report/internal/svg.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace hyperoffload::internal {

std::string svg_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

double nice_step(double range, int target) {
  const double raw = range / target;
  if (!(raw >= std::numeric_limits<double>::min())) return std::max(raw, std::numeric_limits<double>::denorm_min());
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double normalized = raw / magnitude;
  const double factor = normalized < 1.5 ? 1 : normalized < 3 ? 2 : normalized < 7 ? 5 : 10;
  return factor * magnitude;
}

void append_y_grid(std::string& svg, const PlotBox& box, double y_max, double y_step) {
  for (double v = 0.0; v <= y_max + y_step / 2; v += y_step) {
    const double y = box.bottom - v / y_max * box.height();
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>\n",
                       box.left, y, box.right, y);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n", box.left - 6, y + 4, v);
  }
}

void append_axes(std::string& svg, const PlotBox& box, std::string_view x_title, std::string_view y_title,
                 double y_title_gap_px) {
  svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\"/>\n",
                     box.left, box.top, box.bottom);
  svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"black\"/>\n",
                     box.left, box.bottom, box.right);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", box.left + box.width() / 2,
                     box.bottom + 38, x_title);
  svg += fmt::format(
      "<text x=\"{0:.1f}\" y=\"{1:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 {0:.1f} {1:.1f})\">{2}</text>\n",
      box.left - y_title_gap_px, box.top + box.height() / 2, y_title);
}

}  // namespace hyperoffload::internal
