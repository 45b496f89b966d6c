#include "hyperoffload/report/internal/svg.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

}  // namespace hyperoffload::internal
